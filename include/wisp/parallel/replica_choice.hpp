// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `replica_chooser`: at dispatch, picks the rank of every (token, logical expert) among
/// the expert's replicas by **residency and load together**, and returns per-row target ranks for
/// the engine's own all-to-all (DeepEP, NCCL) to use.
///
/// **The cost of a choice.** Within one layer call the chooser keeps, per rank, the modelled
/// seconds of the work sent there so far, `T[r]`, and their maximum `M` (when the call ends: the
/// combine waits for the slowest rank). Sending (token, e) to rank `r` adds
/// `token_seconds`, plus `expert_seconds` if `e` is not yet active on `r` in this call (its weights
/// are read once per call), plus `copy_seconds[r]` if `e` is also not resident on `r` (the rank's
/// pager must copy it over `r`'s link first). A choice costs
///
///   `max(T[r] + added, M) + added / ranks`:
///
/// the call's finish time after it, plus the work's share of the mean. A resident replica avoids
/// a copy; a loaded rank delays the call; a copy to an idle rank is taken only when the resident
/// replica's rank would finish later by more than the copy's share of the mean.
///
/// **Two forms.** `choose_row` applies the rule to each (token, expert) in order, as a dispatcher
/// that sees one token at a time would. `choose` sees the whole call: it first places the experts
/// that are resident on none of their replicas (each is one copy, wherever it goes), each with all
/// its tokens: those with one replica in first-seen order, then the others, fewest replicas first,
/// then most tokens, then lowest id; then every other (token, expert) in order by the rule. Both
/// are **deterministic**: ties go to the rank with fewer pairs in the call, then fewer since
/// `reset_load`, then the lower rank id, so every rank that runs the chooser on the same batch and
/// the same published residency computes the same targets without talking to the others.
///
/// **Residency** is what each rank's pager holds; ranks publish it (`set_resident`), e.g. from
/// their copy plans and evictions, once per step.
/// @code
/// wisp::replica_chooser chooser(placement, {.copy_seconds = std::vector<double>(8, 356e-6),
///                                           .expert_seconds = 5e-6, .token_seconds = 20e-9});
/// chooser.choose(layer, topk_ids, tokens, k, targets);  // targets: [tokens x k] ranks
/// @endcode
#pragma once

#include <wisp/core/error.hpp>
#include <wisp/core/topk.hpp>
#include <wisp/parallel/placement.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

namespace wisp {

/// @brief The modelled costs the chooser weighs (seconds). docs/expert_parallel.md names where
/// each default of the simulator comes from.
struct dispatch_costs {
  /// Per rank: one expert copy over that rank's host-to-device link.
  std::vector<double> copy_seconds;
  /// Compute of one expert active on a rank in a call, whatever its tokens (in decode its weights
  /// are read from device memory once: expert bytes / memory bandwidth).
  double expert_seconds = 0.0;
  /// Compute of one (token, expert) pair.
  double token_seconds = 0.0;

