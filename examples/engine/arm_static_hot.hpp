// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `static-hot`: per layer, the `H` experts the warm-up routed most often are pinned; the
/// other `S = cap - H` rows stage misses and keep what they staged (the least recently used
/// staged expert is replaced first), so a staged expert routed again is not copied again.
///
/// The cap is the pager's (same rows, same KV). `H` (unless `--hot` fixes it) is the value in
/// `[0, cap - k]` with the fewest misses when the warm-up is replayed through this very logic, so
/// both the pinned set and the split come from the warm-up and never from the evaluated sessions.
/// A call whose misses do not fit the staging rows beside its own staged experts (a prefill) runs
/// in several launches of `min(k, (cap - H) / 2)` misses each, double-buffered: a launch's copies
/// go to rows the previous launch does not read, so they overlap its compute.
#pragma once

#include "index.hpp"
#include "residency.hpp"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <vector>

namespace wisp_engine {

namespace detail {

/// The planning of one layer of `static-hot`: pinned rows `[0, H)`, staging rows `[H, cap)`.
class hot_layer {
 public:
  struct launch_plan {
    std::vector<std::int32_t> experts, rows;  // visible experts and their rows
    std::vector<std::int32_t> copied;         // the experts of this launch that are copied
  };

  hot_layer(std::int32_t experts, std::int32_t top_k, std::span<const std::int32_t> pinned,
            std::int32_t cap)
      : k_(idx(top_k)),
        row_of_(idx(experts), -1),
        pinned_(count(pinned)),
        staged_(idx(cap - pinned_), -1),
        last_use_(staged_.size(), 0),
        busy_(staged_.size(), 0),
        seen_(idx(experts), 0) {
    for (std::int32_t i = 0; i < count(pinned); ++i) {
      row_of(at(pinned, i)) = i;
    }
  }

  /// Plans the launches of a call. @returns how many (`launches()[0, n)`).
  std::size_t plan(std::span<const std::int32_t> ids) {
    distinct_experts(ids, seen_, experts_);
    reset(0);
    std::fill(busy_.begin(), busy_.end(), 0);
    misses_.clear();
    for (const std::int32_t e : experts_) {  // hits (pinned or staged) go in the first launch
      const std::int32_t row = row_of(e);
      if (row < 0) {
        misses_.push_back(e);
        continue;
      }
      add(0, e, row);
      if (row >= pinned()) {
        touch(row);
      }
    }
    // Misses that fit the free staging rows join the first launch; a wider call streams them in
    // launches of k (or half the staging rows, if fewer), so one launch's copies overlap the
    // previous one's compute (the least recently used rows are not the ones just read).
    const std::size_t free_rows = idx(std::count(busy_.begin(), busy_.end(), 0));
    const std::size_t chunk = misses_.size() <= free_rows
                                  ? misses_.size()
                                  : std::max<std::size_t>(1, std::min(k_, busy_.size() / 2));
    std::size_t n = 1, in_launch = 0;
    for (const std::int32_t e : misses_) {
      std::int32_t row = in_launch < chunk ? victim() : -1;
      if (row < 0) {
        std::fill(busy_.begin(), busy_.end(), 0);
        reset(n++);
        in_launch = 0;
        row = victim();
      }
      place(row, e);
      add(n - 1, e, row);
      launches_[n - 1].copied.push_back(e);
      ++in_launch;
    }
    return n;
  }
  [[nodiscard]] const std::vector<launch_plan>& launches() const noexcept { return launches_; }
  [[nodiscard]] std::int32_t pinned() const noexcept { return pinned_; }

 private:
  void reset(std::size_t i) {
    if (launches_.size() <= i) {
      launches_.resize(i + 1);
    }
    launches_[i].experts.clear();
    launches_[i].rows.clear();
    launches_[i].copied.clear();
  }
  void add(std::size_t i, std::int32_t e, std::int32_t row) {
    launches_[i].experts.push_back(e);
    launches_[i].rows.push_back(row);
    if (row >= pinned()) {
      at(busy_, row - pinned()) = 1;
    }
  }
  void touch(std::int32_t row) { at(last_use_, row - pinned()) = ++clock_; }
  [[nodiscard]] std::int32_t victim() const {
    std::int32_t best = -1;
    for (std::int32_t i = 0; i < count(staged_); ++i) {
      if (at(busy_, i) == 0 && (best < 0 || at(last_use_, i) < at(last_use_, best))) {
        best = i;
      }
    }
    return best < 0 ? -1 : best + pinned();
  }
  std::int32_t& row_of(std::int32_t e) { return at(row_of_, e); }
  void place(std::int32_t row, std::int32_t e) {
    const std::size_t i = idx(row - pinned());
    if (staged_[i] >= 0) {
      row_of(staged_[i]) = -1;
    }
    staged_[i] = e;
    row_of(e) = row;
    touch(row);
  }

