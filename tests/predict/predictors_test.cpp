// SPDX-License-Identifier: Apache-2.0
// The routing_predictor concept (models and anti-models), the selections, the baselines, the
// per-user blend, online evaluation against a brute-force evaluation, right-sizing against its
// definition and an LRU simulation, and the precision target on the real ESFT trace.
#include "predict/support.hpp"
#include "support/expect_error.hpp"

#include <wisp/cache/lru.hpp>
#include <wisp/cache/slot_cache.hpp>
#include <wisp/predict/baselines.hpp>
#include <wisp/predict/coactivation.hpp>
#include <wisp/predict/evaluate.hpp>
#include <wisp/predict/personal.hpp>
#include <wisp/predict/right_size.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <vector>

namespace {

using namespace wisp;
using wisp::test::expect_error;
using wisp::test::observe_prefix;
using wisp::test::structured_trace;

constexpr moe_shape small{.layers = 5, .experts = 12, .top_k = 2};

// ------------------------------------------------------------------ concept

static_assert(routing_predictor<coactivation_predictor>);
static_assert(routing_predictor<frequency_predictor>);
static_assert(routing_predictor<previous_token_predictor>);
static_assert(routing_predictor<personal_predictor::user_predictor>);

/// A user-written predictor: always the lowest ids.
struct lowest_ids {
  void score(const routing_pass&, std::int32_t, std::span<float> scores) const {
    for (std::size_t j = 0; j < scores.size(); ++j) {
      scores[j] = -static_cast<float>(j);
    }
  }
  void learn(const routing_pass&) {}
};
static_assert(routing_predictor<lowest_ids>);

struct cannot_learn {
  void score(const routing_pass&, std::int32_t, std::span<float>) const {}
};
static_assert(!routing_predictor<cannot_learn>);
struct scores_only_when_mutable {
  void score(const routing_pass&, std::int32_t, std::span<float>) {}
  void learn(const routing_pass&) {}
};
static_assert(!routing_predictor<scores_only_when_mutable>);
struct returns_scores {
  std::vector<float> score(const routing_pass&, std::int32_t, std::span<float>) const;
  void learn(const routing_pass&);
};
static_assert(!routing_predictor<returns_scores>);

// ------------------------------------------------------------------ selections

TEST(Selection, TopKMatchesAStableSortOracle) {
  std::mt19937 rng(4);
  for (int round = 0; round < 300; ++round) {
    std::vector<float> scores(1 + rng() % 40);
    for (float& s : scores) {
      s = static_cast<float>(rng() % 7);  // many ties
    }
    std::vector<std::int32_t> order(scores.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
      return scores[static_cast<std::size_t>(a)] > scores[static_cast<std::size_t>(b)];
    });
    std::vector<std::int32_t> best(rng() % (scores.size() + 1));
    select_top_k(scores, best);
    ASSERT_TRUE(std::equal(best.begin(), best.end(), order.begin()));
  }
  std::vector<std::int32_t> too_many(5);
  expect_error([&] { select_top_k(std::vector<float>(4), too_many); }, "k = 5");
}

TEST(Selection, AbovePercentileMatchesItsDefinition) {
  std::mt19937 rng(9);
  std::vector<std::int32_t> scratch, out;
  for (int round = 0; round < 300; ++round) {
    std::vector<float> scores(1 + rng() % 30);
    for (float& s : scores) {
      s = static_cast<float>(rng() % 10);
    }
    const double p = static_cast<double>(rng() % 101);
    const std::size_t limit = 1 + rng() % 20;
    std::vector<float> sorted = scores;
    std::sort(sorted.begin(), sorted.end());
    const std::size_t rank = std::max<std::size_t>(
        1, static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(scores.size()))));
    const float threshold = sorted[rank - 1];
    std::size_t above = 0;
    for (const float s : scores) {
      above += s > threshold ? 1 : 0;
    }
    out.clear();
    const std::size_t n = select_above_percentile(scores, p, limit, scratch, out);
    ASSERT_EQ(n, std::min(above, limit));
    ASSERT_EQ(out.size(), n);
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_GT(scores[static_cast<std::size_t>(out[i])], threshold);
      if (i > 0) {
        ASSERT_GE(scores[static_cast<std::size_t>(out[i - 1])],
                  scores[static_cast<std::size_t>(out[i])]);
      }
    }
  }
  expect_error([&] { select_above_percentile(std::vector<float>(3), 101, 2, scratch, out); },
               "percentile must be in [0, 100], got 101");
}

// ------------------------------------------------------------------ baselines and blend

