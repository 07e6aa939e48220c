// SPDX-License-Identifier: Apache-2.0
// Token and expert splits: tiling, fit, reported experts, minimality of the token split against a
// brute-force DP over all contiguous partitions, the expert split's partition and group count,
// errors, and preparing every group through a pager.
#include "support/expect_error.hpp"

#include <wisp/cache/lru.hpp>
#include <wisp/pager/group_planner.hpp>
#include <wisp/pager/host_expert_store.hpp>
#include <wisp/pager/pager.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace wisp {
namespace {

std::set<std::int32_t> union_of(const std::vector<std::int32_t>& ids, std::int32_t k,
                                std::int32_t begin, std::int32_t end) {
  return {ids.begin() + begin * k, ids.begin() + end * k};
}

// Fewest contiguous groups whose unions fit, by DP over every split point: O(T^2 k log).
std::int32_t brute_force_min_groups(const std::vector<std::int32_t>& ids, std::int32_t tokens,
                                    std::int32_t k, std::int32_t cap) {
  constexpr std::int32_t inf = std::numeric_limits<std::int32_t>::max() / 2;
  std::vector<std::int32_t> best(static_cast<std::size_t>(tokens) + 1, inf);
  best[0] = 0;
  for (std::int32_t j = 1; j <= tokens; ++j) {
    for (std::int32_t i = 0; i < j; ++i) {
      if (best[static_cast<std::size_t>(i)] < inf &&
          static_cast<std::int32_t>(union_of(ids, k, i, j).size()) <= cap) {
        best[static_cast<std::size_t>(j)] =
            std::min(best[static_cast<std::size_t>(j)], best[static_cast<std::size_t>(i)] + 1);
      }
    }
  }
  return best[static_cast<std::size_t>(tokens)];
}

std::vector<std::int32_t> random_batch(std::mt19937& rng, std::int32_t tokens, std::int32_t k,
                                       std::int32_t experts) {
  std::vector<std::int32_t> ids;
  std::uniform_int_distribution<std::int32_t> pick(0, experts - 1);
  for (std::int32_t t = 0; t < tokens; ++t) {
    std::vector<std::int32_t> row;
    while (static_cast<std::int32_t>(row.size()) < k) {  // distinct per row, like a router
      const std::int32_t e = pick(rng);
      if (std::find(row.begin(), row.end(), e) == row.end()) {
        row.push_back(e);
      }
    }
    ids.insert(ids.end(), row.begin(), row.end());
  }
  return ids;
}

TEST(token_groups, tile_fit_report_sorted_unique_and_are_minimal) {
  std::mt19937 rng(7);
  group_planner planner(16, 4, 2);  // deliberately small: larger batches grow the buffers
  for (std::int32_t trial = 0; trial < 400; ++trial) {
    const std::int32_t k = 1 + trial % 4;
    const std::int32_t experts = std::max(k, 4 + trial % 13);
    const std::int32_t cap = k + static_cast<std::int32_t>(rng() % 6);
    const std::int32_t tokens = static_cast<std::int32_t>(rng() % 25);
    const std::vector<std::int32_t> ids = random_batch(rng, tokens, k, std::min(experts, 16));
    const auto groups = planner.plan_token_groups(ids, tokens, k, cap);
    std::int32_t row = 0;
    for (const token_group& g : groups) {
      ASSERT_EQ(g.row_begin, row);
      ASSERT_GT(g.row_end, g.row_begin);
      row = g.row_end;
      const std::set<std::int32_t> u = union_of(ids, k, g.row_begin, g.row_end);
      EXPECT_LE(static_cast<std::int32_t>(u.size()), cap);
      EXPECT_EQ(std::vector<std::int32_t>(g.experts.begin(), g.experts.end()),
                std::vector<std::int32_t>(u.begin(), u.end()));
    }
    EXPECT_EQ(row, tokens);
    EXPECT_EQ(static_cast<std::int32_t>(groups.size()), brute_force_min_groups(ids, tokens, k, cap))
        << "trial " << trial << ": greedy is not minimal";
  }
}

TEST(token_groups, empty_batch_gives_no_groups) {
  group_planner planner(8);
  EXPECT_TRUE(planner.plan_token_groups(std::span<const std::int32_t>{}, 0, 4, 4).empty());
  EXPECT_TRUE(planner.plan_expert_groups(std::span<const std::int64_t>{}, 0, 4, 4).empty());
}

TEST(token_groups, capacity_equal_to_k_gives_one_group_per_distinct_row_set) {
  group_planner planner(8);
  const std::vector<std::int64_t> ids = {0, 1, 1, 0, 2, 3, 3, 2, 0, 1};  // 5 x 2
  const auto groups = planner.plan_token_groups(ids, 5, 2, 2);
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].rows(), 2);
  EXPECT_EQ(groups[1].rows(), 2);
  EXPECT_EQ(groups[2].rows(), 1);
}

TEST(token_groups, single_row_over_capacity_names_both_numbers_and_keeps_the_previous_plan) {
  group_planner planner(8);
  const std::vector<std::int32_t> ok = {0, 1, 2, 3};
  const auto plan = planner.plan_token_groups(ok, 2, 2, 2);
  ASSERT_EQ(plan.size(), 2u);
  const std::vector<std::int32_t> wide = {0, 1, 2, 3, 4, 4};  // row 1 routes to 2 distinct, fine
  const std::vector<std::int32_t> too_wide = {0, 0, 0, 1, 2, 3};  // 2 x 3: row 1 has 3 > 2
  EXPECT_EQ(planner.plan_token_groups(wide, 3, 2, 2).size(), 3u);
  const auto again = planner.plan_token_groups(ok, 2, 2, 2);
  wisp::test::expect_error([&] { (void)planner.plan_token_groups(too_wide, 2, 3, 2); },
                           "one token (row 1) routes to 3 experts but capacity is 2");
  EXPECT_EQ(again[0].experts[0], 0);  // previous plan still valid
  EXPECT_EQ(again[1].experts[1], 3);
}

