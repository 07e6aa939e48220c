// SPDX-License-Identifier: Apache-2.0
// The dual-resize control law on scripted peak sequences: targets, shrink-then-grow order, the
// footprint bound, the dead-zone and the fail-safe path.
#include "support/expect_error.hpp"

#include <wisp/alloc/model_spec.hpp>
#include <wisp/alloc/resize.hpp>
#include <wisp/alloc/split.hpp>
#include <wisp/core/error.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace wisp::literals;
using wisp::admission_floor;
using wisp::pool;

// Levers over simulated pools; can fail the n-th call, by returning false or by throwing.
struct fake_levers {
  fake_levers(std::int32_t c, std::uint64_t b, int fail = -1, bool throws = false)
      : cap(c), blocks(b), fail_call(fail), throw_instead(throws) {}
  std::int32_t cap;
  std::uint64_t blocks;
  int fail_call = -1;
  bool throw_instead = false;
  int calls = 0;
  std::vector<std::pair<pool, std::uint64_t>> log;
  bool pull(pool p, std::uint64_t v) {
    const int n = calls++;
    if (n == fail_call) {
      if (throw_instead) {
        throw std::runtime_error("lever failed");
      }
      return false;
    }
    log.emplace_back(p, v);
    if (p == pool::experts) {
      cap = static_cast<std::int32_t>(v);
    } else {
      blocks = v;
    }
    return true;
  }
  bool resize_experts(std::int32_t c) { return pull(pool::experts, c); }
  bool resize_kv(std::uint64_t b) { return pull(pool::kv, b); }
};
static_assert(wisp::resize_levers<fake_levers>);

TEST(DualResize, ControlLawTargets) {
  const auto m = wisp::model_preset("qwen3-30b-a3b");
  const admission_floor f{1, 4096};  // 256 blocks
  const auto B = 24_GiB;
  // Peak 100 + headroom 50 < floor 256: KV target = floor; c = floor((24 GiB - 384 MiB) / 432 MiB)
  // = floor(24192 / 432) = 56; slack to KV: 24576 - 56 x 432 = 384 MiB = 256 blocks.
  std::uint64_t kv_target = 0;
  auto t = wisp::dual_resize_target(m, B, f, 100, 50, &kv_target);
  EXPECT_EQ(kv_target, 256u);
  EXPECT_EQ(t.expert_cap, 56u);
  EXPECT_EQ(t.kv_blocks, 256u);
  // Peak 3000 + 100: 3100 blocks = 4650 MiB; c = floor(19926 / 432) = 46; KV gets the slack:
  // 24576 - 19872 = 4704 MiB = 3136 blocks.
  t = wisp::dual_resize_target(m, B, f, 3000, 100, &kv_target);
  EXPECT_EQ(kv_target, 3100u);
  EXPECT_EQ(t.expert_cap, 46u);
  EXPECT_EQ(t.kv_blocks, 3136u);
  EXPECT_GE(t.kv_blocks, kv_target);
  // A tiny peak on a big budget: c is clamped at E and everything else goes to KV.
  t = wisp::dual_resize_target(m, 80_GiB, f, 0, 0);
  EXPECT_EQ(t.expert_cap, 128u);
  EXPECT_EQ(t.kv_blocks, (80_GiB - m.expert_pool_bytes(128)) / m.kv_block_bytes());
  // A peak beyond the budget: c is clamped up to k, KV gets the rest (still above the floor).
  t = wisp::dual_resize_target(m, B, f, 1u << 30, 0);
  EXPECT_EQ(t.expert_cap, 8u);
  EXPECT_TRUE(f.admits(m, t));
  // No split meets the floor.
  EXPECT_THROW((void)wisp::dual_resize_target(m, 3_GiB, f, 0, 0), wisp::infeasible_error);
}

