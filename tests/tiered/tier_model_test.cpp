// SPDX-License-Identifier: Apache-2.0
// The tier model against brute force: Poisson-binomial and inclusion probabilities against every
// outcome, the hit-pattern distribution against every k-subset (exact, small E) and against
// Monte-Carlo draws of the max-entropy design (E = 64, k = 6), the fitted marginals against f, the
// makespan estimate against an op-by-op count, and the planner against exhaustive evaluation.
#include "support/enum_names.hpp"
#include "support/expect_error.hpp"

#include <wisp/tiered/tier_model.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using wisp::hit_pattern;
using wisp::tier_sizes;

std::vector<double> random_q(std::size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0.02, 0.9);
  std::vector<double> q(n);
  for (double& x : q) {
    x = u(rng);
  }
  return q;
}

// Probability of every subset (bitmask) of size k under P(S) ∝ prod_{i in S} q_i / (1 - q_i).
std::map<std::uint32_t, double> subset_law(const std::vector<double>& q, int k) {
  std::map<std::uint32_t, double> law;
  double z = 0.0;
  for (std::uint32_t s = 0; s < (1u << q.size()); ++s) {
    if (std::popcount(s) != k) {
      continue;
    }
    double w = 1.0;
    for (std::size_t i = 0; i < q.size(); ++i) {
      if ((s >> i) & 1u) {
        w *= q[i] / (1.0 - q[i]);
      }
    }
    law[s] = w;
    z += w;
  }
  for (auto& [s, p] : law) {
    p /= z;
  }
  return law;
}

// The pattern of a subset: which pool's rank interval each selected rank falls in.
hit_pattern pattern_of(std::uint32_t s, const tier_sizes& sizes) {
  hit_pattern h;
  std::uint32_t first = 0;
  for (std::size_t p = 0; p < wisp::tier_count; ++p) {
    for (std::int32_t r = 0; r < sizes[p]; ++r) {
      h.hits[p] += static_cast<std::int32_t>((s >> (first + static_cast<std::uint32_t>(r))) & 1u);
    }
    first += static_cast<std::uint32_t>(sizes[p]);
  }
  return h;
}

std::uint32_t key(const hit_pattern& h) {
  return static_cast<std::uint32_t>(h.hits[0] | h.hits[1] << 8 | h.hits[2] << 16 | h.hits[3] << 24);
}

TEST(TierModel, PoissonBinomialMatchesEveryOutcome) {
  std::mt19937_64 rng(1);
  for (std::size_t n : {0u, 1u, 5u, 11u}) {
    const std::vector<double> q = random_q(n, rng);
    std::vector<double> exact(n + 1, 0.0);
    for (std::uint32_t s = 0; s < (1u << n); ++s) {
      double p = 1.0;
      for (std::size_t i = 0; i < n; ++i) {
        p *= ((s >> i) & 1u) ? q[i] : 1.0 - q[i];
      }
      exact[static_cast<std::size_t>(std::popcount(s))] += p;
    }
    for (std::int32_t max_hits : {0, 2, static_cast<std::int32_t>(n) + 3}) {
      const std::vector<double> phi = wisp::poisson_binomial(q, max_hits);
      ASSERT_EQ(phi.size(), static_cast<std::size_t>(max_hits) + 1);
      for (std::size_t h = 0; h < phi.size(); ++h) {
        EXPECT_NEAR(phi[h], h <= n ? exact[h] : 0.0, 1e-14) << "n " << n << " h " << h;
      }
    }
  }
}

TEST(TierModel, InclusionProbabilitiesMatchEveryKSubset) {
  std::mt19937_64 rng(2);
  for (int k = 1; k <= 4; ++k) {
    const std::vector<double> q = random_q(10, rng);
    std::vector<double> exact(q.size(), 0.0);
    for (const auto& [s, p] : subset_law(q, k)) {
      for (std::size_t i = 0; i < q.size(); ++i) {
        exact[i] += ((s >> i) & 1u) ? p : 0.0;
      }
    }
    const std::vector<double> pi = wisp::inclusion_probabilities(q, k);
    for (std::size_t i = 0; i < q.size(); ++i) {
      EXPECT_NEAR(pi[i], exact[i], 1e-13) << "k " << k << " i " << i;
    }
  }
}

// Sorted descending, as rank marginals are.
std::vector<double> marginals_of_random_design(std::size_t n, int k, std::mt19937_64& rng) {
  std::vector<double> q = random_q(n, rng);
  std::sort(q.rbegin(), q.rend());
  return wisp::inclusion_probabilities(q, k);
}

