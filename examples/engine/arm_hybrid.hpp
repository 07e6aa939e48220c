// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The arms that compute experts on the host:
/// - `cpu-moe-layers` (`cpu_moe_layers_residency`), llama.cpp's `--n-cpu-moe N`: the experts of
///   the first N layers stay in host memory and the host computes every expert routed there; the
///   other layers' experts are all resident. N is the fewest layers that leave the budget's rows
///   for the rest (and `2k` staging rows). A call of at least 32 rows (llama.cpp's
///   `GGML_OP_OFFLOAD_MIN_BATCH`) copies its routed experts of a host layer to the staging rows
///   and computes them on the device instead, as llama.cpp offloads large batches' host weights
///   (modelled copying only the routed experts, the cheaper of llama.cpp's two behaviours).
/// - `cpu-experts` (`cpu_experts_residency`), what low-VRAM users run today (llama.cpp
///   `--n-cpu-moe` / `-ot exps=CPU`, KTransformers, Fiddler): per layer the warm-up's most routed
///   experts are resident; every other routed expert is computed by the host, unless copying it
///   to a staging row alone is faster than computing it alone (Fiddler's rule, which is also
///   llama.cpp's offload of large ubatches to the GPU: many tokens make the host slower than the
///   copy). Staged experts are not kept: nothing adapts while serving.
/// - `pager+hybrid` (`hybrid_pager_residency`): `pager`, each call's misses split between copies
///   into the cache and host compute (leaving the cache unchanged) by the hybrid miss policy
///   (`wisp::hybrid_splitter`, <wisp/pager/hybrid.hpp>) under this device's costs
///   (`device::hybrid_costs`): with the link's and the host's backlog as they are, and a copied
///   miss worth its expected hits before eviction (`wisp::reuse_value_estimator` over the layer's
///   calls) less what it evicts, so an expert about to be reused is copied and a one-off one goes
///   to the host.
///
/// **A call of `pager+hybrid`.** The misses' positions are counted from the routing; the queues
/// are the link's and the host's backlog when the layer is planned. A call whose experts fit is
/// decided at once; a wider one (a prefill) in chunks of `min(k, cap / 2)` misses, each chunk
/// seeing the link and host time the chunks before it took; a copy in a wide call is worth
/// nothing beyond it (the call's later chunks evict it). Every host expert of the call runs in
/// one host launch.
///
/// **Memory.** `pager+hybrid` has the pager's rows. `cpu-experts` and `cpu-moe-layers` have the
/// same bytes: `2k` staging rows shared by every layer (two halves, alternating launch by launch,
/// so one launch's copies overlap the previous launch) and, per layer, the `cap - ceil(2k /
/// layers)` hottest experts pinned (`cpu-experts`), or every expert of the resident layers
/// (`cpu-moe-layers`).
#pragma once

#include "arm_pager.hpp"
#include "index.hpp"
#include "residency.hpp"

#include <wisp/pager/hybrid.hpp>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace wisp_engine {

/// @brief One arm's hybrid decisions: a call's misses split between copies and the host, the
/// queues tracked across the chunks of a call. Not thread-safe.
class host_splitter {
 public:
  void setup(const arm_context& ctx) {
    dev_ = &ctx.dev;
    positions_.assign(idx(ctx.model.experts), 0);
  }

  /// A call of `tokens` rows routed `ids` starts: positions per expert, the queues' backlog.
  void begin_call(std::span<const std::int32_t> ids, std::int32_t tokens) {
    for (const std::int32_t e : ids) {
      ++at(positions_, e);
    }
    cost_ = dev_->hybrid_costs(tokens);
    const double now = dev_->compute_free();  // the layer is planned now
    link_ = std::max(0.0, dev_->timeline().copies_done().time - now);
    host_ = std::max(0.0, dev_->host_timeline().compute_done().time - now);
    host_work_ = false;
  }
  /// Ends the call (clears the positions of `ids`).
  void end_call(std::span<const std::int32_t> ids) {
    for (const std::int32_t e : ids) {
      at(positions_, e) = 0;
    }
  }

  /// Whether expert `e` is routed by the current call.
  [[nodiscard]] bool in_call(std::int32_t e) const { return at(positions_, e) > 0; }

