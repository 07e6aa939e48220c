// SPDX-License-Identifier: Apache-2.0
// The configurator's choice equals brute-force minimisation of the same cost at every budget.
#include <wisp/alloc/configurator.hpp>
#include <wisp/alloc/cost_model.hpp>
#include <wisp/alloc/model_spec.hpp>
#include <wisp/alloc/split.hpp>
#include <wisp/core/error.hpp>
#include <wisp/reuse/histogram.hpp>
#include <wisp/reuse/trace_profile.hpp>
#include <wisp/trace/synthetic.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace {

using namespace wisp::literals;
using wisp::admission_floor;
using wisp::byte_size;
using wisp::cost_model;
using wisp::cost_params;

// A test curve: any non-increasing table (not necessarily an LRU curve).
struct table_curve {
  std::vector<double> m;
  [[nodiscard]] double misses(std::uint64_t c) const { return c < m.size() ? m[c] : m.back(); }
};
static_assert(wisp::miss_curve_like<table_curve>);

table_curve random_curve(std::mt19937_64& rng, std::size_t n, double scale) {
  std::vector<double> m(n);
  double v = scale;
  for (auto& x : m) {
    x = v;
    v -= std::uniform_real_distribution<double>(0, scale / static_cast<double>(n) * 3)(rng);
    v = std::max(v, 0.0);
  }
  return {m};
}

// Brute force: evaluate Eq. 4 directly at every cap in [k, E]; keep the first minimum.
template <class E, class K>
std::int32_t brute_force(const wisp::model_spec& m, byte_size budget, const admission_floor& f,
                         const E& ec, const K& kc, const cost_params& p) {
  std::int32_t best = 0;
  double best_cost = INFINITY;
  const double per_expert =
      static_cast<double>(m.expert_bytes.count()) / p.bandwidth_bytes_per_second;
  const double per_block = static_cast<double>(m.block_tokens) * p.recompute_seconds_per_token;
  for (std::int32_t c = m.top_k; c <= m.experts; ++c) {
    const std::uint64_t experts = static_cast<std::uint64_t>(c) *
                                  static_cast<std::uint64_t>(m.layers) * m.expert_bytes.count();
    if (experts > budget.count()) {
      break;
    }
    const std::uint64_t blocks = (budget.count() - experts) / m.kv_block_bytes().count();
    if (blocks * m.block_tokens < f.concurrency * f.context) {
      continue;
    }
    const double cost = static_cast<double>(ec.misses(c)) * per_expert +
                        static_cast<double>(kc.misses(blocks)) * per_block;
    if (cost < best_cost) {
      best_cost = cost;
      best = c;
    }
  }
  return best;
}

TEST(Configurator, EqualsBruteForceOnRandomCurvesAtEveryBudget) {
  std::mt19937_64 rng{42};
  for (const auto& entry : wisp::model_presets()) {
    const auto m = entry.config.spec();
    for (int trial = 0; trial < 6; ++trial) {
      const table_curve ec = random_curve(rng, m.experts + 1, 1e6);
      const table_curve kc = random_curve(rng, 60000, 4e5);
      const cost_params p{std::uniform_real_distribution<double>(5e9, 50e9)(rng),
                          std::uniform_real_distribution<double>(0, 1e-3)(rng)};
      const admission_floor f{static_cast<std::uint64_t>(trial % 3),
                              4096u * static_cast<std::uint64_t>(trial)};
      const cost_model<table_curve, table_curve> cost{m, ec, kc, p};
      const auto lowest = wisp::minimum_budget(m, f);
      for (std::uint64_t i = 0; i < 30; ++i) {
        const byte_size budget{lowest.count() + i * (m.cap_unit_bytes().count() * 2 / 3 + 4099)};
        const auto conf = wisp::configure(cost, budget, f);
        ASSERT_EQ(conf.choice.expert_cap, brute_force(m, budget, f, ec, kc, p))
            << entry.config.name << " budget " << budget.count();
        EXPECT_EQ(conf.choice, wisp::make_split(m, budget, conf.choice.expert_cap));
        EXPECT_EQ(conf.knobs.per_layer_expert_cap, conf.choice.expert_cap);
        EXPECT_EQ(conf.knobs.kv_cache_bytes, conf.choice.kv_bytes);
        EXPECT_TRUE(f.admits(m, conf.choice));
        EXPECT_EQ(conf.evaluated.size(), conf.max_feasible_cap - m.top_k + 1);
      }
    }
  }
}

