// SPDX-License-Identifier: Apache-2.0
// coactivation_predictor against a brute-force oracle (counts recomputed from every pass), with
// and without forgetting; merging, the binary format and its corruptions, bad arguments.
#include "predict/support.hpp"
#include "support/expect_error.hpp"

#include <wisp/predict/coactivation.hpp>
#include <wisp/predict/detail/weighted_rows.hpp>

#include <gtest/gtest.h>

#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace wisp;
using wisp::test::coactivation_oracle;
using wisp::test::expect_error;
using wisp::test::observe_prefix;
using wisp::test::structured_trace;

constexpr moe_shape small{.layers = 6, .experts = 10, .top_k = 3};

// Every count and conditional, then the score of every (prefix, target), against the oracle.
void expect_matches_oracle(const coactivation_predictor& table, const coactivation_oracle& oracle,
                           const routing_trace& t, std::size_t step, double tolerance) {
  const moe_shape& shape = t.shape();
  ASSERT_NEAR(table.passes(), oracle.passes(), tolerance * oracle.passes());
  for (std::int32_t s = 0; s < shape.layers; ++s) {
    for (std::int32_t i = 0; i < shape.experts; ++i) {
      ASSERT_NEAR(table.marginal(s, i), oracle.marginal(s, i), tolerance * oracle.passes());
      for (std::int32_t u = 0; u < shape.layers; ++u) {
        for (std::int32_t j = 0; j < shape.experts; ++j) {
          ASSERT_NEAR(table.pair(s, i, u, j), oracle.pair(s, i, u, j), tolerance * oracle.passes())
              << s << " " << i << " " << u << " " << j;
        }
      }
    }
  }
  routing_pass pass(shape);
  std::vector<float> scores(static_cast<std::size_t>(shape.experts));
  for (std::int32_t observed = 0; observed < shape.layers; ++observed) {
    observe_prefix(pass, t, step, observed);
    for (std::int32_t target = observed; target < shape.layers; ++target) {
      table.score(pass, target, scores);
      const std::vector<double> expected = oracle.score(pass, target);
      double sum = 0;
      for (std::size_t j = 0; j < scores.size(); ++j) {
        ASSERT_NEAR(scores[j], expected[j], 1e-5)
            << "observed " << observed << " target " << target;
        sum += scores[j];
      }
      if (oracle.passes() > 0) {  // an estimate of P(routed): a layer's scores sum to top_k
        EXPECT_NEAR(sum, shape.top_k, 1e-4);
      }
    }
  }
}

struct oracle_case {
  coactivation_config config;
  std::size_t steps;
};

TEST(Coactivation, MatchesTheBruteForceOracle) {
  const oracle_case cases[] = {
      {{}, 30},
      {{.window = 1, .decay = 1.0f, .max_distance = 1}, 20},
      {{.window = 3, .decay = 0.25f, .max_distance = 2}, 25},
      {{.window = 8, .decay = 0.5f, .max_distance = 8}, 15},
      {{.forgetting = 0.5}, 45},  // 2^45 passes of weight: the 2^32 rescale runs, exactly
      {{.forgetting = 0.9}, 30},
  };
  // 10 experts take the scalar tail of the row sum only; 37 take two 16-wide blocks and a tail,
  // and a window of 9 x 4 experts (36 rows) takes two batches of rows.
  constexpr moe_shape wide{.layers = 12, .experts = 37, .top_k = 4};
  const std::pair<moe_shape, oracle_case> shaped[] = {
      {small, cases[0]},
      {small, cases[1]},
      {small, cases[2]},
      {small, cases[3]},
      {small, cases[4]},
      {small, cases[5]},
      {wide, {{.window = 9, .decay = 0.75f, .max_distance = 2}, 8}},
  };
  for (const auto& [shape, c] : shaped) {
    const routing_trace t = structured_trace(shape, c.steps, 7);
    coactivation_predictor table(shape, c.config);
    coactivation_oracle oracle(shape, c.config);
    routing_pass pass(shape);
    for (std::size_t s = 0; s < c.steps; ++s) {
      if (s % 7 == 0 || s + 1 == c.steps) {
        expect_matches_oracle(table, oracle, t, s, c.config.forgetting < 1 ? 1e-5 : 0.0);
      }
      pass.assign(t, s);
      table.learn(pass);
      oracle.learn(pass);
    }
  }
}

