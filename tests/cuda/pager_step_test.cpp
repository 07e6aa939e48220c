// SPDX-License-Identifier: Apache-2.0
// The device pager step, run on the host exactly as a CUDA block runs it (and its warp form as a
// warp runs it, lanes in lockstep), against pager<lru> and pager<least_stale>: hits, misses,
// expert maps, copy lists and shown experts, call by call, on the real ESFT trace (capacities 8,
// 16, 32; skipped without the trace) and on synthetic traces (always), with batched calls, failed
// calls, int64 ids, and with 3 and 32 threads per group.
#include "esft_suite.hpp"
#include "host_thread_group.hpp"
#include "support/expect_error.hpp"

#include <wisp/cache/least_stale.hpp>
#include <wisp/cache/lru.hpp>
#include <wisp/cuda/pager_step.hpp>
#include <wisp/pager/pager.hpp>
#include <wisp/trace/esft.hpp>
#include <wisp/trace/routing_trace.hpp>
#include <wisp/trace/synthetic.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace {

using wisp::cuda::host_pager_state;
using wisp::cuda::pager_state_config;
using wisp::cuda::pager_step_status;
using wisp::test::expect_error;

// The ids of `tokens` consecutive steps of `layer`, token-major ([tokens x k]).
std::vector<std::int32_t> layer_ids(const wisp::routing_trace& t, std::size_t first_step,
                                    std::int32_t tokens, std::int32_t layer) {
  std::vector<std::int32_t> ids;
  for (std::size_t s = first_step; s < first_step + static_cast<std::size_t>(tokens); ++s) {
    for (std::int32_t j = 0; j < t.shape().top_k; ++j) {
      ids.push_back(t.expert(s, layer, j));
    }
  }
  return ids;
}

// One call's result as the device step leaves it.
struct call_view {
  std::span<const std::int32_t> map;
  std::span<const wisp::copy_op> copies;
  std::span<const std::int32_t> shown;
  std::int32_t hits = 0;
};

call_view view_of(const host_pager_state& d, std::int32_t layer) {
  return {d.map(layer), d.copies(layer), d.shown(layer), d.info(layer).hits};
}

template <class R>
bool equal_spans(std::span<const R> a, std::span<const R> b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end());
}

// Whether the device's call equals the pager's, with a message naming what differs.
::testing::AssertionResult same_call(const wisp::prepare_result& want, const call_view& got) {
  if (got.hits != want.hits || static_cast<std::int32_t>(got.copies.size()) != want.misses) {
    return ::testing::AssertionFailure()
           << "hits/misses " << got.hits << "/" << got.copies.size() << " but the pager has "
           << want.hits << "/" << want.misses;
  }
  if (!equal_spans(got.map, want.expert_map)) {
    return ::testing::AssertionFailure() << "expert maps differ";
  }
  if (!equal_spans(got.copies, want.copy_plan)) {
    return ::testing::AssertionFailure() << "copy lists differ";
  }
  if (!equal_spans(got.shown, want.experts)) {
    return ::testing::AssertionFailure() << "shown experts differ";
  }
  return ::testing::AssertionSuccess();
}

bool all_hidden(std::span<const std::int32_t> map) {
  return std::all_of(map.begin(), map.end(), [](std::int32_t s) { return s == -1; });
}

