// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The element rules of wisp's reference fused MoE: a SwiGLU expert in bf16 with fp32
/// accumulation, written once as `WISP_HOST_DEVICE` functions that give the **same bits** on the
/// host and on a GPU.
///
/// An expert row holds three row-major bf16 matrices back to back: gate `[I x H]`, up `[I x H]`,
/// down `[H x I]` (`swiglu_shape`, the layout of the example engine's experts). For one token
/// with input `x` (H floats):
///
///     act[i] = silu(gate_i . x) * (up_i . x)        silu(g) = g / (1 + exp(-g))
///     y[o]   = down_o . act
///     out[o] = sum over the token's visible positions j, in order, of weight_j * y_j[o]
///
/// Every dot product and the sum over `j` are chains of fused multiply-adds in index order, and
/// `exp` is `detail::exp_portable` (fma, floor and ldexp only), so nothing depends on the
/// compiler contracting `a * b + c` or on the platform's `expf`: `reference_fused_moe` on the
/// host and `wisp::cuda::reference_fused_moe` on a GPU produce identical outputs, which is what
/// lets the GPU tests compare them with `==`.
/// @code
/// wisp::swiglu_shape shape{.hidden = 64, .intermediate = 32};
/// const wisp::bf16* row = ...;                      // shape.row_bytes() bytes
/// float a = wisp::swiglu_activation(row, x, shape, i);
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/kernel/bf16.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace wisp {

/// @brief Shape of one SwiGLU expert row: gate `[I x H]`, up `[I x H]`, down `[H x I]`, bf16.
struct swiglu_shape {
  std::int32_t hidden = 0;        ///< H: model width (the token's input and output size)
  std::int32_t intermediate = 0;  ///< I: the expert's FFN width

  /// @throws wisp::logic_error unless both sizes are >= 1.
  void validate() const {
    WISP_EXPECTS(hidden >= 1 && intermediate >= 1, "swiglu_shape: hidden ", hidden,
                 " and intermediate ", intermediate, " must both be >= 1");
  }
  /// bf16 values of one matrix (`H * I`).
  [[nodiscard]] WISP_HOST_DEVICE std::size_t matrix_values() const noexcept {
    return static_cast<std::size_t>(hidden) * static_cast<std::size_t>(intermediate);
  }
  /// Bytes of one expert row (`3 * H * I * 2`).
  [[nodiscard]] WISP_HOST_DEVICE std::size_t row_bytes() const noexcept {
    return 3 * matrix_values() * sizeof(bf16);
  }
};

/// `a * b + c` rounded once to nearest, on the host (`std::fma`) and the device (`__fmaf_rn`,
/// which nvcc never contracts or reorders): what wisp's kernels accumulate with, so that a
/// kernel written against it gives the same bits on both. O(1).
WISP_HOST_DEVICE inline float fma_rn(float a, float b, float c) noexcept {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

namespace detail {

// IEEE single-precision operations that no compiler may fuse or reorder: on the device the
// round-to-nearest intrinsics nvcc never contracts.
WISP_HOST_DEVICE inline float mul_rn(float a, float b) noexcept {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
WISP_HOST_DEVICE inline float add_rn(float a, float b) noexcept {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
WISP_HOST_DEVICE inline float div_rn(float a, float b) noexcept {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

/// @brief `exp(x)` from fma, floor and ldexp only: the same bits on every IEEE platform, host or
/// GPU (the platforms' own `expf` differ in the last bits). Relative error below 3e-7 on
/// `[-87, 88.7]` (checked against `std::exp` in tests/kernel). Results below `exp(-87)` flush to
/// 0 (no subnormals, whose rounding could differ); above `exp(88.7228)` it is `+inf`; NaN stays
/// NaN.
WISP_HOST_DEVICE inline float exp_portable(float x) noexcept {
  if (!(x == x)) {
    return x;
  }
  if (x > 88.7228f) {
    return bits_float(0x7f800000u);  // +inf
  }
  if (x < -87.0f) {
    return 0.0f;
  }
  // x = n ln2 + r, |r| <= ln2 / 2 (Cody-Waite: ln2_hi has few bits, so n * ln2_hi is exact).
  constexpr float log2e = 1.44269504088896341f;
  constexpr float ln2_hi = 0.693145751953125f;
  constexpr float ln2_lo = 1.42860682030941723e-6f;
#if defined(__CUDA_ARCH__)
  const float n = floorf(fma_rn(x, log2e, 0.5f));
#else
  const float n = std::floor(fma_rn(x, log2e, 0.5f));
#endif
  float r = fma_rn(-n, ln2_hi, x);
  r = fma_rn(-n, ln2_lo, r);
  // Taylor series of e^r to r^7 (truncation error < 6e-9 on |r| <= 0.347), Horner with fma.
  float p = 1.0f / 5040.0f;
  p = fma_rn(p, r, 1.0f / 720.0f);
  p = fma_rn(p, r, 1.0f / 120.0f);
  p = fma_rn(p, r, 1.0f / 24.0f);
  p = fma_rn(p, r, 1.0f / 6.0f);
  p = fma_rn(p, r, 0.5f);
  p = fma_rn(p, r, 1.0f);
  p = fma_rn(p, r, 1.0f);
#if defined(__CUDA_ARCH__)
  return ldexpf(p, static_cast<int>(n));
#else
  return std::ldexp(p, static_cast<int>(n));
#endif
}

}  // namespace detail

/// `sum_i w[i] * x[i]` for `i = 0, 1, ..., n - 1`, one fma per term from 0. O(n).
WISP_HOST_DEVICE inline float swiglu_dot(const bf16* w, const float* x, std::int32_t n) noexcept {
  float acc = 0.0f;
  for (std::int32_t i = 0; i < n; ++i) {
    acc = fma_rn(to_float(w[i]), x[i], acc);
  }
  return acc;
}

/// `silu(g) * u` with `silu(g) = g / (1 + exp(-g))`. O(1).
WISP_HOST_DEVICE inline float swiglu(float g, float u) noexcept {
  const float silu = detail::div_rn(g, detail::add_rn(1.0f, detail::exp_portable(-g)));
  return detail::mul_rn(silu, u);
}

/// `act[i]` of the expert in `row` for input `x` (`H` floats): `swiglu(gate_i . x, up_i . x)`.
/// O(H).
WISP_HOST_DEVICE inline float swiglu_activation(const bf16* row, const float* x,
                                                const swiglu_shape& shape,
                                                std::int32_t i) noexcept {
  const std::size_t h = static_cast<std::size_t>(shape.hidden);
  const bf16* gate = row + static_cast<std::size_t>(i) * h;
  const bf16* up = row + shape.matrix_values() + static_cast<std::size_t>(i) * h;
  return swiglu(swiglu_dot(gate, x, shape.hidden), swiglu_dot(up, x, shape.hidden));
}

/// `y[o]` of the expert in `row` for activations `act` (`I` floats): `down_o . act`. O(I).
WISP_HOST_DEVICE inline float swiglu_output(const bf16* row, const float* act,
                                            const swiglu_shape& shape, std::int32_t o) noexcept {
  const bf16* down = row + 2 * shape.matrix_values() +
                     static_cast<std::size_t>(o) * static_cast<std::size_t>(shape.intermediate);
  return swiglu_dot(down, act, shape.intermediate);
}

}  // namespace wisp
