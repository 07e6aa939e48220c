// SPDX-License-Identifier: Apache-2.0
// The device pager step under step_policy::lfu_history, run on the host exactly as a CUDA block
// (serial, 3 and 32 threads) and a warp (lanes in lockstep) run it, against pager<lfu_history> in
// per-layer scope: hits, misses, expert maps, copy lists and shown experts, call by call, and the
// step's counts against a count of the calls written out here. On the real ESFT trace
// (capacities 8, 16, 32; skipped without the trace), on random streams (uniform and skewed ids,
// calls of 1 to 32 ids with repeats, capacities on both sides of the warp's 32 slots), and with
// failed calls in between.
#include "esft_suite.hpp"
#include "host_thread_group.hpp"

#include <wisp/cache/lfu.hpp>
#include <wisp/cuda/pager_step.hpp>
#include <wisp/pager/pager.hpp>
#include <wisp/trace/routing_trace.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace {

using wisp::cuda::host_pager_state;
using wisp::cuda::pager_state_config;
using wisp::cuda::pager_step_status;
using wisp::cuda::step_kernel;
using wisp::cuda::step_policy;

struct call {
  std::int32_t layer = 0;
  std::vector<std::int32_t> ids;
};

// Whether `d`'s last call of `layer` equals the pager's result, naming what differs.
::testing::AssertionResult same_call(const wisp::prepare_result& want, const host_pager_state& d,
                                     std::int32_t layer) {
  const auto map = d.map(layer);
  const auto copies = d.copies(layer);
  const auto shown = d.shown(layer);
  if (d.info(layer).hits != want.hits || static_cast<std::int32_t>(copies.size()) != want.misses) {
    return ::testing::AssertionFailure()
           << "hits/misses " << d.info(layer).hits << "/" << copies.size() << " but the pager has "
           << want.hits << "/" << want.misses;
  }
  if (!std::equal(map.begin(), map.end(), want.expert_map.begin(), want.expert_map.end())) {
    return ::testing::AssertionFailure() << "expert maps differ";
  }
  if (!std::equal(copies.begin(), copies.end(), want.copy_plan.begin(), want.copy_plan.end())) {
    return ::testing::AssertionFailure() << "copy lists differ";
  }
  if (!std::equal(shown.begin(), shown.end(), want.experts.begin(), want.experts.end())) {
    return ::testing::AssertionFailure() << "shown experts differ";
  }
  return ::testing::AssertionSuccess();
}

bool all_hidden(std::span<const std::int32_t> map) {
  return std::all_of(map.begin(), map.end(), [](std::int32_t s) { return s == -1; });
}

