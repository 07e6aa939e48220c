// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The pager arms, `wisp::pager<Policy>` over one `virtual_expert_tensor` per layer:
/// - `pager`: the cap is `--cap`, or the largest that leaves the KV floor of `max_running`
///   sessions (the same rows and KV as `static-hot`);
/// - `pager+plan`: the cap and KV blocks of `wisp::configure` (WiSP Eq. 7) on the warm-up's
///   per-layer reuse profile and a working-set KV curve of the warm-up sessions, with a floor of
///   one session;
/// - `pager+dynamic`: `pager+plan`, then the online controller resizes both pools at drained
///   barriers (pager_resize.hpp);
/// - `pager+prefetch`: `pager`, plus predictor-driven next-layer prefetch (prefetcher.hpp);
/// - `pager+zip`: `pager`, its misses moving compressed experts that the device decodes
///   (zip_masters.hpp, device.hpp).
///
/// Per layer: a call whose distinct experts fit the cap is one `prepare` (one launch); a wider
/// call (prefill) is split by expert, each expert fetched at most once per forward: the resident
/// experts (first in `plan_expert_groups`' order) in one launch, then the misses in launches of
/// `min(k, cap / 2)`, double-buffered (see `layer`).
#pragma once

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
    longest = std::max<std::uint64_t>(longest, r.prompt.size() + r.max_new_tokens);
  }
  return {static_cast<std::uint64_t>(std::max(concurrency, 1)), longest};
}

template <class Policy>
class pager_residency final : public residency {
 public:
  explicit pager_residency(arm_kind kind) : kind_(kind) {}

  memory_plan setup(const arm_context& ctx) override {
    K_ = ctx.model.top_k;
    E_ = ctx.model.experts;
    wisp::admission_floor floor = ctx.floor;
    wisp::split split;
    if (kind_ == arm_kind::pager || kind_ == arm_kind::pager_prefetch ||
        kind_ == arm_kind::pager_zip) {
      split = wisp::make_split(ctx.spec, ctx.budget, budget_cap(ctx));
    } else {
      floor = workload_floor(ctx.requests, 1);
      split = offline_plan(ctx, floor);
    }
    const std::int32_t cap = split.expert_cap;
    pager_ = std::make_unique<wisp::pager<Policy>>(wisp::pager_config{.layers = ctx.model.layers,
                                                                      .experts = E_,
                                                                      .top_k = K_,
                                                                      .capacity = cap,
                                                                      .max_tokens = 1024});
    for (std::int32_t l = 0; l < ctx.model.layers; ++l) {
      (void)ctx.dev.add_tensor(static_cast<std::size_t>(cap));  // tensor l is layer l's
    }
    resizer_.emplace(*pager_, ctx, floor, split);
    if (kind_ == arm_kind::pager_dynamic) {
      resizer_->start_controller(ctx.requests);
    }
    if (kind_ == arm_kind::pager_zip) {
      ctx.dev.page_compressed(*ctx.zip, ctx.options.decode_bytes_per_second);
    }
    if (kind_ == arm_kind::pager_prefetch) {
      prefetcher_.emplace(ctx.model, ctx.options.prefetch);
      prefetcher_->learn(ctx.warmup.tokens);
      copy_seconds_ = ctx.dev.timeline().link().copy_seconds(ctx.model.expert_bytes());
    }
    seen_.assign(static_cast<std::size_t>(E_), 0);
    record_calls_ = kind_ == arm_kind::pager && ctx.options.forced_resizes.empty();  // fixed cap
    memory_plan m;
    m.kv_blocks = split.kv_blocks;
    m.rows = cap;
    m.note = "cap " + std::to_string(cap) + ", " + std::to_string(split.kv_blocks) + " KV blocks";
    return m;
  }

  void begin_forward(std::int32_t tokens, bool warm) override {
    pager_->begin_step();
    warm_ = warm;
    if (prefetcher_ && !warm) {
      prefetcher_->begin_forward(tokens);
    }
    if (record_calls_) {
      calls_.push_back(-1);  // a forward starts
    }
  }

