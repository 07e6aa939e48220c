// SPDX-License-Identifier: Apache-2.0
// The checked-once bulk call `slot_cache::access_distinct` and `protect()`'s return value: the
// bulk call must do exactly what `access_call` does on the deduplicated keys (first-seen order),
// report each access once, and reject bad input before touching the cache.
#include "cache/reference.hpp"
#include "support/expect_error.hpp"

#include <wisp/cache/policies.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace wisp;
using wisp::test::make_policy;
using wisp::test::snapshot;

template <class P>
class AccessDistinct : public ::testing::Test {};
using all_policies =
    ::testing::Types<lru, fifo, lfu, lfu_history, lfru, fld, least_stale, learned_belady, belady>;
TYPED_TEST_SUITE(AccessDistinct, all_policies, wisp::test::policy_names);

std::vector<cache_key> first_seen(const std::vector<cache_key>& keys) {
  std::vector<cache_key> out;
  std::set<cache_key> seen;
  for (const cache_key k : keys) {
    if (seen.insert(k).second) {
      out.push_back(k);
    }
  }
  return out;
}

// 40 steps of calls over the 3 layers of `layout`, 0..6 keys each from 4 experts (repeats
// likely), and the future they make (each call's distinct keys, for belady).
struct random_calls {
  std::vector<std::vector<cache_key>> calls;
  std::vector<std::pair<std::uint32_t, std::int32_t>> where;  // (step, layer) of each call
  std::vector<cache_key> future;
};

random_calls make_random_calls(const key_layout& layout, std::uint32_t seed) {
  std::mt19937 rng(seed);
  random_calls r;
  for (std::uint32_t step = 0; step < 40; ++step) {
    for (std::int32_t layer = 0; layer < 3; ++layer) {
      std::vector<cache_key> keys;
      const int n = static_cast<int>(rng() % 7);
      for (int j = 0; j < n; ++j) {
        keys.push_back(layout.key_of(layer, static_cast<std::int32_t>(rng() % 4)));
      }
      const std::vector<cache_key> distinct = first_seen(keys);
      r.future.insert(r.future.end(), distinct.begin(), distinct.end());
      r.calls.push_back(std::move(keys));
      r.where.emplace_back(step, layer);
    }
  }
  return r;
}

TEST(SlotCacheProtect, ReturnsWhetherTheKeyWasNewlyProtected) {
  slot_cache<lru> cache(8, 4);
  cache.begin_call({0, 0, 0});
  EXPECT_TRUE(cache.protect(3));
  EXPECT_FALSE(cache.protect(3));
  EXPECT_TRUE(cache.protect(5));
  EXPECT_TRUE(cache.is_protected(3));
  cache.begin_call({1, 0, 0});
  EXPECT_FALSE(cache.is_protected(3));
  EXPECT_TRUE(cache.protect(3));
  // access() protects too: protecting an accessed key again is not new.
  (void)cache.access(6, {1, 0, 1});
  EXPECT_FALSE(cache.protect(6));
}

// Random calls with repeats, global scope over 3 layers: access_distinct on the raw keys against
// access_call on the deduplicated keys, result by result and state by state.
TYPED_TEST(AccessDistinct, EqualsAccessCallOnTheDistinctKeys) {
  const key_layout layout = key_layout{cache_scope::global, 3, 6};
  const random_calls script = make_random_calls(layout, 7);
  const auto& calls = script.calls;
  const auto& where = script.where;
  slot_cache<TypeParam> bulk(layout, 5, make_policy<TypeParam>(script.future));
  slot_cache<TypeParam> each(layout, 5, make_policy<TypeParam>(script.future));
  std::uint64_t time = 0;
  for (std::size_t c = 0; c < calls.size(); ++c) {
    const access_context ctx{where[c].first, where[c].second, time};
    const std::vector<cache_key> distinct = first_seen(calls[c]);
    std::vector<access_result> expected(distinct.size());
    each.access_call(distinct, ctx, expected);
    std::vector<std::pair<cache_key, access_result>> got;
    const std::size_t n = bulk.access_distinct(
        calls[c], ctx, [&](cache_key key, const access_result& r) { got.emplace_back(key, r); });
    ASSERT_EQ(n, distinct.size());
    ASSERT_EQ(got.size(), distinct.size());
    for (std::size_t i = 0; i < distinct.size(); ++i) {
      EXPECT_EQ(got[i].first, distinct[i]) << "call " << c << " access " << i;
      EXPECT_EQ(got[i].second, expected[i]) << "call " << c << " access " << i;
      EXPECT_TRUE(bulk.is_protected(distinct[i]));
    }
    EXPECT_EQ(snapshot(bulk), snapshot(each)) << "call " << c;
    ASSERT_TRUE(bulk.invariants_hold());
    time += distinct.size();
  }
}

