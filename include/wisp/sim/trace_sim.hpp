// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `simulate` over a `wisp::routing_trace`: the shape comes from the trace and the
/// accesses from `for_each_access` (canonical order: step, layer, top-k ids as recorded).
/// @code
/// auto r = wisp::simulate<wisp::least_stale>(trace, {.scope = wisp::cache_scope::global,
///                                                         .capacity = 64});
/// @endcode
#pragma once

#include <wisp/sim/simulate.hpp>
#include <wisp/trace/routing_trace.hpp>

#include <string_view>

namespace wisp {

namespace detail {
/// Adapts a routing_trace to an access source (a callable taking a visitor).
struct trace_source {
  const routing_trace* trace;
  template <class F>
  void operator()(F&& f) const {
    trace->for_each_access(f);
  }
};
}  // namespace detail

/// The model shape of a trace.
[[nodiscard]] inline moe_shape shape_of(const routing_trace& trace) noexcept {
  return moe_shape{trace.shape().layers, trace.shape().experts};
}

namespace detail {
/// `config`, with the trace's sequence starts where it names none.
inline sim_config with_sequences(const routing_trace& trace, const sim_config& config) {
  sim_config out = config;
  if (out.sequence_starts.empty()) {
    out.sequence_starts.assign(trace.sequence_starts().begin(), trace.sequence_starts().end());
  }
  return out;
}
}  // namespace detail

/// Replays `trace` through `Policy` (token positions from the trace's sequence starts). See
/// `simulate(moe_shape, source, config)`.
/// @throws wisp::logic_error as `simulate`.
template <eviction_policy Policy>
sim_result simulate(const routing_trace& trace, const sim_config& config) {
  return simulate<Policy>(shape_of(trace), detail::trace_source{&trace},
                          detail::with_sequences(trace, config));
}

/// Replays `trace` through the built-in policy named `policy`. See `simulate_named`.
inline sim_result simulate_named(std::string_view policy, const routing_trace& trace,
                                 const sim_config& config) {
  return simulate_named(policy, shape_of(trace), detail::trace_source{&trace},
                        detail::with_sequences(trace, config));
}

}  // namespace wisp