// Replays `steps` steps of `t` in batches of `tokens` tokens through pager<lru>,
// pager<least_stale> and both forms of the device step (the block step, and the warp step
// wherever the call and the layer allow it, as device_pager picks); every call must agree. A
// batch over the capacity must fail in all of them and change nothing. Returns the number of
// failed calls.
std::size_t replay(const wisp::routing_trace& t, std::int32_t capacity, std::size_t steps,
                   std::int32_t tokens) {
  const wisp::moe_shape shape = t.shape();
  const wisp::pager_config config{
      .layers = shape.layers, .experts = shape.experts, .top_k = shape.top_k, .capacity = capacity};
  wisp::pager<wisp::lru> lru(config);
  wisp::pager<wisp::least_stale> least_stale(config);
  const pager_state_config device_config{
      .layers = shape.layers, .experts = shape.experts, .capacity = capacity};
  host_pager_state device(device_config);
  host_pager_state picked(device_config);
  std::size_t failed = 0;
  for (std::size_t s = 0; s + static_cast<std::size_t>(tokens) <= steps; s += tokens) {
    lru.begin_step();
    least_stale.begin_step();
    for (std::int32_t l = 0; l < shape.layers; ++l) {
      const std::vector<std::int32_t> ids = layer_ids(t, s, tokens, l);
      const pager_step_status status = device.step(l, std::span<const std::int32_t>(ids));
      const pager_step_status picked_status =
          picked.step(l, std::span<const std::int32_t>(ids), wisp::cuda::step_kernel::automatic);
      const std::string where = "step " + std::to_string(s) + " layer " + std::to_string(l) +
                                " capacity " + std::to_string(capacity);
      try {
        const wisp::prepare_result a = lru.prepare(l, ids, tokens, shape.top_k);
        EXPECT_EQ(status, pager_step_status::ok) << where;
        EXPECT_TRUE(same_call(a, view_of(device, l))) << where << " (lru)";
        const wisp::prepare_result b = least_stale.prepare(l, ids, tokens, shape.top_k);
        EXPECT_TRUE(same_call(b, view_of(device, l))) << where << " (least_stale)";
        EXPECT_EQ(picked_status, pager_step_status::ok) << where;
        EXPECT_TRUE(same_call(a, view_of(picked, l))) << where << " (automatic step)";
      } catch (const wisp::logic_error&) {
        EXPECT_THROW(least_stale.prepare(l, ids, tokens, shape.top_k), wisp::logic_error);
        EXPECT_EQ(status, pager_step_status::over_capacity) << where;
        EXPECT_TRUE(all_hidden(device.map(l)) && device.copies(l).empty()) << where;
        EXPECT_EQ(picked_status, pager_step_status::over_capacity) << where;
        EXPECT_TRUE(all_hidden(picked.map(l)) && picked.copies(l).empty()) << where;
        ++failed;
      }
      if (::testing::Test::HasFailure()) {
        return failed;  // one report, not thousands
      }
    }
  }
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  for (std::int32_t l = 0; l < shape.layers; ++l) {
    hits += device.info(l).total_hits;
    misses += device.info(l).total_misses;
  }
  EXPECT_EQ(hits, lru.stats().hits);
  EXPECT_EQ(misses, lru.stats().misses);
  for (std::int32_t l = 0; l < shape.layers; ++l) {
    EXPECT_EQ(picked.info(l).total_hits, device.info(l).total_hits);
    EXPECT_EQ(picked.info(l).resident, device.info(l).resident);
    EXPECT_EQ(picked.info(l).calls, device.info(l).calls);
  }
  return failed;
}

class EsftPagerStep : public wisp::cuda::testing::esft_suite {};

TEST_P(EsftPagerStep, EqualsPagerLruAndLeastStaleOnEveryCall) {
  EXPECT_EQ(replay(*trace_, GetParam(), trace_->steps(), 1), 0u);
}

INSTANTIATE_TEST_SUITE_P(Capacities, EsftPagerStep, ::testing::Values(8, 16, 32),
                         [](const auto& info) { return "capacity_" + std::to_string(info.param); });

TEST(PagerStep, EqualsThePagersOnSyntheticTraces) {
  const auto esft_like = wisp::make_synthetic_trace(wisp::synthetic_preset("default"), 600,
                                                    wisp::default_synthetic_seed);
  for (const std::int32_t capacity : {6, 8, 16, 32, 64}) {
    EXPECT_EQ(replay(esft_like, capacity, esft_like.steps(), 1), 0u) << capacity;
  }
  auto qwen = wisp::synthetic_preset("qwen3-30b-a3b");
  qwen.layers = 4;
  const auto wide = wisp::make_synthetic_trace(qwen, 400, 7);
  EXPECT_EQ(replay(wide, 32, wide.steps(), 1), 0u);
}

TEST(PagerStep, BatchedCallsAgreeAndCallsOverTheCapacityFailAlike) {
  const auto t = wisp::make_synthetic_trace(wisp::synthetic_preset("default"), 480,
                                            wisp::default_synthetic_seed);
  EXPECT_EQ(replay(t, 32, t.steps(), 4), 0u);  // 24 ids per call always fit 32 slots
  const std::size_t failed = replay(t, 16, t.steps(), 4);
  EXPECT_GT(failed, 0u) << "no call exceeded 16 slots: the failure path went untested";
  EXPECT_LT(failed, t.steps() * 26 / 4);
}

