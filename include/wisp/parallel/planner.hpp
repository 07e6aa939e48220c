// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Placement planning from routing statistics: which experts to replicate and on which
/// ranks, and how to split a total device budget (expert slots) across the ranks, to minimise the
/// slowest rank's modelled step. Also `eplb_placement`, the EPLB-style placement by load alone.
///
/// **The model** (`ep_step_model`). For layer `l` and logical expert `e`, `load(l, e)` is the
/// expected number of (token, expert) pairs one call of the layer routes to `e`, and
/// `q = 1 - exp(-load)` the probability that a call routes to it at all (its pairs as a Poisson
/// count). Rank `r`, with `b_r` device slots, keeps resident the `b_r` experts of largest `q` among
/// those it holds (over all layers; ties to the lower layer, then expert). An expert kept by `m`
/// ranks is served there; one kept nowhere is copied once per call that routes to it, to one of
/// its `n` replicas. With the replica choice of `replica_chooser` (resident replica first, each
/// copy to the least-loaded replica), each of rank `r`'s experts adds to its expected step
///
/// - kept on `r`: `(q x expert_seconds + load x token_seconds) / m`;
/// - kept on another rank only: nothing;
/// - kept nowhere: `(q x (copy_seconds[r] + expert_seconds) + load x token_seconds) / n`,
///
/// copy time on its own link plus its compute share. The plan minimises `max_r C_r`, the slowest
/// rank. A replica of an expert kept nowhere spreads its copies over more links; a replica of a
/// resident expert only takes a slot. This is where the plan differs from EPLB, which replicates
/// the experts with the most load: in an offloaded model those are the resident ones.
///
/// **The planner** (`plan_placement`): (1) the `total_slots` experts of largest `q` are the
/// resident set; each gets one replica, on the rank with the fewest resident experts so far; (2)
/// per layer, every other expert gets a replica on the rank with the least expected copy work, then
/// further replicas, the expert with the most copy work per replica first, until the ranks'
/// `local_experts` rows are full; (3) each rank's slots are its resident experts. From this plan,
/// the same placement with an even split, and EPLB's replication and packing by each replica's
/// cost when resident, (4) a first-improvement local search (a slot moved between ranks; a
/// replica dropped, added, moved, swapped or put in place of another, each followed by slot moves)
/// runs from each, and the best result is kept; the search takes plans up to a permutation of the
/// ranks: a move that does not help is followed by an exact step that moves every rank's replicas
/// and slots, as a whole, to the rank where they cost least (a rank's step is affine in its own
/// copy seconds, so this is an assignment problem, solved exactly in O(ranks^4); with the same
/// link on every rank it never applies); (5) then, while evaluations are left, trials alternate
/// between the best plan shaken by 1-6 random moves and a random plan (fixed seed); each is
/// searched the same way and kept when no worse. The random restarts matter under the load bound,
/// where few plans are admissible and the best one can be several moves from any other, each move
/// inadmissible alone. Plans are ranked by `max_r C_r`, then the next slowest rank and so on, among
/// those whose modelled token load is within `max_load_imbalance` of the mean (the others rank
/// after them, by their imbalance): the replica choice follows residency, so a plan that piles
/// resident experts on one rank would pile tokens there. Tests compare the result with an
/// exhaustive search over every placement and split of small instances.
/// @code
/// std::vector<double> load = wisp::ep_loads(trace, 16);  // [layers x experts], pairs per call
/// wisp::ep_plan plan = wisp::plan_placement(load, layers, experts,
///     {.ranks = 8, .local_experts = 16, .total_slots = 555, .min_slots = 6,
///      .costs = {.copy_seconds = std::vector<double>(8, 356e-6), .expert_seconds = 5.2e-6,
///                .token_seconds = 17e-9}});
/// // plan.placement, plan.rank_slots, plan.step_seconds
/// @endcode
#pragma once

#include <wisp/core/detail/random.hpp>
#include <wisp/core/error.hpp>
#include <wisp/parallel/detail/pack_layer.hpp>
#include <wisp/parallel/detail/plan_search.hpp>
#include <wisp/parallel/placement.hpp>
#include <wisp/parallel/replica_choice.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

