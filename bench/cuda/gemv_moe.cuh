// SPDX-License-Identifier: Apache-2.0
// `gemv_fused_moe`: the benchmark's BF16 fused-MoE kernel for decode, one GEMV per routed expert,
// plugged into the data path through the `fused_moe_kernel` contract as an engine's own kernel
// would be. Three launches on the kernel's stream, none synchronising (capturable):
//   1. activations: one warp per (position, i) computes swiglu(gate_i . x, up_i . x) (a block is
//      8 rows of one position; the token's x staged in shared memory as floats);
//   2. outputs: one warp per (position, o) computes y[o] = down_o . act;
//   3. combine: one thread per (token, o) sums w_j y_j[o] over the visible positions.
// Weights are read once, with one 16-byte load per lane and chunk (gemv_moe.hpp gives the
// arithmetic, which `gemv_moe_host` repeats on the host bit for bit). A position whose expert is
// hidden (map -1) reads nothing and contributes nothing. nvcc only.
#pragma once

#include "gemv_moe.hpp"
#include "gpu_support.cuh"

#include <wisp/core/error.hpp>
#include <wisp/core/topk.hpp>
#include <wisp/cuda/runtime.cuh>
#include <wisp/kernel/bf16.hpp>
#include <wisp/kernel/fused_moe.hpp>
#include <wisp/kernel/swiglu.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace wisp::bench {

namespace detail {

inline constexpr unsigned gemv_warps = 8;  // rows per block
inline constexpr unsigned gemv_threads = gemv_warps * 32;

// What the per-token combine reads: the fp32 outputs of every position, and the routing.
template <class Id>
struct combine_params {
  const float* y = nullptr;  // [positions x H]
  const Id* ids = nullptr;
  const float* weights = nullptr;
  const std::int32_t* map = nullptr;
  std::size_t map_size = 0;
  std::size_t rows = 0;  // rows of the expert view (visibility)
  bf16* out = nullptr;
  std::int32_t tokens = 0;
  std::int32_t top_k = 0;
  std::int32_t hidden = 0;
};

template <class Id>
struct gemv_params {
  const bf16* hidden = nullptr;
  expert_tensor_view experts;
  float* act = nullptr;  // [positions x I]
  float* y = nullptr;    // [positions x H]
  swiglu_shape shape;
  combine_params<Id> combine;  // ids, weights, map, out
};

__device__ inline float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// The 8 fmas of one 16-byte chunk of bf16 weights against x[0, 8), in index order (the low half
// of each 32-bit word is the earlier value).
__device__ inline float chunk_fma(const uint4& w, const float* x, float acc) {
  const std::uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    acc = __fmaf_rn(__uint_as_float(words[q] << 16), x[2 * q], acc);
    acc = __fmaf_rn(__uint_as_float(words[q] & 0xffff0000u), x[2 * q + 1], acc);
  }
  return acc;
}

// Chunks a lane loads before it multiplies: every load of a batch is in flight at once (the
// scheduler need not hoist them), while the fmas keep gemv_lane_dot's order.
inline constexpr std::int32_t gemv_batch = 4;

// The dot products of `rows` weight rows with x, `gemv_lane_dot`'s share of lane `lane` each:
// chunks lane, lane + 32, ... in order, loaded `gemv_batch` at a time.
template <std::int32_t Rows>
__device__ inline void lane_dots16(const bf16* const (&w)[Rows], const float* x, std::int32_t n,
                                   std::int32_t lane, float (&acc)[Rows]) {
  const std::int32_t chunks = n / gemv_chunk;
  for (std::int32_t base = lane; base < chunks; base += gemv_batch * gemv_lanes) {
    uint4 v[Rows][gemv_batch];
#pragma unroll
    for (std::int32_t b = 0; b < gemv_batch; ++b) {
      const std::int32_t c = base + b * gemv_lanes;
#pragma unroll
      for (std::int32_t r = 0; r < Rows; ++r) {
        if (c < chunks) {
          v[r][b] = reinterpret_cast<const uint4*>(w[r])[c];
        }
      }
    }
#pragma unroll
    for (std::int32_t b = 0; b < gemv_batch; ++b) {
      const std::int32_t c = base + b * gemv_lanes;
#pragma unroll
      for (std::int32_t r = 0; r < Rows; ++r) {
        if (c < chunks) {
          acc[r] = chunk_fma(v[r][b], x + c * gemv_chunk, acc[r]);
        }
      }
    }
  }
}

template <class Id>
__device__ inline std::int32_t row_of(const combine_params<Id>& c, std::int32_t pos) {
  return wisp::visible_row(c.map, c.map_size, c.rows, c.ids[pos]);
}