  /// @throws wisp::logic_error naming the value unless `copy_seconds` has `ranks` entries and
  ///   every cost is finite and >= 0.
  void validate(std::int32_t ranks) const {
    WISP_EXPECTS(copy_seconds.size() == static_cast<std::size_t>(ranks),
                 "dispatch_costs: copy_seconds has ", copy_seconds.size(), " entries for ", ranks,
                 " ranks");
    for (std::size_t r = 0; r < copy_seconds.size(); ++r) {
      WISP_EXPECTS(std::isfinite(copy_seconds[r]) && copy_seconds[r] >= 0,
                   "dispatch_costs: copy_seconds[", r, "] must be finite and >= 0, got ",
                   copy_seconds[r]);
    }
    WISP_EXPECTS(std::isfinite(expert_seconds) && expert_seconds >= 0,
                 "dispatch_costs: expert_seconds must be finite and >= 0, got ", expert_seconds);
    WISP_EXPECTS(std::isfinite(token_seconds) && token_seconds >= 0,
                 "dispatch_costs: token_seconds must be finite and >= 0, got ", token_seconds);
  }
};

/// @brief Residency- and load-aware replica choice (see the file comment).
///
/// - `choose_row` is O(k x replicas per expert); `choose` O(tokens x k x replicas + d log d) for
///   `d` distinct experts resident nowhere. Neither allocates.
/// - `begin_call` is O(ranks); `set_resident` O(1).
/// - **Errors.** Bad ids, ranks or shapes throw `wisp::logic_error` naming the values, before
///   anything changes.
/// - **Thread safety:** none; one thread at a time.
class replica_chooser {
 public:
  /// @throws wisp::logic_error if `costs` is invalid for the placement's ranks.
  replica_chooser(const expert_placement& placement, dispatch_costs costs)
      : layers_(placement.layers()),
        experts_(placement.experts()),
        ranks_(placement.ranks()),
        local_experts_(placement.local_experts()),
        costs_(std::move(costs)) {
    costs_.validate(ranks_);
    spread_ = 1.0 / ranks_;
    offsets_.reserve(static_cast<std::size_t>(layers_) * experts_ + 1);
    offsets_.push_back(0);
    index_of_local_.assign(static_cast<std::size_t>(layers_) * ranks_ * local_experts_, -1);
    for (std::int32_t l = 0; l < layers_; ++l) {
      for (std::int32_t e = 0; e < experts_; ++e) {
        for (const replica& r : placement.replicas(l, e)) {
          index_of_local_[local_index(r.rank, l, r.local)] =
              static_cast<std::int32_t>(candidates_.size());
          candidates_.push_back(r.rank);
          row_of_candidate_.push_back(static_cast<std::int32_t>(offsets_.size() - 1));
        }
        offsets_.push_back(static_cast<std::int32_t>(candidates_.size()));
      }
    }
    for (const std::int32_t r : candidates_) {
      copy_.push_back(costs_.copy_seconds[static_cast<std::size_t>(r)]);
      first_pair_.push_back(costs_.expert_seconds + copy_.back());
    }
    resident_.assign(candidates_.size(), 0);
    resident_replicas_.assign(offsets_.size() - 1, 0);
    active_.assign(candidates_.size(), 0);
    seconds_.assign(static_cast<std::size_t>(ranks_), 0.0);
    pairs_.assign(static_cast<std::size_t>(ranks_), 0);
    total_pairs_.assign(static_cast<std::size_t>(ranks_), 0);
    seen_.assign(static_cast<std::size_t>(experts_), 0);
    tokens_of_.assign(static_cast<std::size_t>(experts_), 0);
    placed_.assign(static_cast<std::size_t>(experts_), -1);
    distinct_.assign(static_cast<std::size_t>(experts_) + 1, 0);
    cold_.assign(static_cast<std::size_t>(experts_) + 1, {0, 0});
  }

  // ------------------------------------------------------------------ residency

  /// @brief Records whether row `local` of `rank`'s tensors for `layer` is resident on its device
  /// (a local id the placement leaves empty is ignored). O(1).
  /// @throws wisp::logic_error on an out-of-range rank, layer or local id.
  void set_resident(std::int32_t rank, std::int32_t layer, std::int32_t local, bool resident) {
    const std::int32_t i = candidate_of("replica_chooser::set_resident", rank, layer, local);
    if (i < 0) {
      return;
    }
    const auto c = static_cast<std::size_t>(i);
    if ((resident_[c] != 0) != resident) {
      resident_[c] = resident ? 1 : 0;
      resident_replicas_[static_cast<std::size_t>(row_of_candidate_[c])] += resident ? 1 : -1;
      first_pair_[c] = costs_.expert_seconds + (resident ? 0.0 : copy_[c]);
    }
  }
  /// Whether row `local` of `rank` for `layer` is recorded resident. @throws as `set_resident`.
  [[nodiscard]] bool resident(std::int32_t rank, std::int32_t layer, std::int32_t local) const {
    const std::int32_t i = candidate_of("replica_chooser::resident", rank, layer, local);
    return i >= 0 && resident_[static_cast<std::size_t>(i)] != 0;
  }

