// SPDX-License-Identifier: Apache-2.0
// The KV session model, the resizable LRU, and the trace-driven evaluation. The full table of
// docs/allocator.md is the DISABLED_ test at the end (run it from a Release build with
// --gtest_also_run_disabled_tests --gtest_filter='*Table*').
#include <wisp/alloc/detail/resizable_lru.hpp>
#include <wisp/alloc/evaluation.hpp>
#include <wisp/alloc/kv_workload.hpp>
#include <wisp/alloc/model_spec.hpp>
#include <wisp/reuse/histogram.hpp>
#include <wisp/reuse/reuse_distance.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <list>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace wisp::literals;
using wisp::alloc::agentic_config;
using wisp::alloc::eval_phase;

TEST(ResizableLru, MatchesAListOracleUnderResizes) {
  std::mt19937_64 rng{5};
  wisp::alloc::detail::resizable_lru lru{64, 8};
  std::list<std::uint32_t> oracle;  // front = most recent
  std::uint64_t cap = 8;
  for (int i = 0; i < 20000; ++i) {
    if (i % 500 == 0) {
      cap = rng() % 20;
      lru.set_capacity(cap);
      while (oracle.size() > cap) {
        oracle.pop_back();
      }
    }
    const auto key = static_cast<std::uint32_t>(rng() % 24);
    const auto it = std::find(oracle.begin(), oracle.end(), key);
    const bool hit = it != oracle.end();
    if (hit) {
      oracle.erase(it);
    } else if (cap > 0 && oracle.size() == cap) {
      oracle.pop_back();
    }
    if (hit || cap > 0) {
      oracle.push_front(key);
    }
    ASSERT_EQ(lru.access(key), hit) << i;
    ASSERT_EQ(lru.size(), oracle.size());
  }
}

TEST(KvWorkload, DeterministicAndWithinTheFloor) {
  agentic_config cfg;
  cfg.sessions = 8;
  cfg.concurrency = 3;
  cfg.context = 4096;
  cfg.long_turn = {512, 1024, 16};
  const auto a = wisp::alloc::make_agentic_kv_stream({{cfg, 50}}, 9);
  const auto b = wisp::alloc::make_agentic_kv_stream({{cfg, 50}}, 9);
  EXPECT_EQ(a.accesses, b.accesses);
  ASSERT_EQ(a.rounds.size(), 50u);
  const std::uint64_t floor_blocks = 3 * 4096 / 16;
  wisp::reuse::reuse_distance_counter counter{a.blocks};
  std::uint64_t cold = 0;
  for (const auto& r : a.rounds) {
    EXPECT_LE(r.working_blocks, floor_blocks);
    EXPECT_EQ(r.tool_turns + r.long_turns, 3u);
    for (auto i = r.begin; i < r.end; ++i) {
      cold += counter.access(a.accesses[i]) == wisp::reuse::reuse_distance_counter::cold;
    }
  }
  EXPECT_EQ(cold, a.blocks);  // every block is created once
  EXPECT_THROW((void)wisp::alloc::make_agentic_kv_stream({{agentic_config{.sessions = 2}, 1}}, 1),
               wisp::logic_error);  // concurrency 4 > sessions 2
}

// A small OLMoE workload: mixed turns, 40 rounds.
wisp::alloc::eval_workload small_workload(double tool_fraction, std::uint32_t rounds = 40) {
  const auto m = wisp::alloc::model_preset("olmoe-1b-7b");
  eval_phase p;
  p.kv.sessions = 10;
  p.kv.concurrency = 2;
  p.kv.context = 4096;
  p.kv.long_turn = {512, 1536, 16};
  p.kv.tool_turn = {32, 128, 48};
  p.kv.tool_call_fraction = tool_fraction;
  p.experts = wisp::trace::synthetic_preset("olmoe-1b-7b");
  p.rounds = rounds;
  const eval_phase phases[] = {p};
  return wisp::alloc::make_eval_workload("small", m, phases, 3);
}

TEST(Evaluation, FixedReplayEqualsTheCurveAndOracleIsTheMinimum) {
  const auto m = wisp::alloc::model_preset("olmoe-1b-7b");
  const auto w = small_workload(0.5);
  wisp::alloc::eval_params p;
  p.budget = 3_GiB;
  // Guards that never let the adaptive arms move: their replay must equal the fixed curve.
  p.controller.gate = 1e9;
  p.dual.dead_zone = 1000;
  const auto r = wisp::alloc::evaluate(m, w, p);
  const auto& online = r.arm("mv-wsa-online");
  const auto& dual = r.arm("dual-resize");
  EXPECT_EQ(online.moves, 0u);
  EXPECT_EQ(dual.moves, 0u);
  const double fixed = r.fixed_seconds[online.cap_start - m.top_k];
  EXPECT_NEAR(online.seconds, fixed, 1e-9 * std::max(1.0, fixed));
  EXPECT_NEAR(dual.seconds, fixed, 1e-9 * std::max(1.0, fixed));
  EXPECT_NEAR(r.arm("50-50").seconds, fixed, 1e-9 * std::max(1.0, fixed));
  // The oracle is the minimum of the fixed curve over the feasible caps.
  double best = INFINITY;
  for (std::uint32_t c = m.top_k; c <= r.max_feasible_cap; ++c) {
    best = std::min(best, r.fixed_seconds[c - m.top_k]);
  }
  EXPECT_DOUBLE_EQ(r.arm("oracle").seconds, best);
  for (const auto& a : r.arms) {
    if (!a.adaptive && a.admissible) {
      EXPECT_GE(a.seconds, best) << a.name;
    }
  }
}

