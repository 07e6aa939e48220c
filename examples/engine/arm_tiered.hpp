// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `tiered`: ZipMoE's compression-aware pools ([compression.md](../../docs/compression.md))
/// in place of the pager's slot cache. Per layer a `wisp::tiered_cache` keeps experts in four
/// states (F: BF16 rows the kernel reads; C: SM + E-chunks; S: SM chunks; E: E-chunks) sized by
/// the planner (`wisp::plan_for_trace`, Algorithm 4) on the warm-up's routing; every other expert
/// is read from the compressed masters (zip_masters.hpp).
///
/// **Memory.** The same bytes as `pager` at its cap: `cap x layers` expert rows and the same KV
/// blocks. `2k` of those rows are staging rows shared by every layer (where a non-F expert is
/// recovered to BF16 for its launch; its SM chunk and decoded exponents fit the row's two bytes
/// per value); the rest, split evenly over the layers, is each layer's pool budget. Pools are
/// sized with the largest expert's compressed bytes, so they hold whichever experts they get.
///
/// **A layer call.** `lookup` before the layer (where each distinct expert is); the F experts run
/// in one launch from their rows; the others in launches of `k`, alternating the two halves of the
/// staging rows, each launch's copies one call of the cache-affinity scheduler on the device
/// (device.hpp, tiered paging). `dispatch` (each expert to its pool by frequency rank) runs after
/// the layer has executed, at the layer's next call; an expert that enters F keeps its recovered
/// BF16 tensor (a device-side copy, not charged).
///
/// **The model's constants** (the planner's and the device's, one `wisp::tiered_sim_config`):
/// n = 3 tensors of `hidden x intermediate` values, K = the masters' E-chunks (8), u = one SM
/// chunk (1 byte per value) at `--bandwidth`, v = one E-chunk (the largest expert's exponent
/// bytes per value) at `--bandwidth`, c = one E-chunk's BF16 bytes at `--decode-gbps` per decode
/// thread, L = `--decode-threads`, recovery 0.
#pragma once

#include "index.hpp"
#include "residency.hpp"

#include <wisp/alloc/split.hpp>
#include <wisp/core/error.hpp>
#include <wisp/sim/tiered_sim.hpp>
#include <wisp/tiered/tiered_cache.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace wisp_engine {

/// @brief The tiered arm's model of one layer's experts (see the file comment), with
/// `budget_bytes` of pools per layer.
[[nodiscard]] inline wisp::tiered_sim_config tiered_model(const model_config& m,
                                                          const engine_options& o,
                                                          const zip_masters& zip,
                                                          std::uint64_t budget_bytes) {
  wisp::tiered_sim_config c;
  c.tensors = 3;
  c.tensor_elements = idx(m.hidden) * idx(m.intermediate);
  c.exponent_ratio = real(zip.max_e_bytes()) / real(zip.sm_bytes());
  c.e_chunks = zip.e_chunks();
  c.threads = o.decode_threads;
  c.link = {.bytes_per_second = o.link.bytes_per_second, .latency_seconds = 0.0};
  c.decode_bytes_per_second = o.decode_bytes_per_second;
  c.budget_bytes = budget_bytes;
  return c;
}

