// SPDX-License-Identifier: Apache-2.0
// Every policy against a brute-force reference of its documented rule, on random streams: the same
// hit/miss sequence, the same victims, the same collision flags. Belady is never beaten.
#include "cache/reference.hpp"

#include <wisp/cache/policies.hpp>

#include <gtest/gtest.h>

#include <list>
#include <random>
#include <vector>

namespace {

using namespace wisp;
using wisp::test::flatten;
using wisp::test::keys_of;
using wisp::test::make_policy;
using wisp::test::random_calls;
using wisp::test::reference_cache;
using wisp::test::rule_of;

template <class P>
class PolicyOracle : public ::testing::Test {};

using all_policies =
    ::testing::Types<lru, fifo, lfu, lfu_history, lfru, fld, least_stale, learned_belady, belady>;
TYPED_TEST_SUITE(PolicyOracle, all_policies, wisp::test::policy_names);

struct oracle_case {
  std::int32_t layers, experts, k, capacity;
  std::uint32_t steps;
};

// Global scope, calls of k distinct experts per (step, layer), as SpecMD replays.
TYPED_TEST(PolicyOracle, GlobalScopeCallsMatchReference) {
  const oracle_case cases[] = {{4, 8, 2, 3, 40},  {4, 8, 2, 8, 40},   {6, 16, 4, 12, 30},
                               {3, 5, 3, 15, 20}, {8, 16, 2, 20, 40}, {2, 4, 1, 1, 50},
                               {5, 10, 3, 4, 40}, {16, 8, 2, 40, 20}};
  std::mt19937_64 rng(1234);
  for (const oracle_case& c : cases) {
    for (int rep = 0; rep < 3; ++rep) {
      const auto calls = random_calls(rng, c.layers, c.experts, c.k, c.steps);
      const auto accesses = flatten(calls);
      const key_layout layout = key_layout{cache_scope::global, c.layers, c.experts};
      const std::int32_t capacity = std::min(c.capacity, layout.size());
      slot_cache<TypeParam> cache(layout, capacity, make_policy<TypeParam>(keys_of(accesses)));
      reference_cache ref(rule_of<TypeParam>(), layout, capacity, keys_of(accesses));
      std::uint64_t t = 0;
      std::vector<access_result> out(static_cast<std::size_t>(c.k));
      std::vector<access_result> expected;
      for (const auto& call : calls) {
        const access_context ctx{call.step, call.layer, t};
        cache.access_call(call.keys, ctx, out);
        ref.access_call(call.keys, ctx, expected);
        for (std::size_t i = 0; i < call.keys.size(); ++i) {
          ASSERT_EQ(out[i].hit, expected[i].hit) << "time " << t + i << " key " << call.keys[i];
          ASSERT_EQ(out[i].evicted, expected[i].evicted)
              << "time " << t + i << " key " << call.keys[i] << " L=" << c.layers
              << " E=" << c.experts << " cap=" << capacity;
          ASSERT_EQ(out[i].collision, expected[i].collision) << "time " << t + i;
          ASSERT_EQ(cache.key_in_slot(out[i].slot), call.keys[i]);
        }
        t += call.keys.size();
      }
      ASSERT_TRUE(cache.invariants_hold());
    }
  }
}

// Single accesses at random layers and keys (each access its own call), steps advancing
// irregularly: exercises orders the layer-sequential stream never reaches.
TYPED_TEST(PolicyOracle, RandomSingleAccessesMatchReference) {
  std::mt19937_64 rng(99);
  for (int rep = 0; rep < 12; ++rep) {
    const std::int32_t layers = 1 + static_cast<std::int32_t>(rng() % 6);
    const std::int32_t experts = 1 + static_cast<std::int32_t>(rng() % 8);
    const key_layout layout = key_layout{cache_scope::global, layers, experts};
    const std::int32_t capacity = 1 + static_cast<std::int32_t>(rng() % layout.size());
    std::vector<test::stream_access> accesses;
    std::uint32_t step = 0;
    // learned_belady's reference replays the whole history per decision: a shorter stream.
    const std::uint64_t length = std::is_same_v<TypeParam, learned_belady> ? 500 : 3000;
    for (std::uint64_t t = 0; t < length; ++t) {
      if (rng() % 10 == 0)
        ++step;
      const auto key = static_cast<cache_key>(rng() % static_cast<std::uint64_t>(layout.size()));
      // the executing layer is the key's own layer most of the time, a random one otherwise
      const std::int32_t layer =
          rng() % 4 == 0 ? static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(layers))
                         : key / experts;
      accesses.push_back({step, layer, key, t});
    }
    slot_cache<TypeParam> cache(layout, capacity, make_policy<TypeParam>(keys_of(accesses)));
    reference_cache ref(rule_of<TypeParam>(), layout, capacity, keys_of(accesses));
    for (const auto& a : accesses) {
      const access_context ctx{a.step, a.layer, a.time};
      cache.begin_call(ctx);
      ref.begin_call(a.step, a.layer);
      const access_result got = cache.access(a.key, ctx);
      const access_result want = ref.access(a.key, ctx);
      ASSERT_EQ(got.hit, want.hit) << "time " << a.time;
      ASSERT_EQ(got.evicted, want.evicted) << "time " << a.time << " cap " << capacity;
      ASSERT_EQ(got.collision, want.collision) << "time " << a.time;
    }
  }
}

