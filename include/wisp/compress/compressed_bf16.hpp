// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `compressed_bf16`: one BF16 tensor stored as a raw SM chunk (sign + mantissa, one byte
/// per element) and K independently compressed E-chunks (the exponent stream cut into K equal
/// shards), in a versioned, checksummed record (docs/formats.md, "`.wzbf` compressed BF16
/// tensor").
///
/// Every chunk has its own offset, size, coder and CRC-32 in the record's chunk table, so a
/// cache can keep the SM chunk and any subset of E-chunks in different places, verify and decode
/// each on its own (`decode_e_chunk`) and recover the elements of one shard without touching the
/// others. Shard j covers elements `[j*s, min(n, (j+1)*s))` with `s = ceil(n / K)`.
///
/// Bytes from outside (`parse`) are checked completely, CRCs included, before anything is
/// decoded; records made by `compress` are trusted and decoding them does not re-check CRCs.
/// Either way a defect can only ever raise `wisp::format_error`.
/// @code
/// wisp::compressed_bf16 z = wisp::compressed_bf16::compress(weights, wisp::huffman_coder{}, 8);
/// std::vector<std::uint8_t> file(z.bytes().begin(), z.bytes().end());   // write it anywhere
/// wisp::compressed_bf16 back = wisp::compressed_bf16::parse(std::move(file));
/// std::vector<wisp::bf16> out(back.elements());
/// back.decompress(out, wisp::core_coders());                           // == weights
/// @endcode
#pragma once

#include <wisp/compress/bf16.hpp>
#include <wisp/compress/exponent_coder.hpp>
#include <wisp/compress/huffman.hpp>
#include <wisp/core/bf16.hpp>
#include <wisp/core/config.hpp>
#include <wisp/core/detail/crc32.hpp>
#include <wisp/core/detail/little_endian.hpp>
#include <wisp/core/error.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace wisp {

/// Constants of the `.wzbf` record format.
namespace wzbf {
/// Signature: "WZBF" then CR LF SUB LF (detects text-mode newline translation).
inline constexpr std::array<std::uint8_t, 8> magic = {'W', 'Z', 'B', 'F', 0x0D, 0x0A, 0x1A, 0x0A};
/// The only version this reader understands.
inline constexpr std::uint32_t version = 1;
/// Fixed part of the header, before the chunk table.
inline constexpr std::size_t fixed_bytes = 32;
/// One chunk-table entry.
inline constexpr std::size_t entry_bytes = 24;
/// Most elements a record may hold.
inline constexpr std::uint64_t max_elements = std::uint64_t{1} << 48;
/// Most E-chunks a record may have (bounds the header a reader allocates).
inline constexpr std::uint32_t max_e_chunks = 65536;
/// Header size of a record with `k` E-chunks: fixed part, K + 1 entries, CRC-32.
[[nodiscard]] constexpr std::size_t header_bytes(std::uint32_t k) noexcept {
  return fixed_bytes + (std::size_t{k} + 1) * entry_bytes + 4;
}
}  // namespace wzbf

/// @brief Where one chunk of a record lies and what it holds.
struct chunk_ref {
  std::uint64_t offset = 0;        ///< of its stored bytes, from the start of the record
  std::uint64_t bytes = 0;         ///< stored size
  std::uint64_t first = 0;         ///< first element it covers
  std::uint64_t count = 0;         ///< elements it covers
  std::uint32_t crc = 0;           ///< CRC-32 of the stored bytes
  coder_id coder = coder_id::raw;  ///< raw for the SM chunk

  friend constexpr bool operator==(const chunk_ref&, const chunk_ref&) = default;
};

/// @brief Element range `[first, first + count)` of E-chunk `j` of `k` over `n` elements:
/// K equal shards of `ceil(n / k)` elements, the last ones shorter or empty. O(1).
[[nodiscard]] constexpr std::pair<std::uint64_t, std::uint64_t> e_chunk_range(
    std::uint64_t n, std::uint32_t k, std::uint32_t j) noexcept {
  const std::uint64_t shard = k == 0 ? 0 : (n + k - 1) / k;
  const std::uint64_t first = std::min<std::uint64_t>(n, shard * j);
  return {first, std::min<std::uint64_t>(n, first + shard) - first};
}

