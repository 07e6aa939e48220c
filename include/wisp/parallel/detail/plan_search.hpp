// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The planner's search (internal to `<wisp/parallel/planner.hpp>`): the plan state with
/// its modelled step, the moves of the local search, the exact relabelling of ranks, and the
/// random changes and plans of the iterated search.
#pragma once

#include <wisp/core/detail/random.hpp>
#include <wisp/core/error.hpp>
#include <wisp/parallel/detail/rank_assignment.hpp>
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
namespace detail {

/// Replica visits the planner's search may spend (see `ep_plan_config::search_evaluations`).
inline constexpr std::int64_t search_visits = std::int64_t{1} << 26;

/// Checks a `[layers x experts]` load table.
inline void check_loads(const char* where, std::span<const double> loads, std::int32_t layers,
                        std::int32_t experts) {
  WISP_EXPECTS(layers >= 1 && experts >= 1, where, ": layers and experts must be >= 1, got ",
               layers, " and ", experts);
  WISP_EXPECTS(loads.size() == static_cast<std::size_t>(layers) * experts, where, ": loads has ",
               loads.size(), " entries but layers x experts = ", layers, " x ", experts, " = ",
               static_cast<std::int64_t>(layers) * experts);
  for (std::size_t i = 0; i < loads.size(); ++i) {
    WISP_EXPECTS(std::isfinite(loads[i]) && loads[i] >= 0, where, ": loads[", i, "] (layer ",
                 i / static_cast<std::size_t>(experts), ", expert ",
                 i % static_cast<std::size_t>(experts), ") must be finite and >= 0, got ",
                 loads[i]);
  }
}

/// @brief A placement and budget split being planned, with the model of the file comment.
///
/// Keys are `layer * experts + expert`; `order_[key]` is the key's position in decreasing `q`
/// (ties to the lower key), and each rank's keys are kept sorted by it, so a rank's resident set
/// is a prefix of its list and one evaluation is O(replicas).
class plan_state {
 public:
  plan_state(std::span<const double> loads, std::int32_t layers, std::int32_t experts,
             std::int32_t ranks, std::int32_t local_experts, const dispatch_costs& costs)
      : layers_(layers),
        experts_(experts),
        ranks_(ranks),
        local_experts_(local_experts),
        loads_(loads),
        costs_(&costs),
        q_(loads.size()),
        order_(loads.size()),
        by_order_(loads.size()),
        replicas_(loads.size(), 0),
        kept_(loads.size(), 0),
        held_(static_cast<std::size_t>(ranks)),
        rows_(static_cast<std::size_t>(layers) * ranks, 0),
        slots_(static_cast<std::size_t>(ranks), 0),
        seconds_(static_cast<std::size_t>(ranks), 0.0),
        tokens_(static_cast<std::size_t>(ranks), 0.0) {
    for (std::size_t k = 0; k < loads.size(); ++k) {
      q_[k] = -std::expm1(-loads[k]);
    }
    std::iota(by_order_.begin(), by_order_.end(), std::int32_t{0});
    std::stable_sort(by_order_.begin(), by_order_.end(),
                     [&](std::int32_t a, std::int32_t b) { return q_[a] > q_[b]; });
    for (std::size_t i = 0; i < by_order_.size(); ++i) {
      order_[static_cast<std::size_t>(by_order_[i])] = static_cast<std::int32_t>(i);
    }
  }

