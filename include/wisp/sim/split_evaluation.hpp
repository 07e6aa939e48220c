// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Trace-driven evaluation of expert/KV split policies (WiSP §5.3, Table 5), an experiment
/// harness beside the simulator (not in the umbrella header; `wisp evaluate` runs it): an expert
/// stream (a routing trace, one step per decoded token) and a KV stream (agentic sessions,
/// kv_workload.hpp) replayed against LRU pools sized by each policy.
///
/// Arms:
/// - **per-workflow oracle**: the best fixed cap in hindsight on this workload (for a workload that
///   shifts regime it is the *global oracle*: one best split over the whole session);
/// - **MV-WSA configurator**: the offline configurator run open-loop on the first
///   `representative_fraction` of the workload, then held fixed;
/// - **MV-WSA online**: the online controller (Algorithm 2), one burst per round, starting from
///   the 50-50 cap;
/// - **dual-resize**: the closed-form law of Appendix D on each round's peak KV blocks;
/// - **50-50**: half the budget to experts (cap rounded down, clamped to `[k, E]`);
/// - **Flux-prop**: KV-blind, expert-working-set-proportional: the smallest cap that catches
///   `flux_hit_fraction` of the expert stream's warm reuse, limited only by the budget (not the
///   admission floor).
///
/// Fixed arms are costed from the exact miss curves (the replay of a fixed split equals the
/// curve); adaptive arms are replayed with resizable LRU pools (the cache area's `slot_cache<lru>`:
/// a shrink evicts LRU entries, a grow adds empty room). The expert stream is served a (step,
/// layer) request at a time, the request's experts protected from each other as in wisp's pager,
/// and its curve is the call-granular one
/// (`reuse_granularity::call`); the KV stream is served one block access at a time. The
/// reported cost is the *warm* latency: misses other than first sight, which every arm pays alike
/// (the new prompt's prefill, an expert's first load).
/// @code
/// auto w = wisp::make_eval_workload("tool-burst", spec, phases, 1);
/// auto r = wisp::evaluate(spec, w, {.budget = 8_GiB});
/// for (const auto& arm : r.arms) std::cout << arm.name << ' ' << arm.seconds << '\n';
/// @endcode
#pragma once

#include <wisp/alloc/configurator.hpp>
#include <wisp/alloc/controller.hpp>
#include <wisp/alloc/cost_model.hpp>
#include <wisp/alloc/kv_workload.hpp>
#include <wisp/alloc/model_spec.hpp>
#include <wisp/alloc/resize.hpp>
#include <wisp/alloc/split.hpp>
#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/reuse/histogram.hpp>
#include <wisp/reuse/reuse_distance.hpp>
#include <wisp/reuse/scoped_counter.hpp>
#include <wisp/sim/detail/lru_pool.hpp>
#include <wisp/trace/routing_trace.hpp>
#include <wisp/trace/synthetic.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace wisp {

/// @brief One phase of an evaluation workload: the sessions' turn mix and the expert routing
/// behaviour during `rounds` rounds.
struct eval_phase {
  agentic_config kv;
  synthetic_config experts;
  std::uint32_t rounds = 0;
};

/// @brief A workload: the KV stream and the expert stream (one routing step per decoded token,
/// in round order).
struct eval_workload {
  std::string name;
  admission_floor floor;  ///< The sessions' concurrency x context (WiSP Eq. 6).
  kv_stream kv;
  routing_trace experts{moe_shape{1, 1, 1}};
};

