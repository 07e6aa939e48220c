// SPDX-License-Identifier: Apache-2.0
// The example engine's `tiered` arm (examples/engine/arm_tiered.hpp, device.hpp's tiered paging):
// a hand-computed schedule of F, C and miss calls on the link and the decode threads, outputs
// identical to `full`, and the same memory as `pager`.
#include "support.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>

namespace {

using namespace engine_test;

// 1 layer, 4 experts, k = 1, pools F = 1 and C = 1 (cap 4: 2 staging rows, 2 rows of pool
// bytes), warm-up and evaluation routed 0, 1, 2. The frequency list ranks 0 first, then 1 (it
// reached one activation before 2), so after the warm-up 0 is in F, 1 in C and 2 nowhere: the
// evaluated forwards find 0 in F, 1 in C, and miss 2. An SM chunk (32 values) costs u = 2 us on
// the link, an E-chunk v = rho / 4 us (rho: the largest expert's E bytes per value), a decode
// c = 4 us, a copy's latency 3 us; n = 3 tensors of K = 8 E-chunks, recovery free.
//
// L = 1. Forward 1: embed [0,1], attention [1,11], plan [11,12], kernel [12,17], combine 2,
// head 3: 22 us. Forward 2 (from 22): plan ends at 34, the C hit decodes 24 chunks: ready at
// 130, kernel, combine, head: 140. Forward 3 (from 140): plan ends at 152, the miss's latency
// at 155, then E-chunks are read every v and decoded back to back (c >= v), the last decode
// ending at 155 + v + 96 (the SM chunks arrive by 155 + 24 v + 3 u, earlier): 261 + v.
// L = 2. Forward 2: the 24 decodes take 48 us on two threads: ready 82, ends 92. Forward 3 (from
// 92): plan ends 104, latency 107, decode 2m on one thread at v + m c, 2m + 1 on the other at
// 2 v + m c (c >= 2 v): the last ends at 107 + 2 v + 48, then 10 us more: 165 + 2 v.
TEST(EngineTiered, ScheduleOfAnFHitACHitAndAMiss) {
  const model_config c = micro(1, 1);
  const workload w = micro_workload(c, {{0}, {1}, {2}}, 1, 3);
  const zip_masters masters{model_weights(c)};
  const double rho = static_cast<double>(masters.max_e_bytes()) / masters.sm_bytes();
  const double v = rho / 4 * us;
  ASSERT_LE(rho, 1.0);  // C = 1 fits beside F = 1; c >= 2 v; SM chunks before the last decode
  engine_options o;
  o.cap = 4;
  o.tiers = std::array<std::int32_t, 4>{1, 1, 0, 0};
  o.link = {.bytes_per_second = 32 / (2 * us), .latency_seconds = 3 * us};
  o.decode_bytes_per_second = 2.0 * 32 / 8 / (4 * us);
  o.arm = arm_kind::full;
  const arm_result full = run_micro(c, w, o);
  o.arm = arm_kind::tiered;
  const arm_result one = run_micro(c, w, o);
  expect_same(full, one);
  EXPECT_NEAR(one.ttft_s, 22 * us, 1e-12);
  EXPECT_NEAR(one.seconds, 261 * us + v, 1e-12);
  EXPECT_NEAR(one.tpot_s, (261 * us + v - 22 * us) / 2, 1e-12);
  EXPECT_EQ(one.tier_hits, (std::array<std::uint64_t, 5>{1, 1, 0, 0, 1}));
  EXPECT_EQ(one.expert_copies, 1u);  // only the miss uses the link
  EXPECT_NEAR(one.hit_rate, 2.0 / 3, 1e-12);
  EXPECT_EQ(one.bytes_moved, masters.sm_bytes() + masters.max_e_bytes());
  EXPECT_NEAR(one.decode_seconds, 48 * 4 * us, 1e-12);

  o.decode_threads = 2;
  const arm_result two = run_micro(c, w, o);
  expect_same(full, two);
  EXPECT_NEAR(two.ttft_s, 22 * us, 1e-12);
  EXPECT_NEAR(two.seconds, 165 * us + 2 * v, 1e-12);
  EXPECT_NEAR(two.decode_seconds, 48 * 4 * us, 1e-12);  // the same work on two threads
}

// Pools that do not fit the bytes beside the staging rows make the arm infeasible, naming them.
TEST(EngineTiered, PoolsOverTheBudgetAreInfeasible) {
  const model_config c = micro(1, 1);
  const workload w = micro_workload(c, {{0}, {1}, {2}}, 1, 3);
  engine_options o;
  o.arm = arm_kind::tiered;
  o.cap = 3;  // 2 staging rows: one row of pool bytes
  o.tiers = std::array<std::int32_t, 4>{1, 1, 0, 0};
  const arm_result r = run_micro(c, w, o);
  EXPECT_FALSE(r.feasible);
  EXPECT_NE(r.note.find("pools F/C/S/E 1/1/0/0"), std::string::npos) << r.note;
}

// At budgets where the pools evict, with the planner's pools and one or four decode threads:
// the outputs of `full`, the rows and KV blocks of `pager` (the same bytes), every distinct
// expert of every call found in exactly one place, and only S, E and miss experts on the link.
TEST(EngineTiered, IdenticalToFullInPagersMemory) {
  const fixture f;
  const arm_result full = f.run(f.options(arm_kind::full));
  for (const std::int32_t rows : {f.cfg.top_k * 3, f.cfg.top_k * 4 + 1}) {
    for (const std::uint32_t threads : {1u, 4u}) {
      SCOPED_TRACE(::testing::Message() << rows << " rows, " << threads << " threads");
      engine_options o = f.options(arm_kind::pager);
      o.budget_bytes = f.budget_for_rows(rows, o.max_running);
      o.decode_threads = threads;
      const arm_result pager = f.run(o);
      o.arm = arm_kind::tiered;
      const arm_result tiered = f.run(o);
      expect_same(full, tiered);
      EXPECT_EQ(tiered.cap, pager.cap);
      EXPECT_EQ(tiered.kv_blocks, pager.kv_blocks);
      const auto& h = tiered.tier_hits;
      EXPECT_EQ(std::accumulate(h.begin(), h.end(), std::uint64_t{0}), tiered.expert_accesses);
      EXPECT_EQ(tiered.expert_copies, h[2] + h[3] + h[4]);
      EXPECT_GT(h[4], 0u);
      EXPECT_GT(tiered.decode_seconds, 0.0);
    }
  }
}

}  // namespace
