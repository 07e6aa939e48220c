// SPDX-License-Identifier: Apache-2.0
// The resizable LRU pool (the cache area's slot_cache<lru> behind an adapter) and the
// trace-driven evaluation of expert/KV splits. The full table of docs/allocator.md comes from
// `wisp evaluate`.
#include <wisp/alloc/kv_workload.hpp>
#include <wisp/alloc/model_spec.hpp>
#include <wisp/reuse/histogram.hpp>
#include <wisp/reuse/reuse_distance.hpp>
#include <wisp/sim/detail/lru_pool.hpp>
#include <wisp/sim/split_evaluation.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <list>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace wisp::literals;
using wisp::agentic_config;
using wisp::eval_phase;

TEST(LruPool, MatchesAListOracleUnderResizes) {
  std::mt19937_64 rng{5};
  wisp::detail::lru_pool lru{64, 8};
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

// Calls as the pager serves them: a request's keys never evict each other; resizes in between.
TEST(LruPool, CallsMatchAProtectedListOracleUnderResizes) {
  std::mt19937_64 rng{6};
  wisp::detail::lru_pool lru{40, 8};
  std::list<std::uint32_t> oracle;  // front = most recent
  std::uint64_t cap = 8;
  std::vector<std::uint32_t> call;
  std::vector<std::uint8_t> hit(4);
  for (int i = 0; i < 5000; ++i) {
    if (i % 300 == 0) {
      cap = 4 + rng() % 12;
      lru.set_capacity(cap);
      while (oracle.size() > cap) {
        oracle.pop_back();
      }
    }
    call.clear();
    while (call.size() < 4) {
      const auto key = static_cast<std::uint32_t>(rng() % 24);
      if (std::find(call.begin(), call.end(), key) == call.end()) {
        call.push_back(key);
      }
    }
    std::uint32_t misses = 0;
    for (const std::uint32_t key : call) {
      const auto it = std::find(oracle.begin(), oracle.end(), key);
      if (it != oracle.end()) {
        oracle.erase(it);
      } else {
        ++misses;
        if (oracle.size() == cap) {  // evict the least recent key outside the call
          auto victim = std::prev(oracle.end());
          while (std::find(call.begin(), call.end(), *victim) != call.end()) {
            --victim;
          }
          oracle.erase(victim);
        }
      }
      oracle.push_front(key);
    }
    ASSERT_EQ(lru.access_call(call, hit), misses) << i;
    ASSERT_EQ(lru.size(), oracle.size());
  }
  lru.set_capacity(3);
  EXPECT_THROW((void)lru.access_call(call, hit), wisp::logic_error);  // 4 keys, 3 slots
  EXPECT_EQ(lru.size(), 3u);
}

// A small OLMoE workload: mixed turns, 40 rounds.
wisp::eval_workload small_workload(double tool_fraction, std::uint32_t rounds = 40) {
  const auto m = wisp::model_preset("olmoe-1b-7b");
  eval_phase p;
  p.kv.sessions = 10;
  p.kv.concurrency = 2;
  p.kv.context = 4096;
  p.kv.long_turn = {512, 1536, 16};
  p.kv.tool_turn = {32, 128, 48};
  p.kv.tool_call_fraction = tool_fraction;
  p.experts = wisp::synthetic_preset("olmoe-1b-7b");
  p.rounds = rounds;
  const eval_phase phases[] = {p};
  return wisp::make_eval_workload("small", m, phases, 3);
}

TEST(Evaluation, FixedReplayEqualsTheCurveAndOracleIsTheMinimum) {
  const auto m = wisp::model_preset("olmoe-1b-7b");
  const auto w = small_workload(0.5);
  wisp::eval_params p;
  p.budget = 3_GiB;
  // Guards that never let the adaptive arms move: their replay must equal the fixed curve.
  p.controller.gate = 1e9;
  p.dual.dead_zone = 1000;
  const auto r = wisp::evaluate(m, w, p);
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
  for (std::int32_t c = m.top_k; c <= r.max_feasible_cap; ++c) {
    best = std::min(best, r.fixed_seconds[static_cast<std::size_t>(c - m.top_k)]);
  }
  EXPECT_DOUBLE_EQ(r.arm("oracle").seconds, best);
  for (const auto& a : r.arms) {
    if (!a.adaptive && a.admissible) {
      EXPECT_GE(a.seconds, best) << a.name;
    }
  }
}

TEST(Evaluation, AdaptiveArmsMoveAndStayAdmissible) {
  const auto m = wisp::model_preset("olmoe-1b-7b");
  const auto w = small_workload(0.2, 60);
  wisp::eval_params p;
  p.budget = 3_GiB;
  p.dual.headroom_blocks = 16;
  const auto r = wisp::evaluate(m, w, p);
  for (const auto& a : r.arms) {
    EXPECT_GE(a.cap_min, m.top_k) << a.name;
    if (a.adaptive) {
      EXPECT_TRUE(a.admissible) << a.name;
      EXPECT_LE(a.cap_max, r.max_feasible_cap) << a.name;
    }
  }
  EXPECT_GT(r.arm("dual-resize").moves, 0u);
}

}  // namespace
