// SPDX-License-Identifier: Apache-2.0
// The hybrid miss policy: hybrid_splitter against brute force (every split of a call's misses,
// evaluated by the cost model's definition written out again here) on random small calls, with
// and without a copy limit and eviction losses; hand-worked decisions (a one-off expert goes to
// the host, one about to be reused is copied, a busy host sends work to the link); the reuse
// value estimator against its formula; the host cost tracker against a known host and its
// moving average; bad input.
#include "support/expect_error.hpp"

#include <wisp/pager/hybrid.hpp>
#include <wisp/pager/miss_policy.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace wisp {
namespace {

using test::expect_error;

/// The objective of the file description, computed from scratch for one split.
double brute_objective(const hybrid_cost_model& c, const hybrid_queues& q,
                       const std::vector<hybrid_miss>& misses, std::uint32_t mask,
                       const std::vector<double>& loss) {
  double copies = 0, host = 0, positions = 0, value = 0, lost = 0;
  for (std::size_t i = 0; i < misses.size(); ++i) {
    if ((mask >> i & 1u) != 0) {
      lost += static_cast<std::size_t>(copies) < loss.size()
                  ? loss[static_cast<std::size_t>(copies)]
                  : 0.0;
      copies += 1;
      value += misses[i].value_seconds;
    } else {
      host += 1;
      positions += misses[i].positions;
    }
  }
  const double link_end = copies > 0 ? q.link_seconds + copies * c.copy_seconds : 0.0;
  const double host_end =
      host > 0 ? q.host_seconds + c.call_seconds +
                     std::max(host * c.expert_seconds, positions * c.position_seconds)
               : 0.0;
  return std::max(link_end, host_end) - value + lost;
}

struct brute_best {
  double objective = std::numeric_limits<double>::infinity();
};

brute_best brute_force(const hybrid_cost_model& c, const hybrid_queues& q,
                       const std::vector<hybrid_miss>& misses, std::int32_t max_copies,
                       const std::vector<double>& loss) {
  brute_best b;
  for (std::uint32_t mask = 0; mask < (1u << misses.size()); ++mask) {
    if (max_copies >= 0 && std::popcount(mask) > max_copies) {
      continue;
    }
    b.objective = std::min(b.objective, brute_objective(c, q, misses, mask, loss));
  }
  return b;
}

TEST(HybridSplit, MatchesBruteForceOnRandomCalls) {
  std::mt19937_64 rng(2026);
  std::uniform_real_distribution<double> time(0.0, 60e-6);
  std::uniform_int_distribution<std::int32_t> positions(1, 9);
  hybrid_splitter splitter;
  int mixed = 0;  // trials whose best split uses both sides
  for (int trial = 0; trial < 3000; ++trial) {
    const hybrid_cost_model cost{.copy_seconds = time(rng) + 1e-6,
                                 .expert_seconds = time(rng) / 3,
                                 .position_seconds = time(rng) / 20,
                                 .call_seconds = trial % 3 == 0 ? 0.0 : time(rng) / 2};
    const hybrid_queues q{.link_seconds = trial % 4 == 0 ? 0.0 : time(rng) * 4,
                          .host_seconds = trial % 5 == 0 ? 0.0 : time(rng) * 4};
    std::vector<hybrid_miss> misses(static_cast<std::size_t>(trial % 11));
    for (std::size_t i = 0; i < misses.size(); ++i) {
      misses[i] = {.expert = static_cast<std::int32_t>(i),
                   .positions = positions(rng),
                   .value_seconds = trial % 2 == 0 ? 0.0 : time(rng) * (i % 3 == 0 ? 3 : 0.5)};
    }
    std::vector<double> loss;
    if (trial % 7 >= 4) {
      for (std::size_t m = 0; m < misses.size(); ++m) {
        loss.push_back(time(rng) / 2);
      }
    }
    const std::int32_t limit = trial % 6 == 5 ? static_cast<std::int32_t>(misses.size() / 2) : -1;
    std::vector<std::uint8_t> copy(misses.size(), 7);
    const hybrid_decision d = splitter.split(cost, q, misses, copy, limit, loss);
    const brute_best b = brute_force(cost, q, misses, limit, loss);
    ASSERT_NEAR(d.objective, b.objective, 1e-15) << "trial " << trial;
    // The split it wrote is one of least objective, and the figures it returned are that split's.
    const hybrid_decision again = hybrid_objective(cost, q, misses, copy, loss);
    EXPECT_NEAR(again.objective, b.objective, 1e-15) << "trial " << trial;
    EXPECT_NEAR(again.finish, d.finish, 1e-15);
    EXPECT_EQ(again.copies, d.copies);
    EXPECT_EQ(again.host_experts, d.host_experts);
    EXPECT_EQ(again.host_positions, d.host_positions);
    EXPECT_TRUE(std::all_of(copy.begin(), copy.end(), [](std::uint8_t c) { return c <= 1; }));
    if (limit >= 0) {
      EXPECT_LE(d.copies, limit);
    }
    mixed += d.copies > 0 && d.host_experts > 0 ? 1 : 0;
  }
  EXPECT_GT(mixed, 500);  // the instances exercise real splits, not one side alone
}

// copy 40 us, host 15 us per expert (0.5 us per position), 20 us of transfers per call.
constexpr hybrid_cost_model example{.copy_seconds = 40e-6,
                                    .expert_seconds = 15e-6,
                                    .position_seconds = 0.5e-6,
                                    .call_seconds = 20e-6};

TEST(HybridSplit, AOneOffExpertGoesToTheHostAndOneAboutToBeReusedIsCopied) {
  hybrid_splitter splitter;
  std::vector<std::uint8_t> copy(1);
  // Alone, no value: host 20 + 15 = 35 us against a copy's 40 us.
  std::vector<hybrid_miss> one = {{.expert = 5, .positions = 1, .value_seconds = 0}};
  hybrid_decision d = splitter.split(example, {}, one, copy);
  EXPECT_EQ(copy[0], 0);
  EXPECT_DOUBLE_EQ(d.finish, 35e-6);
  // Worth more than the 5 us it costs now: copied (objective 40 - 6 = 34 < 35).
  one[0].value_seconds = 6e-6;
  d = splitter.split(example, {}, one, copy);
  EXPECT_EQ(copy[0], 1);
  EXPECT_DOUBLE_EQ(d.objective, 34e-6);
  // ...unless the copy evicts something worth as much.
  const std::vector<double> loss = {6e-6};
  d = splitter.split(example, {}, one, copy, -1, loss);
  EXPECT_EQ(copy[0], 0);
  // With no slot to take, it goes to the host whatever it is worth.
  d = splitter.split(example, {}, one, copy, 0);
  EXPECT_EQ(copy[0], 0);
}

TEST(HybridSplit, ABusyQueueSendsWorkToTheOther) {
  hybrid_splitter splitter;
  std::vector<hybrid_miss> four(4, hybrid_miss{.expert = 0, .positions = 1, .value_seconds = 0});
  std::vector<std::uint8_t> copy(4);
  // Idle queues: 3 on the host (20 + 45 = 65 us) and 1 copied (40 us) beat 4 on the host (80 us)
  // and 2 + 2 (80 us).
  hybrid_decision d = splitter.split(example, {}, four, copy);
  EXPECT_EQ(d.copies, 1);
  EXPECT_DOUBLE_EQ(d.finish, 65e-6);
  // The link still busy for 100 us: everything on the host (80 us).
  d = splitter.split(example, {.link_seconds = 100e-6, .host_seconds = 0}, four, copy);
  EXPECT_EQ(d.copies, 0);
  EXPECT_DOUBLE_EQ(d.finish, 80e-6);
  // The host busy for 200 us: everything copied (160 us).
  d = splitter.split(example, {.link_seconds = 0, .host_seconds = 200e-6}, four, copy);
  EXPECT_EQ(d.copies, 4);
  EXPECT_DOUBLE_EQ(d.finish, 160e-6);
}

TEST(HybridSplit, ManyPositionsMakeTheHostComputeBound) {
  hybrid_splitter splitter;
  // 100 positions: the host's FLOP roofline (50 us) beats its memory one (15 us), and 20 + 50 =
  // 70 us loses to a copy (40 us).
  std::vector<hybrid_miss> wide = {{.expert = 1, .positions = 100, .value_seconds = 0}};
  std::vector<std::uint8_t> copy(1);
  const hybrid_decision d = splitter.split(example, {}, wide, copy);
  EXPECT_EQ(copy[0], 1);
  EXPECT_DOUBLE_EQ(example.host_seconds(1, 100), 50e-6);
  EXPECT_DOUBLE_EQ(d.finish, 40e-6);
  // An empty call decides nothing.
  const hybrid_decision none = splitter.split(example, {}, {}, {});
  EXPECT_EQ(none.copies + none.host_experts, 0);
  EXPECT_DOUBLE_EQ(none.finish, 0);
}

TEST(HybridSplit, RefusesBadInputNamingTheValue) {
  hybrid_splitter splitter;
  std::vector<hybrid_miss> one = {{.expert = 2, .positions = 1}};
  std::vector<std::uint8_t> copy(1, 9);
  hybrid_cost_model bad = example;
  bad.copy_seconds = -1;
  expect_error([&] { (void)splitter.split(bad, {}, one, copy); }, "copy_seconds", "-1");
  bad = example;
  bad.position_seconds = std::numeric_limits<double>::quiet_NaN();
  expect_error([&] { (void)splitter.split(bad, {}, one, copy); }, "position_seconds");
  expect_error([&] { (void)splitter.split(example, {.link_seconds = -2e-6}, one, copy); },
               "queue times", "-2e-06");
  one[0].positions = 0;
  expect_error([&] { (void)splitter.split(example, {}, one, copy); }, "expert 2", "0 positions");
  one[0] = {.expert = 3, .positions = 1, .value_seconds = -1};
  expect_error([&] { (void)splitter.split(example, {}, one, copy); }, "expert 3", "value -1");
  one[0].value_seconds = 0;
  std::vector<std::uint8_t> two(2);
  expect_error([&] { (void)splitter.split(example, {}, one, two); }, "2 split flags for 1");
  const std::vector<double> loss = {-0.5};
  expect_error([&] { (void)splitter.split(example, {}, one, copy, -1, loss); },
               "eviction_loss[0] = -0.5");
  EXPECT_EQ(copy[0], 9);  // nothing written
}

TEST(HybridMissPolicy, IsExactSoRewriteLeavesTheBatchAlone) {
  EXPECT_EQ(to_string(miss_policy::hybrid), "hybrid");
  std::vector<std::int32_t> ids = {1, 2, 3, 4};
  std::vector<float> weights = {0.4f, 0.6f, 0.7f, 0.3f};
  const auto before_ids = ids;
  const auto before_weights = weights;
  const miss_rewrite r = rewrite_misses(std::span<std::int32_t>(ids), std::span<float>(weights), 2,
                                        2, 8, miss_options{.policy = miss_policy::hybrid},
                                        [](std::int32_t) { return false; });
  EXPECT_EQ(ids, before_ids);
  EXPECT_EQ(weights, before_weights);
  EXPECT_EQ(r.dropped + r.substituted + r.fetched, 0);
}

// The estimator's formula, step by step: f is the moving average of "routed", R = capacity /
// copies per call, p = 1 - (1 - f)^R, hits = min(p / (1 - p), f / rate).
TEST(HostCostTracker, ConvergesToTheHostsTrueRateFromAWrongPrior) {
  // The truth: 20 us per call and 300 us per expert (memory-bound at 1 row), 5 us per position.
  const auto truth = [](std::int32_t n, std::int64_t p) {
    return 20e-6 + std::max(n * 300e-6, static_cast<double>(p) * 5e-6);
  };
  host_cost_tracker t({.copy_seconds = 320e-6,
                       .expert_seconds = 600e-6,
                       .position_seconds = 5e-6,
                       .call_seconds = 20e-6});
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    const auto n = static_cast<std::int32_t>(1 + rng() % 6);
    t.record(n, n, truth(n, n));
  }
  EXPECT_NEAR(t.costs().expert_seconds, 300e-6, 1e-9);
  EXPECT_EQ(t.costs().call_seconds, 20e-6);  // left as given
  EXPECT_EQ(t.costs().copy_seconds, 320e-6);
  EXPECT_EQ(t.costs().position_seconds, 5e-6);  // no FLOP-bound call seen
  EXPECT_EQ(t.calls(), 200u);
  // The host slows down (DMA now shares its memory): the estimate follows.
  for (int i = 0; i < 200; ++i) {
    t.record(2, 2, 20e-6 + 2 * 450e-6);
  }
  EXPECT_NEAR(t.costs().expert_seconds, 450e-6, 1e-9);
  // A call bound by its FLOPs (many positions) moves the position time, not the expert time.
  t.record(1, 1000, 20e-6 + 1000 * 8e-6);
  EXPECT_NEAR(t.costs().expert_seconds, 450e-6, 1e-9);
  EXPECT_DOUBLE_EQ(t.costs().position_seconds, 0.875 * 5e-6 + 0.125 * 8e-6);
}