// Large global caches with skewed streams: many residents with many distinct counts, so that
// lfru's walk over its frequency classes (and its early stop) is exercised against the full scan
// of the reference; the LFUs come along.
template <class P>
void large_global_cache_matches_reference() {
  std::mt19937_64 rng(77);
  for (const std::int32_t capacity : {40, 150, 400}) {
    const auto calls = random_calls(rng, 16, 32, 6, 60);
    const key_layout layout = key_layout{cache_scope::global, 16, 32};
    slot_cache<P> cache(layout, capacity);
    reference_cache ref(rule_of<P>(), layout, capacity);
    std::uint64_t t = 0;
    std::vector<access_result> out(6);
    std::vector<access_result> expected;
    for (const auto& call : calls) {
      const access_context ctx{call.step, call.layer, t};
      cache.access_call(call.keys, ctx, out);
      ref.access_call(call.keys, ctx, expected);
      for (std::size_t i = 0; i < call.keys.size(); ++i) {
        ASSERT_EQ(out[i].evicted, expected[i].evicted)
            << policy_name<P>() << " capacity " << capacity << " time " << t + i;
      }
      t += call.keys.size();
    }
  }
}

TEST(PolicyOracleLarge, FrequencyPoliciesInLargeGlobalCaches) {
  large_global_cache_matches_reference<lfru>();
  large_global_cache_matches_reference<lfu>();
  large_global_cache_matches_reference<lfu_history>();
}

