// SPDX-License-Identifier: Apache-2.0
// The agentic KV session model: deterministic, within the admission floor.
#include <wisp/alloc/kv_workload.hpp>
#include <wisp/reuse/reuse_distance.hpp>

#include <gtest/gtest.h>

#include <cstdint>

namespace {

using wisp::agentic_config;

TEST(KvWorkload, DeterministicAndWithinTheFloor) {
  agentic_config cfg;
  cfg.sessions = 8;
  cfg.concurrency = 3;
  cfg.context = 4096;
  cfg.long_turn = {512, 1024, 16};
  const auto a = wisp::make_agentic_kv_stream({{cfg, 50}}, 9);
  const auto b = wisp::make_agentic_kv_stream({{cfg, 50}}, 9);
  EXPECT_EQ(a.accesses, b.accesses);
  ASSERT_EQ(a.rounds.size(), 50u);
  const std::uint64_t floor_blocks = 3 * 4096 / 16;
  wisp::reuse_distance_counter counter{a.blocks};
  std::uint64_t cold = 0;
  for (const auto& r : a.rounds) {
    EXPECT_LE(r.working_blocks, floor_blocks);
    EXPECT_EQ(r.tool_turns + r.long_turns, 3u);
    for (auto i = r.begin; i < r.end; ++i) {
      cold += counter.access(a.accesses[i]) == wisp::reuse_distance_counter::cold;
    }
  }
  EXPECT_EQ(cold, a.blocks);  // every block is created once
  EXPECT_THROW((void)wisp::make_agentic_kv_stream({{agentic_config{.sessions = 2}, 1}}, 1),
               wisp::logic_error);  // concurrency 4 > sessions 2
}

}  // namespace