  // ------------------------------------------------------------------ one layer call

  /// @brief Starts a call of `layer`: per-rank work back to 0, no expert active anywhere. O(ranks).
  /// @throws wisp::logic_error on an out-of-range layer.
  void begin_call(std::int32_t layer) {
    WISP_EXPECTS(layer >= 0 && layer < layers_, "replica_chooser::begin_call: layer ", layer,
                 " is outside [0, layers = ", layers_, ")");
    layer_ = layer;
    if (++call_ == 0) {  // the stamps wrapped: clear them once
      std::fill(active_.begin(), active_.end(), 0);
      std::fill(seen_.begin(), seen_.end(), 0);
      call_ = 1;
    }
    std::fill(seconds_.begin(), seconds_.end(), 0.0);
    std::fill(pairs_.begin(), pairs_.end(), 0);
    peak_ = 0.0;
  }

  /// @brief Chooses the rank of each expert of one token (`row`: its `k` logical ids) in the
  /// current call by the rule, in order, writing it to `ranks[j]`. O(k x replicas).
  /// @throws wisp::logic_error (nothing changed) before any `begin_call`, if `ranks.size() !=
  ///   row.size()`, or if an id is outside `[0, experts)`.
  template <topk_id Id>
  void choose_row(std::span<const Id> row, std::span<std::int32_t> ranks) {
    WISP_EXPECTS(layer_ >= 0, "replica_chooser::choose_row: no call started (begin_call first)");
    WISP_EXPECTS(ranks.size() == row.size(), "replica_chooser::choose_row: ", row.size(),
                 " ids but ", ranks.size(), " outputs");
    for (std::size_t j = 0; j < row.size(); ++j) {
      WISP_EXPECTS(row[j] >= 0 && row[j] < experts_, "replica_chooser::choose_row: id ",
                   static_cast<std::int64_t>(row[j]), " at position ", j,
                   " is outside [0, experts = ", experts_, ")");
    }
    for (std::size_t j = 0; j < row.size(); ++j) {
      ranks[j] = assign(best_replica(static_cast<std::int32_t>(row[j]), 1), 1);
    }
  }
  /// @copydoc choose_row
  void choose_row(std::span<const std::int32_t> row, std::span<std::int32_t> ranks) {
    choose_row<std::int32_t>(row, ranks);
  }