// Per-layer scope through per_layer_cache: each layer's cache against its own reference.
TYPED_TEST(PolicyOracle, PerLayerScopeMatchesReference) {
  std::mt19937_64 rng(7);
  const std::int32_t layers = 5, experts = 12, k = 3;
  const auto calls = random_calls(rng, layers, experts, k, 60, /*per_layer_keys=*/true);
  const auto accesses = flatten(calls);
  std::vector<std::vector<cache_key>> sub_keys(layers);
  std::vector<std::vector<std::uint64_t>> sub_times(layers);
  for (const auto& a : accesses) {
    sub_keys[static_cast<std::size_t>(a.layer)].push_back(a.key);
    sub_times[static_cast<std::size_t>(a.layer)].push_back(a.time);
  }
  const std::vector<std::int32_t> capacities = {3, 4, 5, 7, 12};
  per_layer_cache<TypeParam> caches(capacities, experts, [&](std::int32_t l) {
    return make_policy<TypeParam>(sub_keys[static_cast<std::size_t>(l)],
                                  sub_times[static_cast<std::size_t>(l)]);
  });
  std::vector<reference_cache> refs;
  for (std::int32_t l = 0; l < layers; ++l) {
    refs.emplace_back(rule_of<TypeParam>(), key_layout{cache_scope::per_layer, layers, experts},
                      capacities[static_cast<std::size_t>(l)],
                      sub_keys[static_cast<std::size_t>(l)],
                      sub_times[static_cast<std::size_t>(l)]);
  }
  std::uint64_t t = 0;
  std::vector<access_result> out(k), expected;
  for (const auto& call : calls) {
    const access_context ctx{call.step, call.layer, t};
    caches.access_call(call.keys, ctx, out);
    refs[static_cast<std::size_t>(call.layer)].access_call(call.keys, ctx, expected);
    for (std::size_t i = 0; i < call.keys.size(); ++i) {
      ASSERT_EQ(out[i].hit, expected[i].hit) << "time " << t + i;
      ASSERT_EQ(out[i].evicted, expected[i].evicted) << "time " << t + i;
    }
    t += call.keys.size();
  }
  const cache_stats s = caches.stats();
  EXPECT_EQ(s.accesses, accesses.size());
  EXPECT_EQ(s.hits + s.misses, s.accesses);
}

// Belady has no more misses than this policy on any tested stream (same protection).
TYPED_TEST(PolicyOracle, BeladyNeverLoses) {
  std::mt19937_64 rng(2024);
  for (int rep = 0; rep < 20; ++rep) {
    const std::int32_t layers = 2 + static_cast<std::int32_t>(rng() % 6);
    const std::int32_t experts = 4 + static_cast<std::int32_t>(rng() % 12);
    const std::int32_t k = 1 + static_cast<std::int32_t>(rng() % 3);
    const auto calls = random_calls(rng, layers, experts, k, 30);
    const auto accesses = flatten(calls);
    const key_layout layout = key_layout{cache_scope::global, layers, experts};
    const std::int32_t capacity =
        k + static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(layout.size() - k + 1));
    slot_cache<TypeParam> cache(layout, capacity, make_policy<TypeParam>(keys_of(accesses)));
    slot_cache<belady> best(layout, capacity, belady(keys_of(accesses)));
    std::uint64_t t = 0;
    std::vector<access_result> out(static_cast<std::size_t>(k));
    for (const auto& call : calls) {
      cache.access_call(call.keys, {call.step, call.layer, t}, out);
      best.access_call(call.keys, {call.step, call.layer, t}, out);
      t += call.keys.size();
    }
    EXPECT_LE(best.stats().misses, cache.stats().misses)
        << policy_name<TypeParam>() << " L=" << layers << " E=" << experts << " k=" << k
        << " cap=" << capacity;
  }
}

// LRU against the textbook std::list implementation.
TEST(LruOracle, MatchesStdListLru) {
  std::mt19937_64 rng(5);
  for (std::int32_t key_space : {1, 2, 7, 64}) {
    for (std::int32_t capacity = 1; capacity <= key_space; capacity += 1 + key_space / 5) {
      slot_cache<lru> cache(key_space, capacity);
      std::list<cache_key> order;  // front = most recent
      for (std::uint64_t t = 0; t < 20000; ++t) {
        const auto key = static_cast<cache_key>(rng() % static_cast<std::uint64_t>(key_space));
        const access_context ctx{0, 0, t};
        cache.begin_call(ctx);
        const access_result r = cache.access(key, ctx);
        const auto it = std::find(order.begin(), order.end(), key);
        const bool hit = it != order.end();
        cache_key evicted = no_key;
        if (hit) {
          order.erase(it);
        } else if (static_cast<std::int32_t>(order.size()) == capacity) {
          evicted = order.back();
          order.pop_back();
        }
        order.push_front(key);
        ASSERT_EQ(r.hit, hit);
        ASSERT_EQ(r.evicted, evicted);
      }
    }
  }
}

}  // namespace