// Replays `calls` (one token each, `k` = the call's size) through pager<lfu_history> and the
// device step in the block form and as `automatic` picks (the warp form on layers of at most 32
// slots, every call here having at most 32 ids; else the block form); every call must agree, a
// failed call must fail everywhere and change nothing, and the step's counts must be each expert's
// successful calls. Returns the failed calls.
std::size_t replay(std::int32_t layers, std::int32_t experts, std::int32_t capacity,
                   const std::vector<call>& calls) {
  wisp::pager<wisp::lfu_history> pager(
      {.layers = layers, .experts = experts, .top_k = 1, .capacity = capacity});
  const pager_state_config config{.layers = layers,
                                  .experts = experts,
                                  .capacity = capacity,
                                  .policy = step_policy::lfu_history};
  host_pager_state block(config);
  host_pager_state picked(config);
  std::vector<std::uint64_t> want_counts(static_cast<std::size_t>(layers) * experts, 0);
  std::size_t failed = 0;
  std::size_t index = 0;
  for (const call& c : calls) {
    const std::int32_t l = c.layer;
    const std::span<const std::int32_t> ids(c.ids);
    EXPECT_LE(c.ids.size(), 32u);
    const pager_step_status b = block.step(l, ids, step_kernel::block);
    const pager_step_status a = picked.step(l, ids, step_kernel::automatic);
    const std::string where = "call " + std::to_string(index++) + " layer " + std::to_string(l) +
                              " capacity " + std::to_string(capacity);
    const std::vector<const host_pager_state*> ran = {&block, &picked};
    try {
      pager.begin_step();
      const wisp::prepare_result want =
          pager.prepare(l, c.ids, static_cast<std::int32_t>(c.ids.size()), 1);
      EXPECT_TRUE(b == pager_step_status::ok && a == pager_step_status::ok) << where;
      for (const host_pager_state* d : ran) {
        EXPECT_TRUE(same_call(want, *d, l)) << where;
      }
      for (const std::int32_t e : want.experts) {
        ++want_counts[static_cast<std::size_t>(l) * experts + static_cast<std::size_t>(e)];
      }
    } catch (const wisp::logic_error&) {
      EXPECT_TRUE(b != pager_step_status::ok && a == b) << where;
      for (const host_pager_state* d : ran) {
        EXPECT_TRUE(all_hidden(d->map(l)) && d->copies(l).empty()) << where;
      }
      ++failed;
    }
    for (const host_pager_state* d : ran) {
      const auto counts = d->counts(l);
      EXPECT_TRUE(std::equal(counts.begin(), counts.end(),
                             want_counts.begin() + static_cast<std::ptrdiff_t>(l) * experts))
          << where << ": counts differ";
    }
    if (::testing::Test::HasFailure()) {
      return failed;  // one report, not thousands
    }
  }
  std::uint64_t misses = 0;
  for (std::int32_t l = 0; l < layers; ++l) {
    misses += block.info(l).total_misses;
    EXPECT_EQ(picked.info(l).total_misses, block.info(l).total_misses);
  }
  EXPECT_EQ(misses, pager.stats().misses);
  return failed;
}

std::vector<call> trace_calls(const wisp::routing_trace& t) {
  std::vector<call> calls;
  for (std::size_t s = 0; s < t.steps(); ++s) {
    for (std::int32_t l = 0; l < t.shape().layers; ++l) {
      call c{l, {}};
      for (std::int32_t j = 0; j < t.shape().top_k; ++j) {
        c.ids.push_back(t.expert(s, l, j));
      }
      calls.push_back(std::move(c));
    }
  }
  return calls;
}

// Random calls of 1 to `max_ids` ids (repeats likely) on `layers` layers of `experts` experts:
// uniform, or skewed toward low ids (so that counts differ widely and ties are rare) when `skew`;
// every 29th call holds a bad id.
std::vector<call> random_calls(std::int32_t layers, std::int32_t experts, std::int32_t max_ids,
                               std::size_t n, bool skew, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<call> calls;
  for (std::size_t i = 0; i < n; ++i) {
    call c{static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(layers)), {}};
    const auto size = 1 + rng() % static_cast<std::uint32_t>(max_ids);
    for (std::uint32_t j = 0; j < size; ++j) {
      const auto u = rng() % static_cast<std::uint32_t>(experts);
      c.ids.push_back(static_cast<std::int32_t>(skew ? u * (rng() % (u + 1)) / experts : u));
    }
    if (i % 29 == 28) {
      c.ids[rng() % c.ids.size()] = rng() % 2 == 0 ? -1 : experts;
    }
    calls.push_back(std::move(c));
  }
  return calls;
}

class EsftLfuHistoryStep : public wisp::cuda::testing::esft_suite {};

TEST_P(EsftLfuHistoryStep, EqualsPagerLfuHistoryOnEveryCall) {
  const wisp::moe_shape shape = trace_->shape();
  EXPECT_EQ(replay(shape.layers, shape.experts, GetParam(), trace_calls(*trace_)), 0u);
}

INSTANTIATE_TEST_SUITE_P(Capacities, EsftLfuHistoryStep, ::testing::Values(8, 16, 32),
                         [](const auto& info) { return "capacity_" + std::to_string(info.param); });

