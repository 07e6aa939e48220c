// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `huffman_coder`: canonical, length-limited Huffman over the 256 exponent symbols, with a
/// table-driven decoder that is `WISP_HOST_DEVICE`, so the same code decodes on the CPU and in a
/// CUDA kernel.
///
/// Encoded layout (all integers little-endian; the symbol count comes from the container):
/// - 0 symbols: nothing.
/// - one distinct symbol: `00 <symbol>` (2 bytes).
/// - otherwise: `01`, the first and the last symbol with a code `f <= l` (u8 each), then
///   `ceil(c / 2)` bytes of 4-bit code lengths of the `c = l - f + 1` symbols from `f` (symbol
///   `f + 2i` in the low nibble of byte i, a last odd high nibble 0; 0 = no code, at most
///   `huffman_max_bits`; the code must be complete), the u32 sub-stream size `B` (symbols), `S =
///   ceil(n / B)` u32 end offsets of the sub-streams relative to the data, then the data. Exponents
///   of real weights span about 30 values, so the lengths take ~15 bytes. Sub-stream j holds
///   symbols `[jB, min(n, (j+1)B))` as canonical codes written least-significant bit first; each
///   ends on a byte boundary with zero padding bits.
///
/// Independent sub-streams are what makes decoding parallel: the host decodes four of them in
/// lockstep (four independent dependency chains), a GPU gives each its own thread
/// (`huffman_lane.hpp`). Each table lookup decodes up to six symbols at once (the whole 11-bit
/// window, `huffman_code.hpp`), which at ~2.6 bits per exponent is 3-4 symbols per lookup.
/// @code
/// wisp::huffman_coder h;
/// std::vector<std::uint8_t> enc;
/// h.encode(exponents, enc);
/// std::vector<std::uint8_t> back(exponents.size());
/// h.decode(enc, back);                                  // == exponents
/// @endcode
#pragma once

#include <wisp/compress/exponent_coder.hpp>
#include <wisp/compress/huffman_code.hpp>
#include <wisp/compress/huffman_lane.hpp>
#include <wisp/core/config.hpp>
#include <wisp/core/detail/little_endian.hpp>
#include <wisp/core/error.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace wisp {

/// Default symbols per sub-stream: 4 bytes of offset per 4096 symbols (0.008 bits per symbol).
inline constexpr std::uint32_t huffman_default_block = 4096;

namespace detail {
inline constexpr std::uint32_t huffman_max_block = std::uint32_t{1} << 24;
}  // namespace detail

/// @brief A parsed Huffman E-chunk: its decode table, sub-stream bounds and data, ready to decode
/// all or some of its sub-streams (on the host here; a kernel can take `table()` and the offsets).
/// Construction validates everything that decoding relies on. It views the encoded bytes: keep
/// them alive while it is used. Thread safety: const calls may run concurrently.
class huffman_chunk {
 public:
  /// Parses `encoded`, the encoding of `symbols` symbols, with its own decode table.
  /// O(2^11 + sub-streams).
  /// @throws wisp::format_error naming the problem and its byte offset within `encoded`.
  huffman_chunk(std::span<const std::uint8_t> encoded, std::size_t symbols) : symbols_(symbols) {
    huffman_table_cache own;
    parse(encoded, own);
  }

  /// Parses `encoded` like the other constructor, taking its decode table from `tables` (built
  /// there on a miss): O(sub-streams) when the chunk's code is the last one `tables` saw.
  /// @throws wisp::format_error as the other constructor.
  huffman_chunk(std::span<const std::uint8_t> encoded, std::size_t symbols,
                huffman_table_cache& tables)
      : symbols_(symbols) {
    parse(encoded, tables);
  }

  /// Sub-streams (0 for an empty or single-symbol chunk).
  [[nodiscard]] std::size_t substreams() const noexcept { return ends_.size(); }
  /// Symbols per sub-stream (the last may hold fewer).
  [[nodiscard]] std::uint32_t block() const noexcept { return block_; }
  /// The decode table (valid when `substreams() > 0`).
  [[nodiscard]] const huffman_table& table() const noexcept { return *table_; }

  /// Decodes every symbol into `out` (exactly `symbols` long), four sub-streams in lockstep.
  /// O(symbols). @throws wisp::logic_error on a wrong `out` size, wisp::format_error if a
  /// sub-stream is not exactly the encoding of its symbols.
  void decode(std::span<std::uint8_t> out) const {
    WISP_EXPECTS(out.size() == symbols_, "huffman_chunk::decode: ", out.size(),
                 " output bytes for ", symbols_, " symbols");
    decode_groups(out, [](std::size_t, std::size_t) {});
  }

