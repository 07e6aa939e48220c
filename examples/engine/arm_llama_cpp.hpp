// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `llama.cpp-cache`: llama.cpp's upstream expert cache (`src/llama-moe-cache.cpp`) as its
/// users run it, through `wisp::llama_cpp_cache` (written from its description, tested against a
/// list LRU): one LRU pool over every layer's experts (global scope), the call's hits touched
/// first, misses placed in ascending expert order so that consecutive experts land in consecutive
/// slots and upload as one copy (one link latency for the run), and only ubatches of at most 32
/// tokens using the cache: a larger one (a prefill) reads its hits where they are and uploads
/// the rest without evicting anything. One host sync per layer (the routing read back), as
/// upstream.
///
/// **Memory.** The pager's bytes: `cap x layers` rows, of which `2k` are staging rows for the
/// bypassed ubatches and the rest the pool. Upstream uploads a bypassed ubatch's misses into a
/// full-size staging copy of the layer; here the same budget as every other arm holds them, so a
/// bypassed call's misses go in launches of `k`, alternating the two halves of the staging rows
/// (one launch's copies overlap the previous launch's compute).
#pragma once

#include "index.hpp"
#include "residency.hpp"

#include <wisp/pager/llama_cpp_cache.hpp>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace wisp_engine {

class llama_cpp_residency final : public residency {
 public:
  memory_plan setup(const arm_context& ctx) override {
    E_ = ctx.model.experts;
    K_ = ctx.model.top_k;
    const std::int32_t L = ctx.model.layers;
    const std::int32_t rows = budget_cap(ctx) * L;
    const std::int32_t staging = 2 * K_;
    if (rows < staging + K_) {
      WISP_FAIL(wisp::infeasible_error, "llama.cpp-cache: ", rows,
                " expert rows do not hold the pool of at least k = ", K_, " slots beside ", staging,
                " staging rows");
    }
    pool_ = std::min(rows - staging, L * E_);
    memory_plan m;
    m.kv_blocks = kv_blocks_beside(ctx, "llama.cpp-cache", idx(pool_) + idx(staging));
    cache_.emplace(wisp::llama_cpp_cache_config{
        .layers = L, .experts = E_, .top_k = K_, .capacity = pool_, .max_batch = 32});
    tensor_ = ctx.dev.add_tensor(idx(pool_ + staging), idx(pool_ + staging));
    seen_.assign(idx(E_), 0);
    m.rows = pool_ / L;
    m.note = "global pool of " + std::to_string(pool_) + " slots, " + std::to_string(staging) +
             " staging rows, " + std::to_string(m.kv_blocks) + " KV blocks";
    return m;
  }

  void begin_forward(std::span<const std::uint32_t> /*row_positions*/, bool warm) override {
    if (!warm && !evaluating_) {  // the evaluation's counters start after the warm-up
      warmup_ = cache_->stats();
      evaluating_ = true;
    }
  }

  std::span<const moe_launch> layer(std::int32_t layer, std::span<const std::int32_t> ids,
                                    std::int32_t tokens) override {
    const wisp::llama_cpp_plan p = cache_->plan(layer, ids, tokens);
    distinct_experts(ids, seen_, experts_);
    std::size_t n = 0;
    if (p.cached) {  // one launch: every expert of the call at its slot, after the uploads
      rows_.clear();
      for (const std::int32_t e : experts_) {
        rows_.push_back(at(p.expert_map, e));
      }
      show(n, experts_, rows_);
      merge_uploads(copies_[n++], p.uploads, 0);
    } else {  // the hits where they are, then the misses through the staging rows
      hits_.clear();
      rows_.clear();
      for (const std::int32_t e : experts_) {
        const std::int32_t slot = at(p.expert_map, e);
        if (slot < pool_) {
          hits_.push_back(e);
          rows_.push_back(slot);
        }
      }
      if (!hits_.empty()) {
        show(n, hits_, rows_);
        copies_[n++].clear();
      }
      for (std::size_t i = 0; i < p.uploads.size(); i += idx(K_)) {
        const auto chunk = p.uploads.subspan(i, std::min(idx(K_), p.uploads.size() - i));
        half_ = 1 - half_;
        const std::int32_t base = pool_ + half_ * K_;
        staged_.clear();
        rows_.clear();
        for (std::size_t j = 0; j < chunk.size(); ++j) {
          staged_.push_back(chunk[j].expert);
          rows_.push_back(base + count(rows_));
        }
        show(n, staged_, rows_);
        merge_uploads(copies_[n++], chunk, base - chunk.front().slot);
      }
    }
    launches_.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      launches_[i] = {tensor_, maps_[i], copies_[i], false};
    }
    return launches_;
  }

  void finish(arm_result& res) override {
    res.upload_runs = cache_->stats().upload_runs - warmup_.upload_runs;
    res.bypassed_calls = cache_->stats().bypassed_calls - warmup_.bypassed_calls;
  }

 private:
  /// Launch `i` shows `experts` at `rows` (its copies are set apart).
  void show(std::size_t i, std::span<const std::int32_t> experts,
            std::span<const std::int32_t> rows) {
    if (maps_.size() <= i) {
      maps_.resize(i + 1);
      copies_.resize(i + 1);
    }
    maps_[i].resize(idx(E_));
    show_only(maps_[i], experts, rows);
  }
  /// The uploads (ascending experts) as copies into rows `slot + shift`, consecutive (expert,
  /// row) pairs merged into one copy, as upstream merges them into one `set_tensor_async`.
  void merge_uploads(std::vector<row_copy>& out, std::span<const wisp::copy_op> uploads,
                     std::int32_t shift) const {
    out.clear();
    for (std::size_t j = 0; j < uploads.size(); ++j) {
      const std::int32_t row = uploads[j].slot + shift;
      if (j > 0 && uploads[j].expert == uploads[j - 1].expert + 1 &&
          uploads[j].slot == uploads[j - 1].slot + 1) {
        ++out.back().count;
        continue;
      }
      out.push_back({.tensor = tensor_, .row = row, .expert = uploads[j].expert, .count = 1});
    }
  }

  std::int32_t E_ = 0, K_ = 0;
  std::int32_t pool_ = 0;    // slots of the global pool: rows [0, pool_) of the tensor
  std::int32_t tensor_ = 0;  // the pool and, after it, 2k staging rows
  std::int32_t half_ = 0;    // the staging half the last bypassed launch used
  std::optional<wisp::llama_cpp_cache> cache_;
  wisp::llama_cpp_stats warmup_;  // the counters when the evaluation began
  bool evaluating_ = false;
  std::vector<std::uint8_t> seen_;
  std::vector<std::int32_t> experts_, hits_, staged_, rows_;
  std::vector<std::vector<std::int32_t>> maps_;
  std::vector<std::vector<row_copy>> copies_;
  std::vector<moe_launch> launches_;
};

}  // namespace wisp_engine