// The unchecked whole call (the pager's fast path) against the checked access_distinct on a twin
// cache: same distinct keys, same misses in the same order and slots, and the notes plus the
// misses leave every key's current slot with the caller.
TYPED_TEST(AccessDistinct, UncheckedCallEqualsAccessDistinct) {
  const key_layout layout = key_layout{cache_scope::global, 3, 6};
  const random_calls script = make_random_calls(layout, 11);
  const auto& calls = script.calls;
  const auto& where = script.where;
  slot_cache<TypeParam> fast(layout, 5, make_policy<TypeParam>(script.future));
  slot_cache<TypeParam> checked(layout, 5, make_policy<TypeParam>(script.future));
  std::uint64_t time = 0;
  for (std::size_t c = 0; c < calls.size(); ++c) {
    const access_context ctx{where[c].first, where[c].second, time};
    std::vector<std::pair<cache_key, std::int32_t>> expected_misses;
    const std::size_t n =
        checked.access_distinct(calls[c], ctx, [&](cache_key key, const access_result& r) {
          if (!r.hit) {
            expected_misses.emplace_back(key, r.slot);
          }
        });
    std::vector<std::int32_t> noted(static_cast<std::size_t>(layout.size()), -2);
    std::vector<std::pair<cache_key, std::int32_t>> misses;
    std::size_t next_note = 0;
    const auto call = fast.access_call_unchecked(
        calls[c], ctx,
        [&](std::size_t i, cache_key key, std::int32_t slot) {
          EXPECT_EQ(i, next_note++);
          noted[static_cast<std::size_t>(key)] = slot;
        },
        [&](cache_key key, std::int32_t slot) {
          misses.emplace_back(key, slot);
          noted[static_cast<std::size_t>(key)] = slot;
        });
    const std::vector<cache_key> distinct = first_seen(calls[c]);
    ASSERT_EQ(call.keys.size(), n);
    EXPECT_TRUE(std::equal(call.keys.begin(), call.keys.end(), distinct.begin()));
    EXPECT_EQ(next_note, distinct.size());
    EXPECT_EQ(call.misses, expected_misses.size()) << "call " << c;
    EXPECT_EQ(misses, expected_misses) << "call " << c;
    for (const cache_key k : distinct) {
      EXPECT_EQ(noted[static_cast<std::size_t>(k)], fast.slot_of(k)) << "call " << c;
    }
    EXPECT_EQ(snapshot(fast), snapshot(checked)) << "call " << c;
    EXPECT_EQ(fast.stats(), checked.stats()) << "call " << c;
    ASSERT_TRUE(fast.invariants_hold());
    time += distinct.size();
  }
}

