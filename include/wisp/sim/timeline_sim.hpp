// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The timeline simulator: a routing trace replayed through a slot cache on a modelled
/// device with one host-to-device link and a compute queue, with optional predictor-driven
/// prefetch and approximate miss policies. It shows when prefetch pays and when it does not.
///
/// **The model, per forward pass (one trace step), per layer `l`:**
/// 1. Layer `l`'s routing is known at `T_l`, when layer `l - 1`'s compute ends (the previous
///    pass's last layer for `l = 0`).
/// 2. Before `T_l` the link works through queued prefetches whenever it is free (they were
///    submitted at the previous layer's `T`): each starts at `max(link free, submission)`, loads
///    its expert into the cache at that moment (`slot_cache::prefetch`, never evicting the experts
///    of the layer computing meanwhile, nor what this gap already prefetched) and occupies the
///    link for `link.copy_seconds(expert_bytes)`. A prefetch whose layer started (or whose pass
///    ended) before it could start is cancelled and costs nothing.
/// 3. At `T_l` the layer's call accesses the cache. Each miss is a demand copy, queued ahead of
///    every prefetch not yet started (demand first; the link does not preempt a copy in flight):
///    it starts at `max(link free, T_l)`.
/// 4. The layer computes `compute_seconds + compute_per_token_seconds x tokens` once every expert
///    it routes is on the device (demand copies, and prefetches still in flight): it waits only for
///    its own experts. The wait is its stall.
/// 5. With prefetch on, layer `l` is observed into the pass and the predictor scores layer
///    `l + distance`; the prefetch policy's candidates that are not resident are queued at `T_l`.
///    After the pass the predictor learns it (online: predict, then learn).
///
/// TPOT is the modelled time per pass (one token per trace step). With no prefetch and zero
/// compute the stall is the serial model's (`simulate`: every miss costs one copy).
///
/// **Prefetch accounting.** A prefetch is *useful* when its layer's call in that pass routes the
/// expert. precision = useful / started; recall = useful / (useful + demand misses); wasted bytes
/// = (started - useful) x expert_bytes.
///
/// **Miss policies.** `miss_policy::drop` and `substitute` (APPROXIMATE, see
/// `<wisp/pager/miss_policy.hpp>`) rewrite each token's row before its call, using the trace's
/// gate weights for ranks (recorded order without weights); their cost to quality is reported as
/// the routed gate weight they dropped or moved. The trace records only the top-k, so
/// `substitute` ranks resident experts by the predictor's score instead of the router's.
///
/// **Hybrid misses.** With `miss_policy::hybrid` (exact, `<wisp/pager/hybrid.hpp>`), each call's
/// misses are split by `hybrid_splitter` under `timeline_config::hybrid`: a copied miss is a
/// demand copy as above; the others are computed by the host, leaving the cache unchanged, on one
/// host queue (each call's host work starts at `max(host free, T_l)` and lasts the cost model's
/// `call_seconds + host_seconds(experts, positions)`, `tokens` positions per expert). The layer
/// computes once its copies have landed and its host work is done. Each miss is valued by a
/// `reuse_value_estimator` (rate `hybrid_value_rate`, per-layer capacity: `capacity`, or
/// `capacity / layers` in global scope) times `hybrid.miss_seconds()`.
/// @code
/// wisp::timeline_config cfg;
/// cfg.capacity = 8;
/// cfg.link = {.bytes_per_second = 50e9, .latency_seconds = 10e-6};
/// cfg.expert_bytes = 17'301'504;
/// cfg.compute_seconds = 50e-6;
/// cfg.prefetch = {.rule = wisp::prefetch_rule::top_k};
/// wisp::timeline_result r = wisp::simulate_timeline<wisp::least_stale>(trace, cfg);
/// // r.tpot_seconds, r.stall_seconds, r.prefetch_precision, ...
/// @endcode
#pragma once

#include <wisp/cache/belady.hpp>
#include <wisp/cache/eviction_policy.hpp>
#include <wisp/cache/policies.hpp>
#include <wisp/cache/slot_cache.hpp>
#include <wisp/cache/visit_policy.hpp>
#include <wisp/core/error.hpp>
#include <wisp/pager/hybrid.hpp>
#include <wisp/pager/miss_policy.hpp>
#include <wisp/predict/coactivation.hpp>
#include <wisp/predict/prefetch.hpp>
#include <wisp/predict/routing_predictor.hpp>
#include <wisp/trace/routing_trace.hpp>
#include <wisp/transfer/timeline.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace wisp {

/// @brief What the timeline simulator models (see the file description).
struct timeline_config {
  cache_scope scope = cache_scope::per_layer;
  /// Slots per layer (per-layer scope) or of the one cache (global scope).
  std::int32_t capacity = 1;
  link_model link{};                       ///< the host-to-device link
  std::uint64_t expert_bytes = 0;          ///< bytes one expert copy moves
  double compute_seconds = 0.0;            ///< per layer, fixed part
  double compute_per_token_seconds = 0.0;  ///< per layer and token
  /// Tokens each layer computes per pass (a batch; the routing stays the trace's one token).
  std::int32_t tokens = 1;
  prefetch_config prefetch{};  ///< `rule = none`: demand paging only
  /// The co-activation predictor's settings (learned online), unless the caller passes its own
  /// predictor to `simulate_timeline`.
  coactivation_config predictor{};
  miss_options miss{};  ///< fetch (exact) by default
  /// `miss.policy == hybrid`: the cost model each call's misses are split by (its `copy_seconds`
  /// is replaced by the link's copy of `expert_bytes`), and the rate of the reuse value estimator
  /// that values them (see the file description).
  hybrid_cost_model hybrid{};
  double hybrid_value_rate = 0.25;