  /// @brief One whole call of `layer`, seeing all of it (see the file comment): the ranks of
  /// `topk_ids` (`[tokens x k]`, row-major) are written to `ranks` (same shape). Starts a new call.
  /// O(tokens x k x replicas + d log d).
  /// @throws wisp::logic_error (nothing changed) on a bad layer, shape or id.
  template <topk_id Id>
  void choose(std::int32_t layer, std::span<const Id> topk_ids, std::int32_t tokens, std::int32_t k,
              std::span<std::int32_t> ranks) {
    // One function on purpose: the per-call hot path (bench/parallel), whose branch-free passes
    // share the call's locals.
    detail::check_topk_shape("replica_chooser::choose", topk_ids.size(), tokens, k);
    WISP_EXPECTS(ranks.size() == topk_ids.size(), "replica_chooser::choose: ", topk_ids.size(),
                 " ids but ", ranks.size(), " outputs");
    // The ids are checked in one branch-free pass (it vectorises; a negative id wraps above the
    // bound); the bad one is looked for only when there is one.
    using unsigned_id = std::make_unsigned_t<Id>;
    unsigned_id largest = 0;
    for (const Id id : topk_ids) {
      largest = std::max(largest, static_cast<unsigned_id>(id));
    }
    const bool bad = largest >= static_cast<unsigned_id>(experts_);
    for (std::size_t i = 0; bad && i < topk_ids.size(); ++i) {
      if (topk_ids[i] < 0 || topk_ids[i] >= experts_) {
        detail::fail_bad_id("replica_chooser::choose", topk_ids, i, k, experts_);
      }
    }
    begin_call(layer);
    // The passes below are branch-free where the outcome is random (whether an id repeats, an
    // expert is cold, a pair is placed): a branch there would be mispredicted often. Counts
    // are added in place of selects, which compilers turn back into branches.
    //
    // The call's distinct experts in first-seen order, with their pairs (through local
    // pointers: stores through the members' ones could alias the members).
    const std::uint32_t call = call_;
    std::uint32_t* const seen = seen_.data();
    std::int32_t* const pairs_of = tokens_of_.data();
    std::int32_t* const order = distinct_.data();
    std::size_t distinct = 0;
    for (const Id id : topk_ids) {
      const auto e = static_cast<std::size_t>(id);
      const std::int32_t again = seen[e] == call ? 1 : 0;
      seen[e] = call;
      pairs_of[e] = pairs_of[e] * again + 1;
      order[distinct] = static_cast<std::int32_t>(id);
      distinct += static_cast<std::size_t>(1 - again);
    }
    // The experts resident on none of their replicas, each one copy with all its tokens: those
    // with one replica (no choice) first, in first-seen order (listed over the front of
    // distinct_), then the others (listed in cold_), sorted.
    const std::size_t base = row_of(0);
    std::size_t singles = 0;
    std::size_t others = 0;
    for (std::size_t i = 0; i < distinct; ++i) {
      const std::int32_t e = distinct_[i];
      const std::size_t row = base + static_cast<std::size_t>(e);
      placed_[static_cast<std::size_t>(e)] = -1;
      const bool cold = resident_replicas_[row] == 0;
      const bool one = offsets_[row + 1] - offsets_[row] == 1;
      distinct_[singles] = e;
      singles += cold && one ? 1 : 0;
      cold_[others].second = e;
      others += cold && !one ? 1 : 0;
    }
    for (std::size_t i = 0; i < singles; ++i) {
      const auto e = static_cast<std::size_t>(distinct_[i]);
      const std::int32_t c = offsets_[base + e];
      placed_[e] = assign({c, added(static_cast<std::size_t>(c), tokens_of_[e])}, tokens_of_[e]);
    }
    // Fewest replicas, then most pairs, then lowest id first: one key compared as a whole.
    for (std::size_t i = 0; i < others; ++i) {
      const std::int32_t e = cold_[i].second;
      const std::int32_t fewer_pairs = INT32_MAX - tokens_of_[static_cast<std::size_t>(e)];
      cold_[i].first = static_cast<std::uint64_t>(replica_count(e)) << 32 |
                       static_cast<std::uint32_t>(fewer_pairs);
    }
    const auto cold_end = cold_.begin() + static_cast<std::ptrdiff_t>(others);
    std::sort(cold_.begin(), cold_end);
    for (auto it = cold_.begin(); it != cold_end; ++it) {
      const std::int32_t e = it->second;
      const std::int32_t pairs = tokens_of_[static_cast<std::size_t>(e)];
      placed_[static_cast<std::size_t>(e)] = assign(best_replica(e, pairs), pairs);
    }
    // Every other (token, expert) in order, by the rule. In blocks: the placed ranks are copied
    // and the other pairs listed, then the listed ones are chosen.
    constexpr std::size_t block = 256;
    std::array<std::uint32_t, block> open;
    for (std::size_t from = 0; from < topk_ids.size(); from += block) {
      const std::size_t to = std::min(topk_ids.size(), from + block);
      std::size_t n = 0;
      for (std::size_t i = from; i < to; ++i) {
        const std::int32_t placed = placed_[static_cast<std::size_t>(topk_ids[i])];
        ranks[i] = placed;
        open[n] = static_cast<std::uint32_t>(i - from);
        n += placed < 0 ? 1 : 0;
      }
      for (std::size_t j = 0; j < n; ++j) {
        const std::size_t i = from + open[j];
        ranks[i] = assign(best_replica(static_cast<std::int32_t>(topk_ids[i]), 1), 1);
      }
    }
  }
  /// @copydoc choose
  void choose(std::int32_t layer, std::span<const std::int32_t> topk_ids, std::int32_t tokens,
              std::int32_t k, std::span<std::int32_t> ranks) {
    choose<std::int32_t>(layer, topk_ids, tokens, k, ranks);
  }

