// SPDX-License-Identifier: Apache-2.0
// The hierarchy replayed on traces: on routing drawn from the max-entropy model itself the observed
// hit patterns converge to the model's; an F-only hierarchy is the plain cache; bytes read follow
// the hit kinds; and on the real ESFT trace a slow link makes the planned hierarchy beat a plain
// cache of the same memory and a fast link makes it lose.
#include "support/expect_error.hpp"
#include "support/traces.hpp"

#include <wisp/sim/tiered_sim.hpp>
#include <wisp/trace/routing_trace.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace {

// Each layer's call drawn from the conditional Poisson design with Zipf weights over a random
// expert permutation: the stationary routing the planner's model assumes.
wisp::routing_trace model_trace(std::size_t steps, std::uint64_t seed) {
  const int layers = 4;
  const int experts = 64;
  const int k = 6;
  std::vector<double> w(experts);
  for (int r = 0; r < experts; ++r) {
    w[static_cast<std::size_t>(r)] = 1.0 / std::pow(r + 1.0, 1.0);
  }
  const std::vector<double> q = wisp::detail::probabilities_summing_to(w, k);
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int>> id_of_rank(layers, std::vector<int>(experts));
  for (auto& perm : id_of_rank) {
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
  }
  wisp::routing_trace t({.layers = layers, .experts = experts, .top_k = k});
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<std::int32_t> ids;
  for (std::size_t s = 0; s < steps; ++s) {
    ids.clear();
    for (int l = 0; l < layers; ++l) {
      std::vector<std::int32_t> pick;
      while (static_cast<int>(pick.size()) != k) {
        pick.clear();
        for (int r = 0; r < experts; ++r) {
          if (u(rng) < q[static_cast<std::size_t>(r)]) {
            pick.push_back(id_of_rank[static_cast<std::size_t>(l)][static_cast<std::size_t>(r)]);
          }
        }
      }
      ids.insert(ids.end(), pick.begin(), pick.end());
    }
    t.append_step(ids);
  }
  return t;
}

wisp::tiered_sim_config config(double link, std::uint64_t budget_experts) {
  wisp::tiered_sim_config c = wisp::tiered_sim_config::deepseek_v2_lite();
  c.link = {.bytes_per_second = link, .latency_seconds = 0.0};
  c.budget_bytes = budget_experts * c.full_bytes();
  c.grid_step = 0.1;
  return c;
}

TEST(TieredSim, ObservedHitPatternsConvergeToTheModelOnModelRouting) {
  const auto t = model_trace(6000, 1);
  wisp::tiered_sim_config c = config(3.5e9, 16);
  c.capacity = wisp::plan_for_trace(t, c).best.sizes;
  const wisp::tiered_sim_result r = wisp::simulate_tiered(t, c);
  EXPECT_EQ(r.calls, 6000u * 4);
  // The runtime ranks settle after a few hundred calls; the rest follows the model. 0.05 is
  // about 5x the sampling noise of 24,000 calls over ~100 patterns.
  EXPECT_LT(r.pattern_distance(), 0.05);
  EXPECT_NEAR(r.estimated_seconds / r.expected_seconds, 1.0, 0.05);
}

TEST(TieredSim, AnFOnlyHierarchyIsThePlainCache) {
  const auto t = model_trace(800, 2);
  wisp::tiered_sim_config c = config(3.5e9, 10);
  c.capacity = {10, 0, 0, 0};
  const wisp::tiered_sim_result r = wisp::simulate_tiered(t, c);
  EXPECT_EQ(r.plain_capacity, 10);
  EXPECT_EQ(r.stats.pools[0].hits, r.plain_hits);
  EXPECT_EQ(r.stats.misses, r.plain_misses);
  // A plain cache's miss reads SM and E-chunks of a compressed record in the hierarchy (1 + rho
  // bytes per value) instead of 2.
  const double per_miss = static_cast<double>(r.bytes_read) / static_cast<double>(r.stats.misses);
  EXPECT_NEAR(per_miss / (static_cast<double>(r.plain_bytes_read) / r.plain_misses),
              (1.0 + c.exponent_ratio) / 2.0, 1e-6);
}

TEST(TieredSim, OnRealRoutingTheHierarchyWinsOnASlowLinkOnly) {
  const auto t = wisp::test::esft_trace();
  WISP_TEST_NEEDS_TRACE(t.has_value());
  // A slice keeps the test short; the docs' table replays the whole trace.
  wisp::routing_trace slice(t->shape());
  std::vector<std::int32_t> ids;
  for (std::size_t s = 0; s < 1500; ++s) {
    ids.clear();
    for (std::int32_t l = 0; l < t->shape().layers; ++l) {
      for (std::int32_t j = 0; j < t->shape().top_k; ++j) {
        ids.push_back(t->expert(s, l, j));
      }
    }
    slice.append_step(ids);
  }
  for (const double link : {3.5e9, 64e9}) {
    wisp::tiered_sim_config c = config(link, 16);
    c.capacity = wisp::plan_for_trace(slice, c).best.sizes;
    const wisp::tiered_sim_result r = wisp::simulate_tiered(slice, c);
    if (link < 10e9) {
      EXPECT_LT(r.measured_seconds, 0.8 * r.plain_seconds) << "SSD-speed link";
    } else {
      // Every miss of the hierarchy decodes (its masters are compressed): on a fast link that
      // costs more than the plain cache's raw reads, whatever the pools.
      EXPECT_GT(r.measured_seconds, r.plain_seconds) << "fast link";
    }
  }
}

TEST(TieredSim, APoolLayoutOverTheBudgetIsRefused) {
  const auto t = model_trace(10, 3);
  wisp::tiered_sim_config c = config(3.5e9, 4);
  c.capacity = {4, 1, 0, 0};
  wisp::test::expect_error([&] { (void)wisp::simulate_tiered(t, c); }, "more than the budget");
}

}  // namespace