TEST(Coactivation, MergeAddsTheCountsOfBothTables) {
  for (const double forgetting : {1.0, 0.5}) {
    const coactivation_config config{.forgetting = forgetting};
    const routing_trace t = structured_trace(small, 24, 3);
    coactivation_predictor a(small, config), b(small, config);
    coactivation_oracle both(small, config);
    routing_pass pass(small);
    for (std::size_t s = 0; s < 24; ++s) {
      pass.assign(t, s);
      (s < 10 ? a : b).learn(pass);
    }
    a.merge(b);
    // a's passes now weigh as learned (their age in a), b's as in b: rebuild both weightings.
    for (std::int32_t s = 0; s < small.layers; ++s) {
      for (std::int32_t i = 0; i < small.experts; ++i) {
        double expected = 0;
        for (std::size_t p = 0; p < 24; ++p) {
          pass.assign(t, p);
          const auto row = pass.experts(s);
          const bool fired = std::find(row.begin(), row.end(), i) != row.end();
          const double age = p < 10 ? 9.0 - static_cast<double>(p) : 23.0 - static_cast<double>(p);
          expected += fired ? std::pow(forgetting, age) : 0.0;
        }
        ASSERT_NEAR(a.marginal(s, i), expected, 1e-6);
      }
    }
  }
}

TEST(Coactivation, SaveLoadRoundTripsEveryCount) {
  const coactivation_config config{
      .window = 3, .decay = 0.7f, .max_distance = 2, .forgetting = 0.99};
  const routing_trace t = structured_trace(small, 40, 11);
  coactivation_predictor table(small, config);
  routing_pass pass(small);
  for (std::size_t s = 0; s < 40; ++s) {
    pass.assign(t, s);
    table.learn(pass);
  }
  std::stringstream bytes;
  table.save(bytes);
  const coactivation_predictor back = coactivation_predictor::load(bytes);
  EXPECT_EQ(back.shape(), small);
  EXPECT_EQ(back.config(), config);
  EXPECT_EQ(back.passes(), table.passes());
  for (std::int32_t s = 0; s < small.layers; ++s) {
    for (std::int32_t i = 0; i < small.experts; ++i) {
      ASSERT_EQ(back.marginal(s, i), table.marginal(s, i));
      for (std::int32_t j = 0; j < small.experts; ++j) {
        ASSERT_EQ(back.pair(s, i, std::min(s + 1, small.layers - 1), j),
                  table.pair(s, i, std::min(s + 1, small.layers - 1), j));
      }
    }
  }
  std::stringstream again;
  back.save(again);
  EXPECT_EQ(again.str(), bytes.str());
}

TEST(Coactivation, LoadRejectsCorruptTablesAtTheirOffset) {
  coactivation_predictor table(small);
  routing_pass pass(small);
  pass.assign(structured_trace(small, 1, 5), 0);
  table.learn(pass);
  std::stringstream out;
  table.save(out);
  const std::string good = out.str();
  const auto load = [](std::string bytes) {
    std::istringstream in(bytes);
    (void)coactivation_predictor::load(in);
  };
  std::string bad = good;
  bad[0] = 'X';
  expect_error<format_error>([&] { load(bad); }, "at byte 0", "bad magic");
  bad = good;
  bad[8] = 2;  // version
  expect_error<format_error>([&] { load(bad); }, "at byte 8", "unsupported version 2");
  bad = good;
  bad[12] = 0;  // layers = 0
  expect_error<format_error>([&] { load(bad); }, "at byte 12", "layers > 0");
  expect_error<format_error>([&] { load(good.substr(0, 100)); }, "truncated");
  bad = good;
  bad[good.size() - 10] ^= 1;  // a pair count: the checksum catches it
  expect_error<format_error>([&] { load(bad); }, "checksum mismatch");
  bad = good;
  const std::size_t first_marginal = 8 + 4 + 5 * 4 + 4 + 8 + 8 + 8;
  bad[first_marginal + 3] = static_cast<char>(0xff);  // a negative NaN count
  expect_error<format_error>([&] { load(bad); }, "at byte " + std::to_string(first_marginal),
                             "marginal count");
}

