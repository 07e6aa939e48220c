// SPDX-License-Identifier: Apache-2.0
// pager<Policy> beyond the vLLM port: construction checks, bad input (clear errors naming the
// values, nothing changed), the empty batch, per-layer capacities, the global pool, resizing,
// randomised invariants over many prepares, and the host expert store.
#include "cache/broken_policy.hpp"
#include "support/expect_error.hpp"

#include <wisp/cache/policies.hpp>
#include <wisp/pager/host_expert_store.hpp>
#include <wisp/pager/pager.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace wisp {
namespace {

using test::expect_error;

static_assert(std::is_trivially_copyable_v<prepare_result>);
static_assert(std::is_trivially_copyable_v<copy_op>);
static_assert(topk_id<std::int32_t> && topk_id<std::int64_t> && !topk_id<std::uint32_t>);

TEST(pager, construction_checks_name_the_values) {
  expect_error([] { pager<lru> p({.layers = 1, .experts = 8, .top_k = 4, .capacity = 3}); },
               "capacity 3", "top_k = 4");
  expect_error([] { pager<lru> p({.layers = 1, .experts = 8, .top_k = 2, .capacity = 9}); },
               "capacity 9", "experts = 8");
  expect_error([] { pager<lru> p({.layers = 0, .experts = 8, .top_k = 2, .capacity = 4}); },
               "layers must be >= 1, got 0");
  expect_error(
      [] {
        pager<lru> p(
            {.layers = 2, .experts = 8, .top_k = 2, .capacity = 4, .layer_capacities = {4, 4, 4}});
      },
      "3 entries for 2 layers");
  expect_error(
      [] {
        pager<lru> p(
            {.layers = 2, .experts = 8, .top_k = 2, .capacity = 4, .layer_capacities = {4, 1}});
      },
      "capacity 1 of layer 1");
  expect_error(
      [] {
        pager<lru> p(
            {.layers = 2, .experts = 8, .top_k = 2, .capacity = 17, .scope = cache_scope::global});
      },
      "capacity 17", "layers * experts = 16");
  // Edge capacities: == k and == E are fine.
  pager<lru> at_k({.layers = 1, .experts = 8, .top_k = 8, .capacity = 8});
  EXPECT_EQ(at_k.capacity(0), 8);
}

TEST(pager, per_layer_capacities) {
  pager<lru> p(
      {.layers = 3, .experts = 8, .top_k = 1, .capacity = 2, .layer_capacities = {1, 4, 8}});
  EXPECT_EQ(p.capacity(0), 1);
  EXPECT_EQ(p.capacity(1), 4);
  EXPECT_EQ(p.capacity(2), 8);
  const std::vector<std::int32_t> four = {0, 1, 2, 3};
  EXPECT_THROW((void)p.prepare(0, four, 4, 1), logic_error);
  EXPECT_EQ(p.prepare(1, four, 4, 1).misses, 4);
}

class pager_bad_input : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::vector<std::int32_t> warm = {1, 2, 3, 1};
    (void)p.prepare(1, warm, 2, 2);
    map_before.assign(p.expert_map(1).begin(), p.expert_map(1).end());
    stats_before = p.stats();
  }
  void expect_unchanged() {
    EXPECT_EQ(p.stats(), stats_before);
    EXPECT_EQ(std::vector<std::int32_t>(p.expert_map(1).begin(), p.expert_map(1).end()),
              map_before);
    for (const std::int32_t e : {1, 2, 3}) {
      EXPECT_EQ(p.slot_of(1, e), map_before[static_cast<std::size_t>(e)]);
    }
    EXPECT_TRUE(p.cache(1).invariants_hold());
  }
  pager<lfru> p{{.layers = 2, .experts = 8, .top_k = 2, .capacity = 4}};
  std::vector<std::int32_t> map_before;
  cache_stats stats_before;
};

