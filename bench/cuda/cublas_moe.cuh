// SPDX-License-Identifier: Apache-2.0
// `cublas_fused_moe`: a fused-MoE kernel built on cuBLAS (the CUDA toolkit's BLAS), plugged into
// the data path through the same `fused_moe_kernel` contract as the benchmark's GEMV kernel: it
// shows that wisp composes with kernels it did not write. Per call, on its stream:
//   1. a small kernel turns (ids, expert map, slot view) into per-position matrix pointers (a
//      hidden position points at a zero row the kernel owns, so no unmapped row is read);
//   2. cublasGemmBatchedEx: [gate; up] (2I x H, bf16) x the token's x (bf16) -> fp32, per position;
//   3. an elementwise kernel: act = swiglu(gate . x, up . x), rounded to bf16 (GEMM inputs);
//   4. cublasGemmBatchedEx: down (H x I) x act -> fp32 y, per position;
//   5. the GEMV kernel's combine: out = sum_j w_j y_j over the visible positions, bf16.
// Batched GEMMs of one column each: at decode's batch 1 every expert sees one token. Its outputs
// differ from the GEMV kernel's by rounding only (bf16 activations, cuBLAS's summation order);
// the benchmark checks them against each other within a tolerance. nvcc only, links cuBLAS.
#pragma once

#include "gemv_moe.cuh"
#include "gpu_support.cuh"

#include <wisp/core/error.hpp>
#include <wisp/core/topk.hpp>
#include <wisp/cuda/runtime.cuh>
#include <wisp/kernel/bf16.hpp>
#include <wisp/kernel/fused_moe.hpp>
#include <wisp/kernel/reference_moe.hpp>
#include <wisp/kernel/swiglu.hpp>

#include <cuda_runtime_api.h>

#include <cublas_v2.h>

#include <cstddef>
#include <cstdint>
#include <string>

/// Evaluates a cuBLAS call; on failure throws `wisp::cuda_error` with the status's name.
#define WISP_BENCH_CUBLAS_TRY(call)                                                          \
  do {                                                                                       \
    const cublasStatus_t wisp_bench_status = (call);                                         \
    if (wisp_bench_status != CUBLAS_STATUS_SUCCESS) {                                        \
      throw ::wisp::cuda_error(                                                              \
          static_cast<int>(wisp_bench_status),                                               \
          ::wisp::detail::concat(#call, " failed: ", cublasGetStatusName(wisp_bench_status), \
                                 " at ", __FILE__, ":", __LINE__));                          \
    }                                                                                        \
  } while (false)