  /// Decodes into `out` like `decode`, calling `consume(first, count)` after each group of up to
  /// four sub-streams, while those symbols are still in L1: the container recovers BF16 values
  /// there instead of streaming all exponents out and back.
  template <class Consume>
  void decode_groups(std::span<std::uint8_t> out, Consume&& consume) const {
    WISP_EXPECTS(out.size() == symbols_, "huffman_chunk::decode_groups: ", out.size(),
                 " output bytes for ", symbols_, " symbols");
    if (ends_.empty()) {
      if (!out.empty()) {  // an empty span may have a null data()
        std::memset(out.data(), single_, out.size());
      }
      consume(std::size_t{0}, out.size());
      return;
    }
    constexpr std::size_t lanes = 4;
    std::size_t j = 0;
    for (; j + lanes <= ends_.size(); j += lanes) {
      // Four named lanes (not an array) so that all four states stay in registers.
      huffman_lane a = make_lane(j, out);
      huffman_lane b = make_lane(j + 1, out);
      huffman_lane c = make_lane(j + 2, out);
      huffman_lane d = make_lane(j + 3, out);
      // Rounds of steps that no lane can overrun: a step writes at most 24 symbols and reads at
      // most 7 bytes, so the checks leave the inner loop (lanes advance at different rates).
      auto safe_steps = [&](const huffman_lane& l) -> std::size_t {
        const auto room = static_cast<std::size_t>(l.out_end - l.out);
        const std::size_t by_out = room < 32 ? 0 : (room - 32) / 24 + 1;
        const std::size_t by_in = l.next + 15 > l.limit ? 0 : (l.limit - l.next - 15) / 7 + 1;
        return std::min(by_out, by_in);
      };
      for (;;) {
        const std::size_t steps =
            std::min({safe_steps(a), safe_steps(b), safe_steps(c), safe_steps(d)});
        if (steps == 0) {
          break;
        }
        for (std::size_t k = 0; k < steps; ++k) {
          a.step4<false>(*table_);
          b.step4<false>(*table_);
          c.step4<false>(*table_);
          d.step4<false>(*table_);
        }
      }
      a.run(*table_);
      b.run(*table_);
      c.run(*table_);
      d.run(*table_);
      check_end(a, j);
      check_end(b, j + 1);
      check_end(c, j + 2);
      check_end(d, j + 3);
      consume(j * block_, std::min<std::size_t>(symbols_, (j + lanes) * block_) - j * block_);
    }
    for (; j < ends_.size(); ++j) {
      huffman_lane lane = make_lane(j, out);
      lane.run(*table_);
      check_end(lane, j);
      consume(j * block_, std::min<std::size_t>(symbols_, (j + 1) * block_) - j * block_);
    }
  }

 private:
  // Reads the header, offsets and data bounds of `encoded` (see the constructors).
  void parse(std::span<const std::uint8_t> encoded, huffman_table_cache& tables) {
    if (symbols_ == 0) {
      expect(encoded.empty(), 0, "an empty Huffman E-chunk must have no bytes");
      return;
    }
    expect(!encoded.empty(), 0, "Huffman E-chunk is empty");
    if (encoded[0] == 0) {
      expect(encoded.size() == 2, 0, "single-symbol Huffman E-chunk must be 2 bytes");
      single_ = encoded[1];
      return;
    }
    expect(encoded[0] == 1, 0, "unknown Huffman E-chunk mode " + std::to_string(encoded[0]));
    expect(encoded.size() >= 3, 0, "truncated Huffman header");
    const std::size_t first = encoded[1];
    expect(first <= encoded[2], 1,
           "Huffman code lengths from symbol " + std::to_string(first) + " to " +
               std::to_string(encoded[2]) + " are out of order");
    const std::size_t count = std::size_t{encoded[2]} + 1 - first;
    const std::size_t lengths_bytes = (count + 1) / 2;
    const std::size_t block_at = 3 + lengths_bytes;
    expect(encoded.size() >= block_at + 4, 0, "truncated Huffman header");
    huffman_lengths lengths{};
    for (std::size_t i = 0; i < count; ++i) {
      const std::uint8_t packed = encoded[3 + i / 2];
      lengths[first + i] = static_cast<std::uint8_t>(i % 2 == 0 ? packed & 0x0Fu : packed >> 4);
    }
    expect(count % 2 == 0 || (encoded[block_at - 1] >> 4) == 0, block_at - 1,
           "unused nibble of the Huffman code lengths is not zero");
    table_ = tables.get(lengths);
    expect(table_ != nullptr, 3,
           "Huffman code lengths do not form a complete code of 2+ symbols up to 11 bits");
    block_ = detail::load_le<std::uint32_t>(encoded.data() + block_at);
    expect(block_ >= 1 && block_ <= detail::huffman_max_block, block_at,
           "Huffman sub-stream size " + std::to_string(block_) + " is outside [1, 2^24]");
    const std::size_t streams = (symbols_ + block_ - 1) / block_;
    const std::size_t offsets_at = block_at + 4;
    expect((encoded.size() - offsets_at) / 4 >= streams, offsets_at,
           "truncated Huffman sub-stream offsets");
    data_ = encoded.subspan(offsets_at + 4 * streams);
    ends_.resize(streams);
    std::uint32_t previous = 0;
    for (std::size_t j = 0; j < streams; ++j) {
      ends_[j] = detail::load_le<std::uint32_t>(encoded.data() + offsets_at + 4 * j);
      expect(ends_[j] >= previous && ends_[j] <= data_.size(), offsets_at + 4 * j,
             "Huffman sub-stream end " + std::to_string(ends_[j]) + " is out of order or past " +
                 "the data (" + std::to_string(data_.size()) + " bytes)");
      previous = ends_[j];
    }
    expect(previous == data_.size(), offsets_at + 4 * (streams - 1),
           "Huffman data has " + std::to_string(data_.size() - previous) + " trailing bytes");
  }