TEST_F(pager_bad_input, expert_id_out_of_range) {
  const std::vector<std::int32_t> ids = {0, 4, 5, 8};
  expect_error([&] { (void)p.prepare(1, ids, 2, 2); }, "topk_ids[3] (token 1, position 1) = 8",
               "[0, experts = 8)");
  expect_unchanged();
}

TEST_F(pager_bad_input, negative_id) {
  const std::vector<std::int64_t> ids = {0, -1};
  expect_error([&] { (void)p.prepare(1, ids, 1, 2); }, "topk_ids[1]", "= -1");
  expect_unchanged();
}

TEST_F(pager_bad_input, huge_int64_id) {
  const std::vector<std::int64_t> ids = {0, std::int64_t{1} << 40};
  expect_error([&] { (void)p.prepare(1, ids, 1, 2); }, "= 1099511627776");
  expect_unchanged();
}

TEST_F(pager_bad_input, layer_out_of_range) {
  const std::vector<std::int32_t> ids = {0, 1};
  expect_error([&] { (void)p.prepare(2, ids, 1, 2); }, "layer 2", "[0, layers = 2)");
  expect_error([&] { (void)p.prepare(-1, ids, 1, 2); }, "layer -1");
  expect_error([&] { (void)p.plan_token_groups(5, ids, 1, 2); }, "layer 5");
  expect_unchanged();
}

TEST_F(pager_bad_input, shape_mismatch) {
  const std::vector<std::int32_t> ids = {0, 1, 2};
  expect_error([&] { (void)p.prepare(1, ids, 2, 2); }, "holds 3 ids", "2 * 2 = 4");
  expect_error([&] { (void)p.prepare(1, ids, -1, 2); }, "tokens must be >= 0, got -1");
  expect_error([&] { (void)p.prepare(1, ids, 3, 0); }, "k must be >= 1, got 0");
  expect_unchanged();
}

TEST_F(pager_bad_input, too_many_distinct_experts) {
  const std::vector<std::int32_t> ids = {0, 4, 5, 6, 7, 0};
  expect_error([&] { (void)p.prepare(1, ids, 3, 2); }, "layer 1",
               "5 distinct experts requested but capacity is 4", "plan_token_groups");
  expect_unchanged();
}

// Empty batch: valid, no error; nothing accessed, empty plan, every expert hidden.
TEST(pager, empty_batch_is_an_empty_result) {
  pager<lru> p({.layers = 1, .experts = 8, .top_k = 2, .capacity = 4});
  const std::vector<std::int32_t> warm = {1, 2};
  (void)p.prepare(0, warm, 1, 2);
  const prepare_result r = p.prepare(0, std::span<const std::int32_t>{}, 0, 2);
  EXPECT_EQ(r.hits, 0);
  EXPECT_EQ(r.misses, 0);
  EXPECT_TRUE(r.copy_plan.empty());
  EXPECT_TRUE(r.experts.empty());
  EXPECT_TRUE(
      std::all_of(r.expert_map.begin(), r.expert_map.end(), [](auto s) { return s == -1; }));
  EXPECT_EQ(p.stats().accesses, 2u);
  EXPECT_GE(p.slot_of(0, 1), 0);  // still resident, just not visible
}

TEST(pager, duplicates_within_and_across_rows_count_once) {
  pager<lru> p({.layers = 1, .experts = 8, .top_k = 3, .capacity = 4});
  const std::vector<std::int64_t> ids = {5, 5, 1, 1, 5, 7};
  const prepare_result r = p.prepare(0, ids, 2, 3);
  EXPECT_EQ(std::vector<std::int32_t>(r.experts.begin(), r.experts.end()),
            (std::vector<std::int32_t>{5, 1, 7}));
  EXPECT_EQ(r.misses, 3);
  EXPECT_EQ(p.stats().accesses, 3u);
}

/// `lru` whose second whole-call victim is a key of the call itself (protected: a broken
/// contract), so the call fails after its first miss took a slot.
using victim_in_call = test::corrupt_on_call<test::bad_victim::protected_key>;