  /// Modelled seconds of the work sent to each rank in the current call.
  [[nodiscard]] std::span<const double> call_seconds() const noexcept { return seconds_; }
  /// (token, expert) pairs sent to each rank in the current call.
  [[nodiscard]] std::span<const std::int32_t> call_pairs() const noexcept { return pairs_; }
  /// (token, expert) pairs sent to each rank since construction or `reset_load`.
  [[nodiscard]] std::span<const std::uint64_t> total_pairs() const noexcept { return total_pairs_; }
  /// Forgets the long-run pair counts (the last tie-breaker). O(ranks).
  void reset_load() noexcept { std::fill(total_pairs_.begin(), total_pairs_.end(), 0); }

  [[nodiscard]] std::int32_t ranks() const noexcept { return ranks_; }
  [[nodiscard]] const dispatch_costs& costs() const noexcept { return costs_; }

 private:
  [[nodiscard]] std::size_t local_index(std::int32_t rank, std::int32_t layer,
                                        std::int32_t local) const noexcept {
    return (static_cast<std::size_t>(layer) * ranks_ + rank) * local_experts_ + local;
  }
  [[nodiscard]] std::int32_t candidate_of(const char* where, std::int32_t rank, std::int32_t layer,
                                          std::int32_t local) const {
    WISP_EXPECTS(rank >= 0 && rank < ranks_, where, ": rank ", rank,
                 " is outside [0, ranks = ", ranks_, ")");
    WISP_EXPECTS(layer >= 0 && layer < layers_, where, ": layer ", layer,
                 " is outside [0, layers = ", layers_, ")");
    WISP_EXPECTS(local >= 0 && local < local_experts_, where, ": local id ", local,
                 " is outside [0, local_experts = ", local_experts_, ")");
    return index_of_local_[local_index(rank, layer, local)];
  }
  [[nodiscard]] std::size_t row_of(std::int32_t expert) const noexcept {
    return static_cast<std::size_t>(layer_) * experts_ + expert;
  }
  [[nodiscard]] std::int32_t replica_count(std::int32_t expert) const noexcept {
    const std::size_t row = row_of(expert);
    return offsets_[row + 1] - offsets_[row];
  }

