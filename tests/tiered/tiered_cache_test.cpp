// SPDX-License-Identifier: Apache-2.0
// The F/C/S/E pools against a plain reference written from the rules (ranks by sorting, pools as
// sets, the overflow victim by scanning), call by call, on random skewed streams and the real ESFT
// routing; the frequency list against sorting; any pager policy inside the pools.
#include "support/expect_error.hpp"
#include "support/traces.hpp"

#include <wisp/cache/lfu.hpp>
#include <wisp/cache/lru.hpp>
#include <wisp/tiered/tiered_cache.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <vector>

namespace {

using wisp::residency;
using wisp::tier_config;

// The rules, written plainly: counts with the time each expert reached its count, ranks by
// sorting, pools as sets.
class reference_tiers {
 public:
  reference_tiers(int experts, tier_config config)
      : config_(config),
        count_(static_cast<std::size_t>(experts), 0),
        reached_(static_cast<std::size_t>(experts), 0),
        pool_(static_cast<std::size_t>(experts), 4) {}

  std::vector<residency> lookup(const std::vector<int>& ids) {
    call_.clear();
    for (const int e : ids) {
      if (std::find(call_.begin(), call_.end(), e) == call_.end()) {
        call_.push_back(e);
      }
    }
    std::vector<residency> out;
    for (const int e : call_) {
      ++count_[static_cast<std::size_t>(e)];
      reached_[static_cast<std::size_t>(e)] = ++clock_;
      out.push_back(static_cast<residency>(pool_[static_cast<std::size_t>(e)]));
    }
    return out;
  }

  void dispatch() {
    const std::vector<int> rank = ranks();
    for (const int e : call_) {
      int target = 4;
      int tau = config_.tolerance;
      for (int p = 0; p < 4; ++p) {
        tau += config_.capacity[static_cast<std::size_t>(p)];
        if (config_.capacity[static_cast<std::size_t>(p)] > 0 &&
            rank[static_cast<std::size_t>(e)] < tau) {
          target = p;
          break;
        }
      }
      int& now = pool_[static_cast<std::size_t>(e)];
      if (now == target) {
        continue;
      }
      now = 4;
      if (target == 4) {
        continue;
      }
      std::vector<int> residents;
      for (std::size_t x = 0; x < pool_.size(); ++x) {
        if (pool_[x] == target) {
          residents.push_back(static_cast<int>(x));
        }
      }
      if (static_cast<int>(residents.size()) ==
          config_.capacity[static_cast<std::size_t>(target)]) {
        int victim = -1;  // the worst-ranked resident outside this call
        for (const int x : residents) {
          if (std::find(call_.begin(), call_.end(), x) == call_.end() &&
              (victim < 0 ||
               rank[static_cast<std::size_t>(x)] > rank[static_cast<std::size_t>(victim)])) {
            victim = x;
          }
        }
        if (victim < 0) {
          continue;  // refused
        }
        pool_[static_cast<std::size_t>(victim)] = 4;
      }
      now = target;
    }
  }

  std::vector<int> ranks() const {
    std::vector<int> order(count_.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) {
      const auto ua = static_cast<std::size_t>(a);
      const auto ub = static_cast<std::size_t>(b);
      if (count_[ua] != count_[ub]) {
        return count_[ua] > count_[ub];
      }
      if (count_[ua] == 0) {
        return a < b;
      }
      return reached_[ua] < reached_[ub];
    });
    std::vector<int> rank(order.size());
    for (std::size_t r = 0; r < order.size(); ++r) {
      rank[static_cast<std::size_t>(order[r])] = static_cast<int>(r);
    }
    return rank;
  }
  int pool(int e) const { return pool_[static_cast<std::size_t>(e)]; }

 private:
  tier_config config_;
  std::vector<std::uint64_t> count_;
  std::vector<std::uint64_t> reached_;
  std::vector<int> pool_;  // 0..3, 4 = none
  std::vector<int> call_;
  std::uint64_t clock_ = 0;
};

// Replays `calls` through both and compares every lookup, rank and residency.
void replay_against_reference(int experts, tier_config config,
                              const std::vector<std::vector<int>>& calls) {
  wisp::tiered_cache<> tiers(experts, config);
  reference_tiers ref(experts, config);
  std::uint64_t hits = 0;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const wisp::access_context ctx{.step = static_cast<std::uint32_t>(i), .time = i};
    const auto got = tiers.lookup(calls[i], ctx);
    const auto want = ref.lookup(calls[i]);
    ASSERT_EQ(std::vector<residency>(got.begin(), got.end()), want) << "call " << i;
    for (const residency r : want) {
      hits += r != residency::miss ? 1 : 0;
    }
    const std::vector<int> rank = ref.ranks();
    for (int e = 0; e < experts; ++e) {
      ASSERT_EQ(tiers.frequencies().rank(e), rank[static_cast<std::size_t>(e)]) << "call " << i;
    }
    tiers.dispatch(ctx);
    ref.dispatch();
    for (int e = 0; e < experts; ++e) {
      ASSERT_EQ(static_cast<int>(tiers.where(e)), ref.pool(e)) << "call " << i << " expert " << e;
    }
    for (std::size_t p = 0; p < wisp::tier_count; ++p) {
      ASSERT_LE(tiers.size(static_cast<wisp::tier>(p)), config.capacity[p]);
    }
  }
  const wisp::tiered_stats& s = tiers.stats();
  std::uint64_t pool_hits = 0;
  for (const auto& p : s.pools) {
    pool_hits += p.hits;
  }
  EXPECT_EQ(pool_hits, hits);
  EXPECT_EQ(s.accesses - s.misses, hits);
}