/// `fifo` (one access at a time) that never finds a victim although one exists.
class no_victim : public fifo {
 public:
  static constexpr std::string_view name = "no_victim";
  [[nodiscard]] cache_key victim(const access_context& /*ctx*/,
                                 protected_keys /*is_protected*/) const noexcept {
    return no_key;
  }
};
static_assert(eviction_policy<no_victim> && !call_eviction_policy<no_victim>);

// A policy breaking its contract fails the call: the layer's experts keep their slots, no miss
// is counted (a per-access policy's hit before the failing miss stands), and the layer shows no
// expert (not the slots of misses the cache has undone); other layers are untouched.
template <class Policy>
void expect_broken_policy_leaves_the_cache_and_hides_the_layer() {
  pager<Policy> p({.layers = 2, .experts = 8, .top_k = 3, .capacity = 3});
  (void)p.prepare(1, std::vector<std::int32_t>{5, 6, 7}, 1, 3);
  (void)p.prepare(0, std::vector<std::int32_t>{0, 1, 2}, 1, 3);  // layer 0 is full
  const std::vector<std::int32_t> slots = {p.slot_of(0, 0), p.slot_of(0, 1), p.slot_of(0, 2)};
  const cache_stats before = p.stats(0);
  // 0 hits; 3 and 4 miss and need two victims.
  EXPECT_THROW((void)p.prepare(0, std::vector<std::int32_t>{0, 3, 4}, 1, 3), logic_error);
  const std::span<const std::int32_t> map = p.expert_map(0);
  EXPECT_TRUE(std::all_of(map.begin(), map.end(), [](std::int32_t s) { return s == -1; }));
  EXPECT_EQ((std::vector<std::int32_t>{p.slot_of(0, 0), p.slot_of(0, 1), p.slot_of(0, 2)}), slots);
  EXPECT_EQ(p.slot_of(0, 3), -1);
  EXPECT_EQ(p.slot_of(0, 4), -1);
  cache_stats want = before;
  if constexpr (!call_eviction_policy<Policy>) {
    ++want.accesses;  // expert 0's hit
    ++want.hits;
  }
  EXPECT_EQ(p.stats(0), want);
  for (const std::int32_t expert : {5, 6, 7}) {
    EXPECT_GE(p.expert_map(1)[static_cast<std::size_t>(expert)], 0);
  }
}

TEST(pager, broken_policy_leaves_the_cache_and_hides_the_layer) {
  expect_broken_policy_leaves_the_cache_and_hides_the_layer<victim_in_call>();
  expect_broken_policy_leaves_the_cache_and_hides_the_layer<no_victim>();
}

TEST(pager, results_of_other_layers_stay_valid) {
  pager<lru> p({.layers = 2, .experts = 8, .top_k = 1, .capacity = 2});
  const std::vector<std::int32_t> a = {3};
  const std::vector<std::int32_t> b = {4};
  const prepare_result ra = p.prepare(0, a, 1, 1);
  const std::int32_t slot = ra.expert_map[3];
  (void)p.prepare(1, b, 1, 1);
  EXPECT_EQ(ra.expert_map[3], slot);
  EXPECT_EQ(ra.expert_map[4], -1);
  ASSERT_EQ(ra.copy_plan.size(), 1u);
  EXPECT_EQ(ra.copy_plan[0], (copy_op{3, slot}));
}

TEST(pager, steps_reach_the_policy) {
  pager<least_stale> p({.layers = 1, .experts = 8, .top_k = 1, .capacity = 2});
  const std::vector<std::int32_t> a = {0};
  const std::vector<std::int32_t> b = {1};
  (void)p.prepare(0, a, 1, 1);
  p.begin_step();
  EXPECT_EQ(p.step(), 1u);
  (void)p.prepare(0, b, 1, 1);
  EXPECT_FALSE(p.cache(0).policy().is_current(0, 1));
  EXPECT_TRUE(p.cache(0).policy().is_current(1, 1));
}

