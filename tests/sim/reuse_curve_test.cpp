// SPDX-License-Identifier: Apache-2.0
// The reuse curves predict the simulator: `profile_trace` per call equals `simulate<lru>` (calls
// protected, as the pager runs them) and per access equals `simulate<lru>` with
// `protect_calls = false`, at every capacity per layer and on a grid globally, on random routing
// traces and on the real ESFT trace (skipped when absent; every capacity on its first 300 tokens,
// one capacity per scope on the whole of it, so that the test stays short in a sanitizer build).
#include "support/traces.hpp"

#include <wisp/reuse/histogram.hpp>
#include <wisp/reuse/trace_profile.hpp>
#include <wisp/sim/trace_sim.hpp>
#include <wisp/trace/esft.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <random>
#include <span>
#include <vector>

namespace {

using namespace wisp;

// A trace whose layers route uniformly over a small working set, k distinct ids per row.
routing_trace random_trace(std::uint64_t seed, std::int32_t layers, std::int32_t experts,
                           std::int32_t k, std::size_t steps) {
  std::mt19937_64 rng(seed);
  routing_trace t({layers, experts, k});
  std::vector<std::int32_t> row(static_cast<std::size_t>(experts));
  std::iota(row.begin(), row.end(), 0);
  std::vector<std::int32_t> ids;
  for (std::size_t s = 0; s < steps; ++s) {
    ids.clear();
    for (std::int32_t l = 0; l < layers; ++l) {
      // Skewed: the first half of the row is drawn from a window that moves slowly.
      std::shuffle(row.begin(), row.begin() + std::min(experts, k + 3 + (l % 3)), rng);
      if (rng() % 5 == 0) {
        std::shuffle(row.begin(), row.end(), rng);
      }
      ids.insert(ids.end(), row.begin(), row.begin() + k);
    }
    t.append_step(ids);
  }
  return t;
}

// The first `steps` steps of `t` (complete traces only).
routing_trace prefix(const routing_trace& t, std::size_t steps) {
  routing_trace out(t.shape());
  std::vector<std::int32_t> ids;
  t.for_each_call([&](std::uint32_t step, std::int32_t, std::span<const std::int32_t> row) {
    if (step < steps) {
      ids.insert(ids.end(), row.begin(), row.end());
      if (ids.size() == t.shape().ids_per_step()) {
        out.append_step(ids);
        ids.clear();
      }
    }
  });
  return out;
}

// Capacity -> misses of simulate<lru> against the curve of the same scope and granularity
// (`with_access`: also per access against simulate without call protection).
void expect_curve_equals_sim(const routing_trace& t, cache_scope scope,
                             const std::vector<std::int32_t>& capacities, bool with_access = true) {
  const miss_curve per_call{profile_trace(t, scope).histogram};
  const miss_curve per_access{profile_trace(t, scope, reuse_granularity::access).histogram};
  for (const std::int32_t c : capacities) {
    if (c >= t.shape().top_k) {  // a protected call must fit
      const auto r = simulate<lru>(t, {.scope = scope, .capacity = c, .protect_calls = true});
      ASSERT_EQ(per_call.misses(static_cast<std::uint64_t>(c)), r.stats.misses)
          << "per call, capacity " << c;
    }
    if (!with_access) {
      continue;
    }
    const auto r = simulate<lru>(t, {.scope = scope, .capacity = c, .protect_calls = false});
    ASSERT_EQ(per_access.misses(static_cast<std::uint64_t>(c)), r.stats.misses)
        << "per access, capacity " << c;
  }
}

std::vector<std::int32_t> every(std::int32_t lo, std::int32_t hi) {
  std::vector<std::int32_t> out;
  for (std::int32_t c = lo; c <= hi; ++c) {
    out.push_back(c);
  }
  return out;
}

TEST(ReuseCurveVersusSim, RandomTracesEveryCapacityInBothScopes) {
  for (const std::int32_t k : {1, 2, 4}) {
    const auto t = random_trace(static_cast<std::uint64_t>(k), 5, 10, k, 300);
    expect_curve_equals_sim(t, cache_scope::per_layer, every(1, 10));
    expect_curve_equals_sim(t, cache_scope::global, every(1, 50));
  }
}

TEST(ReuseCurveVersusSim, EsftEveryCapacityPerLayerAndAGridGlobally) {
  const auto t = wisp::test::esft_trace();
  WISP_TEST_NEEDS_TRACE(t);
  const auto head = prefix(*t, 300);
  ASSERT_EQ(head.steps(), 300u);
  expect_curve_equals_sim(head, cache_scope::per_layer, every(1, 64), /*with_access=*/false);
  expect_curve_equals_sim(head, cache_scope::global, {6, 100, 156, 208, 416, 832, 1200, 1664},
                          /*with_access=*/false);
  expect_curve_equals_sim(*t, cache_scope::per_layer, {8}, /*with_access=*/false);
  expect_curve_equals_sim(*t, cache_scope::global, {416}, /*with_access=*/false);
}

}  // namespace