class tiered_residency final : public residency {
 public:
  memory_plan setup(const arm_context& ctx) override {
    WISP_EXPECTS(ctx.zip != nullptr, "tiered: the arm needs the compressed masters");
    K_ = ctx.model.top_k;
    E_ = ctx.model.experts;
    dev_ = &ctx.dev;
    const std::int32_t layers = ctx.model.layers;
    const std::int32_t cap = budget_cap(ctx);
    const wisp::split split = wisp::make_split(ctx.spec, ctx.budget, cap);
    const auto rows = idx(cap) * idx(layers);
    const auto staging = idx(2 * K_);
    if (rows < staging) {
      WISP_FAIL(wisp::infeasible_error, "tiered: ", rows, " expert rows (", cap,
                " per layer) do not hold the ", staging, " staging rows");
    }
    const std::uint64_t pool_bytes = (rows - staging) * ctx.model.expert_bytes() / idx(layers);
    const wisp::tiered_sim_config model =
        tiered_model(ctx.model, ctx.options, *ctx.zip, pool_bytes);
    sizes_ = ctx.options.tiers ? *ctx.options.tiers
                               : wisp::plan_for_trace(ctx.warmup.tokens, model).best.sizes;
    std::uint64_t used = 0;
    for (std::size_t p = 0; p < sizes_.size(); ++p) {
      used += idx(std::max(sizes_[p], 0)) * model.bytes()[p];
    }
    if (used > pool_bytes) {
      WISP_FAIL(wisp::infeasible_error, "tiered: pools F/C/S/E ", sizes_[0], "/", sizes_[1], "/",
                sizes_[2], "/", sizes_[3], " take ", wisp::format_bytes(used),
                " per layer, more than the ", wisp::format_bytes(pool_bytes), " left");
    }
    const auto f_rows = idx(sizes_[0]);
    for (std::int32_t l = 0; l < layers; ++l) {
      tiers_.emplace_back(E_, wisp::tier_config{sizes_, 0});
      (void)ctx.dev.add_tensor(f_rows);  // tensor l: layer l's F rows
      free_rows_.emplace_back();
      for (std::size_t r = f_rows; r-- > 0;) {
        free_rows_.back().push_back(static_cast<std::int32_t>(r));
      }
    }
    staging_ = ctx.dev.add_tensor(staging);
    const wisp::tier_costs schedule = model.schedule();
    ctx.dev.page_tiered(*ctx.zip, {.schedule = schedule,
                                   .tensors = model.tensors,
                                   .sm_chunk_bytes = real(model.tensor_elements),
                                   .e_chunk_bytes = model.exponent_ratio *
                                                    real(model.tensor_elements) / model.e_chunks});
    f_row_.assign(idx(layers * E_), -1);
    pending_.assign(idx(layers), false);
    memory_plan m;
    m.kv_blocks = split.kv_blocks;
    m.rows = cap;
    m.note = "pools F/C/S/E " + std::to_string(sizes_[0]) + "/" + std::to_string(sizes_[1]) + "/" +
             std::to_string(sizes_[2]) + "/" + std::to_string(sizes_[3]) + " of " +
             wisp::format_bytes(pool_bytes) + " per layer, " + std::to_string(staging) +
             " staging rows, " + std::to_string(split.kv_blocks) + " KV blocks";
    return m;
  }

  void begin_forward(std::span<const std::uint32_t> /*row_positions*/, bool warm) override {
    warm_ = warm;
    ++step_;
  }

  std::span<const moe_launch> layer(std::int32_t layer, std::span<const std::int32_t> ids,
                                    std::int32_t /*tokens*/) override {
    wisp::tiered_cache<>& cache = tiers_[idx(layer)];
    const wisp::access_context ctx{.step = step_, .layer = 0, .time = time_++};
    if (pending_[idx(layer)]) {  // the previous call has executed
      cache.dispatch(ctx);
      place_full(layer);
    }
    pending_[idx(layer)] = true;
    const std::span<const wisp::residency> where = cache.lookup(ids, ctx);
    const std::span<const std::int32_t> experts = cache.call_experts();
    std::size_t n = 0;
    open(n);
    for (std::size_t i = 0; i < experts.size(); ++i) {
      if (!warm_) {
        ++hits_[where[i] == wisp::residency::miss ? 4 : static_cast<std::size_t>(where[i])];
      }
      if (where[i] == wisp::residency::full) {
        launch_experts_[n].push_back(experts[i]);
        launch_rows_[n].push_back(f_row(layer, experts[i]));
      }
    }
    if (!launch_experts_[n].empty()) {
      close(n++, layer);
    }
    bool staged = false;  // launch n is open on the staging rows
    for (std::size_t i = 0; i < experts.size(); ++i) {
      if (where[i] == wisp::residency::full) {
        continue;
      }
      if (!staged) {
        open(n);
        half_ = 1 - half_;
        staged = true;
      }
      const auto row = static_cast<std::int32_t>(half_ * K_ + launch_rows_[n].size());
      launch_experts_[n].push_back(experts[i]);
      launch_rows_[n].push_back(row);
      copies_[n].push_back(
          {.tensor = staging_, .row = row, .expert = experts[i], .from = where[i]});
      if (static_cast<std::int32_t>(launch_experts_[n].size()) == K_) {
        close(n++, staging_);
        staged = false;
      }
    }
    if (staged) {
      close(n++, staging_);
    }
    launches_.resize(n);
    return launches_;
  }

