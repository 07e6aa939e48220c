// SPDX-License-Identifier: Apache-2.0
// decayed_histogram against the decay recursion computed by hand and by an independent oracle.
#include <wisp/reuse/decayed_histogram.hpp>
#include <wisp/reuse/histogram.hpp>
#include <wisp/reuse/reuse_distance.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace {

using wisp::decayed_histogram;
using wisp::reuse_distance_counter;
constexpr auto cold = reuse_distance_counter::cold;

// Edges {1, 2, 4, 8}: bins [1,2) [2,4) [4,8) and overflow [8, inf); decay 1/2.
//   burst 1: 1 1 3 5 9 cold   -> bins {2, 1, 1, 1},            cold 1
//   burst 2: 2 2 cold cold    -> {1, 0.5+2, 0.5, 0.5}          cold 0.5+2
//   burst 3: 7                -> {0.5, 1.25, 0.25+1, 0.25}     cold 1.25
// hits(c), mass spread evenly in a bin: c=1: 0.5; c=2: 0.5 + 1.25/2; c=3: 0.5 + 1.25;
// c=4..7: 1.75 + 1.25 * (c - 3) / 4.
TEST(DecayedHistogram, ThreeBurstsByHand) {
  decayed_histogram h{{1, 2, 4, 8}, 0.5};
  for (const auto d : {1u, 1u, 3u, 5u, 9u, cold}) {
    h.record(d);
  }
  h.end_burst();
  EXPECT_EQ(std::vector<double>(h.bins().begin(), h.bins().end()),
            (std::vector<double>{2, 1, 1, 1}));
  EXPECT_EQ(h.cold(), 1.0);
  for (const auto d : {2u, 2u, cold, cold}) {
    h.record(d);
  }
  h.end_burst();
  h.record(7);
  EXPECT_EQ(h.bins()[2], 0.5);  // an open burst is not visible yet
  h.end_burst();

  EXPECT_EQ(h.bursts(), 3u);
  EXPECT_EQ(std::vector<double>(h.bins().begin(), h.bins().end()),
            (std::vector<double>{0.5, 1.25, 1.25, 0.25}));
  EXPECT_DOUBLE_EQ(h.cold(), 1.25);
  EXPECT_DOUBLE_EQ(h.warm_total(), 3.25);
  EXPECT_EQ(h.max_capacity(), 7u);
  const std::vector<double> hits = {0.0, 0.5, 1.125, 1.75, 2.0625, 2.375, 2.6875, 3.0};
  for (std::uint32_t c = 0; c < hits.size(); ++c) {
    EXPECT_DOUBLE_EQ(h.hits(c), hits[c]) << "capacity " << c;
    EXPECT_DOUBLE_EQ(h.warm_miss_ratio(c), 1.0 - hits[c] / 3.25) << "capacity " << c;
  }
  EXPECT_DOUBLE_EQ(h.hits(100), 3.0);  // clamped: the overflow bin never counts as a hit
  const std::vector<double> marginal = {0.5, 0.625, 0.625, 0.3125, 0.3125, 0.3125, 0.3125};
  const auto all = h.marginals();
  ASSERT_EQ(all.size(), marginal.size());
  for (std::uint32_t c = 0; c < marginal.size(); ++c) {
    EXPECT_DOUBLE_EQ(h.marginal(c), marginal[c]) << "capacity " << c;
    EXPECT_DOUBLE_EQ(all[c], marginal[c]) << "capacity " << c;
  }
  EXPECT_EQ(h.marginal(7), 0.0);
}

