// SPDX-License-Identifier: Apache-2.0
// wisp::simulate: LRU against an independent stack-distance computation at every capacity
// (both scopes), Belady against every policy, the bandwidth model, sources and errors.
#include "cache/reference.hpp"
#include "support/expect_error.hpp"

#include <wisp/sim/simulate.hpp>
#include <wisp/sim/trace_sim.hpp>

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <vector>

namespace {

using namespace wisp;
using wisp::access;
using wisp::test::expect_error;

std::vector<access> random_stream(std::uint64_t seed, std::int32_t layers, std::int32_t experts,
                                  std::int32_t k, std::uint32_t steps) {
  std::mt19937_64 rng(seed);
  std::vector<access> out;
  for (const auto& call : test::random_calls(rng, layers, experts, k, steps, true)) {
    for (const cache_key e : call.keys)
      out.push_back({call.step, call.layer, e});
  }
  return out;
}

/// Brute-force LRU stack distances: for each access, 1 + the number of distinct keys of the same
/// cache touched since the previous access to its key (0 = first access: a compulsory miss).
std::vector<std::size_t> stack_distances(const std::vector<access>& stream, cache_scope scope,
                                         std::int32_t experts) {
  std::vector<std::size_t> out(stream.size(), 0);
  for (std::size_t i = 0; i < stream.size(); ++i) {
    std::set<std::int32_t> between;
    for (std::size_t j = i; j-- > 0;) {
      if (scope == cache_scope::per_layer && stream[j].layer != stream[i].layer)
        continue;
      const std::int32_t kj = stream[j].layer * experts + stream[j].expert;
      if (stream[j].layer == stream[i].layer && stream[j].expert == stream[i].expert) {
        out[i] = between.size() + 1;
        break;
      }
      between.insert(kj);
    }
  }
  return out;
}

TEST(Simulate, LruMissesEqualStackDistanceAtEveryCapacity) {
  const std::int32_t layers = 4, experts = 8;
  for (const std::int32_t k : {1, 2, 3}) {
    const auto stream = random_stream(static_cast<std::uint64_t>(k), layers, experts, k, 60);
    for (const cache_scope scope : {cache_scope::global, cache_scope::per_layer}) {
      const auto dist = stack_distances(stream, scope, experts);
      const std::int32_t max_capacity = scope == cache_scope::global ? layers * experts : experts;
      for (std::int32_t capacity = 1; capacity <= max_capacity; ++capacity) {
        std::uint64_t expected = 0;
        for (const std::size_t d : dist)
          expected += (d == 0 || d > static_cast<std::size_t>(capacity)) ? 1 : 0;
        // pure stream replay: every access its own call
        sim_config cfg{.scope = scope, .capacity = capacity, .protect_calls = false};
        const auto r = simulate<lru>({layers, experts}, stream, cfg);
        ASSERT_EQ(r.stats.misses, expected)
            << "k=" << k << " capacity " << capacity << " scope "
            << (scope == cache_scope::global ? "global" : "per_layer");
        ASSERT_EQ(r.stats.accesses, stream.size());
        if (k == 1) {  // with one expert per call protection changes nothing
          cfg.protect_calls = true;
          ASSERT_EQ(simulate<lru>({layers, experts}, stream, cfg).stats.misses, expected);
        }
      }
    }
  }
}

TEST(Simulate, BeladyNeverLosesToAnyPolicy) {
  const std::int32_t layers = 6, experts = 12, k = 3;
  for (std::uint64_t seed = 10; seed < 14; ++seed) {
    const auto stream = random_stream(seed, layers, experts, k, 40);
    for (const cache_scope scope : {cache_scope::global, cache_scope::per_layer}) {
      const std::int32_t max_capacity = scope == cache_scope::global ? layers * experts : experts;
      for (std::int32_t capacity = k; capacity <= max_capacity; capacity += 3) {
        for (const bool protect : {true, false}) {
          // Sequences of 5 to 9 passes: position-aware policies see positions.
          const sim_config cfg{.scope = scope,
                               .capacity = capacity,
                               .protect_calls = protect,
                               .sequence_starts = {0, 5, 14, 20, 27, 33}};
          const auto best = simulate<belady>({layers, experts}, stream, cfg);
          for (const std::string_view name : builtin_policy_names) {
            const auto r = simulate_named(name, {layers, experts}, stream, cfg);
            ASSERT_EQ(r.policy, name);
            ASSERT_LE(best.stats.misses, r.stats.misses)
                << name << " capacity " << capacity << " seed " << seed;
          }
        }
      }
    }
  }
}

TEST(Simulate, ReportsBytesStallsAndPerLayerCounters) {
  const auto stream = random_stream(3, 4, 16, 2, 50);
  sim_config cfg{.scope = cache_scope::global,
                 .capacity = 12,
                 .expert_bytes = 9u << 20,
                 .link = link_model::from_gbps(25.0, 10.0)};
  const auto r = simulate<least_stale>({4, 16}, stream, cfg);
  EXPECT_EQ(r.policy, "least_stale");
  EXPECT_EQ(r.bytes_moved, r.stats.misses * (9u << 20));
  const double per_miss = (9.0 * (1 << 20)) / 25e9 + 10e-6;
  EXPECT_NEAR(r.stall_seconds, static_cast<double>(r.stats.misses) * per_miss, 1e-12);
  cache_stats sum;
  for (const cache_stats& s : r.per_layer)
    sum += s;
  EXPECT_EQ(sum, r.stats);
  EXPECT_EQ(r.stats.hits + r.stats.misses, stream.size());
  EXPECT_LE(r.stats.collision_misses, r.stats.misses);
  const sim_config free_link{
      .scope = cache_scope::global, .capacity = 12, .expert_bytes = 9u << 20};
  EXPECT_DOUBLE_EQ(simulate<least_stale>({4, 16}, stream, free_link).stall_seconds, 0.0);
}

TEST(Simulate, CallableSourceEqualsRangeSource) {
  const auto stream = random_stream(4, 3, 8, 2, 30);
  const auto source = [&](auto&& f) {
    for (const access& a : stream)
      f(a);
  };
  for (const std::string_view name : builtin_policy_names) {
    const sim_config cfg{cache_scope::per_layer, 4};
    EXPECT_EQ(simulate_named(name, {3, 8}, stream, cfg).stats,
              simulate_named(name, {3, 8}, source, cfg).stats)
        << name;
  }
}

TEST(Simulate, ReplaysARoutingTrace) {
  routing_trace t({.layers = 3, .experts = 8, .top_k = 2});
  std::vector<access> stream;
  std::mt19937_64 rng(8);
  t.begin_sequence();
  for (std::uint32_t s = 0; s < 50; ++s) {
    std::vector<std::int32_t> ids;
    for (std::int32_t l = 0; l < 3; ++l) {
      const auto a = static_cast<std::int32_t>(rng() % 8);
      const auto b = static_cast<std::int32_t>((a + 1 + rng() % 7) % 8);
      ids.push_back(a);
      ids.push_back(b);
      stream.push_back({s, l, a});
      stream.push_back({s, l, b});
    }
    t.append_step(ids);
  }
  for (const cache_scope scope : {cache_scope::global, cache_scope::per_layer}) {
    const sim_config cfg{scope, 4};
    EXPECT_EQ(simulate<lru>(t, cfg).stats, simulate<lru>({3, 8}, stream, cfg).stats);
    EXPECT_EQ(simulate_named("belady", t, cfg).stats, simulate<belady>({3, 8}, stream, cfg).stats);
  }
}

TEST(Simulate, RejectsBadInput) {
  const std::vector<access> ok = {{0, 0, 1}, {0, 1, 2}};
  const sim_config cfg{cache_scope::per_layer, 2};
  expect_error([&] { (void)simulate<lru>({0, 8}, ok, cfg); }, "layers must be >= 1, got 0");
  expect_error([&] { (void)simulate<lru>({2, 0}, ok, cfg); }, "experts must be >= 1, got 0");
  expect_error(
      [&] {
        (void)simulate<lru>({2, 8}, ok, {cache_scope::per_layer, 9});
      },
      "capacity 9 must be in [1, key_space = 8]");
  expect_error([&] { (void)simulate<lru>({2, 8}, ok, {cache_scope::global, 0}); }, "capacity 0");
  expect_error(
      [&] {
        (void)simulate<lru>({2, 8}, std::vector<access>{{0, 2, 1}}, cfg);
      },
      "has layer 2 outside [0, 2)");
  expect_error(
      [&] {
        (void)simulate<lru>({2, 8}, std::vector<access>{{0, 1, 8}}, cfg);
      },
      "has expert 8 outside [0, 8)");
  expect_error(
      [&] {
        (void)simulate<lru>({2, 8}, std::vector<access>{{0, 0, -1}}, cfg);
      },
      "has expert -1");
  expect_error(
      [&] {
        (void)simulate<lru>({2, 8}, std::vector<access>{{3, 0, 1}, {2, 0, 1}}, cfg);
      },
      "goes back from step 3 to step 2");
  expect_error(
      [&] {
        (void)simulate<fifo>({1, 8}, std::vector<access>{{0, 0, 1}, {0, 0, 2}, {0, 0, 3}}, cfg);
      },
      "3 distinct keys requested but capacity is 2");
  expect_error([&] { (void)simulate_named("mru", {2, 8}, ok, cfg); }, "unknown policy 'mru'");
}

}  // namespace