/// @brief Builds a workload from phases run back to back (the sessions carry over; each phase's
/// expert steps come from its own synthetic router). Deterministic in `seed`.
/// @throws wisp::logic_error if a phase's router shape differs from the model's or the pool's
/// block size differs from the model's.
[[nodiscard]] inline eval_workload make_eval_workload(std::string name, const model_spec& m,
                                                      std::span<const eval_phase> phases,
                                                      std::uint64_t seed) {
  m.validate();
  WISP_EXPECTS(!phases.empty(), "an evaluation workload needs at least one phase");
  std::vector<agentic_phase> kv_phases;
  for (const auto& p : phases) {
    WISP_EXPECTS((moe_shape{p.experts.layers, p.experts.experts, p.experts.top_k} == m.shape()),
                 "a phase's router shape (", p.experts.layers, " x ", p.experts.experts, ", top-",
                 p.experts.top_k, ") differs from the model ", m);
    WISP_EXPECTS(p.kv.block_tokens == m.block_tokens, "the sessions' block size ",
                 p.kv.block_tokens, " differs from the model's ", m.block_tokens);
    kv_phases.push_back({p.kv, p.rounds});
  }
  eval_workload w;
  w.name = std::move(name);
  w.floor = {phases.front().kv.concurrency, phases.front().kv.context};
  w.kv = make_agentic_kv_stream(kv_phases, seed);
  w.experts = routing_trace{m.shape()};
  w.experts.reserve(w.kv.decode_tokens);
  std::vector<std::int32_t> ids(w.experts.shape().ids_per_step());
  for (std::uint32_t p = 0; p < phases.size(); ++p) {
    std::size_t steps = 0;
    for (const auto& r : w.kv.rounds) {
      steps += r.phase == p ? r.decode_tokens : 0;
    }
    if (steps == 0) {
      continue;
    }
    const auto t = make_synthetic_trace(phases[p].experts, steps, seed * 1000003u + p);
    for (std::size_t s = 0; s < t.steps(); ++s) {
      for (std::int32_t l = 0; l < t.shape().layers; ++l) {
        for (std::int32_t j = 0; j < t.shape().top_k; ++j) {
          ids[static_cast<std::size_t>(l * t.shape().top_k + j)] = t.expert(s, l, j);
        }
      }
      w.experts.append_step(ids);
    }
  }
  return w;
}

/// @brief Evaluation settings.
struct eval_params {
  byte_size budget{};
  cost_params costs{};
  controller_config controller{};
  dual_resize_config dual{};              ///< Headroom and dead-zone of the closed-form law.
  double representative_fraction = 0.25;  ///< Prefix the offline configurator sees.
  double flux_hit_fraction = 0.95;        ///< Flux-prop's share of warm expert reuse.
};

/// @brief One arm's outcome.
struct arm_result {
  std::string name;
  bool adaptive = false;
  bool admissible = true;  ///< Met the admission floor throughout.
  std::int32_t cap_start = 0;
  std::int32_t cap_end = 0;
  std::int32_t cap_min = 0;
  std::int32_t cap_max = 0;
  std::uint32_t moves = 0;
  std::uint64_t expert_warm_misses = 0;
  std::uint64_t kv_warm_misses = 0;
  double seconds = 0;  ///< Warm latency: expert + KV warm misses times their costs.
};

/// @brief An evaluation's arms and the fixed-split cost curve.
struct eval_result {
  std::string workload;
  admission_floor floor;
  std::int32_t max_feasible_cap = 0;
  std::vector<arm_result> arms;
  /// Warm seconds of every fixed cap k..E (NaN where the cap does not fit the budget).
  std::vector<double> fixed_seconds;

  /// @throws wisp::logic_error if there is no arm called `name`.
  [[nodiscard]] const arm_result& arm(std::string_view name) const {
    for (const auto& a : arms) {
      if (a.name == name) {
        return a;
      }
    }
    WISP_FAIL(logic_error, "no arm called '", name, "'");
  }
};