  // A candidate the rule picked and the seconds its pairs add to its rank.
  struct pick {
    std::int32_t candidate;
    double seconds;
  };
  // Seconds `pairs` pairs add to candidate `c`'s rank: their tokens, plus on the candidate's
  // first pairs of the call its compute and, unless resident, its copy.
  [[nodiscard]] double added(std::size_t c, std::int32_t pairs) const noexcept {
    // A mask in place of a select, which compilers turn into an often mispredicted branch.
    const std::uint64_t keep = -static_cast<std::uint64_t>(active_[c] != call_ ? 1 : 0);
    return costs_.token_seconds * pairs +
           std::bit_cast<double>(std::bit_cast<std::uint64_t>(first_pair_[c]) & keep);
  }
  // The candidate (replica) of `expert` of the current layer that the rule picks for `pairs`.
  [[nodiscard]] pick best_replica(std::int32_t expert, std::int32_t pairs) const noexcept {
    const std::size_t row = row_of(expert);
    const std::int32_t first = offsets_[row];
    const std::int32_t last = offsets_[row + 1];
    pick best{first, added(static_cast<std::size_t>(first), pairs)};
    if (last - first == 1) {
      return best;  // no choice
    }
    auto best_rank = static_cast<std::size_t>(candidates_[static_cast<std::size_t>(first)]);
    double best_cost = std::max(seconds_[best_rank] + best.seconds, peak_) + best.seconds * spread_;
    for (std::int32_t c = first + 1; c < last; ++c) {
      const auto uc = static_cast<std::size_t>(c);
      const double add = added(uc, pairs);
      const auto r = static_cast<std::size_t>(candidates_[uc]);
      const double cost = std::max(seconds_[r] + add, peak_) + add * spread_;
      if (cost < best_cost || (cost == best_cost && better_tie(r, best_rank))) {
        best = {c, add};
        best_rank = r;
        best_cost = cost;
      }
    }
    return best;
  }
  // Sends `pairs` pairs to the picked candidate; returns its rank.
  std::int32_t assign(pick p, std::int32_t pairs) noexcept {
    const auto uc = static_cast<std::size_t>(p.candidate);
    const auto r = static_cast<std::size_t>(candidates_[uc]);
    seconds_[r] += p.seconds;
    peak_ = std::max(peak_, seconds_[r]);
    active_[uc] = call_;
    pairs_[r] += pairs;
    total_pairs_[r] += static_cast<std::uint64_t>(pairs);
    return static_cast<std::int32_t>(r);
  }
  // Whether rank a wins a tie against rank b (a > b: candidates come by increasing rank).
  [[nodiscard]] bool better_tie(std::size_t a, std::size_t b) const noexcept {
    if (pairs_[a] != pairs_[b]) {
      return pairs_[a] < pairs_[b];
    }
    return total_pairs_[a] < total_pairs_[b];
  }

  std::int32_t layers_;
  std::int32_t experts_;
  std::int32_t ranks_;
  std::int32_t local_experts_;
  dispatch_costs costs_;
  double spread_ = 1.0;                         // 1 / ranks
  std::vector<std::int32_t> offsets_;           // [layers * experts + 1] into candidates_
  std::vector<std::int32_t> candidates_;        // the rank of every replica, by (layer, expert)
  std::vector<std::int32_t> index_of_local_;    // [layers][ranks][local_experts] -> candidate or -1
  std::vector<std::int32_t> row_of_candidate_;  // per candidate: layer * experts + expert
  std::vector<double> copy_;                    // per candidate: its rank's copy seconds
  std::vector<double> first_pair_;      // per candidate: expert seconds + copy unless resident
  std::vector<std::uint8_t> resident_;  // per candidate
  std::vector<std::int32_t> resident_replicas_;  // per (layer, expert): its resident replicas
  std::vector<std::uint32_t> active_;            // per candidate: the call that activated it
  std::vector<double> seconds_;                  // per rank: T of the current call
  std::vector<std::int32_t> pairs_;              // per rank: pairs of the current call
  std::vector<std::uint64_t> total_pairs_;       // per rank: pairs since reset_load
  std::vector<std::uint32_t> seen_;              // per expert: the call that saw it (choose)
  std::vector<std::int32_t> tokens_of_;          // per expert: its pairs in the call (choose)
  std::vector<std::int32_t> placed_;             // per expert: the rank of a cold expert, or -1
  std::vector<std::int32_t> distinct_;           // the call's experts, first seen first (choose)
  // The call's experts resident nowhere with several replicas: (sort key, expert).
  std::vector<std::pair<std::uint64_t, std::int32_t>> cold_;
  double peak_ = 0.0;  // M: max of seconds_
  std::int32_t layer_ = -1;
  std::uint32_t call_ = 0;
};

}  // namespace wisp
