// SPDX-License-Identifier: Apache-2.0
// Timeline simulator throughput on the ESFT trace (26 layers x 64 experts, top-6, 1,282,632
// accesses; the synthetic default trace when it is absent, and the label says so): per-layer
// scope at 8 slots per layer (1/8 of the experts), an H100-like link (50 GB/s, 10 us per copy,
// 17.3 MB DeepSeek-V2-Lite experts) and 50 us of compute per layer.
//
// Baseline in the same binary: wisp::simulate, the serial stall model, replaying the same
// trace with the same policy and capacity (the timeline adds the link and compute queues, the
// prefetch queue and the predictor on top of the same cache). Quote `accesses_per_s` of
// timeline/* and the ratio  serial/lru  /  timeline/lru/none  from one run.
#include "support/bench_trace.hpp"

#include <wisp/sim/simulate.hpp>
#include <wisp/sim/timeline_sim.hpp>
#include <wisp/sim/trace_sim.hpp>

#include <benchmark/benchmark.h>

#include <string>
#include <string_view>

namespace {

const wisp::bench::bench_trace& timeline_trace() {
  static const wisp::bench::bench_trace t = wisp::bench::load_bench_trace();
  return t;
}

wisp::timeline_config h100_like(wisp::prefetch_rule rule) {
  wisp::timeline_config c;
  c.scope = wisp::cache_scope::per_layer;
  c.capacity = 8;
  c.link = {.bytes_per_second = 50e9, .latency_seconds = 10e-6};
  c.expert_bytes = 17'301'504;
  c.compute_seconds = 50e-6;
  c.prefetch = {.rule = rule};
  return c;
}

void set_rate(benchmark::State& state, std::size_t accesses) {
  state.counters["accesses_per_s"] =
      benchmark::Counter(static_cast<double>(accesses) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}

void timeline(benchmark::State& state, std::string_view policy, wisp::prefetch_rule rule) {
  const auto& t = timeline_trace();
  const wisp::timeline_config config = h100_like(rule);
  wisp::timeline_result r;
  for (auto _ : state) {
    r = wisp::simulate_timeline_named(policy, t.trace, config);
    benchmark::DoNotOptimize(r.total_seconds);
  }
  state.SetLabel(t.source + ", TPOT " + std::to_string(1e3 * r.tpot_seconds) + " ms");
  set_rate(state, t.trace.access_count());
}

void serial(benchmark::State& state, std::string_view policy) {
  const auto& t = timeline_trace();
  wisp::sim_config config;
  config.scope = wisp::cache_scope::per_layer;
  config.capacity = 8;
  wisp::sim_result r;
  for (auto _ : state) {
    r = wisp::simulate_named(policy, t.trace, config);
    benchmark::DoNotOptimize(r.stats.misses);
  }
  state.SetLabel(t.source);
  set_rate(state, t.trace.access_count());
}

[[maybe_unused]] const bool registered = [] {
  benchmark::RegisterBenchmark("serial/lru", [](benchmark::State& s) {
    serial(s, "lru");
  })->Unit(benchmark::kMillisecond);
  for (const std::string_view policy : {"lru", "least_stale", "decayed_frequency"}) {
    for (const auto& [rule, name] : {std::pair{wisp::prefetch_rule::none, "none"},
                                     std::pair{wisp::prefetch_rule::top_k, "top-k"}}) {
      benchmark::RegisterBenchmark(
          ("timeline/" + std::string(policy) + "/" + name).c_str(),
          [policy, rule = rule](benchmark::State& s) { timeline(s, policy, rule); })
          ->Unit(benchmark::kMillisecond);
    }
  }
  return true;
}();

}  // namespace