TEST(TierModel, FitReproducesTheMarginalsAndTheUniqueDesignBehindThem) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 20; ++trial) {
    const int k = 1 + trial % 4;
    const std::vector<double> f = marginals_of_random_design(10, k, rng);
    const wisp::selection_fit fit = wisp::fit_selection_probabilities(f, k, 1e-12);
    double sum = 0.0;
    for (const double x : fit.q) {
      sum += x;
    }
    EXPECT_NEAR(sum, k, 1e-9);
    EXPECT_LE(fit.residual, 1e-12);
    // The marginals of the fitted design, by brute force: f again.
    std::vector<double> implied(f.size(), 0.0);
    for (const auto& [s, p] : subset_law(fit.q, k)) {
      for (std::size_t i = 0; i < f.size(); ++i) {
        implied[i] += ((s >> i) & 1u) ? p : 0.0;
      }
    }
    for (std::size_t i = 0; i < f.size(); ++i) {
      EXPECT_NEAR(implied[i], f[i], 1e-11) << "trial " << trial << " rank " << i;
    }
  }
}

TEST(TierModel, HitDistributionEqualsKSubsetEnumerationExactly) {
  std::mt19937_64 rng(4);
  const int k = 3;
  const std::vector<double> q =
      wisp::fit_selection_probabilities(marginals_of_random_design(11, k, rng), k).q;
  const auto law = subset_law(q, k);
  std::uniform_int_distribution<int> size(0, 4);
  for (int trial = 0; trial < 60; ++trial) {
    tier_sizes sizes{};
    int left = 11;
    for (auto& s : sizes) {
      s = std::min(size(rng), left);
      left -= s;
    }
    std::map<std::uint32_t, double> exact;
    for (const auto& [s, p] : law) {
      exact[key(pattern_of(s, sizes))] += p;
    }
    const wisp::hit_distribution d(q, k, sizes);
    double total = 0.0;
    std::size_t patterns = 0;
    d.for_each([&](const hit_pattern& h, double p) {
      const auto it = exact.find(key(h));
      EXPECT_NEAR(p, it == exact.end() ? 0.0 : it->second, 1e-13);
      total += p;
      ++patterns;
    });
    EXPECT_EQ(patterns, 35u);  // C(k + 4, 4): every pattern with sum <= k
    EXPECT_NEAR(total, 1.0, 1e-12);
  }
}

// Zipf-like rank marginals of a realistic layer: E = 64, k = 6, sum f = 6.
std::vector<double> zipf_marginals(int experts, int k, double s) {
  std::vector<double> w(static_cast<std::size_t>(experts));
  for (int r = 0; r < experts; ++r) {
    w[static_cast<std::size_t>(r)] = 1.0 / std::pow(r + 1.0, s);
  }
  // Marginals of the design with these weights: sorted, feasible, summing to k.
  return wisp::inclusion_probabilities(wisp::detail::probabilities_summing_to(w, k), k);
}

TEST(TierModel, HitDistributionMatchesMonteCarloOfTheMaxEntropyModel) {
  const int k = 6;
  const std::vector<double> f = zipf_marginals(64, k, 1.1);
  const wisp::selection_fit fit = wisp::fit_selection_probabilities(f, k);
  EXPECT_LE(fit.residual, 1e-9);
  const tier_sizes sizes{4, 6, 10, 12};
  const wisp::hit_distribution d(fit.q, k, sizes);
  // Draw the design: independent Bernoulli(q) per rank, kept when exactly k succeed.
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  constexpr int draws = 100'000;
  std::map<std::uint32_t, double> seen;
  std::vector<double> selected(f.size(), 0.0);
  std::vector<int> pick;
  for (int n = 0; n < draws;) {
    pick.clear();
    for (std::size_t r = 0; r < f.size(); ++r) {
      if (u(rng) < fit.q[r]) {
        pick.push_back(static_cast<int>(r));
      }
    }
    if (static_cast<int>(pick.size()) != k) {
      continue;
    }
    ++n;
    hit_pattern h;
    for (const int r : pick) {
      selected[static_cast<std::size_t>(r)] += 1.0;
      int first = 0;
      for (std::size_t p = 0; p < wisp::tier_count; ++p) {
        if (r >= first && r < first + sizes[p]) {
          ++h.hits[p];
        }
        first += sizes[p];
      }
    }
    seen[key(h)] += 1.0;
  }
  // Each frequency within 5 standard errors (plus 1e-4 for rare patterns): a wrong formula, a
  // swapped pool or a missing normalisation is off by far more.
  d.for_each([&](const hit_pattern& h, double p) {
    const double observed = seen[key(h)] / draws;
    EXPECT_NEAR(observed, p, 5.0 * std::sqrt(p * (1.0 - p) / draws) + 1e-4)
        << h.hits[0] << h.hits[1] << h.hits[2] << h.hits[3];
  });
  for (std::size_t r = 0; r < f.size(); ++r) {
    EXPECT_NEAR(selected[r] / draws, f[r], 5.0 * std::sqrt(f[r] * (1.0 - f[r]) / draws) + 1e-4)
        << "rank " << r;
  }
}