namespace detail {

// Exact distances of both streams, computed once per workload.
struct stream_distances {
  std::vector<std::uint16_t> expert_ids;  // canonical order
  std::vector<std::uint32_t> expert_d;    // per-layer distance, cold = reuse counter's cold
  std::vector<std::uint32_t> kv_d;
};

inline stream_distances measure(const eval_workload& w) {
  const auto& shape = w.experts.shape();
  stream_distances out;
  out.expert_ids.reserve(w.experts.access_count());
  out.expert_d.reserve(w.experts.access_count());
  scoped_reuse_counter per_layer{cache_scope::per_layer, static_cast<std::uint32_t>(shape.layers),
                                 static_cast<std::uint32_t>(shape.experts)};
  std::vector<std::uint32_t> call(static_cast<std::size_t>(shape.top_k));
  std::vector<std::uint32_t> d(call.size());
  w.experts.for_each_call(
      [&](std::uint32_t, std::int32_t layer, std::span<const std::int32_t> ids) {
        call.assign(ids.begin(), ids.end());
        per_layer.access_call(static_cast<std::uint32_t>(layer), call, d);
        out.expert_ids.insert(out.expert_ids.end(), ids.begin(), ids.end());
        out.expert_d.insert(out.expert_d.end(), d.begin(), d.end());
      });
  reuse_distance_counter kv{std::max<std::size_t>(w.kv.blocks, 1)};
  out.kv_d.reserve(w.kv.accesses.size());
  for (const std::uint32_t b : w.kv.accesses) {
    out.kv_d.push_back(kv.access(b));
  }
  return out;
}

// Exact curves of a prefix of the workload: rounds [0, rounds).
inline std::pair<miss_curve, miss_curve> curves(const eval_workload& w, const stream_distances& d,
                                                std::size_t rounds) {
  const auto& shape = w.experts.shape();
  std::uint64_t steps = 0;
  for (std::size_t r = 0; r < rounds; ++r) {
    steps += w.kv.rounds[r].decode_tokens;
  }
  const std::uint64_t expert_accesses = steps * shape.ids_per_step();
  const std::uint64_t kv_accesses = rounds == 0 ? 0 : w.kv.rounds[rounds - 1].end;
  reuse_histogram he{{cache_scope::per_layer, static_cast<std::uint32_t>(shape.layers),
                      static_cast<std::uint32_t>(shape.experts)}};
  for (std::uint64_t i = 0; i < expert_accesses; ++i) {
    he.record(d.expert_d[i]);
  }
  reuse_histogram hk{{cache_scope::stream, 1, 0}};
  for (std::uint64_t i = 0; i < kv_accesses; ++i) {
    hk.record(d.kv_d[i]);
  }
  return {miss_curve{he}, miss_curve{hk}};
}

/// Checks `evaluate`'s arguments; see there for what it throws.
inline void check_evaluation(const model_spec& m, const eval_workload& w, const eval_params& p) {
  m.validate();
  p.costs.validate();
  p.controller.validate();
  WISP_EXPECTS(!w.kv.rounds.empty(), "the workload has no rounds");
  WISP_EXPECTS(m.experts < 65536, "the evaluation stores expert ids in 16 bits");
  const auto& shape = w.experts.shape();
  WISP_EXPECTS(shape == m.shape(), "the workload's routing shape ", shape,
               " differs from the model ", m);
  WISP_EXPECTS(w.kv.block_tokens == m.block_tokens, "the workload's block size differs");
  WISP_EXPECTS(w.experts.steps() == w.kv.decode_tokens,
               "the expert stream must hold one step per decoded token");
}

/// Warm seconds under `c` of the split of `budget` with `cap` experts per layer.
inline double warm_seconds(const model_spec& m, byte_size budget, const cost_model<>& c,
                           std::int32_t cap) {
  const split s = make_split(m, budget, cap);
  return (c.expert_misses(cap) - static_cast<double>(c.expert_curve().cold())) *
             c.expert_miss_seconds() +
         (c.kv_misses(s.kv_blocks) - static_cast<double>(c.kv_curve().cold())) *
             c.kv_miss_seconds();
}

/// The arm `name` that keeps `cap` experts per layer throughout, measured on `cost`'s curves.
inline arm_result fixed_arm(const model_spec& m, byte_size budget, const admission_floor& floor,
                            const cost_model<>& cost, std::string name, std::int32_t cap) {
  arm_result a;
  a.name = std::move(name);
  a.cap_start = a.cap_end = a.cap_min = a.cap_max = cap;
  const split s = make_split(m, budget, cap);
  a.admissible = floor.admits(m, s);
  a.expert_warm_misses = cost.expert_curve().misses(cap) - cost.expert_curve().cold();
  a.kv_warm_misses = cost.kv_curve().misses(s.kv_blocks) - cost.kv_curve().cold();
  a.seconds = warm_seconds(m, budget, cost, cap);
  return a;
}

/// Flux-prop's cap: the smallest that keeps `p.flux_hit_fraction` of the warm expert reuse,
/// clamped to [top_k, by_budget].
inline std::int32_t flux_cap(const model_spec& m, const miss_curve& expert_curve,
                             const eval_params& p, std::int32_t by_budget) {
  std::int32_t flux = m.experts;
  const double warm_total = static_cast<double>(expert_curve.accesses() - expert_curve.cold());
  for (std::int32_t c = m.top_k; c <= m.experts; ++c) {
    const double warm_hits = static_cast<double>(expert_curve.accesses() - expert_curve.misses(c));
    if (warm_hits >= p.flux_hit_fraction * warm_total) {
      flux = c;
      break;
    }
  }
  return std::clamp(flux, m.top_k, by_budget);
}

/// Adds the fixed arms to `out`: the oracle (the configurator on the whole workload), the
/// MV-WSA configurator on a representative prefix, 50-50 and Flux-prop. Returns 50-50's cap.
inline std::int32_t add_fixed_arms(eval_result& out, const model_spec& m, const eval_workload& w,
                                   const eval_params& p, const stream_distances& dist,
                                   const cost_model<>& cost) {
  const configuration oracle = configure(cost, p.budget, out.floor);
  out.arms.push_back(fixed_arm(m, p.budget, out.floor, cost, "oracle", oracle.choice.expert_cap));

  const auto prefix_rounds =
      std::max<std::size_t>(1, static_cast<std::size_t>(p.representative_fraction *
                                                        static_cast<double>(w.kv.rounds.size())));
  const auto prefix = curves(w, dist, std::min(prefix_rounds, w.kv.rounds.size()));
  const configuration offline =
      configure(cost_model<>{m, prefix.first, prefix.second, p.costs}, p.budget, out.floor);
  out.arms.push_back(
      fixed_arm(m, p.budget, out.floor, cost, "mv-wsa-configurator", offline.choice.expert_cap));

  const std::int32_t by_budget =
      static_cast<std::int32_t>(std::min<std::uint64_t>(m.experts, p.budget / m.cap_unit_bytes()));
  WISP_EXPECTS(by_budget >= m.top_k, "the budget cannot hold top_k experts per layer");
  const std::int32_t half = std::clamp<std::int32_t>(
      static_cast<std::int32_t>((byte_size{p.budget.count() / 2}) / m.cap_unit_bytes()), m.top_k,
      by_budget);
  out.arms.push_back(fixed_arm(m, p.budget, out.floor, cost, "50-50", half));
  out.arms.push_back(fixed_arm(m, p.budget, out.floor, cost, "flux-prop",
                               flux_cap(m, cost.expert_curve(), p, by_budget)));
  return half;
}

/// An adaptive arm: replays the workload with resizable LRU pools from `start` experts per
/// layer; after each round `on_round(round index, round, its expert distances, its KV distances,
/// current split)` returns the next split.
template <class OnRound>
arm_result replay_arm(const model_spec& m, const eval_workload& w, const stream_distances& dist,
                      byte_size budget, const admission_floor& floor, const cost_model<>& cost,
                      std::int32_t start, std::string name, OnRound&& on_round) {
  arm_result a;
  a.name = std::move(name);
  a.adaptive = true;
  split current = make_split(m, budget, start);
  a.cap_start = a.cap_min = a.cap_max = start;
  std::vector<lru_pool> layers;
  for (std::int32_t l = 0; l < m.layers; ++l) {
    layers.emplace_back(m.experts, current.expert_cap);
  }
  lru_pool kv{std::max<std::uint32_t>(w.kv.blocks, 1), current.kv_blocks};
  std::uint64_t cursor = 0;
  const std::uint64_t per_step = w.experts.shape().ids_per_step();
  const auto k = static_cast<std::uint64_t>(w.experts.shape().top_k);
  std::vector<std::uint32_t> call(k);
  std::vector<std::uint8_t> hit(k);
  for (std::size_t r = 0; r < w.kv.rounds.size(); ++r) {
    const kv_round& round = w.kv.rounds[r];
    const std::uint64_t begin = cursor;
    const std::uint64_t end = cursor + std::uint64_t{round.decode_tokens} * per_step;
    for (std::uint64_t i = begin; i < end; i += k) {  // one (step, layer) call at a time
      const auto layer = static_cast<std::size_t>((i / k) % m.layers);
      std::copy_n(dist.expert_ids.begin() + static_cast<std::ptrdiff_t>(i), k, call.begin());
      layers[layer].access_call(call, hit);
      for (std::uint64_t j = 0; j < k; ++j) {
        if (hit[j] == 0 && dist.expert_d[i + j] != reuse_distance_counter::cold) {
          ++a.expert_warm_misses;
        }
      }
    }
    cursor = end;
    for (std::uint64_t i = round.begin; i < round.end; ++i) {
      if (!kv.access(w.kv.accesses[i]) && dist.kv_d[i] != reuse_distance_counter::cold) {
        ++a.kv_warm_misses;
      }
    }
    a.admissible = a.admissible && floor.admits(m, current);
    const split next =
        on_round(r, round, std::span(dist.expert_d).subspan(begin, end - begin),
                 std::span(dist.kv_d).subspan(round.begin, round.end - round.begin), current);
    if (next != current) {
      ++a.moves;
      for (auto& layer : layers) {
        layer.set_capacity(next.expert_cap);
      }
      kv.set_capacity(next.kv_blocks);
      current = next;
      a.cap_min = std::min(a.cap_min, current.expert_cap);
      a.cap_max = std::max(a.cap_max, current.expert_cap);
    }
  }
  a.cap_end = current.expert_cap;
  a.seconds = static_cast<double>(a.expert_warm_misses) * cost.expert_miss_seconds() +
              static_cast<double>(a.kv_warm_misses) * cost.kv_miss_seconds();
  return a;
}

}  // namespace detail

