// SPDX-License-Identifier: Apache-2.0
#include "trace_test_util.hpp"

#include <wisp/trace/routing_trace.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <ranges>
#include <span>
#include <vector>

namespace {

using wisp::access;
using wisp::moe_shape;
using wisp::routing_trace;

static_assert(std::ranges::forward_range<routing_trace::access_range>);
static_assert(std::forward_iterator<routing_trace::access_iterator>);
static_assert(std::is_trivially_copyable_v<access>);

TEST(RoutingTrace, RejectsBadShapes) {
  EXPECT_THROW(routing_trace({0, 8, 2}), wisp::logic_error);
  EXPECT_THROW(routing_trace({2, 0, 1}), wisp::logic_error);
  EXPECT_THROW(routing_trace({2, 8, 0}), wisp::logic_error);
  EXPECT_THROW(routing_trace({2, 8, 9}), wisp::logic_error);
  EXPECT_THROW(routing_trace({2, 65537, 2}), wisp::logic_error);
  EXPECT_NO_THROW(routing_trace({1, 65536, 1}));
  EXPECT_NO_THROW(routing_trace({1, 1, 1}));  // k == E == 1
}

TEST(RoutingTrace, EmptyTrace) {
  const routing_trace t({3, 4, 2});
  EXPECT_EQ(t.steps(), 0u);
  EXPECT_EQ(t.access_count(), 0u);
  EXPECT_FALSE(t.has_weights());
  EXPECT_TRUE(t.sequence_starts().empty());
  EXPECT_TRUE(t.accesses().empty());
  EXPECT_EQ(t.accesses().begin(), t.accesses().end());
  int calls = 0;
  t.for_each_access([&](access) { ++calls; });
  EXPECT_EQ(calls, 0);
  EXPECT_THROW((void)t.expert(0, 0, 0), wisp::logic_error);
}

TEST(RoutingTrace, AppendAndQuery) {
  routing_trace t({2, 8, 2});
  t.begin_sequence();
  const std::int32_t a[] = {0, 5, 3, 1};
  const float wa[] = {0.5f, 0.25f, 0.125f, 1.0f};
  t.append_step(a, wa);
  const std::int32_t b[] = {7, 6, 1, 3};
  const float wb[] = {0.f, 0.f, 0.f, 0.f};
  t.begin_sequence();
  t.begin_sequence();  // idempotent
  t.append_step(b, wb);
  EXPECT_EQ(t.steps(), 2u);
  EXPECT_EQ(t.access_count(), 8u);
  EXPECT_TRUE(t.has_weights());
  EXPECT_EQ(t.id_bytes(), 1u);
  EXPECT_EQ(t.expert(0, 0, 1), 5);
  EXPECT_EQ(t.expert(1, 1, 0), 1);
  EXPECT_EQ(t.expert(1, wisp::layer_id{1}, 1), wisp::expert_id{3});
  EXPECT_EQ(t.weight(0, 1, 0), 0.125f);
  EXPECT_EQ(std::vector<std::size_t>(t.sequence_starts().begin(), t.sequence_starts().end()),
            (std::vector<std::size_t>{0, 1}));
  EXPECT_THROW((void)t.expert(2, 0, 0), wisp::logic_error);
  EXPECT_THROW((void)t.expert(0, 2, 0), wisp::logic_error);
  EXPECT_THROW((void)t.expert(0, -1, 0), wisp::logic_error);
  EXPECT_THROW((void)t.expert(0, 0, 2), wisp::logic_error);
}

TEST(RoutingTrace, AppendValidatesWithStrongGuarantee) {
  routing_trace t({2, 8, 2});
  const std::int32_t good[] = {0, 1, 2, 3};
  t.append_step(good);
  const routing_trace before = t;
  const std::int32_t out_of_range[] = {0, 8, 2, 3};
  const std::int32_t negative[] = {0, -1, 2, 3};
  const std::int32_t duplicate[] = {0, 1, 3, 3};
  const std::int32_t short_row[] = {0, 1, 2};
  const float weights[] = {1, 1, 1, 1};
  EXPECT_THROW(t.append_step(out_of_range), wisp::logic_error);
  EXPECT_THROW(t.append_step(negative), wisp::logic_error);
  EXPECT_THROW(t.append_step(duplicate), wisp::logic_error);
  EXPECT_THROW(t.append_step(short_row), wisp::logic_error);
  t.begin_sequence();
  EXPECT_THROW(t.append_step(good, weights), wisp::logic_error);  // earlier steps had none
  EXPECT_EQ(t, before);
  // Same id in different layers is fine.
  const std::int32_t across_layers[] = {4, 5, 4, 5};
  EXPECT_NO_THROW(t.append_step(across_layers));
  EXPECT_EQ(t.sequence_starts().size(), 1u);  // the pending mark survived the failed appends
}

TEST(RoutingTrace, RejectsNonFiniteWeightsAndDuplicatesInWideRows) {
  routing_trace t({1, 100, 40});
  std::vector<std::int32_t> ids(40);
  for (int i = 0; i < 40; ++i) {
    ids[static_cast<std::size_t>(i)] = i;
  }
  std::vector<float> w(40, 0.5f);
  w[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(t.append_step(ids, w), wisp::logic_error);
  ids[39] = 7;  // k > 32 uses the sorting path
  EXPECT_THROW(t.append_step(ids), wisp::logic_error);
  EXPECT_EQ(t.steps(), 0u);
}

TEST(RoutingTrace, WideIdsAboveTwoHundredFiftySix) {
  routing_trace t({2, 1000, 3});
  const std::int32_t ids[] = {999, 256, 0, 1, 2, 998};
  t.append_step(ids);
  EXPECT_EQ(t.id_bytes(), 2u);
  EXPECT_EQ(t.expert(0, 0, 0), 999);
  EXPECT_EQ(t.expert(0, 1, 2), 998);
  std::vector<std::int32_t> seen;
  for (const access a : t.accesses()) {
    seen.push_back(a.expert);
  }
  EXPECT_EQ(seen, std::vector<std::int32_t>(std::begin(ids), std::end(ids)));
}

TEST(RoutingTrace, PartialStepsKeepTheLayersPresent) {
  routing_trace t({3, 8, 2});
  const std::int32_t full[] = {0, 1, 2, 3, 4, 5};
  const float w[] = {1, 2, 3, 4, 5, 6};
  t.append_step(full, w);
  EXPECT_TRUE(t.complete());
  // Layer 1 missing: its ids (here invalid) are ignored.
  const std::int32_t partial[] = {6, 7, -5, 99, 0, 1};
  const std::uint8_t present[] = {1, 0, 1};
  t.append_partial_step(partial, present, w);
  t.append_step(full, w);
  EXPECT_FALSE(t.complete());
  EXPECT_EQ(t.missing_rows(), 1u);
  EXPECT_EQ(t.steps(), 3u);
  EXPECT_EQ(t.access_count(), 16u);  // (9 rows - 1) x top-2
  EXPECT_TRUE(t.has_layer(0, 1));
  EXPECT_FALSE(t.has_layer(1, 1));
  EXPECT_TRUE(t.has_layer(1, 2));
  EXPECT_EQ(t.expert(1, 2, 1), 1);
  EXPECT_EQ(t.weight(1, 2, 0), 5.0f);
  EXPECT_THROW((void)t.expert(1, 1, 0), wisp::logic_error);
  EXPECT_THROW((void)t.weight(1, 1, 0), wisp::logic_error);
  EXPECT_THROW((void)t.has_layer(3, 0), wisp::logic_error);

  const std::vector<access> expected = {
      {0, 0, 0}, {0, 0, 1}, {0, 1, 2}, {0, 1, 3}, {0, 2, 4}, {0, 2, 5}, {1, 0, 6}, {1, 0, 7},
      {1, 2, 0}, {1, 2, 1}, {2, 0, 0}, {2, 0, 1}, {2, 1, 2}, {2, 1, 3}, {2, 2, 4}, {2, 2, 5}};
  std::vector<access> visited;
  t.for_each_access([&](access a) { visited.push_back(a); });
  EXPECT_EQ(visited, expected);
  std::vector<access> ranged(t.accesses().begin(), t.accesses().end());
  EXPECT_EQ(ranged, expected);
  std::vector<access> called;
  t.for_each_call([&](std::uint32_t s, std::int32_t l, std::span<const std::int32_t> ids) {
    for (const std::int32_t e : ids) {
      called.push_back({s, l, e});
    }
  });
  EXPECT_EQ(called, expected);
}

TEST(RoutingTrace, PartialStepsAreValidatedWithStrongGuarantee) {
  routing_trace t({3, 8, 2});
  const std::int32_t ids[] = {0, 1, 2, 3, 4, 4};
  const std::uint8_t last_missing[] = {1, 1, 0};
  t.append_partial_step(ids, last_missing);  // the duplicate 4, 4 sits in the missing row
  const routing_trace before = t;
  const std::uint8_t none[] = {0, 0, 0};
  const std::uint8_t two_flags[] = {1, 1};
  const std::uint8_t first_missing[] = {0, 1, 1};
  EXPECT_THROW(t.append_partial_step(ids, none), wisp::logic_error);
  EXPECT_THROW(t.append_partial_step(ids, two_flags), wisp::logic_error);
  EXPECT_THROW(t.append_partial_step(ids, first_missing), wisp::logic_error);  // 4 twice
  EXPECT_EQ(t, before);
  EXPECT_EQ(t.missing_rows(), 1u);
  // A trace that starts complete and turns partial later equals one built the same way.
  routing_trace a({2, 4, 1});
  routing_trace b({2, 4, 1});
  const std::int32_t two[] = {1, 2};
  const std::uint8_t one[] = {1, 0};
  for (routing_trace* x : {&a, &b}) {
    x->append_step(two);
    x->append_partial_step(two, one);
  }
  EXPECT_EQ(a, b);
  b.append_step(two);
  EXPECT_NE(a, b);
}

// for_each_access and accesses() visit exactly the nested-loop order.
class AccessOrder : public ::testing::TestWithParam<moe_shape> {};

TEST_P(AccessOrder, MatchesNestedLoops) {
  const moe_shape shape = GetParam();
  const routing_trace t = wisp_test::random_trace(shape, 37, false, 11);
  std::vector<access> expected;
  for (std::size_t s = 0; s < t.steps(); ++s) {
    for (std::int32_t l = 0; l < shape.layers; ++l) {
      for (std::int32_t j = 0; j < shape.top_k; ++j) {
        expected.push_back({static_cast<std::uint32_t>(s), l, t.expert(s, l, j)});
      }
    }
  }
  std::vector<access> visited;
  t.for_each_access([&](access a) { visited.push_back(a); });
  EXPECT_EQ(visited, expected);
  std::vector<access> ranged;
  for (const access a : t.accesses()) {
    ranged.push_back(a);
  }
  EXPECT_EQ(ranged, expected);
  EXPECT_EQ(t.accesses().size(), t.access_count());
  EXPECT_EQ(static_cast<std::size_t>(std::ranges::distance(t.accesses())), t.access_count());
}

// The same with partial steps: nested loops over the rows each step holds.
TEST_P(AccessOrder, PartialStepsMatchNestedLoopsOverTheRowsHeld) {
  const moe_shape shape = GetParam();
  const routing_trace t = wisp_test::random_partial_trace(shape, 37, false, 12);
  std::vector<access> expected;
  for (std::size_t s = 0; s < t.steps(); ++s) {
    for (std::int32_t l = 0; l < shape.layers; ++l) {
      for (std::int32_t j = 0; j < shape.top_k && t.has_layer(s, l); ++j) {
        expected.push_back({static_cast<std::uint32_t>(s), l, t.expert(s, l, j)});
      }
    }
  }
  EXPECT_EQ(shape.layers == 1, t.complete());
  std::vector<access> visited;
  t.for_each_access([&](access a) { visited.push_back(a); });
  EXPECT_EQ(visited, expected);
  const std::vector<access> ranged(t.accesses().begin(), t.accesses().end());
  EXPECT_EQ(ranged, expected);
  EXPECT_EQ(t.access_count(), expected.size());
  EXPECT_EQ(t.accesses().size(), expected.size());
}

INSTANTIATE_TEST_SUITE_P(Shapes, AccessOrder,
                         ::testing::Values(moe_shape{1, 1, 1}, moe_shape{26, 64, 6},
                                           moe_shape{3, 8, 8}, moe_shape{4, 300, 5},
                                           moe_shape{2, 65536, 2}),
                         [](const auto& info) {
                           return "L" + std::to_string(info.param.layers) + "_E" +
                                  std::to_string(info.param.experts) + "_K" +
                                  std::to_string(info.param.top_k);
                         });

}  // namespace
