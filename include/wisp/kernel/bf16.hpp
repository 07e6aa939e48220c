// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Activations of a kernel as `float` or `wisp::bf16`: `wisp::bf16` itself and its two
/// conversions live in core (`<wisp/core/bf16.hpp>`, included here), this header adds what a
/// kernel written over its activation type needs.
/// @code
/// template <class Act> Act scaled(Act x, float s) {
///   return wisp::activation_from_float<Act>(wisp::to_float(x) * s);   // float or wisp::bf16
/// }
/// @endcode
#pragma once

#include <wisp/core/bf16.hpp>
#include <wisp/core/config.hpp>

#include <type_traits>

namespace wisp {

/// Identity: lets kernels written over an activation type read `float` activations too.
WISP_HOST_DEVICE inline float to_float(float x) noexcept {
  return x;
}

/// `f` as an activation of type `T` (`float`: unchanged; `bf16`: `to_bf16`). O(1).
template <class T>
WISP_HOST_DEVICE T activation_from_float(float f) noexcept {
  if constexpr (std::is_same_v<T, bf16>) {
    return to_bf16(f);
  } else {
    static_assert(std::is_same_v<T, float>, "activations are float or wisp::bf16");
    return f;
  }
}

}  // namespace wisp
