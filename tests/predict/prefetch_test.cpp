// SPDX-License-Identifier: Apache-2.0
// Prefetch policies and the prefetch queue, against their definitions and a std::deque oracle.
#include "support/enum_names.hpp"
#include "support/expect_error.hpp"

#include <wisp/predict/prefetch.hpp>
#include <wisp/predict/right_size.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <optional>
#include <random>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using namespace wisp;
using wisp::test::expect_error;

TEST(PrefetchPolicy, TopKWithOverfetchTakesTheCeilOfKTimesM) {
  const std::vector<float> scores{0.1f, 0.9f, 0.3f, 0.8f, 0.0f, 0.5f, 0.7f, 0.2f};
  std::vector<std::int32_t> scratch, out;
  const prefetch_config one{.rule = prefetch_rule::top_k};
  EXPECT_EQ(choose_prefetch(scores, 2, one, scratch, out), 2u);
  EXPECT_EQ(out, (std::vector<std::int32_t>{1, 3}));
  out.clear();
  const prefetch_config more{.rule = prefetch_rule::top_k, .overfetch = 1.5};
  EXPECT_EQ(choose_prefetch(scores, 3, more, scratch, out), 5u);  // ceil(4.5)
  EXPECT_EQ(out, (std::vector<std::int32_t>{1, 3, 6, 5, 2}));
  out.clear();
  const prefetch_config all{.rule = prefetch_rule::top_k, .overfetch = 10};
  EXPECT_EQ(choose_prefetch(scores, 3, all, scratch, out), scores.size());
  out.clear();
  EXPECT_EQ(choose_prefetch(scores, 3, {}, scratch, out), 0u);  // rule none
  const prefetch_config percentile{.rule = prefetch_rule::percentile, .percentile = 75.0};
  EXPECT_EQ(choose_prefetch(scores, 3, percentile, scratch, out), 2u);  // above 0.7
  EXPECT_EQ(out, (std::vector<std::int32_t>{1, 3}));
  expect_error([&] { choose_prefetch(scores, 3, {.overfetch = -1}, scratch, out); }, "overfetch");
  expect_error([&] { choose_prefetch(scores, 0, one, scratch, out); }, "top_k must be >= 1");
}

TEST(PrefetchQueue, MatchesADequeOracle) {
  std::mt19937 rng(21);
  const std::int32_t layers = 5, experts = 6;
  prefetch_queue queue(layers, experts);
  std::deque<prefetch_request> oracle;
  std::uint32_t step = 0;
  for (int op = 0; op < 5000; ++op) {
    switch (rng() % 4) {
      case 0:
      case 1: {
        const auto layer = static_cast<std::int32_t>(rng() % layers);
        std::vector<std::int32_t> batch(rng() % 4);
        for (std::int32_t& e : batch) {
          e = static_cast<std::int32_t>(rng() % experts);
        }
        std::size_t added = 0;
        for (const std::int32_t e : batch) {
          const bool queued = std::any_of(
              oracle.begin(), oracle.end(),
              [&](const prefetch_request& r) { return r.layer == layer && r.expert == e; });
          if (!queued) {
            oracle.push_back({step, layer, e});
            ++added;
          }
        }
        ASSERT_EQ(queue.submit(step, layer, batch), added);
        break;
      }
      case 2:
        if (!oracle.empty()) {
          ASSERT_EQ(queue.front(), oracle.front());
          queue.pop();
          oracle.pop_front();
        }
        break;
      default: {
        step += rng() % 2;
        const auto layer = static_cast<std::int32_t>(rng() % layers);
        const auto before = oracle.size();
        std::erase_if(oracle, [&](const prefetch_request& r) {
          return r.step < step || (r.step == step && r.layer <= layer);
        });
        ASSERT_EQ(queue.cancel_passed(step, layer), before - oracle.size());
        break;
      }
    }
    ASSERT_EQ(queue.size(), oracle.size());
  }
  const std::vector<std::int32_t> bad{0, 6};
  expect_error([&] { queue.submit(0, 1, bad); }, "expert 6");
  expect_error([&] { queue.submit(0, 5, {}); }, "layer 5");
}

TEST(PrefetchRule, NamesBothWays) {
  wisp::test::expect_names<wisp::prefetch_rule>({{wisp::prefetch_rule::none, "none"},
                                                 {wisp::prefetch_rule::top_k, "top-k"},
                                                 {wisp::prefetch_rule::percentile, "percentile"}});
  EXPECT_EQ(wisp::from_string<wisp::prefetch_rule>("top_k"), std::nullopt);
  wisp::test::expect_names<wisp::right_size_model>(
      {{wisp::right_size_model::lru, "lru"}, {wisp::right_size_model::static_top, "static"}});
}

}  // namespace
