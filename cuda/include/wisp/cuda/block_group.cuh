// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `block_group`: the `thread_group` of one CUDA thread block, so a step function written
/// against the concept runs as a kernel body. nvcc only.
/// @code
/// __global__ void k(...) {
///   __shared__ std::int32_t scan[wisp::cuda::block_group_scratch];
///   wisp::cuda::pager_step(wisp::cuda::block_group(scan), layer, workspace, ids, n);
/// }
/// @endcode
#pragma once

#include <wisp/cuda/thread_group.hpp>

#include <cstdint>

namespace wisp::cuda {

/// `int32` values of shared memory a `block_group`'s `exclusive_sum` uses (one per warp).
inline constexpr std::int32_t block_group_scratch = 32;

/// @brief The threads of the calling block, `rank() = threadIdx.x` (1-D blocks whose size is a
/// multiple of 32, at most 1024). `exclusive_sum` scans with warp shuffles and `scratch`
/// (`block_group_scratch` ints of shared memory; may be null if it is never called). Every
/// collective is a `__syncthreads` barrier for the whole block.
class block_group {
 public:
  __device__ explicit block_group(std::int32_t* scratch) noexcept : scratch_(scratch) {}

  [[nodiscard]] __device__ std::int32_t rank() const noexcept {
    return static_cast<std::int32_t>(threadIdx.x);
  }
  [[nodiscard]] __device__ std::int32_t size() const noexcept {
    return static_cast<std::int32_t>(blockDim.x);
  }
  __device__ void sync() const noexcept { __syncthreads(); }
  [[nodiscard]] __device__ bool any(bool p) const noexcept {
    return __syncthreads_or(p ? 1 : 0) != 0;
  }
  __device__ std::int32_t exclusive_sum(std::int32_t v, std::int32_t& total) const noexcept {
    constexpr unsigned all = 0xffffffffu;
    const unsigned lane = threadIdx.x & 31u;
    const unsigned warp = threadIdx.x >> 5;
    const unsigned warps = blockDim.x >> 5;
    std::int32_t x = v;  // inclusive scan within the warp
    for (unsigned d = 1; d < 32; d <<= 1) {
      const std::int32_t y = __shfl_up_sync(all, x, d);
      x += lane >= d ? y : 0;
    }
    if (lane == 31) {
      scratch_[warp] = x;
    }
    __syncthreads();
    if (warp == 0) {  // inclusive scan of the warp totals
      std::int32_t s = lane < warps ? scratch_[lane] : 0;
      for (unsigned d = 1; d < 32; d <<= 1) {
        const std::int32_t y = __shfl_up_sync(all, s, d);
        s += lane >= d ? y : 0;
      }
      if (lane < warps) {
        scratch_[lane] = s;
      }
    }
    __syncthreads();
    const std::int32_t below = (warp == 0 ? 0 : scratch_[warp - 1]) + x - v;
    total = scratch_[warps - 1];
    __syncthreads();  // every thread has read the scratch before the next call writes it
    return below;
  }
  __device__ void atomic_min(std::int32_t* cell, std::int32_t v) const noexcept {
    atomicMin(cell, v);
  }

 private:
  std::int32_t* scratch_;
};
static_assert(thread_group<block_group>);

}  // namespace wisp::cuda