namespace wisp::bench {

namespace detail {

struct cublas_pointers {
  const void** a_gate_up = nullptr;
  const void** b_x = nullptr;
  void** c_gate_up = nullptr;
  const void** a_down = nullptr;
  const void** b_act = nullptr;
  void** c_y = nullptr;
};

template <class Id>
__global__ void cublas_pointer_kernel(combine_params<Id> c, const bf16* hidden,
                                      expert_tensor_view experts, const std::byte* zero_row,
                                      swiglu_shape shape, float* gate_up, bf16* act, float* y,
                                      cublas_pointers out) {
  const std::int32_t positions = c.tokens * c.top_k;
  for (std::int32_t pos = static_cast<std::int32_t>(blockIdx.x * blockDim.x + threadIdx.x);
       pos < positions; pos += static_cast<std::int32_t>(gridDim.x * blockDim.x)) {
    const std::int32_t row = row_of(c, pos);
    const std::byte* base = row >= 0 ? experts.row(static_cast<std::size_t>(row)) : zero_row;
    const auto p = static_cast<std::size_t>(pos);
    out.a_gate_up[p] = base;
    out.a_down[p] = base + 2 * shape.matrix_values() * sizeof(bf16);
    out.b_x[p] = hidden + static_cast<std::size_t>(pos / c.top_k) * shape.hidden;
    out.c_gate_up[p] = gate_up + p * 2 * static_cast<std::size_t>(shape.intermediate);
    out.b_act[p] = act + p * static_cast<std::size_t>(shape.intermediate);
    out.c_y[p] = y + p * static_cast<std::size_t>(shape.hidden);
  }
}

// A template (over the activation type) so that the header defines it in every translation unit.
template <class Activation>
__global__ void cublas_act_kernel(const float* gate_up, Activation* act, std::int32_t positions,
                                  std::int32_t intermediate) {
  const std::size_t n =
      static_cast<std::size_t>(positions) * static_cast<std::size_t>(intermediate);
  for (std::size_t idx = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t pos = idx / static_cast<std::size_t>(intermediate);
    const std::size_t i = idx % static_cast<std::size_t>(intermediate);
    const float* g = gate_up + pos * 2 * static_cast<std::size_t>(intermediate);
    act[idx] = activation_from_float<Activation>(
        swiglu(g[i], g[static_cast<std::size_t>(intermediate) + i]));
  }
}

}  // namespace detail

/// @brief The cuBLAS fused-MoE kernel (see the file comment). Models `fused_moe_kernel` for
/// `basic_fused_moe_args<bf16>` over device memory.
///
/// Owns a cuBLAS handle bound to its stream, a 32 MiB cuBLAS workspace, a zero expert row and
/// its scratch for `max_tokens x max_top_k` positions. Not copyable.
class cublas_fused_moe {
 public:
  /// @throws wisp::logic_error on an invalid shape or counts < 1; wisp::out_of_memory;
  ///   wisp::cuda_error (cuBLAS or CUDA).
  cublas_fused_moe(swiglu_shape shape, std::int32_t max_tokens, std::int32_t max_top_k,
                   cudaStream_t stream)
      : shape_(shape),
        max_positions_(checked_positions(shape, max_tokens, max_top_k)),
        stream_(stream),
        zero_row_(shape.row_bytes(), "cublas_fused_moe: cudaMalloc of the zero row"),
        workspace_(workspace_bytes, "cublas_fused_moe: cudaMalloc of the cuBLAS workspace"),
        gate_up_(max_positions_ * 2 * static_cast<std::size_t>(shape.intermediate) * sizeof(float),
                 "cublas_fused_moe: cudaMalloc of gate and up"),
        act_(max_positions_ * static_cast<std::size_t>(shape.intermediate) * sizeof(bf16),
             "cublas_fused_moe: cudaMalloc of the activations"),
        y_(max_positions_ * static_cast<std::size_t>(shape.hidden) * sizeof(float),
           "cublas_fused_moe: cudaMalloc of the outputs"),
        pointers_(6 * max_positions_ * sizeof(void*), "cublas_fused_moe: cudaMalloc of pointers") {
    WISP_CUDA_TRY(cudaMemsetAsync(zero_row_.data(), 0, shape.row_bytes(), stream));
    WISP_CUDA_TRY(cudaStreamSynchronize(stream));
    WISP_BENCH_CUBLAS_TRY(cublasCreate(&handle_));
    try {
      WISP_BENCH_CUBLAS_TRY(cublasSetStream(handle_, stream));
      WISP_BENCH_CUBLAS_TRY(cublasSetWorkspace(handle_, workspace_.data(), workspace_bytes));
    } catch (...) {
      (void)cublasDestroy(handle_);
      throw;
    }
  }
  cublas_fused_moe(const cublas_fused_moe&) = delete;
  cublas_fused_moe& operator=(const cublas_fused_moe&) = delete;
  ~cublas_fused_moe() {
    (void)cudaStreamSynchronize(stream_);
    (void)cublasDestroy(handle_);
  }

