// SPDX-License-Identifier: Apache-2.0
// Exact miss curves of the real ESFT routing trace (shared/traces) against brute-force LRU, in
// the global and the per-layer scope, per access and per call. Skips when the trace folder is
// absent.
#include "reuse/oracle.hpp"
#include "support/traces.hpp"

#include <wisp/reuse/histogram.hpp>
#include <wisp/reuse/trace_profile.hpp>
#include <wisp/trace/esft.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace {

using wisp::cache_scope;
using wisp::miss_curve;
using wisp::reuse_granularity;
namespace oracle = wisp::testing;

class EsftReuse : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (auto t = wisp::test::esft_trace()) {
      trace_ = std::make_unique<wisp::routing_trace>(std::move(*t));
    }
  }
  static void TearDownTestSuite() { trace_.reset(); }

  void SetUp() override { WISP_TEST_NEEDS_TRACE(trace_); }

  // Global keys (layer * E + expert) and per-layer expert streams, canonical order.
  static std::vector<std::uint32_t> global_stream() {
    const auto experts = static_cast<std::uint32_t>(trace_->shape().experts);
    std::vector<std::uint32_t> out;
    out.reserve(trace_->access_count());
    trace_->for_each_access([&](const wisp::access& a) {
      out.push_back(static_cast<std::uint32_t>(a.layer) * experts +
                    static_cast<std::uint32_t>(a.expert));
    });
    return out;
  }
  static std::vector<std::vector<std::uint32_t>> layer_streams() {
    std::vector<std::vector<std::uint32_t>> out(static_cast<std::size_t>(trace_->shape().layers));
    trace_->for_each_access([&](const wisp::access& a) {
      out[static_cast<std::size_t>(a.layer)].push_back(static_cast<std::uint32_t>(a.expert));
    });
    return out;
  }

  // Calls: each (step, layer) request's keys, globally (layer * E + expert) or per layer.
  static std::vector<std::vector<std::uint32_t>> global_calls() {
    const auto experts = static_cast<std::uint32_t>(trace_->shape().experts);
    std::vector<std::vector<std::uint32_t>> out;
    trace_->for_each_call([&](std::uint32_t, std::int32_t layer,
                              std::span<const std::int32_t> ids) {
      auto& call = out.emplace_back();
      for (const std::int32_t e : ids) {
        call.push_back(static_cast<std::uint32_t>(layer) * experts + static_cast<std::uint32_t>(e));
      }
    });
    return out;
  }
  static std::vector<std::vector<std::vector<std::uint32_t>>> layer_calls() {
    std::vector<std::vector<std::vector<std::uint32_t>>> out(
        static_cast<std::size_t>(trace_->shape().layers));
    trace_->for_each_call(
        [&](std::uint32_t, std::int32_t layer, std::span<const std::int32_t> ids) {
          out[static_cast<std::size_t>(layer)].emplace_back(ids.begin(), ids.end());
        });
    return out;
  }

  static std::unique_ptr<wisp::routing_trace> trace_;
};

std::unique_ptr<wisp::routing_trace> EsftReuse::trace_;

TEST_F(EsftReuse, ShapeAsDocumented) {
  EXPECT_EQ(trace_->shape().layers, 26);
  EXPECT_EQ(trace_->shape().experts, 64);
  EXPECT_EQ(trace_->access_count(), 1282632u);
}

