// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief CRC-32 (IEEE 802.3 / zlib / PNG: reflected polynomial 0xEDB88320, initial value and
/// final xor 0xFFFFFFFF), table-driven, used as the `.wtrace` payload checksum.
/// `crc32("123456789") == 0xCBF43926`.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace wisp::detail {

inline constexpr std::array<std::uint32_t, 256> crc32_table = [] {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t n = 0; n < 256; ++n) {
    std::uint32_t c = n;
    for (int bit = 0; bit < 8; ++bit) {
      c = (c & 1u) != 0 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    }
    table[n] = c;
  }
  return table;
}();

/// @brief Incremental CRC-32: start with `crc32_update(0, first)`, continue with the returned
/// value. O(bytes), no allocation.
[[nodiscard]] constexpr std::uint32_t crc32_update(std::uint32_t crc,
                                                   std::span<const std::uint8_t> bytes) noexcept {
  crc = ~crc;
  for (const std::uint8_t b : bytes) {
    crc = crc32_table[(crc ^ b) & 0xFFu] ^ (crc >> 8);
  }
  return ~crc;
}

/// @brief CRC-32 of `bytes`.
[[nodiscard]] constexpr std::uint32_t crc32(std::span<const std::uint8_t> bytes) noexcept {
  return crc32_update(0, bytes);
}

}  // namespace wisp::detail
