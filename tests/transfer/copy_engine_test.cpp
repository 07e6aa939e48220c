// SPDX-License-Identifier: Apache-2.0
// expert_row_layout against hand-packed offsets and host_expert_store's addressing;
// plan_copy_runs against expanding the runs back; host_copy_engine against host_expert_store's
// in-order memcpy on random plans (copying on the caller, and on pools of 1 and 3 threads), its
// modelled times against a hand-fed device_timeline, and bad plans that copy nothing.
#include "support/expect_error.hpp"

#include <wisp/core/executor.hpp>
#include <wisp/core/topk.hpp>
#include <wisp/pager/host_expert_store.hpp>
#include <wisp/transfer/copy_engine.hpp>
#include <wisp/transfer/row_layout.hpp>
#include <wisp/transfer/timeline.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

namespace {

using wisp::copy_layout;
using wisp::copy_op;
using wisp::copy_run;
using wisp::expert_row_layout;
using wisp::host_copy_engine;
using wisp::test::expect_error;

TEST(ExpertRowLayout, PacksAlignedTensorsLikeAHandComputedRow) {
  // 100 B of weights, 40 B of weights, 6 B of scales, 16-byte aligned:
  // offsets 0, 112, 160; row 176.
  const expert_row_layout layout({100, 40, 6}, 16);
  EXPECT_EQ(layout.tensors(), 3u);
  EXPECT_EQ(layout.offset(0), 0u);
  EXPECT_EQ(layout.offset(1), 112u);
  EXPECT_EQ(layout.offset(2), 160u);
  EXPECT_EQ(layout.bytes(2), 6u);
  EXPECT_EQ(layout.row_bytes(), 176u);
  EXPECT_EQ(layout.row_offset(3), 528u);
  // Alignment 1 packs back to back.
  EXPECT_EQ(expert_row_layout({3, 5}, 1).row_bytes(), 8u);
}

TEST(ExpertRowLayout, RowsAreAddressedLikeHostExpertStore) {
  const expert_row_layout layout({96, 33}, 32);
  wisp::host_expert_store store(9, 2, layout.row_bytes());
  for (std::int32_t e = 0; e < 9; ++e) {
    EXPECT_EQ(static_cast<std::size_t>(store.master(e).data() - store.master(0).data()),
              layout.row_offset(static_cast<std::size_t>(e)));
  }
}

TEST(ExpertRowLayout, BadShapesAreNamed) {
  expect_error([] { expert_row_layout({}, 16); }, "0 tensors given");
  expect_error([] { expert_row_layout({1, 1, 1, 1, 1, 1, 1, 1, 1}, 16); }, "9 tensors given");
  expect_error([] { expert_row_layout({4, 0}, 16); }, "tensor 1 has 0 bytes");
  expect_error([] { expert_row_layout({4}, 12); }, "alignment 12 is not a power of two");
  expect_error([] { expert_row_layout({SIZE_MAX - 2, 8}, 1); }, "overflows size_t at tensor 1");
  const expert_row_layout layout({8});
  expect_error([&] { (void)layout.offset(1); }, "tensor 1 of a 1-tensor row");
  expect_error([&] { (void)layout.row_offset(SIZE_MAX / 8); }, "overflows size_t");
}

// Oracle: the plan rebuilt from the runs, and no two adjacent runs that could have merged.
void expect_runs_cover(const std::vector<copy_op>& plan) {
  std::vector<copy_run> runs(plan.size());
  runs.resize(wisp::plan_copy_runs(plan, runs));
  std::vector<copy_op> back;
  for (const copy_run& r : runs) {
    ASSERT_GE(r.rows, 1);
    for (std::int32_t i = 0; i < r.rows; ++i) {
      back.push_back(copy_op{r.expert + i, r.slot + i});
    }
  }
  EXPECT_EQ(back, plan);
  for (std::size_t i = 1; i < runs.size(); ++i) {
    const copy_run& a = runs[i - 1];
    EXPECT_FALSE(runs[i].expert == a.expert + a.rows && runs[i].slot == a.slot + a.rows) << i;
  }
}

TEST(PlanCopyRuns, MergesConsecutiveEntriesOnlyAndKeepsOrder) {
  expect_runs_cover({});
  expect_runs_cover({{3, 0}, {4, 1}, {5, 2}, {9, 3}, {10, 4}, {2, 5}, {3, 7}});
  std::vector<copy_run> runs(4);
  EXPECT_EQ(wisp::plan_copy_runs(std::vector<copy_op>{{5, 5}, {6, 6}, {4, 4}}, runs), 2u);
  EXPECT_EQ(runs[0], (copy_run{5, 5, 2}));
  EXPECT_EQ(runs[1], (copy_run{4, 4, 1}));  // one behind the run: not merged (order is kept)
  std::mt19937 rng(1);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<copy_op> plan;
    std::int32_t e = 0;
    std::int32_t s = 0;
    for (int i = 0; i < 20; ++i) {
      e = rng() % 3 == 0 ? static_cast<std::int32_t>(rng() % 64) : e + 1;
      s = rng() % 3 == 0 ? static_cast<std::int32_t>(rng() % 64) : s + 1;
      plan.push_back({e, s});
    }
    expect_runs_cover(plan);
  }
  std::vector<copy_run> small(1);
  expect_error(
      [&] {
        (void)wisp::plan_copy_runs(std::vector<copy_op>{{0, 0}, {2, 2}}, small);
      },
      "room for 1 runs but the plan has 2 entries");
}

