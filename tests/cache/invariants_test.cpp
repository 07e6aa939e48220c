// SPDX-License-Identifier: Apache-2.0
// Randomised invariant tests over every policy: millions of operations (calls, single accesses,
// invalidations, resizes) with the structural invariants checked after each one.
#include "cache/reference.hpp"

#include <wisp/cache/policies.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

namespace {

using namespace wisp;
using wisp::test::make_policy;
using wisp::test::snapshot;

enum class op_kind { call, single, invalidate, resize };
struct op {
  op_kind kind;
  std::uint32_t step;
  std::int32_t layer;
  std::vector<cache_key> keys;  // call / single / invalidate
  std::int32_t capacity = 0;    // resize
};

// Generates a feasible random program: every call fits the capacity in force and every shrink
// keeps at least the last call's keys (which are protected), so the access sequence is known in
// advance (Belady needs it).
std::vector<op> random_program(std::mt19937_64& rng, key_layout layout, std::int32_t capacity,
                               std::size_t count, std::vector<cache_key>& accessed) {
  std::vector<op> ops;
  std::uint32_t step = 0;
  std::int32_t layer = 0;
  std::size_t last_call = 1;
  const auto n = static_cast<std::uint64_t>(layout.size());
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t r = rng() % 100;
    if (r < 30) {
      layer = (layer + 1) % layout.layers;
      if (layer == 0)
        ++step;
    }
    if (r < 70) {
      const std::size_t k = 1 + rng() % static_cast<std::uint64_t>(std::min(capacity, 6));
      op o{op_kind::call, step, layer, {}};
      std::set<cache_key> distinct;
      while (o.keys.size() < k + rng() % 2) {  // sometimes one duplicate
        const auto key = static_cast<cache_key>(rng() % n);
        if (distinct.size() < k || distinct.count(key) > 0) {
          distinct.insert(key);
          o.keys.push_back(key);
        }
      }
      last_call = distinct.size();
      accessed.insert(accessed.end(), o.keys.begin(), o.keys.end());
      ops.push_back(std::move(o));
    } else if (r < 85) {
      const auto key = static_cast<cache_key>(rng() % n);
      ops.push_back({op_kind::single, step + 1, layer, {key}});  // its own call
      step += 1;
      last_call = 1;
      accessed.push_back(key);
    } else if (r < 95) {
      ops.push_back({op_kind::invalidate, step, layer, {static_cast<cache_key>(rng() % n)}});
    } else {
      const auto lo = static_cast<std::int32_t>(std::max<std::size_t>(last_call, 1));
      capacity = lo + static_cast<std::int32_t>(rng() %
                                                static_cast<std::uint64_t>(layout.size() - lo + 1));
      ops.push_back({op_kind::resize, step, layer, {}, capacity});
    }
  }
  return ops;
}

template <class P>
class CacheInvariants : public ::testing::Test {};
using all_policies =
    ::testing::Types<lru, fifo, lfu, lfu_history, lfru, fld, least_stale, learned_belady, belady>;
TYPED_TEST_SUITE(CacheInvariants, all_policies, wisp::test::policy_names);

TYPED_TEST(CacheInvariants, HoldUnderRandomOperations) {
  std::mt19937_64 rng(31337);
  std::size_t operations = 0;
  const key_layout layouts[] = {
      key_layout{cache_scope::global, 4, 8}, key_layout{cache_scope::per_layer, 3, 24},
      key_layout{cache_scope::global, 2, 3}, key_layout{cache_scope::per_layer, 2, 1}};
  for (const key_layout& layout : layouts) {
    for (int rep = 0; rep < 2; ++rep) {
      const auto capacity =
          1 + static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(layout.size()));
      std::vector<cache_key> accessed;
      const auto ops = random_program(rng, layout, capacity, 40000, accessed);
      slot_cache<TypeParam> cache(layout, capacity, make_policy<TypeParam>(accessed));
      std::vector<access_result> out(16);
      std::uint64_t t = 0;
      for (const op& o : ops) {
        const access_context ctx{o.step, o.layer, t};
        switch (o.kind) {
          case op_kind::call: {
            cache.access_call(o.keys, ctx, out);
            for (std::size_t i = 0; i < o.keys.size(); ++i) {
              ASSERT_EQ(cache.key_in_slot(out[i].slot), o.keys[i]);
              if (out[i].evicted != no_key) {
                ASSERT_EQ(std::count(o.keys.begin(), o.keys.end(), out[i].evicted), 0)
                    << "evicted a key of its own call";
                ASSERT_FALSE(cache.contains(out[i].evicted));
              }
            }
            for (const cache_key k : o.keys)
              ASSERT_TRUE(cache.contains(k));
            t += o.keys.size();
            break;
          }
          case op_kind::single: {
            const access_result r = cache.access(o.keys[0], ctx);
            ASSERT_EQ(cache.key_in_slot(r.slot), o.keys[0]);
            ASSERT_NE(r.evicted, o.keys[0]);
            t += 1;
            break;
          }
          case op_kind::invalidate: {
            const bool was = cache.contains(o.keys[0]);
            ASSERT_EQ(cache.invalidate(o.keys[0]), was);
            ASSERT_FALSE(cache.contains(o.keys[0]));
            break;
          }
          case op_kind::resize: {
            std::vector<cache_key> protected_resident;
            for (cache_key k = 0; k < cache.key_space(); ++k) {
              if (cache.contains(k) && cache.is_protected(k))
                protected_resident.push_back(k);
            }
            const auto old_size = cache.size();
            // an infeasible shrink first: must throw and change nothing
            if (!protected_resident.empty() && protected_resident.size() > 1) {
              const auto before = snapshot(cache);
              const auto too_small = static_cast<std::int32_t>(protected_resident.size()) - 1;
              if (too_small < old_size) {
                ASSERT_THROW((void)cache.resize(too_small, ctx), logic_error);
                ASSERT_EQ(snapshot(cache), before);
              }
            }
            const auto report = cache.resize(o.capacity, ctx);
            ASSERT_EQ(cache.capacity(), o.capacity);
            ASSERT_EQ(cache.size(), std::min(old_size, o.capacity));
            for (const cache_key k : protected_resident)
              ASSERT_TRUE(cache.contains(k));
            for (const cache_key k : report.evicted)
              ASSERT_FALSE(cache.contains(k));
            for (const slot_move& m : report.moves)
              ASSERT_EQ(cache.slot_of(m.key), m.to);
            break;
          }
        }
        ASSERT_TRUE(cache.invariants_hold());
        ASSERT_EQ(cache.size() + cache.free_count(), cache.capacity());
        ++operations;
      }
      const cache_stats& s = cache.stats();
      ASSERT_EQ(s.accesses, t);
      ASSERT_EQ(s.hits + s.misses, s.accesses);
      ASSERT_LE(s.collision_misses, s.misses);
    }
  }
  EXPECT_EQ(operations, 8u * 40000u);
}

}  // namespace
