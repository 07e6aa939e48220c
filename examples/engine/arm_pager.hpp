// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The pager arms, `wisp::pager<Policy>` over one `virtual_expert_tensor` per layer. What
/// they share is `pager_arm`: the pager and its tensors, a layer's launches, forced resizes. Each
/// arm is a class of its own:
/// - `pager_residency` (`pager`): the cap is `--cap`, or the largest that leaves the KV floor of
///   `max_running` sessions (the same rows and KV as `static-hot`); at a fixed cap it also
///   reports Belady's optimum on its own calls;
/// - `planned_pager_residency` (`pager+plan`): the cap and KV blocks of `wisp::configure` (WiSP
///   Eq. 7) on the warm-up's per-layer reuse profile and a working-set KV curve of the warm-up
///   sessions, with a floor of one session;
/// - `dynamic_pager_residency` (`pager+dynamic`): `pager+plan`, then the online controller resizes
///   both pools at drained barriers (pager_resize.hpp);
/// - `prefetch_pager_residency` (`pager+prefetch`): `pager`, plus predictor-driven next-layer
///   prefetch (prefetcher.hpp);
/// - `zip_pager_residency` (`pager+zip`): `pager`, its misses moving compressed experts that the
///   device decodes (zip_masters.hpp, device.hpp);
/// - `hybrid_pager_residency` (`pager+hybrid`, arm_hybrid.hpp): `pager`, each miss copied or
///   computed by the host.
///
/// Per layer: a call whose distinct experts fit the cap is one `prepare` (one launch); a wider
/// call (prefill) is split by expert, each expert fetched at most once per forward: the resident
/// experts (first in `plan_expert_groups`' order) in one launch, then the misses in launches of
/// `min(k, cap / 2)`, double-buffered (see `pager_arm::layer`).
#pragma once

#include "index.hpp"
#include "pager_resize.hpp"
#include "prefetcher.hpp"
#include "residency.hpp"

#include <wisp/alloc/configurator.hpp>
#include <wisp/alloc/cost_model.hpp>
#include <wisp/cache/belady.hpp>
#include <wisp/pager/pager.hpp>
#include <wisp/reuse/histogram.hpp>
#include <wisp/reuse/trace_profile.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace wisp_engine {

/// KV floor of `concurrency` sessions of the longest context of `reqs`. The baselines and `pager`
/// keep `max_running` sessions' worth (every admitted session runs to the end without
/// preemption); `pager+plan` and `pager+dynamic` keep one (the least that admits every request)
/// and let the cost model or the controller decide the rest.
[[nodiscard]] inline wisp::admission_floor workload_floor(const std::vector<request>& reqs,
                                                          std::int32_t concurrency) {
  std::uint64_t longest = 0;
  for (const request& r : reqs) {
    longest = std::max<std::uint64_t>(longest, r.prompt.size() + idx(r.max_new_tokens));
  }
  return {idx(std::max(concurrency, 1)), longest};
}

/// @brief What every pager arm shares: the pager, one tensor per layer (tensor `l` is layer
/// `l`'s), the launches of a layer call, forced resizes. Derived arms add to it through
/// `choose_split`, `configure` and `prepared`.
template <class Policy>
class pager_arm : public residency {
 public:
  memory_plan setup(const arm_context& ctx) override {
    K_ = ctx.model.top_k;
    E_ = ctx.model.experts;
    wisp::admission_floor floor = ctx.floor;
    const wisp::split split = choose_split(ctx, floor);
    const std::int32_t cap = split.expert_cap;
    pager_ = std::make_unique<wisp::pager<Policy>>(wisp::pager_config{.layers = ctx.model.layers,
                                                                      .experts = E_,
                                                                      .top_k = K_,
                                                                      .capacity = cap,
                                                                      .max_tokens = 1024});
    for (std::int32_t l = 0; l < ctx.model.layers; ++l) {
      (void)ctx.dev.add_tensor(idx(cap));
    }
    resizer_.emplace(*pager_, ctx, floor, split);
    seen_.assign(idx(E_), 0);
    expert_positions_.assign(idx(E_), 0);
    configure(ctx);
    memory_plan m;
    m.kv_blocks = split.kv_blocks;
    m.rows = cap;
    m.note = "cap " + std::to_string(cap) + ", " + std::to_string(split.kv_blocks) + " KV blocks";
    return m;
  }

  void begin_forward(std::span<const std::uint32_t> row_positions, bool warm) override {
    pager_->begin_step();
    row_positions_ = row_positions;
    warm_ = warm;
  }