  static void expect(bool ok, std::size_t offset, const std::string& what) {
    if (!ok) [[unlikely]] {
      throw format_error(offset, what);
    }
  }
  [[nodiscard]] std::size_t begin_of(std::size_t j) const noexcept {
    return j == 0 ? 0 : ends_[j - 1];
  }
  [[nodiscard]] huffman_lane make_lane(std::size_t j, std::span<std::uint8_t> out) const {
    const std::size_t first = j * block_;
    const std::size_t last = std::min(symbols_, first + block_);
    return huffman_lane(data_.data(), data_.size(), begin_of(j), out.data() + first,
                        out.data() + last);
  }
  void check_end(const huffman_lane& lane, std::size_t j) const {
    expect(
        lane.ended_cleanly(ends_[j] - begin_of(j)), format_error::no_offset,
        "Huffman sub-stream " + std::to_string(j) + " does not decode to exactly its " + "symbols");
  }

  std::shared_ptr<const huffman_table> table_;  // 16 KiB, shared with the caller's cache
  std::size_t symbols_ = 0;
  std::uint32_t block_ = 0;
  std::uint8_t single_ = 0;
  std::span<const std::uint8_t> data_;
  std::vector<std::uint32_t> ends_;
};

namespace detail {
/// The Huffman encoding of `symbols` with sub-streams of `block` symbols, appended to `sink`;
/// with the code `code` when given (it must cover every symbol), else the chunk's own.
inline void huffman_encode(std::span<const std::uint8_t> symbols, std::uint32_t block,
                           const huffman_lengths* code, std::vector<std::uint8_t>& sink) {
  WISP_EXPECTS(block >= 1 && block <= huffman_max_block, "huffman_coder: block ", block,
               " is outside [1, 2^24]");
  if (symbols.empty()) {
    return;
  }
  std::array<std::uint64_t, 256> counts{};
  for (const std::uint8_t s : symbols) {
    ++counts[s];
  }
  if (std::count_if(counts.begin(), counts.end(), [](std::uint64_t c) { return c != 0; }) == 1) {
    sink.push_back(0);
    sink.push_back(symbols[0]);
    return;
  }
  const huffman_lengths lengths = code != nullptr ? *code : huffman_code_lengths(counts);
  for (std::size_t x = 0; x < 256; ++x) {
    WISP_EXPECTS(counts[x] == 0 || lengths[x] != 0, "huffman_coder: symbol ", x,
                 " has no code in the fitted code lengths");
  }
  const std::array<std::uint16_t, 256> codes = huffman_codes(lengths);
  std::size_t first = 0;
  while (lengths[first] == 0) {
    ++first;
  }
  std::size_t last = 255;
  while (lengths[last] == 0) {
    --last;
  }
  const std::size_t count = last + 1 - first;
  sink.push_back(1);
  sink.push_back(static_cast<std::uint8_t>(first));
  sink.push_back(static_cast<std::uint8_t>(last));
  for (std::size_t i = 0; i < count; i += 2) {
    const std::uint8_t high = i + 1 < count ? lengths[first + i + 1] : 0;
    sink.push_back(static_cast<std::uint8_t>(lengths[first + i] | (high << 4)));
  }
  append_le(sink, block, 4);
  const std::size_t streams = (symbols.size() + block - 1) / block;
  const std::size_t offsets_at = sink.size();
  sink.resize(sink.size() + 4 * streams);
  const std::size_t data_at = sink.size();
  for (std::size_t j = 0; j < streams; ++j) {
    std::uint64_t acc = 0;
    unsigned filled = 0;
    const std::size_t last = std::min(symbols.size(), (j + 1) * block);
    for (std::size_t i = j * block; i < last; ++i) {
      acc |= static_cast<std::uint64_t>(codes[symbols[i]]) << filled;
      filled += lengths[symbols[i]];
      while (filled >= 8) {
        sink.push_back(static_cast<std::uint8_t>(acc));
        acc >>= 8;
        filled -= 8;
      }
    }
    if (filled > 0) {
      sink.push_back(static_cast<std::uint8_t>(acc));
    }
    const std::size_t end = sink.size() - data_at;
    WISP_EXPECTS(end <= 0xFFFFFFFFu, "huffman_coder: E-chunk data of ", end,
                 " bytes exceeds 4 GiB; use more E-chunks");
    store_le(sink.data() + offsets_at + 4 * j, end, 4);
  }
}
}  // namespace detail

