// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `layer-offload`, what vLLM's `--cpu-offload-gb` does: the first `R` layers stay
/// resident (as many whole layers as the budget allows beside one layer of staging rows and the
/// KV floor); the other layers are streamed through the staging rows every forward.
///
/// How a streamed layer moves depends on the batch. A narrow batch (`tokens * k < E`, decode)
/// copies only its routed experts, after the router. A wide batch (prefill) needs about every
/// expert, so the whole layer is copied in one transfer (one link latency) issued a layer ahead,
/// before the router: it starts as soon as the previous streamed layer's launch has freed the
/// staging rows, overlapping compute (double buffering when a resident layer is in between).
#pragma once

#include "index.hpp"
#include "residency.hpp"

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace wisp_engine {

class layer_offload_residency final : public residency {
 public:
  memory_plan setup(const arm_context& ctx) override {
    L_ = ctx.model.layers;
    E_ = ctx.model.experts;
    K_ = ctx.model.top_k;
    // As many whole layers as fit beside the KV floor, one of them kept for staging.
    const auto fit = static_cast<std::int32_t>(std::min(rows_beside_floor(ctx) / idx(E_), idx(L_)));
    resident_ = fit >= L_ ? L_ : std::max(fit - 1, 0);
    memory_plan m;
    m.kv_blocks = kv_blocks_beside(  // throws when not even the staging layer fits
        ctx, "layer-offload", idx(resident_ + (resident_ < L_ ? 1 : 0)) * idx(E_));
    for (std::int32_t l = 0; l < resident_; ++l) {
      const std::int32_t t = ctx.dev.add_tensor(idx(E_));
      ctx.dev.fill(l, {.tensor = t, .row = 0, .expert = 0, .count = E_});
    }
    staging_ = resident_ < L_ ? ctx.dev.add_tensor(idx(E_)) : -1;
    map_.resize(idx(E_));
    seen_.assign(idx(E_), 0);
    m.rows = resident_;
    m.note = std::to_string(resident_) + " of " + std::to_string(L_) +
             " layers resident, one staging layer, " + std::to_string(m.kv_blocks) + " KV blocks";
    return m;
  }

  void begin_forward(std::span<const std::uint32_t> row_positions, bool /*warm*/) override {
    wide_ = count(row_positions) * K_ >= E_;
  }

  std::span<const row_copy> ahead(std::int32_t layer, const link_window& /*window*/) override {
    if (layer < resident_ || !wide_) {
      return {};
    }
    whole_ = {.tensor = staging_, .row = 0, .expert = 0, .count = E_};
    return {&whole_, 1};
  }

  std::span<const moe_launch> layer(std::int32_t layer, std::span<const std::int32_t> ids,
                                    std::int32_t /*tokens*/) override {
    distinct_experts(ids, seen_, experts_);
    show_only(map_, experts_, experts_);  // expert e in row e of its layer or the staging rows
    copies_.clear();
    if (layer >= resident_ && !wide_) {
      for (const std::int32_t e : experts_) {
        copies_.push_back({.tensor = staging_, .row = e, .expert = e, .count = 1});
      }
    }
    launch_ = {layer < resident_ ? layer : staging_, map_, copies_};
    return {&launch_, 1};
  }
  /// Only a streamed layer's narrow call copies what its routing names; a resident layer and a
  /// whole-layer copy issued ahead need no routing on the host.
  [[nodiscard]] bool host_sync(std::int32_t layer) const override {
    return layer >= resident_ && !wide_;
  }

 private:
  std::int32_t L_ = 0, E_ = 0, K_ = 0;
  std::int32_t resident_ = 0;  // layers [0, resident_) are tensors [0, resident_)
  std::int32_t staging_ = -1;
  bool wide_ = false;
  row_copy whole_;
  std::vector<std::int32_t> map_, experts_;
  std::vector<std::uint8_t> seen_;
  std::vector<row_copy> copies_;
  moe_launch launch_;
};

}  // namespace wisp_engine
