// SPDX-License-Identifier: Apache-2.0
// The eviction_policy concept: models and anti-models, and a user-written policy in a slot_cache.
#include <wisp/cache/policies.hpp>
#include <wisp/core/ids.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace {

using namespace wisp;

static_assert(eviction_policy<lru>);
static_assert(eviction_policy<fifo>);
static_assert(eviction_policy<lfu>);
static_assert(eviction_policy<lfu_history>);
static_assert(eviction_policy<lfru>);
static_assert(eviction_policy<fld>);
static_assert(eviction_policy<least_stale>);
static_assert(eviction_policy<belady>);

/// A user policy: evict the largest unprotected resident key.
class evict_largest {
 public:
  void reset(const key_layout& layout) {
    resident_.assign(static_cast<std::size_t>(layout.size()), false);
  }
  void on_insert(cache_key key, const access_context&) {
    resident_[static_cast<std::size_t>(key)] = true;
  }
  void on_hit(cache_key, const access_context&) {}
  void on_erase(cache_key key) { resident_[static_cast<std::size_t>(key)] = false; }
  cache_key victim(const access_context&, protected_keys is_protected) const {
    for (auto k = static_cast<cache_key>(resident_.size()); k-- > 0;) {
      if (resident_[static_cast<std::size_t>(k)] && !is_protected(k))
        return k;
    }
    return no_key;
  }

 private:
  std::vector<bool> resident_;
};
static_assert(eviction_policy<evict_largest>);

// Anti-models.
struct no_victim {
  void reset(const key_layout&);
  void on_insert(cache_key, const access_context&);
  void on_hit(cache_key, const access_context&);
  void on_erase(cache_key);
};
static_assert(!eviction_policy<no_victim>);

struct victim_returns_strong_id {
  void reset(const key_layout&);
  void on_insert(cache_key, const access_context&);
  void on_hit(cache_key, const access_context&);
  void on_erase(cache_key);
  expert_id victim(const access_context&, protected_keys);
};
static_assert(!eviction_policy<victim_returns_strong_id>);

struct takes_no_protection {
  void reset(const key_layout&);
  void on_insert(cache_key, const access_context&);
  void on_hit(cache_key, const access_context&);
  void on_erase(cache_key);
  cache_key victim(const access_context&);
};
static_assert(!eviction_policy<takes_no_protection>);

struct not_movable : evict_largest {
  not_movable() = default;
  not_movable(not_movable&&) = delete;
};
static_assert(!eviction_policy<not_movable>);
static_assert(!eviction_policy<int>);

static_assert(policy_name<lru>() == "lru");
static_assert(policy_name<least_stale>() == "least_stale");
static_assert(policy_name<evict_largest>() == "custom");

TEST(EvictionPolicyConcept, UserPolicyDrivesASlotCache) {
  slot_cache<evict_largest> cache(8, 2);
  cache.access(3, {0, 0, 0});
  cache.access(5, {1, 0, 1});
  EXPECT_EQ(cache.access(1, {2, 0, 2}).evicted, 5);
  EXPECT_EQ(cache.access(7, {3, 0, 3}).evicted, 3);
}

TEST(EvictionPolicyConcept, MisbehavingPolicyIsReported) {
  struct bad {
    void reset(const key_layout&) {}
    void on_insert(cache_key, const access_context&) {}
    void on_hit(cache_key, const access_context&) {}
    void on_erase(cache_key) {}
    cache_key victim(const access_context&, protected_keys) { return 6; }  // not resident
  };
  slot_cache<bad> cache(8, 1);
  cache.access(0, {0, 0, 0});
  EXPECT_THROW(cache.access(1, {1, 0, 1}), logic_error);
  EXPECT_TRUE(cache.contains(0));
  EXPECT_TRUE(cache.invariants_hold());
}

TEST(ProtectSet, GenerationsClearInConstantTime) {
  protect_set set(4);
  EXPECT_FALSE(set.view()(2));
  EXPECT_TRUE(set.insert(2));
  EXPECT_FALSE(set.insert(2));
  EXPECT_TRUE(set.view()(2));
  set.clear();
  EXPECT_FALSE(set.contains(2));
  EXPECT_FALSE(protected_keys{}(0));
}

TEST(ProtectSet, AssignReturnsTheDistinctKeysInFirstSeenOrder) {
  protect_set set(16);
  std::mt19937 rng(3);
  for (int round = 0; round < 200; ++round) {
    std::vector<cache_key> keys(rng() % 12);
    for (auto& k : keys) {
      k = static_cast<cache_key>(rng() % 16);
    }
    std::vector<cache_key> expected;  // oracle: first occurrences, in order
    for (const cache_key k : keys) {
      if (std::find(expected.begin(), expected.end(), k) == expected.end()) {
        expected.push_back(k);
      }
    }
    const auto got = set.assign(keys);
    EXPECT_EQ(std::vector<cache_key>(got.begin(), got.end()), expected);
    for (cache_key k = 0; k < 16; ++k) {  // exactly the assigned keys are in the set
      EXPECT_EQ(set.contains(k), std::find(keys.begin(), keys.end(), k) != keys.end());
    }
  }
}

TEST(KeyLayout, DecodesKeys) {
  constexpr key_layout g = key_layout{cache_scope::global, 3, 5};
  static_assert(g.size() == 15 && g.layer_of(11, 0) == 2 && g.key_of(2, 1) == 11);
  constexpr key_layout p = key_layout{cache_scope::per_layer, 3, 5};
  static_assert(p.size() == 5 && p.layer_of(4, 2) == 2 && p.key_of(2, 4) == 4);
  EXPECT_THROW((key_layout{cache_scope::global, 70000, 70000}.validate()), logic_error);
}

}  // namespace