TEST(Baselines, FrequencyAndPreviousTokenFollowTheirDefinitions) {
  const routing_trace t = structured_trace(small, 30, 2);
  frequency_predictor freq(small);
  previous_token_predictor previous(small);
  routing_pass pass(small);
  std::vector<float> scores(static_cast<std::size_t>(small.experts));
  std::vector<double> counts(static_cast<std::size_t>(small.layers * small.experts), 0.0);
  for (std::size_t s = 0; s < t.steps(); ++s) {
    observe_prefix(pass, t, s, 1);
    for (std::int32_t target = 1; target < small.layers; ++target) {
      freq.score(pass, target, scores);
      for (std::int32_t j = 0; j < small.experts; ++j) {
        const double expected =
            s == 0 ? 0.0 : counts[static_cast<std::size_t>(target * small.experts + j)] / s;
        ASSERT_NEAR(scores[static_cast<std::size_t>(j)], expected, 1e-6);
      }
      previous.score(pass, target, scores);
      for (std::int32_t j = 0; j < small.experts; ++j) {
        bool routed = false;
        for (std::int32_t r = 0; s > 0 && r < small.top_k; ++r) {
          routed |= t.expert(s - 1, target, r) == j;
        }
        ASSERT_EQ(scores[static_cast<std::size_t>(j)], routed ? 1.0f : 0.0f);
      }
    }
    pass.assign(t, s);
    freq.learn(pass);
    previous.learn(pass);
    for (std::int32_t l = 0; l < small.layers; ++l) {
      for (std::int32_t r = 0; r < small.top_k; ++r) {
        counts[static_cast<std::size_t>(l * small.experts + t.expert(s, l, r))] += 1;
      }
    }
  }
  expect_error([&] { freq.learn(routing_pass(small)); }, "0 of 5 layers observed");
}

TEST(Personal, BlendsTheUserTableByItsEvidence) {
  const routing_trace t = structured_trace(small, 20, 6);
  personal_predictor tables(small, {}, /*prior_passes=*/4.0);
  const std::size_t alice = tables.add_user();
  const std::size_t bob = tables.add_user();
  routing_pass pass(small);
  for (std::size_t s = 0; s < 12; ++s) {
    pass.assign(t, s);
    tables.user(s < 6 ? alice : bob).learn(pass);
  }
  EXPECT_DOUBLE_EQ(tables.population().passes(), 12.0);
  EXPECT_DOUBLE_EQ(tables.user_weight(alice), 6.0 / 10.0);
  observe_prefix(pass, t, 15, 2);
  std::vector<float> blended(12), user(12), population(12);
  tables.user(alice).score(pass, 3, blended);
  tables.table(alice).score(pass, 3, user);
  tables.population().score(pass, 3, population);
  for (std::size_t j = 0; j < blended.size(); ++j) {
    EXPECT_NEAR(blended[j], 0.6f * user[j] + 0.4f * population[j], 1e-6);
  }
  expect_error([&] { (void)tables.user(2); }, "user 2 is unknown (2 users)");
  expect_error([&] { tables.add_user(coactivation_predictor({5, 13, 2})); }, "differs");
}

// ------------------------------------------------------------------ online evaluation

TEST(Evaluate, MatchesABruteForceEvaluation) {
  const routing_trace t = structured_trace(small, 25, 8);
  const std::vector<std::int32_t> distances{1, 3};
  const std::vector<std::int32_t> ks{2, 4};
  coactivation_predictor table(small);
  const auto got = evaluate_online(t, table, distances, ks);
  ASSERT_EQ(got.size(), 4u);
  // Oracle: a fresh table, every (step, target, distance) predicted from scratch buffers.
  coactivation_predictor fresh(small);
  routing_pass pass(small);
  std::vector<float> scores(12);
  std::vector<std::uint64_t> hits(4, 0), predictions(4, 0);
  for (std::size_t s = 0; s < t.steps(); ++s) {
    for (std::size_t di = 0; di < distances.size(); ++di) {
      for (std::int32_t target = distances[di]; target < small.layers; ++target) {
        observe_prefix(pass, t, s, target - distances[di] + 1);
        fresh.score(pass, target, scores);
        std::vector<std::int32_t> order(12);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
          return scores[static_cast<std::size_t>(a)] > scores[static_cast<std::size_t>(b)];
        });
        for (std::size_t ki = 0; ki < ks.size(); ++ki) {
          ++predictions[di * 2 + ki];
          for (std::int32_t r = 0; r < ks[ki]; ++r) {
            for (std::int32_t j = 0; j < small.top_k; ++j) {
              hits[di * 2 + ki] += order[static_cast<std::size_t>(r)] == t.expert(s, target, j);
            }
          }
        }
      }
    }
    pass.assign(t, s);
    fresh.learn(pass);
  }
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(got[i].distance, distances[i / 2]);
    EXPECT_EQ(got[i].k, ks[i % 2]);
    EXPECT_EQ(got[i].predictions, predictions[i]);
    EXPECT_EQ(got[i].hits, hits[i]);
    EXPECT_DOUBLE_EQ(got[i].precision, static_cast<double>(hits[i]) /
                                           (static_cast<double>(predictions[i]) * ks[i % 2]));
    EXPECT_DOUBLE_EQ(got[i].recall, static_cast<double>(hits[i]) /
                                        (static_cast<double>(predictions[i]) * small.top_k));
  }
  const std::vector<std::int32_t> bad{5};
  expect_error([&] { evaluate_online(t, table, bad, ks); }, "distance 5", "layers - 1 = 4");
}

