// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The hybrid miss policy (`miss_policy::hybrid`): each miss of a layer call is either
/// copied into a slot, as `fetch` does, or computed by the host from its master weights, leaving
/// the cache unchanged (Fiddler, KTransformers, llama.cpp `--n-cpu-moe`). Outputs stay exact: the
/// host computes the same expert on the same tokens.
///
/// **The cost model** (`hybrid_cost_model`, shared by the engine and the simulator). For a call
/// whose misses are split into a copied set `C` and a host set `H`:
/// - the copies finish at `link + |C| x copy_seconds`: they queue behind the copies already
///   issued (`hybrid_queues::link_seconds` from now);
/// - the host finishes at `host + call_seconds + host_seconds(|H|, positions(H))`: it queues behind
///   the host work already issued, pays once per call for the hidden states crossing to the host
///   and the outputs crossing back, and computes its experts as one roofline,
///   `max(|H| x expert_seconds, positions(H) x position_seconds)` (every host expert's weights read
///   once at host memory bandwidth, or every (token, expert) position at the host's FLOP rate);
/// - `finish` is the later of the two (a side with nothing to do finishes at 0);
/// - the **objective** is `finish - value(C) + eviction_loss(|C|)`: a copied expert stays
///   resident and is worth its `hybrid_miss::value_seconds` (the time its expected hits before
///   eviction will save, see `reuse_value_estimator`), and the `m`-th copy may evict a resident
///   expert worth `eviction_loss[m - 1]` (see `eviction_losses`).
///
/// A one-off expert (no value) goes where it finishes first, usually the host; an expert about to
/// be reused is copied once the time it saves later outweighs the link time it costs now.
/// `hybrid_splitter::split` finds the split of least objective exactly (a knapsack over the
/// copies' count and token sum); `hybrid_objective` evaluates any split (the tests compare the two
/// on every split of small calls).
/// @code
/// wisp::hybrid_cost_model cost{.copy_seconds = 45e-6, .expert_seconds = 14.7e-6,
///                              .position_seconds = 0.86e-6, .call_seconds = 20e-6};
/// wisp::hybrid_splitter splitter;
/// std::vector<wisp::hybrid_miss> misses = {{.expert = 3, .positions = 1, .value_seconds = 0},
///                                          {.expert = 9, .positions = 2, .value_seconds = 80e-6}};
/// std::vector<std::uint8_t> copy(misses.size());
/// auto d = splitter.split(cost, {.link_seconds = 0, .host_seconds = 0}, misses, copy);
/// // copy[i] == 1: copy misses[i] into a slot; 0: compute its tokens on the host
/// @endcode
#pragma once

#include <wisp/core/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace wisp {

/// @brief The times the hybrid miss policy compares, in seconds (see the file description).
/// A plain value; `validate()` checks it.
struct hybrid_cost_model {
  double copy_seconds = 0;      ///< one expert over the link, its fixed latency included
  double expert_seconds = 0;    ///< the host reads one expert's weights (memory roofline)
  double position_seconds = 0;  ///< the host computes one (token, expert) position (FLOP roofline)
  double call_seconds = 0;      ///< per call with host work: hidden states out, outputs back

  /// @throws wisp::logic_error naming the member and value if a time is negative or not finite.
  void validate() const {
    const auto check = [](double v, const char* member) {
      WISP_EXPECTS(std::isfinite(v) && v >= 0, "hybrid_cost_model: ", member,
                   " must be a finite number >= 0, got ", v);
    };
    check(copy_seconds, "copy_seconds");
    check(expert_seconds, "expert_seconds");
    check(position_seconds, "position_seconds");
    check(call_seconds, "call_seconds");
  }
  /// The host's roofline for `experts` experts over `positions` positions (without the call's
  /// transfers). O(1).
  [[nodiscard]] double host_seconds(std::int64_t experts, std::int64_t positions) const noexcept {
    return std::max(static_cast<double>(experts) * expert_seconds,
                    static_cast<double>(positions) * position_seconds);
  }
  /// What one future miss of a single position costs on the cheaper side: the time a hit saves
  /// (the unit of `reuse_value_estimator`'s values). The call's transfers are left out: a call
  /// that misses one expert mostly misses others. O(1).
  [[nodiscard]] double miss_seconds() const noexcept {
    return std::min(copy_seconds, host_seconds(1, 1));
  }
};