/// The coders every build has: raw and Huffman. Add zstd/lz4 from their optional headers.
[[nodiscard]] inline coder_set core_coders() {
  coder_set set;
  set.add(raw_coder{}).add(huffman_coder{});
  return set;
}

/// @brief Decodes E-chunk bytes `stored` described by `ref` into `exponents` (`ref.count` long).
/// Use it on chunks kept apart from their record; `verify` checks the CRC first (do so for bytes
/// that came from outside the process). A Huffman chunk takes its decode table from `tables`, so
/// a caller that decodes the chunks of one tensor with one cache builds the table once.
/// O(ref.count).
/// @throws wisp::logic_error on a wrong output size; wisp::format_error on a size or CRC mismatch,
/// an unknown coder, or bytes that are not the chunk's encoding.
inline void decode_e_chunk(const chunk_ref& ref, std::span<const std::uint8_t> stored,
                           std::span<std::uint8_t> exponents, const coder_set& coders,
                           huffman_table_cache& tables, bool verify = true) {
  WISP_EXPECTS(exponents.size() == ref.count, "decode_e_chunk: ", exponents.size(),
               " output bytes for a chunk of ", ref.count, " exponents");
  if (stored.size() != ref.bytes) {
    throw format_error("E-chunk of elements [" + std::to_string(ref.first) + ", " +
                       std::to_string(ref.first + ref.count) + ") should be " +
                       std::to_string(ref.bytes) + " bytes, got " + std::to_string(stored.size()));
  }
  if (verify && detail::crc32(stored) != ref.crc) {
    throw format_error("CRC-32 mismatch in the E-chunk of elements [" + std::to_string(ref.first) +
                       ", " + std::to_string(ref.first + ref.count) + ")");
  }
  const any_coder* coder = coders.find(ref.coder);
  if (coder == nullptr) {
    throw format_error("E-chunk coder " + std::to_string(static_cast<int>(ref.coder)) + " (" +
                       std::string(to_string(ref.coder)) +
                       ") is not available here; coders: " + coders.labels());
  }
  if (ref.coder == coder_id::huffman) {
    huffman_chunk(stored, ref.count, tables).decode(exponents);
    return;
  }
  coder->decode(stored, exponents);
}

/// @copydoc decode_e_chunk
/// (With a decode table of its own: use the other overload to decode many Huffman chunks.)
inline void decode_e_chunk(const chunk_ref& ref, std::span<const std::uint8_t> stored,
                           std::span<std::uint8_t> exponents, const coder_set& coders,
                           bool verify = true) {
  huffman_table_cache tables;
  decode_e_chunk(ref, stored, exponents, coders, tables, verify);
}

/// @brief A decoder's reusable memory: exponent scratch, grown to the largest E-chunk decoded,
/// and the Huffman decode table of the last code seen (`huffman_table_cache`). One per decoding
/// thread, reused across chunks and tensors: steady-state decoding then allocates nothing and
/// builds one table per tensor. Not thread-safe.
struct bf16_decode_scratch {
  std::vector<std::uint8_t> exponents;
  huffman_table_cache tables;
};

