// SPDX-License-Identifier: Apache-2.0
// slot_cache behaviour: vLLM CachedWeightProvider tests at the cache level (ANCHORS.md §1a),
// per-policy expected victims, protection, invalidate, resize, collision misses, bad input.
#include "cache/reference.hpp"
#include "support/expect_error.hpp"

#include <wisp/cache/policies.hpp>

#include <gtest/gtest.h>

#include <array>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace {

using namespace wisp;
using wisp::test::expect_error;
using wisp::test::make_policy;
using wisp::test::snapshot;

// ---------------------------------------------------------------- driving vLLM-style calls

/// Replays vLLM `prepare()` calls, one forward pass (step) per call on layer 0, and returns the
/// results of the last call. Belady gets the whole sequence as its future.
template <class P>
struct vllm_driver {
  vllm_driver(std::int32_t experts, std::int32_t capacity,
              std::vector<std::vector<cache_key>> calls)
      : calls_(std::move(calls)), cache_(experts, capacity, make_policy<P>(flat(calls_))) {}

  static std::vector<cache_key> flat(const std::vector<std::vector<cache_key>>& calls) {
    std::vector<cache_key> out;
    for (const auto& c : calls)
      out.insert(out.end(), c.begin(), c.end());
    return out;
  }

  /// Runs calls [from, to); returns the results of the last one.
  std::vector<access_result> run(std::size_t from, std::size_t to) {
    std::vector<access_result> out;
    for (std::size_t i = from; i < to; ++i) {
      out.assign(calls_[i].size(), access_result{});
      cache_.access_call(calls_[i], {static_cast<std::uint32_t>(i), 0, time_}, out);
      time_ += calls_[i].size();
    }
    return out;
  }
  std::vector<access_result> run_all() { return run(0, calls_.size()); }

  std::vector<std::vector<cache_key>> calls_;
  slot_cache<P> cache_;
  std::uint64_t time_ = 0;
};