// Algorithm 3 by counting operations one by one.
double makespan_by_counting(const wisp::tier_costs& c, int k, const hit_pattern& h) {
  double io = 0.0;
  double work = 0.0;
  std::vector<int> state;  // 0..3 pools, 4 miss
  for (std::size_t p = 0; p < wisp::tier_count; ++p) {
    state.insert(state.end(), static_cast<std::size_t>(h.hits[p]), static_cast<int>(p));
  }
  state.resize(static_cast<std::size_t>(k), 4);
  for (const int s : state) {
    for (std::uint32_t t = 0; t < c.tensors; ++t) {
      const bool sm_cached = s == 0 || s == 1 || s == 2;
      const bool e_cached = s == 0 || s == 1 || s == 3;
      io += sm_cached ? 0.0 : c.sm_read;
      for (std::uint32_t j = 0; j < c.e_chunks; ++j) {
        io += e_cached ? 0.0 : c.e_read;
        work += (e_cached ? 0.0 : c.e_read) + (s == 0 ? 0.0 : c.decode);
      }
    }
  }
  return std::max(io, work / c.threads);
}

TEST(TierModel, MakespanEstimateCountsEveryReadAndDecode) {
  const wisp::tier_costs c{
      .sm_read = 1.0, .e_read = 0.09, .decode = 0.3, .threads = 3, .e_chunks = 4, .tensors = 2};
  const int k = 5;
  const wisp::hit_distribution any(std::vector<double>(8, 5.0 / 8), k, {2, 2, 2, 2});
  any.for_each([&](const hit_pattern& h, double) {
    EXPECT_NEAR(wisp::estimate_makespan(c, k, h), makespan_by_counting(c, k, h), 1e-12);
  });
  EXPECT_EQ(wisp::estimate_makespan(c, k, {{5, 0, 0, 0}}), 0.0);
  EXPECT_THROW((void)wisp::estimate_makespan(c, k, {{3, 3, 0, 0}}), wisp::logic_error);
}

TEST(TierModel, PlannerPicksTheBestGridPartitionByExhaustiveEnumeration) {
  std::mt19937_64 rng(6);
  const int experts = 10;
  const int k = 3;
  const std::vector<double> q =
      wisp::fit_selection_probabilities(marginals_of_random_design(experts, k, rng), k).q;
  const auto law = subset_law(q, k);
  const wisp::tier_bytes bytes{200, 134, 100, 34};
  for (const double u : {1.0, 0.2}) {  // a slow link (tiers pay) and a fast one
    const wisp::tier_costs costs{.sm_read = u,
                                 .e_read = 0.34 * u / 4,
                                 .decode = 0.05,
                                 .threads = 4,
                                 .e_chunks = 4,
                                 .tensors = 1};
    for (const std::uint64_t budget : {400u, 1000u, 1500u}) {
      const wisp::tier_plan_request request{
          .q = q, .k = k, .budget_bytes = budget, .bytes = bytes, .costs = costs, .grid_step = 0.1};
      const wisp::tier_plan plan = wisp::plan_tiers(request);
      // Every ratio on the 0.1 grid, scored by summing over every k-subset.
      double best = INFINITY;
      std::size_t points = 0;
      for (int a = 0; a <= 10; ++a) {
        for (int b = 0; a + b <= 10; ++b) {
          for (int c = 0; a + b + c <= 10; ++c) {
            const std::array<double, 4> ratios{a / 10.0, b / 10.0, c / 10.0,
                                               (10 - a - b - c) / 10.0};
            const tier_sizes sizes = wisp::sizes_for_ratios(ratios, budget, bytes, experts);
            std::uint64_t used = 0;
            for (std::size_t p = 0; p < 4; ++p) {
              used += static_cast<std::uint64_t>(sizes[p]) * bytes[p];
            }
            ASSERT_LE(used, budget);
            double cost = 0.0;
            for (const auto& [s, p] : law) {
              cost += p * wisp::estimate_makespan(costs, k, pattern_of(s, sizes));
            }
            best = std::min(best, cost);
            ++points;
          }
        }
      }
      EXPECT_EQ(plan.evaluated, points);
      EXPECT_NEAR(plan.best.expected_seconds, best, 1e-12) << "u " << u << " budget " << budget;
      EXPECT_LE(plan.best.bytes_used, budget);
    }
  }
}