/// @brief The host that computes missed experts: its memory bandwidth and FLOP rate (all its
/// threads together).
struct hybrid_host {
  double memory_bytes_per_second = 0;
  double flops_per_second = 0;
};

/// @brief The cost model of experts of `expert_bytes` bytes of BF16 weights: a copy takes
/// `copy_seconds`; the host reads the weights at `host.memory_bytes_per_second` and does two
/// FLOPs per weight (`expert_bytes` FLOPs) per position at `host.flops_per_second`; each call with
/// host work pays `call_seconds` of transfers. O(1).
/// @throws wisp::logic_error naming the value if a rate is not finite and > 0, or a time (as
///   `validate`).
[[nodiscard]] inline hybrid_cost_model bf16_hybrid_costs(double copy_seconds, double expert_bytes,
                                                         const hybrid_host& host,
                                                         double call_seconds) {
  WISP_EXPECTS(std::isfinite(host.memory_bytes_per_second) && host.memory_bytes_per_second > 0 &&
                   std::isfinite(host.flops_per_second) && host.flops_per_second > 0,
               "bf16_hybrid_costs: host rates must be finite and > 0, got ",
               host.memory_bytes_per_second, " B/s and ", host.flops_per_second, " FLOP/s");
  WISP_EXPECTS(std::isfinite(expert_bytes) && expert_bytes >= 0,
               "bf16_hybrid_costs: expert_bytes must be finite and >= 0, got ", expert_bytes);
  const hybrid_cost_model c{.copy_seconds = copy_seconds,
                            .expert_seconds = expert_bytes / host.memory_bytes_per_second,
                            .position_seconds = expert_bytes / host.flops_per_second,
                            .call_seconds = call_seconds};
  c.validate();
  return c;
}

/// @brief Follows the host's measured speed: each host call's seconds update the host side of a
/// `hybrid_cost_model`, so a split is costed at the rate the host runs at now (its memory shared
/// with the DMA engines, its clock, its other work) rather than at a rate measured once.
///
/// The model: a call of `n` experts over `p` positions takes `call_seconds + max(n x
/// expert_seconds, p x position_seconds)`. `record` attributes what a call took beyond
/// `call_seconds` to the side of the roofline the current costs say bound it, and moves that
/// side's per-unit time toward the call's by an exponential moving average of rate `rate`:
/// `t <- (1 - rate) x t + rate x max(0, seconds - call_seconds) / units`. `call_seconds` and
/// `copy_seconds` stay as given. O(1) per call; not thread-safe.
/// @code
/// wisp::host_cost_tracker host(cost);      // the prior: a measurement at set-up
/// host.record(3, 3, 0.9e-3);               // a call of 3 experts at 1 row took 0.9 ms
/// splitter.split(host.costs(), queues, misses, copy);
/// @endcode
class host_cost_tracker {
 public:
  /// @throws wisp::logic_error naming the value if `prior` is invalid
  ///   (`hybrid_cost_model::validate`) or `rate` is not in (0, 1].
  explicit host_cost_tracker(const hybrid_cost_model& prior, double rate = 0.125)
      : costs_(prior), rate_(rate) {
    costs_.validate();
    WISP_EXPECTS(std::isfinite(rate) && rate > 0 && rate <= 1,
                 "host_cost_tracker: rate must be in (0, 1], got ", rate);
  }