  std::span<const moe_launch> layer(std::int32_t layer, std::span<const std::int32_t> ids,
                                    std::int32_t tokens) override {
    begin_call(layer, ids, tokens);
    std::size_t n = 0;
    if (count(experts_) <= pager_->capacity(layer)) {
      keep(n++, layer, pager_->prepare(layer, ids, tokens, K_, row_positions_));
    } else {
      // Each expert once: the resident ones in one launch, then the misses in chunks of k (or
      // half the cap, if smaller), so (with LRU) a chunk's copies evict rows the previous chunk
      // does not read and overlap its compute.
      split_resident(layer, ids, tokens);
      if (!resident_.empty()) {
        keep(n++, layer, prepare_group(layer, resident_));
      }
      const std::size_t chunk = miss_chunk(layer);
      for (std::size_t i = 0; i < missing_.size(); i += chunk) {
        const std::size_t len = std::min(chunk, missing_.size() - i);
        keep(n++, layer, prepare_group(layer, std::span(missing_).subspan(i, len)));
      }
    }
    return launches(layer, n);
  }

  void between_forwards(barrier_context& ctx) override {
    for (const auto& [at, cap] : resizer_->options().forced_resizes) {
      if (at == ctx.forwards) {
        resizer_->force(cap, ctx);
      }
    }
  }

 protected:
  /// The split of the budget the arm runs at (default: the budget's cap, or `--cap`); may change
  /// the KV floor the resizes keep.
  virtual wisp::split choose_split(const arm_context& ctx, wisp::admission_floor& /*floor*/) {
    return wisp::make_split(ctx.spec, ctx.budget, budget_cap(ctx));
  }
  /// After the pager and its tensors exist: what a derived arm adds.
  virtual void configure(const arm_context& /*ctx*/) {}
  /// Every `prepare*` result of a layer call, in order (before its launch is built).
  virtual void prepared(std::int32_t /*layer*/, const wisp::prepare_result& /*r*/) {}

  /// The experts of a wide call, resident ones (in `plan_expert_groups`' order) into `resident_`,
  /// the others into `missing_`.
  void split_resident(std::int32_t layer, std::span<const std::int32_t> ids, std::int32_t tokens) {
    resident_.clear();
    missing_.clear();
    for (const wisp::expert_group& g : pager_->plan_expert_groups(layer, ids, tokens, K_)) {
      for (const std::int32_t e : g.experts) {
        (pager_->slot_of(layer, e) >= 0 ? resident_ : missing_).push_back(e);
      }
    }
  }
  /// A layer call of `tokens` rows routed `ids` starts: its distinct experts into `experts_`, and
  /// each one's position (that of the first row routing to it) for `prepare_group`.
  /// @throws wisp::logic_error if `begin_forward` gave another number of rows.
  void begin_call(std::int32_t layer, std::span<const std::int32_t> ids, std::int32_t tokens) {
    WISP_EXPECTS(count(row_positions_) == tokens, "pager arm: layer ", layer, " has ", tokens,
                 " rows but begin_forward gave ", row_positions_.size(), " row positions");
    distinct_experts(ids, seen_, experts_);
    for (std::size_t i = ids.size(); i-- > 0;) {  // backwards: the first row's write stands
      at(expert_positions_, ids[i]) = row_positions_[i / idx(K_)];
    }
  }
  /// Prepares `experts` (distinct experts of the call `begin_call` started) as one launch, each
  /// accessed at the position of the first row routing to it, as `prepare` gives a call's
  /// experts.
  wisp::prepare_result prepare_group(std::int32_t layer, std::span<const std::int32_t> experts) {
    group_positions_.clear();
    for (const std::int32_t e : experts) {
      group_positions_.push_back(at(expert_positions_, e));
    }
    return pager_->prepare(layer, experts, count(experts), 1, group_positions_);
  }
  /// Misses per launch of a wide call: `min(k, cap / 2)`, at least 1.
  [[nodiscard]] std::size_t miss_chunk(std::int32_t layer) const {
    return idx(std::max(1, std::min(K_, pager_->capacity(layer) / 2)));
  }