// Unit bins against an oracle that keeps a decayed count per distance and applies the recursion
// itself; marginals must equal differences of the oracle's curve.
TEST(DecayedHistogram, UnitBinsMatchRecursionOracle) {
  constexpr std::uint32_t max_d = 40;
  for (const double decay : {0.0, 0.3, 0.9, 1.0}) {
    decayed_histogram h{decayed_histogram::unit_edges(max_d), decay};
    std::vector<double> per_distance(max_d + 2, 0.0);  // [max_d + 1] = overflow
    double oracle_cold = 0.0;
    std::mt19937_64 rng{static_cast<std::uint64_t>(decay * 100) + 1};
    for (int burst = 0; burst < 25; ++burst) {
      std::vector<double> fresh(per_distance.size(), 0.0);
      double fresh_cold = 0.0;
      const int n = static_cast<int>(rng() % 50);
      for (int i = 0; i < n; ++i) {
        const auto r = rng() % 60;
        if (r == 0) {
          h.record(cold);
          fresh_cold += 1;
        } else {
          const auto d = static_cast<std::uint32_t>(r);
          h.record(d);
          fresh[std::min(d, max_d + 1)] += 1;
        }
      }
      h.end_burst();
      for (std::size_t d = 0; d < per_distance.size(); ++d) {
        per_distance[d] = decay * per_distance[d] + fresh[d];
      }
      oracle_cold = decay * oracle_cold + fresh_cold;
    }
    EXPECT_NEAR(h.cold(), oracle_cold, 1e-9);
    std::vector<double> oracle_hits(max_d + 1, 0.0);
    for (std::uint32_t c = 1; c <= max_d; ++c) {
      oracle_hits[c] = oracle_hits[c - 1] + per_distance[c];
    }
    double warm = 0.0;
    for (const double m : per_distance) {
      warm += m;
    }
    EXPECT_NEAR(h.warm_total(), warm, 1e-9);
    const auto marginals = h.marginals();
    for (std::uint32_t c = 0; c <= max_d; ++c) {
      EXPECT_NEAR(h.hits(c), oracle_hits[c], 1e-9) << "decay " << decay << " capacity " << c;
      if (c < max_d) {
        EXPECT_NEAR(h.marginal(c), oracle_hits[c + 1] - oracle_hits[c], 1e-9);
        EXPECT_NEAR(marginals[c], oracle_hits[c + 1] - oracle_hits[c], 1e-9);
      }
    }
  }
}

// decay = 1 with one burst: the warm curve is the exact miss curve without the cold misses.
TEST(DecayedHistogram, NoDecayEqualsExactWarmCurve) {
  reuse_distance_counter counter{50};
  wisp::reuse_histogram exact{{wisp::cache_scope::stream, 1, 50}};
  std::mt19937_64 rng{3};
  for (int i = 0; i < 5000; ++i) {
    exact.record(counter.access(static_cast<std::uint32_t>(rng() % 50)));
  }
  decayed_histogram h{decayed_histogram::unit_edges(50), 1.0};
  h.add_burst(exact);
  const wisp::miss_curve curve{exact};
  EXPECT_DOUBLE_EQ(h.cold(), static_cast<double>(exact.cold()));
  for (std::uint32_t c = 0; c <= 50; ++c) {
    EXPECT_DOUBLE_EQ(h.warm_total() - h.hits(c),
                     static_cast<double>(curve.misses(c) - curve.cold()))
        << "capacity " << c;
  }
}

TEST(DecayedHistogram, PowerOfTwoEdges) {
  EXPECT_EQ(decayed_histogram::power_of_two_edges(64),
            (std::vector<std::uint32_t>{1, 2, 4, 8, 16, 32, 64, 65}));
  EXPECT_EQ(decayed_histogram::power_of_two_edges(1), (std::vector<std::uint32_t>{1, 2}));
  EXPECT_EQ(decayed_histogram::unit_edges(3), (std::vector<std::uint32_t>{1, 2, 3, 4}));
}

TEST(DecayedHistogram, RejectsBadConfiguration) {
  EXPECT_THROW(decayed_histogram({}, 0.5), wisp::logic_error);
  EXPECT_THROW(decayed_histogram({2, 4}, 0.5), wisp::logic_error);
  EXPECT_THROW(decayed_histogram({1, 4, 4}, 0.5), wisp::logic_error);
  EXPECT_THROW(decayed_histogram({1, 2}, 1.5), wisp::logic_error);
  EXPECT_THROW(decayed_histogram({1, 2}, -0.1), wisp::logic_error);
  decayed_histogram h{{1, 2}, 0.5};
  EXPECT_THROW(h.record(0), wisp::logic_error);
  EXPECT_EQ(h.warm_miss_ratio(1), 0.0);  // nothing recorded
}

}  // namespace