// The target on the real trace: next-layer precision@6 >= 0.60 online, >= 2x frequency.
// A prefix keeps the Debug/sanitizer run short; `wisp predict` reports the whole trace.
TEST(Evaluate, EsftCoactivationPrecisionBeatsTheBaselines) {
  const auto esft = wisp::test::esft_trace();
  WISP_TEST_NEEDS_TRACE(esft.has_value());
  routing_trace prefix(esft->shape());
  std::vector<std::int32_t> ids(esft->shape().ids_per_step());
  for (std::size_t s = 0; s < 2000; ++s) {
    for (std::size_t i = 0; i < ids.size(); ++i) {
      ids[i] = esft->expert(s, static_cast<std::int32_t>(i) / esft->shape().top_k,
                            static_cast<std::int32_t>(i) % esft->shape().top_k);
    }
    prefix.append_step(ids);
  }
  const std::vector<std::int32_t> next{1}, six{6};
  coactivation_predictor table(prefix.shape());
  frequency_predictor freq(prefix.shape());
  const double coactivation = evaluate_online(prefix, table, next, six)[0].precision;
  const double frequency = evaluate_online(prefix, freq, next, six)[0].precision;
  EXPECT_GE(coactivation, 0.60);
  EXPECT_GE(coactivation, 2.0 * frequency);
}

// ------------------------------------------------------------------ right-sizing

TEST(RightSize, StaticModelIsTheSmallestCapCoveringTheMass) {
  const routing_trace t = structured_trace(small, 40, 12);
  coactivation_predictor table(small);
  routing_pass pass(small);
  for (std::size_t s = 0; s < t.steps(); ++s) {
    pass.assign(t, s);
    table.learn(pass);
  }
  for (const double target : {0.0, 0.05, 0.2, 0.5, 1.0}) {
    const right_size_result r = right_size(table, target, right_size_model::static_top);
    for (std::int32_t l = 0; l < small.layers; ++l) {
      // Oracle: for every cap, the mass of its best set by brute force over the sorted counts.
      std::vector<double> m;
      for (std::int32_t j = 0; j < small.experts; ++j) {
        m.push_back(table.marginal(l, j) / table.passes());
      }
      std::sort(m.rbegin(), m.rend());
      std::int32_t expected = small.experts;
      for (std::int32_t c = small.experts; c >= small.top_k; --c) {
        const double covered = std::accumulate(m.begin(), m.begin() + c, 0.0);
        if (1.0 - covered / small.top_k <= target + 1e-12) {
          expected = c;
        }
      }
      EXPECT_EQ(r.layer_caps[static_cast<std::size_t>(l)], expected) << "target " << target;
    }
    EXPECT_EQ(r.slots(), std::accumulate(r.layer_caps.begin(), r.layer_caps.end(), 0ll));
    EXPECT_EQ(r.max_cap(), *std::max_element(r.layer_caps.begin(), r.layer_caps.end()));
  }
  const right_size_result empty = right_size(coactivation_predictor(small), 0.1);
  EXPECT_EQ(empty.layer_caps, std::vector<std::int32_t>(5, 12));
  expect_error([&] { (void)right_size(table, 1.5); }, "got 1.5");
}

// Che's approximation against an LRU cache fed independent references with the same
// probabilities: the LRU model's caps must keep the simulated miss ratio near the target.
TEST(RightSize, LruModelPredictsAnIndependentReferenceLruCache) {
  const moe_shape one{.layers = 1, .experts = 64, .top_k = 1};
  std::mt19937_64 rng(5);
  std::vector<double> weights(64);
  for (std::size_t j = 0; j < weights.size(); ++j) {
    weights[j] = 1.0 / std::pow(static_cast<double>(j + 1), 0.9);
  }
  std::discrete_distribution<std::int32_t> pick(weights.begin(), weights.end());
  coactivation_predictor table(one);
  routing_pass pass(one);
  std::vector<std::int32_t> stream(200000);
  for (std::int32_t& e : stream) {
    e = pick(rng);
    pass.clear();
    pass.observe(0, std::vector<std::int32_t>{e});
    table.learn(pass);
  }
  for (const double target : {0.1, 0.3, 0.5}) {
    const std::int32_t cap = right_size(table, target).layer_caps[0];
    slot_cache<lru> cache(64, cap);
    std::uint64_t misses = 0;
    for (std::size_t i = 0; i < stream.size(); ++i) {
      misses += cache.access(stream[i], {static_cast<std::uint32_t>(i), 0, i}).hit ? 0 : 1;
    }
    const double measured = static_cast<double>(misses) / static_cast<double>(stream.size());
    EXPECT_NEAR(measured, target, 0.03) << "cap " << cap;
  }
}

}  // namespace
