// SPDX-License-Identifier: Apache-2.0
// The arithmetic of the benchmark's GEMV fused-MoE kernel (gemv_moe.cuh) as host-safe rules. One
// warp computes one dot product of a weight row: lane `l` sums the 8-value chunks l, l + 32, ...
// (one 16-byte load each, 8 fused multiply-adds in index order), then the 32 lane sums are added
// in the butterfly order of `__shfl_xor_sync`. Per position: `act[i] = swiglu(gate_i . x,
// up_i . x)`, `y[o] = down_o . act`; per token: `out[o] = sum_j w_j y_j[o]` (fmas in position
// order, visible positions only). `gemv_moe_host` runs exactly this on the host, so the GPU test
// compares the kernel with it bit for bit; it differs from `wisp::reference_fused_moe` (one fma
// chain per dot product) only by the order of the sums.
#pragma once

#include <wisp/core/error.hpp>
#include <wisp/core/topk.hpp>
#include <wisp/kernel/bf16.hpp>
#include <wisp/kernel/fused_moe.hpp>
#include <wisp/kernel/reference_moe.hpp>
#include <wisp/kernel/swiglu.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace wisp::bench {

inline constexpr std::int32_t gemv_lanes = 32;  ///< lanes per dot product (one warp)
inline constexpr std::int32_t gemv_chunk = 8;   ///< bf16 values per 16-byte load

/// @brief Lane `lane`'s share of `w . x` over `n` values (`n % 8 == 0`): the chunks `lane, lane
/// + 32, ...`, each 8 fmas in index order, from 0.
WISP_HOST_DEVICE inline float gemv_lane_dot(const bf16* w, const float* x, std::int32_t n,
                                            std::int32_t lane) noexcept {
  float acc = 0.0f;
  for (std::int32_t c = lane; c < n / gemv_chunk; c += gemv_lanes) {
    for (std::int32_t e = c * gemv_chunk; e < (c + 1) * gemv_chunk; ++e) {
      acc = wisp::fma_rn(to_float(w[e]), x[e], acc);
    }
  }
  return acc;
}

/// The sum of 32 lane values in the order `__shfl_xor_sync` butterflies add them (offsets 16, 8,
/// 4, 2, 1; every lane ends with the same bits).
[[nodiscard]] inline float gemv_butterfly_sum(std::array<float, gemv_lanes> v) noexcept {
  for (std::int32_t offset = gemv_lanes / 2; offset > 0; offset /= 2) {
    std::array<float, gemv_lanes> next{};
    for (std::int32_t l = 0; l < gemv_lanes; ++l) {
      next[static_cast<std::size_t>(l)] = wisp::detail::add_rn(
          v[static_cast<std::size_t>(l)], v[static_cast<std::size_t>(l ^ offset)]);
    }
    v = next;
  }
  return v[0];
}

/// `w . x` over `n` values as one warp of the kernel computes it.
[[nodiscard]] inline float gemv_dot(const bf16* w, const float* x, std::int32_t n) noexcept {
  std::array<float, gemv_lanes> lanes{};
  for (std::int32_t l = 0; l < gemv_lanes; ++l) {
    lanes[static_cast<std::size_t>(l)] = gemv_lane_dot(w, x, n, l);
  }
  return gemv_butterfly_sum(lanes);
}

/// @brief Checks what the kernel needs beyond `check_swiglu_moe_args`: `H` and `I` multiples of
/// 8, and rows 16-byte aligned (base and stride), so every chunk is one aligned 16-byte load.
/// @throws wisp::logic_error naming the value.
template <class Id>
void check_gemv_moe_args(const char* where, const basic_fused_moe_args<bf16, Id>& a,
                         const swiglu_shape& shape) {
  check_swiglu_moe_args(where, a, shape);
  WISP_EXPECTS(shape.hidden % gemv_chunk == 0 && shape.intermediate % gemv_chunk == 0, where,
               ": hidden ", shape.hidden, " and intermediate ", shape.intermediate,
               " must be multiples of ", gemv_chunk);
  WISP_EXPECTS(a.experts.rows == 0 || (reinterpret_cast<std::uintptr_t>(a.experts.base) % 16 == 0 &&
                                       a.experts.row_stride % 16 == 0),
               where, ": expert rows must be 16-byte aligned (stride ", a.experts.row_stride, ")");
}

/// @brief The kernel's arithmetic on the host (see the file comment): a `fused_moe_kernel` over
/// host memory. O(tokens x k x H x I) per call; owns its scratch; one thread at a time.
class gemv_moe_host {
 public:
  explicit gemv_moe_host(swiglu_shape shape) : shape_(shape) { shape_.validate(); }

  /// @throws wisp::logic_error as `check_gemv_moe_args` (nothing written).
  template <topk_id Id>
  void operator()(const basic_fused_moe_args<bf16, Id>& a) {
    check_gemv_moe_args("gemv_moe_host", a, shape_);
    const auto h = static_cast<std::size_t>(shape_.hidden);
    const auto in = static_cast<std::size_t>(shape_.intermediate);
    const auto k = static_cast<std::size_t>(a.top_k);
    x_.resize(h);
    act_.resize(in);
    y_.resize(k * h);
    for (std::size_t t = 0; t < static_cast<std::size_t>(a.tokens); ++t) {
      for (std::size_t i = 0; i < h; ++i) {
        x_[i] = to_float(a.hidden[t * h + i]);
      }
      for (std::size_t j = 0; j < k; ++j) {
        const std::int32_t row = wisp::visible_row(a.expert_map.data(), a.expert_map.size(),
                                                   a.experts.rows, a.topk_ids[t * k + j]);
        if (row < 0) {
          continue;
        }
        const auto* w = reinterpret_cast<const bf16*>(a.experts.row(static_cast<std::size_t>(row)));
        for (std::size_t i = 0; i < in; ++i) {
          act_[i] = swiglu(gemv_dot(w + i * h, x_.data(), shape_.hidden),
                           gemv_dot(w + (in + i) * h, x_.data(), shape_.hidden));
        }
        for (std::size_t o = 0; o < h; ++o) {
          y_[j * h + o] = gemv_dot(w + 2 * in * h + o * in, act_.data(), shape_.intermediate);
        }
      }
      for (std::size_t o = 0; o < h; ++o) {
        float acc = 0.0f;
        for (std::size_t j = 0; j < k; ++j) {
          const std::size_t pos = t * k + j;
          if (wisp::visible_row(a.expert_map.data(), a.expert_map.size(), a.experts.rows,
                                a.topk_ids[pos]) >= 0) {
            acc = wisp::fma_rn(a.topk_weights[pos], y_[j * h + o], acc);
          }
        }
        a.out[t * h + o] = to_bf16(acc);
      }
    }
  }

 private:
  swiglu_shape shape_;
  std::vector<float> x_, act_, y_;
};
static_assert(fused_moe_kernel<gemv_moe_host, basic_fused_moe_args<bf16>>);

}  // namespace wisp::bench