class BothSteps : public ::testing::TestWithParam<wisp::cuda::step_kernel> {};

INSTANTIATE_TEST_SUITE_P(Kernels, BothSteps,
                         ::testing::Values(wisp::cuda::step_kernel::block,
                                           wisp::cuda::step_kernel::warp),
                         [](const auto& info) {
                           return info.param == wisp::cuda::step_kernel::warp ? "warp" : "block";
                         });

TEST_P(BothSteps, BadIdsFailWithTheIdAndChangeNothing) {
  const wisp::cuda::step_kernel kernel = GetParam();
  host_pager_state device(pager_state_config{.layers = 2, .experts = 8, .capacity = 3});
  wisp::pager<wisp::lru> pager({.layers = 2, .experts = 8, .top_k = 1, .capacity = 3});
  const std::vector<std::vector<std::int32_t>> calls = {
      {1, 2}, {2, 5, 2}, {7, 8, 1}, {6}, {0, -3}, {3, 4}, {}, {0, 1, 2, 0}, {1, 2, 3, 4}, {4}};
  std::size_t call = 0;
  for (const std::vector<std::int32_t>& ids : calls) {
    const pager_step_status status = device.step(1, std::span<const std::int32_t>(ids), kernel);
    try {
      const wisp::prepare_result want =
          pager.prepare(1, ids, static_cast<std::int32_t>(ids.size()), 1);
      EXPECT_EQ(status, pager_step_status::ok) << call;
      EXPECT_TRUE(same_call(want, view_of(device, 1))) << call;
    } catch (const wisp::logic_error&) {
      EXPECT_NE(status, pager_step_status::ok) << call;
      EXPECT_TRUE(all_hidden(device.map(1)) && device.copies(1).empty()) << call;
    }
    ++call;
  }
  const wisp::cuda::pager_layer_info& info = device.info(1);
  EXPECT_EQ(info.first_error, pager_step_status::bad_id);
  EXPECT_EQ(info.first_error_value, 8);
  EXPECT_EQ(info.first_error_call, 2u);
  EXPECT_EQ(info.calls, calls.size());
  EXPECT_EQ(info.status, pager_step_status::ok);
  EXPECT_EQ(device.info(0).calls, 0u);
  EXPECT_TRUE(all_hidden(device.map(0)));
  // An over-capacity first failure records the number of distinct ids.
  host_pager_state other(pager_state_config{.layers = 1, .experts = 8, .capacity = 3});
  const std::vector<std::int64_t> wide = {0, 1, 1, 2, 3, 0};
  EXPECT_EQ(other.step(0, std::span<const std::int64_t>(wide), kernel),
            pager_step_status::over_capacity);
  EXPECT_EQ(other.info(0).first_error_value, 4);
  EXPECT_EQ(other.info(0).resident, 0);
}

TEST_P(BothSteps, Int64IdsPageLikeInt32Ids) {
  const auto t = wisp::make_synthetic_trace(wisp::synthetic_preset("default"), 200,
                                            wisp::default_synthetic_seed);
  const pager_state_config config{.layers = 26, .experts = 64, .capacity = 8};
  host_pager_state narrow(config);
  host_pager_state wide(config);
  for (std::size_t s = 0; s < t.steps(); ++s) {
    for (std::int32_t l = 0; l < 26; ++l) {
      const std::vector<std::int32_t> ids = layer_ids(t, s, 1, l);
      const std::vector<std::int64_t> ids64(ids.begin(), ids.end());
      (void)narrow.step(l, std::span<const std::int32_t>(ids));
      (void)wide.step(l, std::span<const std::int64_t>(ids64), GetParam());
      ASSERT_TRUE(equal_spans(narrow.map(l), wide.map(l)) &&
                  equal_spans(narrow.copies(l), wide.copies(l)));
    }
  }
}

// Every call's map, copy list, shown experts and status after running on `group_size` threads.
struct logged_call {
  std::vector<std::int32_t> map;
  std::vector<wisp::copy_op> copies;
  std::vector<std::int32_t> shown;
  pager_step_status status;
  friend bool operator==(const logged_call&, const logged_call&) = default;
};