  /// Copies a prepare result (its spans die with the next prepare of the layer) into device
  /// launch `i`.
  void keep(std::size_t i, std::int32_t layer, const wisp::prepare_result& r) {
    prepared(layer, r);
    grow(i);
    maps_[i].assign(r.expert_map.begin(), r.expert_map.end());
    copies_[i].clear();
    for (const wisp::copy_op& op : r.copy_plan) {
      copies_[i].push_back({.tensor = layer, .row = op.slot, .expert = op.expert, .count = 1});
    }
    host_[i] = false;
  }
  /// Launch `i` is a host launch of `experts` (each shown at its own id).
  void keep_host(std::size_t i, std::span<const std::int32_t> experts) {
    grow(i);
    maps_[i].resize(idx(E_));
    show_only(maps_[i], experts, experts);
    copies_[i].clear();
    host_[i] = true;
  }
  /// The first `n` launches kept for `layer`.
  std::span<const moe_launch> launches(std::int32_t layer, std::size_t n) {
    launches_.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      launches_[i] = {layer, maps_[i], copies_[i], host_[i] != 0};
    }
    return launches_;
  }

  std::int32_t K_ = 0, E_ = 0;
  bool warm_ = false;
  std::unique_ptr<wisp::pager<Policy>> pager_;
  std::optional<pager_resizer<Policy>> resizer_;
  std::vector<std::uint8_t> seen_;
  std::vector<std::int32_t> experts_, resident_, missing_;
  std::span<const std::uint32_t> row_positions_;  // of the current forward, from begin_forward

 private:
  void grow(std::size_t i) {
    maps_.resize(std::max(maps_.size(), i + 1));
    copies_.resize(std::max(copies_.size(), i + 1));
    host_.resize(std::max(host_.size(), i + 1));
  }

  std::vector<std::vector<std::int32_t>> maps_;
  std::vector<std::vector<row_copy>> copies_;
  std::vector<std::uint8_t> host_;
  std::vector<moe_launch> launches_;
  std::vector<std::uint32_t> expert_positions_;  // [E]: see begin_call
  std::vector<std::uint32_t> group_positions_;   // scratch of prepare_group
};

/// @brief `pager`: at a fixed cap it records every call (warm-up included) and, at the end,
/// replays them through a `wisp::pager<belady>` of the same cap, built from each layer's future,
/// reporting the optimum's copies in the evaluated calls.
template <class Policy>
class pager_residency final : public pager_arm<Policy> {
 public:
  void begin_forward(std::span<const std::uint32_t> row_positions, bool warm) override {
    pager_arm<Policy>::begin_forward(row_positions, warm);
    if (record_) {
      calls_.push_back(-1);  // a forward starts
    }
  }

  void finish(arm_result& res) override {
    if (!record_) {
      return;
    }
    const wisp::pager<Policy>& pager = *this->pager_;
    std::vector<std::vector<wisp::cache_key>> future(idx(pager.layers()));
    for_each_call([&](std::int32_t layer, std::span<const std::int32_t> experts, bool) {
      if (layer >= 0) {  // not a forward's start
        auto& f = at(future, layer);
        f.insert(f.end(), experts.begin(), experts.end());
      }
    });
    wisp::pager<wisp::belady> optimum(wisp::pager_config{.layers = pager.layers(),
                                                         .experts = this->E_,
                                                         .top_k = this->K_,
                                                         .capacity = pager.capacity(0)},
                                      [&](std::int32_t l) { return wisp::belady(at(future, l)); });
    std::int64_t copies = 0;
    for_each_call([&](std::int32_t layer, std::span<const std::int32_t> experts, bool warm) {
      if (layer < 0) {
        optimum.begin_step();
        return;
      }
      const std::int32_t misses = optimum.prepare_experts(layer, experts).misses;
      copies += warm ? 0 : misses;
    });
    res.belady_copies = copies;
  }

 protected:
  void configure(const arm_context& ctx) override {
    record_ = ctx.options.forced_resizes.empty();  // a fixed cap
  }
  void prepared(std::int32_t layer, const wisp::prepare_result& r) override {
    if (record_) {  // (layer, warm, n, experts...)
      calls_.insert(calls_.end(), {layer, this->warm_ ? 1 : 0, count(r.experts)});
      calls_.insert(calls_.end(), r.experts.begin(), r.experts.end());
    }
  }

 private:
  /// Calls `f(layer, experts, warm)` for every recorded call in order, and `f(-1, {}, false)`
  /// where a forward starts.
  template <class F>
  void for_each_call(F f) const {
    for (std::size_t i = 0; i < calls_.size();) {
      if (calls_[i] < 0) {
        f(-1, std::span<const std::int32_t>{}, false);
        ++i;
        continue;
      }
      const std::size_t n = idx(calls_[i + 2]);
      f(calls_[i], std::span<const std::int32_t>(calls_).subspan(i + 3, n), calls_[i + 1] != 0);
      i += 3 + n;
    }
  }

