// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The kernels of the data path that take routed ids: the remap kernel (ids -> slots
/// through an expert map), the reroute kernel (ExpertWeave §4.3, alone or fused with the remap)
/// and the reference fused-MoE kernel. nvcc only.
///
/// Each kernel body is a host-safe rule the host tests run exactly (`expert_to_slot`,
/// `reroute_ids`, `fused_moe_token`); the GPU tests compare the kernels with `remap_topk`
/// (Thrust), `reroute_table::apply` and `wisp::reference_fused_moe` (bit for bit). Launches are
/// asynchronous on the given stream and contain no host synchronisation, so they can be captured
/// in a CUDA graph.
/// @code
/// wisp::cuda::launch_remap(ids, n, map, experts, slots_out, stream);
/// wisp::cuda::reference_fused_moe moe({.hidden = 2048, .intermediate = 1408}, stream);
/// moe(wisp::basic_fused_moe_args<wisp::bf16>{hidden, ids, weights, slots, map, out, T, k, 2048});
/// @endcode
#pragma once

#include <wisp/core/error.hpp>
#include <wisp/core/topk.hpp>
#include <wisp/cuda/block_group.cuh>
#include <wisp/cuda/fused_moe_block.hpp>
#include <wisp/cuda/remap.hpp>
#include <wisp/cuda/reroute.hpp>
#include <wisp/cuda/runtime.cuh>
#include <wisp/kernel/fused_moe.hpp>
#include <wisp/kernel/swiglu.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace wisp::cuda {

namespace detail {

inline constexpr unsigned elementwise_threads = 256;

/// Blocks for a grid-stride loop over `n` items (at least 1, at most 4096).
[[nodiscard]] inline unsigned elementwise_blocks(std::size_t n) noexcept {
  const std::size_t blocks = (n + elementwise_threads - 1) / elementwise_threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks > 4096 ? 4096 : blocks);
}

[[nodiscard]] __device__ inline std::size_t global_thread() noexcept {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
[[nodiscard]] __device__ inline std::size_t grid_threads() noexcept {
  return static_cast<std::size_t>(gridDim.x) * blockDim.x;
}

template <topk_id Id>
__global__ void remap_kernel(const Id* ids, std::size_t n, expert_to_slot rule, std::int32_t* out) {
  for (std::size_t i = global_thread(); i < n; i += grid_threads()) {
    out[i] = rule(ids[i]);
  }
}

template <class Rule, topk_id Id>
__global__ void reroute_kernel(Rule rule, const Id* ids, std::size_t n, std::int32_t k,
                               const std::int32_t* adapter_ids, std::int32_t* out) {
  reroute_ids(rule, ids, n, k, adapter_ids, out, global_thread(), grid_threads());
}

template <class Activation, topk_id Id>
__global__ void reference_moe_kernel(fused_moe_params<Activation, Id> p) {
  extern __shared__ float fused_moe_scratch[];
  const block_group g(nullptr);  // fused_moe_token needs barriers only
  for (std::int32_t t = static_cast<std::int32_t>(blockIdx.x); t < p.tokens;
       t += static_cast<std::int32_t>(gridDim.x)) {
    fused_moe_token(g, p, t, fused_moe_scratch);
  }
}

}  // namespace detail

/// @brief `out[i] = map[ids[i]]` for `i < n` on `stream` (`expert_to_slot`: `not_resident` for a
/// hidden expert, `invalid_expert` for an id outside `[0, experts)`). Device pointers.
/// O(n) device work; nothing is launched for `n == 0`.
/// @throws wisp::logic_error if `experts < 0` or a pointer is null with `n > 0`;
///   wisp::cuda_error if the launch fails.
template <topk_id Id>
void launch_remap(const Id* ids, std::size_t n, const std::int32_t* map, std::int32_t experts,
                  std::int32_t* out, cudaStream_t stream) {
  WISP_EXPECTS(experts >= 0, "launch_remap: experts must be >= 0, got ", experts);
  if (n == 0) {
    return;
  }
  WISP_EXPECTS(ids != nullptr && map != nullptr && out != nullptr,
               "launch_remap: null ids, map or output for ", n, " ids");
  detail::remap_kernel<<<detail::elementwise_blocks(n), detail::elementwise_threads, 0, stream>>>(
      ids, n, expert_to_slot{map, experts}, out);
  WISP_CUDA_TRY(cudaGetLastError());
}