// Masters and slots with padded strides (so runs are pitched), filled with distinct bytes.
struct buffers {
  std::size_t row = 40;
  std::size_t master_stride = 48;
  std::size_t slot_stride = 56;
  std::int32_t experts = 32;
  std::int32_t slots = 12;
  std::vector<std::byte> masters;
  std::vector<std::byte> slot_mem;

  buffers() {
    masters.resize(master_stride * static_cast<std::size_t>(experts));
    for (std::size_t i = 0; i < masters.size(); ++i) {
      masters[i] = static_cast<std::byte>((i * 7 + i / 13) & 0xff);
    }
    slot_mem.assign(slot_stride * static_cast<std::size_t>(slots), std::byte{0xee});
  }
  [[nodiscard]] copy_layout layout() {
    return {{masters.data(), static_cast<std::size_t>(experts), master_stride},
            {slot_mem.data(), static_cast<std::size_t>(slots), slot_stride},
            row};
  }
  // Oracle: the plan applied entry by entry, in order, with memcpy.
  void apply_in_order(const std::vector<copy_op>& plan) {
    for (const copy_op& op : plan) {
      std::copy_n(masters.data() + static_cast<std::size_t>(op.expert) * master_stride, row,
                  slot_mem.data() + static_cast<std::size_t>(op.slot) * slot_stride);
    }
  }
};

std::vector<copy_op> random_plan(std::mt19937& rng, const buffers& b) {
  std::vector<std::int32_t> slots(static_cast<std::size_t>(b.slots));
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  if (rng() % 2 == 0) {
    std::sort(slots.begin(), slots.end());  // long runs
  }
  std::vector<copy_op> plan;
  const auto n = static_cast<std::size_t>(rng() % static_cast<std::uint32_t>(b.slots + 1));
  auto e = static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(b.experts));
  for (std::size_t i = 0; i < n; ++i) {
    plan.push_back({e, slots[i]});
    e = rng() % 4 == 0 ? static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(b.experts))
                       : (e + 1) % b.experts;
  }
  return plan;
}

// The executors the engine is tested on: 0 = inline (the default), else a pool of that many.
std::unique_ptr<wisp::thread_pool> pool_of(std::uint32_t threads) {
  return threads == 0 ? nullptr : std::make_unique<wisp::thread_pool>(threads);
}
wisp::any_executor executor_of(const std::unique_ptr<wisp::thread_pool>& pool) {
  return pool ? wisp::any_executor(pool->executor()) : wisp::any_executor();
}

TEST(HostCopyEngine, EqualsInOrderMemcpyOnRandomPlans) {
  for (const std::uint32_t threads : {0u, 1u, 3u}) {
    const auto pool = pool_of(threads);
    for (const std::size_t queue : {1u, 3u, 1024u}) {
      wisp::device_timeline timeline;
      host_copy_engine engine(timeline, queue, executor_of(pool));
      buffers got;
      buffers want;
      std::mt19937 rng(static_cast<std::uint32_t>(queue));
      for (int call = 0; call < 300; ++call) {
        const std::vector<copy_op> plan = random_plan(rng, got);
        const host_copy_engine::event e = engine.copy(got.layout(), plan, engine.consumer_event());
        want.apply_in_order(plan);
        if (call % 7 == 0) {
          engine.wait(e);
          ASSERT_EQ(got.slot_mem, want.slot_mem)
              << "threads " << threads << " queue " << queue << " call " << call;
        }
      }
      engine.synchronize();
      EXPECT_EQ(got.slot_mem, want.slot_mem) << "threads " << threads << " queue " << queue;
      EXPECT_EQ(got.masters, want.masters);
    }
  }
}