  /// A host call of `experts` experts over `positions` positions took `seconds`, its transfers
  /// included. @throws wisp::logic_error naming the value (the costs unchanged) if `experts < 1`,
  ///   `positions < experts` or `seconds` is negative or not finite.
  void record(std::int32_t experts, std::int64_t positions, double seconds) {
    WISP_EXPECTS(experts >= 1, "host_cost_tracker::record: experts must be >= 1, got ", experts);
    WISP_EXPECTS(positions >= experts, "host_cost_tracker::record: ", positions, " positions for ",
                 experts, " experts (each has at least one)");
    WISP_EXPECTS(std::isfinite(seconds) && seconds >= 0,
                 "host_cost_tracker::record: seconds must be a finite number >= 0, got ", seconds);
    const double work = std::max(0.0, seconds - costs_.call_seconds);
    const auto n = static_cast<double>(experts);
    const auto p = static_cast<double>(positions);
    if (n * costs_.expert_seconds >= p * costs_.position_seconds) {  // bound by its bytes
      costs_.expert_seconds = (1 - rate_) * costs_.expert_seconds + rate_ * work / n;
    } else {  // bound by its FLOPs
      costs_.position_seconds = (1 - rate_) * costs_.position_seconds + rate_ * work / p;
    }
    ++calls_;
  }
  /// The costs as of the last call recorded.
  [[nodiscard]] const hybrid_cost_model& costs() const noexcept { return costs_; }
  /// Calls recorded.
  [[nodiscard]] std::uint64_t calls() const noexcept { return calls_; }

 private:
  hybrid_cost_model costs_;
  double rate_;
  std::uint64_t calls_ = 0;
};

/// @brief One miss of a call: its expert, the positions routed to it and what keeping it
/// resident is worth.
struct hybrid_miss {
  std::int32_t expert = 0;
  std::int32_t positions = 1;  ///< (token, j) positions of the call routed to it, >= 1
  double value_seconds = 0;    ///< time its expected hits before eviction save, >= 0
};

/// @brief When the queues are free, in seconds from the moment the call is decided.
struct hybrid_queues {
  double link_seconds = 0;  ///< the link finishes the copies already issued
  double host_seconds = 0;  ///< the host finishes the host work already issued
};

/// @brief A split of a call's misses and what the cost model says of it.
struct hybrid_decision {
  double objective = 0;     ///< `finish - value of the copies + eviction loss` (least over splits)
  double finish = 0;        ///< when every miss is available, copied or computed, from now
  std::int32_t copies = 0;  ///< misses copied into slots
  std::int32_t host_experts = 0;    ///< misses computed by the host
  std::int64_t host_positions = 0;  ///< their positions
};

namespace detail {
/// `finish` of a split with `copies` copies and `host_experts` host experts over `positions`.
[[nodiscard]] inline double hybrid_finish(const hybrid_cost_model& cost, const hybrid_queues& q,
                                          std::int64_t copies, std::int64_t host_experts,
                                          std::int64_t positions) noexcept {
  const double link =
      copies > 0 ? q.link_seconds + static_cast<double>(copies) * cost.copy_seconds : 0.0;
  const double host = host_experts > 0 ? q.host_seconds + cost.call_seconds +
                                             cost.host_seconds(host_experts, positions)
                                       : 0.0;
  return std::max(link, host);
}

inline void check_hybrid_inputs(const char* where, const hybrid_cost_model& cost,
                                const hybrid_queues& q, std::span<const hybrid_miss> misses,
                                std::size_t flags, std::span<const double> eviction_loss) {
  cost.validate();
  WISP_EXPECTS(std::isfinite(q.link_seconds) && q.link_seconds >= 0 &&
                   std::isfinite(q.host_seconds) && q.host_seconds >= 0,
               where, ": queue times must be finite and >= 0, got link ", q.link_seconds, ", host ",
               q.host_seconds);
  WISP_EXPECTS(flags == misses.size(), where, ": ", flags, " split flags for ", misses.size(),
               " misses");
  for (std::size_t i = 0; i < misses.size(); ++i) {
    WISP_EXPECTS(misses[i].positions >= 1, where, ": misses[", i, "] (expert ", misses[i].expert,
                 ") has ", misses[i].positions, " positions, need >= 1");
    WISP_EXPECTS(std::isfinite(misses[i].value_seconds) && misses[i].value_seconds >= 0, where,
                 ": misses[", i, "] (expert ", misses[i].expert, ") has value ",
                 misses[i].value_seconds, ", need a finite number >= 0");
  }
  for (std::size_t m = 0; m < eviction_loss.size(); ++m) {
    WISP_EXPECTS(std::isfinite(eviction_loss[m]) && eviction_loss[m] >= 0, where,
                 ": eviction_loss[", m, "] = ", eviction_loss[m], ", need a finite number >= 0");
  }
}
}  // namespace detail

