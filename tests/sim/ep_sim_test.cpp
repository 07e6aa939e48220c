// SPDX-License-Identifier: Apache-2.0
// The expert-parallel simulator: a tiny replay computed by hand, the batching of sequences, the
// load statistics against a count, the arms on the real ESFT trace (same total slots; wisp's
// step against the baselines'), and bad configurations refused naming the values.
#include "support/expect_error.hpp"
#include "support/traces.hpp"

#include <wisp/sim/ep_sim.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

namespace wisp {
namespace {

using test::expect_error;

// One layer, 4 experts, top-1; sequences of the given experts.
routing_trace tiny(const std::vector<std::vector<std::int32_t>>& sequences) {
  routing_trace t({1, 4, 1});
  for (const auto& s : sequences) {
    t.begin_sequence();
    for (std::size_t i = 0; i < s.size(); ++i) {
      t.append_step(std::span(s).subspan(i, 1));
    }
  }
  return t;
}

ep_sim_config tiny_config(std::int32_t total_slots) {
  ep_sim_config c;
  c.ranks = 2;
  c.batch = 1;
  c.total_slots = total_slots;
  c.policy = "lru";
  c.costs.link = {1e6, 0.0};  // 1000 B: a copy takes 1 ms
  c.costs.expert_bytes = 1000;
  c.costs.expert_seconds = 1e-4;
  c.costs.token_seconds = 1e-5;
  c.costs.hidden = 100;  // 100 x 2 B at 1 MB/s: 0.2 ms per token each way
  c.costs.activation_bytes = 2;
  c.costs.a2a_bytes_per_second = 1e6;
  c.costs.a2a_latency_seconds = 5e-5;
  return c;
}

TEST(ep_sim, tiny_replay_computed_by_hand) {
  // Linear placement: rank 0 holds experts 0 and 1, rank 1 experts 2 and 3. Tokens route to
  // 0, 1, 0. Rank 0's step per token: copy 1 ms (if a miss) + expert 0.1 ms + token 0.01 ms +
  // 2 x (0.05 + 0.2) ms all-to-all = 1.61 ms on a miss, 0.61 ms on a hit; rank 1 only waits for
  // the all-to-all's latency (0.1 ms), so each step is rank 0's.
  const routing_trace t = tiny({{0, 1, 0}});
  const ep_arm_result one = simulate_ep(t, tiny_config(2), ep_arm::ep_lru);  // 1 slot each
  EXPECT_EQ(one.name, "ep-lru");
  EXPECT_EQ(one.steps, 3u);
  EXPECT_NEAR(one.slowest_rank_step_s, 1.61e-3, 1e-12);  // three misses
  EXPECT_EQ(one.ranks[0].misses, 3u);
  EXPECT_EQ(one.ranks[0].link_bytes, 3000u);
  EXPECT_EQ(one.ranks[0].pairs, 3u);
  EXPECT_EQ(one.ranks[0].tokens_received, 3u);
  EXPECT_EQ(one.ranks[1].misses, 0u);
  EXPECT_NEAR(one.ranks[1].busy_seconds, 3 * 1e-4, 1e-12);
  EXPECT_DOUBLE_EQ(one.load_imbalance, 2.0);  // pairs 3 and 0: max / mean = 3 / 1.5
  const ep_arm_result two = simulate_ep(t, tiny_config(3), ep_arm::ep_lru);  // 2 slots on rank 0
  EXPECT_EQ(two.ranks[0].slots, 2);
  EXPECT_EQ(two.ranks[1].slots, 1);
  EXPECT_EQ(two.ranks[0].misses, 2u);
  EXPECT_EQ(two.ranks[0].hits, 1u);
  EXPECT_NEAR(two.slowest_rank_step_s, (1.61e-3 + 1.61e-3 + 0.61e-3) / 3, 1e-12);
  // The reference arm runs the given policy on the same placement: LRU here, so the same.
  const ep_arm_result same = simulate_ep(t, tiny_config(3), ep_arm::ep_policy);
  EXPECT_EQ(same.name, "ep-lru");
  EXPECT_DOUBLE_EQ(same.slowest_rank_step_s, two.slowest_rank_step_s);
}

TEST(ep_sim, batches_take_the_next_sequence_when_one_ends) {
  const routing_trace t = tiny({{0, 1}, {2}, {3, 0}});  // tokens 0-1, 2, 3-4
  const auto batches = detail::ep_batches(t, 2);
  const std::vector<std::vector<std::size_t>> want = {{0, 2}, {1, 3}, {4}};
  EXPECT_EQ(batches, want);
  EXPECT_EQ(detail::ep_batches(t, 16).size(), 2u);   // all three at once, then the last token
  const std::vector<double> loads = ep_loads(t, 2);  // 3 steps
  const std::vector<double> counted = {2.0 / 3, 1.0 / 3, 1.0 / 3, 1.0 / 3};
  ASSERT_EQ(loads.size(), counted.size());
  for (std::size_t e = 0; e < loads.size(); ++e) {
    EXPECT_DOUBLE_EQ(loads[e], counted[e]);
  }
}

TEST(ep_sim, arms_on_esft_share_the_budget_and_wisp_is_fastest) {
  const auto trace = test::esft_trace();
  WISP_TEST_NEEDS_TRACE(trace.has_value());
  ep_sim_config c;
  c.ranks = 8;
  c.total_slots = 555;
  c.costs.link = {50e9, 10e-6};
  c.costs.expert_bytes = 17301504;
  c.costs.expert_seconds = 17301504 / 3350e9;
  c.costs.token_seconds = 2.0 * 8650752 / 989e12;
  c.costs.hidden = 2048;
  c.costs.a2a_latency_seconds = 10e-6;
  std::vector<ep_arm_result> r;
  for (const ep_arm arm : {ep_arm::ep_lru, ep_arm::eplb_lru, ep_arm::wisp, ep_arm::ep_policy}) {
    r.push_back(simulate_ep(*trace, c, arm));
    std::int32_t slots = 0;
    std::uint64_t pairs = 0;
    for (const ep_rank_result& x : r.back().ranks) {
      slots += x.slots;
      pairs += x.pairs;
      EXPECT_GE(x.slots, 6);
      EXPECT_EQ(x.link_bytes, x.misses * 17301504u);
    }
    EXPECT_EQ(slots, 555) << r.back().name;
    EXPECT_EQ(pairs, trace->access_count()) << r.back().name;
    EXPECT_EQ(r.back().tokens, trace->steps());
  }
  EXPECT_LE(r[2].slowest_rank_step_s, 0.75 * r[0].slowest_rank_step_s);
  EXPECT_LE(r[2].slowest_rank_step_s, 0.85 * r[1].slowest_rank_step_s);
  EXPECT_LE(r[2].slowest_rank_step_s, r[3].slowest_rank_step_s);  // EP-aware beats the cache alone
  EXPECT_LE(r[2].load_imbalance, 1.15);
}

TEST(ep_sim, bad_configurations_are_refused_naming_the_values) {
  const routing_trace t = tiny({{0, 1, 0}});
  expect_error([&] { (void)simulate_ep(t, tiny_config(1), ep_arm::ep_lru); }, "total_slots 1",
               "top_k = 1", "ranks x top_k = 2");
  expect_error([&] { (void)simulate_ep(t, tiny_config(5), ep_arm::ep_lru); }, "total_slots 5",
               "2 x 1 x 2");
  ep_sim_config c = tiny_config(2);
  c.policy = "belady";
  expect_error([&] { (void)simulate_ep(t, c, ep_arm::wisp); }, "policy 'belady'");
  c = tiny_config(2);
  c.batch = 0;
  expect_error([&] { (void)simulate_ep(t, c, ep_arm::wisp); }, "batch must be >= 1, got 0");
  c = tiny_config(2);
  c.local_experts = 1;  // 2 ranks x 1 row cannot hold 4 experts
  expect_error([&] { (void)simulate_ep(t, c, ep_arm::wisp); }, "2 x 1 is below experts = 4");
  c = tiny_config(2);
  c.costs.a2a_bytes_per_second = 0;
  expect_error([&] { (void)simulate_ep(t, c, ep_arm::ep_lru); }, "a2a_bytes_per_second", "got 0");
}

}  // namespace
}  // namespace wisp
