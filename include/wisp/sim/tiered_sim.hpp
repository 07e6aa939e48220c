// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The compression-aware hierarchy on a routing trace: each MoE layer's F/C/S/E pools
/// (`tiered_cache`) replayed call by call, each call scheduled by the cache-affinity scheduler,
/// against a plain full-tensor cache of the same memory, with the planner's expectation beside
/// the replay.
///
/// **Model.** A layer's experts have `tensors` tensors of `tensor_elements` BF16 values; an SM
/// chunk is one byte per value, the compressed E-chunks `exponent_ratio` bytes per value. The
/// slow store is read over `link` (a `link_model`: each read costs its latency plus bytes over the
/// bandwidth) by one I/O thread (u = one SM chunk's read, v = one E-chunk's read), a decode thread
/// turns an E-chunk into exponents at `decode_bytes_per_second` of BF16 output (c), recovery is
/// free (on the device, at memory speed) and each routed expert then executes for
/// `execute_seconds`. The plain cache is the same frequency-ranked dispatch with only an F pool of
/// `budget_bytes / full bytes` experts: its misses read full tensors (2 bytes per value) and need
/// no decode; its makespan is the reads back to back with each expert executing after its own
/// reads.
///
/// **Per call, reported.** *measured*: the makespan of Algorithm 1's schedule (exact event
/// simulation); *estimated*: Algorithm 3 on the call's observed hit pattern; *expected* (per
/// call, from the model): `sum_h P(h) T(h)` with q fitted to the trace's own rank marginals.
/// @code
/// wisp::tiered_sim_config cfg = wisp::tiered_sim_config::deepseek_v2_lite();
/// cfg.link = {.bytes_per_second = 3.5e9, .latency_seconds = 0.0};
/// cfg.budget_bytes = 16 * cfg.full_bytes();
/// cfg.capacity = wisp::plan_for_trace(trace, cfg).best.sizes;
/// wisp::tiered_sim_result r = wisp::simulate_tiered(trace, cfg);
/// // r.measured_seconds vs r.plain_seconds, r.patterns, r.bytes_read, ...
/// @endcode
#pragma once

#include <wisp/core/error.hpp>
#include <wisp/tiered/affinity_scheduler.hpp>
#include <wisp/tiered/tier_model.hpp>
#include <wisp/tiered/tiered_cache.hpp>
#include <wisp/trace/routing_trace.hpp>
#include <wisp/transfer/timeline.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

namespace wisp {

/// @brief What `simulate_tiered` models (see the file description).
struct tiered_sim_config {
  std::uint32_t tensors = 3;                    ///< n: tensors per expert
  std::uint64_t tensor_elements = 2048 * 1408;  ///< BF16 values per tensor
  double exponent_ratio = 0.33;                 ///< compressed E-chunk bytes per value (rho)
  std::uint32_t e_chunks = 8;                   ///< K
  std::uint32_t threads = 8;                    ///< L decode threads
  link_model link{.bytes_per_second = 3.5e9, .latency_seconds = 0.0};  ///< the slow store's reads
  double decode_bytes_per_second = 2.28e9;  ///< one thread's decode rate, BF16 output bytes
  double execute_seconds = 50e-6;           ///< p: one expert's execution
  std::uint64_t budget_bytes = 0;  ///< memory of one layer's pools (and of the plain cache)
  tier_sizes capacity{};           ///< the hierarchy's pools (e.g. from `plan_for_trace`)
  std::int32_t tolerance = 0;      ///< delta
  double grid_step = 0.05;         ///< the planner's grid
  std::array<bool, tier_count> enabled{true, true, true, true};  ///< the planner's pools