TEST(PagerStep, ThreadGroupsOfAnySizeComputeTheSerialResult) {
  const auto t = wisp::make_synthetic_trace(wisp::synthetic_preset("default"), 120,
                                            wisp::default_synthetic_seed);
  // Calls of 1 to 6 tokens (up to 36 ids: several chunks of 32 ranks), with a few bad ids.
  struct call {
    std::int32_t layer;
    std::vector<std::int32_t> ids;
  };
  std::vector<call> calls;
  std::mt19937 rng(4);
  for (std::size_t s = 0; s + 6 <= t.steps(); s += 6) {
    for (std::int32_t l = 0; l < 26; l += 5) {
      std::vector<std::int32_t> ids = layer_ids(t, s, 1 + static_cast<std::int32_t>(rng() % 6), l);
      if (rng() % 17 == 0) {
        ids[rng() % ids.size()] = 64 + static_cast<std::int32_t>(rng() % 3);
      }
      calls.push_back({l, std::move(ids)});
    }
  }
  const pager_state_config config{.layers = 26, .experts = 64, .capacity = 16};
  auto run = [&](std::int32_t group_size) {
    host_pager_state device(config);
    const wisp::cuda::pager_workspace workspace = device.workspace();
    std::vector<logged_call> log;
    wisp::cuda::testing::run_on_threads(group_size, [&](const auto& g) {
      for (const call& c : calls) {
        const pager_step_status status =
            wisp::cuda::pager_step(g, device.state().layer(c.layer), workspace, c.ids.data(),
                                   static_cast<std::int32_t>(c.ids.size()));
        g.sync();
        if (g.rank() == 0) {
          log.push_back({{device.map(c.layer).begin(), device.map(c.layer).end()},
                         {device.copies(c.layer).begin(), device.copies(c.layer).end()},
                         {device.shown(c.layer).begin(), device.shown(c.layer).end()},
                         status});
        }
        g.sync();
      }
    });
    return log;
  };
  const std::vector<logged_call> serial = run(1);
  ASSERT_EQ(serial.size(), calls.size());
  {  // the warp step where a call allows it (calls of up to 32 ids), as device_pager picks
    host_pager_state device(config);
    std::size_t warp_calls = 0;
    for (std::size_t i = 0; i < calls.size(); ++i) {
      const call& c = calls[i];
      const pager_step_status status = device.step(c.layer, std::span<const std::int32_t>(c.ids),
                                                   wisp::cuda::step_kernel::automatic);
      warp_calls += c.ids.size() <= 32 ? 1 : 0;
      const logged_call got{{device.map(c.layer).begin(), device.map(c.layer).end()},
                            {device.copies(c.layer).begin(), device.copies(c.layer).end()},
                            {device.shown(c.layer).begin(), device.shown(c.layer).end()},
                            status};
      ASSERT_EQ(got, serial[i]) << "automatic step, call " << i;
    }
    EXPECT_GT(warp_calls, calls.size() / 2);
    EXPECT_LT(warp_calls, calls.size());
  }
  EXPECT_TRUE(std::any_of(serial.begin(), serial.end(), [](const logged_call& c) {
    return c.status == pager_step_status::bad_id;
  }));
  EXPECT_TRUE(std::any_of(serial.begin(), serial.end(), [](const logged_call& c) {
    return c.status == pager_step_status::over_capacity;
  }));
  for (const std::int32_t size : {3, 32}) {
    const std::vector<logged_call> threaded = run(size);
    ASSERT_EQ(threaded.size(), serial.size());
    for (std::size_t i = 0; i < serial.size(); ++i) {
      ASSERT_EQ(threaded[i], serial[i]) << size << " threads, call " << i;
    }
  }
}

