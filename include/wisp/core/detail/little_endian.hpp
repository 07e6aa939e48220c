// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Little-endian integer I/O, the byte order of every wisp file format (`.wtrace`,
/// `.wzbf`, `.wzar`, predictor tables) and of safetensors headers: loads and stores at any
/// alignment, fixed width (`load_le<T>`, `store_le<T>`: one memory access on little-endian hosts)
/// or a width known only at run time (`load_le(p, width)`, `append_le(out, v, width)`).
/// `WISP_HOST_DEVICE`, so a kernel reads the same bytes the same way.
#pragma once

#include <wisp/core/config.hpp>

#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace wisp::detail {

/// True when a `memcpy` of an integer gives its little-endian bytes (device code assembles the
/// bytes one by one: the target's byte order is not known to the host pass).
#if defined(__CUDA_ARCH__)
inline constexpr bool native_little_endian = false;
#else
inline constexpr bool native_little_endian = std::endian::native == std::endian::little;
#endif

/// The unsigned integer stored in the `width` (0..8) little-endian bytes at `p`. O(width).
[[nodiscard]] WISP_HOST_DEVICE constexpr std::uint64_t load_le(const std::uint8_t* p,
                                                               int width) noexcept {
  std::uint64_t v = 0;
  for (int i = 0; i < width; ++i) {
    v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  }
  return v;
}

/// Writes the low `width` (0..8) bytes of `v` at `p`, least significant first. O(width).
WISP_HOST_DEVICE constexpr void store_le(std::uint8_t* p, std::uint64_t v, int width) noexcept {
  for (int i = 0; i < width; ++i) {
    p[i] = static_cast<std::uint8_t>(v >> (8 * i));
  }
}

/// The `T` stored little-endian at `p` (any alignment). O(1).
template <std::unsigned_integral T>
[[nodiscard]] WISP_HOST_DEVICE T load_le(const std::uint8_t* p) noexcept {
  if constexpr (native_little_endian) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
  } else {
    return static_cast<T>(load_le(p, static_cast<int>(sizeof(T))));
  }
}

/// Writes `v` little-endian at `p` (any alignment). O(1).
template <std::unsigned_integral T>
WISP_HOST_DEVICE void store_le(std::uint8_t* p, T v) noexcept {
  if constexpr (native_little_endian) {
    std::memcpy(p, &v, sizeof(T));
  } else {
    store_le(p, static_cast<std::uint64_t>(v), static_cast<int>(sizeof(T)));
  }
}

/// Appends the low `width` (0..8) bytes of `v` to `out`, least significant first.
/// @throws std::bad_alloc.
inline void append_le(std::vector<std::uint8_t>& out, std::uint64_t v, int width) {
  const std::size_t at = out.size();
  out.resize(at + static_cast<std::size_t>(width));
  store_le(out.data() + at, v, width);
}

}  // namespace wisp::detail
