// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The lanes of one warp, for step functions that trade a thread block's scans and
/// barriers for warp votes: `lockstep_warp` runs the 32 lanes one after another in one host
/// thread, `device_warp` (`<wisp/cuda/device_warp.cuh>`) is the calling warp of a CUDA kernel.
/// A `WISP_HOST_DEVICE` function template written against their common interface is the same
/// code on both. Host-safe.
///
/// The interface (`W` is `lockstep_warp` or `device_warp`; `f` a callable of the lane index):
/// - `W::width`: 32 lanes.
/// - `w.lanes(f)`: a per-lane value, `f(lane)` in every lane. On the device each lane holds its
///   own, so a lambda reads a per-lane value `v` only as `v[lane]` of its own `lane`.
/// - `w.each(f)`: runs `f(lane)` in every lane, for its effects.
/// - `w.ballot(f)`: the mask of the lanes where `f(lane)` is true (bit `lane`).
/// - `w.match(v)`: per lane, the mask of the lanes whose `int32` value equals its own.
/// - `w.reduce_or(v)`: the bitwise or of a `uint32` over the lanes.
/// - `w.reduce_min(v)`: the least `uint32` over the lanes.
/// - `w.broadcast(v, lane)`: lane `lane`'s value of `v` (a 32- or 64-bit integer), in every lane;
///   `lane` is the same in every lane.
/// - `w.sync()`: memory written by any lane before it is visible to every lane after it.
///
/// The rule that makes both runs equal: within one `lanes`, `each` or `ballot`, no lane reads
/// memory that another lane writes (the lanes of a warp run it at once on a GPU, in lane order
/// on the host); memory one lane writes and another reads is ordered by `sync()` in between.
/// @code
/// template <class W>
/// WISP_HOST_DEVICE std::int32_t distinct(const W& w, const std::int32_t* ids, std::int32_t n) {
///   const auto id = w.lanes([&](std::int32_t i) { return i < n ? ids[i] : -1; });
///   const auto same = w.match(id);
///   return wisp::cuda::popcount32(
///       w.ballot([&](std::int32_t i) { return i < n && wisp::cuda::lowest_lane(same[i]) == i; }));
/// }
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/cuda/thread_group.hpp>

#include <bit>
#include <concepts>
#include <cstdint>

namespace wisp::cuda {

/// @brief A warp's lanes with the interface above (`lockstep_warp`, `device_warp`, or a user's):
/// what `warp_pager_step` and other warp step functions take. Checked in unevaluated context only,
/// so a device-only type satisfies it in host compilation too.
template <class W>
concept warp_lanes = requires(const W& w, const typename W::template values<std::int32_t>& ids,
                              const typename W::template values<std::uint32_t>& masks,
                              const typename W::template values<std::uint64_t>& wide,
                              bool (*predicate)(std::int32_t), void (*effect)(std::int32_t)) {
  requires W::width == 32;
  { w.lanes(predicate) } -> std::same_as<typename W::template values<bool>>;
  w.each(effect);
  { w.ballot(predicate) } -> std::same_as<std::uint32_t>;
  { w.match(ids) } -> std::same_as<typename W::template values<std::uint32_t>>;
  { w.reduce_or(masks) } -> std::same_as<std::uint32_t>;
  { w.reduce_min(masks) } -> std::same_as<std::uint32_t>;
  { w.broadcast(ids, 0) } -> std::same_as<std::int32_t>;
  { w.broadcast(wide, 0) } -> std::same_as<std::uint64_t>;
  w.sync();
};

/// Number of set bits of `mask`. O(1).
[[nodiscard]] WISP_HOST_DEVICE inline std::int32_t popcount32(std::uint32_t mask) noexcept {
#if defined(__CUDA_ARCH__)
  return __popc(mask);
#else
  return std::popcount(mask);
#endif
}

/// The lowest lane of a non-empty `mask` (undefined for 0). O(1).
[[nodiscard]] WISP_HOST_DEVICE inline std::int32_t lowest_lane(std::uint32_t mask) noexcept {
#if defined(__CUDA_ARCH__)
  return __ffs(static_cast<int>(mask)) - 1;
#else
  return std::countr_zero(mask);
#endif
}

/// The mask of the lanes below `lane` (`lane` in `[0, 32)`). O(1).
[[nodiscard]] WISP_HOST_DEVICE constexpr std::uint32_t lanes_below(std::int32_t lane) noexcept {
  return (std::uint32_t{1} << static_cast<std::uint32_t>(lane)) - 1u;
}

/// Whether `lane` (in `[0, 32)`) is in `mask`. O(1).
[[nodiscard]] WISP_HOST_DEVICE constexpr bool has_lane(std::uint32_t mask,
                                                       std::int32_t lane) noexcept {
  return ((mask >> static_cast<std::uint32_t>(lane)) & 1u) != 0;
}

/// @brief The 32 lanes of a warp run in lockstep by one host thread: every operation runs its
/// lanes in order, 0 to 31, so a step function written for `device_warp` runs here exactly (see
/// the file comment). `lanes`, `each` and `ballot` cost 32 calls of `f`, `match` 32 x 32
/// comparisons, `reduce_or` 32 ors, `reduce_min` 32 comparisons, `broadcast` one read. Stateless;
/// any thread may use its own.
struct lockstep_warp {
  static constexpr std::int32_t width = 32;

