// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Trace-driven simulation: replay a stream of (step, layer, expert) accesses through any
/// eviction policy, scope and capacity, and report hits, misses, collision misses, evictions,
/// bytes moved and the stall time of a simple bandwidth model.
///
/// The input is either a range of accesses or a callable `source(f)` that calls `f(a)` for every
/// access in order; an access is anything with `step`, `layer` and `expert` members
/// (`wisp::access` or a user's own struct); `<wisp/sim/trace_sim.hpp>` has the `routing_trace`
/// overload.
///
/// **Calls.** Consecutive accesses with the same (step, layer) form one call, as one MoE layer's
/// request in an engine: its experts are protected from each other's misses (vLLM's intra-batch
/// protection). With `protect_calls = false` every access is its own call (a pure access-stream
/// replay). The i-th access of the stream has time i.
///
/// @code
/// std::vector<wisp::access> stream = {{0, 0, 3}, {0, 0, 5}, {0, 1, 2}, {1, 0, 3}};
/// wisp::sim_config cfg{.scope = wisp::cache_scope::global, .capacity = 2,
///                      .expert_bytes = 9u << 20, .link = wisp::link_model::from_gbps(25.0, 10.0)};
/// auto r = wisp::simulate<wisp::lru>({.layers = 2, .experts = 8}, stream, cfg);
/// // r.stats.misses, r.bytes_moved, r.stall_seconds
/// @endcode
#pragma once

#include <wisp/cache/eviction_policy.hpp>
#include <wisp/cache/per_layer_cache.hpp>
#include <wisp/cache/slot_cache.hpp>
#include <wisp/cache/visit_policy.hpp>
#include <wisp/core/error.hpp>
#include <wisp/trace/routing_trace.hpp>
#include <wisp/transfer/timeline.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <ranges>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace wisp {

/// What to simulate.
struct sim_config {
  cache_scope scope = cache_scope::per_layer;
  /// Slots per layer (per-layer scope) or in total (global scope).
  std::int32_t capacity = 1;
  /// Bytes one miss copies (`sim_result::bytes_moved` = misses x this).
  std::uint64_t expert_bytes = 0;
  /// The link every miss crosses, serially: a miss stalls `link.copy_seconds(expert_bytes)`.
  /// Default: infinitely fast, no latency (no stall).
  link_model link = link_model::from_gbps(0.0, 0.0);
  /// Group consecutive accesses of one (step, layer) into a protected call (default), or replay
  /// every access on its own.
  bool protect_calls = true;
  /// Steps at which sequences begin, increasing: each access's `access_context::position` is its
  /// step minus the last start at or before it (the step itself before the first start). Empty:
  /// every position is 0. `simulate(trace, ...)` takes the trace's own when this is empty.
  std::vector<std::size_t> sequence_starts{};
};

/// What happened.
struct sim_result {
  std::string policy;                  ///< policy name
  cache_stats stats;                   ///< accesses, hits, misses, evictions, collision misses
  std::vector<cache_stats> per_layer;  ///< the same counters per layer of the accessed expert
  std::uint64_t bytes_moved = 0;       ///< misses x bytes_per_expert
  double stall_seconds = 0.0;          ///< misses x link.copy_seconds(expert_bytes)
};

namespace detail {

template <class A>
concept access_like = requires(const A& a) {
  { a.step } -> std::convertible_to<std::uint32_t>;
  { a.layer } -> std::convertible_to<std::int32_t>;
  { a.expert } -> std::convertible_to<std::int32_t>;
};

/// A range whose elements are access-like.
template <class S>
concept access_range =
    std::ranges::input_range<const S> && access_like<std::ranges::range_value_t<const S>>;

struct access_sink_archetype {
  void operator()(const access&) const {}
};

/// Calls `f(access)` for every element of a range, or forwards to a callable source.
template <class Source, class F>
void visit(const Source& source, F&& f) {
  if constexpr (access_range<Source>) {
    for (const auto& a : source) {
      f(access{static_cast<std::uint32_t>(a.step), static_cast<std::int32_t>(a.layer),
               static_cast<std::int32_t>(a.expert)});
    }
  } else {
    source([&](const auto& a) {
      f(access{static_cast<std::uint32_t>(a.step), static_cast<std::int32_t>(a.layer),
               static_cast<std::int32_t>(a.expert)});
    });
  }
}

}  // namespace detail

/// An access source: a range of access-like values, or a callable taking a visitor.
template <class S>
concept access_source =
    detail::access_range<S> || std::invocable<const S&, detail::access_sink_archetype>;

/// @brief Replays `source` through `Policy` (default-constructed; `belady` is built from the
/// source itself, which is then visited twice and must be re-iterable).
///
/// O(accesses x policy cost); memory O(key space + largest call), plus O(accesses) for belady.
/// @throws wisp::logic_error if the shape or capacity is invalid (capacity in [1, E] per layer,
///   [1, L*E] global), an access is out of the shape, steps decrease, or a call requests more
///   distinct experts than the capacity (per layer, or in total).
template <eviction_policy Policy, access_source Source>
sim_result simulate(moe_shape shape, const Source& source, const sim_config& config);

/// @brief The same, with policies made by `make_policy(layer)` (per-layer scope: once per layer;
/// global scope: once, with layer -1). Lets a caller configure a policy.
template <eviction_policy Policy, access_source Source, class MakePolicy>
requires std::invocable<MakePolicy&, std::int32_t> sim_result simulate(moe_shape shape,
                                                                       const Source& source,
                                                                       const sim_config& config,
                                                                       MakePolicy make_policy);

/// @brief Type-erased entry point for tools: picks a built-in policy by name (`visit_policy`:
/// `-` reads as `_`, so "least-stale" is `least_stale`).
/// @throws wisp::logic_error on an unknown name (the message lists the known ones), and as
///   `simulate`.
template <access_source Source>
sim_result simulate_named(std::string_view policy, moe_shape shape, const Source& source,
                          const sim_config& config);

}  // namespace wisp

#include <wisp/sim/detail/simulate.inl>