TEST_F(EsftReuse, PerLayerScopeEqualsBruteForceAtEveryCapacity) {
  const auto profile =
      wisp::profile_trace(*trace_, cache_scope::per_layer, reuse_granularity::access);
  const miss_curve curve{profile.histogram};
  EXPECT_EQ(curve.accesses(), trace_->access_count());
  EXPECT_EQ(profile.distinct_per_cache, 64u);
  EXPECT_EQ(profile.distinct_total, curve.cold());

  // Every access's distance: per-layer explicit LRU stacks over the whole trace.
  wisp::reuse_histogram want{profile.histogram.shape()};
  for (const auto& stream : layer_streams()) {
    for (const auto d : oracle::stack_distances(stream)) {
      want.record(d);
    }
  }
  EXPECT_EQ(profile.histogram, want);

  // An actual LRU cache per layer at every capacity 0..64 (+1), misses summed over layers.
  const auto streams = layer_streams();
  for (std::uint32_t c = 0; c <= 65; ++c) {
    std::uint64_t misses = 0;
    for (const auto& stream : streams) {
      misses += oracle::lru_misses(stream, 64, c);
    }
    ASSERT_EQ(curve.misses(c), misses) << "capacity " << c;
  }
}

TEST_F(EsftReuse, GlobalScopeEqualsBruteForce) {
  const auto profile = wisp::profile_trace(*trace_, cache_scope::global, reuse_granularity::access);
  const miss_curve curve{profile.histogram};
  const auto stream = global_stream();
  constexpr std::uint32_t keys = 26 * 64;
  EXPECT_EQ(curve.accesses(), stream.size());
  EXPECT_EQ(profile.distinct_per_cache, keys);
  EXPECT_EQ(curve.cold(), keys);

  // Whole trace, a spread of capacities (every power of two, odd sizes, k, E, D, D + 1).
  for (const std::uint32_t c : {0u,   1u,   2u,   5u,   6u,    8u,    32u,   64u,   100u,  156u,
                                256u, 333u, 512u, 777u, 1024u, 1400u, 1600u, 1663u, 1664u, 1665u}) {
    ASSERT_EQ(curve.misses(c), oracle::lru_misses(stream, keys, c)) << "capacity " << c;
  }

  // A prefix (the first ~770 tokens): every access's distance against an explicit LRU stack, and
  // an LRU cache at every capacity.
  const std::vector<std::uint32_t> prefix(stream.begin(), stream.begin() + 20000);
  wisp::scoped_reuse_counter counter{cache_scope::global, 26, 64};
  std::vector<std::uint32_t> got;
  for (const auto key : prefix) {
    got.push_back(counter.access(key / 64, key % 64));
  }
  ASSERT_EQ(got, oracle::stack_distances(prefix));
  const miss_curve prefix_curve{counter.histogram()};
  for (std::uint32_t c = 1; c <= counter.distinct_per_cache(); ++c) {
    ASSERT_EQ(prefix_curve.misses(c), oracle::lru_misses(prefix, keys, c)) << "capacity " << c;
  }
}

TEST_F(EsftReuse, CallCurvesEqualProtectedLruInBothScopes) {
  // Per layer: a spread of capacities that hold a call (tests/sim checks every one against the
  // simulator).
  const miss_curve layer_curve{wisp::profile_trace(*trace_, cache_scope::per_layer).histogram};
  const auto per_layer = layer_calls();
  for (const std::uint32_t c : {6u, 8u, 16u, 32u, 64u, 65u}) {
    std::uint64_t misses = 0;
    for (const auto& calls : per_layer) {
      misses += oracle::protected_lru_misses(calls, 64, c);
    }
    ASSERT_EQ(layer_curve.misses(c), misses) << "capacity " << c;
  }
  // The figures quoted in docs/reuse.md: 8 slots per layer, per access against per call.
  const miss_curve access_curve{
      wisp::profile_trace(*trace_, cache_scope::per_layer, reuse_granularity::access).histogram};
  EXPECT_EQ(access_curve.misses(8), 939182u);
  EXPECT_EQ(layer_curve.misses(8), 883712u);

  // Global: a spread of capacities from one step's layer call up to every key.
  const miss_curve global_curve{wisp::profile_trace(*trace_, cache_scope::global).histogram};
  const auto calls = global_calls();
  for (const std::uint32_t c : {6u, 156u, 416u, 1664u}) {
    ASSERT_EQ(global_curve.misses(c), oracle::protected_lru_misses(calls, 26 * 64, c))
        << "capacity " << c;
  }
}

}  // namespace
