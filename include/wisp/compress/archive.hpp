// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `bf16_archive`: a whole file (a raw little-endian BF16 tensor, or a safetensors
/// checkpoint) as a sequence of named segments, each either kept raw or a `.wzbf` compressed
/// BF16 record, so that restoring it gives back the exact original bytes (docs/formats.md,
/// "`.wzar` archive"). This is what `wisp compress` writes and `wisp compress -d` reads.
///
/// `compress_file` cuts a safetensors file into its header, each tensor (BF16 ones compressed)
/// and any gap between tensors; any other file is one BF16 tensor. The whole file is held in
/// memory.
/// @code
/// std::vector<std::uint8_t> file = read("model.safetensors");
/// wisp::bf16_archive a = wisp::compress_file(file, wisp::huffman_coder{}, 8);
/// std::vector<std::uint8_t> packed = a.serialize();
/// assert(wisp::bf16_archive::parse(packed).restore(wisp::core_coders()) == file);
/// @endcode
#pragma once

#include <wisp/compress/compressed_bf16.hpp>
#include <wisp/compress/exponent_coder.hpp>
#include <wisp/compress/safetensors.hpp>
#include <wisp/core/bf16.hpp>
#include <wisp/core/config.hpp>
#include <wisp/core/detail/crc32.hpp>
#include <wisp/core/detail/little_endian.hpp>
#include <wisp/core/error.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace wisp {

/// Constants of the `.wzar` archive format.
namespace wzar {
/// Signature: "WZAR" then CR LF SUB LF.
inline constexpr std::array<std::uint8_t, 8> magic = {'W', 'Z', 'A', 'R', 0x0D, 0x0A, 0x1A, 0x0A};
/// The only version this reader understands.
inline constexpr std::uint32_t version = 1;
/// Archive header and segment descriptor sizes.
inline constexpr std::size_t header_bytes = 32;
inline constexpr std::size_t descriptor_bytes = 32;
/// Longest segment name.
inline constexpr std::uint32_t max_name = 65536;
}  // namespace wzar

/// @brief One segment of an archive: `original_bytes` of the file, kept raw or compressed.
struct archive_segment {
  std::string name;                       ///< tensor name, "__header__", "__gap__" or the file
  std::uint64_t original_bytes = 0;       ///< bytes it restores to
  std::vector<std::uint8_t> raw;          ///< the bytes, when not compressed
  std::optional<compressed_bf16> tensor;  ///< the record, when compressed (LE BF16 values)
};

/// @brief A file as raw and compressed segments; see the file comment. Move-only; const member
/// functions are thread-safe.
class bf16_archive {
 public:
  /// Appends a raw segment. O(bytes).
  void add_raw(std::string name, std::span<const std::uint8_t> bytes) {
    segments_.push_back({std::move(name), bytes.size(), {bytes.begin(), bytes.end()}, {}});
  }
  /// Appends a compressed BF16 segment (it restores to `2 * elements` little-endian bytes).
  void add_bf16(std::string name, compressed_bf16 tensor) {
    const std::uint64_t bytes = 2 * tensor.elements();
    segments_.push_back({std::move(name), bytes, {}, std::move(tensor)});
  }

  [[nodiscard]] std::span<const archive_segment> segments() const noexcept { return segments_; }
  /// Size of the original file.
  [[nodiscard]] std::uint64_t original_bytes() const noexcept {
    std::uint64_t n = 0;
    for (const archive_segment& s : segments_) {
      n += s.original_bytes;
    }
    return n;
  }

  /// The archive's bytes. O(size).
  /// @throws wisp::logic_error if a name is longer than 65,536 bytes.
  [[nodiscard]] std::vector<std::uint8_t> serialize() const {
    std::vector<std::uint8_t> out(wzar::header_bytes, 0);
    std::copy(wzar::magic.begin(), wzar::magic.end(), out.begin());
    put(out, 8, wzar::version, 4);
    WISP_EXPECTS(segments_.size() <= 0xFFFFFFFFu, "bf16_archive: ", segments_.size(),
                 " segments is more than 2^32 - 1");
    put(out, 12, segments_.size(), 4);
    put(out, 16, original_bytes(), 8);
    put(out, 28, detail::crc32(std::span(out).first(28)), 4);
    for (const archive_segment& s : segments_) {
      WISP_EXPECTS(s.name.size() <= wzar::max_name, "bf16_archive: segment name of ", s.name.size(),
                   " bytes is longer than ", wzar::max_name);
      const std::span<const std::uint8_t> stored = s.tensor ? s.tensor->bytes() : s.raw;
      const std::size_t at = out.size();
      out.resize(at + wzar::descriptor_bytes);
      out[at] = s.tensor ? 1 : 0;
      put(out, at + 4, s.name.size(), 4);
      put(out, at + 8, stored.size(), 8);
      put(out, at + 16, s.original_bytes, 8);
      std::uint32_t crc = detail::crc32(
          std::span(reinterpret_cast<const std::uint8_t*>(s.name.data()), s.name.size()));
      if (!s.tensor) {
        crc = detail::crc32_update(crc, stored);
      }
      put(out, at + 24, crc, 4);
      put(out, at + 28, detail::crc32(std::span(out).subspan(at, 28)), 4);
      out.insert(out.end(), s.name.begin(), s.name.end());
      out.insert(out.end(), stored.begin(), stored.end());
    }
    return out;
  }