std::vector<std::vector<cache_key>> repeat(std::vector<std::vector<cache_key>> head,
                                           std::vector<cache_key> call, int times,
                                           std::vector<std::vector<cache_key>> tail) {
  for (int i = 0; i < times; ++i)
    head.push_back(call);
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

template <class P>
class SlotCache : public ::testing::Test {};
using all_policies =
    ::testing::Types<lru, fifo, lfu, lfu_history, lfru, fld, least_stale, learned_belady, belady>;
TYPED_TEST_SUITE(SlotCache, all_policies, wisp::test::policy_names);

// vLLM #1: cold misses, then warm hits.
TYPED_TEST(SlotCache, ColdMissThenWarmHit) {
  for (std::int32_t experts : {8, 64}) {
    for (std::int32_t capacity : {1, 4}) {
      std::vector<cache_key> ids;
      for (cache_key e = 0; e < capacity; ++e)
        ids.push_back(e * (experts / 8) + 1);
      vllm_driver<TypeParam> d(experts, capacity, {ids, ids});
      auto first = d.run(0, 1);
      EXPECT_EQ(d.cache_.stats().misses, ids.size());
      EXPECT_EQ(d.cache_.stats().hits, 0u);
      for (std::size_t i = 0; i < ids.size(); ++i) {
        EXPECT_FALSE(first[i].hit);
        EXPECT_EQ(d.cache_.key_in_slot(first[i].slot), ids[i]);
      }
      auto second = d.run(1, 2);
      EXPECT_EQ(d.cache_.stats().hits, ids.size());
      EXPECT_EQ(d.cache_.stats().misses, ids.size());
      for (std::size_t i = 0; i < ids.size(); ++i) {
        EXPECT_TRUE(second[i].hit);
        EXPECT_EQ(second[i].slot, first[i].slot);
      }
    }
  }
}

// vLLM #2: capacity == number of experts.
TYPED_TEST(SlotCache, CapacityEqualsKeySpace) {
  for (std::int32_t experts : {8, 64}) {
    std::vector<cache_key> all;
    for (cache_key e = 0; e < experts; ++e)
      all.push_back(e);
    vllm_driver<TypeParam> d(experts, experts, {all, all});
    d.run(0, 1);
    EXPECT_EQ(d.cache_.stats().misses, static_cast<std::uint64_t>(experts));
    EXPECT_EQ(d.cache_.free_count(), 0);
    EXPECT_EQ(d.cache_.size(), experts);
    d.run(1, 2);
    EXPECT_EQ(d.cache_.stats().hits, static_cast<std::uint64_t>(experts));
    EXPECT_EQ(d.cache_.stats().evictions, 0u);
    EXPECT_TRUE(d.cache_.invariants_hold());
    d.cache_.reset_stats();  // zeroes the counters, keeps the contents
    EXPECT_EQ(d.cache_.stats(), cache_stats{});
    EXPECT_EQ(d.cache_.size(), experts);
  }
}

// vLLM #7: capacity 1 always evicts.
TYPED_TEST(SlotCache, CapacityOneAlwaysEvicts) {
  vllm_driver<TypeParam> d(8, 1, {{0}, {1}, {2}, {3}, {4}});
  for (std::size_t i = 0; i < 5; ++i) {
    const auto r = d.run(i, i + 1);
    EXPECT_FALSE(r[0].hit);
    EXPECT_EQ(r[0].evicted, i == 0 ? no_key : static_cast<cache_key>(i - 1));
    EXPECT_EQ(r[0].slot, 0);
  }
  EXPECT_EQ(d.cache_.stats().misses, 5u);
  EXPECT_EQ(d.cache_.stats().hits, 0u);
  EXPECT_EQ(d.cache_.stats().evictions, 4u);
  EXPECT_EQ(d.cache_.size(), 1);
  EXPECT_TRUE(d.cache_.contains(4));
}

// vLLM "batch experts survive intra-batch eviction": warm [0..3] x50, then [4,5,6,7] at cap 4.
TYPED_TEST(SlotCache, IntraBatchProtection) {
  vllm_driver<TypeParam> d(8, 4, repeat({}, {0, 1, 2, 3}, 50, {{4, 5, 6, 7}}));
  const auto last = d.run_all();
  for (cache_key e = 4; e < 8; ++e) {
    EXPECT_TRUE(d.cache_.contains(e)) << "expert " << e;
  }
  std::array<bool, 4> seen{};
  for (const access_result& r : last) {
    EXPECT_FALSE(r.hit);
    EXPECT_GE(r.evicted, 0);
    EXPECT_LT(r.evicted, 4);
    seen[static_cast<std::size_t>(r.slot)] = true;
  }
  EXPECT_EQ(seen, (std::array<bool, 4>{true, true, true, true}));
  EXPECT_TRUE(d.cache_.invariants_hold());
}

// vLLM #5, #6, #8, #9 with per-policy expected victims. A victim is checked by the key missing
// after the last call, and (#8) by the slot reuse.
struct victim_case {
  const char* name;
  std::vector<std::vector<cache_key>> calls;
  std::int32_t capacity;
  std::map<std::string, cache_key> expected;  // policy name -> victim of the last call
};

std::vector<victim_case> victim_cases() {
  return {
      // #5 lfru_prefers_evicting_low_frequency: [0,1], [0]x4, [1], then [2]
      {"vllm5",
       repeat({{0, 1}}, {0}, 4, {{1}, {2}}),
       2,
       {{"lru", 0},
        {"fifo", 0},
        {"lfu", 1},
        {"lfu_history", 1},
        {"lfru", 1},
        {"fld", 0},
        {"least_stale", 0},
        {"belady", 0}}},
      // #6 lfru_evicts_stale_high_freq_expert: 0 x11, then 1 x51, then [2]
      {"vllm6",
       repeat(repeat({}, {0}, 11, {}), {1}, 51, {{2}}),
       2,
       {{"lru", 0},
        {"fifo", 0},
        {"lfu", 0},
        {"lfu_history", 0},
        {"lfru", 0},
        {"fld", 0},
        {"least_stale", 0},
        {"belady", 0}}},
      // #8 gpu_buffer_correct_after_eviction: [0,1,2,3], [1,2,3], [7]
      {"vllm8",
       {{0, 1, 2, 3}, {1, 2, 3}, {7}},
       4,
       {{"lru", 0},
        {"fifo", 0},
        {"lfu", 0},
        {"lfu_history", 0},
        {"lfru", 0},
        {"fld", 0},
        {"least_stale", 0},
        {"belady", 0}}},
      // #9 scale_lifecycle: [3,6], [0,1], [3,6,0], [7]
      {"vllm9",
       {{3, 6}, {0, 1}, {3, 6, 0}, {7}},
       4,
       {{"lru", 1},
        {"fifo", 3},
        {"lfu", 1},
        {"lfu_history", 1},
        {"lfru", 1},
        {"fld", 1},
        {"least_stale", 1},
        {"belady", 0}}},
      // LFRU-vs-LRU flip with a future: Belady keeps the key that comes back.
      // At [2] key 0 comes back next: Belady evicts 1, every online policy here evicts 0.
      {"belady_keeps_reused",
       {{0, 1}, {0}, {1}, {2}, {0}},
       2,
       {{"lru", 0},
        {"fifo", 0},
        {"lfu", 0},
        {"lfu_history", 0},
        {"lfru", 0},
        {"fld", 0},
        {"least_stale", 0},
        {"belady", 1}}},
  };
}

// The two LFUs part when an evicted expert comes back: `lfu` restarts its count at 1,
// `lfu_history` (SpecMD's LFU) remembers every earlier access.
TEST(LfuHistory, KeepsTheCountOfAnEvictedExpert) {
  const std::vector<cache_key> stream = {0, 0, 0, 1, 1, 1, 1, 2, 0, 2};
  slot_cache<lfu> fresh(4, 2);
  slot_cache<lfu_history> whole(4, 2);
  std::uint32_t step = 0;
  for (const cache_key key : stream) {  // one key per call, one call per step
    fresh.access(key, {step, 0, step});
    whole.access(key, {step, 0, step});
    ++step;
  }
  // At the last [2]: lfu sees 1 (4 accesses) against 0 (1 since its return) and evicts 0;
  // lfu_history sees 4 against 4 and evicts the less recent, 1.
  EXPECT_TRUE(fresh.contains(1) && fresh.contains(2) && !fresh.contains(0));
  EXPECT_TRUE(whole.contains(0) && whole.contains(2) && !whole.contains(1));
  EXPECT_EQ(whole.policy().count(0), 4u);
  EXPECT_EQ(fresh.policy().count(0), 1u);
}

// The victim of call `last`'s miss: from the table; learned_belady's (a learned rule with no
// hand-derived table) from its brute-force reference replaying the same calls.
template <class P>
cache_key expected_victim(const victim_case& c, std::size_t last) {
  if constexpr (std::is_same_v<P, learned_belady>) {
    test::reference_cache ref(test::rule::learned_belady, key_layout{cache_scope::per_layer, 1, 8},
                              c.capacity);
    std::vector<access_result> out;
    std::uint64_t t = 0;
    for (std::size_t i = 0; i <= last; ++i) {
      ref.access_call(c.calls[i], {static_cast<std::uint32_t>(i), 0, t}, out);
      t += c.calls[i].size();
    }
    return out.back().evicted;
  } else {
    return c.expected.at(std::string(policy_name<P>()));
  }
}

TYPED_TEST(SlotCache, VllmExpectedVictims) {
  for (const victim_case& c : victim_cases()) {
    SCOPED_TRACE(c.name);
    const std::size_t last =
        c.calls.size() - (std::string(c.name) == "belady_keeps_reused" ? 2 : 1);
    vllm_driver<TypeParam> d(8, c.capacity, c.calls);
    d.run(0, last);
    const cache_key victim = expected_victim<TypeParam>(c, last);
    const std::int32_t victim_slot = d.cache_.slot_of(victim);
    ASSERT_GE(victim_slot, 0);
    const auto r = d.run(last, last + 1);
    EXPECT_EQ(r.back().evicted, victim);
    EXPECT_EQ(r.back().slot, victim_slot);  // the new expert takes the victim's slot
    EXPECT_FALSE(d.cache_.contains(victim));
    EXPECT_EQ(d.cache_.key_in_slot(victim_slot), c.calls[last].back());
  }
}

TEST(SlotCacheBelady, KeepsTheKeyUsedAgain) {
  // [0,1],[0],[1],[2],[1]: at [2] both 0 and 1 are resident; 1 comes back, 0 never: evict 0.
  std::vector<cache_key> seq = {0, 1, 0, 1, 2, 1};
  slot_cache<belady> cache(4, 2, belady(seq));
  for (std::uint64_t t = 0; t < seq.size(); ++t) {
    const auto r = cache.access(seq[t], {static_cast<std::uint32_t>(t), 0, t});
    if (t == 4) {
      EXPECT_EQ(r.evicted, 0);
    }
  }
  EXPECT_EQ(cache.stats().misses, 3u);
}

TEST(SlotCacheLfru, ScoresMatchVllm) {
  // #6: 0 accessed 11x, 1 accessed 51x: at the miss on 2, score(0) = 11/52, score(1) = 51/1.
  slot_cache<lfru> cache(8, 2);
  std::uint64_t t = 0;
  for (int i = 0; i < 11; ++i)
    cache.access(0, {static_cast<std::uint32_t>(t), 0, t}), ++t;
  for (int i = 0; i < 51; ++i)
    cache.access(1, {static_cast<std::uint32_t>(t), 0, t}), ++t;
  EXPECT_DOUBLE_EQ(cache.policy().score(0), 11.0 / 52.0);
  EXPECT_DOUBLE_EQ(cache.policy().score(1), 51.0);
  EXPECT_EQ(cache.policy().clock(), 62u);
}

// lfru compares scores by exact 128-bit products. Both ways of computing one (the compiler's
// 128-bit integer, the portable 32-bit halves) against products known in closed form.
TEST(SlotCacheLfru, WideProductsAreExact) {
  using detail::multiply;
  using detail::multiply_halves;
  using detail::wide_product;
  constexpr std::uint64_t max = ~std::uint64_t{0};
  // (2^64 - 1)^2 = 2^128 - 2^65 + 1; (2^32)^2 = 2^64; (2^64 - 1) * 2 = 2^65 - 2.
  const std::array<std::tuple<std::uint64_t, std::uint64_t, wide_product>, 5> known{{
      {max, max, {max - 1, 1}},
      {std::uint64_t{1} << 32, std::uint64_t{1} << 32, {1, 0}},
      {max, 2, {1, max - 1}},
      {0, max, {0, 0}},
      {123456789, 987654321, {0, 121932631112635269ull}},
  }};
  for (const auto& [a, b, product] : known) {
    EXPECT_EQ(multiply(a, b), product) << a << " * " << b;
    EXPECT_EQ(multiply_halves(a, b), product) << a << " * " << b;
  }
  // Random factors: (a * b) / b == a, checked by long division of the 128-bit product.
  std::mt19937_64 rng(5);
  for (int i = 0; i < 10000; ++i) {
    const std::uint64_t a = rng() >> (rng() % 64);
    const std::uint64_t b = (rng() >> (rng() % 64)) | 1u;
    const wide_product p = multiply(a, b);
    ASSERT_EQ(multiply_halves(a, b), p) << a << " * " << b;
    std::uint64_t quotient = 0;
    std::uint64_t remainder = 0;  // < b throughout
    for (int bit = 127; bit >= 0; --bit) {
      const std::uint64_t next = bit >= 64 ? (p.high >> (bit - 64)) & 1u : (p.low >> bit) & 1u;
      const bool carry = (remainder >> 63) != 0;
      remainder = (remainder << 1) | next;
      const bool take = carry || remainder >= b;
      remainder -= take ? b : 0;
      if (bit < 64) {
        quotient |= static_cast<std::uint64_t>(take) << bit;
      } else {
        ASSERT_FALSE(take) << a << " * " << b << ": quotient over 64 bits";
      }
    }
    ASSERT_EQ(quotient, a) << a << " * " << b;
    ASSERT_EQ(remainder, 0u) << a << " * " << b;
  }
}

// vLLM #11/#12: invalidate frees the slot; no-op when absent.
TYPED_TEST(SlotCache, InvalidateFreesSlotAndIsNoOpWhenAbsent) {
  vllm_driver<TypeParam> d(8, 4, {{0, 1, 2, 3}, {5}});
  const auto r = d.run(0, 1);
  const std::int32_t slot = d.cache_.slot_of(2);
  EXPECT_TRUE(d.cache_.invalidate(2));
  EXPECT_FALSE(d.cache_.contains(2));
  EXPECT_EQ(d.cache_.slot_of(2), -1);
  EXPECT_EQ(d.cache_.key_in_slot(slot), no_key);
  ASSERT_EQ(d.cache_.free_slots().size(), 1u);
  EXPECT_EQ(d.cache_.free_slots()[0], slot);
  const auto before = snapshot(d.cache_);
  EXPECT_FALSE(d.cache_.invalidate(7));  // absent: no-op
  EXPECT_EQ(snapshot(d.cache_), before);
  EXPECT_EQ(d.cache_.stats().evictions, 0u);
  // The freed slot is reused without eviction.
  const auto r2 = d.run(1, 2);
  EXPECT_EQ(r2[0].slot, slot);
  EXPECT_EQ(r2[0].evicted, no_key);
  EXPECT_TRUE(d.cache_.invariants_hold());
  (void)r;
}

// The call may not request more distinct keys than the capacity (vLLM test_overflow_raises).
TYPED_TEST(SlotCache, OverflowingCallThrowsAndChangesNothing) {
  slot_cache<TypeParam> cache(8, 2, make_policy<TypeParam>({0, 1, 2, 3, 4, 5}));
  std::array<access_result, 4> out{};
  std::array<cache_key, 2> warm{0, 1};
  cache.access_call(warm, {0, 0, 0}, out);
  const auto before = snapshot(cache);
  std::array<cache_key, 4> wide{2, 3, 4, 5};
  expect_error(
      [&] {
        cache.access_call(wide, {1, 0, 2}, out);
      },
      "4 distinct keys requested but capacity is 2");
  EXPECT_EQ(snapshot(cache), before);
}

// Single accesses within one call: when every resident key is protected, a miss throws and the
// cache is unchanged.
TYPED_TEST(SlotCache, MissWithEveryResidentProtectedThrows) {
  slot_cache<TypeParam> cache(8, 2, make_policy<TypeParam>({0, 1, 2}));
  cache.access(0, {0, 0, 0});
  cache.access(1, {0, 0, 1});
  const auto before = snapshot(cache);
  EXPECT_THROW(cache.access(2, {0, 0, 2}), logic_error);
  EXPECT_EQ(snapshot(cache), before);
  EXPECT_FALSE(cache.is_protected(2));
  EXPECT_TRUE(cache.is_protected(0));
}

// Bad input: clear errors, state unchanged.
TYPED_TEST(SlotCache, RejectsBadInput) {
  expect_error([] { slot_cache<TypeParam> c(8, 0, make_policy<TypeParam>({})); },
               "capacity 0 must be in [1, key_space = 8]");
  expect_error([] { slot_cache<TypeParam> c(8, 9, make_policy<TypeParam>({})); },
               "capacity 9 must be in [1, key_space = 8]");
  expect_error([] { slot_cache<TypeParam> c(8, -1, make_policy<TypeParam>({})); }, "capacity -1");
  expect_error([] { slot_cache<TypeParam> c(0, 1, make_policy<TypeParam>({})); },
               "experts must be >= 1, got 0");
  expect_error(
      [] {
        slot_cache<TypeParam> c(key_layout{cache_scope::global, 0, 4}, 1,
                                make_policy<TypeParam>({}));
      },
      "layers must be >= 1, got 0");

  slot_cache<TypeParam> cache(8, 3, make_policy<TypeParam>({1, 2}));
  cache.access(1, {0, 0, 0});
  const auto before = snapshot(cache);
  expect_error([&] { cache.access(8, {0, 0, 1}); }, "key 8 is outside [0, key_space = 8)");
  expect_error([&] { cache.access(-1, {0, 0, 1}); }, "key -1 is outside [0, key_space = 8)");
  expect_error([&] { cache.access(2, {0, 1, 1}); }, "layer 1 is outside [0, layers = 1)");
  expect_error([&] { cache.access(2, {0, -3, 1}); }, "layer -3");
  expect_error([&] { (void)cache.invalidate(8); }, "invalidate: key 8");
  expect_error([&] { (void)cache.invalidate(-5); }, "invalidate: key -5");
  expect_error([&] { (void)cache.contains(9); }, "contains: key 9");
  expect_error([&] { (void)cache.slot_of(-2); }, "slot_of: key -2");
  expect_error([&] { (void)cache.key_in_slot(3); }, "slot 3 is outside [0, capacity = 3)");
  expect_error([&] { (void)cache.key_in_slot(-1); }, "slot -1");
  expect_error([&] { cache.protect(8); }, "protect: key 8");
  expect_error(
      [&] {
        (void)cache.resize(0, {0, 0, 1});
      },
      "new capacity 0 must be in [1, key_space = 8]");
  expect_error([&] { (void)cache.resize(9, {0, 0, 1}); }, "new capacity 9");
  std::array<cache_key, 2> bad{2, 8};
  std::array<access_result, 2> out{};
  expect_error([&] { cache.access_call(bad, {0, 0, 1}, out); }, "access_call: key 8");
  std::array<cache_key, 2> good{2, 3};
  expect_error(
      [&] {
        cache.access_call(good, {0, 0, 1}, std::span(out).first(1));
      },
      "output holds 1 results for 2 keys");
  EXPECT_EQ(snapshot(cache), before);
}

TEST(SlotCacheBelady, RejectsAccessOffTheSequence) {
  slot_cache<belady> cache(4, 2, belady(std::vector<cache_key>{0, 1}));
  cache.access(0, {0, 0, 0});
  EXPECT_THROW(cache.access(2, {0, 0, 1}), logic_error);
  EXPECT_TRUE(cache.invariants_hold());
  EXPECT_FALSE(cache.contains(2));
  EXPECT_THROW(slot_cache<belady>(4, 2, belady(std::vector<cache_key>{0, 9})), logic_error);
  EXPECT_THROW(belady(std::vector<cache_key>{0, -1}), logic_error);
}

// ---------------------------------------------------------------- resize

TYPED_TEST(SlotCache, GrowAddsFreeSlots) {
  slot_cache<TypeParam> cache(8, 2, make_policy<TypeParam>({0, 1, 2, 3}));
  cache.access(0, {0, 0, 0});
  cache.access(1, {0, 0, 1});
  const auto report = cache.resize(4, {1, 0, 2});
  EXPECT_TRUE(report.evicted.empty());
  EXPECT_TRUE(report.moves.empty());
  EXPECT_EQ(cache.capacity(), 4);
  EXPECT_EQ(cache.free_count(), 2);
  EXPECT_FALSE(cache.access(2, {1, 0, 2}).hit);
  EXPECT_EQ(cache.access(3, {1, 0, 3}).evicted, no_key);
  EXPECT_TRUE(cache.contains(0) && cache.contains(1));
  EXPECT_TRUE(cache.invariants_hold());
}

TYPED_TEST(SlotCache, ShrinkEvictsThroughPolicyAndCompactsSlots) {
  std::vector<cache_key> seq = {0, 1, 2, 3, 4, 5};
  slot_cache<TypeParam> cache(8, 6, make_policy<TypeParam>(seq));
  for (std::uint64_t t = 0; t < seq.size(); ++t) {
    cache.access(seq[t], {static_cast<std::uint32_t>(t), 0, t});
  }
  // the call of step 5 protects key 5
  const auto report = cache.resize(3, {5, 0, 6});
  EXPECT_EQ(cache.capacity(), 3);
  EXPECT_EQ(cache.size(), 3);
  EXPECT_EQ(report.evicted.size(), 3u);
  EXPECT_TRUE(cache.contains(5));  // protected
  for (const cache_key k : report.evicted)
    EXPECT_FALSE(cache.contains(k));
  for (const slot_move& m : report.moves) {
    EXPECT_GE(m.from, 3);
    EXPECT_LT(m.to, 3);
    EXPECT_EQ(cache.slot_of(m.key), m.to);
  }
  cache.for_each_resident([](cache_key, std::int32_t slot) { EXPECT_LT(slot, 3); });
  EXPECT_EQ(cache.stats().evictions, 3u);
  EXPECT_TRUE(cache.invariants_hold());
}

TYPED_TEST(SlotCache, ShrinkThatWouldEvictProtectedKeysThrowsAndChangesNothing) {
  slot_cache<TypeParam> cache(8, 4, make_policy<TypeParam>({0, 1, 2, 3}));
  std::array<cache_key, 4> ids{0, 1, 2, 3};
  std::array<access_result, 4> out{};
  cache.access_call(std::span(ids).first(2), {0, 0, 0}, out);
  cache.access_call(std::span(ids).subspan(2), {1, 0, 2}, out);  // protects 2 and 3
  const auto before = snapshot(cache);
  expect_error(
      [&] {
        (void)cache.resize(1, {1, 0, 4});
      },
      "shrinking from 4 to 1 slots must evict 3 of 4 resident keys, but 2 are protected");
  EXPECT_EQ(snapshot(cache), before);
  const auto report = cache.resize(2, {1, 0, 4});  // feasible: evicts 0 and 1
  EXPECT_EQ(report.evicted.size(), 2u);
  EXPECT_TRUE(cache.contains(2) && cache.contains(3));
  EXPECT_TRUE(cache.invariants_hold());
}

// ---------------------------------------------------------------- collision misses

TEST(SlotCacheCollision, CountsMissesOnKeysEvictedInTheSamePass) {
  // Global scope, 2 layers x 2 experts, capacity 1.
  slot_cache<lru> cache(key_layout{cache_scope::global, 2, 2}, 1);
  cache.access(0, {0, 0, 0});                        // layer 0 expert 0
  EXPECT_EQ(cache.access(2, {0, 1, 1}).evicted, 0);  // layer 1 expert 0 evicts key 0
  const auto again = cache.access(0, {0, 0, 2});     // same pass: collision
  EXPECT_TRUE(again.collision);
  EXPECT_EQ(again.evicted, 2);
  const auto next_pass = cache.access(2, {1, 1, 3});  // evicted in pass 0, missed in pass 1
  EXPECT_FALSE(next_pass.collision);
  EXPECT_EQ(cache.stats().collision_misses, 1u);
  EXPECT_EQ(cache.stats().misses, 4u);
}

TEST(SlotCacheCollision, WholeCallsAndPrefetchesCountThemPerStep) {
  // Global scope, 3 layers x 64 experts (192 keys), capacity 4. lru takes whole calls; its
  // victims are the least recently used keys.
  slot_cache<lru> cache(key_layout{cache_scope::global, 3, 64}, 4);
  std::vector<access_result> out(4);
  const std::vector<cache_key> first = {1, 70, 130, 191};
  cache.access_call(first, {0, 0, 0}, out);
  const std::vector<cache_key> second = {2, 71, 131, 190};  // evicts every key of `first`
  cache.access_call(second, {0, 1, 4}, out);
  const std::vector<cache_key> third = {191, 1, 130, 3};  // three of them again, same pass
  cache.access_call(third, {0, 2, 8}, out);
  EXPECT_TRUE(out[0].collision);
  EXPECT_TRUE(out[1].collision);
  EXPECT_TRUE(out[2].collision);
  EXPECT_FALSE(out[3].collision);  // key 3 was never resident
  EXPECT_EQ(cache.stats().collision_misses, 3u);
  // Key 70 was evicted in pass 0; missed in pass 1 it is an ordinary miss.
  const std::vector<cache_key> fourth = {70};
  cache.access_call(fourth, {1, 0, 12}, out);
  EXPECT_FALSE(out[0].hit);
  EXPECT_FALSE(out[0].collision);
  EXPECT_EQ(cache.stats().collision_misses, 3u);
  // A key evicted by a prefetch in pass 1 and requested later in pass 1 is a collision.
  const access_result loaded = cache.prefetch(100, {1, 1, 13}, protected_keys{});
  ASSERT_FALSE(loaded.hit);
  ASSERT_NE(loaded.evicted, no_key);
  const std::vector<cache_key> fifth = {loaded.evicted};
  cache.access_call(fifth, {1, 2, 13}, out);
  EXPECT_TRUE(out[0].collision);
  EXPECT_EQ(cache.stats().collision_misses, 4u);
  EXPECT_TRUE(cache.invariants_hold());
}

TEST(SlotCacheCollision, InvalidateIsNotAnEviction) {
  slot_cache<lru> cache(4, 2);
  cache.access(0, {0, 0, 0});
  cache.invalidate(0);
  EXPECT_FALSE(cache.access(0, {0, 0, 1}).collision);
  EXPECT_EQ(cache.stats().evictions, 0u);
}

// ---------------------------------------------------------------- position-aware orders

// Layer distance from executing layer c (L layers): d = ((layer - c - 1) mod L) + 1, so the next
// layer has d = 1 and the executing layer d = L (its unrequested keys are needed a pass later).

TEST(LeastStale, EvictsStaleBeforeCurrentAndTheLayerNeededLastFirst) {
  // 4 layers x 2 experts, global scope, capacity 5.
  const key_layout layout = key_layout{cache_scope::global, 4, 2};
  slot_cache<least_stale> cache(layout, 5);
  std::uint64_t t = 0;
  auto at = [&](std::uint32_t step, std::int32_t layer, std::int32_t expert) {
    return cache.access(layout.key_of(layer, expert), {step, layer, t++});
  };
  // pass 0: layers 0..3 expert 0 (keys 0, 2, 4, 6)
  for (std::int32_t l = 0; l < 4; ++l)
    at(0, l, 0);
  // pass 1: layer 0 expert 1 (key 1): the cache is full.
  at(1, 0, 1);
  // layer 1 of pass 1 requests expert 1 (key 3): stale = {0, 2, 4, 6}; d from layer 1:
  // layer1 -> 4 (key 2), layer0 -> 3, layer3 -> 2, layer2 -> 1. Key 2 is needed last.
  EXPECT_EQ(at(1, 1, 1).evicted, 2);
  // layer 2, expert 1 (key 5): stale {0, 4, 6}: layer2 -> 4 (key 4), layer1 -> 3, layer0 -> 2.
  EXPECT_EQ(at(1, 2, 1).evicted, 4);
  // layer 3, expert 1 (key 7): stale {0, 6}: layer3 -> 4 (key 6), layer0 -> 1 (key 0).
  EXPECT_EQ(at(1, 3, 1).evicted, 6);
  // pass 2: key 0 survived because layer 0 runs first in the next pass.
  EXPECT_TRUE(at(2, 0, 0).hit);
  EXPECT_TRUE(at(2, 0, 1).hit);
  // layer 1, expert 0 (key 2): current = {0, 1} (layer 0, d = 3), stale = {3 (layer 1, d = 4),
  // 5 (layer 2, d = 1), 7 (layer 3, d = 2)} -> key 3.
  EXPECT_EQ(at(2, 1, 0).evicted, 3);
  // layer 2, expert 0 (key 4): current = {0, 1, 2}, stale = {5 (d = 4), 7 (d = 1)} -> key 5, the
  // executing layer's unrequested expert.
  EXPECT_EQ(at(2, 2, 0).evicted, 5);
  // layer 3, expert 0 (key 6): stale = {7} (layer 3, d = 4); current keys are kept.
  EXPECT_EQ(at(2, 3, 0).evicted, 7);
}

TEST(LeastStale, CurrentKeysGoOnlyWhenNoStaleKeyIsLeft) {
  const key_layout layout = key_layout{cache_scope::global, 3, 2};
  slot_cache<least_stale> cache(layout, 2);
  std::uint64_t t = 0;
  auto at = [&](std::uint32_t step, std::int32_t layer, std::int32_t expert) {
    return cache.access(layout.key_of(layer, expert), {step, layer, t++});
  };
  at(0, 0, 0);
  at(0, 1, 0);
  // layer 2 of pass 0: both current; d from 2: layer0 -> 1, layer1 -> 2 => evict layer 1 (key 2)
  EXPECT_EQ(at(0, 2, 0).evicted, layout.key_of(1, 0));
}

TEST(Fld, EvictsTheLayerNeededLast) {
  const key_layout layout = key_layout{cache_scope::global, 4, 1};  // key == layer
  slot_cache<fld> cache(layout, 3);
  std::uint64_t t = 0;
  cache.access(0, {0, 0, t++});
  cache.access(1, {0, 1, t++});
  cache.access(2, {0, 2, t++});
  // executing layer 3: d(0)=1, d(1)=2, d(2)=3 -> evict 2 (just passed, needed last)
  EXPECT_EQ(cache.access(3, {0, 3, t++}).evicted, 2);
  // executing layer 0 of the next pass, key 0 resident (hit); then layer 2: d(3)=1, d(0)=2, d(1)=3
  EXPECT_TRUE(cache.access(0, {1, 0, t++}).hit);
  EXPECT_EQ(cache.access(2, {1, 2, t++}).evicted, 1);
}

TEST(Fld, EvictsTheExecutingLayersUnrequestedExpertsFirst) {
  const key_layout layout = key_layout{cache_scope::global, 3, 2};  // key = layer * 2 + expert
  slot_cache<fld> cache(layout, 3);
  std::uint64_t t = 0;
  for (std::int32_t l = 0; l < 3; ++l)
    cache.access(layout.key_of(l, 0), {0, l, t++});  // keys 0, 2, 4
  EXPECT_TRUE(cache.access(0, {1, 0, t++}).hit);
  // layer 1 of pass 1 requests expert 1 (key 3): d(key 2, layer 1) = 3, d(key 0) = 2,
  // d(key 4) = 1. Key 2 is not needed until layer 1 of the next pass, after key 0.
  EXPECT_EQ(cache.access(layout.key_of(1, 1), {1, 1, t++}).evicted, 2);
}

TEST(LayerPolicies, PerLayerScopeReducesToTheTieBreak) {
  // One layer's cache: the distance is the same for every key, so fld is LRU and least_stale is
  // stale-then-LRU.
  slot_cache<fld> f(key_layout{cache_scope::per_layer, 3, 4}, 2);
  slot_cache<lru> l(key_layout{cache_scope::per_layer, 3, 4}, 2);
  std::uint64_t t = 0;
  for (const cache_key k : {0, 1, 0, 2, 3, 1, 0, 2}) {
    const access_context ctx{static_cast<std::uint32_t>(t), 1, t};
    ++t;
    EXPECT_EQ(f.access(k, ctx), l.access(k, ctx)) << "key " << k;
  }
}

// ---------------------------------------------------------------- per-layer set

TEST(PerLayerCache, RoutesByLayerAndSumsStats) {
  const std::vector<std::int32_t> capacities = {1, 2, 3};
  per_layer_cache<lru> caches(capacities, 4, lru{});
  EXPECT_EQ(caches.layers(), 3);
  EXPECT_EQ(caches.experts(), 4);
  EXPECT_EQ(caches.total_capacity(), 6);
  caches.access(1, {0, 0, 0});
  caches.access(1, {0, 1, 1});
  caches.access(1, {0, 1, 2});
  EXPECT_TRUE(caches.layer(0).contains(1));
  EXPECT_TRUE(caches.layer(1).contains(1));
  EXPECT_FALSE(caches.layer(2).contains(1));
  EXPECT_EQ(caches.stats().hits, 1u);
  EXPECT_EQ(caches.stats().misses, 2u);
  EXPECT_THROW(caches.access(0, {0, 3, 3}), logic_error);
  EXPECT_THROW(caches.access(4, {0, 0, 3}), logic_error);
  EXPECT_THROW(per_layer_cache<lru>(3, 4, 5), logic_error);
  EXPECT_THROW(per_layer_cache<lru>(0, 4, 1), logic_error);
  per_layer_cache<fifo> uniform(2, 8, 8);
  EXPECT_EQ(uniform.total_capacity(), 16);
}

}  // namespace