  std::size_t k_;
  std::vector<std::int32_t> row_of_;  // expert -> row, -1 when neither pinned nor staged
  std::int32_t pinned_;
  std::vector<std::int32_t> staged_;  // staging row - H -> expert or -1
  std::vector<std::uint64_t> last_use_;
  std::vector<std::uint8_t> busy_;  // staging rows holding an expert of the current launch
  std::uint64_t clock_ = 0;
  std::vector<std::uint8_t> seen_;
  std::vector<std::int32_t> experts_, misses_;
  std::vector<launch_plan> launches_;
};

}  // namespace detail

class static_hot_residency final : public residency {
 public:
  memory_plan setup(const arm_context& ctx) override {
    const std::int32_t L = ctx.model.layers, E = ctx.model.experts, K = ctx.model.top_k;
    const std::int32_t cap = budget_cap(ctx);
    memory_plan m;
    m.kv_blocks = kv_blocks_beside(ctx, "static-hot", idx(cap) * idx(L));
    m.rows = cap;
    std::int64_t pinned_total = 0;
    for (std::int32_t l = 0; l < L; ++l) {
      const std::vector<std::int32_t> order = experts_by_frequency(ctx.warmup, l, E, K);
      std::int32_t hot = ctx.options.hot;
      if (hot < 0) {
        hot = best_hot(ctx.warmup, l, order, E, K, cap);
      }
      WISP_EXPECTS(hot >= 0 && hot <= cap - K, "static-hot: ", hot, " pinned experts leave ",
                   cap - hot, " staging rows of a cap of ", cap, ", fewer than k = ", K);
      const std::span<const std::int32_t> pinned(order.data(), idx(hot));
      layers_.emplace_back(E, K, pinned, cap);
      const std::int32_t t = ctx.dev.add_tensor(idx(cap));
      for (std::int32_t i = 0; i < hot; ++i) {
        ctx.dev.fill(l, {.tensor = t, .row = i, .expert = at(pinned, i)});
      }
      pinned_total += hot;
    }
    m.note = "cap " + std::to_string(cap) + ", " + std::to_string(pinned_total / L) +
             " pinned per layer (mean), " + std::to_string(m.kv_blocks) + " KV blocks";
    E_ = E;
    return m;
  }

  std::span<const moe_launch> layer(std::int32_t layer, std::span<const std::int32_t> ids,
                                    std::int32_t /*tokens*/) override {
    auto& hot = at(layers_, layer);
    const std::size_t n = hot.plan(ids);
    maps_.resize(std::max(maps_.size(), n));
    copies_.resize(std::max(copies_.size(), n));
    launches_.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      const auto& p = hot.launches()[i];
      maps_[i].resize(idx(E_));
      show_only(maps_[i], p.experts, p.rows);
      copies_[i].clear();
      for (const std::int32_t e : p.copied) {
        copies_[i].push_back({.tensor = layer, .row = at(maps_[i], e), .expert = e, .count = 1});
      }
      launches_[i] = {layer, maps_[i], copies_[i]};
    }
    return launches_;
  }

 private:
  /// The pinned count in `[0, cap - k]` with the fewest misses over the warm-up (the smallest on
  /// a tie: more staging rows, fewer extra launches).
  static std::int32_t best_hot(const warmup_log& w, std::int32_t l,
                               const std::vector<std::int32_t>& order, std::int32_t E,
                               std::int32_t K, std::int32_t cap) {
    std::int32_t best = 0;
    std::uint64_t fewest = ~std::uint64_t{0};
    for (std::int32_t hot = 0; hot <= cap - K; ++hot) {
      detail::hot_layer sim(E, K, std::span<const std::int32_t>(order.data(), idx(hot)), cap);
      std::uint64_t misses = 0;
      for (const auto& f : w.forwards) {
        const std::size_t n = sim.plan(f.layer(l, K));
        for (std::size_t i = 0; i < n; ++i) {
          misses += sim.launches()[i].copied.size();
        }
      }
      if (misses < fewest) {
        fewest = misses;
        best = hot;
      }
    }
    return best;
  }

  std::int32_t E_ = 0;
  std::vector<detail::hot_layer> layers_;
  std::vector<std::vector<std::int32_t>> maps_;
  std::vector<std::vector<row_copy>> copies_;
  std::vector<moe_launch> launches_;
};

}  // namespace wisp_engine