  [[nodiscard]] std::int32_t experts() const noexcept { return experts_; }
  [[nodiscard]] std::int32_t key(std::int32_t l, std::int32_t e) const noexcept {
    return l * experts_ + e;
  }
  /// Keys in decreasing q.
  [[nodiscard]] std::span<const std::int32_t> by_q() const noexcept { return by_order_; }
  [[nodiscard]] double q(std::int32_t k) const noexcept { return q_[static_cast<std::size_t>(k)]; }
  [[nodiscard]] double load(std::int32_t k) const noexcept {
    return loads_[static_cast<std::size_t>(k)];
  }
  [[nodiscard]] std::int32_t replicas(std::int32_t k) const noexcept {
    return replicas_[static_cast<std::size_t>(k)];
  }
  [[nodiscard]] bool holds(std::int32_t r, std::int32_t k) const {
    const auto& h = held_[static_cast<std::size_t>(r)];
    const auto it = std::lower_bound(h.begin(), h.end(), order_[static_cast<std::size_t>(k)],
                                     [&](std::int32_t held, std::int32_t o) {
                                       return order_[static_cast<std::size_t>(held)] < o;
                                     });
    return it != h.end() && *it == k;
  }
  [[nodiscard]] bool room(std::int32_t r, std::int32_t l) const noexcept {
    return rows_[static_cast<std::size_t>(l) * ranks_ + r] < local_experts_;
  }
  void add(std::int32_t r, std::int32_t k) {
    auto& h = held_[static_cast<std::size_t>(r)];
    const auto o = order_[static_cast<std::size_t>(k)];
    h.insert(std::lower_bound(h.begin(), h.end(), o,
                              [&](std::int32_t held, std::int32_t v) {
                                return order_[static_cast<std::size_t>(held)] < v;
                              }),
             k);
    ++replicas_[static_cast<std::size_t>(k)];
    ++rows_[static_cast<std::size_t>(k / experts_) * ranks_ + r];
  }
  void remove(std::int32_t r, std::int32_t k) {
    auto& h = held_[static_cast<std::size_t>(r)];
    h.erase(std::find(h.begin(), h.end(), k));
    --replicas_[static_cast<std::size_t>(k)];
    --rows_[static_cast<std::size_t>(k / experts_) * ranks_ + r];
  }
  [[nodiscard]] std::span<const std::int32_t> held(std::int32_t r) const noexcept {
    return held_[static_cast<std::size_t>(r)];
  }
  std::vector<std::int32_t>& slots() noexcept { return slots_; }
  [[nodiscard]] std::span<const double> seconds() const noexcept { return seconds_; }
  [[nodiscard]] std::span<const double> tokens() const noexcept { return tokens_; }
  /// Rank `r`'s expected copies per call at the last evaluation (the `q / n` of its experts kept
  /// nowhere): `seconds()[r]` is affine in `copy_seconds[r]` with this slope. O(its replicas).
  [[nodiscard]] double copies(std::int32_t r) const {
    const auto& h = held_[static_cast<std::size_t>(r)];
    double out = 0.0;
    for (std::size_t i = static_cast<std::size_t>(slots_[static_cast<std::size_t>(r)]);
         i < h.size(); ++i) {
      if (kept_[static_cast<std::size_t>(h[i])] == 0) {
        out += q(h[i]) / replicas(h[i]);
      }
    }
    return out;
  }

  /// Moves rank `r`'s replicas and slots to rank `to[r]` (a permutation). Replica and residency
  /// counts, and so each rank's token load and costs other than its copies, move with them.
  void permute(std::span<const std::int32_t> to) {
    std::vector<std::vector<std::int32_t>> held(held_.size());
    std::vector<std::int32_t> rows(rows_.size());
    std::vector<std::int32_t> slots(slots_.size());
    for (std::int32_t r = 0; r < ranks_; ++r) {
      const auto ur = static_cast<std::size_t>(r);
      const auto t = static_cast<std::size_t>(to[ur]);
      held[t] = std::move(held_[ur]);
      slots[t] = slots_[ur];
      for (std::int32_t l = 0; l < layers_; ++l) {
        rows[static_cast<std::size_t>(l) * ranks_ + t] =
            rows_[static_cast<std::size_t>(l) * ranks_ + ur];
      }
    }
    held_ = std::move(held);
    rows_ = std::move(rows);
    slots_ = std::move(slots);
  }

  /// Cost of key `k` on rank `r` when it is kept nowhere (its copies spread over its replicas).
  [[nodiscard]] double cold_cost(std::int32_t r, std::int32_t k) const noexcept {
    return (q(k) * (costs_->copy_seconds[static_cast<std::size_t>(r)] + costs_->expert_seconds) +
            load(k) * costs_->token_seconds) /
           replicas(k);
  }