// The device pager built from a host pager's config holds the host pager's layers, experts and
// per-layer capacities, and decides as it does (LRU, one call per token of a synthetic trace).
TEST(PagerStep, FromPagerMirrorsTheHostPagersConfig) {
  wisp::pager_config host = wisp::pager_config::for_shape({3, 16, 2}, 4);
  host.layer_capacities = {2, 5, 16};
  const pager_state_config c =
      pager_state_config::from_pager(host, wisp::cuda::step_policy::lfu_history);
  EXPECT_EQ(c.layers, 3);
  EXPECT_EQ(c.experts, 16);
  EXPECT_EQ(c.policy, wisp::cuda::step_policy::lfu_history);
  for (std::int32_t l = 0; l < 3; ++l) {
    EXPECT_EQ(c.capacity_of(l), host.layer_capacities[static_cast<std::size_t>(l)]);
  }

  const wisp::routing_trace t = wisp::make_synthetic_trace(
      wisp::synthetic_config{.layers = 3, .experts = 16, .top_k = 2}, 200, 5);
  wisp::pager<wisp::lru> pager(host);
  host_pager_state device(pager_state_config::from_pager(host));
  for (std::size_t s = 0; s < t.steps(); ++s) {
    pager.begin_step();
    for (std::int32_t l = 0; l < 3; ++l) {
      const std::vector<std::int32_t> ids = layer_ids(t, s, 1, l);
      const wisp::prepare_result want = pager.prepare(l, ids, 1, 2);
      ASSERT_EQ(device.step(l, std::span<const std::int32_t>(ids)), pager_step_status::ok);
      ASSERT_TRUE(same_call(want, view_of(device, l))) << "step " << s << " layer " << l;
    }
  }

  host.scope = wisp::cache_scope::global;
  host.layer_capacities.clear();
  expect_error([&] { (void)pager_state_config::from_pager(host); },
               "the device step keeps one cache per layer; the host pager's scope is global");
}

TEST(PagerStep, ConfigurationAndLayerErrorsAreNamed) {
  expect_error([] { host_pager_state(pager_state_config{.layers = 0}); }, "layers 0");
  expect_error([] { host_pager_state(pager_state_config{.experts = 4, .capacity = 5}); },
               "capacity 5 of layer 0 must be in [1, experts = 4]");
  expect_error(
      [] {
        host_pager_state(pager_state_config{.layers = 2, .experts = 4, .layer_capacities = {2}});
      },
      "layer_capacities has 1 entries for 2 layers");
  expect_error([] { host_pager_state(pager_state_config{.layers = 1 << 16, .experts = 1 << 16}); },
               "overflows int32");
  host_pager_state device(
      pager_state_config{.layers = 2, .experts = 4, .layer_capacities = {1, 4}});
  EXPECT_EQ(device.info(0).capacity, 1);
  EXPECT_EQ(device.info(1).capacity, 4);
  const std::vector<std::int32_t> ids{0};
  expect_error([&] { (void)device.step(2, std::span<const std::int32_t>(ids)); },
               "layer 2 is outside [0, 2)");
  expect_error([&] { (void)device.map(-1); }, "layer -1");
  // The warp step serves at most 32 ids on at most 32 slots; an explicit request beyond fails.
  host_pager_state wide(
      pager_state_config{.layers = 2, .experts = 64, .layer_capacities = {33, 8}});
  const std::vector<std::int32_t> many(33, 1);
  expect_error(
      [&] {
        (void)wide.step(1, std::span<const std::int32_t>(many), wisp::cuda::step_kernel::warp);
      },
      "the call has 33 ids, layer 1 8 slots");
  expect_error(
      [&] {
        (void)wide.step(0, std::span<const std::int32_t>(ids), wisp::cuda::step_kernel::warp);
      },
      "the call has 1 ids, layer 0 33 slots");
  EXPECT_EQ(wide.info(0).calls + wide.info(1).calls, 0u);
  // automatic falls back to the block step there.
  EXPECT_EQ(wide.step(1, std::span<const std::int32_t>(many), wisp::cuda::step_kernel::automatic),
            pager_step_status::ok);
  EXPECT_EQ(wide.step(0, std::span<const std::int32_t>(ids), wisp::cuda::step_kernel::automatic),
            pager_step_status::ok);
  EXPECT_EQ(wisp::cuda::pick_step_kernel(wisp::cuda::step_kernel::automatic, 32, 32),
            wisp::cuda::step_kernel::warp);
  EXPECT_EQ(wisp::cuda::pick_step_kernel(wisp::cuda::step_kernel::automatic, 33, 32),
            wisp::cuda::step_kernel::block);
  EXPECT_EQ(wisp::cuda::pick_step_kernel(wisp::cuda::step_kernel::block, 4, 4),
            wisp::cuda::step_kernel::block);
}

}  // namespace