/// @brief The objective and counts of the split `copy` (`copy[i] != 0`: miss `i` is copied), as
/// the file description defines them. `eviction_loss[m - 1]` is the value lost by the `m`-th copy
/// (missing entries: 0). O(misses).
/// @throws wisp::logic_error naming the values on an invalid cost model, a negative or non-finite
///   queue time, value or loss, a miss with fewer than one position, or `copy.size() !=
///   misses.size()`.
[[nodiscard]] inline hybrid_decision hybrid_objective(const hybrid_cost_model& cost,
                                                      const hybrid_queues& queues,
                                                      std::span<const hybrid_miss> misses,
                                                      std::span<const std::uint8_t> copy,
                                                      std::span<const double> eviction_loss = {}) {
  detail::check_hybrid_inputs("hybrid_objective", cost, queues, misses, copy.size(), eviction_loss);
  hybrid_decision d;
  double value = 0;
  for (std::size_t i = 0; i < misses.size(); ++i) {
    if (copy[i] != 0) {
      ++d.copies;
      value += misses[i].value_seconds;
    } else {
      ++d.host_experts;
      d.host_positions += misses[i].positions;
    }
  }
  double loss = 0;
  for (std::size_t m = 0; m < static_cast<std::size_t>(d.copies) && m < eviction_loss.size(); ++m) {
    loss += eviction_loss[m];
  }
  d.finish = detail::hybrid_finish(cost, queues, d.copies, d.host_experts, d.host_positions);
  d.objective = d.finish - value + loss;
  return d;
}

/// @brief Splits a call's misses between copies and host compute at the least objective of the
/// file description. Owns scratch reused across calls (no allocation once it has seen the
/// largest call).
///
/// **Algorithm.** The objective depends on the copied set only through its size `m`, its
/// position sum `P_C` and its value sum; a 0/1 knapsack over `(m, P_C)` keeps the largest value
/// for each, and every reachable `(m, P_C)` is evaluated. Exact. O(n^2 x P) time and
/// O(n^2 x P) bytes of scratch for `n` misses of `P` positions in all. Ties go to more copies
/// (residency), then to the fewer copied positions.
///
/// **Thread safety:** none (the scratch); one splitter per thread.
class hybrid_splitter {
 public:
  /// @brief Writes the split into `copy` (`1`: copy into a slot, `0`: compute on the host), at
  /// most `max_copies` copies (the free slots a call may take; negative: no limit).
  /// `eviction_loss[m - 1]` is the value the `m`-th copy evicts (missing entries: 0).
  /// @returns the split's objective, finish and counts (as `hybrid_objective` reports them).
  /// @throws wisp::logic_error as `hybrid_objective`, before writing anything.
  hybrid_decision split(const hybrid_cost_model& cost, const hybrid_queues& queues,
                        std::span<const hybrid_miss> misses, std::span<std::uint8_t> copy,
                        std::int32_t max_copies = -1, std::span<const double> eviction_loss = {}) {
    detail::check_hybrid_inputs("hybrid_splitter::split", cost, queues, misses, copy.size(),
                                eviction_loss);
    const std::size_t n = misses.size();
    std::size_t total = 0;  // positions of every miss
    for (const hybrid_miss& m : misses) {
      total += static_cast<std::size_t>(m.positions);
    }
    const std::size_t counts = n + 1, sums = total + 1;
    constexpr double unreached = -std::numeric_limits<double>::infinity();
    best_.assign(counts * sums, unreached);  // [m][P_C]: largest value of a copied set
    take_.assign(n * counts * sums, 0);      // [item][m][P_C]: the item made that entry
    best_[0] = 0;
    std::size_t reach = 0;  // positions of the items seen so far
    for (std::size_t i = 0; i < n; ++i) {
      const auto p = static_cast<std::size_t>(misses[i].positions);
      reach += p;
      std::uint8_t* take = take_.data() + i * counts * sums;
      for (std::size_t m = i + 1; m >= 1; --m) {
        for (std::size_t s = reach; s >= p; --s) {
          const double from = best_[(m - 1) * sums + s - p];
          if (from != unreached && from + misses[i].value_seconds > best_[m * sums + s]) {
            best_[m * sums + s] = from + misses[i].value_seconds;
            take[m * sums + s] = 1;
          }
          if (s == p) {
            break;
          }
        }
      }
    }
    const std::size_t limit =
        max_copies < 0 ? n : std::min(n, static_cast<std::size_t>(max_copies));
    double loss = 0;
    std::vector<double>& losses = scratch_loss_;
    losses.assign(limit + 1, 0.0);
    for (std::size_t m = 1; m <= limit; ++m) {
      loss += m - 1 < eviction_loss.size() ? eviction_loss[m - 1] : 0.0;
      losses[m] = loss;
    }
    hybrid_decision out;
    std::size_t best_m = 0, best_s = 0;
    bool found = false;
    for (std::size_t m = limit + 1; m-- > 0;) {  // more copies first: ties go to residency
      for (std::size_t s = 0; s <= total; ++s) {
        const double value = best_[m * sums + s];
        if (value == unreached) {
          continue;
        }
        const auto host = static_cast<std::int64_t>(n - m);
        const auto positions = static_cast<std::int64_t>(total - s);
        const double finish =
            detail::hybrid_finish(cost, queues, static_cast<std::int64_t>(m), host, positions);
        const double objective = finish - value + losses[m];
        if (!found || objective < out.objective) {
          found = true;
          out = {objective, finish, static_cast<std::int32_t>(m), static_cast<std::int32_t>(host),
                 positions};
          best_m = m;
          best_s = s;
        }
      }
    }
    std::fill(copy.begin(), copy.end(), std::uint8_t{0});
    for (std::size_t i = n; i-- > 0;) {  // walk the choices back from (best_m, best_s)
      if (best_m > 0 && take_[i * counts * sums + best_m * sums + best_s] != 0) {
        copy[i] = 1;
        --best_m;
        best_s -= static_cast<std::size_t>(misses[i].positions);
      }
    }
    return out;
  }