TEST(Coactivation, BadArgumentsThrowAndChangeNothing) {
  expect_error([] { coactivation_predictor({0, 4, 2}); }, "layers > 0");
  expect_error([] { coactivation_predictor(small, {.window = 0}); }, "window");
  expect_error([] { coactivation_predictor(small, {.decay = 0.0f}); }, "decay");
  expect_error([] { coactivation_predictor(small, {.forgetting = 1.5}); }, "forgetting");
  coactivation_predictor table(small);
  routing_pass pass(small);
  std::vector<float> scores(static_cast<std::size_t>(small.experts));
  expect_error([&] { table.learn(pass); }, "0 of 6 layers observed");
  observe_prefix(pass, structured_trace(small, 1, 1), 0, 2);
  expect_error([&] { table.score(pass, 1, scores); }, "target layer 1", "observed = 2");
  std::vector<float> short_scores(3);
  expect_error([&] { table.score(pass, 3, short_scores); }, "3 scores for 10 experts");
  routing_pass other({6, 11, 3});
  expect_error([&] { table.score(other, 3, scores); }, "differs");
  coactivation_predictor different(small, {.window = 2});
  expect_error([&] { table.merge(different); }, "different configs", "window 2 vs 4");
  expect_error([&] { (void)table.marginal(6, 0); }, "layer 6");
  EXPECT_EQ(table.passes(), 0.0);
}

// The weighted row sum behind score, for the row counts and widths that take each of its paths:
// within float rounding of a double-precision sum, and the AVX version, where this build has
// one, bit-identical to the portable one.
TEST(Coactivation, WeightedRowSumMatchesADoubleSumAndItsAvxVersionBitForBit) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> value(0.0f, 100.0f);
  for (const std::size_t n : {1u, 15u, 16u, 17u, 64u, 100u}) {
    std::vector<std::vector<float>> table(detail::weighted_rows::capacity, std::vector<float>(n));
    for (auto& row : table) {
      for (float& x : row) {
        x = value(rng);
      }
    }
    for (const std::size_t count : {1u, 2u, 7u, 32u}) {
      detail::weighted_rows terms;
      for (std::size_t r = 0; r < count; ++r) {
        terms.rows[r] = table[r].data();
        terms.scales[r] = value(rng) / 1000.0f;
      }
      terms.count = count;
      for (const bool overwrite : {true, false}) {
        std::vector<float> start(n);
        for (float& x : start) {
          x = value(rng);
        }
        std::vector<float> portable = start;
        detail::add_weighted_rows_portable(portable.data(), terms, n, overwrite);
        for (std::size_t j = 0; j < n; ++j) {
          double expected = overwrite ? 0.0 : start[j];
          for (std::size_t r = 0; r < count; ++r) {
            expected += static_cast<double>(terms.scales[r]) * table[r][j];
          }
          ASSERT_NEAR(portable[j], expected, 1e-5 * expected) << n << " " << count << " " << j;
        }
        std::vector<float> dispatched = start;
        detail::add_weighted_rows(dispatched.data(), terms, n, overwrite);
        ASSERT_EQ(dispatched, portable) << n << " " << count;
#if WISP_DETAIL_AVX_DISPATCH
        if (detail::cpu_has_avx()) {
          std::vector<float> avx = start;
          detail::add_weighted_rows_avx(avx.data(), terms, n, overwrite);
          ASSERT_EQ(avx, portable) << n << " " << count;  // exact float equality, lane by lane
        }
#endif
      }
    }
  }
}

TEST(RoutingPass, ObservesLayersInOrderOnly) {
  routing_pass pass(small);
  const std::vector<std::int32_t> ids{1, 2, 3};
  expect_error([&] { pass.observe(1, ids); }, "layer 1 given but the next layer of the pass is 0");
  expect_error([&] { pass.observe(0, std::vector<std::int32_t>{1, 2}); }, "2 ids", "top_k is 3");
  expect_error([&] { pass.observe(0, std::vector<std::int32_t>{1, 2, 10}); }, "= 10");
  EXPECT_EQ(pass.observed(), 0);
  pass.observe(0, ids);
  EXPECT_EQ(pass.observed(), 1);
  EXPECT_EQ(std::vector<std::int32_t>(pass.experts(0).begin(), pass.experts(0).end()), ids);
}

}  // namespace