/// @brief Canonical Huffman exponent coder (see the file comment for its layout). Stateless
/// apart from the sub-stream size; every call is thread-safe.
struct huffman_coder {
  /// Symbols per independently decodable sub-stream: smaller means more parallelism (GPU
  /// threads) and more offset bytes.
  std::uint32_t block = huffman_default_block;

  static constexpr std::string_view name = "huffman";
  [[nodiscard]] coder_id id() const noexcept { return coder_id::huffman; }
  /// "huffman", or "huffman-b<block>" for a sub-stream size other than the default.
  [[nodiscard]] std::string label() const {
    return block == huffman_default_block ? std::string(name) : "huffman-b" + std::to_string(block);
  }

  /// Appends the encoding of `symbols`, with a code fitted to them. O(n + 256 log 256).
  /// @throws wisp::logic_error if `block` is outside [1, 2^24] or a sub-stream would exceed 4 GiB.
  void encode(std::span<const std::uint8_t> symbols, std::vector<std::uint8_t>& sink) const {
    detail::huffman_encode(symbols, block, nullptr, sink);
  }

  /// Decodes exactly `out.size()` symbols from `encoded`. O(n).
  /// @throws wisp::format_error on any input that is not such an encoding.
  void decode(std::span<const std::uint8_t> encoded, std::span<std::uint8_t> out) const {
    huffman_chunk(encoded, out.size()).decode(out);
  }

  /// This coder with one code for all of `symbols` (a whole tensor's exponents), so that its
  /// E-chunks share a code and a decoder builds one table per tensor instead of one per chunk.
  /// Costs a little size when chunks differ (a tensor's chunks rarely do). O(n).
  [[nodiscard]] struct fitted_huffman_coder fitted(std::span<const std::uint8_t> symbols) const;
};
static_assert(exponent_coder<huffman_coder>);

/// @brief `huffman_coder` with one code for a whole stream, made by `huffman_coder::fitted`;
/// writes the same format.
struct fitted_huffman_coder {
  std::uint32_t block = huffman_default_block;
  std::shared_ptr<const huffman_lengths> code;  ///< null: each chunk gets its own

  static constexpr std::string_view name = "huffman";
  [[nodiscard]] coder_id id() const noexcept { return coder_id::huffman; }
  [[nodiscard]] std::string label() const { return huffman_coder{block}.label(); }
  /// @throws wisp::logic_error as `huffman_coder::encode`, or if a symbol has no code.
  void encode(std::span<const std::uint8_t> symbols, std::vector<std::uint8_t>& sink) const {
    detail::huffman_encode(symbols, block, code.get(), sink);
  }
  void decode(std::span<const std::uint8_t> encoded, std::span<std::uint8_t> out) const {
    huffman_coder{block}.decode(encoded, out);
  }
};
static_assert(exponent_coder<fitted_huffman_coder>);

inline fitted_huffman_coder huffman_coder::fitted(std::span<const std::uint8_t> symbols) const {
  std::array<std::uint64_t, 256> counts{};
  for (const std::uint8_t x : symbols) {
    ++counts[x];
  }
  fitted_huffman_coder out{block, nullptr};
  if (std::count_if(counts.begin(), counts.end(), [](std::uint64_t c) { return c != 0; }) >= 2) {
    out.code = std::make_shared<const huffman_lengths>(detail::huffman_code_lengths(counts));
  }
  return out;
}
static_assert(fittable_coder<huffman_coder>);

}  // namespace wisp