template <class Id>
__global__ void __launch_bounds__(gemv_threads) gemv_act_kernel(gemv_params<Id> p) {
  extern __shared__ float gemv_x[];
  const auto pos = static_cast<std::int32_t>(blockIdx.y);
  const std::int32_t h = p.shape.hidden;
  const std::int32_t t = pos / p.combine.top_k;
  for (std::int32_t i = static_cast<std::int32_t>(threadIdx.x); i < h;
       i += static_cast<std::int32_t>(blockDim.x)) {
    gemv_x[i] = to_float(p.hidden[static_cast<std::size_t>(t) * h + i]);
  }
  __syncthreads();
  const std::int32_t row = row_of(p.combine, pos);  // the same in the whole block
  const auto warp = static_cast<std::int32_t>(threadIdx.x / 32);
  const auto lane = static_cast<std::int32_t>(threadIdx.x % 32);
  const std::int32_t i = static_cast<std::int32_t>(blockIdx.x * gemv_warps) + warp;
  if (row < 0 || i >= p.shape.intermediate) {
    return;
  }
  const auto* w = reinterpret_cast<const bf16*>(p.experts.row(static_cast<std::size_t>(row)));
  const bf16* gate = w + static_cast<std::size_t>(i) * h;
  const bf16* up = gate + p.shape.matrix_values();
  const bf16* const rows[2] = {gate, up};
  float dots[2] = {0.0f, 0.0f};
  lane_dots16(rows, gemv_x, h, lane, dots);
  float g = dots[0];
  float u = dots[1];
  g = warp_sum(g);
  u = warp_sum(u);
  if (lane == 0) {
    p.act[static_cast<std::size_t>(pos) * p.shape.intermediate + i] = swiglu(g, u);
  }
}

template <class Id>
__global__ void __launch_bounds__(gemv_threads) gemv_down_kernel(gemv_params<Id> p) {
  extern __shared__ float gemv_act[];
  const auto pos = static_cast<std::int32_t>(blockIdx.y);
  const std::int32_t row = row_of(p.combine, pos);  // the same in the whole block
  if (row < 0) {
    return;
  }
  const std::int32_t in = p.shape.intermediate;
  for (std::int32_t i = static_cast<std::int32_t>(threadIdx.x); i < in;
       i += static_cast<std::int32_t>(blockDim.x)) {
    gemv_act[i] = p.act[static_cast<std::size_t>(pos) * in + i];
  }
  __syncthreads();
  const auto lane = static_cast<std::int32_t>(threadIdx.x % 32);
  const std::int32_t o = static_cast<std::int32_t>(blockIdx.x * gemv_warps + threadIdx.x / 32);
  if (o >= p.shape.hidden) {
    return;
  }
  const auto* w = reinterpret_cast<const bf16*>(p.experts.row(static_cast<std::size_t>(row)));
  const bf16* down = w + 2 * p.shape.matrix_values() + static_cast<std::size_t>(o) * in;
  const bf16* const rows[1] = {down};
  float dot[1] = {0.0f};
  lane_dots16(rows, gemv_act, in, lane, dot);
  const float y = warp_sum(dot[0]);
  if (lane == 0) {
    p.y[static_cast<std::size_t>(pos) * p.shape.hidden + o] = y;
  }
}

template <class Id>
__global__ void combine_kernel(combine_params<Id> c) {
  const std::size_t n = static_cast<std::size_t>(c.tokens) * static_cast<std::size_t>(c.hidden);
  for (std::size_t idx = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const auto t = static_cast<std::int32_t>(idx / static_cast<std::size_t>(c.hidden));
    const auto o = static_cast<std::size_t>(idx % static_cast<std::size_t>(c.hidden));
    float acc = 0.0f;
    for (std::int32_t j = 0; j < c.top_k; ++j) {
      const std::int32_t pos = t * c.top_k + j;
      if (row_of(c, pos) >= 0) {
        acc = __fmaf_rn(c.weights[pos], c.y[static_cast<std::size_t>(pos) * c.hidden + o], acc);
      }
    }
    c.out[idx] = to_bf16(acc);
  }
}

template <class Id>
combine_params<Id> make_combine(const basic_fused_moe_args<bf16, Id>& a, const float* y) {
  return {y,
          a.topk_ids.data(),
          a.topk_weights.data(),
          a.expert_map.data(),
          a.expert_map.size(),
          a.experts.rows,
          a.out.data(),
          a.tokens,
          a.top_k,
          a.hidden_dim};
}

template <class Id>
void launch_combine(const combine_params<Id>& c, cudaStream_t stream) {
  const std::size_t n = static_cast<std::size_t>(c.tokens) * static_cast<std::size_t>(c.hidden);
  const std::size_t blocks = (n + 255) / 256;
  combine_kernel<<<static_cast<unsigned>(blocks > 4096 ? 4096 : blocks), 256, 0, stream>>>(c);
  WISP_CUDA_TRY(cudaGetLastError());
}

}  // namespace detail