 private:
  std::vector<double> best_;
  std::vector<std::uint8_t> take_;
  std::vector<double> scratch_loss_;
};

/// @brief The `eviction_loss` of a call for `hybrid_splitter::split`: the first `free_slots`
/// copies evict nothing; each later one evicts a resident expert the call does not use, taken to
/// be the least valuable of `resident_values` left (a lower bound on what the policy's victim is
/// worth, whatever its order). Sorts `resident_values`; writes `out`. O(r log r) for `r` values.
inline void eviction_losses(std::int32_t free_slots, std::span<double> resident_values,
                            std::vector<double>& out) {
  std::sort(resident_values.begin(), resident_values.end());
  out.assign(static_cast<std::size_t>(std::max(free_slots, 0)), 0.0);
  out.insert(out.end(), resident_values.begin(), resident_values.end());
}

/// @brief Estimates what keeping a missed expert resident is worth: its expected hits before
/// eviction, from each expert's recent routing frequency and the layer's recent copy rate.
///
/// The model (per layer, counted in calls of that layer):
/// - `f`: the expert's routing frequency, an exponential moving average with rate `rate` of
///   "routed in this call" (so about the last `1 / rate` calls count);
/// - lifetime `R = capacity / copies per call` (an expert inserted now survives about that many
///   calls without a hit before enough insertions push it out; the copy rate is the same moving
///   average; with no copies, `R` is unbounded);
/// - `p = 1 - (1 - f)^R`, the chance it is routed again before eviction; each hit renews the
///   lifetime, so the hits before eviction are geometric: `p / (1 - p)`, capped at `f / rate`
///   (the routings the average has memory of).
///
/// `expected_hits` times `hybrid_cost_model::miss_seconds()` is a `hybrid_miss::value_seconds`.
/// Memory O(layers x experts); `record_call` O(distinct experts), `expected_hits` O(1). Not
/// thread-safe.
class reuse_value_estimator {
 public:
  /// @throws wisp::logic_error if `layers` or `experts` is not positive or `rate` is not in
  ///   (0, 1].
  reuse_value_estimator(std::int32_t layers, std::int32_t experts, double rate = 0.25)
      : experts_(experts), rate_(rate) {
    WISP_EXPECTS(layers >= 1 && experts >= 1, "reuse_value_estimator: layers ", layers,
                 " and experts ", experts, " must be >= 1");
    WISP_EXPECTS(std::isfinite(rate) && rate > 0 && rate <= 1,
                 "reuse_value_estimator: rate must be in (0, 1], got ", rate);
    const auto keys = static_cast<std::size_t>(layers) * static_cast<std::size_t>(experts);
    freq_.assign(keys, 0.0);
    stamp_.assign(keys, 0);
    calls_.assign(static_cast<std::size_t>(layers), 0);
    copy_rate_.assign(static_cast<std::size_t>(layers), 0.0);
  }