TEST(LfuHistoryStep, EqualsPagerLfuHistoryOnRandomStreams) {
  for (const bool skew : {false, true}) {
    for (const std::int32_t capacity : {1, 3, 8, 20, 32, 40}) {
      // Calls wider than the capacity fail (over capacity) in every form alike.
      const std::vector<call> calls = random_calls(3, 48, 12, 3000, skew, 17u + capacity);
      const std::size_t failed = replay(3, 48, capacity, calls);
      EXPECT_GE(failed, calls.size() / 29) << "skew " << skew << " capacity " << capacity;
      EXPECT_LT(failed, calls.size()) << "skew " << skew << " capacity " << capacity;
    }
  }
  // Calls of up to 32 ids on 32 slots: the warp form's limits.
  EXPECT_GT(replay(2, 64, 32, random_calls(2, 64, 32, 2000, true, 5)), 0u);
}

TEST(LfuHistoryStep, TiesGoToTheLeastRecentlyUsed) {
  // Capacity 2, counts in brackets: 0 [1] and 1 [1]; 2 evicts 0 (a tie, 0 less recent); 1 hits
  // [2]; 3 evicts 2 [1], not the less recent 1 [2]; 2 comes back [2] and evicts 3 [1]; {0, 4}
  // evicts 1 then 2 (both [2], 1 less recent).
  const std::vector<call> calls = {{0, {0}}, {0, {1}}, {0, {2}},   {0, {1}},
                                   {0, {3}}, {0, {2}}, {0, {0, 4}}};
  EXPECT_EQ(replay(1, 8, 2, calls), 0u);
  host_pager_state d(
      {.layers = 1, .experts = 8, .capacity = 2, .policy = step_policy::lfu_history});
  for (std::size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(d.step(0, std::span<const std::int32_t>(calls[i].ids), step_kernel::warp),
              pager_step_status::ok);
  }
  ASSERT_EQ(d.copies(0).size(), 1u);
  EXPECT_EQ(d.copies(0)[0].expert, 2);
  EXPECT_EQ(d.copies(0)[0].slot, 1);  // 0's slot: the free list gave slot 1 first
  EXPECT_EQ(d.counts(0)[0], 1u);      // an evicted expert keeps its count
}

TEST(LfuHistoryStep, CountsAboveTwoToThe32CompareByBothHalves) {
  // 0 [2^32 + 5] and 1 [7] fill both slots (0 least recent); 2 evicts 1 [8], the lower count,
  // not 0, whose low half (6) is the lower.
  host_pager_state d(
      {.layers = 1, .experts = 4, .capacity = 2, .policy = step_policy::lfu_history});
  d.state().count[0] = (std::uint64_t{1} << 32u) + 5u;
  d.state().count[1] = 7;
  for (const std::int32_t e : {0, 1, 2}) {
    const std::int32_t ids[] = {e};
    ASSERT_EQ(d.step(0, std::span<const std::int32_t>(ids), step_kernel::warp),
              pager_step_status::ok);
  }
  ASSERT_EQ(d.copies(0).size(), 1u);
  EXPECT_EQ(d.copies(0)[0].expert, 2);
  EXPECT_EQ(d.copies(0)[0].slot, 0);  // 1's slot (the free list gave 0 slot 1, 1 slot 0)
  EXPECT_EQ(d.map(0)[1], -1);
  EXPECT_EQ(d.counts(0)[0], (std::uint64_t{1} << 32u) + 6u);
}

