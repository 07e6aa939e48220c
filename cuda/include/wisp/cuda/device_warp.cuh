// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `device_warp`: the calling warp of a CUDA kernel, with the interface of
/// `lockstep_warp` (`<wisp/cuda/warp_lanes.hpp>`), so a step function written against it runs as
/// a kernel body with votes and no shared-memory scans. nvcc only, sm_70 or newer
/// (`__match_any_sync`).
/// @code
/// __global__ void k(...) {  // launched with 32 threads
///   wisp::cuda::warp_pager_step(wisp::cuda::device_warp{}, layer, victim_slots, ids, n);
/// }
/// @endcode
#pragma once

#include <wisp/cuda/warp_lanes.hpp>

#include <cstdint>
#include <utility>

namespace wisp::cuda {

/// @brief The 32 lanes of the calling warp; every lane of it calls every operation (a 1-D block
/// of 32 threads, or the full warp of a larger block). Each operation is one warp instruction,
/// or a few: `reduce_or` and `reduce_min` are one on sm_80 and newer, five shuffles before;
/// `broadcast` is one shuffle (two for 64 bits).
struct device_warp {
  static constexpr std::int32_t width = 32;

  /// The calling lane's value; `v[lane]` with the caller's own lane reads it.
  template <class T>
  struct values {
    T own;
    [[nodiscard]] __device__ const T& operator[](std::int32_t) const noexcept { return own; }
  };

  [[nodiscard]] __device__ static std::int32_t lane() noexcept {
    return static_cast<std::int32_t>(threadIdx.x & 31u);
  }
  // The return type is spelt out: nvcc's host pass cannot deduce a device function's, and
  // `warp_lanes` checks it there.
  template <class F>
  [[nodiscard]] __device__ values<decltype(std::declval<F&>()(std::int32_t{0}))> lanes(F f) const {
    return {f(lane())};
  }
  template <class F>
  __device__ void each(F f) const {
    f(lane());
  }
  template <class F>
  [[nodiscard]] __device__ std::uint32_t ballot(F f) const {
    return __ballot_sync(all, static_cast<bool>(f(lane())) ? 1 : 0);
  }
  [[nodiscard]] __device__ values<std::uint32_t> match(const values<std::int32_t>& v) const {
    return {__match_any_sync(all, v.own)};
  }
  [[nodiscard]] __device__ std::uint32_t reduce_or(const values<std::uint32_t>& v) const {
#if __CUDA_ARCH__ >= 800
    return __reduce_or_sync(all, v.own);
#else
    std::uint32_t x = v.own;
    for (unsigned d = 16; d > 0; d >>= 1) {
      x |= __shfl_xor_sync(all, x, d);
    }
    return x;
#endif
  }
  [[nodiscard]] __device__ std::uint32_t reduce_min(const values<std::uint32_t>& v) const {
#if __CUDA_ARCH__ >= 800
    return __reduce_min_sync(all, v.own);
#else
    std::uint32_t x = v.own;
    for (unsigned d = 16; d > 0; d >>= 1) {
      const std::uint32_t y = __shfl_xor_sync(all, x, d);
      x = y < x ? y : x;
    }
    return x;
#endif
  }
  template <class T>
  [[nodiscard]] __device__ T broadcast(const values<T>& v, std::int32_t lane) const {
    return __shfl_sync(all, v.own, lane);
  }
  __device__ void sync() const noexcept {
    __syncwarp(all);
  }

 private:
  static constexpr unsigned all = 0xffffffffu;
};
static_assert(warp_lanes<device_warp>);

}  // namespace wisp::cuda