namespace wisp {

/// @brief What `plan_placement` plans for.
struct ep_plan_config {
  std::int32_t ranks = 1;          ///< G
  std::int32_t local_experts = 1;  ///< physical experts per rank per layer (>= ceil(E / G))
  std::int32_t total_slots = 1;    ///< device budget in expert slots, all ranks and layers
  std::int32_t min_slots = 1;      ///< slots every rank must get (its pager's top_k)
  dispatch_costs costs{};          ///< copy (per rank), expert and token seconds
  /// Plans the search may evaluate (0: the constructive plan only). Each evaluation visits every
  /// replica, and the search stops after 2^26 visits in all, so large instances evaluate fewer.
  /// Where the ranks' copy seconds differ, a move that does not help is evaluated once more, for
  /// the rank assignment, uncounted.
  std::int32_t search_evaluations = 100000;
  /// The largest max / mean modelled token load per rank a plan may have (plans above it rank
  /// after every plan within it); infinity: no bound.
  double max_load_imbalance = 1.10;
};

/// @brief A plan: the placement, each rank's slots, and the model's step of each rank.
struct ep_plan {
  expert_placement placement;
  std::vector<std::int32_t> rank_slots;  ///< device slots of each rank; they sum to total_slots
  std::vector<double> rank_seconds;      ///< `C_r` of the model
  double step_seconds = 0.0;             ///< `max_r C_r`, the objective
  double load_imbalance = 1.0;           ///< max / mean modelled token load per rank
};

/// @brief The modelled step `C_r` of every rank (see the file comment) for `placement` with
/// `rank_slots` device slots per rank, under `loads` (`[layers x experts]`, pairs per call).
/// O(replicas x log replicas).
/// @throws wisp::logic_error, naming the values, if the loads do not match the placement or are
///   negative or not finite, `rank_slots` does not have one entry per rank or one is negative, or
///   `costs` is invalid.
[[nodiscard]] inline std::vector<double> ep_step_model(std::span<const double> loads,
                                                       const expert_placement& placement,
                                                       std::span<const std::int32_t> rank_slots,
                                                       const dispatch_costs& costs) {
  detail::check_loads("ep_step_model", loads, placement.layers(), placement.experts());
  costs.validate(placement.ranks());
  WISP_EXPECTS(rank_slots.size() == static_cast<std::size_t>(placement.ranks()),
               "ep_step_model: rank_slots has ", rank_slots.size(), " entries for ",
               placement.ranks(), " ranks");
  detail::plan_state s(loads, placement.layers(), placement.experts(), placement.ranks(),
                       placement.local_experts(), costs);
  for (std::int32_t r = 0; r < placement.ranks(); ++r) {
    WISP_EXPECTS(rank_slots[static_cast<std::size_t>(r)] >= 0, "ep_step_model: rank_slots[", r,
                 "] = ", rank_slots[static_cast<std::size_t>(r)], " is negative");
    s.slots()[static_cast<std::size_t>(r)] = rank_slots[static_cast<std::size_t>(r)];
    for (std::int32_t l = 0; l < placement.layers(); ++l) {
      for (std::int32_t i = 0; i < placement.local_experts(); ++i) {
        const std::int32_t e = placement.logical_of(r, l, i);
        if (e >= 0) {
          s.add(r, s.key(l, e));
        }
      }
    }
  }
  s.evaluate();
  return {s.seconds().begin(), s.seconds().end()};
}

/// @brief EPLB-style placement by load alone (DeepSeek's `rebalance_experts` on one node): each
/// layer's `ranks x local_experts - experts` redundant replicas go one at a time to the expert with
/// the largest load per replica (at most one replica per rank), then the replicas are packed
/// largest share first onto the least-loaded rank with room that does not hold the expert yet.
/// Deterministic (ties go to the lower expert or rank id). O(layers x physical x (experts +
/// ranks x local_experts)).
/// @throws wisp::logic_error, naming the values, on bad loads or counts, or if
///   `ranks x local_experts < experts`.
[[nodiscard]] inline expert_placement eplb_placement(std::span<const double> loads,
                                                     std::int32_t layers, std::int32_t experts,
                                                     std::int32_t ranks,
                                                     std::int32_t local_experts) {
  detail::check_loads("eplb_placement", loads, layers, experts);
  detail::check_ep_dims("eplb_placement", layers, experts, ranks, local_experts);
  WISP_EXPECTS(std::int64_t{ranks} * local_experts >= experts,
               "eplb_placement: ranks x local_experts = ", ranks, " x ", local_experts,
               " is below experts = ", experts);
  const std::int64_t physical =
      std::min<std::int64_t>(std::int64_t{ranks} * local_experts, std::int64_t{ranks} * experts);
  std::vector<std::vector<std::int32_t>> ranks_of(static_cast<std::size_t>(layers) * experts);
  std::vector<std::int32_t> count(static_cast<std::size_t>(experts));
  for (std::int32_t l = 0; l < layers; ++l) {
    const double* load = loads.data() + static_cast<std::size_t>(l) * experts;
    std::fill(count.begin(), count.end(), 1);
    for (std::int64_t extra = physical - experts; extra > 0; --extra) {
      std::int32_t best = -1;
      for (std::int32_t e = 0; e < experts; ++e) {
        const auto ue = static_cast<std::size_t>(e);
        if (count[ue] < ranks &&
            (best < 0 ||
             load[e] / count[ue] > load[best] / count[static_cast<std::size_t>(best)])) {
          best = e;
        }
      }
      ++count[static_cast<std::size_t>(best)];
    }
    detail::pack_layer(
        l, experts, ranks, local_experts, count,
        [&](std::int32_t e, std::int32_t n) { return load[e] / n; }, ranks_of);
  }
  for (auto& v : ranks_of) {
    std::sort(v.begin(), v.end());
  }
  return expert_placement::from_replica_ranks(layers, experts, ranks, local_experts, ranks_of);
}
namespace detail {

/// Checks `plan_placement`'s arguments; see there for what it throws.
inline void check_plan_config(const char* where, std::span<const double> loads, std::int32_t layers,
                              std::int32_t experts, const ep_plan_config& config) {
  check_loads(where, loads, layers, experts);
  check_ep_dims(where, layers, experts, config.ranks, config.local_experts);
  config.costs.validate(config.ranks);
  const std::int32_t g = config.ranks;
  const std::int32_t p = config.local_experts;
  WISP_EXPECTS(std::int64_t{g} * p >= experts, where, ": ranks x local_experts = ", g, " x ", p,
               " is below experts = ", experts);
  WISP_EXPECTS(config.min_slots >= 1, where, ": min_slots must be >= 1, got ", config.min_slots);
  const std::int64_t most = std::int64_t{g} * layers * p;
  WISP_EXPECTS(
      config.total_slots >= std::int64_t{g} * config.min_slots && config.total_slots <= most, where,
      ": total_slots ", config.total_slots, " must be in [ranks x min_slots = ", g, " x ",
      config.min_slots, " = ", std::int64_t{g} * config.min_slots,
      ", ranks x layers x local_experts = ", most, "]");
  WISP_EXPECTS(config.search_evaluations >= 0, where, ": search_evaluations must be >= 0, got ",
               config.search_evaluations);
  WISP_EXPECTS(config.max_load_imbalance >= 1, where,
               ": max_load_imbalance must be >= 1 (or infinity), got ", config.max_load_imbalance);
}

/// The modelled work of each (layer, rank) while the constructive plan is built.
class layer_work {
 public:
  layer_work(std::int32_t layers, std::int32_t ranks)
      : ranks_(ranks), work_(static_cast<std::size_t>(layers) * ranks, 0.0) {}
  double& operator()(std::int32_t l, std::int32_t r) {
    return work_[static_cast<std::size_t>(l) * ranks_ + r];
  }