  bool record_ = false;
  std::vector<std::int32_t> calls_;  // every prepare, see prepared() and for_each_call()
};

/// @brief `pager+plan`: the split of WiSP Eq. 7 from the warm-up's per-layer reuse profile and a
/// working-set KV curve of the warm-up sessions (the `max_running` longest of them are served at
/// once), with a KV floor of one session.
template <class Policy>
class planned_pager_residency : public pager_arm<Policy> {
 protected:
  wisp::split choose_split(const arm_context& ctx, wisp::admission_floor& floor) override {
    floor = workload_floor(ctx.requests, 1);
    const wisp::miss_curve expert_curve{
        wisp::profile_trace(ctx.warmup.tokens, wisp::cache_scope::per_layer).histogram};
    std::vector<std::uint64_t> blocks;
    for (const request& r : ctx.warmup.sessions) {
      blocks.push_back(blocks_for_tokens(r.prompt.size() + idx(std::max(r.max_new_tokens, 0)),
                                         ctx.spec.block_tokens));
    }
    std::sort(blocks.rbegin(), blocks.rend());
    std::uint64_t working = 0;
    for (std::size_t i = 0; i < blocks.size() && i < idx(ctx.options.max_running); ++i) {
      working += blocks[i];
    }
    const std::uint64_t rounds =
        ctx.warmup.sessions.empty() ? 1 : idx(ctx.warmup.sessions[0].max_new_tokens);
    const wisp::cost_model<> cost{ctx.spec, expert_curve,
                                  wisp::working_set_kv_curve(working, rounds),
                                  cost_params(ctx.options)};
    return wisp::configure(cost, ctx.budget, floor).choice;
  }
};

/// @brief `pager+dynamic`: `pager+plan`, then the online controller (pager_resize.hpp).
template <class Policy>
class dynamic_pager_residency final : public planned_pager_residency<Policy> {
 public:
  void between_forwards(barrier_context& ctx) override {
    this->resizer_->dynamic_barrier(ctx);
    planned_pager_residency<Policy>::between_forwards(ctx);
  }

 protected:
  void configure(const arm_context& ctx) override {
    this->resizer_->start_controller(ctx.requests);
  }
  void prepared(std::int32_t layer, const wisp::prepare_result& r) override {
    if (!this->warm_) {
      this->resizer_->record_call(layer, r.experts);
    }
  }
};

/// @brief `pager+prefetch`: the predicted experts of the next layer that fit the link's idle time
/// (prefetcher.hpp).
template <class Policy>
class prefetch_pager_residency final : public pager_arm<Policy> {
 public:
  void begin_forward(std::span<const std::uint32_t> row_positions, bool warm) override {
    pager_arm<Policy>::begin_forward(row_positions, warm);
    if (!warm) {
      prefetcher_->begin_forward(count(row_positions));
    }
  }
  std::span<const moe_launch> layer(std::int32_t layer, std::span<const std::int32_t> ids,
                                    std::int32_t tokens) override {
    if (!this->warm_) {
      prefetcher_->observe(layer, ids);
    }
    return pager_arm<Policy>::layer(layer, ids, tokens);
  }
  std::span<const row_copy> ahead(std::int32_t layer, const link_window& window) override {
    if (this->warm_) {
      return {};
    }
    return prefetcher_->prefetch(*this->pager_, layer, window, copy_seconds_);
  }
  void finish(arm_result& res) override { res.prefetch_useful = prefetcher_->useful(); }

 protected:
  void configure(const arm_context& ctx) override {
    const model_config& m = ctx.model;
    prefetcher_.emplace(m, ctx.options.prefetch,
                        wisp::coactivation_predictor({m.layers, m.experts, m.top_k}));
    prefetcher_->learn(ctx.warmup.tokens);
    copy_seconds_ = ctx.dev.timeline().link().copy_seconds(ctx.model.expert_bytes());
  }

 private:
  std::optional<next_layer_prefetcher<wisp::coactivation_predictor>> prefetcher_;
  double copy_seconds_ = 0;  // one expert on the link
};

/// @brief `pager+zip`: every copy moves the expert's compressed bytes, decoded on the device.
template <class Policy>
class zip_pager_residency final : public pager_arm<Policy> {
 protected:
  void configure(const arm_context& ctx) override {
    WISP_EXPECTS(ctx.zip != nullptr, "pager+zip: the arm needs the compressed masters");
    ctx.dev.page_compressed(*ctx.zip, ctx.options.decode_bytes_per_second);
  }
};

}  // namespace wisp_engine