/// @brief One compressed BF16 tensor: the record's bytes and its parsed chunk table.
/// Move-only owner of the bytes; const member functions are thread-safe.
class compressed_bf16 {
 public:
  /// Compresses `values` with `coder` into `e_chunks` E-chunks. An E-chunk the coder would not
  /// make smaller is stored raw. O(n) plus the coder's cost.
  /// @throws wisp::logic_error if `e_chunks` is outside [1, 65536] or there are more than 2^48
  /// values.
  template <exponent_coder Coder>
  [[nodiscard]] static compressed_bf16 compress(std::span<const bf16> values, const Coder& coder,
                                                std::uint32_t e_chunks = 8) {
    WISP_EXPECTS(e_chunks >= 1 && e_chunks <= wzbf::max_e_chunks, "compressed_bf16: E-chunks ",
                 e_chunks, " is outside [1, ", wzbf::max_e_chunks, "]");
    const std::uint64_t n = values.size();
    WISP_EXPECTS(n <= wzbf::max_elements, "compressed_bf16: ", n, " elements exceed 2^48");
    compressed_bf16 z;
    z.elements_ = n;
    z.chunks_.resize(std::size_t{e_chunks} + 1);
    z.bytes_.assign(wzbf::header_bytes(e_chunks) + n, 0);
    std::vector<std::uint8_t> exponents(n);
    split_bf16(values, std::span<std::uint8_t>(z.bytes_).subspan(wzbf::header_bytes(e_chunks), n),
               exponents);
    z.chunks_[0] = {wzbf::header_bytes(e_chunks), n, 0, n, 0, coder_id::raw};
    std::vector<std::uint8_t> encoded;
    const auto chunk_coder = [&] {
      if constexpr (fittable_coder<Coder>) {
        return coder.fitted(exponents);  // one code for the tensor: one decode table
      } else {
        return coder;
      }
    }();
    for (std::uint32_t j = 0; j < e_chunks; ++j) {
      const auto [first, count] = e_chunk_range(n, e_chunks, j);
      const std::span<const std::uint8_t> symbols(exponents.data() + first, count);
      encoded.clear();
      chunk_coder.encode(symbols, encoded);
      coder_id id = coder.id();
      if (encoded.size() >= count && id != coder_id::raw) {
        encoded.assign(symbols.begin(), symbols.end());
        id = coder_id::raw;
      }
      z.chunks_[j + 1] = {z.bytes_.size(), encoded.size(), first, count, 0, id};
      z.bytes_.insert(z.bytes_.end(), encoded.begin(), encoded.end());
    }
    for (chunk_ref& c : z.chunks_) {
      c.crc = detail::crc32(z.chunk_bytes(c));
    }
    z.write_header();
    return z;
  }