  /// Evaluates the model for the current placement and slots: fills `seconds()`, returns the max.
  double evaluate() {
    std::fill(kept_.begin(), kept_.end(), 0);
    for (std::int32_t r = 0; r < ranks_; ++r) {
      const auto& h = held_[static_cast<std::size_t>(r)];
      const std::size_t n =
          std::min(h.size(), static_cast<std::size_t>(slots_[static_cast<std::size_t>(r)]));
      for (std::size_t i = 0; i < n; ++i) {
        ++kept_[static_cast<std::size_t>(h[i])];
      }
    }
    double worst = 0.0;
    for (std::int32_t r = 0; r < ranks_; ++r) {
      const auto& h = held_[static_cast<std::size_t>(r)];
      const auto n = static_cast<std::size_t>(slots_[static_cast<std::size_t>(r)]);
      double c = 0.0;
      double t = 0.0;
      for (std::size_t i = 0; i < h.size(); ++i) {
        const std::int32_t k = h[i];
        const std::int32_t m = kept_[static_cast<std::size_t>(k)];
        if (i < n) {
          c += (q(k) * costs_->expert_seconds + load(k) * costs_->token_seconds) / m;
          t += load(k) / m;
        } else if (m == 0) {
          c += cold_cost(r, k);
          t += load(k) / replicas(k);
        }
      }
      seconds_[static_cast<std::size_t>(r)] = c;
      tokens_[static_cast<std::size_t>(r)] = t;
      worst = std::max(worst, c);
    }
    return worst;
  }
  /// Max / mean of the ranks' modelled token load (pairs per call) at the last evaluation; 1
  /// when nothing is routed.
  [[nodiscard]] double load_imbalance() const noexcept {
    double most = 0.0;
    double sum = 0.0;
    for (const double t : tokens_) {
      most = std::max(most, t);
      sum += t;
    }
    return sum > 0 ? most * static_cast<double>(tokens_.size()) / sum : 1.0;
  }

  [[nodiscard]] expert_placement to_placement() const {
    std::vector<std::vector<std::int32_t>> ranks_of(loads_.size());
    for (std::int32_t r = 0; r < ranks_; ++r) {
      for (const std::int32_t k : held_[static_cast<std::size_t>(r)]) {
        ranks_of[static_cast<std::size_t>(k)].push_back(r);
      }
    }
    for (auto& v : ranks_of) {
      std::sort(v.begin(), v.end());
    }
    return expert_placement::from_replica_ranks(layers_, experts_, ranks_, local_experts_,
                                                ranks_of);
  }