TEST(LfuHistoryStep, WarpEqualsBlockOnCountsAcrossTwoToThe32) {
  // Counts that start with high halves 0, 1 and 2^32 - 1 and low halves 0, 5 and 2^32 - 1 (many
  // ties in either half): the warp form's two-stage min against the block form's 64-bit order,
  // call by call.
  for (const std::int32_t capacity : {2, 8, 32}) {
    const pager_state_config config{
        .layers = 1, .experts = 48, .capacity = capacity, .policy = step_policy::lfu_history};
    host_pager_state block(config);
    host_pager_state warp(config);
    std::mt19937 rng(static_cast<std::uint32_t>(capacity));
    constexpr std::uint64_t highs[] = {0, 1, 0xffffffffu};
    constexpr std::uint64_t lows[] = {0, 5, 0xffffffffu};
    for (std::int32_t e = 0; e < config.experts; ++e) {
      const std::uint64_t c = (highs[rng() % 3] << 32u) | lows[rng() % 3];
      block.state().count[e] = c;
      warp.state().count[e] = c;
    }
    const std::int32_t max_ids = capacity < 12 ? capacity : 12;
    std::size_t copied = 0;
    const std::vector<call> calls = random_calls(1, 48, max_ids, 1500, false, 23);
    for (std::size_t i = 0; i < calls.size(); ++i) {
      const std::span<const std::int32_t> ids(calls[i].ids);
      ASSERT_EQ(block.step(0, ids, step_kernel::block), warp.step(0, ids, step_kernel::warp))
          << "capacity " << capacity << " call " << i;
      const auto same = [](auto a, auto b) {
        return std::equal(a.begin(), a.end(), b.begin(), b.end());
      };
      ASSERT_TRUE(same(block.copies(0), warp.copies(0)))
          << "capacity " << capacity << " call " << i;
      ASSERT_TRUE(same(block.map(0), warp.map(0))) << "capacity " << capacity << " call " << i;
      ASSERT_TRUE(same(block.counts(0), warp.counts(0)))
          << "capacity " << capacity << " call " << i;
      copied += warp.copies(0).size();
    }
    EXPECT_GT(copied, static_cast<std::size_t>(capacity) * 10u) << "too few evictions";
  }
}

TEST(LfuHistoryStep, ThreadGroupsOfAnySizeComputeTheSerialResult) {
  const std::vector<call> calls = random_calls(4, 64, 40, 400, true, 9);
  const pager_state_config config{
      .layers = 4, .experts = 64, .capacity = 24, .policy = step_policy::lfu_history};
  struct logged {
    std::vector<std::int32_t> map;
    std::vector<wisp::copy_op> copies;
    std::vector<std::uint64_t> counts;
    pager_step_status status;
    bool operator==(const logged&) const = default;
  };
  auto run = [&](std::int32_t group_size) {
    host_pager_state device(config);
    const wisp::cuda::pager_workspace workspace = device.workspace();
    std::vector<logged> log;
    wisp::cuda::testing::run_on_threads(group_size, [&](const auto& g) {
      for (const call& c : calls) {
        const pager_step_status status =
            wisp::cuda::pager_step(g, device.state().layer(c.layer), workspace, c.ids.data(),
                                   static_cast<std::int32_t>(c.ids.size()));
        g.sync();
        if (g.rank() == 0) {
          const auto map = device.map(c.layer);
          const auto copies = device.copies(c.layer);
          const auto counts = device.counts(c.layer);
          log.push_back({{map.begin(), map.end()},
                         {copies.begin(), copies.end()},
                         {counts.begin(), counts.end()},
                         status});
        }
        g.sync();
      }
    });
    return log;
  };
  const std::vector<logged> serial = run(1);
  ASSERT_EQ(serial.size(), calls.size());
  std::size_t evicting = 0;
  for (std::size_t i = 1; i < serial.size(); ++i) {
    evicting += serial[i].copies.size();
  }
  EXPECT_GT(evicting, 24u * 4u) << "too few misses to evict";
  for (const std::int32_t size : {3, 32}) {
    const std::vector<logged> threaded = run(size);
    ASSERT_EQ(threaded.size(), serial.size());
    for (std::size_t i = 0; i < serial.size(); ++i) {
      ASSERT_EQ(threaded[i], serial[i]) << size << " threads, call " << i;
    }
  }
}

TEST(LfuHistoryStep, LruKeepsNoCountsAndPoliciesAreNamed) {
  host_pager_state lru({.layers = 2, .experts = 8, .capacity = 2});
  EXPECT_TRUE(lru.counts(1).empty());
  EXPECT_EQ(lru.state().policy, step_policy::lru);
  EXPECT_EQ(std::string(wisp::cuda::step_policy_name(step_policy::lru)), "lru");
  EXPECT_EQ(std::string(wisp::cuda::step_policy_name(step_policy::lfu_history)), "lfu_history");
  EXPECT_THROW(host_pager_state(pager_state_config{.policy = static_cast<step_policy>(7)}),
               wisp::logic_error);
}

}  // namespace