  /// @brief Runs the five steps for `a` on the stream (see the file comment).
  /// @throws wisp::logic_error (nothing launched) if `check_swiglu_moe_args` fails or the call has
  ///   more positions than the scratch; wisp::cuda_error if a launch or cuBLAS call fails.
  template <topk_id Id>
  void operator()(const basic_fused_moe_args<bf16, Id>& a) {
    check_swiglu_moe_args("cublas_fused_moe", a, shape_);
    const std::size_t n = static_cast<std::size_t>(a.tokens) * static_cast<std::size_t>(a.top_k);
    WISP_EXPECTS(n <= max_positions_, "cublas_fused_moe: ", a.tokens, " tokens x top-", a.top_k,
                 " positions exceed the scratch of ", max_positions_);
    if (n == 0) {
      return;
    }
    auto* gate_up = reinterpret_cast<float*>(gate_up_.data());
    auto* act = reinterpret_cast<bf16*>(act_.data());
    auto* y = reinterpret_cast<float*>(y_.data());
    auto** table = reinterpret_cast<void**>(pointers_.data());
    const detail::cublas_pointers ptr{const_cast<const void**>(table),
                                      const_cast<const void**>(table + n),
                                      table + 2 * n,
                                      const_cast<const void**>(table + 3 * n),
                                      const_cast<const void**>(table + 4 * n),
                                      table + 5 * n};
    const detail::combine_params<Id> combine = detail::make_combine(a, y);
    const auto blocks = static_cast<unsigned>((n + 127) / 128);
    detail::cublas_pointer_kernel<Id><<<blocks, 128, 0, stream_>>>(
        combine, a.hidden.data(), a.experts, zero_row_.data(), shape_, gate_up, act, y, ptr);
    WISP_CUDA_TRY(cudaGetLastError());
    const float one = 1.0f;
    const float zero = 0.0f;
    const int h = shape_.hidden;
    const int in = shape_.intermediate;
    const int batch = static_cast<int>(n);
    // Column-major: a row-major [2I x H] matrix is an H x 2I matrix with ld H, transposed.
    WISP_BENCH_CUBLAS_TRY(cublasGemmBatchedEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, 2 * in, 1, h, &one,
                                              ptr.a_gate_up, CUDA_R_16BF, h, ptr.b_x, CUDA_R_16BF,
                                              h, &zero, ptr.c_gate_up, CUDA_R_32F, 2 * in, batch,
                                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    const std::size_t values = n * static_cast<std::size_t>(in);
    const std::size_t act_blocks = (values + 255) / 256;
    detail::cublas_act_kernel<bf16>
        <<<static_cast<unsigned>(act_blocks > 4096 ? 4096 : act_blocks), 256, 0, stream_>>>(
            gate_up, act, batch, in);
    WISP_CUDA_TRY(cudaGetLastError());
    WISP_BENCH_CUBLAS_TRY(cublasGemmBatchedEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, h, 1, in, &one,
                                              ptr.a_down, CUDA_R_16BF, in, ptr.b_act, CUDA_R_16BF,
                                              in, &zero, ptr.c_y, CUDA_R_32F, h, batch,
                                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    detail::launch_combine(combine, stream_);
  }

  [[nodiscard]] const swiglu_shape& shape() const noexcept { return shape_; }

 private:
  static constexpr std::size_t workspace_bytes = std::size_t{32} << 20;

  static std::size_t checked_positions(const swiglu_shape& shape, std::int32_t tokens,
                                       std::int32_t top_k) {
    shape.validate();
    WISP_EXPECTS(tokens >= 1 && top_k >= 1, "cublas_fused_moe: max_tokens ", tokens, " and top_k ",
                 top_k, " must be >= 1");
    return static_cast<std::size_t>(tokens) * static_cast<std::size_t>(top_k);
  }

  swiglu_shape shape_;
  std::size_t max_positions_;
  cudaStream_t stream_;
  detail::device_array<std::byte> zero_row_;
  detail::device_array<std::byte> workspace_;
  detail::device_array<std::byte> gate_up_;
  detail::device_array<std::byte> act_;
  detail::device_array<std::byte> y_;
  detail::device_array<std::byte> pointers_;
  cublasHandle_t handle_ = nullptr;
};
static_assert(fused_moe_kernel<cublas_fused_moe, basic_fused_moe_args<bf16>>);

}  // namespace wisp::bench