TEST(DualResize, ScriptedPeaksShrinkBeforeGrowAndStayWithinBudget) {
  const auto m = wisp::model_preset("olmoe-1b-7b");
  const admission_floor f{2, 4096};  // 512 blocks
  const auto B = 8_GiB;
  const wisp::dual_resize_config cfg{64, 2};
  auto current = wisp::make_split(m, B, 21);
  fake_levers levers{current.expert_cap, current.kv_blocks};
  // Peaks: quiet (experts grow), long context (KV grows), noise inside the dead-zone, quiet again.
  const std::uint64_t peaks[] = {100, 100, 1500, 1510, 1490, 300, 2600, 100};
  std::vector<std::int32_t> caps;
  for (const auto peak : peaks) {
    const auto plan = wisp::plan_dual_resize(m, B, f, current, peak, cfg);
    EXPECT_LE(plan.peak_footprint(), B);
    for (std::size_t i = 0; i < plan.steps.size(); ++i) {
      EXPECT_LE(plan.steps[i].footprint_after, B);
      if (i > 0) {
        EXPECT_TRUE(plan.steps[i - 1].shrinks());  // the shrinking pool goes first
        EXPECT_FALSE(plan.steps[i].shrinks());
        EXPECT_NE(plan.steps[i - 1].which, plan.steps[i].which);
      }
    }
    if (plan.to.expert_cap > current.expert_cap) {  // growing experts: shrink KV first
      ASSERT_EQ(plan.steps.size(), 2u);
      EXPECT_EQ(plan.steps[0].which, pool::kv);
      EXPECT_EQ(plan.steps[1].which, pool::experts);
    } else if (plan.to.expert_cap < current.expert_cap) {  // shrinking experts: experts first
      ASSERT_EQ(plan.steps.size(), 2u);
      EXPECT_EQ(plan.steps[0].which, pool::experts);
      EXPECT_EQ(plan.steps[1].which, pool::kv);
    }
    if (!plan.empty()) {
      EXPECT_GE(plan.to.kv_blocks, std::max<std::uint64_t>(512, peak + 64));  // D.8, D.10
    }
    const auto outcome = wisp::apply_resize(plan, levers);
    EXPECT_TRUE(outcome.applied);
    current = outcome.current;
    EXPECT_EQ(levers.cap, current.expert_cap);
    EXPECT_EQ(levers.blocks, current.kv_blocks);
    EXPECT_TRUE(f.admits(m, current));
    caps.push_back(current.expert_cap);
  }
  // Hand-computed: block 2 MiB, cap unit 192 MiB, B = 8192 MiB.
  // peak 100: KV target 512 (floor) -> c = floor((8192 - 1024) / 192) = 37.
  // peak 1500: 1564 blocks = 3128 MiB -> c = floor(5064 / 192) = 26.
  // peaks 1510, 1490: targets 26 and 26 (|delta| < 2) -> no move.
  // peak 300: KV 512 -> c = 37. peak 2600: 2664 blocks = 5328 MiB -> c = floor(2864/192) = 14.
  const std::vector<std::int32_t> expected{37, 37, 26, 26, 26, 37, 14, 37};
  EXPECT_EQ(caps, expected);
}

TEST(DualResize, DeadZoneSkipsSmallMovesButNeverAFloorViolation) {
  const auto m = wisp::model_preset("olmoe-1b-7b");
  const admission_floor f{1, 1024};  // 64 blocks
  const auto B = 8_GiB;
  const auto current = wisp::make_split(m, B, 37);  // 8192 - 7104 = 1088 MiB = 544 blocks
  // Peak 600 + 0 -> 1200 MiB -> c = floor(6992/192) = 36: one cap away, inside dead-zone 2.
  auto plan = wisp::plan_dual_resize(m, B, f, current, 600, {0, 2});
  EXPECT_TRUE(plan.empty());
  EXPECT_EQ(plan.skipped, wisp::resize_skip::dead_zone);
  EXPECT_EQ(plan.to, current);
  plan = wisp::plan_dual_resize(m, B, f, current, 600, {0, 1});
  EXPECT_EQ(plan.to.expert_cap, 36u);
  // A current split that breaks the floor is fixed even inside the dead-zone.
  auto starved = wisp::make_split(m, B, 37, 10);
  plan = wisp::plan_dual_resize(m, B, f, starved, 0, {0, 100});
  EXPECT_FALSE(plan.empty());
  EXPECT_TRUE(f.admits(m, plan.to));
  // Staying put is no escape from the budget: a current split made for a larger one is an error.
  const auto stale = wisp::make_split(m, 16_GiB, 37);
  wisp::test::expect_error(
      [&] {
        (void)wisp::plan_dual_resize(m, B, f, stale, 600, {0, 2});
      },
      "exceeds the budget of " + std::to_string(B.count()));
}

