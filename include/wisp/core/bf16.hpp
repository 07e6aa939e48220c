// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `wisp::bf16`: bfloat16 storage (the upper half of an IEEE binary32) with the two
/// conversions every part of wisp uses (kernels, host references, the lossless compression of
/// BF16 weights), so the host and the device turn the same floats into the same bits.
///
/// C++20 has no bfloat16 type and CUDA's `__nv_bfloat16` does not exist for a host compiler, so
/// wisp carries the bits. The layout equals `__nv_bfloat16`'s (a kernel may reinterpret a
/// `const wisp::bf16*` as `const __nv_bfloat16*`) and a BF16 tensor's little-endian bytes on
/// disk (safetensors) are an array of `bf16` on a little-endian host.
/// @code
/// wisp::bf16 h = wisp::to_bf16(1.5f);      // round to nearest even
/// float f = wisp::to_float(h);              // exact: 1.5f
/// @endcode
#pragma once

#include <wisp/core/config.hpp>

#include <bit>
#include <cstdint>
#include <type_traits>

namespace wisp {

/// @brief A bfloat16 value as its 16 bits. Trivially copyable; `==` compares bits.
struct bf16 {
  std::uint16_t bits = 0;

  friend constexpr bool operator==(const bf16&, const bf16&) = default;
};
static_assert(sizeof(bf16) == 2 && std::is_trivially_copyable_v<bf16>);

namespace detail {

WISP_HOST_DEVICE inline std::uint32_t float_bits(float f) noexcept {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  return std::bit_cast<std::uint32_t>(f);
#endif
}

WISP_HOST_DEVICE inline float bits_float(std::uint32_t u) noexcept {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  return std::bit_cast<float>(u);
#endif
}

}  // namespace detail

/// The float with the same value (exact). O(1).
WISP_HOST_DEVICE inline float to_float(bf16 x) noexcept {
  return detail::bits_float(static_cast<std::uint32_t>(x.bits) << 16);
}

/// `f` rounded to the nearest bfloat16, ties to even (as `__float2bfloat16_rn` and
/// `torch.Tensor.to(torch.bfloat16)`); a NaN stays a (quiet) NaN with its sign; infinities and
/// overflow follow IEEE rounding. O(1), integer arithmetic only: the same bits on host and device.
WISP_HOST_DEVICE inline bf16 to_bf16(float f) noexcept {
  const std::uint32_t u = detail::float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    return bf16{static_cast<std::uint16_t>((u >> 16) | 0x0040u)};
  }
  return bf16{static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}

}  // namespace wisp