TEST(token_groups, bad_input_is_rejected) {
  group_planner planner(8);
  const std::vector<std::int32_t> ids = {0, 1, 2, 8};
  EXPECT_THROW((void)planner.plan_token_groups(ids, 2, 2, 4), logic_error);  // id 8 >= E
  EXPECT_THROW((void)planner.plan_token_groups(ids, 3, 2, 4), logic_error);  // 4 != 3 * 2
  EXPECT_THROW((void)planner.plan_token_groups(ids, 2, 2, 0), logic_error);  // capacity 0
  const std::vector<std::int64_t> negative = {0, -1};
  EXPECT_THROW((void)planner.plan_expert_groups(negative, 1, 2, 4), logic_error);
  EXPECT_THROW(group_planner(0), logic_error);
}

TEST(expert_groups, partition_the_union_with_the_minimum_count_independent_of_tokens) {
  std::mt19937 rng(11);
  group_planner planner(32);
  for (std::int32_t trial = 0; trial < 200; ++trial) {
    const std::int32_t k = 1 + trial % 8;
    const std::int32_t cap = k + static_cast<std::int32_t>(rng() % 8);
    const std::int32_t tokens = 1 + static_cast<std::int32_t>(rng() % 64);
    const std::vector<std::int32_t> ids = random_batch(rng, tokens, k, 32);
    const std::set<std::int32_t> u(ids.begin(), ids.end());
    const auto groups = planner.plan_expert_groups(ids, tokens, k, cap);
    std::multiset<std::int32_t> seen;
    for (const expert_group& g : groups) {
      EXPECT_LE(static_cast<std::int32_t>(g.experts.size()), cap);
      EXPECT_TRUE(std::is_sorted(g.experts.begin(), g.experts.end()));
      seen.insert(g.experts.begin(), g.experts.end());
    }
    EXPECT_EQ(seen, std::multiset<std::int32_t>(u.begin(), u.end()));  // a partition
    const std::size_t expected =
        (u.size() + static_cast<std::size_t>(cap) - 1) / static_cast<std::size_t>(cap);
    EXPECT_EQ(groups.size(), expected);
    // The same union spread over 10x the tokens: same groups.
    std::vector<std::int32_t> repeated;
    for (int r = 0; r < 10; ++r) {
      repeated.insert(repeated.end(), ids.begin(), ids.end());
    }
    EXPECT_EQ(planner.plan_expert_groups(repeated, tokens * 10, k, cap).size(), expected);
  }
}

TEST(expert_groups, resident_experts_come_first_so_each_is_fetched_at_most_once) {
  pager<lru> p(pager_config{.layers = 1, .experts = 16, .top_k = 2, .capacity = 4});
  const std::vector<std::int32_t> warm = {9, 12, 13, 15};
  (void)p.prepare(0, warm, 2, 2);
  const std::vector<std::int32_t> ids = {0, 1, 2, 3, 9, 12, 13, 15, 4, 5};  // union of 10
  const auto groups = p.plan_expert_groups(0, ids, 5, 2);
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(std::vector<std::int32_t>(groups[0].experts.begin(), groups[0].experts.end()),
            (std::vector<std::int32_t>{9, 12, 13, 15}));
  std::int32_t misses = 0;
  for (const expert_group& g : groups) {
    misses += p.prepare(0, g).misses;
  }
  EXPECT_EQ(misses, 6);  // only the 6 non-resident experts are fetched, each once
}

// The token split through a pager: every group's map shows exactly its experts with correct
// bytes, and every (token, j) pair is served by exactly one group.
TEST(token_groups, every_group_prepares_and_serves_its_rows) {
  std::mt19937 rng(3);
  pager<lru> p(
      pager_config{.layers = 2, .experts = 24, .top_k = 4, .capacity = 6, .max_tokens = 8});
  host_expert_store store(2 * 24, 2 * 6, 32);
  store.fill_pattern(5);
  for (std::int32_t trial = 0; trial < 50; ++trial) {
    const std::int32_t layer = trial % 2;
    const std::int32_t tokens = 1 + static_cast<std::int32_t>(rng() % 40);
    const std::vector<std::int32_t> ids = random_batch(rng, tokens, 4, 24);
    std::vector<std::int32_t> served(ids.size(), 0);
    for (const token_group& g : p.plan_token_groups(layer, ids, tokens, 4)) {
      const prepare_result r = p.prepare(layer, g);
      std::vector<copy_op> plan;
      for (const copy_op& op : r.copy_plan) {
        plan.push_back({layer * 24 + op.expert, layer * 6 + op.slot});
      }
      store.apply(plan);
      for (std::int32_t t = g.row_begin; t < g.row_end; ++t) {
        for (std::int32_t j = 0; j < 4; ++j) {
          const std::int32_t e = ids[static_cast<std::size_t>(t * 4 + j)];
          const std::int32_t slot = r.expert_map[static_cast<std::size_t>(e)];
          ASSERT_GE(slot, 0);
          EXPECT_TRUE(store.slot_holds(layer * 6 + slot, layer * 24 + e));
          ++served[static_cast<std::size_t>(t * 4 + j)];
        }
      }
      std::int32_t visible = 0;
      for (const std::int32_t s : r.expert_map) {
        visible += s >= 0 ? 1 : 0;
      }
      EXPECT_EQ(visible, static_cast<std::int32_t>(g.experts.size()));
    }
    EXPECT_EQ(served, std::vector<std::int32_t>(ids.size(), 1));
  }
}

}  // namespace
}  // namespace wisp