std::vector<std::vector<int>> zipf_calls(int experts, int k, int n, double skew,
                                         std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> w(static_cast<std::size_t>(experts));
  for (int e = 0; e < experts; ++e) {
    w[static_cast<std::size_t>(e)] = 1.0 / std::pow(1.0 + (e * 7) % experts, skew);
  }
  std::discrete_distribution<int> pick(w.begin(), w.end());
  std::vector<std::vector<int>> calls(static_cast<std::size_t>(n));
  for (auto& c : calls) {
    while (static_cast<int>(c.size()) < k) {
      c.push_back(pick(rng));  // repeats allowed: lookup takes the distinct ones
    }
  }
  return calls;
}

TEST(TieredCache, MatchesTheReferenceOnRandomSkewedStreams) {
  const std::vector<tier_config> configs = {
      {.capacity = {4, 6, 8, 12}, .tolerance = 0},   {.capacity = {4, 6, 8, 12}, .tolerance = 3},
      {.capacity = {8, 0, 0, 0}, .tolerance = 0},    {.capacity = {0, 0, 16, 0}, .tolerance = 2},
      {.capacity = {1, 1, 1, 1}, .tolerance = 5},    {.capacity = {0, 0, 0, 0}, .tolerance = 0},
      {.capacity = {16, 16, 16, 16}, .tolerance = 0}};
  int seed = 0;
  for (const tier_config& c : configs) {
    for (const double skew : {0.0, 1.2}) {
      replay_against_reference(64, c,
                               zipf_calls(64, 6, 3000, skew, static_cast<std::uint64_t>(++seed)));
    }
  }
}

TEST(TieredCache, MatchesTheReferenceOnRealRouting) {
  const auto trace = wisp::test::esft_trace();
  WISP_TEST_NEEDS_TRACE(trace.has_value());
  for (const std::int32_t layer : {0, 13, 25}) {
    std::vector<std::vector<int>> calls;
    for (std::size_t s = 0; s < 2000 && s < trace->steps(); ++s) {
      std::vector<int> ids;
      for (std::int32_t j = 0; j < trace->shape().top_k; ++j) {
        ids.push_back(trace->expert(s, layer, j));
      }
      calls.push_back(ids);
    }
    replay_against_reference(64, {.capacity = {6, 6, 10, 14}, .tolerance = 2}, calls);
  }
}

TEST(TieredCache, FrequencyListOrdersByCountThenByWhoGotThereFirst) {
  wisp::frequency_list f(5);
  EXPECT_EQ(std::vector<int>(f.order().begin(), f.order().end()),
            (std::vector<int>{0, 1, 2, 3, 4}));
  for (const int e : {3, 1, 3, 4, 1}) {
    f.touch(e);
  }
  // 3 reached 2 before 1 did; 4 has 1; 0 and 2 none, in id order.
  EXPECT_EQ(std::vector<int>(f.order().begin(), f.order().end()),
            (std::vector<int>{3, 1, 4, 0, 2}));
  EXPECT_EQ(f.rank(4), 2);
  EXPECT_EQ(f.count(3), 2u);
  wisp::test::expect_error([&] { f.touch(5); }, "expert 5 is outside [0, 5)");
}

template <class Policy>
void pools_stay_consistent() {
  wisp::tiered_cache<Policy> tiers(32, {.capacity = {3, 3, 4, 4}, .tolerance = 4});
  const auto calls = zipf_calls(32, 4, 2000, 1.0, 9);
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const wisp::access_context ctx{.step = static_cast<std::uint32_t>(i), .time = i};
    (void)tiers.lookup(calls[i], ctx);
    tiers.dispatch(ctx);
    std::array<int, 5> held{};
    for (int e = 0; e < 32; ++e) {
      ++held[static_cast<std::size_t>(tiers.where(e))];
    }
    for (std::size_t p = 0; p < wisp::tier_count; ++p) {
      ASSERT_EQ(held[p], tiers.size(static_cast<wisp::tier>(p)));
      ASSERT_LE(held[p], tiers.config().capacity[p]);
    }
    // Every expert of the call that ranks inside a threshold is in its pool.
    for (const int e : tiers.call_experts()) {
      const auto target = tiers.target_of(tiers.frequencies().rank(e));
      if (!target) {
        ASSERT_EQ(tiers.where(e), residency::miss);
      }
    }
  }
  EXPECT_GT(tiers.stats().pools[0].hits, 0u);
}

TEST(TieredCache, AnyPagerPolicyCanRunThePools) {
  pools_stay_consistent<wisp::frequency_rank>();
  pools_stay_consistent<wisp::lru>();
  pools_stay_consistent<wisp::lfu>();
}

TEST(TieredCache, BadConfigurationsAndIdsAreRefused) {
  wisp::test::expect_error(
      [] {
        wisp::tiered_cache<> t(8, {.capacity = {4, 4, 1, 0}});
      },
      "the pools hold 9 experts, more than the 8");
  wisp::test::expect_error(
      [] {
        wisp::tiered_cache<> t(8, {.capacity = {-1, 0, 0, 0}});
      },
      "pool F capacity -1");
  wisp::test::expect_error(
      [] {
        wisp::tiered_cache<> t(8, {.capacity = {1, 0, 0, 0}, .tolerance = -2});
      },
      "tolerance -2");
  wisp::tiered_cache<> t(8, {.capacity = {2, 2, 0, 0}});
  const std::vector<int> bad{1, 8};
  wisp::test::expect_error([&] { (void)t.lookup(bad, {}); }, "expert 8 is outside [0, 8)");
  EXPECT_EQ(t.stats().calls, 0u);
  EXPECT_EQ(t.frequencies().count(1), 0u);  // nothing counted
}

}  // namespace