 private:
  std::int32_t layers_;
  std::int32_t experts_;
  std::int32_t ranks_;
  std::int32_t local_experts_;
  std::span<const double> loads_;
  const dispatch_costs* costs_;
  std::vector<double> q_;                        // per key
  std::vector<std::int32_t> order_;              // per key: position in decreasing q
  std::vector<std::int32_t> by_order_;           // keys in decreasing q
  std::vector<std::int32_t> replicas_;           // per key
  std::vector<std::int32_t> kept_;               // per key: ranks keeping it (evaluate)
  std::vector<std::vector<std::int32_t>> held_;  // per rank: its keys, by order_
  std::vector<std::int32_t> rows_;               // [layers][ranks]: rows used
  std::vector<std::int32_t> slots_;              // per rank
  std::vector<double> seconds_;                  // per rank: C_r of the last evaluate
  std::vector<double> tokens_;                   // per rank: token load of the last evaluate
};

/// A plan's rank in the search: admissible plans (modelled token load within `cap` of the mean)
/// first, by their costs in the leximax order (largest first, then the next...; equal within a
/// relative 1e-12, so lowering a rank tied with the slowest one counts as progress); the others
/// by their imbalance.
struct plan_score {
  double imbalance = 1.0;
  std::vector<double> costs;  // largest first
};

inline plan_score score(plan_state& s) {
  s.evaluate();
  plan_score out{s.load_imbalance(), {s.seconds().begin(), s.seconds().end()}};
  std::sort(out.costs.begin(), out.costs.end(), std::greater<>());
  return out;
}

/// Whether `a` ranks strictly before `b` (see `plan_score`).
inline bool better(const plan_score& a, const plan_score& b, double cap) {
  const bool a_ok = a.imbalance <= cap;
  const bool b_ok = b.imbalance <= cap;
  if (a_ok != b_ok) {
    return a_ok;
  }
  if (!a_ok && a.imbalance != b.imbalance) {
    return a.imbalance < b.imbalance;
  }
  for (std::size_t i = 0; i < a.costs.size(); ++i) {
    if (a.costs[i] < b.costs[i] * (1 - 1e-12)) {
      return true;
    }
    if (a.costs[i] > b.costs[i] * (1 + 1e-12)) {
      return false;
    }
  }
  return false;
}

/// Moves each rank's replicas and slots, as a whole, to the rank where the plan ranks best: with
/// the rest of the plan fixed, a rank's step is affine in its link's copy seconds (slope
/// `copies()`), so `leximax_assignment` finds the best permutation exactly. When it predicts a
/// plan ranking before `target`, spends one of `budget`'s evaluations to apply and check it;
/// returns true, with `target` the new score, when the plan then ranks before it. Returns false
/// at once when every rank has the same link. O(ranks^4) and one evaluation besides.
inline bool relabel_ranks(plan_state& s, std::span<const double> copy_seconds, double cap,
                          std::int32_t& budget, plan_score& target) {
  if (std::adjacent_find(copy_seconds.begin(), copy_seconds.end(), std::not_equal_to<>()) ==
      copy_seconds.end()) {
    return false;  // the same link everywhere: every permutation costs the same
  }
  const plan_score before = score(s);
  const auto ug = copy_seconds.size();
  std::vector<double> cost(ug * ug);
  for (std::size_t j = 0; j < ug; ++j) {
    const double copies = s.copies(static_cast<std::int32_t>(j));
    for (std::size_t m = 0; m < ug; ++m) {
      cost[j * ug + m] = s.seconds()[j] + copies * (copy_seconds[m] - copy_seconds[j]);
    }
  }
  const std::vector<std::int32_t> to = leximax_assignment(cost, static_cast<std::int32_t>(ug));
  plan_score predicted{before.imbalance, std::vector<double>(ug)};
  std::vector<std::int32_t> back(ug);
  for (std::size_t j = 0; j < ug; ++j) {
    predicted.costs[j] = cost[j * ug + static_cast<std::size_t>(to[j])];
    back[static_cast<std::size_t>(to[j])] = static_cast<std::int32_t>(j);
  }
  std::sort(predicted.costs.begin(), predicted.costs.end(), std::greater<>());
  if (budget <= 0 || !better(predicted, target, cap)) {
    return false;
  }
  --budget;
  s.permute(to);
  plan_score after = score(s);
  if (better(after, target, cap)) {
    target = std::move(after);
    return true;
  }
  s.permute(back);
  return false;
}

/// A random plan, the diversifying restart of the search: per layer each expert gets a replica on
/// a random rank (the next one with room, cyclically, when that one is full), then each rank
/// takes each other expert of the layer with probability 1/2 while it has rows; each rank gets
/// `min_slots` and every other slot goes to a random rank.
inline void random_plan(plan_state& s, xoshiro256ss& rng, std::int32_t layers,
                        std::int32_t min_slots, std::int32_t total_slots) {
  auto& slots = s.slots();
  const auto g = static_cast<std::int32_t>(slots.size());
  for (std::int32_t l = 0; l < layers; ++l) {
    for (std::int32_t e = 0; e < s.experts(); ++e) {
      auto r = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(g)));
      while (!s.room(r, l)) {
        r = (r + 1) % g;
      }
      s.add(r, s.key(l, e));
    }
    for (std::int32_t r = 0; r < g; ++r) {
      for (std::int32_t e = 0; e < s.experts() && s.room(r, l); ++e) {
        if (!s.holds(r, s.key(l, e)) && rng.below(2) == 0) {
          s.add(r, s.key(l, e));
        }
      }
    }
  }
  std::fill(slots.begin(), slots.end(), min_slots);
  for (std::int64_t i = std::int64_t{g} * min_slots; i < total_slots; ++i) {
    ++slots[rng.below(static_cast<std::uint64_t>(g))];
  }
}