  /// Splits `misses` (at most `max_copies` copies; negative: no limit): appends the copied ones
  /// to `copied`, the host's to `host`. `value(e)` is what keeping `e` resident is worth, in
  /// seconds; `loss[m]` what the `m`-th copy evicts. @returns the copies.
  template <class Value>
  std::int32_t split(std::span<const std::int32_t> misses, std::int32_t max_copies, Value value,
                     std::vector<std::int32_t>& copied, std::vector<std::int32_t>& host,
                     std::span<const double> loss = {}) {
    calls_.clear();
    for (const std::int32_t e : misses) {
      calls_.push_back({.expert = e, .positions = at(positions_, e), .value_seconds = value(e)});
    }
    wisp::hybrid_cost_model cost = cost_;
    if (host_work_) {
      cost.call_seconds = 0;  // the call's hidden states already cross for its earlier chunks
    }
    flags_.resize(calls_.size());
    const wisp::hybrid_decision d = splitter_.split(
        cost, {.link_seconds = link_, .host_seconds = host_}, calls_, flags_, max_copies, loss);
    for (std::size_t i = 0; i < calls_.size(); ++i) {
      (flags_[i] != 0 ? copied : host).push_back(calls_[i].expert);
    }
    link_ += d.copies * cost.copy_seconds;
    if (d.host_experts > 0) {
      host_ += cost.call_seconds + cost.host_seconds(d.host_experts, d.host_positions);
      host_work_ = true;
    }
    return d.copies;
  }
  [[nodiscard]] const wisp::hybrid_cost_model& costs() const noexcept { return cost_; }

 private:
  device* dev_ = nullptr;
  std::vector<std::int32_t> positions_;  // [E]: positions of the current call per expert
  wisp::hybrid_cost_model cost_;
  double link_ = 0, host_ = 0;  // backlog in seconds from the planning, this call's included
  bool host_work_ = false;
  wisp::hybrid_splitter splitter_;
  std::vector<wisp::hybrid_miss> calls_;
  std::vector<std::uint8_t> flags_;
};

/// @brief `pager+hybrid` (see the file comment).
template <class Policy>
class hybrid_pager_residency final : public pager_arm<Policy> {
 public:
  std::span<const moe_launch> layer(std::int32_t layer, std::span<const std::int32_t> ids,
                                    std::int32_t tokens) override {
    wisp::pager<Policy>& pager = *this->pager_;
    this->begin_call(layer, ids, tokens);
    split_.begin_call(ids, tokens);
    const std::int32_t cap = pager.capacity(layer);
    const double miss = split_.costs().miss_seconds();
    const auto value = [&](std::int32_t e) { return values_->expected_hits(layer, e, cap) * miss; };
    // What the copies may evict: the resident experts the call does not use.
    resident_values_.clear();
    pager.cache(layer).for_each_resident([&](wisp::cache_key e, std::int32_t) {
      if (!split_.in_call(e)) {
        resident_values_.push_back(value(e));
      }
    });
    wisp::eviction_losses(cap - pager.cache(layer).size(), resident_values_, losses_);
    std::span<const double> loss = losses_;
    copied_.clear();
    host_.clear();
    std::size_t n = 0;
    if (count(this->experts_) <= cap) {
      misses_.clear();
      for (const std::int32_t e : this->experts_) {
        if (pager.slot_of(layer, e) < 0) {
          misses_.push_back(e);
        }
      }
      split_.split(misses_, -1, value, copied_, host_, loss);
      device_.clear();  // the call's experts in first-seen order, except the host's
      for (const std::int32_t e : this->experts_) {
        if (std::find(host_.begin(), host_.end(), e) == host_.end()) {
          device_.push_back(e);
        }
      }
      if (!device_.empty()) {
        this->keep(n++, layer, this->prepare_group(layer, device_));
      }
    } else {
      this->split_resident(layer, ids, tokens);
      if (!this->resident_.empty()) {
        this->keep(n++, layer, this->prepare_group(layer, this->resident_));
      }
      const std::size_t chunk = this->miss_chunk(layer);
      for (std::size_t i = 0; i < this->missing_.size(); i += chunk) {
        const std::size_t len = std::min(chunk, this->missing_.size() - i);
        // A copy here is evicted by the call's later chunks before any hit: it is worth
        // nothing beyond this call (the loss of what it evicts still counts).
        device_.clear();
        const std::int32_t copies = split_.split(
            std::span(this->missing_).subspan(i, len), -1, [](std::int32_t) { return 0.0; },
            device_, host_, loss);
        loss = loss.subspan(std::min(loss.size(), idx(copies)));
        if (!device_.empty()) {
          this->keep(n++, layer, this->prepare_group(layer, device_));
        }
        copied_.insert(copied_.end(), device_.begin(), device_.end());
      }
    }
    if (!host_.empty()) {
      this->keep_host(n++, host_);
    }
    values_->record_call(layer, this->experts_, count(copied_));
    split_.end_call(ids);
    return this->launches(layer, n);
  }

 protected:
  void configure(const arm_context& ctx) override {
    split_.setup(ctx);
    values_.emplace(ctx.model.layers, ctx.model.experts, ctx.options.value_rate);
  }