  /// A call of `layer` routed the distinct `experts` and copied `copies` of them into the cache.
  /// @throws wisp::logic_error on a bad layer or expert, or `copies < 0`.
  void record_call(std::int32_t layer, std::span<const std::int32_t> experts, std::int32_t copies) {
    check_layer(layer);
    WISP_EXPECTS(copies >= 0, "reuse_value_estimator::record_call: copies must be >= 0, got ",
                 copies);
    for (const std::int32_t e : experts) {
      WISP_EXPECTS(e >= 0 && e < experts_, "reuse_value_estimator::record_call: expert ", e,
                   " is outside [0, ", experts_, ")");
    }
    const auto l = static_cast<std::size_t>(layer);
    const std::uint64_t now = ++calls_[l];
    for (const std::int32_t e : experts) {
      const std::size_t k = key(layer, e);
      freq_[k] = decayed(k, now) + rate_;  // stamp_[k] < now: one decay step per missed call
      stamp_[k] = now;
    }
    copy_rate_[l] = (1 - rate_) * copy_rate_[l] + rate_ * static_cast<double>(copies);
  }

  /// Expected hits before eviction of `expert` of `layer` were it inserted now into a cache of
  /// `capacity` slots (see the class description).
  /// @throws wisp::logic_error on a bad layer or expert, or `capacity < 1`.
  [[nodiscard]] double expected_hits(std::int32_t layer, std::int32_t expert,
                                     std::int32_t capacity) const {
    check_layer(layer);
    WISP_EXPECTS(expert >= 0 && expert < experts_, "reuse_value_estimator::expected_hits: expert ",
                 expert, " is outside [0, ", experts_, ")");
    WISP_EXPECTS(capacity >= 1, "reuse_value_estimator::expected_hits: capacity must be >= 1, got ",
                 capacity);
    const auto l = static_cast<std::size_t>(layer);
    const std::size_t k = key(layer, expert);
    const double f = std::min(1.0, decayed(k, calls_[l]));
    if (f <= 0) {
      return 0;
    }
    const double cap = f / rate_;
    if (copy_rate_[l] <= 0 || f >= 1) {
      return cap;
    }
    const double lifetime = static_cast<double>(capacity) / copy_rate_[l];
    const double p = 1 - std::pow(1 - f, lifetime);
    return p >= 1 ? cap : std::min(cap, p / (1 - p));
  }

 private:
  void check_layer(std::int32_t layer) const {
    WISP_EXPECTS(layer >= 0 && static_cast<std::size_t>(layer) < calls_.size(),
                 "reuse_value_estimator: layer ", layer, " is outside [0, ", calls_.size(), ")");
  }
  [[nodiscard]] std::size_t key(std::int32_t layer, std::int32_t expert) const noexcept {
    return static_cast<std::size_t>(layer) * static_cast<std::size_t>(experts_) +
           static_cast<std::size_t>(expert);
  }
  /// The average of key `k` after call `now`, had it not been routed since its stamp.
  [[nodiscard]] double decayed(std::size_t k, std::uint64_t now) const noexcept {
    return freq_[k] * std::pow(1 - rate_, static_cast<double>(now - stamp_[k]));
  }

  std::int32_t experts_;
  double rate_;
  std::vector<double> freq_;          // [layers x experts]: the average as of its stamp
  std::vector<std::uint64_t> stamp_;  // [layers x experts]: the call of the last update
  std::vector<std::uint64_t> calls_;  // per layer: calls so far
  std::vector<double> copy_rate_;     // per layer: copies per call, averaged
};

}  // namespace wisp