TEST(HostCostTracker, EachCallIsOneStepOfTheMovingAverage) {
  const hybrid_cost_model prior{.copy_seconds = 1e-3,
                                .expert_seconds = 400e-6,
                                .position_seconds = 1e-6,
                                .call_seconds = 50e-6};
  host_cost_tracker t(prior, 0.5);
  t.record(2, 2, 50e-6 + 2 * 200e-6);
  EXPECT_DOUBLE_EQ(t.costs().expert_seconds, 0.5 * 400e-6 + 0.5 * 200e-6);
  t.record(1, 1, 10e-6);  // shorter than the call's fixed cost: no work, not negative
  EXPECT_DOUBLE_EQ(t.costs().expert_seconds, 0.5 * 300e-6);
}

TEST(HostCostTracker, RefusesBadInputAndLeavesTheCostsAlone) {
  const hybrid_cost_model prior{.copy_seconds = 1e-3,
                                .expert_seconds = 400e-6,
                                .position_seconds = 1e-6,
                                .call_seconds = 50e-6};
  expect_error([&] { host_cost_tracker(prior, 0.0); }, "rate must be in (0, 1], got 0");
  expect_error(
      [&] {
        host_cost_tracker(
            {.copy_seconds = -1, .expert_seconds = 1, .position_seconds = 1, .call_seconds = 0});
      },
      "copy_seconds");
  host_cost_tracker t(prior);
  expect_error([&] { t.record(0, 1, 1e-3); }, "experts must be >= 1, got 0");
  expect_error([&] { t.record(3, 2, 1e-3); }, "2 positions for 3 experts");
  expect_error([&] { t.record(1, 1, -1e-3); }, "got -0.001");
  expect_error([&] { t.record(1, 1, std::numeric_limits<double>::quiet_NaN()); }, "got nan");
  EXPECT_EQ(t.costs().expert_seconds, prior.expert_seconds);
  EXPECT_EQ(t.calls(), 0u);
}