/// @brief `out[i] = rule(adapter_ids[i / k], ids[i])` for `i < n` on `stream`, with `rule` a
/// `reroute_to_row` (rows of the virtual weight tensor) or a `reroute_to_slot` (rerouted, then
/// remapped). Device pointers (the rule's table and map too). O(n) device work; nothing is
/// launched for `n == 0`.
/// @throws wisp::logic_error if `k < 1` or a pointer is null with `n > 0`; wisp::cuda_error if
///   the launch fails.
template <class Rule, topk_id Id>
void launch_reroute(const Rule& rule, const Id* ids, std::size_t n, std::int32_t k,
                    const std::int32_t* adapter_ids, std::int32_t* out, cudaStream_t stream) {
  WISP_EXPECTS(k >= 1, "launch_reroute: k must be >= 1, got ", k);
  if (n == 0) {
    return;
  }
  WISP_EXPECTS(ids != nullptr && adapter_ids != nullptr && out != nullptr,
               "launch_reroute: null ids, adapter ids or output for ", n, " ids");
  detail::reroute_kernel<<<detail::elementwise_blocks(n), detail::elementwise_threads, 0, stream>>>(
      rule, ids, n, k, adapter_ids, out);
  WISP_CUDA_TRY(cudaGetLastError());
}

/// @brief The reference fused-MoE kernel over SwiGLU bf16 experts: one block per token (see
/// `<wisp/cuda/fused_moe_block.hpp>`), the same bits as `wisp::reference_fused_moe`.
///
/// A value holding the shape, the stream and the block size; `operator()` launches. The spans
/// of the arguments point to device memory (their sizes are checked on the host, their contents
/// are not: a position whose id or map entry is out of range is skipped, as the kernel cannot
/// throw). Models `fused_moe_kernel` for `basic_fused_moe_args<bf16>` and `fused_moe_args`.
class reference_fused_moe {
 public:
  /// @throws wisp::logic_error on an invalid shape, `threads` not a multiple of 32 in
  ///   [32, 1024], or a shape whose per-block scratch exceeds 48 KiB (`H` above about 6000).
  explicit reference_fused_moe(swiglu_shape shape, cudaStream_t stream = nullptr,
                               unsigned threads = 256)
      : shape_(shape), stream_(stream), threads_(threads) {
    shape_.validate();
    WISP_EXPECTS(threads >= 32 && threads <= 1024 && threads % 32 == 0,
                 "reference_fused_moe: threads ", threads,
                 " must be a multiple of 32 in [32, 1024]");
    WISP_EXPECTS(shared_bytes() <= 48 * 1024, "reference_fused_moe: ", shared_bytes(),
                 " bytes of scratch per block exceed 48 KiB (hidden ", shape_.hidden,
                 ", intermediate ", shape_.intermediate, ")");
  }

  /// @brief Launches the kernel for `a` on the stream. O(tokens x k x H x I) device work.
  /// @throws wisp::logic_error if `check_swiglu_moe_args` fails; wisp::cuda_error if the launch
  ///   fails.
  template <class Activation, topk_id Id>
  void operator()(const basic_fused_moe_args<Activation, Id>& a) const {
    const fused_moe_params<Activation, Id> p = make_fused_moe_params(a, shape_);
    if (p.tokens == 0) {
      return;
    }
    detail::reference_moe_kernel<<<static_cast<unsigned>(p.tokens), threads_, shared_bytes(),
                                   stream_>>>(p);
    WISP_CUDA_TRY(cudaGetLastError());
  }

  [[nodiscard]] const swiglu_shape& shape() const noexcept { return shape_; }
  [[nodiscard]] std::size_t shared_bytes() const noexcept {
    return fused_moe_scratch_floats(shape_) * sizeof(float);
  }

 private:
  swiglu_shape shape_;
  cudaStream_t stream_;
  unsigned threads_;
};
static_assert(fused_moe_kernel<reference_fused_moe>);
static_assert(fused_moe_kernel<reference_fused_moe, basic_fused_moe_args<bf16>>);

}  // namespace wisp::cuda