TEST(HostCopyEngine, ChargesOneLinkCopyPerRunAfterTheConsumer) {
  const wisp::link_model link{.bytes_per_second = 1000, .latency_seconds = 1};
  wisp::device_timeline timeline(link);
  wisp::device_timeline oracle(link);
  host_copy_engine engine(timeline);
  buffers b;
  // Two runs: experts 3,4,5 -> slots 0,1,2 (120 B) and expert 9 -> slot 7 (40 B).
  const std::vector<copy_op> plan{{3, 0}, {4, 1}, {5, 2}, {9, 7}};
  timeline.compute(2.5);  // the consumer is busy until t = 2.5
  oracle.compute(2.5);
  const host_copy_engine::event e = engine.copy(b.layout(), plan, engine.consumer_event());
  oracle.copy(120, oracle.compute_done());
  const wisp::timeline_event want = oracle.copy(40, oracle.compute_done());
  EXPECT_EQ(e.modelled, want);
  EXPECT_DOUBLE_EQ(e.modelled.time, 2.5 + 1.12 + 1.04);
  EXPECT_EQ(engine.stats().runs, 2u);
  EXPECT_EQ(engine.stats().rows, 4u);
  EXPECT_EQ(engine.stats().bytes, 160u);
  // An empty plan completes with everything before it, no earlier than its `after`.
  const host_copy_engine::event empty = engine.copy(b.layout(), {}, {0, {9.0}});
  EXPECT_EQ(empty.modelled.time, 9.0);
  EXPECT_EQ(empty.ticket, e.ticket + 1);
  engine.wait(empty);
  EXPECT_EQ(timeline.stats().copies, 2u);
  for (std::size_t i = 0; i < b.row; ++i) {
    EXPECT_EQ(b.slot_mem[7 * b.slot_stride + i], b.masters[9 * b.master_stride + i]);
  }
}

TEST(HostCopyEngine, BadPlansThrowAndCopyNothing) {
  wisp::device_timeline timeline;
  host_copy_engine engine(timeline);
  buffers b;
  const std::vector<std::byte> before = b.slot_mem;
  expect_error(
      [&] {
        (void)engine.copy(b.layout(), std::vector<copy_op>{{0, 0}, {1, 12}});
      },
      "plan[1] = {expert 1, slot 12}", "slots [0, 12)");
  expect_error(
      [&] {
        (void)engine.copy(b.layout(), std::vector<copy_op>{{32, 0}});
      },
      "plan[0] = {expert 32, slot 0}");
  expect_error(
      [&] {
        (void)engine.copy(b.layout(), std::vector<copy_op>{{0, 4}, {1, 4}});
      },
      "plan[1] writes slot 4 again");
  copy_layout wide = b.layout();
  wide.row_bytes = 50;
  expect_error(
      [&] {
        (void)engine.copy(wide, std::vector<copy_op>{{0, 0}});
      },
      "row_bytes 50 must be in [1, min(master stride 48, slot stride 56)]");
  expect_error(
      [&] {
        (void)engine.copy(b.layout(), std::vector<copy_op>{{0, 0}}, {0, {-1.0}});
      },
      "event time must be finite and >= 0");
  engine.synchronize();
  EXPECT_EQ(b.slot_mem, before);
  EXPECT_EQ(engine.stats().plans, 0u);
  EXPECT_EQ(timeline.stats().copies, 0u);
}

TEST(HostCopyEngine, DestructorLandsEveryQueuedCopy) {
  for (const std::uint32_t threads : {0u, 1u, 3u}) {
    const auto pool = pool_of(threads);
    buffers b;
    const std::vector<copy_op> plan{{1, 0}, {2, 1}, {30, 11}};
    {
      wisp::device_timeline timeline;
      host_copy_engine engine(timeline, 1, executor_of(pool));
      for (int i = 0; i < 50; ++i) {
        (void)engine.copy(b.layout(), plan);
      }
    }
    buffers want;
    want.apply_in_order(plan);
    EXPECT_EQ(b.slot_mem, want.slot_mem) << "threads " << threads;
  }
}

}  // namespace