  /// Seconds one layer computes.
  [[nodiscard]] double layer_compute_seconds() const noexcept {
    return compute_seconds + compute_per_token_seconds * tokens;
  }
  /// @throws wisp::logic_error naming the field if a parameter is out of range.
  void validate() const {
    link.validate();
    WISP_EXPECTS(std::isfinite(compute_seconds) && compute_seconds >= 0.0,
                 "timeline_config: compute_seconds must be finite and >= 0, got ", compute_seconds);
    WISP_EXPECTS(std::isfinite(compute_per_token_seconds) && compute_per_token_seconds >= 0.0,
                 "timeline_config: compute_per_token_seconds must be finite and >= 0, got ",
                 compute_per_token_seconds);
    WISP_EXPECTS(tokens >= 1, "timeline_config: tokens must be >= 1, got ", tokens);
    WISP_EXPECTS(miss.always_fetch_top >= 0,
                 "timeline_config: miss.always_fetch_top must be >= 0, got ",
                 miss.always_fetch_top);
    if (miss.policy == miss_policy::hybrid) {
      hybrid.validate();
      WISP_EXPECTS(
          std::isfinite(hybrid_value_rate) && hybrid_value_rate > 0 && hybrid_value_rate <= 1,
          "timeline_config: hybrid_value_rate must be in (0, 1], got ", hybrid_value_rate);
    }
    prefetch.validate();
    predictor.validate();
  }
};

/// @brief What one timeline run measured.
struct timeline_result {
  std::string policy;              ///< eviction policy name
  cache_stats stats;               ///< demand accesses, hits, misses, prefetches, evictions
  std::uint64_t steps = 0;         ///< passes (tokens) replayed
  double total_seconds = 0.0;      ///< modelled time of the whole replay
  double compute_seconds = 0.0;    ///< time spent computing
  double stall_seconds = 0.0;      ///< time layers waited for their experts
  double tpot_seconds = 0.0;       ///< total_seconds / steps
  double link_busy_seconds = 0.0;  ///< time the link was copying
  std::uint64_t demand_copies = 0;
  std::uint64_t prefetches_started = 0;    ///< prefetch copies that ran on the link
  std::uint64_t prefetches_useful = 0;     ///< ... whose layer's call routed the expert
  std::uint64_t prefetches_cancelled = 0;  ///< dropped before starting (their layer had begun)
  std::uint64_t wasted_prefetch_bytes = 0;
  double prefetch_precision = 0.0;  ///< useful / started (0 without prefetch)
  double prefetch_recall = 0.0;     ///< useful / (useful + demand misses)
  miss_rewrite rewrite;             ///< what an approximate miss policy changed
  std::uint64_t host_experts = 0;   ///< hybrid: misses the host computed (not in `stats`)
  double host_busy_seconds = 0.0;   ///< hybrid: time the host queue was busy
  double routed_weight = 0.0;       ///< gate weight routed in total (quality denominators)
};

/// @brief Replays `trace` on the modelled device with eviction policy `Policy`, made by
/// `make_policy(layer)` (per-layer scope: once per layer; global: once, with -1). O(accesses x
/// (policy cost + prefetch scoring)); allocates its state once. A `predicted_next_use` policy gets
/// the simulator's own predictor and pass attached (global scope uses them). Not thread-safe in
/// itself; separate runs may go in parallel.
/// @throws wisp::logic_error on an invalid config, a capacity outside `[top_k, experts]` (per
///   layer) or `[top_k, layers x experts]` (global), `belady` with prefetch or another miss policy
///   than `fetch` (its future would not be the sequence replayed), or a policy breaking its
///   contract.
template <eviction_policy Policy, class MakePolicy>
timeline_result simulate_timeline(const routing_trace& trace, const timeline_config& config,
                                  MakePolicy make_policy);

/// @brief `simulate_timeline` with `predictor` (any `routing_predictor` of the trace's shape,
/// owned by the caller) in place of a co-activation predictor built from `config.predictor`: it
/// scores the prefetch candidates and `substitute`'s ranks, is attached to `predicted_next_use`,
/// and learns each pass once the pass is replayed (so it may arrive trained, and leaves trained).
/// A predictor with a `passes()` member is not asked while it reports 0 passes learned.
/// @throws as the overload above; whatever `predictor` throws.
template <eviction_policy Policy, routing_predictor Predictor, class MakePolicy>
timeline_result simulate_timeline(const routing_trace& trace, const timeline_config& config,
                                  MakePolicy make_policy, Predictor& predictor);

/// @brief `simulate_timeline` with a default-constructed policy; `belady` is built from the
/// trace's future, `predicted_next_use` gets the simulator's predictor attached.
template <eviction_policy Policy>
timeline_result simulate_timeline(const routing_trace& trace, const timeline_config& config);

/// The built-in policy named `policy` (`visit_policy`: the names of `builtin_policy_names`, `-`
/// read as `_`).
/// @throws wisp::logic_error on an unknown name, and as `simulate_timeline`.
inline timeline_result simulate_timeline_named(std::string_view policy, const routing_trace& trace,
                                               const timeline_config& config);

}  // namespace wisp

#include <wisp/sim/detail/timeline_sim.inl>
