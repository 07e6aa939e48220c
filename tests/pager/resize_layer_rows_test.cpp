// SPDX-License-Identifier: Apache-2.0
// Integration steps between the pager and the layer's expert tensor:
// - `end_call` against the idiom it replaces (an empty `prepare`), on a twin pager;
// - `resize_layer_rows` against its invariant: after any sequence of resizes, every resident
//   expert's row holds that expert's bytes (stamped when it was copied in), the pager's capacity
//   and the tensor's resident rows agree; and a resize that fails (the tensor cannot map, the
//   pager refuses after the tensor grew, a shrink below the live call) leaves both exactly as
//   they were (full snapshots of pager and tensor).
#include "support/expect_error.hpp"
#include "vmm/support.hpp"

#include <wisp/cache/policies.hpp>
#include <wisp/pager/pager.hpp>
#include <wisp/pager/resize_layer_rows.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <vector>

namespace wisp {
namespace {

using test::page;
using test::pool_t;
using test::tensor;

static_assert(resident_row_tensor<tensor>);
static_assert(resident_row_tensor<virtual_expert_tensor<posix_vmm>>);
static_assert(!resident_row_tensor<expert_tensor_view>);

constexpr std::int32_t experts = 12;
constexpr std::int32_t top_k = 2;

// Everything observable about one pager layer.
struct layer_state {
  std::int32_t capacity = 0;
  std::vector<std::int32_t> slots;  // per expert
  std::vector<std::int32_t> map;
  cache_stats stats;
  bool operator==(const layer_state&) const = default;
};

template <class P>
layer_state state_of(const pager<P>& p, std::int32_t layer) {
  layer_state s;
  s.capacity = p.capacity(layer);
  for (std::int32_t e = 0; e < p.experts(); ++e) {
    s.slots.push_back(p.slot_of(layer, e));
  }
  const auto map = p.expert_map(layer);
  s.map.assign(map.begin(), map.end());
  s.stats = p.stats(layer);
  return s;
}

// The bytes an expert's weights are stamped with.
std::byte stamp(std::int32_t expert, std::size_t i) {
  return static_cast<std::byte>((expert * 37 + static_cast<std::int32_t>(i % 251)) & 0xff);
}

void copy_in(tensor& t, const prepare_result& r) {
  for (const copy_op& op : r.copy_plan) {
    std::byte* row = t.row(static_cast<std::size_t>(op.slot));
    for (std::size_t i = 0; i < t.row_stride(); ++i) {
      row[i] = stamp(op.expert, i);
    }
  }
}

void expect_rows_follow_experts(const pager<lru>& p, const tensor& t, std::int32_t layer) {
  ASSERT_EQ(t.resident_rows(), static_cast<std::size_t>(p.capacity(layer)));
  for (std::int32_t e = 0; e < experts; ++e) {
    const std::int32_t slot = p.slot_of(layer, e);
    if (slot < 0) {
      continue;
    }
    ASSERT_LT(slot, p.capacity(layer));
    const std::byte* row = t.row(static_cast<std::size_t>(slot));
    for (std::size_t i = 0; i < t.row_stride(); ++i) {
      ASSERT_EQ(row[i], stamp(e, i)) << "expert " << e << " in slot " << slot << " byte " << i;
    }
  }
}

TEST(PagerEndCall, DoesWhatAnEmptyPrepareDidForAResize) {
  for (const std::uint32_t seed : {1u, 2u, 3u}) {
    pager<lru> ended({.layers = 2, .experts = experts, .top_k = top_k, .capacity = 8});
    pager<lru> emptied({.layers = 2, .experts = experts, .top_k = top_k, .capacity = 8});
    std::mt19937 rng(seed);
    for (int call = 0; call < 40; ++call) {
      const auto layer = static_cast<std::int32_t>(rng() % 2);
      const auto first = static_cast<std::int32_t>(rng() % experts);
      const std::vector<std::int32_t> ids = {
          first, static_cast<std::int32_t>((first + 1 + rng() % (experts - 1)) % experts)};
      const prepare_result a = ended.prepare(layer, ids, 1, top_k);
      const prepare_result b = emptied.prepare(layer, ids, 1, top_k);
      ASSERT_EQ(a.misses, b.misses);
      if (call % 5 == 4) {
        ended.end_call(layer);
        (void)emptied.prepare(layer, std::span<const std::int32_t>{}, 0, top_k);
        const auto cap = static_cast<std::int32_t>(top_k + rng() % (experts - top_k + 1));
        const resize_report ra = ended.resize_layer(layer, cap);
        const resize_report rb = emptied.resize_layer(layer, cap);
        EXPECT_EQ(ra.evicted, rb.evicted);
        EXPECT_EQ(ra.moves, rb.moves);
      }
      for (std::int32_t l = 0; l < 2; ++l) {
        ASSERT_EQ(state_of(ended, l), state_of(emptied, l)) << "seed " << seed << " call " << call;
      }
    }
  }
}

TEST(PagerEndCall, ReleasesTheCallSoAShrinkMayEvictIt) {
  pager<lru> p({.layers = 2, .experts = experts, .top_k = top_k, .capacity = 6});
  const std::vector<std::int32_t> ids = {0, 1, 2, 3};
  (void)p.prepare(1, ids, 2, top_k);
  EXPECT_EQ(p.pending_layer(), 1);
  const layer_state before = state_of(p, 1);
  test::expect_error([&] { (void)p.resize_layer(1, 2); }, "resize");
  EXPECT_EQ(state_of(p, 1), before);
  test::expect_error([&] { p.end_call(2); }, "pager::end_call: layer 2 is outside [0, layers = 2)");
  EXPECT_EQ(state_of(p, 1), before);
  p.end_call(0);  // another layer's call: layer 1 keeps its protection and its map
  EXPECT_EQ(state_of(p, 1), before);
  EXPECT_EQ(p.pending_layer(), 1);
  p.end_call(1);
  EXPECT_EQ(p.pending_layer(), -1);
  for (const std::int32_t slot : p.expert_map(1)) {
    EXPECT_EQ(slot, -1);
  }
  EXPECT_EQ(p.stats(1), before.stats);  // nothing counted, nothing evicted
  for (std::int32_t e = 0; e < experts; ++e) {
    EXPECT_EQ(p.slot_of(1, e), before.slots[static_cast<std::size_t>(e)]);
  }
  EXPECT_EQ(p.resize_layer(1, 2).evicted.size(), 2u);
}

TEST(PagerEndCall, GlobalScopeReleasesOnlyThePendingCall) {
  pager<lru> p({.layers = 2,
                .experts = experts,
                .top_k = top_k,
                .capacity = 6,
                .scope = cache_scope::global});
  const std::vector<std::int32_t> ids = {0, 1, 2, 3};
  (void)p.prepare(0, ids, 2, top_k);
  (void)p.prepare(1, ids, 2, top_k);  // the pool now protects layer 1's call
  p.end_call(0);                      // hides layer 0's map; layer 1 still protected
  for (const std::int32_t slot : p.expert_map(0)) {
    EXPECT_EQ(slot, -1);
  }
  test::expect_error([&] { (void)p.resize_pool(3); }, "resize");
  p.end_call(1);
  EXPECT_EQ(p.resize_pool(3).evicted.size(), 3u);  // 6 resident, none protected
}

struct fixture {
  pool_t pool{test::fault_vmm{page}};
  // 1.5 granules per row: boundary granules are shared, so growth and shrink touch them.
  tensor t{pool,
           {.max_rows = static_cast<std::size_t>(experts) + 4, .row_stride = page + page / 2}};
  pager<lru> p{{.layers = 1, .experts = experts, .top_k = top_k, .capacity = 4}};
  fixture() { t.resize_resident(4); }
};

TEST(ResizeLayerRows, BytesFollowTheirExpertsThroughRandomResizes) {
  fixture f;
  std::mt19937 rng(5);
  for (int round = 0; round < 60; ++round) {
    std::vector<std::int32_t> ids(static_cast<std::size_t>(top_k));
    do {
      for (auto& id : ids) {
        id = static_cast<std::int32_t>(rng() % experts);
      }
    } while (ids[0] == ids[1]);
    copy_in(f.t, f.p.prepare(0, ids, 1, top_k));
    expect_rows_follow_experts(f.p, f.t, 0);
    if (round % 3 == 2) {
      if (rng() % 2 == 0) {
        f.p.end_call(0);  // else the call's experts must stay resident
      }
      const auto cap = static_cast<std::int32_t>(top_k + rng() % (experts - top_k + 1));
      const resize_report r = resize_layer_rows(f.p, 0, cap, f.t);
      EXPECT_EQ(f.p.capacity(0), cap);
      for (const slot_move& m : r.moves) {
        EXPECT_LT(m.to, cap);
      }
      expect_rows_follow_experts(f.p, f.t, 0);
    }
  }
}

// Both halves before and after a failing resize.
struct both {
  layer_state pager;
  test::snapshot tensor;
  bool operator==(const both&) const = default;
};
both take(const fixture& f) {
  return {state_of(f.p, 0), test::take(f.t)};
}

void warm(fixture& f) {
  copy_in(f.t, f.p.prepare(0, std::vector<std::int32_t>{0, 1}, 1, top_k));
  copy_in(f.t, f.p.prepare(0, std::vector<std::int32_t>{2, 3}, 1, top_k));
  copy_in(f.t, f.p.prepare(0, std::vector<std::int32_t>{4, 1}, 1, top_k));
}

TEST(ResizeLayerRows, FailingToMapLeavesBothUnchanged) {
  fixture f;
  warm(f);
  const both before = take(f);
  f.pool.backend().fail_at(1);  // the first page the grow asks for fails
  EXPECT_THROW((void)resize_layer_rows(f.p, 0, 10, f.t), std::exception);
  f.pool.backend().fail_at(0);
  EXPECT_EQ(take(f), before);
  expect_rows_follow_experts(f.p, f.t, 0);
}

TEST(ResizeLayerRows, ACapacityThePagerRefusesLeavesBothUnchanged) {
  fixture f;
  warm(f);
  const both before = take(f);
  // experts + 2 would fit the tensor but not the pager: refused before the tensor grows (the
  // pool's statistics included).
  test::expect_error(
      [&] { (void)resize_layer_rows(f.p, 0, experts + 2, f.t); },
      "resize_layer_rows: capacity 14 of layer 0 must be in [top_k = 2, experts = 12]");
  EXPECT_EQ(take(f), before);
  test::expect_error([&] { (void)resize_layer_rows(f.p, 0, 1, f.t); }, "capacity 1 of layer 0");
  EXPECT_EQ(take(f), before);
  test::expect_error([&] { (void)resize_layer_rows(f.p, 1, 4, f.t); }, "layer 1");
  EXPECT_EQ(take(f), before);
}

TEST(ResizeLayerRows, GlobalScopeIsRefused) {
  pool_t pool{test::fault_vmm{page}};
  tensor t{pool, {.max_rows = 8, .row_stride = page}};
  t.resize_resident(4);
  pager<lru> p(
      {.layers = 2, .experts = 4, .top_k = 1, .capacity = 4, .scope = cache_scope::global});
  test::expect_error([&] { (void)resize_layer_rows(p, 0, 4, t); }, "one global pool");
  EXPECT_EQ(t.resident_rows(), 4u);
}

TEST(ResizeLayerRows, AShrinkBelowTheLiveCallLeavesBothUnchanged) {
  fixture f;
  warm(f);
  copy_in(f.t, f.p.prepare(0, std::vector<std::int32_t>{4, 1, 5, 6}, 2, top_k));  // 4 protected
  const both before = take(f);
  test::expect_error([&] { (void)resize_layer_rows(f.p, 0, 3, f.t); }, "slot_cache::resize");
  EXPECT_EQ(take(f), before);
  f.p.end_call(0);  // the kernel is done: now the shrink may evict
  (void)resize_layer_rows(f.p, 0, 3, f.t);
  expect_rows_follow_experts(f.p, f.t, 0);
}

TEST(ResizeLayerRows, RefusesATensorSmallerThanTheLayer) {
  fixture f;
  f.t.resize_resident(3);
  const both before = take(f);
  test::expect_error([&] { (void)resize_layer_rows(f.p, 0, 6, f.t); },
                     "resize_layer_rows: the tensor has 3 resident rows but layer 0 has 4 slots");
  EXPECT_EQ(take(f), before);
}

}  // namespace
}  // namespace wisp