 private:
  host_splitter split_;
  std::optional<wisp::reuse_value_estimator> values_;
  std::vector<std::int32_t> misses_, copied_, host_, device_;
  std::vector<double> resident_values_, losses_;
};

/// @brief What `cpu-experts` and `cpu-moe-layers` share: per layer a set of pinned experts
/// (the layer's tensor holds them in rows 0..n-1) and `2k` staging rows shared by the layers; each
/// call's other experts are computed by the host or staged, as the arm's `to_host` rule says.
/// Staged experts are not kept: nothing adapts while serving.
class host_experts_residency : public residency {
 public:
  std::span<const moe_launch> layer(std::int32_t layer, std::span<const std::int32_t> ids,
                                    std::int32_t tokens) override {
    distinct_experts(ids, seen_, experts_);
    for (const std::int32_t e : ids) {
      ++at(positions_, e);
    }
    const wisp::hybrid_cost_model cost = dev_->hybrid_costs(tokens);
    const std::span<const std::int32_t> rows(row_of_.data() + idx(layer) * idx(E_), idx(E_));
    hits_.clear();
    copied_.clear();
    host_.clear();
    for (const std::int32_t e : experts_) {
      if (at(rows, e) >= 0) {
        hits_.push_back(e);
      } else if (to_host(cost, at(positions_, e), tokens)) {
        host_.push_back(e);
      } else {
        copied_.push_back(e);
      }
    }
    for (const std::int32_t e : ids) {
      at(positions_, e) = 0;
    }
    std::size_t n = 0;
    if (!hits_.empty()) {
      hit_rows_.clear();
      for (const std::int32_t e : hits_) {
        hit_rows_.push_back(at(rows, e));
      }
      launch(n++, layer, hits_, hit_rows_, false);
    }
    for (std::size_t i = 0; i < copied_.size(); i += idx(K_)) {  // the next staging half
      const auto chunk = std::span(copied_).subspan(i, std::min(idx(K_), copied_.size() - i));
      half_ = 1 - half_;
      staged_rows_.clear();
      for (std::int32_t j = 0; j < count(chunk); ++j) {
        staged_rows_.push_back(half_ * K_ + j);
      }
      launch(n, layer, chunk, staged_rows_, true);
      at(launches_, n++).tensor = staging_;
    }
    if (!host_.empty()) {
      launch(n, layer, host_, host_, false);
      at(launches_, n++).host = true;
    }
    launches_.resize(n);
    return launches_;
  }

 protected:
  /// Whether an expert that is not pinned, routed `positions` times by a call of `tokens` rows,
  /// is computed by the host (otherwise it is staged and computed on the device).
  [[nodiscard]] virtual bool to_host(const wisp::hybrid_cost_model& cost, std::int32_t positions,
                                     std::int32_t tokens) const = 0;

  /// Pins `pinned[l]` in layer `l`'s tensor (row `r` holds `pinned[l][r]`) and adds the `2k`
  /// staging rows (none when every layer pins all its experts). @returns the plan, KV blocks
  /// beside those rows. @throws wisp::infeasible_error (see `kv_blocks_beside`).
  memory_plan place(const arm_context& ctx, std::string_view arm,
                    const std::vector<std::vector<std::int32_t>>& pinned) {
    const std::int32_t layers = ctx.model.layers;
    E_ = ctx.model.experts;
    K_ = ctx.model.top_k;
    std::uint64_t rows = 0;
    bool all = true;
    for (const auto& p : pinned) {
      rows += p.size();
      all = all && count(p) == E_;
    }
    const std::int32_t staging = all ? 0 : 2 * K_;
    memory_plan m;
    m.kv_blocks = kv_blocks_beside(ctx, arm, rows + idx(staging));
    row_of_.assign(idx(layers) * idx(E_), -1);
    for (std::int32_t l = 0; l < layers; ++l) {
      const std::vector<std::int32_t>& p = pinned[idx(l)];
      const std::int32_t t = ctx.dev.add_tensor(p.size());  // tensor l is layer l's
      for (std::int32_t r = 0; r < count(p); ++r) {
        ctx.dev.fill(l, {.tensor = t, .row = r, .expert = at(p, r)});
        at(row_of_, l * E_ + at(p, r)) = r;
      }
    }
    staging_ = ctx.dev.add_tensor(idx(staging));
    dev_ = &ctx.dev;
    seen_.assign(idx(E_), 0);
    positions_.assign(idx(E_), 0);
    m.note =
        std::to_string(staging) + " staging rows, " + std::to_string(m.kv_blocks) + " KV blocks";
    return m;
  }