  /// Parses and fully verifies a record (header, chunk table, every CRC). The record must span
  /// all of `bytes`. O(size). @throws wisp::format_error with the byte offset of the defect.
  [[nodiscard]] static compressed_bf16 parse(std::vector<std::uint8_t> bytes) {
    compressed_bf16 z;
    const std::size_t size = bytes.size();
    auto fail = [](std::uint64_t at, const std::string& what) {
      throw format_error(at, ".wzbf: " + what);
    };
    if (size < 8 || !std::equal(wzbf::magic.begin(), wzbf::magic.end(), bytes.begin())) {
      fail(0, "not a compressed BF16 record (bad signature)");
    }
    if (size < wzbf::fixed_bytes) {
      fail(size, "truncated header (" + std::to_string(size) + " bytes)");
    }
    const std::uint32_t ver = get_u32(bytes, 8);
    if (ver != wzbf::version) {
      fail(8, "unsupported version " + std::to_string(ver));
    }
    const std::uint64_t n = get_u64(bytes, 16);
    const std::uint32_t k = get_u32(bytes, 24);
    if (get_u32(bytes, 12) != 0 || get_u32(bytes, 28) != 0) {
      fail(get_u32(bytes, 12) != 0 ? 12 : 28, "reserved field is not zero");
    }
    if (k < 1 || k > wzbf::max_e_chunks) {
      fail(24, "E-chunk count " + std::to_string(k) + " is outside [1, 65536]");
    }
    const std::size_t header = wzbf::header_bytes(k);
    if (size < header) {
      fail(size, "truncated chunk table (" + std::to_string(size) + " of " +
                     std::to_string(header) + " header bytes)");
    }
    if (detail::crc32(std::span<const std::uint8_t>(bytes.data(), header - 4)) !=
        get_u32(bytes, header - 4)) {
      fail(header - 4, "header checksum mismatch");
    }
    if (n > wzbf::max_elements || n > size - header) {
      fail(16, "element count " + std::to_string(n) + " exceeds the record's " +
                   std::to_string(size - header) + " payload bytes");
    }
    z.elements_ = n;
    z.chunks_.resize(std::size_t{k} + 1);
    std::uint64_t expected_offset = header;
    for (std::uint32_t c = 0; c <= k; ++c) {
      const std::size_t at = wzbf::fixed_bytes + std::size_t{c} * wzbf::entry_bytes;
      chunk_ref& r = z.chunks_[c];
      r.offset = get_u64(bytes, at);
      r.bytes = get_u64(bytes, at + 8);
      r.crc = get_u32(bytes, at + 16);
      r.coder = static_cast<coder_id>(bytes[at + 20]);
      if (bytes[at + 21] != 0 || bytes[at + 22] != 0 || bytes[at + 23] != 0) {
        fail(at + 21, "reserved chunk-table bytes are not zero");
      }
      if (c == 0) {
        r.first = 0;
        r.count = n;
        if (r.coder != coder_id::raw || r.bytes != n) {
          fail(at, "the SM chunk must be raw and hold one byte per element");
        }
      } else {
        std::tie(r.first, r.count) = e_chunk_range(n, k, c - 1);
      }
      if (r.offset != expected_offset || r.bytes > size - r.offset) {
        fail(at, "chunk " + std::to_string(c) + " at offset " + std::to_string(r.offset) + " of " +
                     std::to_string(r.bytes) + " bytes does not follow the previous chunk within " +
                     std::to_string(size) + " bytes");
      }
      expected_offset = r.offset + r.bytes;
    }
    if (expected_offset != size) {
      fail(expected_offset, std::to_string(size - expected_offset) + " bytes after the last chunk");
    }
    z.bytes_ = std::move(bytes);
    for (std::uint32_t c = 0; c <= k; ++c) {
      const chunk_ref& r = z.chunks_[c];
      if (detail::crc32(z.chunk_bytes(r)) != r.crc) {
        fail(r.offset, "chunk " + std::to_string(c) + " checksum mismatch");
      }
    }
    return z;
  }

  /// Elements of the tensor.
  [[nodiscard]] std::uint64_t elements() const noexcept { return elements_; }
  /// Number of E-chunks, K.
  [[nodiscard]] std::uint32_t e_chunks() const noexcept {
    return static_cast<std::uint32_t>(chunks_.size() - 1);
  }
  /// The SM chunk (raw, `elements()` bytes).
  [[nodiscard]] const chunk_ref& sm_chunk() const noexcept { return chunks_[0]; }
  /// E-chunk `j`. @throws wisp::logic_error if `j >= e_chunks()`.
  [[nodiscard]] const chunk_ref& e_chunk(std::uint32_t j) const {
    WISP_EXPECTS(j < e_chunks(), "compressed_bf16: E-chunk ", j, " of ", e_chunks());
    return chunks_[std::size_t{j} + 1];
  }
  /// The stored bytes of a chunk of this record.
  [[nodiscard]] std::span<const std::uint8_t> chunk_bytes(const chunk_ref& c) const noexcept {
    return std::span<const std::uint8_t>(bytes_).subspan(c.offset, c.bytes);
  }
  /// The whole record, ready to be written out.
  [[nodiscard]] std::span<const std::uint8_t> bytes() const noexcept { return bytes_; }
  /// Bytes of the SM chunk plus every E-chunk (what crosses a link; the header excluded).
  [[nodiscard]] std::uint64_t payload_bytes() const noexcept {
    return bytes_.size() - chunks_[0].offset;
  }