  /// Parses and verifies an archive: every descriptor CRC, every raw segment's CRC, every
  /// record (`compressed_bf16::parse`), sizes consistent and nothing after the last segment.
  /// O(size). @throws wisp::format_error with the byte offset of the problem.
  [[nodiscard]] static bf16_archive parse(std::span<const std::uint8_t> bytes) {
    if (bytes.size() < 8 || !std::equal(wzar::magic.begin(), wzar::magic.end(), bytes.begin())) {
      fail(0, "not a wisp compressed archive (bad signature)");
    }
    if (bytes.size() < wzar::header_bytes) {
      fail(bytes.size(), "truncated header");
    }
    if (detail::crc32(bytes.first(28)) != u32(bytes, 28)) {
      fail(28, "header checksum mismatch");
    }
    if (u32(bytes, 8) != wzar::version) {
      fail(8, "unsupported version " + std::to_string(u32(bytes, 8)));
    }
    if (u32(bytes, 24) != 0) {
      fail(24, "reserved field is not zero");
    }
    const std::uint32_t count = u32(bytes, 12);
    const std::uint64_t total = u64(bytes, 16);
    bf16_archive a;
    std::size_t at = wzar::header_bytes;
    for (std::uint32_t i = 0; i < count; ++i) {
      at = a.parse_segment(bytes, at, i);
    }
    if (at != bytes.size()) {
      fail(at, std::to_string(bytes.size() - at) + " bytes after the last segment");
    }
    if (a.original_bytes() != total) {
      fail(16, "segments restore " + std::to_string(a.original_bytes()) + " bytes, the header " +
                   "says " + std::to_string(total));
    }
    return a;
  }

  /// The original file. O(size). @throws wisp::format_error if a record does not decode.
  [[nodiscard]] std::vector<std::uint8_t> restore(const coder_set& coders) const {
    std::vector<std::uint8_t> out;
    out.reserve(original_bytes());
    std::vector<bf16> values;
    bf16_decode_scratch scratch;
    for (const archive_segment& s : segments_) {
      if (!s.tensor) {
        out.insert(out.end(), s.raw.begin(), s.raw.end());
        continue;
      }
      values.resize(s.tensor->elements());
      s.tensor->decompress(values, coders, scratch);
      const std::size_t at = out.size();
      out.resize(at + 2 * values.size());
      for (std::size_t i = 0; i < values.size(); ++i) {  // little-endian whatever the host
        detail::store_le(out.data() + at + 2 * i, values[i].bits);
      }
    }
    return out;
  }

 private:
  static void put(std::vector<std::uint8_t>& out, std::size_t at, std::uint64_t v, int width) {
    detail::store_le(out.data() + at, v, width);
  }
  [[noreturn]] static void fail(std::uint64_t at, const std::string& what) {
    throw format_error(at, ".wzar: " + what);
  }
  static std::uint32_t u32(std::span<const std::uint8_t> bytes, std::size_t at) noexcept {
    return detail::load_le<std::uint32_t>(bytes.data() + at);
  }
  static std::uint64_t u64(std::span<const std::uint8_t> bytes, std::size_t at) noexcept {
    return detail::load_le<std::uint64_t>(bytes.data() + at);
  }

