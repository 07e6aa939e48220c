// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Internal: little-endian binary writer and reader with a running CRC-32 and the byte
/// offset of every field, for the predictor table format.
#pragma once

#include <wisp/core/detail/crc32.hpp>
#include <wisp/core/detail/little_endian.hpp>
#include <wisp/core/error.hpp>

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <istream>
#include <ostream>
#include <span>
#include <string>

namespace wisp::detail {

/// Writes fixed-width little-endian fields and keeps the CRC-32 of everything written.
class binary_writer {
 public:
  explicit binary_writer(std::ostream& out) : out_(out) {}

  void u32(std::uint32_t v) { put(v, 4); }
  void i32(std::int32_t v) { put(static_cast<std::uint32_t>(v), 4); }
  void u64(std::uint64_t v) { put(v, 8); }
  void f32(float v) { put(std::bit_cast<std::uint32_t>(v), 4); }
  void f64(double v) { put(std::bit_cast<std::uint64_t>(v), 8); }
  void bytes(std::span<const std::uint8_t> b) {
    crc_ = detail::crc32_update(crc_, b);
    out_.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
  /// Writes the CRC-32 of everything written so far (not itself included).
  void finish() {
    const std::uint32_t crc = crc_;
    put(crc, 4);
  }

 private:
  void put(std::uint64_t v, int width) {
    std::array<std::uint8_t, 8> b{};
    store_le(b.data(), v, width);
    bytes(std::span<const std::uint8_t>(b.data(), static_cast<std::size_t>(width)));
  }

  std::ostream& out_;
  std::uint32_t crc_ = 0;
};

/// Reads what `binary_writer` wrote; every failure is a `wisp::format_error` at its byte offset,
/// prefixed with `what` (the format's name).
class binary_reader {
 public:
  binary_reader(std::istream& in, std::string what) : in_(in), what_(std::move(what)) {}

  std::uint32_t u32(const char* field) { return static_cast<std::uint32_t>(get(4, field)); }
  std::int32_t i32(const char* field) { return static_cast<std::int32_t>(u32(field)); }
  std::uint64_t u64(const char* field) { return get(8, field); }
  float f32(const char* field) { return std::bit_cast<float>(u32(field)); }
  double f64(const char* field) { return std::bit_cast<double>(get(8, field)); }
  void bytes(std::span<std::uint8_t> b, const char* field) {
    in_.read(reinterpret_cast<char*>(b.data()), static_cast<std::streamsize>(b.size()));
    if (static_cast<std::size_t>(in_.gcount()) != b.size()) {
      fail(offset_ + static_cast<std::uint64_t>(in_.gcount()), "truncated input in ", field);
    }
    crc_ = detail::crc32_update(crc_, b);
    offset_ += b.size();
  }
  /// Reads the stored CRC-32 and compares it with the CRC of everything read before it.
  void finish() {
    const std::uint32_t expected = crc_;
    const std::uint64_t at = offset_;
    const std::uint32_t stored = u32("checksum");
    if (stored != expected) {
      fail(at, "checksum mismatch (stored ", stored, ", computed ", expected, ")");
    }
  }
  /// Byte offset of the next field.
  [[nodiscard]] std::uint64_t offset() const noexcept { return offset_; }

  template <class... Parts>
  [[noreturn]] void fail(std::uint64_t at, const Parts&... parts) const {
    throw format_error(at, concat(what_, ": ", parts...));
  }

 private:
  std::uint64_t get(int width, const char* field) {
    std::array<std::uint8_t, 8> b{};
    bytes(std::span<std::uint8_t>(b.data(), static_cast<std::size_t>(width)), field);
    return load_le(b.data(), width);
  }

  std::istream& in_;
  std::string what_;
  std::uint64_t offset_ = 0;
  std::uint32_t crc_ = 0;
};

}  // namespace wisp::detail