TEST(DualResize, FailedStepLeavesThePreviousSplit) {
  const auto m = wisp::model_preset("olmoe-1b-7b");
  const auto B = 8_GiB;
  const auto from = wisp::make_split(m, B, 21);
  const auto to = wisp::make_split(m, B, 30);
  const auto plan = wisp::plan_transition(m, B, from, to);
  ASSERT_EQ(plan.steps.size(), 2u);
  for (const bool throws : {false, true}) {
    for (int fail = 0; fail < 2; ++fail) {
      fake_levers levers{from.expert_cap, from.kv_blocks, fail, throws};
      const auto outcome = wisp::apply_resize(plan, levers);
      EXPECT_FALSE(outcome.applied);
      EXPECT_TRUE(outcome.consistent);
      EXPECT_EQ(outcome.failed_step, static_cast<std::size_t>(fail));
      EXPECT_EQ(outcome.rolled_back, fail == 1);
      EXPECT_EQ(outcome.current, from);
      EXPECT_EQ(levers.cap, from.expert_cap);  // the engine is back where it started
      EXPECT_EQ(levers.blocks, from.kv_blocks);
    }
  }
  // The undo fails too: the outcome reports the state the engine is really in.
  struct twice_failing {
    std::uint64_t blocks;
    int kv_calls = 0;
    bool resize_experts(std::int32_t) { return false; }
    bool resize_kv(std::uint64_t b) {
      if (kv_calls++ > 0) {
        return false;
      }
      blocks = b;
      return true;
    }
  } broken{from.kv_blocks};
  const auto outcome = wisp::apply_resize(plan, broken);
  EXPECT_FALSE(outcome.applied);
  EXPECT_FALSE(outcome.consistent);
  EXPECT_EQ(outcome.current.kv_blocks, to.kv_blocks);  // KV shrank and could not grow back
  EXPECT_EQ(outcome.current.expert_cap, from.expert_cap);
  EXPECT_LE(outcome.current.used(), B);
}

TEST(DualResize, TransitionOrderBothWays) {
  const auto m = wisp::model_preset("mixtral-8x7b");
  const auto B = 80_GiB;
  const auto small = wisp::make_split(m, B, 3);
  const auto big = wisp::make_split(m, B, 7);
  const auto grow = wisp::plan_transition(m, B, small, big);
  ASSERT_EQ(grow.steps.size(), 2u);
  EXPECT_EQ(grow.steps[0], (wisp::resize_step{pool::kv, small.kv_blocks, big.kv_blocks,
                                              small.expert_bytes + big.kv_bytes}));
  EXPECT_EQ(grow.steps[1].which, pool::experts);
  EXPECT_EQ(grow.steps[1].footprint_after, big.used());
  const auto shrink = wisp::plan_transition(m, B, big, small);
  EXPECT_EQ(shrink.steps[0].which, pool::experts);
  EXPECT_EQ(shrink.steps[0].footprint_after, small.expert_bytes + big.kv_bytes);
  EXPECT_EQ(shrink.steps[1].which, pool::kv);
  EXPECT_EQ(shrink.peak_footprint(), big.used());
  EXPECT_TRUE(wisp::plan_transition(m, B, big, big).empty());
}

}  // namespace