  /// One value per lane; `v[lane]` reads a lane's value.
  template <class T>
  struct values {
    T at[width] = {};
    [[nodiscard]] WISP_HOST_DEVICE constexpr const T& operator[](std::int32_t lane) const noexcept {
      return at[lane];
    }
  };

  WISP_DETAIL_EXEC_CHECK_DISABLE
  template <class F>
  [[nodiscard]] WISP_HOST_DEVICE constexpr auto lanes(F f) const {
    values<decltype(f(std::int32_t{0}))> out;
    for (std::int32_t lane = 0; lane < width; ++lane) {
      out.at[lane] = f(lane);
    }
    return out;
  }
  WISP_DETAIL_EXEC_CHECK_DISABLE
  template <class F>
  WISP_HOST_DEVICE constexpr void each(F f) const {
    for (std::int32_t lane = 0; lane < width; ++lane) {
      f(lane);
    }
  }
  WISP_DETAIL_EXEC_CHECK_DISABLE
  template <class F>
  [[nodiscard]] WISP_HOST_DEVICE constexpr std::uint32_t ballot(F f) const {
    std::uint32_t mask = 0;
    for (std::int32_t lane = 0; lane < width; ++lane) {
      mask |= static_cast<bool>(f(lane)) ? std::uint32_t{1} << lane : 0u;
    }
    return mask;
  }
  [[nodiscard]] WISP_HOST_DEVICE constexpr values<std::uint32_t> match(
      const values<std::int32_t>& v) const {
    values<std::uint32_t> out;
    for (std::int32_t lane = 0; lane < width; ++lane) {
      out.at[lane] = ballot([&](std::int32_t other) { return v[other] == v[lane]; });
    }
    return out;
  }
  [[nodiscard]] WISP_HOST_DEVICE constexpr std::uint32_t reduce_or(
      const values<std::uint32_t>& v) const {
    std::uint32_t out = 0;
    for (const std::uint32_t x : v.at) {
      out |= x;
    }
    return out;
  }
  [[nodiscard]] WISP_HOST_DEVICE constexpr std::uint32_t reduce_min(
      const values<std::uint32_t>& v) const {
    std::uint32_t out = v[0];
    for (const std::uint32_t x : v.at) {
      out = x < out ? x : out;
    }
    return out;
  }
  template <class T>
  [[nodiscard]] WISP_HOST_DEVICE constexpr T broadcast(const values<T>& v,
                                                       std::int32_t lane) const {
    return v[lane];
  }
  WISP_HOST_DEVICE constexpr void sync() const noexcept {}
};
static_assert(warp_lanes<lockstep_warp>);

}  // namespace wisp::cuda