  // Parses segment `i`, whose descriptor is at `at`, and appends it; returns where the next
  // descriptor starts. @throws wisp::format_error as `parse`.
  std::size_t parse_segment(std::span<const std::uint8_t> bytes, std::size_t at, std::uint32_t i) {
    if (bytes.size() - at < wzar::descriptor_bytes) {
      fail(at, "truncated descriptor of segment " + std::to_string(i));
    }
    if (detail::crc32(bytes.subspan(at, 28)) != u32(bytes, at + 28)) {
      fail(at + 28, "descriptor checksum mismatch in segment " + std::to_string(i));
    }
    const std::uint8_t kind = bytes[at];
    const std::uint32_t name_bytes = u32(bytes, at + 4);
    const std::uint64_t stored = u64(bytes, at + 8);
    const std::uint64_t original = u64(bytes, at + 16);
    if (kind > 1 || bytes[at + 1] != 0 || bytes[at + 2] != 0 || bytes[at + 3] != 0) {
      fail(at, "segment " + std::to_string(i) + " has unknown kind " + std::to_string(kind));
    }
    if (name_bytes > wzar::max_name) {
      fail(at + 4, "segment name of " + std::to_string(name_bytes) + " bytes is too long");
    }
    const std::size_t data = at + wzar::descriptor_bytes;
    if (bytes.size() - data < name_bytes || bytes.size() - data - name_bytes < stored) {
      fail(at + 8, "segment " + std::to_string(i) + " runs past the end of the archive");
    }
    const std::span<const std::uint8_t> name = bytes.subspan(data, name_bytes);
    const std::span<const std::uint8_t> payload = bytes.subspan(data + name_bytes, stored);
    std::uint32_t crc = detail::crc32(name);
    if (kind == 0) {
      crc = detail::crc32_update(crc, payload);
    }
    if (crc != u32(bytes, at + 24)) {
      fail(at + 24, "segment " + std::to_string(i) + " checksum mismatch");
    }
    std::string segment_name(name.begin(), name.end());
    if (kind == 0) {
      if (stored != original) {
        fail(at + 16, "raw segment " + std::to_string(i) + " stores " + std::to_string(stored) +
                          " bytes for " + std::to_string(original));
      }
      add_raw(std::move(segment_name), payload);
    } else {
      compressed_bf16 t = [&] {
        try {
          return compressed_bf16::parse({payload.begin(), payload.end()});
        } catch (const format_error& e) {
          const std::uint64_t base = data + name_bytes;
          throw format_error(e.offset() == format_error::no_offset ? base : base + e.offset(),
                             "in segment " + std::to_string(i) + ": " + e.problem());
        }
      }();
      if (2 * t.elements() != original) {
        fail(at + 16, "compressed segment " + std::to_string(i) + " restores to " +
                          std::to_string(2 * t.elements()) + " bytes, not " +
                          std::to_string(original));
      }
      add_bf16(std::move(segment_name), std::move(t));
    }
    return data + name_bytes + static_cast<std::size_t>(stored);
  }
  std::vector<archive_segment> segments_;
};

/// BF16 values of `bytes` read as little-endian 16-bit words (a last odd byte is ignored). O(n).
[[nodiscard]] inline std::vector<bf16> bf16_from_le_bytes(std::span<const std::uint8_t> bytes) {
  std::vector<bf16> values(bytes.size() / 2);
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i].bits = detail::load_le<std::uint16_t>(bytes.data() + 2 * i);
  }
  return values;
}

/// @brief Compresses a file: a safetensors checkpoint (`safetensors` true) segment by segment,
/// BF16 tensors with `coder` into `e_chunks` E-chunks and everything else raw; otherwise the
/// whole file as one little-endian BF16 tensor named `name`. O(size).
/// @throws wisp::format_error if the safetensors header is malformed or a raw BF16 file has an
/// odd size; wisp::logic_error on a bad `e_chunks`.
template <exponent_coder Coder>
[[nodiscard]] bf16_archive compress_file(std::span<const std::uint8_t> file, const Coder& coder,
                                         std::uint32_t e_chunks, bool safetensors,
                                         const std::string& name = "tensor") {
  bf16_archive a;
  if (!safetensors) {
    if (file.size() % 2 != 0) {
      throw format_error(file.size() - 1, "a raw BF16 file must have an even size, got " +
                                              std::to_string(file.size()) + " bytes");
    }
    a.add_bf16(name, compressed_bf16::compress(bf16_from_le_bytes(file), coder, e_chunks));
    return a;
  }
  const safetensors_header h = parse_safetensors_header(file);
  a.add_raw("__header__", file.first(static_cast<std::size_t>(h.data_begin)));
  std::uint64_t at = h.data_begin;
  for (const safetensors_tensor& t : h.tensors) {
    if (t.begin > at) {
      a.add_raw("__gap__", file.subspan(at, t.begin - at));
    }
    const std::span<const std::uint8_t> bytes = file.subspan(t.begin, t.end - t.begin);
    if (t.dtype == "BF16") {
      a.add_bf16(t.name, compressed_bf16::compress(bf16_from_le_bytes(bytes), coder, e_chunks));
    } else {
      a.add_raw(t.name, bytes);
    }
    at = t.end;
  }
  if (at < file.size()) {
    a.add_raw("__gap__", file.subspan(at));
  }
  return a;
}

}  // namespace wisp