// Two caches that share one scratch, as the caches of a pager do, decide call by call as their
// twins with scratch of their own. A scratch too small for a call (stride 2 here: most calls
// have more distinct keys) falls back to the cache's own arrays.
TEST(SlotCacheUncheckedCall, SharedScratchDecidesAsOwnScratch) {
  const key_layout layout = key_layout{cache_scope::global, 3, 6};
  const random_calls script = make_random_calls(layout, 23);
  struct outcome {
    std::vector<cache_key> keys;
    std::vector<std::pair<std::size_t, std::int32_t>> notes;
    std::vector<std::pair<cache_key, std::int32_t>> misses;
    bool operator==(const outcome&) const = default;
  };
  const auto run = [](slot_cache<lru>& cache, const std::vector<cache_key>& keys,
                      const access_context& ctx, std::span<std::int32_t> scratch) {
    outcome o;
    const auto call = cache.access_call_unchecked(
        keys, ctx,
        [&](std::size_t i, cache_key, std::int32_t slot) { o.notes.emplace_back(i, slot); },
        [&](cache_key key, std::int32_t slot) { o.misses.emplace_back(key, slot); }, {}, scratch);
    o.keys.assign(call.keys.begin(), call.keys.end());
    EXPECT_EQ(call.misses, o.misses.size());
    return o;
  };
  for (const std::size_t entries : {std::size_t{3 * 18}, std::size_t{3 * 2}}) {
    std::vector<std::int32_t> scratch(entries, -1);
    slot_cache<lru> a(layout, 5);
    slot_cache<lru> b(layout, 4);
    slot_cache<lru> own_a(layout, 5);
    slot_cache<lru> own_b(layout, 4);
    std::uint64_t time = 0;
    for (std::size_t c = 0; c < script.calls.size(); ++c) {
      const access_context ctx{script.where[c].first, script.where[c].second, time};
      const std::vector<cache_key>& keys = script.calls[c];
      EXPECT_EQ(run(a, keys, ctx, scratch), run(own_a, keys, ctx, {})) << "call " << c;
      EXPECT_EQ(run(b, keys, ctx, scratch), run(own_b, keys, ctx, {})) << "call " << c;
      EXPECT_EQ(snapshot(a), snapshot(own_a)) << "call " << c;
      EXPECT_EQ(snapshot(b), snapshot(own_b)) << "call " << c;
      EXPECT_EQ(a.stats(), own_a.stats()) << "call " << c;
      EXPECT_EQ(b.stats(), own_b.stats()) << "call " << c;
      time += first_seen(keys).size();
    }
  }
}

TYPED_TEST(AccessDistinct, RejectsBadInputBeforeTouchingTheCache) {
  slot_cache<TypeParam> cache(8, 2, make_policy<TypeParam>({0, 1, 4}));
  std::vector<cache_key> warm{0, 1};
  std::vector<access_result> out(2);
  cache.access_call(warm, {0, 0, 0}, out);
  const auto before = snapshot(cache);
  auto expect_error = [&](std::vector<cache_key> keys, access_context ctx,
                          const std::string& needle) {
    int visits = 0;
    wisp::test::expect_error(
        [&] {
          cache.access_distinct(keys, ctx, [&](cache_key, const access_result&) { ++visits; });
        },
        needle);
    EXPECT_EQ(visits, 0);
    EXPECT_EQ(snapshot(cache), before);
  };
  expect_error({4, 8}, {1, 0, 2},
               "slot_cache::access_distinct: key 8 is outside [0, key_space = 8)");
  expect_error({-1}, {1, 0, 2}, "access_distinct: key -1");
  expect_error({4}, {1, 1, 2}, "layer 1 is outside [0, layers = 1)");
  // Range errors leave the previous call's protection in place.
  EXPECT_TRUE(cache.is_protected(0));
  EXPECT_TRUE(cache.is_protected(1));
  expect_error({4, 5, 4, 6}, {1, 0, 2},
               "slot_cache::access_distinct: 3 distinct keys requested but capacity is 2");
}

TEST(SlotCacheAccessDistinct, SkipsRepeatsAndNumbersTimesByDistinctKey) {
  slot_cache<lru> cache(8, 3);
  std::vector<std::pair<cache_key, bool>> got;
  const std::vector<cache_key> keys{2, 2, 5, 2, 5};
  EXPECT_EQ(cache.access_distinct(
                keys, {0, 0, 10},
                [&](cache_key key, const access_result& r) { got.emplace_back(key, r.hit); }),
            2u);
  EXPECT_EQ(got, (std::vector<std::pair<cache_key, bool>>{{2, false}, {5, false}}));
  EXPECT_EQ(cache.stats().accesses, 2u);
  EXPECT_EQ(cache.stats().misses, 2u);
  got.clear();
  EXPECT_EQ(cache.access_distinct(
                std::vector<cache_key>{5, 7, 5}, {1, 0, 12},
                [&](cache_key key, const access_result& r) { got.emplace_back(key, r.hit); }),
            2u);
  EXPECT_EQ(got, (std::vector<std::pair<cache_key, bool>>{{5, true}, {7, false}}));
  EXPECT_EQ(cache.stats().hits, 1u);
  EXPECT_EQ(cache.stats().accesses, 4u);
  EXPECT_EQ(cache.access_distinct(std::vector<cache_key>{}, {2, 0, 14},
                                  [&](cache_key, const access_result&) { ADD_FAILURE(); }),
            0u);
  EXPECT_TRUE(cache.invariants_hold());
}

}  // namespace
