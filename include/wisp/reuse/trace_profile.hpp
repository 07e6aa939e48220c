// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Reuse profile of a whole routing trace in one scope (the glue between the trace area
/// and the trace-independent reuse headers).
/// @code
/// auto trace = wisp::import_esft("shared/traces/raw/esft_deepseek_v2_lite_intent");
/// auto profile = wisp::profile_trace(trace, wisp::cache_scope::global);
/// wisp::miss_curve curve{profile.histogram};   // == wisp sim --policy lru, per capacity
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/reuse/histogram.hpp>
#include <wisp/reuse/scoped_counter.hpp>
#include <wisp/trace/routing_trace.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace wisp {

/// @brief What `profile_trace` measures.
struct reuse_profile {
  reuse_histogram histogram;       ///< Distances of every access (summed over layers if per-layer).
  std::size_t distinct_per_cache;  ///< Distinct keys of the largest cache (global: all keys).
  std::size_t distinct_total;      ///< Distinct (layer, expert) keys over all caches.
};

/// @brief Exact reuse profile of `trace` replayed in canonical order, in `scope`.
///
/// With `reuse_granularity::call` (the default) every (step, layer) request is one call, so the
/// curve equals the misses of `wisp::simulate<wisp::lru>` (calls protected) at every
/// capacity from `top_k` up; with `reuse_granularity::access` it is plain per-access LRU (equal to
/// `simulate<lru>` with `protect_calls = false`, at every capacity from 1).
///
/// Complexity: O(accesses * log(keys)), memory O(layers * experts), one pass.
/// @throws wisp::logic_error if `scope` is `cache_scope::stream`.
[[nodiscard]] inline reuse_profile profile_trace(
    const routing_trace& trace, cache_scope scope,
    reuse_granularity granularity = reuse_granularity::call) {
  const auto& shape = trace.shape();
  scoped_reuse_counter counter{scope, static_cast<std::uint32_t>(shape.layers),
                               static_cast<std::uint32_t>(shape.experts)};
  if (granularity == reuse_granularity::access) {
    trace.for_each_access([&](const access& a) {
      counter.access(static_cast<std::uint32_t>(a.layer), static_cast<std::uint32_t>(a.expert));
    });
  } else {
    std::vector<std::uint32_t> experts(static_cast<std::size_t>(shape.top_k));
    trace.for_each_call([&](std::uint32_t, std::int32_t layer, std::span<const std::int32_t> ids) {
      experts.assign(ids.begin(), ids.end());
      counter.access_call(static_cast<std::uint32_t>(layer), experts);
    });
  }
  return {counter.histogram(), counter.distinct_per_cache(), counter.distinct_total()};
}

}  // namespace wisp