TEST(pager, global_pool_shares_slots_across_layers) {
  pager<lru> p(
      {.layers = 3, .experts = 4, .top_k = 2, .capacity = 4, .scope = cache_scope::global});
  const std::vector<std::int32_t> ids = {0, 1};
  std::set<std::int32_t> slots;
  for (std::int32_t l = 0; l < 2; ++l) {
    const prepare_result r = p.prepare(l, ids, 1, 2);
    EXPECT_EQ(r.misses, 2);
    slots.insert(r.expert_map[0]);
    slots.insert(r.expert_map[1]);
  }
  EXPECT_EQ(slots.size(), 4u);  // (layer 0, 0), (0, 1), (1, 0), (1, 1) in distinct pool slots
  const prepare_result r = p.prepare(2, ids, 1, 2);  // evicts layer 0's experts (LRU)
  EXPECT_EQ(r.misses, 2);
  EXPECT_EQ(p.slot_of(0, 0), -1);
  EXPECT_EQ(p.slot_of(0, 1), -1);
  EXPECT_EQ(p.capacity(1), 4);
  EXPECT_EQ(&p.cache(0), &p.cache(2));
  EXPECT_THROW((void)p.resize_layer(0, 4), logic_error);
}

TEST(pager, resize_layer_moves_slots_and_keeps_the_current_map_true) {
  pager<lru> p({.layers = 2, .experts = 16, .top_k = 2, .capacity = 8});
  host_expert_store store(16, 8, 16);
  store.fill_pattern(9);
  for (const std::vector<std::int32_t>& ids :
       {std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 7}, std::vector<std::int32_t>{8, 9}}) {
    store.apply(p.prepare(0, ids, static_cast<std::int32_t>(ids.size()) / 2, 2).copy_plan);
  }
  const resize_report report = p.resize_layer(0, 3);
  store.apply(report.moves);
  EXPECT_EQ(p.capacity(0), 3);
  EXPECT_EQ(p.cache(0).size(), 3);
  const auto map = p.expert_map(0);
  for (const std::int32_t e : {8, 9}) {  // the current call's experts survive, at valid slots
    ASSERT_GE(map[static_cast<std::size_t>(e)], 0);
    EXPECT_LT(map[static_cast<std::size_t>(e)], 3);
    EXPECT_EQ(map[static_cast<std::size_t>(e)], p.slot_of(0, e));
    EXPECT_TRUE(store.slot_holds(map[static_cast<std::size_t>(e)], e));
  }
  EXPECT_THROW((void)p.resize_layer(0, 1), logic_error);  // below top_k
  EXPECT_EQ(p.resize_layer(0, 8).evicted.size(), 0u);     // growing evicts nothing
  EXPECT_THROW((void)p.resize_pool(4), logic_error);      // per-layer scope
}

TEST(pager, resize_pool_hides_evicted_experts_of_other_layers) {
  pager<lru> p(
      {.layers = 2, .experts = 4, .top_k = 1, .capacity = 4, .scope = cache_scope::global});
  const std::vector<std::int32_t> a = {0, 1};
  const std::vector<std::int32_t> b = {2, 3};
  (void)p.prepare(0, a, 2, 1);
  (void)p.prepare(1, b, 2, 1);
  (void)p.resize_pool(2);  // layer 1's call is protected; layer 0's experts go
  EXPECT_EQ(p.expert_map(0)[0], -1);
  EXPECT_EQ(p.expert_map(0)[1], -1);
  EXPECT_EQ(p.expert_map(1)[2], p.slot_of(1, 2));
  EXPECT_GE(p.expert_map(1)[3], 0);
}