TEST(Evaluation, AdaptiveArmsMoveAndStayAdmissible) {
  const auto m = wisp::alloc::model_preset("olmoe-1b-7b");
  const auto w = small_workload(0.2, 60);
  wisp::alloc::eval_params p;
  p.budget = 3_GiB;
  p.dual.headroom_blocks = 16;
  const auto r = wisp::alloc::evaluate(m, w, p);
  for (const auto& a : r.arms) {
    EXPECT_GE(a.cap_min, m.top_k) << a.name;
    if (a.adaptive) {
      EXPECT_TRUE(a.admissible) << a.name;
      EXPECT_LE(a.cap_max, r.max_feasible_cap) << a.name;
    }
  }
  EXPECT_GT(r.arm("dual-resize").moves, 0u);
}

// ---------------------------------------------------------------------------------- the table

struct workload_def {
  const char* name;
  std::vector<eval_phase> phases;
};

eval_phase phase(const wisp::alloc::model_spec& m, double tool_fraction, bool tool_router,
                 std::uint32_t rounds) {
  eval_phase p;
  p.kv.sessions = 16;
  p.kv.concurrency = 2;
  p.kv.context = 8192;
  p.kv.long_turn = {1024, 3072, 32};
  p.kv.tool_turn = {64, 256, 160};
  p.kv.tool_call_fraction = tool_fraction;
  p.experts = wisp::trace::synthetic_preset(m.name);
  if (tool_router) {  // tool-call bursts revisit a small expert set
    p.experts.locality = 0.7;
    p.experts.coactivation = 0.1;
    p.experts.drift_rate = 0.02;
  } else {  // long documents spread routing: less locality, more drift
    p.experts.locality = 0.25;
    p.experts.drift_rate = 0.2;
  }
  p.rounds = rounds;
  return p;
}

void print_table(const wisp::alloc::model_spec& m, wisp::byte_size budget, std::uint32_t rounds,
                 double recompute) {
  const std::vector<workload_def> defs = {
      {"long-context", {phase(m, 0.1, false, rounds)}},
      {"mixed", {phase(m, 0.5, false, rounds)}},
      {"tool-burst", {phase(m, 0.9, true, rounds)}},
      {"shift long->tool", {phase(m, 0.1, false, rounds / 2), phase(m, 0.9, true, rounds / 2)}},
      {"shift tool->long", {phase(m, 0.9, true, rounds / 2), phase(m, 0.1, false, rounds / 2)}},
  };
  wisp::alloc::eval_params p;
  p.budget = budget;
  p.costs.recompute_seconds_per_token = recompute;
  p.dual.headroom_blocks = 64;
  p.dual.dead_zone = 2;
  std::printf("\n%s at %s, %u rounds per workload, bandwidth %.0f GB/s, recompute %.0f us/token\n",
              m.name.c_str(), std::to_string(budget.count()).c_str(), rounds,
              p.costs.bandwidth_bytes_per_second / 1e9, p.costs.recompute_seconds_per_token * 1e6);
  std::printf(
      "| workload | arm | cap (start->end, min..max) | moves | warm expert misses | warm KV "
      "misses | warm latency (s) | x oracle |\n|---|---|---|---|---|---|---|---|\n");
  for (std::uint64_t seed = 1; seed <= 1; ++seed) {
    for (const auto& d : defs) {
      const auto w = wisp::alloc::make_eval_workload(d.name, m, d.phases, seed);
      const auto r = wisp::alloc::evaluate(m, w, p);
      const double oracle = r.arm("oracle").seconds;
      for (const auto& a : r.arms) {
        std::printf(
            "| %s | %s%s | %u->%u, %u..%u | %u | %llu | %llu | %.2f | %.3f |\n", d.name,
            a.name.c_str(), a.admissible ? "" : " (below floor)", a.cap_start, a.cap_end, a.cap_min,
            a.cap_max, a.moves, static_cast<unsigned long long>(a.expert_warm_misses),
            static_cast<unsigned long long>(a.kv_warm_misses), a.seconds, a.seconds / oracle);
      }
    }
  }
  std::fflush(stdout);
}

TEST(Evaluation, DISABLED_Table) {
  // Expert-pressured (recompute is cheap next to expert paging) and KV-competitive regimes.
  print_table(wisp::alloc::model_preset("olmoe-1b-7b"), 12_GiB, 400, 2e-4);
  print_table(wisp::alloc::model_preset("olmoe-1b-7b"), 12_GiB, 400, 2e-3);
}

}  // namespace
