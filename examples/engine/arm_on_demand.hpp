// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `on-demand`: no expert cache. One layer's worth of rows is the staging area; every call
/// copies exactly its routed experts (one copy each) after the router and runs one launch: the
/// bytes a UVA read of the routed experts costs. Every other byte of the budget is KV.
#pragma once

#include "index.hpp"
#include "residency.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace wisp_engine {

class on_demand_residency final : public residency {
 public:
  memory_plan setup(const arm_context& ctx) override {
    const std::int32_t E = ctx.model.experts;
    memory_plan m;
    m.kv_blocks = kv_blocks_beside(ctx, "on-demand", idx(E));
    tensor_ = ctx.dev.add_tensor(idx(E));
    map_.resize(idx(E));
    seen_.assign(idx(E), 0);
    m.note = std::to_string(E) + " staging rows, " + std::to_string(m.kv_blocks) + " KV blocks";
    return m;
  }

  std::span<const moe_launch> layer(std::int32_t /*layer*/, std::span<const std::int32_t> ids,
                                    std::int32_t /*tokens*/) override {
    distinct_experts(ids, seen_, experts_);
    show_only(map_, experts_, experts_);  // expert e is staged in row e
    copies_.clear();
    for (const std::int32_t e : experts_) {
      copies_.push_back({.tensor = tensor_, .row = e, .expert = e, .count = 1});
    }
    launch_ = {tensor_, map_, copies_};
    return {&launch_, 1};
  }

 private:
  std::int32_t tensor_ = 0;
  std::vector<std::int32_t> map_, experts_;
  std::vector<std::uint8_t> seen_;
  std::vector<row_copy> copies_;
  moe_launch launch_;
};

}  // namespace wisp_engine