// Randomised invariants over many prepares, every policy but belady (which needs its future):
// the map shows exactly the call's experts at distinct slots, each slot's bytes are right after
// applying the plan, hits + misses == distinct experts, and the plan is exactly the misses.
template <class P>
class pager_random : public ::testing::Test {};
using online_policies = ::testing::Types<lru, fifo, lfu, lfru, fld, least_stale>;
struct names {
  template <class P>
  static std::string GetName(int) {
    return std::string(policy_name<P>());
  }
};
TYPED_TEST_SUITE(pager_random, online_policies, names);

TYPED_TEST(pager_random, invariants_hold_over_many_prepares) {
  constexpr std::int32_t layers = 4;
  constexpr std::int32_t experts = 32;
  constexpr std::int32_t k = 4;
  pager<TypeParam> p({.layers = layers,
                      .experts = experts,
                      .top_k = k,
                      .capacity = 8,
                      .layer_capacities = {4, 6, 8, 12}});
  host_expert_store store(layers * experts, layers * 12, 24);
  store.fill_pattern(3);
  std::mt19937 rng(1234);
  std::uint64_t distinct_total = 0;
  for (std::int32_t call = 0; call < 3000; ++call) {
    const std::int32_t layer = call % layers;
    if (layer == 0) {
      p.begin_step();
    }
    const std::int32_t cap = p.capacity(layer);
    const std::int32_t tokens = static_cast<std::int32_t>(rng() % 4);
    std::vector<std::int64_t> ids;
    std::set<std::int32_t> u;
    for (std::int32_t i = 0; i < tokens * k; ++i) {
      std::int32_t e = static_cast<std::int32_t>(rng() % (rng() % 3 == 0 ? experts : 10));
      if (static_cast<std::int32_t>(u.size()) == cap && u.count(e) == 0) {
        e = *u.begin();  // keep the union within the capacity
      }
      u.insert(e);
      ids.push_back(e);
    }
    const prepare_result r = p.prepare(layer, ids, tokens, k);
    distinct_total += u.size();
    ASSERT_EQ(r.hits + r.misses, static_cast<std::int32_t>(u.size()));
    ASSERT_EQ(r.copy_plan.size(), static_cast<std::size_t>(r.misses));
    std::vector<copy_op> plan;
    for (const copy_op& op : r.copy_plan) {
      plan.push_back({layer * experts + op.expert, layer * 12 + op.slot});
    }
    store.apply(plan);
    std::set<std::int32_t> slots;
    for (std::int32_t e = 0; e < experts; ++e) {
      const std::int32_t s = r.expert_map[static_cast<std::size_t>(e)];
      if (u.count(e) == 0) {
        ASSERT_EQ(s, -1);
        continue;
      }
      ASSERT_GE(s, 0);
      ASSERT_LT(s, cap);
      ASSERT_TRUE(slots.insert(s).second);
      ASSERT_TRUE(store.slot_holds(layer * 12 + s, layer * experts + e))
          << "call " << call << " layer " << layer << " expert " << e;
    }
  }
  EXPECT_EQ(p.stats().accesses, distinct_total);
  EXPECT_EQ(p.stats().hits + p.stats().misses, distinct_total);
}

TEST(host_expert_store, apply_validates_before_copying) {
  host_expert_store store(4, 2, 8);
  store.fill_pattern();
  const std::vector<copy_op> plan = {{1, 0}, {2, 5}};
  expect_error([&] { store.apply(plan); }, "plan[1] = {expert 2, slot 5}");
  EXPECT_FALSE(store.slot_holds(0, 1));  // nothing copied
  store.apply(std::span<const copy_op>(plan.data(), 1));
  EXPECT_TRUE(store.slot_holds(0, 1));
  for (std::int32_t a = 0; a < 4; ++a) {
    for (std::int32_t b = a + 1; b < 4; ++b) {
      EXPECT_FALSE(
          std::equal(store.master(a).begin(), store.master(a).end(), store.master(b).begin()));
    }
  }
  EXPECT_THROW(host_expert_store(0, 1, 1), logic_error);
  EXPECT_THROW((void)store.master(4), logic_error);
}

}  // namespace
}  // namespace wisp
