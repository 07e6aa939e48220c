// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `full`: every expert of every layer resident (one tensor per layer, identity rows), no
/// copies while serving. Infeasible when all experts and the KV floor exceed the budget; the
/// engine then also runs it at the smallest budget where it fits, as an upper bound.
#pragma once

#include "index.hpp"
#include "residency.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace wisp_engine {

class full_residency final : public residency {
 public:
  memory_plan setup(const arm_context& ctx) override {
    const std::int32_t L = ctx.model.layers, E = ctx.model.experts;
    memory_plan m;
    m.kv_blocks = kv_blocks_beside(ctx, "full", idx(L) * idx(E));
    for (std::int32_t l = 0; l < L; ++l) {
      const std::int32_t t = ctx.dev.add_tensor(idx(E));
      ctx.dev.fill(l, {.tensor = t, .row = 0, .expert = 0, .count = E});
    }
    map_.resize(idx(E));
    seen_.assign(idx(E), 0);
    m.rows = E;
    m.note = "all " + std::to_string(L * E) + " experts resident, " + std::to_string(m.kv_blocks) +
             " KV blocks";
    return m;
  }

  std::span<const moe_launch> layer(std::int32_t layer, std::span<const std::int32_t> ids,
                                    std::int32_t /*tokens*/) override {
    distinct_experts(ids, seen_, experts_);
    show_only(map_, experts_, experts_);  // expert e lives in row e of the layer's tensor
    launch_ = {layer, map_, {}};
    return {&launch_, 1};
  }
  /// Every expert is resident: the layer runs on the device without the routing on the host.
  [[nodiscard]] bool host_sync(std::int32_t /*layer*/) const override { return false; }

 private:
  std::vector<std::int32_t> map_, experts_;
  std::vector<std::uint8_t> seen_;
  moe_launch launch_;
};

}  // namespace wisp_engine
