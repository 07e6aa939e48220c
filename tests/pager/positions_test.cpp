// SPDX-License-Identifier: Apache-2.0
// Token positions given to pager::prepare reach the policy's access_context::position: one per
// call, or one per row (each distinct expert gets its first row's), in both scopes and for both
// id types; a wrong count is refused with nothing changed; a whole-call policy (lru) serves the
// same victims with or without positions.
#include "support/expect_error.hpp"

#include <wisp/cache/learned_belady.hpp>
#include <wisp/cache/lru.hpp>
#include <wisp/pager/pager.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

namespace wisp {
namespace {

using test::expect_error;

/// LRU that remembers the position of every key's last access (per-access events only).
class position_recorder {
 public:
  void reset(const key_layout& layout) {
    order_.reset(layout.size(), 1);
    seen_.clear();
  }
  void on_insert(cache_key key, const access_context& ctx) {
    order_.push_back(0, key);
    seen_[key] = ctx.position;
  }
  void on_hit(cache_key key, const access_context& ctx) {
    order_.move_to_back(0, key);
    seen_[key] = ctx.position;
  }
  void on_erase(cache_key key) { order_.remove(key); }
  cache_key victim(const access_context& /*ctx*/, protected_keys is_protected) const {
    return order_.first_unprotected(0, is_protected);
  }
  std::map<cache_key, std::uint32_t> seen_;

 private:
  detail::key_lists order_;
};
static_assert(eviction_policy<position_recorder>);

const std::map<cache_key, std::uint32_t>& seen(const pager<position_recorder>& p,
                                               std::int32_t layer) {
  return p.cache(layer).policy().seen_;
}

TEST(PagerPositions, ReachThePolicyPerCallAndPerRow) {
  for (const cache_scope scope : {cache_scope::per_layer, cache_scope::global}) {
    pager<position_recorder> p(
        {.layers = 2, .experts = 8, .top_k = 2, .capacity = 6, .scope = scope});
    const cache_key base = scope == cache_scope::global ? 8 : 0;  // layer 1's keys
    const std::vector<std::int32_t> ids = {3, 5, 5, 7, 2, 3};     // 3 rows x 2
    p.prepare(1, ids, 3, 2);
    for (const cache_key e : {3, 5, 7, 2}) {
      EXPECT_EQ(seen(p, 1).at(base + e), 0u) << "no positions: 0";
    }
    const std::vector<std::uint32_t> one = {41};
    p.prepare(1, ids, 3, 2, one);
    for (const cache_key e : {3, 5, 7, 2}) {
      EXPECT_EQ(seen(p, 1).at(base + e), 41u) << "one position for the whole call";
    }
    const std::vector<std::uint32_t> rows = {10, 20, 30};
    const prepare_result r = p.prepare(1, ids, 3, 2, rows);
    // Each distinct expert carries its first row's position.
    EXPECT_EQ(seen(p, 1).at(base + 3), 10u);
    EXPECT_EQ(seen(p, 1).at(base + 5), 10u);
    EXPECT_EQ(seen(p, 1).at(base + 7), 20u);
    EXPECT_EQ(seen(p, 1).at(base + 2), 30u);
    EXPECT_EQ(std::vector<std::int32_t>(r.experts.begin(), r.experts.end()),
              (std::vector<std::int32_t>{3, 5, 7, 2}));
    EXPECT_EQ(r.hits, 4);
    const std::vector<std::int64_t> wide = {1, 4};
    p.prepare(0, wide, 1, 2, one);
    const cache_key base0 = 0;
    EXPECT_EQ(seen(p, 0).at(base0 + 1), 41u);
    EXPECT_EQ(seen(p, 0).at(base0 + 4), 41u);
  }
}

TEST(PagerPositions, AWrongCountIsRefusedAndChangesNothing) {
  pager<position_recorder> p({.layers = 1, .experts = 8, .top_k = 2, .capacity = 4});
  const std::vector<std::int32_t> ids = {3, 5, 6, 7};
  p.prepare(0, ids, 2, 2);
  const std::vector<std::int32_t> map_before(p.expert_map(0).begin(), p.expert_map(0).end());
  const cache_stats stats_before = p.stats();
  const std::vector<std::uint32_t> three = {1, 2, 3};
  expect_error(
      [&] {
        p.prepare(0, std::vector<std::int32_t>{1, 2, 3, 4}, 2, 2, three);
      },
      "3 positions given for 2 rows");
  EXPECT_EQ(std::vector<std::int32_t>(p.expert_map(0).begin(), p.expert_map(0).end()), map_before);
  EXPECT_EQ(p.stats(), stats_before);
}

// lru takes each call whole; positions change nothing in it (it ignores them) and per-row
// positions take the deduplicating path: the same misses and copy plans either way.
template <class Policy>
void same_plans_with_positions() {
  std::mt19937_64 rng(8);
  const pager_config config{.layers = 3, .experts = 16, .top_k = 3, .capacity = 8};
  pager<Policy> plain(config);
  pager<Policy> positioned(config);
  for (std::uint32_t step = 0; step < 200; ++step) {
    plain.begin_step();
    positioned.begin_step();
    for (std::int32_t layer = 0; layer < 3; ++layer) {
      std::vector<std::int32_t> ids;
      for (int i = 0; i < 6; ++i) {
        ids.push_back(static_cast<std::int32_t>(rng() % 16));
      }
      const std::vector<std::uint32_t> rows = {step, step + 1};
      std::vector<std::int32_t> distinct;
      for (const std::int32_t id : ids) {
        if (std::find(distinct.begin(), distinct.end(), id) == distinct.end()) {
          distinct.push_back(id);
        }
      }
      if (distinct.size() > 8) {
        continue;
      }
      const prepare_result a = plain.prepare(layer, ids, 2, 3);
      const prepare_result b = positioned.prepare(layer, ids, 2, 3, rows);
      ASSERT_EQ(a.misses, b.misses);
      for (std::size_t i = 0; i < a.copy_plan.size(); ++i) {
        ASSERT_EQ(a.copy_plan[i], b.copy_plan[i]);
      }
    }
  }
}

TEST(PagerPositions, PositionBlindPoliciesServeTheSame) {
  same_plans_with_positions<lru>();
}

// learned_belady reads positions: with them it may decide differently, but both runs stay
// valid (every copy plan within capacity, every call's experts visible).
TEST(PagerPositions, LearnedBeladyServesWithPositions) {
  std::mt19937_64 rng(9);
  pager<learned_belady> p({.layers = 4, .experts = 16, .top_k = 2, .capacity = 5});
  for (std::uint32_t step = 0; step < 300; ++step) {
    p.begin_step();
    for (std::int32_t layer = 0; layer < 4; ++layer) {
      const std::vector<std::int32_t> ids = {static_cast<std::int32_t>(rng() % 8),
                                             8 + static_cast<std::int32_t>(rng() % 8)};
      const std::vector<std::uint32_t> position = {step % 37};
      const prepare_result r = p.prepare(layer, ids, 1, 2, position);
      ASSERT_EQ(r.hits + r.misses, 2);
      for (const std::int32_t e : ids) {
        ASSERT_GE(r.expert_map[static_cast<std::size_t>(e)], 0);
      }
    }
  }
}

}  // namespace
}  // namespace wisp