 private:
  std::int32_t ranks_;
  std::vector<double> work_;
};

/// Step (1) of `plan_placement`: the resident set, one replica each, spread so that the ranks keep
/// even counts. Marks them in `is_resident` (one entry per key) and returns each rank's count.
inline std::vector<std::int32_t> place_resident(plan_state& s, const ep_plan_config& config,
                                                layer_work& work,
                                                std::vector<std::uint8_t>& is_resident) {
  const std::int32_t g = config.ranks;
  const auto keys = static_cast<std::int32_t>(is_resident.size());
  const std::int32_t resident = std::min(config.total_slots, keys);
  std::vector<std::int32_t> kept(static_cast<std::size_t>(g), 0);
  for (std::int32_t i = 0; i < resident; ++i) {
    const std::int32_t k = s.by_q()[static_cast<std::size_t>(i)];
    const std::int32_t l = k / s.experts();
    std::int32_t best = -1;
    for (std::int32_t r = 0; r < g; ++r) {
      if (!s.room(r, l)) {
        continue;
      }
      const auto ur = static_cast<std::size_t>(r);
      if (best < 0 || kept[ur] < kept[static_cast<std::size_t>(best)] ||
          (kept[ur] == kept[static_cast<std::size_t>(best)] && work(l, r) < work(l, best))) {
        best = r;
      }
    }
    if (best < 0) {
      continue;  // the layer's rows are full of resident experts: this one stays cold
    }
    s.add(best, k);
    is_resident[static_cast<std::size_t>(k)] = 1;
    ++kept[static_cast<std::size_t>(best)];
    work(l, best) += s.q(k) * config.costs.expert_seconds;
  }
  return kept;
}

/// Step (2) of `plan_placement` for layer `l`: every expert not resident gets a first replica on
/// the rank with the least copy work in its layer, then more replicas, the most copy work per
/// replica first, while rows are free.
inline void place_cold_layer(plan_state& s, std::int32_t l, const ep_plan_config& config,
                             double mean_copy, layer_work& work,
                             const std::vector<std::uint8_t>& is_resident) {
  const std::int32_t g = config.ranks;
  const std::int32_t experts = s.experts();
  const auto cold_work = [&](std::int32_t k, std::int32_t n) {
    return (s.q(k) * (mean_copy + config.costs.expert_seconds) +
            s.load(k) * config.costs.token_seconds) /
           n;
  };
  std::vector<std::int32_t> cold;
  for (std::int32_t e = 0; e < experts; ++e) {
    if (!is_resident[static_cast<std::size_t>(s.key(l, e))]) {
      cold.push_back(s.key(l, e));
    }
  }
  std::stable_sort(cold.begin(), cold.end(), [&](std::int32_t a, std::int32_t b) {
    return cold_work(a, 1) > cold_work(b, 1);
  });
  const auto lightest = [&](std::int32_t k) {
    std::int32_t best = -1;
    for (std::int32_t r = 0; r < g; ++r) {
      if (s.room(r, l) && !s.holds(r, k) && (best < 0 || work(l, r) < work(l, best))) {
        best = r;
      }
    }
    return best;
  };
  for (const std::int32_t k : cold) {
    std::int32_t r = lightest(k);
    WISP_EXPECTS(r >= 0, "plan_placement: layer ", l, " has no free row for expert ", k % experts,
                 " (local_experts too small)");
    s.add(r, k);
    work(l, r) += cold_work(k, 1);
  }
  while (true) {
    std::int32_t pick = -1;
    std::int32_t to = -1;
    for (const std::int32_t k : cold) {
      const std::int32_t r = lightest(k);
      if (r >= 0 && (pick < 0 || cold_work(k, s.replicas(k)) > cold_work(pick, s.replicas(pick)))) {
        pick = k;
        to = r;
      }
    }
    if (pick < 0) {
      break;
    }
    // Its work spreads over one more replica.
    const std::int32_t n = s.replicas(pick);
    for (std::int32_t r = 0; r < g; ++r) {
      if (s.holds(r, pick)) {
        work(l, r) -= cold_work(pick, n) - cold_work(pick, n + 1);
      }
    }
    s.add(to, pick);
    work(l, to) += cold_work(pick, n + 1);
  }
}

/// Step (3) of `plan_placement`: each rank's slots are its `kept` resident experts (the rest
/// spread round-robin); ranks below min_slots take from the largest.
inline void split_slots(plan_state& s, const ep_plan_config& config,
                        const std::vector<std::int32_t>& kept) {
  const std::int32_t g = config.ranks;
  auto& slots = s.slots();
  std::int32_t given = 0;
  for (std::int32_t r = 0; r < g; ++r) {
    slots[static_cast<std::size_t>(r)] = kept[static_cast<std::size_t>(r)];
    given += kept[static_cast<std::size_t>(r)];
  }
  for (std::int32_t r = 0; given < config.total_slots; r = (r + 1) % g, ++given) {
    ++slots[static_cast<std::size_t>(r)];  // more slots than experts: spread the rest
  }
  for (std::int32_t r = 0; r < g; ++r) {
    while (slots[static_cast<std::size_t>(r)] < config.min_slots) {
      const auto donor =
          static_cast<std::size_t>(std::max_element(slots.begin(), slots.end()) - slots.begin());
      --slots[donor];
      ++slots[static_cast<std::size_t>(r)];
    }
  }
}

/// Splits `config.total_slots` evenly over the ranks of `s`, the first ranks taking the rest.
inline void split_slots_evenly(plan_state& s, const ep_plan_config& config) {
  const std::int32_t g = config.ranks;
  for (std::int32_t r = 0; r < g; ++r) {
    s.slots()[static_cast<std::size_t>(r)] =
        config.total_slots / g + (r < config.total_slots % g ? 1 : 0);
  }
}

/// A start for the search: EPLB's replication and packing by each replica's cost when resident
/// (what balances compute once everything fits), with an even split.
inline plan_state eplb_start(std::span<const double> loads, std::int32_t layers,
                             std::int32_t experts, const ep_plan_config& config) {
  const std::int32_t g = config.ranks;
  const std::int32_t p = config.local_experts;
  plan_state balanced(loads, layers, experts, g, p, config.costs);
  std::vector<std::vector<std::int32_t>> ranks_of(loads.size());
  std::vector<std::int32_t> count(static_cast<std::size_t>(experts));
  const auto kept_cost = [&](std::int32_t l, std::int32_t e, std::int32_t n) {
    const std::int32_t k = balanced.key(l, e);
    return (balanced.q(k) * config.costs.expert_seconds +
            balanced.load(k) * config.costs.token_seconds) /
           n;
  };
  for (std::int32_t l = 0; l < layers; ++l) {
    std::fill(count.begin(), count.end(), 1);
    const std::int64_t physical =
        std::min<std::int64_t>(std::int64_t{g} * p, std::int64_t{g} * experts);
    for (std::int64_t extra = physical - experts; extra > 0; --extra) {
      std::int32_t best = -1;
      for (std::int32_t e = 0; e < experts; ++e) {
        if (count[static_cast<std::size_t>(e)] < g &&
            (best < 0 || kept_cost(l, e, count[static_cast<std::size_t>(e)]) >
                             kept_cost(l, best, count[static_cast<std::size_t>(best)]))) {
          best = e;
        }
      }
      ++count[static_cast<std::size_t>(best)];
    }
    pack_layer(
        l, experts, g, p, count, [&](std::int32_t e, std::int32_t n) { return kept_cost(l, e, n); },
        ranks_of);
  }
  for (std::size_t k = 0; k < ranks_of.size(); ++k) {
    for (const std::int32_t r : ranks_of[k]) {
      balanced.add(r, static_cast<std::int32_t>(k));
    }
  }
  split_slots_evenly(balanced, config);
  return balanced;
}

/// Local search on `s` with at most `most` of the `left` evaluations; takes those it used from
/// `left`.
inline void search_within(plan_state& s, const ep_plan_config& config, std::int32_t most,
                          std::int32_t& left) {
  std::int32_t budget = std::min(most, left);
  const std::int32_t given = budget;
  local_search(s, config.costs.copy_seconds, config.min_slots, config.max_load_imbalance, budget);
  left -= given - budget;
}

/// Step (4) of `plan_placement`: local search from the constructive plan `s`, from it with an
/// even split, and from EPLB's plan; `s` becomes the best of the three.
inline void search_starts(plan_state& s, std::span<const double> loads, std::int32_t layers,
                          std::int32_t experts, const ep_plan_config& config, std::int32_t& left) {
  plan_state even = s;
  split_slots_evenly(even, config);
  plan_state balanced = eplb_start(loads, layers, experts, config);
  search_within(s, config, left / 3, left);
  search_within(even, config, left / 2, left);
  search_within(balanced, config, left, left);
  for (plan_state* other : {&even, &balanced}) {
    if (better(score(*other), score(s), config.max_load_imbalance)) {
      s = std::move(*other);
    }
  }
}

/// Step (5) of `plan_placement`: while evaluations are `left`, trials alternate: the best plan
/// shaken by a few random moves, and a random plan; each is searched and kept when no worse. The
/// restarts matter under a tight load bound: few plans are admissible there, and another basin's
/// can be several moves away, each inadmissible alone. A fixed seed keeps it deterministic.
inline void search_restarts(plan_state& s, std::span<const double> loads, std::int32_t layers,
                            std::int32_t experts, const ep_plan_config& config,
                            std::int32_t& left) {
  xoshiro256ss rng(0x5eed);
  plan_score best_score = score(s);
  for (std::int64_t trial_count = 0; left > 0; ++trial_count) {
    const bool shake = trial_count % 2 == 0;
    plan_state trial = shake ? s
                             : plan_state(loads, layers, experts, config.ranks,
                                          config.local_experts, config.costs);
    if (shake) {
      perturb(trial, rng, config.min_slots, 1 + static_cast<std::int32_t>(rng.below(6)));
    } else {
      random_plan(trial, rng, layers, config.min_slots, config.total_slots);
    }
    --left;
    search_within(trial, config, left, left);
    plan_score now = score(trial);
    if (!better(best_score, now, config.max_load_imbalance)) {  // no worse: walks plateaus
      s = std::move(trial);
      best_score = std::move(now);
    }
  }
}

}  // namespace detail

/// @brief Plans the placement and the budget split minimising the modelled slowest rank (see the
/// file comment). Deterministic. O(keys log keys + replicas x (ranks + local_experts)) to build,
/// plus at most `search_evaluations` evaluations of O(replicas) each (and 2^26 replica visits in
/// all); where the links differ, O(ranks^4) and one more evaluation for each move that does not
/// help (the rank assignment).
/// @throws wisp::logic_error, naming the values, on bad loads or counts, invalid costs,
///   `ranks x local_experts < experts`, `min_slots < 1`, `search_evaluations < 0`, or
///   `total_slots` outside `[ranks x min_slots, ranks x layers x local_experts]` (a split would
///   leave a rank below `min_slots`, or a slot with nothing to hold).
[[nodiscard]] inline ep_plan plan_placement(std::span<const double> loads, std::int32_t layers,
                                            std::int32_t experts, const ep_plan_config& config) {
  detail::check_plan_config("plan_placement", loads, layers, experts, config);
  const std::int32_t g = config.ranks;
  detail::plan_state s(loads, layers, experts, g, config.local_experts, config.costs);
  detail::layer_work work(layers, g);
  std::vector<std::uint8_t> is_resident(loads.size(), 0);
  const std::vector<std::int32_t> kept = detail::place_resident(s, config, work, is_resident);
  double mean_copy = 0.0;
  for (const double c : config.costs.copy_seconds) {
    mean_copy += c / g;
  }
  for (std::int32_t l = 0; l < layers; ++l) {
    detail::place_cold_layer(s, l, config, mean_copy, work, is_resident);
  }
  detail::split_slots(s, config, kept);
  // Every evaluation visits each replica: the visits bound caps the evaluations.
  std::int64_t replicas = 1;
  for (std::int32_t r = 0; r < g; ++r) {
    replicas += static_cast<std::int64_t>(s.held(r).size());
  }
  auto left = static_cast<std::int32_t>(
      std::min<std::int64_t>(config.search_evaluations, detail::search_visits / replicas));
  detail::search_starts(s, loads, layers, experts, config, left);
  detail::search_restarts(s, loads, layers, experts, config, left);
  const double best = s.evaluate();
  return {s.to_placement(),
          s.slots(),
          {s.seconds().begin(), s.seconds().end()},
          best,
          s.load_imbalance()};
}

}  // namespace wisp