  std::span<const moe_launch> layer(std::int32_t layer, std::span<const std::int32_t> ids,
                                    std::int32_t tokens) override {
    if (prefetcher_ && !warm_) {
      prefetcher_->observe(layer, ids);
    }
    distinct_experts(ids, seen_, experts_);
    std::size_t n = 0;
    if (static_cast<std::int32_t>(experts_.size()) <= pager_->capacity(layer)) {
      keep(n++, layer, pager_->prepare(layer, ids, tokens, K_));
    } else {
      // Each expert once: the resident ones in one launch, then the misses in chunks of k (or
      // half the cap, if smaller), so (with LRU) a chunk's copies evict rows the previous chunk
      // does not read and overlap its compute.
      resident_.clear();
      missing_.clear();
      for (const wisp::expert_group& g : pager_->plan_expert_groups(layer, ids, tokens, K_)) {
        for (const std::int32_t e : g.experts) {
          (pager_->slot_of(layer, e) >= 0 ? resident_ : missing_).push_back(e);
        }
      }
      if (!resident_.empty()) {
        keep(n++, layer, pager_->prepare_experts(layer, resident_));
      }
      const auto chunk =
          static_cast<std::size_t>(std::max(1, std::min(K_, pager_->capacity(layer) / 2)));
      for (std::size_t i = 0; i < missing_.size(); i += chunk) {
        const std::size_t len = std::min(chunk, missing_.size() - i);
        keep(n++, layer, pager_->prepare_experts(layer, std::span(missing_).subspan(i, len)));
      }
    }
    launches_.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      launches_[i] = {layer, maps_[i], copies_[i]};
    }
    return launches_;
  }

  /// `pager+prefetch`: the predicted experts of `layer` that fit the link's idle time.
  std::span<const row_copy> ahead(std::int32_t layer, const link_window& window) override {
    if (!prefetcher_ || warm_) {
      return {};
    }
    return prefetcher_->prefetch(*pager_, layer, window, copy_seconds_);
  }

  /// `pager` at a fixed cap: replays every recorded call (warm-up included) through a
  /// `wisp::pager<belady>` of the same cap, built from each layer's future, and reports the
  /// optimum's copies in the evaluated calls.
  void finish(arm_result& res) override {
    if (prefetcher_) {
      res.prefetch_useful = prefetcher_->useful();
    }
    if (!record_calls_) {
      return;
    }
    std::vector<std::vector<wisp::cache_key>> future(static_cast<std::size_t>(pager_->layers()));
    for_each_call([&](std::int32_t layer, std::span<const std::int32_t> experts, bool) {
      if (layer >= 0) {  // not a forward's start
        auto& f = future[static_cast<std::size_t>(layer)];
        f.insert(f.end(), experts.begin(), experts.end());
      }
    });
    wisp::pager<wisp::belady> optimum(
        wisp::pager_config{.layers = pager_->layers(),
                           .experts = E_,
                           .top_k = K_,
                           .capacity = pager_->capacity(0)},
        [&](std::int32_t l) { return wisp::belady(future[static_cast<std::size_t>(l)]); });
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

  void between_forwards(barrier_context& ctx) override {
    if (kind_ == arm_kind::pager_dynamic) {
      resizer_->dynamic_barrier(ctx);
    }
    for (const auto& [at, cap] : resizer_->options().forced_resizes) {
      if (at == ctx.forwards) {
        resizer_->force(cap, ctx);
      }
    }
  }

 private:
  /// Copies a prepare result (its spans die with the next prepare of the layer) into launch `i`;
  /// `pager` also records the call for `finish`, `pager+dynamic` for its controller.
  void keep(std::size_t i, std::int32_t layer, const wisp::prepare_result& r) {
    if (kind_ == arm_kind::pager_dynamic && !warm_) {
      resizer_->record_call(layer, r.experts);
    }
    if (record_calls_) {  // (layer, warm, n, experts...)
      calls_.insert(calls_.end(),
                    {layer, warm_ ? 1 : 0, static_cast<std::int32_t>(r.experts.size())});
      calls_.insert(calls_.end(), r.experts.begin(), r.experts.end());
    }
    maps_.resize(std::max(maps_.size(), i + 1));
    copies_.resize(std::max(copies_.size(), i + 1));
    maps_[i].assign(r.expert_map.begin(), r.expert_map.end());
    copies_[i].clear();
    for (const wisp::copy_op& op : r.copy_plan) {
      copies_[i].push_back({.tensor = layer, .row = op.slot, .expert = op.expert, .count = 1});
    }
  }

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
      const auto n = static_cast<std::size_t>(calls_[i + 2]);
      f(calls_[i], std::span<const std::int32_t>(calls_).subspan(i + 3, n), calls_[i + 1] != 0);
      i += 3 + n;
    }
  }

  /// WiSP Eq. 7 from the warm-up's per-layer reuse profile and a working-set KV curve of the
  /// warm-up sessions (the `max_running` longest of them are served at once).
  static wisp::split offline_plan(const arm_context& ctx, const wisp::admission_floor& floor) {
    const wisp::miss_curve expert_curve{
        wisp::profile_trace(ctx.warmup.tokens, wisp::reuse_scope::per_layer).histogram};
    std::vector<std::uint64_t> blocks;
    for (const request& r : ctx.warmup.sessions) {
      blocks.push_back(blocks_for_tokens(
          r.prompt.size() + static_cast<std::uint64_t>(std::max(r.max_new_tokens, 0)),
          ctx.spec.block_tokens));
    }
    std::sort(blocks.rbegin(), blocks.rend());
    std::uint64_t working = 0;
    for (std::size_t i = 0;
         i < blocks.size() && i < static_cast<std::size_t>(ctx.options.max_running); ++i) {
      working += blocks[i];
    }
    const auto rounds = static_cast<std::uint64_t>(
        ctx.warmup.sessions.empty() ? 1 : ctx.warmup.sessions[0].max_new_tokens);
    const wisp::cost_model<> cost{ctx.spec, expert_curve,
                                  wisp::working_set_kv_curve(working, rounds),
                                  cost_params(ctx.options)};
    return wisp::configure(cost, ctx.budget, floor).choice;
  }

  arm_kind kind_;
  std::int32_t K_ = 0, E_ = 0;
  bool warm_ = false;
  bool record_calls_ = false;  // for the Belady bound (finish)
  std::unique_ptr<wisp::pager<Policy>> pager_;
  std::optional<pager_resizer<Policy>> resizer_;
  std::optional<next_layer_prefetcher> prefetcher_;  // pager+prefetch only
  double copy_seconds_ = 0;                          // one expert on the link
  std::vector<std::uint8_t> seen_;
  std::vector<std::int32_t> experts_, resident_, missing_;
  std::vector<std::vector<std::int32_t>> maps_;
  std::vector<std::vector<row_copy>> copies_;
  std::vector<moe_launch> launches_;
  std::vector<std::int32_t> calls_;  // pager: every prepare, see keep() and for_each_call()
};

}  // namespace wisp_engine