TEST(TierModel, TiersBeatAPlainCacheOnlyWhenTheLinkIsTheBottleneck) {
  const int k = 6;
  const std::vector<double> q = wisp::fit_selection_probabilities(zipf_marginals(64, k, 1.0), k).q;
  const wisp::tier_bytes bytes{200, 134, 100, 34};
  auto plan_with = [&](double u, std::array<bool, 4> enabled) {
    const wisp::tier_costs costs{.sm_read = u,
                                 .e_read = 0.34 * u / 8,
                                 .decode = 0.01,
                                 .threads = 8,
                                 .e_chunks = 8,
                                 .tensors = 3};
    return wisp::plan_tiers({.q = q,
                             .k = k,
                             .budget_bytes = 16 * 200,
                             .bytes = bytes,
                             .costs = costs,
                             .enabled = enabled,
                             .grid_step = 0.1})
        .best.expected_seconds;
  };
  // Slow link, cheap decode: spending the budget on compressed tiers covers more ranks.
  EXPECT_LT(plan_with(1.0, {true, true, true, true}), plan_with(1.0, {true, false, false, false}));
  // Decode far slower than any read: the plain cache's plan is the best one.
  const wisp::tier_costs slow_decode{
      .sm_read = 1e-6, .e_read = 1e-7, .decode = 1.0, .threads = 1, .e_chunks = 8, .tensors = 3};
  const auto plan = wisp::plan_tiers({.q = q,
                                      .k = k,
                                      .budget_bytes = 16 * 200,
                                      .bytes = bytes,
                                      .costs = slow_decode,
                                      .grid_step = 0.1});
  EXPECT_EQ(plan.best.sizes, (tier_sizes{16, 0, 0, 0}));
}

TEST(TierModel, BadInputsNameTheOffendingValues) {
  const std::vector<double> f{0.5, 0.5, 0.5, 0.5};
  wisp::test::expect_error([&] { (void)wisp::fit_selection_probabilities(f, 3); },
                           "sum to 2, not k = 3");
  wisp::test::expect_error(
      [&] { (void)wisp::fit_selection_probabilities(zipf_marginals(64, 6, 1.2), 6, 1e-9, 0); },
      "after 0 iterations exceeds the tolerance");
  wisp::test::expect_error(
      [&] {
        (void)wisp::fit_selection_probabilities(std::vector<double>{1.0, 0.5, 0.5}, 2);
      },
      "f[0] = 1");
  wisp::test::expect_error(
      [&] {
        (void)wisp::hit_distribution(f, 2, {2, 2, 1, 0});
      },
      "pool S of 1 experts from rank 4");
  wisp::test::expect_error(
      [&] {
        (void)wisp::plan_tiers(
            {.q = f, .k = 2, .budget_bytes = 10, .bytes = {1, 0, 1, 1}, .costs = {}});
      },
      "pool C is enabled but an expert takes 0 bytes");
  wisp::test::expect_error(
      [&] {
        (void)wisp::poisson_binomial(std::vector<double>{0.5, 1.5}, 2);
      },
      "q[1] = 1.5");
}

// The documented names (one letter per pool, "miss"), both ways, and what is not a name.
TEST(TierNames, ToStringAndFromStringAreInverse) {
  wisp::test::expect_names<wisp::tier>({{wisp::tier::full, "F"},
                                        {wisp::tier::compressed, "C"},
                                        {wisp::tier::sm, "S"},
                                        {wisp::tier::e, "E"}});
  // A residency of a pool has the pool's name.
  wisp::test::expect_names<wisp::residency>({{wisp::residency::full, "F"},
                                             {wisp::residency::compressed, "C"},
                                             {wisp::residency::sm, "S"},
                                             {wisp::residency::e, "E"},
                                             {wisp::residency::miss, "miss"}});
  EXPECT_EQ(wisp::from_string<wisp::tier>("miss"), std::nullopt);
  EXPECT_EQ(wisp::from_string<wisp::tier>("f"), std::nullopt);
  EXPECT_EQ(wisp::to_string(static_cast<wisp::tier>(9)), "unknown");
}

}  // namespace