TEST(ReuseValueEstimator, FollowsItsFormula) {
  const double rate = 0.25;
  reuse_value_estimator est(2, 8, rate);
  EXPECT_EQ(est.expected_hits(0, 3, 4), 0.0);  // never routed
  const std::int32_t a[] = {3, 5};
  const std::int32_t b[] = {3};
  est.record_call(0, a, 2);  // f3 = f5 = 0.25, copies/call = 0.5
  est.record_call(0, b, 1);  // f3 = 0.4375, f5 = 0.1875, copies/call = 0.625
  est.record_call(1, b, 0);  // another layer: no effect on layer 0
  double copies = 0.25 * 2;
  copies = 0.75 * copies + 0.25 * 1;
  const auto hits = [&](double f, std::int32_t capacity) {
    const double p = 1 - std::pow(1 - f, capacity / copies);
    return std::min(p / (1 - p), f / rate);
  };
  EXPECT_NEAR(est.expected_hits(0, 3, 4), hits(0.4375, 4), 1e-12);
  EXPECT_NEAR(est.expected_hits(0, 5, 4), hits(0.1875, 4), 1e-12);
  EXPECT_NEAR(est.expected_hits(0, 5, 1), hits(0.1875, 1), 1e-12);
  EXPECT_GT(est.expected_hits(0, 3, 4), est.expected_hits(0, 5, 4));
  EXPECT_GT(est.expected_hits(0, 5, 4), est.expected_hits(0, 5, 1));
  // Two calls without expert 5: its average decays by (1 - rate)^2.
  const std::int32_t c[] = {1};
  est.record_call(0, c, 0);
  est.record_call(0, c, 0);
  copies *= 0.75 * 0.75;
  EXPECT_NEAR(est.expected_hits(0, 5, 4), hits(0.1875 * 0.75 * 0.75, 4), 1e-12);
  // In layer 1 nothing was ever copied: the expert is never pushed out, the memory caps it.
  EXPECT_NEAR(est.expected_hits(1, 3, 4), 0.25 / rate, 1e-12);

  expect_error([&] { (void)est.expected_hits(2, 0, 4); }, "layer 2");
  expect_error([&] { (void)est.expected_hits(0, 8, 4); }, "expert 8");
  expect_error([&] { (void)est.expected_hits(0, 1, 0); }, "capacity must be >= 1, got 0");
  const std::int32_t bad[] = {9};
  expect_error([&] { est.record_call(0, bad, 0); }, "expert 9");
  expect_error([&] { est.record_call(0, c, -1); }, "copies must be >= 0, got -1");
  expect_error([&] { reuse_value_estimator(1, 4, 0.0); }, "rate must be in (0, 1], got 0");
  expect_error([&] { reuse_value_estimator(0, 4); }, "layers 0");
}

}  // namespace
}  // namespace wisp
