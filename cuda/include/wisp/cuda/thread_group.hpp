// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `thread_group`: the few collective operations a `WISP_HOST_DEVICE` step function needs
/// from the threads that run it together, so that one function runs as a CUDA thread block on a
/// GPU (`block_group`, in `<wisp/cuda/block_group.cuh>`) and as one host thread
/// (`serial_group`) in tests and host runs. Host-safe.
///
/// A function written against the concept loops over its items as `for (i = g.rank(); i < n;
/// i += g.size())` and calls the collectives with the same trip count in every thread; with
/// `serial_group` every loop runs all items in order and every collective is trivial, so the
/// host runs the very code the GPU runs.
/// @code
/// template <wisp::cuda::thread_group G>
/// WISP_HOST_DEVICE std::int32_t count_odd(const G& g, const std::int32_t* v, std::int32_t n) {
///   std::int32_t count = 0;
///   for (std::int32_t base = 0; base < n; base += g.size()) {
///     const std::int32_t i = base + g.rank();
///     std::int32_t total = 0;
///     (void)g.exclusive_sum(i < n && v[i] % 2 != 0 ? 1 : 0, total);
///     count += total;
///   }
///   return count;
/// }
/// @endcode
#pragma once

#include <wisp/core/config.hpp>

#include <concepts>
#include <cstdint>

/// Lets a `WISP_HOST_DEVICE` template call the collectives of a host-only or device-only group:
/// nvcc checks the execution space of each instantiation as it is used (CCCL does the same).
#if defined(__CUDACC__)
#define WISP_DETAIL_EXEC_CHECK_DISABLE _Pragma("nv_exec_check_disable")
#else
#define WISP_DETAIL_EXEC_CHECK_DISABLE
#endif

namespace wisp::cuda {

/// @brief Threads that run one step together, `rank()` in `[0, size())`.
///
/// - `sync()`: a barrier; memory written before it by any thread of the group is visible to
///   every thread after it.
/// - `any(p)`: a barrier that returns, in every thread, whether `p` was true in any thread.
/// - `exclusive_sum(v, total)`: a barrier that returns the sum of `v` over the lower ranks and
///   sets `total` to the sum over the group, in every thread.
/// - `atomic_min(cell, v)`: `*cell = min(*cell, v)` atomically with respect to the group.
template <class G>
concept thread_group = requires(const G& g, bool p, std::int32_t v, std::int32_t& total,
                                std::int32_t* cell) {
  { g.rank() } -> std::convertible_to<std::int32_t>;
  { g.size() } -> std::convertible_to<std::int32_t>;
  g.sync();
  { g.any(p) } -> std::same_as<bool>;
  { g.exclusive_sum(v, total) } -> std::same_as<std::int32_t>;
  g.atomic_min(cell, v);
};

/// @brief One thread is the whole group: how the host runs a step. Every operation is O(1).
struct serial_group {
  [[nodiscard]] WISP_HOST_DEVICE static constexpr std::int32_t rank() noexcept { return 0; }
  [[nodiscard]] WISP_HOST_DEVICE static constexpr std::int32_t size() noexcept { return 1; }
  WISP_HOST_DEVICE static constexpr void sync() noexcept {}
  [[nodiscard]] WISP_HOST_DEVICE static constexpr bool any(bool p) noexcept { return p; }
  WISP_HOST_DEVICE static constexpr std::int32_t exclusive_sum(std::int32_t v,
                                                               std::int32_t& total) noexcept {
    total = v;
    return 0;
  }
  WISP_HOST_DEVICE static constexpr void atomic_min(std::int32_t* cell, std::int32_t v) noexcept {
    if (v < *cell) {
      *cell = v;
    }
  }
};
static_assert(thread_group<serial_group>);

}  // namespace wisp::cuda