/// `moves` random changes to the plan: a slot moved between ranks, a replica dropped (when its
/// expert has others), added on a rank with room, moved there, or swapped with one of that rank's
/// replicas of the same layer.
inline void perturb(plan_state& s, xoshiro256ss& rng, std::int32_t min_slots, std::int32_t moves) {
  auto& slots = s.slots();
  const auto g = slots.size();
  for (std::int32_t done = 0, tries = 0; done < moves && tries < 16 * moves; ++tries) {
    const auto r = static_cast<std::int32_t>(rng.below(g));
    const auto to = static_cast<std::int32_t>(rng.below(g));
    const std::span<const std::int32_t> held = s.held(r);
    const std::span<const std::int32_t> theirs = s.held(to);
    if (r == to || held.empty()) {
      continue;
    }
    const std::int32_t k = held[rng.below(held.size())];
    const std::int32_t layer = k / s.experts();
    switch (rng.below(4)) {
      case 0:
        if (slots[static_cast<std::size_t>(r)] > min_slots) {
          --slots[static_cast<std::size_t>(r)];
          ++slots[static_cast<std::size_t>(to)];
          ++done;
        }
        break;
      case 1:
        if (s.replicas(k) > 1) {
          s.remove(r, k);
          ++done;
        }
        break;
      case 2:
        if (!s.holds(to, k) && s.room(to, layer)) {
          s.add(to, k);
          if (rng.below(2) == 0) {
            s.remove(r, k);
          }
          ++done;
        }
        break;
      default:
        if (!theirs.empty()) {
          const std::int32_t f = theirs[rng.below(theirs.size())];
          if (f / s.experts() == layer && !s.holds(to, k) && !s.holds(r, f)) {
            s.remove(r, k);
            s.remove(to, f);
            s.add(to, k);
            s.add(r, f);
            ++done;
          }
        }
        break;
    }
  }
}

/// Moves single slots between ranks while that improves `now` (see `plan_score`), each move
/// counted against `budget`.
inline void climb_slots(plan_state& s, std::int32_t min_slots, double cap, std::int32_t& budget,
                        plan_score& now) {
  auto& slots = s.slots();
  const std::size_t g = slots.size();
  bool improved = true;
  while (improved && budget > 0) {
    improved = false;
    for (std::size_t to = 0; to < g && !improved; ++to) {
      for (std::size_t from = 0; from < g && !improved && budget > 0; ++from) {
        if (from == to || slots[from] <= min_slots) {
          continue;
        }
        ++slots[to];
        --slots[from];
        --budget;
        plan_score v = score(s);
        if (better(v, now, cap)) {
          now = std::move(v);
          improved = true;
        } else {
          --slots[to];
          ++slots[from];
        }
      }
    }
  }
}

/// The ranks in the order `local_search` tries them: the slowest first, or the most loaded first
/// while the plan `best` is above the load cap. Needs `s` evaluated.
inline std::vector<std::int32_t> search_order(const plan_state& s, const plan_score& best,
                                              double cap) {
  const std::span<const double> key = best.imbalance <= cap ? s.seconds() : s.tokens();
  std::vector<std::int32_t> order(key.size());  // one entry per rank
  std::iota(order.begin(), order.end(), std::int32_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    return key[static_cast<std::size_t>(a)] > key[static_cast<std::size_t>(b)];
  });
  return order;
}