 private:
  /// Launch `i` of layer `layer` shows `experts` at `rows` of the layer's tensor; with `copy`, each
  /// is copied there first.
  void launch(std::size_t i, std::int32_t layer, std::span<const std::int32_t> experts,
              std::span<const std::int32_t> rows, bool copy) {
    if (maps_.size() <= i) {
      maps_.resize(i + 1);
      copies_.resize(i + 1);
      launches_.resize(i + 1);
    }
    maps_[i].resize(idx(E_));
    show_only(maps_[i], experts, rows);
    copies_[i].clear();
    for (std::size_t j = 0; copy && j < experts.size(); ++j) {
      copies_[i].push_back({.tensor = staging_, .row = rows[j], .expert = experts[j]});
    }
    launches_.resize(std::max(launches_.size(), i + 1));
    launches_[i] = {layer, maps_[i], copies_[i], false};
  }

  std::int32_t E_ = 0, K_ = 0;
  std::int32_t staging_ = 0;          // the staging tensor
  std::int32_t half_ = 0;             // the staging half the last copies went to
  std::vector<std::int32_t> row_of_;  // [layers x experts]: pinned row or -1
  device* dev_ = nullptr;
  std::vector<std::uint8_t> seen_;
  std::vector<std::int32_t> positions_;  // [E]: positions of the current call per expert
  std::vector<std::int32_t> experts_, hits_, hit_rows_, copied_, host_, staged_rows_;
  std::vector<std::vector<std::int32_t>> maps_;
  std::vector<std::vector<row_copy>> copies_;
  std::vector<moe_launch> launches_;
};

/// @brief `cpu-experts` (see the file comment).
class cpu_experts_residency final : public host_experts_residency {
 public:
  memory_plan setup(const arm_context& ctx) override {
    const std::int32_t layers = ctx.model.layers;
    const std::int32_t cap = budget_cap(ctx);
    const std::int32_t staging = 2 * ctx.model.top_k;
    const std::int32_t n = std::max(0, cap - (staging + layers - 1) / layers);
    std::vector<std::vector<std::int32_t>> pinned;
    for (std::int32_t l = 0; l < layers; ++l) {
      std::vector<std::int32_t> order =
          experts_by_frequency(ctx.warmup, l, ctx.model.experts, ctx.model.top_k);
      order.resize(idx(n));
      pinned.push_back(std::move(order));
    }
    memory_plan m = place(ctx, "cpu-experts", pinned);
    m.rows = n;
    m.note = std::to_string(n) + " pinned per layer, " + m.note;
    return m;
  }

 private:
  // Alone, the host finishes the expert no later than a copy would land.
  [[nodiscard]] bool to_host(const wisp::hybrid_cost_model& cost, std::int32_t positions,
                             std::int32_t /*tokens*/) const override {
    return cost.call_seconds + cost.host_seconds(1, positions) <= cost.copy_seconds;
  }
};

/// @brief `cpu-moe-layers` (see the file comment).
class cpu_moe_layers_residency final : public host_experts_residency {
 public:
  /// llama.cpp's `GGML_OP_OFFLOAD_MIN_BATCH` default: a call of at least this many rows copies
  /// the host layer's weights to the device instead of computing them on the CPU.
  static constexpr std::int32_t op_offload_min_batch = 32;

  memory_plan setup(const arm_context& ctx) override {
    const std::int32_t layers = ctx.model.layers;
    const std::int32_t experts = ctx.model.experts;
    const auto rows = static_cast<std::int64_t>(budget_cap(ctx)) * layers;
    // Every layer resident when they all fit; otherwise the staging rows come first.
    std::int64_t resident = rows / experts;
    if (resident < layers) {
      resident = std::max<std::int64_t>(0, (rows - 2 * ctx.model.top_k) / experts);
    }
    const std::int32_t host_layers =
        layers - static_cast<std::int32_t>(std::min<std::int64_t>(resident, layers));
    std::vector<std::vector<std::int32_t>> pinned(idx(layers));
    for (std::int32_t l = host_layers; l < layers; ++l) {  // llama.cpp: the first N on the CPU
      pinned[idx(l)].resize(idx(experts));
      std::iota(pinned[idx(l)].begin(), pinned[idx(l)].end(), 0);
    }
    memory_plan m = place(ctx, "cpu-moe-layers", pinned);
    m.rows = layers > host_layers ? experts : 0;
    m.note = "--n-cpu-moe " + std::to_string(host_layers) + ", " + m.note;
    return m;
  }

 private:
  [[nodiscard]] bool to_host(const wisp::hybrid_cost_model& /*cost*/, std::int32_t /*positions*/,
                             std::int32_t tokens) const override {
    return tokens < op_offload_min_batch;
  }
};

}  // namespace wisp_engine
