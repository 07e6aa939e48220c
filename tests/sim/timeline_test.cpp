// SPDX-License-Identifier: Apache-2.0
// The timeline simulator: schedules computed by hand (with a prefetch that arrives in time and one
// still in flight), the serial model as its no-overlap special case, cancellation, approximate
// miss policies and bad configurations.
#include "support/expect_error.hpp"

#include <wisp/sim/simulate.hpp>
#include <wisp/sim/timeline_sim.hpp>
#include <wisp/sim/trace_sim.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <span>
#include <vector>

namespace {

using namespace wisp;
using wisp::test::expect_error;

// Two layers, four experts, top-1, alternating passes: (0, 1), (2, 3), (0, 1), (2, 3). After two
// passes the co-activation table predicts layer 1 exactly from layer 0.
routing_trace alternating() {
  routing_trace t({.layers = 2, .experts = 4, .top_k = 1});
  for (int s = 0; s < 4; ++s) {
    const std::vector<std::int32_t> ids =
        s % 2 == 0 ? std::vector<std::int32_t>{0, 1} : std::vector<std::int32_t>{2, 3};
    t.append_step(ids);
  }
  return t;
}

// One slot per layer; a copy of 1000 B at 1000 B/s plus 1 s latency takes 2 s.
timeline_config hand_config(double compute) {
  timeline_config c;
  c.scope = cache_scope::per_layer;
  c.capacity = 1;
  c.link = {.bytes_per_second = 1000, .latency_seconds = 1};
  c.expert_bytes = 1000;
  c.compute_seconds = compute;
  c.prefetch = {.rule = prefetch_rule::top_k};
  return c;
}

// compute 3 s per layer:
//   pass 0  L0: copy [0,2], compute [2,5]      L1: copy [5,7], compute [7,10]
//   pass 1  L0: copy [10,12], compute [12,15]  L1: copy [15,17], compute [17,20]
//           (no prefetch yet: layer 0 routed expert 2, never seen; the fallback, layer 1's
//            marginal, names expert 1, which is resident)
//   pass 2  L0: copy [20,22], compute [22,25]; prefetch of expert 1 for L1 queued at 20
//           link gap: prefetch [22,24] (evicts 3)  L1: hit, compute [25,28]
//   pass 3  L0: copy [28,30], compute [30,33]; prefetch of 3 queued at 28
//           link gap: prefetch [30,32]             L1: hit, compute [33,36]
TEST(Timeline, MatchesAHandComputedScheduleWithPrefetchInTime) {
  const timeline_result r = simulate_timeline<lru>(alternating(), hand_config(3));
  EXPECT_EQ(r.total_seconds, 36);
  EXPECT_EQ(r.stall_seconds, 12);
  EXPECT_EQ(r.compute_seconds, 24);
  EXPECT_EQ(r.tpot_seconds, 9);
  EXPECT_EQ(r.demand_copies, 6u);
  EXPECT_EQ(r.stats.misses, 6u);
  EXPECT_EQ(r.stats.hits, 2u);
  EXPECT_EQ(r.stats.prefetches, 2u);
  EXPECT_EQ(r.prefetches_started, 2u);
  EXPECT_EQ(r.prefetches_useful, 2u);
  EXPECT_EQ(r.prefetches_cancelled, 0u);
  EXPECT_EQ(r.prefetch_precision, 1.0);
  EXPECT_EQ(r.prefetch_recall, 2.0 / 8.0);
  EXPECT_EQ(r.wasted_prefetch_bytes, 0u);
  EXPECT_EQ(r.link_busy_seconds, 16);
  // Demand paging alone: every layer waits for its copy, 8 x (2 + 3).
  timeline_config demand = hand_config(3);
  demand.prefetch = {};
  const timeline_result d = simulate_timeline<lru>(alternating(), demand);
  EXPECT_EQ(d.total_seconds, 40);
  EXPECT_EQ(d.stall_seconds, 16);
}

// compute 1 s per layer: the prefetch is still in flight when its layer starts, which waits for
// it (and only for it):
//   pass 2  L0: copy [12,14], compute [14,15]  gap: prefetch [14,16]  L1: waits 1, compute [16,17]
//   pass 3  L0: copy [17,19], compute [19,20]  gap: prefetch [19,21]  L1: waits 1, compute [21,22]
TEST(Timeline, MatchesAHandComputedScheduleWithPrefetchInFlight) {
  const timeline_result r = simulate_timeline<lru>(alternating(), hand_config(1));
  EXPECT_EQ(r.total_seconds, 22);
  EXPECT_EQ(r.stall_seconds, 2 + 2 + 2 + 2 + 2 + 1 + 2 + 1);
  EXPECT_EQ(r.prefetches_useful, 2u);
}

// A predictor that knows the trace: it scores the experts the current pass routes at the target
// layer 1 and every other 0, and counts the passes it learned (the pass being replayed).
struct oracle_predictor {
  const routing_trace* trace = nullptr;
  std::size_t learned = 0;
  void score(const routing_pass& /*pass*/, std::int32_t target, std::span<float> scores) const {
    std::fill(scores.begin(), scores.end(), 0.0f);
    for (std::int32_t j = 0; j < trace->shape().top_k; ++j) {
      scores[static_cast<std::size_t>(trace->expert(learned, target, j))] = 1.0f;
    }
  }
  void learn(const routing_pass& /*pass*/) { ++learned; }
};
static_assert(routing_predictor<oracle_predictor>);

// compute 3 s per layer, every layer-1 expert prefetched from pass 0 on:
//   each pass  L0: copy [0,2], compute [2,5]; prefetch of L1's expert [2,4]  L1: hit, [5,8]
TEST(Timeline, TakesAnyRoutingPredictor) {
  const routing_trace t = alternating();
  oracle_predictor oracle{.trace = &t};
  const timeline_result r = simulate_timeline<lru>(
      t, hand_config(3), [](std::int32_t) { return lru{}; }, oracle);
  EXPECT_EQ(oracle.learned, 4u);  // once per pass, after it
  EXPECT_EQ(r.total_seconds, 32);
  EXPECT_EQ(r.stall_seconds, 8);
  EXPECT_EQ(r.demand_copies, 4u);
  EXPECT_EQ(r.prefetches_started, 4u);
  EXPECT_EQ(r.prefetches_useful, 4u);

  // The config's co-activation predictor, passed in, gives the default run and leaves trained.
  const timeline_config c = hand_config(3);
  coactivation_predictor table(t.shape(), c.predictor);
  const timeline_result own = simulate_timeline<lru>(
      t, c, [](std::int32_t) { return lru{}; }, table);
  const timeline_result made = simulate_timeline<lru>(t, c);
  EXPECT_EQ(own.total_seconds, made.total_seconds);
  EXPECT_EQ(own.prefetches_useful, made.prefetches_useful);
  EXPECT_EQ(table.passes(), 4.0);
}

routing_trace random_trace(std::uint64_t seed, std::size_t steps) {
  std::mt19937_64 rng(seed);
  const moe_shape shape{.layers = 5, .experts = 12, .top_k = 3};
  routing_trace t(shape);
  std::vector<std::int32_t> ids(shape.ids_per_step());
  std::vector<float> weights(ids.size());
  for (std::size_t s = 0; s < steps; ++s) {
    for (std::int32_t l = 0; l < shape.layers; ++l) {
      std::vector<std::int32_t> row;
      while (row.size() < 3) {
        const auto e = static_cast<std::int32_t>(rng() % (rng() % 2 == 0 ? 5 : 12));
        if (std::find(row.begin(), row.end(), e) == row.end()) {
          row.push_back(e);
        }
      }
      for (std::size_t j = 0; j < 3; ++j) {
        ids[static_cast<std::size_t>(l) * 3 + j] = row[j];
        weights[static_cast<std::size_t>(l) * 3 + j] = static_cast<float>(1 + rng() % 9) / 10.0f;
      }
    }
    t.append_step(ids, weights);
  }
  return t;
}

// Without prefetch or compute, nothing overlaps: the stall is the serial model's, and the cache
// sees exactly what simulate replays.
TEST(Timeline, ReducesToTheSerialModelWithoutOverlap) {
  const routing_trace t = random_trace(3, 60);
  for (const cache_scope scope : {cache_scope::per_layer, cache_scope::global}) {
    for (const std::string_view name : {"lru", "least_stale", "decayed_frequency", "belady"}) {
      timeline_config c;
      c.scope = scope;
      c.capacity = scope == cache_scope::global ? 20 : 5;
      c.link = {.bytes_per_second = 1000, .latency_seconds = 1};
      c.expert_bytes = 1000;
      const timeline_result r = simulate_timeline_named(name, t, c);
      const sim_config serial{
          .scope = scope, .capacity = c.capacity, .expert_bytes = c.expert_bytes, .link = c.link};
      const sim_result s = simulate_named(name, t, serial);
      EXPECT_EQ(r.stats.misses, s.stats.misses) << name;
      EXPECT_EQ(r.stats.hits, s.stats.hits) << name;
      EXPECT_EQ(r.stall_seconds, s.stall_seconds) << name;
      EXPECT_EQ(r.total_seconds, r.stall_seconds);
    }
  }
}

// With no compute the link is never idle before a layer starts: every prefetch is cancelled and
// the run is the demand-only one.
TEST(Timeline, CancelsPrefetchesWhoseLayerStarted) {
  const routing_trace t = random_trace(4, 40);
  timeline_config c;
  c.capacity = 5;
  c.link = {.bytes_per_second = 1000, .latency_seconds = 1};
  c.expert_bytes = 1000;
  const timeline_result demand = simulate_timeline<lru>(t, c);
  c.prefetch = {.rule = prefetch_rule::top_k, .overfetch = 2.0};
  const timeline_result r = simulate_timeline<lru>(t, c);
  EXPECT_EQ(r.prefetches_started, 0u);
  EXPECT_GT(r.prefetches_cancelled, 0u);
  EXPECT_EQ(r.stats, demand.stats);
  EXPECT_EQ(r.total_seconds, demand.total_seconds);
}

// Prefetch accounting holds on any run: useful <= started, precision and recall from the counts.
TEST(Timeline, PrefetchAccountingIsConsistent) {
  const routing_trace t = random_trace(5, 80);
  for (const prefetch_rule rule : {prefetch_rule::top_k, prefetch_rule::percentile}) {
    timeline_config c;
    c.scope = cache_scope::global;
    c.capacity = 18;
    c.link = {.bytes_per_second = 1000, .latency_seconds = 0.5};
    c.expert_bytes = 1000;
    c.compute_seconds = 2;
    c.prefetch = {.rule = rule, .overfetch = 1.5, .percentile = 70};
    const timeline_result r = simulate_timeline<least_stale>(t, c);
    EXPECT_GT(r.prefetches_started, 0u);
    EXPECT_LE(r.prefetches_useful, r.prefetches_started);
    EXPECT_EQ(r.stats.prefetches, r.prefetches_started);
    EXPECT_DOUBLE_EQ(r.prefetch_precision, static_cast<double>(r.prefetches_useful) /
                                               static_cast<double>(r.prefetches_started));
    EXPECT_EQ(r.wasted_prefetch_bytes, (r.prefetches_started - r.prefetches_useful) * 1000);
    EXPECT_EQ(r.demand_copies, r.stats.misses);
    EXPECT_DOUBLE_EQ(r.link_busy_seconds,
                     static_cast<double>(r.demand_copies + r.prefetches_started) * 1.5);
    EXPECT_DOUBLE_EQ(r.total_seconds, r.stall_seconds + r.compute_seconds);
  }
}

// Drop never copies what it may skip; every expert it drops is counted with its weight.
TEST(Timeline, ApproximateMissPoliciesReportWhatTheyChange) {
  const routing_trace t = random_trace(6, 50);
  timeline_config c;
  c.capacity = 4;
  c.link = {.bytes_per_second = 1000, .latency_seconds = 1};
  c.expert_bytes = 1000;
  const timeline_result exact = simulate_timeline<lru>(t, c);
  EXPECT_EQ(exact.rewrite.dropped, 0);
  c.miss = {.policy = miss_policy::drop, .always_fetch_top = 1};
  const timeline_result dropped = simulate_timeline<lru>(t, c);
  EXPECT_GT(dropped.rewrite.dropped, 0);
  EXPECT_LT(dropped.stats.misses, exact.stats.misses);
  EXPECT_GT(dropped.rewrite.dropped_weight, 0.0);
  EXPECT_LT(dropped.rewrite.dropped_weight, dropped.routed_weight);
  c.miss = {.policy = miss_policy::substitute, .always_fetch_top = 1};
  const timeline_result substituted = simulate_timeline<lru>(t, c);
  EXPECT_GT(substituted.rewrite.substituted, 0);
}

// Hybrid misses, one slot per layer, copy 2 s, compute 3 s per layer; the host takes 1 s per
// expert plus 0.5 s per call, and the value estimator remembers one call (rate 1: an expert is
// worth one future hit, the 1 s of host time it saves, if the layer's previous call routed it).
timeline_config hybrid_config() {
  timeline_config c = hand_config(3);
  c.prefetch = {};
  c.miss = {.policy = miss_policy::hybrid};
  c.hybrid = {.copy_seconds = 99, .expert_seconds = 1, .position_seconds = 0, .call_seconds = 0.5};
  c.hybrid_value_rate = 1;
  return c;
}

// Every pass routes (0, 1):
//   pass 0  L0: never seen, host 1.5 s < copy 2 s: host [0,1.5], compute [1.5,4.5]
//           L1: host [4.5,6], compute [6,9]
//   pass 1  L0: routed by the last call, worth 1 s, into a free slot: copy (2 - 1 < 1.5) [9,11],
//           compute [11,14]   L1: copy [14,16], compute [16,19]
//   pass 2  hits: [19,22], [22,25]     pass 3  hits: [25,28], [28,31]
// With the experts alternating, (0, 1) then (2, 3), no expert is ever worth a copy: 8 x (1.5 + 3).
TEST(Timeline, HybridMissesMatchAHandComputedSchedule) {
  routing_trace same({.layers = 2, .experts = 4, .top_k = 1});
  for (int s = 0; s < 4; ++s) {
    same.append_step(std::vector<std::int32_t>{0, 1});
  }
  const timeline_result r = simulate_timeline<lru>(same, hybrid_config());
  EXPECT_EQ(r.total_seconds, 31);
  EXPECT_EQ(r.stall_seconds, 7);
  EXPECT_EQ(r.host_experts, 2u);
  EXPECT_EQ(r.host_busy_seconds, 3);
  EXPECT_EQ(r.demand_copies, 2u);
  EXPECT_EQ(r.stats.accesses, 6u);  // the host's misses never reach the cache
  EXPECT_EQ(r.stats.hits, 4u);

  const timeline_result alt = simulate_timeline<lru>(alternating(), hybrid_config());
  EXPECT_EQ(alt.total_seconds, 8 * 4.5);
  EXPECT_EQ(alt.host_experts, 8u);
  EXPECT_EQ(alt.demand_copies, 0u);
  EXPECT_EQ(alt.stats.accesses, 0u);
}

// A host slower than the link gets nothing: the run is fetch's, copy for copy.
TEST(Timeline, HybridWithASlowHostIsFetch) {
  const routing_trace t = random_trace(6, 50);
  timeline_config c;
  c.capacity = 4;
  c.link = {.bytes_per_second = 1000, .latency_seconds = 1};
  c.expert_bytes = 1000;
  c.compute_seconds = 0.5;
  const timeline_result fetch = simulate_timeline<lru>(t, c);
  c.miss = {.policy = miss_policy::hybrid};
  c.hybrid = {.expert_seconds = 100, .call_seconds = 1};
  const timeline_result hybrid = simulate_timeline<lru>(t, c);
  EXPECT_EQ(hybrid.host_experts, 0u);
  EXPECT_EQ(hybrid.stats.misses, fetch.stats.misses);
  EXPECT_EQ(hybrid.stats.hits, fetch.stats.hits);
  EXPECT_EQ(hybrid.total_seconds, fetch.total_seconds);
  // A free host takes every miss and the cache never fills.
  c.hybrid = {};
  const timeline_result host = simulate_timeline<lru>(t, c);
  EXPECT_EQ(host.demand_copies, 0u);
  EXPECT_EQ(host.host_experts, fetch.stats.accesses);
  EXPECT_EQ(host.total_seconds, 0.5 * static_cast<double>(t.steps() * 5));
}

TEST(Timeline, RejectsBadConfigurations) {
  const routing_trace t = alternating();
  timeline_config c = hand_config(1);
  expect_error([&] { simulate_timeline<belady>(t, c); }, "belady", "prefetch (rule top-k)");
  c.prefetch = {};
  c.capacity = 5;
  expect_error([&] { simulate_timeline<lru>(t, c); }, "capacity 5", "per-layer");
  c.capacity = 1;
  c.compute_seconds = -1;
  expect_error([&] { simulate_timeline<lru>(t, c); }, "compute_seconds");
  c.compute_seconds = 0;
  c.link.bytes_per_second = 0;
  expect_error([&] { simulate_timeline<lru>(t, c); }, "bytes_per_second");
  c.link.bytes_per_second = 1;
  expect_error([&] { simulate_timeline_named("mru", t, c); }, "unknown policy 'mru'");
  c.miss = {.policy = miss_policy::hybrid};
  expect_error([&] { simulate_timeline<belady>(t, c); }, "belady", "(hybrid)");
  c.hybrid.expert_seconds = -3;
  expect_error([&] { simulate_timeline<lru>(t, c); }, "expert_seconds", "-3");
  c.hybrid.expert_seconds = 0;
  c.hybrid_value_rate = 2;
  expect_error([&] { simulate_timeline<lru>(t, c); }, "hybrid_value_rate", "2");
}

}  // namespace
