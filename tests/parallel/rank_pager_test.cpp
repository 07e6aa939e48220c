// SPDX-License-Identifier: Apache-2.0
// One EP rank's residency: rank_expert_map's selection against a scan of the call, and
// rank_pager against a plain pager over the local ids it selects plus the global map composed by
// hand (vLLM's expert_map convention), on random calls; bad input refused with nothing changed.
#include "support/expect_error.hpp"

#include <wisp/cache/policies.hpp>
#include <wisp/parallel/placement.hpp>
#include <wisp/parallel/rank_pager.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace wisp {
namespace {

using test::expect_error;

// Distinct local ids of the pairs kept, first seen: the selection written as a scan.
std::vector<std::int32_t> scan(const expert_placement& p, std::int32_t rank, std::int32_t layer,
                               const std::vector<std::int32_t>& ids,
                               const std::vector<std::int32_t>* targets) {
  std::vector<std::int32_t> out;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::int32_t local = p.expert_map(rank, layer)[static_cast<std::size_t>(ids[i])];
    if (local >= 0 && (targets == nullptr || (*targets)[i] == rank) &&
        std::find(out.begin(), out.end(), local) == out.end()) {
      out.push_back(local);
    }
  }
  return out;
}

expert_placement two_replicas(std::int32_t layers, std::int32_t experts, std::int32_t ranks) {
  std::vector<std::vector<std::int32_t>> ranks_of;
  for (std::int32_t l = 0; l < layers; ++l) {
    for (std::int32_t e = 0; e < experts; ++e) {
      ranks_of.push_back({e % ranks, (e + 1 + l) % ranks});
      std::sort(ranks_of.back().begin(), ranks_of.back().end());
    }
  }
  return expert_placement::from_replica_ranks(layers, experts, ranks, experts, ranks_of);
}

TEST(rank_pager, matches_a_pager_over_the_selected_local_ids) {
  std::mt19937 rng(31);
  const std::int32_t layers = 3;
  const std::int32_t experts = 16;
  const std::int32_t ranks = 4;
  const expert_placement p = two_replicas(layers, experts, ranks);
  for (std::int32_t rank = 0; rank < ranks; ++rank) {
    for (const cache_scope scope : {cache_scope::global, cache_scope::per_layer}) {
      const std::int32_t capacity = scope == cache_scope::global ? 12 : 8;
      rank_pager<lru> rp(p, rank, 2, capacity, scope);
      pager_config pc;
      pc.layers = layers;
      pc.experts = p.local_experts();
      pc.top_k = 2;
      pc.capacity = capacity;
      pc.scope = scope;
      pager<lru> plain(pc);
      for (int call = 0; call < 300; ++call) {
        const auto layer = static_cast<std::int32_t>(rng() % layers);
        const auto tokens = static_cast<std::int32_t>(rng() % 4);
        std::vector<std::int32_t> ids(static_cast<std::size_t>(tokens) * 2);
        std::vector<std::int32_t> targets(ids.size());
        for (std::size_t i = 0; i < ids.size(); ++i) {
          ids[i] = static_cast<std::int32_t>(rng() % experts);
          const auto reps = p.replicas(layer, ids[i]);
          targets[i] = reps[rng() % reps.size()].rank;
        }
        const bool dispatched = rng() % 2 == 0;
        const std::vector<std::int32_t> locals =
            scan(p, rank, layer, ids, dispatched ? &targets : nullptr);
        const rank_prepare_result got =
            dispatched ? rp.prepare(layer, std::span<const std::int32_t>(ids),
                                    std::span<const std::int32_t>(targets), tokens, 2)
                       : rp.prepare(layer, std::span<const std::int32_t>(ids), tokens, 2);
        const prepare_result want = plain.prepare_experts(layer, locals);
        ASSERT_EQ(std::vector<std::int32_t>(got.experts.begin(), got.experts.end()), locals);
        ASSERT_EQ(std::vector<copy_op>(got.copy_plan.begin(), got.copy_plan.end()),
                  std::vector<copy_op>(want.copy_plan.begin(), want.copy_plan.end()));
        ASSERT_EQ(got.hits, want.hits);
        ASSERT_EQ(got.misses, want.misses);
        // vLLM's map: every global id of the call computed here -> its slot; -1 elsewhere.
        std::vector<std::int32_t> global(static_cast<std::size_t>(experts), -1);
        for (const std::int32_t local : locals) {
          global[static_cast<std::size_t>(p.logical_of(rank, layer, local))] =
              want.expert_map[static_cast<std::size_t>(local)];
        }
        ASSERT_EQ(std::vector<std::int32_t>(got.expert_map.begin(), got.expert_map.end()), global);
        for (std::int32_t e = 0; e < experts; ++e) {
          const std::int32_t local = p.expert_map(rank, layer)[static_cast<std::size_t>(e)];
          ASSERT_EQ(rp.slot_of(layer, e), local < 0 ? -1 : plain.slot_of(layer, local));
        }
        rp.end_call(layer);
        plain.end_call(layer);
      }
    }
  }
}