/// @brief Runs every arm on `w` (see the file comment). Deterministic.
/// Complexity: O(accesses) per adaptive arm plus O(E * curve) for the fixed arms.
/// @throws wisp::infeasible_error if no split meets the floor (`concurrency x context` of the
/// workload's sessions); wisp::logic_error on invalid parameters.
[[nodiscard]] inline eval_result evaluate(const model_spec& m, const eval_workload& w,
                                          const eval_params& p) {
  detail::check_evaluation(m, w, p);
  eval_result out;
  out.workload = w.name;
  out.floor = w.floor;
  out.max_feasible_cap = max_feasible_cap(m, p.budget, out.floor);

  const auto dist = detail::measure(w);
  const auto whole = detail::curves(w, dist, w.kv.rounds.size());
  const cost_model<> cost{m, whole.first, whole.second, p.costs};
  for (std::int32_t c = m.top_k; c <= m.experts; ++c) {
    out.fixed_seconds.push_back(m.expert_pool_bytes(c) <= p.budget
                                    ? detail::warm_seconds(m, p.budget, cost, c)
                                    : std::numeric_limits<double>::quiet_NaN());
  }
  const std::int32_t half = detail::add_fixed_arms(out, m, w, p, dist, cost);

  // Adaptive arms, from 50-50's cap or the largest feasible one.
  const std::int32_t start = std::min(half, out.max_feasible_cap);
  split_controller controller{m, p.budget, out.floor, p.costs, p.controller, start};
  out.arms.push_back(
      detail::replay_arm(m, w, dist, p.budget, out.floor, cost, start, "mv-wsa-online",
                         [&](std::size_t, const kv_round&, std::span<const std::uint32_t> ed,
                             std::span<const std::uint32_t> kd, const split&) {
                           for (const auto d : ed) {
                             controller.record_expert(d);
                           }
                           for (const auto d : kd) {
                             controller.record_kv(d);
                           }
                           const auto decision = controller.end_burst();
                           if (decision.moves()) {
                             controller.commit(decision);
                           }
                           return controller.current();
                         }));
  out.arms.push_back(detail::replay_arm(
      m, w, dist, p.budget, out.floor, cost, start, "dual-resize",
      [&](std::size_t, const kv_round& round, std::span<const std::uint32_t>,
          std::span<const std::uint32_t>, const split& current) {
        const auto plan =
            plan_dual_resize(m, p.budget, out.floor, current, round.working_blocks, p.dual);
        return plan.empty() ? current : plan.to;
      }));
  return out;
}

}  // namespace wisp