TEST(Configurator, EqualsBruteForceOnARealTraceCurve) {
  const auto m = wisp::model_preset("deepseek-v2-lite");
  const auto t = wisp::make_synthetic_trace(wisp::synthetic_preset("default"), 800, 3);
  const auto profile = wisp::profile_trace(t, wisp::cache_scope::per_layer);
  const wisp::miss_curve ec{profile.histogram};
  // A KV stream with a smooth curve: cyclic sweeps over growing sets.
  wisp::reuse_histogram hk{{wisp::cache_scope::stream, 1, 0}};
  for (std::int32_t d = 1; d < 30000; d += 37) {
    hk.add(d, 30000 / d + 1);
  }
  hk.add(wisp::reuse_distance_counter::cold, 5000);
  const wisp::miss_curve kc{hk};
  const cost_params p{25e9, 2e-4};
  const cost_model<> cost{m, ec, kc, p};
  const admission_floor f{4, 4096};
  for (std::uint64_t gib = 8; gib <= 40; ++gib) {
    for (const std::uint64_t odd : {0ull, 123456789ull}) {
      const byte_size budget{gib * (1_GiB).count() + odd};
      const auto conf = wisp::configure(cost, budget, f);
      ASSERT_EQ(conf.choice.expert_cap, brute_force(m, budget, f, ec, kc, p)) << budget.count();
      EXPECT_DOUBLE_EQ(conf.predicted_seconds, cost.seconds(conf.choice));
    }
  }
}

TEST(Configurator, InfeasibleBudgetStatesTheSmallestThatWorks) {
  const auto m = wisp::model_preset("olmoe-1b-7b");
  const cost_model<table_curve, table_curve> cost{m, {{1.0}}, {{1.0}}, {}};
  const admission_floor f{4, 8192};
  const auto lowest = wisp::minimum_budget(m, f);
  EXPECT_EQ(lowest.count(), 8ull * 16 * 12582912 + 2048ull * 2097152);
  EXPECT_THROW((void)wisp::configure(cost, byte_size{lowest.count() - 1}, f),
               wisp::infeasible_error);
  EXPECT_EQ(wisp::configure(cost, lowest, f).choice.expert_cap, 8u);
}

TEST(CostModel, BadParametersAreRejected) {
  const auto m = wisp::model_preset("olmoe-1b-7b");
  EXPECT_THROW((cost_model<table_curve, table_curve>{m, {{1.0}}, {{1.0}}, {0.0, 1e-4}}),
               wisp::logic_error);
  EXPECT_THROW((cost_model<table_curve, table_curve>{m, {{1.0}}, {{1.0}}, {1e9, -1.0}}),
               wisp::logic_error);
  EXPECT_THROW((cost_model<table_curve, table_curve>{m, {{1.0}}, {{1.0}}, {NAN, 1e-4}}),
               wisp::logic_error);
}

TEST(CostModel, Equation4) {
  const auto m = wisp::model_preset("olmoe-1b-7b");
  const cost_model<table_curve, table_curve> cost{m, {{100, 50, 10}}, {{7, 3}}, {12582912e3, 1e-3}};
  EXPECT_DOUBLE_EQ(cost.expert_miss_seconds(), 1e-3);
  EXPECT_DOUBLE_EQ(cost.kv_miss_seconds(), 16e-3);
  EXPECT_DOUBLE_EQ(cost.seconds(1, 0), 50 * 1e-3 + 7 * 16e-3);
}

TEST(CostModel, WorkingSetKvCurveIsAStep) {
  const auto c = wisp::working_set_kv_curve(100, 10);
  EXPECT_EQ(c.misses(100), 100u);  // cold only
  EXPECT_EQ(c.misses(1000), 100u);
  EXPECT_EQ(c.misses(99), 1000u);  // below the set: every access misses
  EXPECT_EQ(wisp::working_set_kv_curve(0, 10).misses(0), 0u);
}

TEST(Sweep, ReportsFitFeasibilityAndRejectsCapsOutsideTheRange) {
  const auto m = wisp::model_preset("olmoe-1b-7b");
  const std::vector<std::int32_t> caps{8, 21, 22, 64};
  const auto points = wisp::sweep(m, 8_GiB, {4, 8192}, caps);
  ASSERT_EQ(points.size(), 4u);
  EXPECT_TRUE(points[0].feasible);
  EXPECT_TRUE(points[1].feasible);
  EXPECT_FALSE(points[2].feasible);
  EXPECT_TRUE(points[2].fits);
  EXPECT_FALSE(points[3].fits);
  EXPECT_EQ(points[3].s.kv_blocks, 0u);
  const std::vector<std::int32_t> bad{7};
  EXPECT_THROW((void)wisp::sweep(m, 8_GiB, {}, bad), wisp::logic_error);
}

}  // namespace