/// @brief The GEMV fused-MoE kernel (see the file comment). Models `fused_moe_kernel` for
/// `basic_fused_moe_args<bf16>` over device memory (or mapped pinned memory: the expert view may
/// be a `pinned_host_store`'s `device_view()`).
///
/// Owns its fp32 scratch (`max_tokens x max_top_k x (H + I)` floats), so calls on its stream run
/// one after the other. Not copyable.
class gemv_fused_moe {
 public:
  /// @throws wisp::logic_error on an invalid shape, `H` or `I` not a multiple of 8, shared
  ///   memory over 48 KiB, or counts < 1; wisp::out_of_memory; wisp::cuda_error.
  gemv_fused_moe(swiglu_shape shape, std::int32_t max_tokens, std::int32_t max_top_k,
                 cudaStream_t stream)
      : shape_(shape),
        max_positions_(checked_positions(shape, max_tokens, max_top_k)),
        stream_(stream),
        act_(max_positions_ * static_cast<std::size_t>(shape.intermediate),
             "gemv_fused_moe: cudaMalloc of the activations"),
        y_(max_positions_ * static_cast<std::size_t>(shape.hidden),
           "gemv_fused_moe: cudaMalloc of the outputs") {}

  /// @brief Launches the three kernels for `a` on the stream. O(tokens x k x H x I) device work.
  /// @throws wisp::logic_error (nothing launched) if `check_gemv_moe_args` fails or the call has
  ///   more positions than the scratch; wisp::cuda_error if a launch fails.
  template <topk_id Id>
  void operator()(const basic_fused_moe_args<bf16, Id>& a) const {
    check_gemv_moe_args("gemv_fused_moe", a, shape_);
    const std::size_t n = static_cast<std::size_t>(a.tokens) * static_cast<std::size_t>(a.top_k);
    WISP_EXPECTS(n <= max_positions_ && n <= 65535, "gemv_fused_moe: ", a.tokens, " tokens x top-",
                 a.top_k, " positions exceed the scratch of ", max_positions_);
    if (n == 0) {
      return;
    }
    const detail::gemv_params<Id> p{a.hidden.data(), a.experts, act_.data(),
                                    y_.data(),       shape_,    detail::make_combine(a, y_.data())};
    const dim3 act_grid(
        (static_cast<unsigned>(shape_.intermediate) + detail::gemv_warps - 1) / detail::gemv_warps,
        static_cast<unsigned>(n));
    detail::gemv_act_kernel<Id>
        <<<act_grid, detail::gemv_threads, static_cast<std::size_t>(shape_.hidden) * sizeof(float),
           stream_>>>(p);
    WISP_CUDA_TRY(cudaGetLastError());
    const dim3 down_grid(
        (static_cast<unsigned>(shape_.hidden) + detail::gemv_warps - 1) / detail::gemv_warps,
        static_cast<unsigned>(n));
    detail::gemv_down_kernel<Id>
        <<<down_grid, detail::gemv_threads,
           static_cast<std::size_t>(shape_.intermediate) * sizeof(float), stream_>>>(p);
    WISP_CUDA_TRY(cudaGetLastError());
    detail::launch_combine(p.combine, stream_);
  }

  [[nodiscard]] const swiglu_shape& shape() const noexcept { return shape_; }
  [[nodiscard]] cudaStream_t stream() const noexcept { return stream_; }

 private:
  static std::size_t checked_positions(const swiglu_shape& shape, std::int32_t tokens,
                                       std::int32_t top_k) {
    shape.validate();
    WISP_EXPECTS(shape.hidden % gemv_chunk == 0 && shape.intermediate % gemv_chunk == 0,
                 "gemv_fused_moe: hidden ", shape.hidden, " and intermediate ", shape.intermediate,
                 " must be multiples of ", gemv_chunk);
    WISP_EXPECTS(shape.hidden <= 12288 && shape.intermediate <= 12288, "gemv_fused_moe: hidden ",
                 shape.hidden, " and intermediate ", shape.intermediate,
                 " are staged in 48 KiB of shared memory (at most 12288 floats)");
    WISP_EXPECTS(tokens >= 1 && top_k >= 1, "gemv_fused_moe: max_tokens ", tokens, " and top_k ",
                 top_k, " must be >= 1");
    return static_cast<std::size_t>(tokens) * static_cast<std::size_t>(top_k);
  }

  swiglu_shape shape_;
  std::size_t max_positions_;
  cudaStream_t stream_;
  detail::device_array<float> act_;
  detail::device_array<float> y_;
};
static_assert(fused_moe_kernel<gemv_fused_moe, basic_fused_moe_args<bf16>>);

}  // namespace wisp::bench