  /// Decodes E-chunk `j` and recovers its elements into `out[first, first + count)`, with
  /// `scratch` grown to the chunk. O(count). Shards may be decoded by different threads (each
  /// with a scratch of its own) into one `out`.
  /// @throws wisp::logic_error on a wrong output size; wisp::format_error if the chunk does not
  /// decode.
  void decompress_chunk(std::uint32_t j, std::span<bf16> out, bf16_decode_scratch& scratch,
                        const coder_set& coders) const {
    const chunk_ref& r = e_chunk(j);
    WISP_EXPECTS(out.size() == elements_, "compressed_bf16::decompress_chunk: output of ",
                 out.size(), " for ", elements_, " elements");
    if (scratch.exponents.size() < r.count) {
      scratch.exponents.resize(r.count);
    }
    const std::span<std::uint8_t> ex = std::span(scratch.exponents).first(r.count);
    const std::uint8_t* sm = bytes_.data() + chunks_[0].offset + r.first;
    if (r.coder == coder_id::huffman && coders.find(coder_id::huffman) != nullptr) {
      // Recover each group of sub-streams while its exponents are still in L1.
      huffman_chunk(chunk_bytes(r), r.count, scratch.tables)
          .decode_groups(ex, [&](std::size_t at, std::size_t n) {
            detail::recover_bf16_unchecked(sm + at, ex.data() + at, out.data() + r.first + at, n);
          });
      return;
    }
    decode_e_chunk(r, chunk_bytes(r), ex, coders, scratch.tables, /*verify=*/false);
    detail::recover_bf16_unchecked(sm, ex.data(), out.data() + r.first, r.count);
  }

  /// Decodes the whole tensor into `out` (`elements()` long), E-chunk by E-chunk, with
  /// `scratch` grown to the largest E-chunk. O(n).
  /// @throws wisp::logic_error on a wrong output size; wisp::format_error if a chunk does not
  /// decode (then `out` holds an unspecified mix of decoded and old values).
  void decompress(std::span<bf16> out, const coder_set& coders,
                  bf16_decode_scratch& scratch) const {
    WISP_EXPECTS(out.size() == elements_, "compressed_bf16::decompress: output of ", out.size(),
                 " for ", elements_, " elements");
    for (std::uint32_t j = 0; j < e_chunks(); ++j) {
      decompress_chunk(j, out, scratch, coders);
    }
  }
  /// @copydoc decompress
  void decompress(std::span<bf16> out, const coder_set& coders) const {
    bf16_decode_scratch scratch;
    decompress(out, coders, scratch);
  }

 private:
  compressed_bf16() = default;

  static std::uint32_t get_u32(const std::vector<std::uint8_t>& b, std::size_t at) noexcept {
    return detail::load_le<std::uint32_t>(b.data() + at);
  }
  static std::uint64_t get_u64(const std::vector<std::uint8_t>& b, std::size_t at) noexcept {
    return detail::load_le<std::uint64_t>(b.data() + at);
  }
  void put(std::size_t at, std::uint64_t v, int width) noexcept {
    detail::store_le(bytes_.data() + at, v, width);
  }
  void write_header() noexcept {
    std::copy(wzbf::magic.begin(), wzbf::magic.end(), bytes_.begin());
    put(8, wzbf::version, 4);
    put(16, elements_, 8);
    put(24, e_chunks(), 4);
    for (std::size_t c = 0; c < chunks_.size(); ++c) {
      const std::size_t at = wzbf::fixed_bytes + c * wzbf::entry_bytes;
      put(at, chunks_[c].offset, 8);
      put(at + 8, chunks_[c].bytes, 8);
      put(at + 16, chunks_[c].crc, 4);
      put(at + 20, static_cast<std::uint8_t>(chunks_[c].coder), 1);
    }
    const std::size_t header = wzbf::header_bytes(e_chunks());
    put(header - 4, detail::crc32(std::span<const std::uint8_t>(bytes_.data(), header - 4)), 4);
  }

  std::uint64_t elements_ = 0;
  std::vector<chunk_ref> chunks_;  // [0] = SM, [1 + j] = E-chunk j
  std::vector<std::uint8_t> bytes_;
};

}  // namespace wisp