/// `local_search`'s exchanges of replica `k` of rank `r` with a replica `f` of the same layer on
/// rank `to`: `k` in place of `f` there (when `f` has others), or the two swapped. True when
/// `attempt` kept one.
template <class Attempt>
bool try_exchanges(plan_state& s, std::int32_t r, std::int32_t k, std::int32_t to,
                   Attempt& attempt) {
  const std::int32_t layer = k / s.experts();
  bool improved = false;
  const std::vector<std::int32_t> theirs(s.held(to).begin(), s.held(to).end());
  for (std::size_t j = 0; j < theirs.size() && !improved; ++j) {
    const std::int32_t f = theirs[j];
    if (f / s.experts() != layer) {
      continue;
    }
    if (s.replicas(f) > 1) {  // k replaces f there
      improved = attempt(
          [&] {
            s.remove(to, f);
            s.add(to, k);
          },
          [&] {
            s.remove(to, k);
            s.add(to, f);
          });
    }
    if (!improved && !s.holds(r, f)) {
      improved = attempt(
          [&] {
            s.remove(r, k);
            s.remove(to, f);
            s.add(to, k);
            s.add(r, f);
          },
          [&] {
            s.remove(to, k);
            s.remove(r, f);
            s.add(r, k);
            s.add(to, f);
          });
    }
  }
  return improved;
}

/// `local_search`'s moves of replica `k` of rank `r`, in order: drop it, then for each other rank
/// add a replica there, move it there, and `try_exchanges`. True when `attempt` kept one.
template <class Attempt>
bool try_replica_moves(plan_state& s, std::int32_t r, std::int32_t k, Attempt& attempt) {
  const auto g = static_cast<std::int32_t>(s.slots().size());
  const std::int32_t layer = k / s.experts();
  if (s.replicas(k) > 1 && attempt([&] { s.remove(r, k); }, [&] { s.add(r, k); })) {
    return true;
  }
  bool improved = false;
  for (std::int32_t to = 0; to < g && !improved; ++to) {
    if (to == r || s.holds(to, k)) {
      continue;
    }
    if (s.room(to, layer)) {
      improved = attempt([&] { s.add(to, k); }, [&] { s.remove(to, k); }) || attempt(
                                                                                 [&] {
                                                                                   s.remove(r, k);
                                                                                   s.add(to, k);
                                                                                 },
                                                                                 [&] {
                                                                                   s.remove(to, k);
                                                                                   s.add(r, k);
                                                                                 });
    }
    improved = improved || try_exchanges(s, r, k, to, attempt);
  }
  return improved;
}

/// First-improvement local search (see `plan_score`), the slowest ranks first. A move changes
/// one replica of a rank `r`: drop it (when its expert has others), add a replica of its expert
/// on another rank, move it there, swap it with one of that rank's replicas of the same layer, or
/// put it there in place of a replica whose expert has others; each move is followed by
/// `climb_slots`, so a replica and the slots it needs can move together, and, when that does not
/// help, by `relabel_ranks`: plans are searched up to a permutation of the ranks, which one
/// replica move at a time could only cross through plans outside the load bound. Stops when no
/// move helps or after `budget` evaluations.
inline void local_search(plan_state& s, std::span<const double> copy_seconds,
                         std::int32_t min_slots, double cap, std::int32_t& budget) {
  plan_score best = score(s);
  climb_slots(s, min_slots, cap, budget, best);
  relabel_ranks(s, copy_seconds, cap, budget, best);
  const auto attempt = [&](auto&& apply, auto&& undo) {
    if (budget <= 0) {
      return false;
    }
    const std::vector<std::int32_t> slots = s.slots();
    apply();
    --budget;
    plan_score now = score(s);
    climb_slots(s, min_slots, cap, budget, now);
    if (better(now, best, cap)) {
      best = std::move(now);
      return true;
    }
    if (relabel_ranks(s, copy_seconds, cap, budget, best)) {
      return true;
    }
    undo();
    s.slots() = slots;
    return false;
  };
  bool improved = true;
  while (improved && budget > 0) {
    improved = false;
    s.evaluate();
    const std::vector<std::int32_t> order = search_order(s, best, cap);
    for (std::size_t oi = 0; oi < order.size() && !improved; ++oi) {
      const std::int32_t r = order[oi];
      const std::vector<std::int32_t> held(s.held(r).begin(), s.held(r).end());
      for (std::size_t i = 0; i < held.size() && !improved; ++i) {
        improved = try_replica_moves(s, r, held[i], attempt);
      }
    }
  }
}

}  // namespace detail

}  // namespace wisp