  /// DeepSeek-V2-Lite's routed experts (three 2048 x 1408 matrices), Huffman-coded exponents.
  [[nodiscard]] static tiered_sim_config deepseek_v2_lite() { return {}; }
  [[nodiscard]] std::uint64_t full_bytes() const noexcept { return 2 * tensors * tensor_elements; }
  /// Bytes per expert in F, C, S, E.
  [[nodiscard]] tier_bytes bytes() const noexcept {
    const auto sm = static_cast<std::uint64_t>(tensors) * tensor_elements;
    const auto e = static_cast<std::uint64_t>(std::ceil(exponent_ratio * static_cast<double>(sm)));
    return {2 * sm, sm + e, sm, e};
  }
  /// The schedule's durations.
  [[nodiscard]] tier_costs schedule() const noexcept {
    const auto n = static_cast<double>(tensor_elements);
    return {.sm_read = read_seconds(n),
            .e_read = read_seconds(exponent_ratio * n / e_chunks),
            .decode = 2.0 * n / e_chunks / decode_bytes_per_second,
            .threads = threads,
            .e_chunks = e_chunks,
            .tensors = tensors,
            .recover = 0.0};
  }
  /// Seconds one read of `bytes` (fractional: an average chunk) takes over `link`.
  [[nodiscard]] double read_seconds(double bytes) const noexcept {
    return link.latency_seconds + bytes / link.bytes_per_second;
  }
  /// Algorithm 3's constants.
  [[nodiscard]] tier_costs costs() const noexcept { return schedule(); }
  /// @throws wisp::logic_error naming the field if a size, rate or count is out of range.
  void validate() const {
    WISP_EXPECTS(tensors >= 1 && tensor_elements >= 1 && e_chunks >= 1 && threads >= 1,
                 "tiered_sim_config: tensors ", tensors, ", tensor_elements ", tensor_elements,
                 ", e_chunks ", e_chunks, " and threads ", threads, " must be >= 1");
    WISP_EXPECTS(exponent_ratio > 0.0 && exponent_ratio <= 1.0,
                 "tiered_sim_config: exponent_ratio ", exponent_ratio, " is outside (0, 1]");
    link.validate();
    WISP_EXPECTS(decode_bytes_per_second > 0.0 && std::isfinite(decode_bytes_per_second),
                 "tiered_sim_config: decode ", decode_bytes_per_second,
                 " B/s must be finite and > 0");
    WISP_EXPECTS(std::isfinite(execute_seconds) && execute_seconds >= 0.0,
                 "tiered_sim_config: execute_seconds ", execute_seconds, " must be >= 0");
    std::uint64_t used = 0;
    const tier_bytes b = bytes();
    for (std::size_t p = 0; p < tier_count; ++p) {
      WISP_EXPECTS(capacity[p] >= 0, "tiered_sim_config: pool ", to_string(static_cast<tier>(p)),
                   " capacity ", capacity[p], " is negative");
      used += static_cast<std::uint64_t>(capacity[p]) * b[p];
    }
    WISP_EXPECTS(used <= budget_bytes, "tiered_sim_config: the pools take ", used,
                 " bytes, more than the budget of ", budget_bytes);
  }
};

/// @brief Per-rank marginal inclusion probabilities of a trace, pooled over layers: for each
/// layer, its experts' call counts sorted in decreasing order; `f[r]` is the mean over layers of
/// the rank-r count divided by that layer's calls. Sums to `top_k` (a call's ids are distinct).
/// O(accesses + layers x E log E).
/// @throws wisp::logic_error if the trace has no call.
[[nodiscard]] inline std::vector<double> rank_marginals(const routing_trace& t) {
  const auto layers = static_cast<std::size_t>(t.shape().layers);
  const auto experts = static_cast<std::size_t>(t.shape().experts);
  std::vector<std::uint64_t> counts(layers * experts, 0);
  std::vector<std::uint64_t> calls(layers, 0);
  t.for_each_call([&](std::size_t, std::int32_t layer, std::span<const std::int32_t> ids) {
    ++calls[static_cast<std::size_t>(layer)];
    for (const std::int32_t e : ids) {
      ++counts[static_cast<std::size_t>(layer) * experts + static_cast<std::size_t>(e)];
    }
  });
  std::vector<double> f(experts, 0.0);
  std::size_t used = 0;
  for (std::size_t l = 0; l < layers; ++l) {
    if (calls[l] == 0) {
      continue;
    }
    ++used;
    std::vector<std::uint64_t> c(counts.begin() + static_cast<std::ptrdiff_t>(l * experts),
                                 counts.begin() + static_cast<std::ptrdiff_t>((l + 1) * experts));
    std::sort(c.rbegin(), c.rend());
    for (std::size_t r = 0; r < experts; ++r) {
      f[r] += static_cast<double>(c[r]) / static_cast<double>(calls[l]);
    }
  }
  WISP_EXPECTS(used > 0, "rank_marginals: the trace has no call");
  for (double& x : f) {
    x /= static_cast<double>(used);
  }
  return f;
}

/// @brief Plans the pools of `cfg` for `t` (Algorithm 4 on the trace's rank marginals, fitted
/// with `fit_selection_probabilities`). O(grid points x (E k + C(k + 4, 4))).
/// @throws wisp::logic_error as `rank_marginals`, `fit_selection_probabilities`, `plan_tiers`.
[[nodiscard]] inline tier_plan plan_for_trace(const routing_trace& t,
                                              const tiered_sim_config& cfg) {
  const std::vector<double> f = rank_marginals(t);
  const selection_fit fit = fit_selection_probabilities(f, t.shape().top_k);
  return plan_tiers({.q = fit.q,
                     .k = t.shape().top_k,
                     .budget_bytes = cfg.budget_bytes,
                     .bytes = cfg.bytes(),
                     .costs = cfg.costs(),
                     .enabled = cfg.enabled,
                     .grid_step = cfg.grid_step});
}

/// @brief What `simulate_tiered` measured. Times are summed over every layer call.
struct tiered_sim_result {
  std::uint64_t calls = 0;
  tiered_stats stats;  ///< the hierarchy's counters, summed over layers
  std::map<std::array<std::int32_t, tier_count>, std::uint64_t> patterns;  ///< observed h -> calls
  std::map<std::array<std::int32_t, tier_count>, double> model;  ///< P(h) of the fitted model
  double measured_seconds = 0.0;   ///< sum of Algorithm 1 schedule makespans
  double estimated_seconds = 0.0;  ///< sum of Algorithm 3 on the observed patterns
  double expected_seconds = 0.0;   ///< calls x the model's expected makespan
  std::uint64_t bytes_read = 0;    ///< read from the slow store by the hierarchy
  std::uint64_t plain_hits = 0;    ///< the plain cache: hits of its F pool
  std::uint64_t plain_misses = 0;
  double plain_seconds = 0.0;  ///< its makespans, summed
  std::uint64_t plain_bytes_read = 0;
  std::int32_t plain_capacity = 0;  ///< experts the plain cache holds per layer
  /// Total variation distance between the observed and the model's pattern distributions.
  [[nodiscard]] double pattern_distance() const {
    double d = 0.0;
    for (const auto& [h, p] : model) {
      const auto it = patterns.find(h);
      const double seen =
          it == patterns.end() ? 0.0 : static_cast<double>(it->second) / static_cast<double>(calls);
      d += std::abs(seen - p);
    }
    for (const auto& [h, n] : patterns) {
      d += model.contains(h) ? 0.0 : static_cast<double>(n) / static_cast<double>(calls);
    }
    return d / 2.0;
  }
};

namespace detail {
// The plain cache's makespan: hits execute first; misses read their full tensors back to back,
// each expert executing after its own reads.
inline double plain_makespan(std::int32_t hits, std::int32_t misses, double full_read,
                             double execute) {
  double gpu = hits * execute;
  double io = 0.0;
  for (std::int32_t i = 0; i < misses; ++i) {
    io += full_read;
    gpu = std::max(gpu, io) + execute;
  }
  return gpu;
}
}  // namespace detail

/// @brief Replays `t` (per-layer pools, one call per step and layer) through the hierarchy of
/// `cfg` and through the plain cache of the same budget (see the file description). O(accesses x
/// log E) plus one schedule per distinct hit pattern (memoised: every expert has the same shape
/// and execution time). Calls must have `top_k` distinct experts.
/// @throws wisp::logic_error on an invalid config or a call with repeated experts.
[[nodiscard]] inline tiered_sim_result simulate_tiered(const routing_trace& t,
                                                       const tiered_sim_config& cfg) {
  cfg.validate();
  const std::int32_t experts = t.shape().experts;
  const std::int32_t k = t.shape().top_k;
  tiered_sim_result r;
  r.plain_capacity = static_cast<std::int32_t>(std::min<std::uint64_t>(
      static_cast<std::uint64_t>(experts), cfg.budget_bytes / cfg.full_bytes()));
  std::vector<tiered_cache<>> tiers;
  std::vector<tiered_cache<>> plain;
  for (std::int32_t l = 0; l < t.shape().layers; ++l) {
    tiers.emplace_back(experts, tier_config{cfg.capacity, cfg.tolerance});
    plain.emplace_back(experts, tier_config{{r.plain_capacity, 0, 0, 0}, cfg.tolerance});
  }
  const tier_costs sp = cfg.schedule();
  const tier_costs costs = cfg.costs();
  const double full_read = cfg.read_seconds(2.0 * static_cast<double>(cfg.tensor_elements));
  const auto per_value = [&](double bytes_per_value) {
    return static_cast<std::uint64_t>(std::llround(bytes_per_value * cfg.tensor_elements)) *
           cfg.tensors;
  };
  const std::uint64_t sm_bytes = per_value(1.0);
  const std::uint64_t e_bytes = per_value(cfg.exponent_ratio);
  std::map<std::array<std::int32_t, tier_count>, double> schedule_memo;
  std::vector<layer_expert> call(static_cast<std::size_t>(k));
  std::uint64_t time = 0;
  t.for_each_call([&](std::size_t step, std::int32_t layer, std::span<const std::int32_t> ids) {
    const access_context ctx{.step = static_cast<std::uint32_t>(step), .layer = 0, .time = time++};
    tiered_cache<>& cache = tiers[static_cast<std::size_t>(layer)];
    const std::span<const residency> where = cache.lookup(ids, ctx);
    WISP_EXPECTS(static_cast<std::int32_t>(where.size()) == k, "simulate_tiered: step ", step,
                 " layer ", layer, " routes ", where.size(), " distinct experts, not top_k = ", k);
    const hit_pattern h = cache.last_pattern();
    ++r.patterns[h.hits];
    auto [it, fresh] = schedule_memo.try_emplace(h.hits, 0.0);
    if (fresh) {
      for (std::size_t i = 0; i < where.size(); ++i) {
        call[i] = {static_cast<std::int32_t>(i), where[i], cfg.tensors, cfg.execute_seconds};
      }
      it->second = schedule_layer(call, sp).makespan;
    }
    r.measured_seconds += it->second;
    r.estimated_seconds += estimate_makespan(costs, k, h);
    const std::int32_t misses = k - h.total();
    r.bytes_read += static_cast<std::uint64_t>(h.hits[3] + misses) * sm_bytes +
                    static_cast<std::uint64_t>(h.hits[2] + misses) * e_bytes;
    cache.dispatch(ctx);
    tiered_cache<>& p = plain[static_cast<std::size_t>(layer)];
    (void)p.lookup(ids, ctx);
    const std::int32_t plain_hits = p.last_pattern().hits[0];
    r.plain_hits += static_cast<std::uint64_t>(plain_hits);
    r.plain_misses += static_cast<std::uint64_t>(k - plain_hits);
    r.plain_bytes_read += static_cast<std::uint64_t>(k - plain_hits) * cfg.full_bytes();
    r.plain_seconds += detail::plain_makespan(plain_hits, k - plain_hits, cfg.tensors * full_read,
                                              cfg.execute_seconds);
    p.dispatch(ctx);
    ++r.calls;
  });
  for (const tiered_cache<>& c : tiers) {
    r.stats += c.stats();
  }
  if (r.calls > 0) {
    const selection_fit fit = fit_selection_probabilities(rank_marginals(t), k);
    const hit_distribution d(fit.q, k, cfg.capacity);
    d.for_each([&](const hit_pattern& h, double p) {
      if (p > 0.0) {
        r.model[h.hits] = p;
      }
    });
    r.expected_seconds = static_cast<double>(r.calls) * expected_makespan(d, costs);
  }
  return r;
}

}  // namespace wisp