TEST(rank_pager, takes_vllms_expert_map_as_is) {
  // Rank 1 of vLLM's linear placement of 8 experts on 4 ranks: experts 2 and 3.
  const std::vector<std::int32_t> map = {-1, -1, 0, 1, -1, -1, -1, -1};
  rank_pager<lru> rp(rank_expert_map(1, 1, 8, 2, map), 1, 2);
  EXPECT_EQ(rank_expert_map(expert_placement::linear(1, 8, 4), 1).expert_map(0).size(), 8u);
  const std::vector<std::int64_t> ids = {3, 0, 2, 3};  // int64, as vLLM's router may emit
  const rank_prepare_result r = rp.prepare(0, std::span<const std::int64_t>(ids), 4, 1);
  EXPECT_EQ(r.misses, 2);
  ASSERT_EQ(r.copy_plan.size(), 2u);
  EXPECT_EQ(r.copy_plan[0].expert, 1);  // local row of expert 3, first seen
  EXPECT_EQ(r.copy_plan[1].expert, 0);
  EXPECT_EQ(r.expert_map[3], r.copy_plan[0].slot);
  EXPECT_EQ(r.expert_map[2], r.copy_plan[1].slot);
  EXPECT_EQ(r.expert_map[0], -1);  // another rank's expert
  rp.end_call(0);
  const auto again = rp.prepare(0, std::span<const std::int64_t>(ids), 4, 1);
  EXPECT_EQ(again.hits, 2);
  EXPECT_EQ(again.misses, 0);
}

TEST(rank_pager, bad_input_is_refused_and_changes_nothing) {
  const std::vector<std::int32_t> map = {-1, -1, 0, 1, -1, -1, -1, -1};
  expect_error([&] { rank_expert_map m(0, 1, 8, 2, std::span(map).first(7)); },
               "maps holds 7 values but layers x experts = 1 x 8 = 8");
  std::vector<std::int32_t> bad = map;
  bad[5] = 0;
  expect_error([&] { rank_expert_map m(3, 1, 8, 2, bad); }, "rank 3",
               "experts 2 and 5 both map to local id 0");
  bad = map;
  bad[5] = 2;
  expect_error([&] { rank_expert_map m(3, 1, 8, 2, bad); }, "expert_map[5] = 2",
               "local_experts = 2");
  expect_error([&] { rank_pager<lru> rp(rank_expert_map(1, 1, 8, 2, map), 2, 1); }, "capacity 1",
               "below top_k 2");
  rank_pager<lru> rp(rank_expert_map(1, 1, 8, 2, map), 1, 2);
  const std::vector<std::int32_t> ids = {2, 3};
  const std::vector<std::int32_t> targets = {1, 0};
  const std::vector<std::int32_t> foreign = {1, 1, 1, 0};
  expect_error(
      [&] {
        (void)rp.prepare(0, std::span<const std::int32_t>(std::vector<std::int32_t>{2, 0}),
                         std::span<const std::int32_t>(std::vector<std::int32_t>{1, 1}), 2, 1);
      },
      "sends expert 0 of layer 0 to rank 1, which holds no replica of it");
  expect_error(
      [&] {
        (void)rp.prepare(0, std::span<const std::int32_t>(ids),
                         std::span<const std::int32_t>(foreign), 2, 1);
      },
      "targets holds 4 ranks for 2 ids");
  expect_error([&] { (void)rp.prepare(0, std::span<const std::int32_t>(ids), 1, 1); },
               "holds 2 ids but tokens * k = 1 * 1 = 1");
  expect_error([&] { (void)rp.prepare(1, std::span<const std::int32_t>(ids), 2, 1); },
               "layer 1 is outside [0, layers = 1)");
  const std::vector<std::int32_t> out_of_range = {2, 8};
  expect_error([&] { (void)rp.prepare(0, std::span<const std::int32_t>(out_of_range), 2, 1); },
               "topk_ids[1]", "= 8 is outside [0, experts = 8)");
  EXPECT_EQ(rp.local_pager().stats().accesses, 0u);  // nothing reached the cache
  const auto r = rp.prepare(0, std::span<const std::int32_t>(ids),
                            std::span<const std::int32_t>(targets), 2, 1);
  EXPECT_EQ(r.misses, 1);  // expert 3 went to rank 0
  EXPECT_EQ(r.expert_map[2], r.copy_plan[0].slot);
  EXPECT_EQ(r.expert_map[3], -1);
}

TEST(rank_pager, order_resident_first_keeps_each_part_in_its_order) {
  // A global pool of 4 slots over 2 layers x 6 local ids: make (0, 1), (0, 4) and (1, 2)
  // resident, then order a call of layer 0 that holds two of them among others.
  pager<lru> pg(pager_config{
      .layers = 2, .experts = 6, .top_k = 1, .capacity = 4, .scope = cache_scope::global});
  const std::vector<std::int32_t> first = {1, 4};
  (void)pg.prepare_experts(0, first);
  const std::vector<std::int32_t> other = {2};
  (void)pg.prepare_experts(1, other);
  std::vector<std::int32_t> call = {5, 4, 0, 2, 1, 3};  // 2 is resident in layer 1, not 0
  order_resident_first(pg, 0, std::span<std::int32_t>(call));
  EXPECT_EQ(call, (std::vector<std::int32_t>{4, 1, 5, 0, 2, 3}));
  std::vector<std::int32_t> none = {3, 0};
  order_resident_first(pg, 0, std::span<std::int32_t>(none));
  EXPECT_EQ(none, (std::vector<std::int32_t>{3, 0}));
  std::vector<std::int32_t> bad = {6};
  expect_error([&] { order_resident_first(pg, 0, std::span<std::int32_t>(bad)); }, "6");
}

}  // namespace
}  // namespace wisp