  void finish(arm_result& res) override {
    res.tier_sizes = sizes_;
    res.tier_hits = hits_;
  }

 private:
  [[nodiscard]] std::int32_t& f_row(std::int32_t layer, std::int32_t e) {
    return f_row_[idx(layer * E_ + e)];
  }

  /// After a dispatch: F rows of experts that left F are freed, experts that entered F get a row
  /// holding their BF16 bytes.
  void place_full(std::int32_t layer) {
    const wisp::tiered_cache<>& cache = tiers_[idx(layer)];
    std::vector<std::int32_t>& free = free_rows_[idx(layer)];
    for (std::int32_t e = 0; e < E_; ++e) {
      if (f_row(layer, e) >= 0 && cache.where(e) != wisp::residency::full) {
        free.push_back(f_row(layer, e));
        f_row(layer, e) = -1;
      }
    }
    for (std::int32_t e = 0; e < E_; ++e) {
      if (f_row(layer, e) < 0 && cache.where(e) == wisp::residency::full) {
        f_row(layer, e) = free.back();
        free.pop_back();
        dev_->place(layer, {.tensor = layer, .row = f_row(layer, e), .expert = e});
      }
    }
  }

  /// Starts launch `n` with no experts and no copies.
  void open(std::size_t n) {
    for (auto* v : {&launch_experts_, &launch_rows_, &maps_}) {
      v->resize(std::max(v->size(), n + 1));
    }
    copies_.resize(std::max(copies_.size(), n + 1));
    launch_experts_[n].clear();
    launch_rows_[n].clear();
    copies_[n].clear();
  }

  /// Launch `n` shows its experts at their rows of `tensor`.
  void close(std::size_t n, std::int32_t tensor) {
    maps_[n].resize(idx(E_));
    show_only(maps_[n], launch_experts_[n], launch_rows_[n]);
    launches_.resize(std::max(launches_.size(), n + 1));
    launches_[n] = {tensor, maps_[n], copies_[n]};
  }

  std::int32_t K_ = 0, E_ = 0;
  device* dev_ = nullptr;
  std::int32_t staging_ = 0;  // the staging rows' tensor
  std::int32_t half_ = 1;     // the staging half the last non-F launch used
  bool warm_ = false;
  std::uint32_t step_ = 0;
  std::uint64_t time_ = 0;
  std::array<std::int32_t, 4> sizes_{};
  std::array<std::uint64_t, 5> hits_{};  // F, C, S, E, miss (evaluated calls)
  std::vector<wisp::tiered_cache<>> tiers_;
  std::vector<bool> pending_;                         // per layer: a call awaits its dispatch
  std::vector<std::int32_t> f_row_;                   // [layer x E]: F row, or -1
  std::vector<std::vector<std::int32_t>> free_rows_;  // per layer: free F rows
  std::vector<std::vector<std::int32_t>> launch_experts_, launch_rows_, maps_;
  std::vector<std::vector<row_copy>> copies_;
  std::vector<moe_launch> launches_;
};

}  // namespace wisp_engine
