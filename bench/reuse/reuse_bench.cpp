// SPDX-License-Identifier: Apache-2.0
// Reuse-distance throughput. Each figure has its baseline in this binary:
//   - exact counter vs a naive LRU-stack scan (vector, linear search, rotate to front) on the
//     ESFT replay in the global scope (1,664 keys); falls back to the built-in synthetic trace
//     (preset "default", 8,222 steps, seed 1) when shared/traces is absent, and says so in the
//     label;
//   - SHARDS at 1% and 10% vs the exact counter on a large synthetic stream (Zipf 0.9 over 1M
//     keys, 4M accesses).
// Quote `accesses_per_s`, and the ratios exact/naive and sampled/exact from one run.
#include "support/bench_trace.hpp"

#include <wisp/reuse/histogram.hpp>
#include <wisp/reuse/reuse_distance.hpp>
#include <wisp/reuse/scoped_counter.hpp>
#include <wisp/reuse/shards.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace {

struct replay {
  std::vector<std::uint32_t> keys;  // global keys: layer * experts + expert
  std::uint32_t key_space = 0;
  std::string label;
};

const replay& trace_replay() {
  static const replay r = [] {
    replay out;
    const wisp::bench::bench_trace loaded = wisp::bench::load_bench_trace();
    const wisp::routing_trace& trace = loaded.trace;
    const auto experts = static_cast<std::uint32_t>(trace.shape().experts);
    out.key_space = static_cast<std::uint32_t>(trace.shape().layers) * experts;
    out.keys.reserve(trace.access_count());
    trace.for_each_access([&](const wisp::access& a) {
      out.keys.push_back(static_cast<std::uint32_t>(a.layer) * experts +
                         static_cast<std::uint32_t>(a.expert));
    });
    out.label = loaded.source + ", global scope";
    return out;
  }();
  return r;
}

// Zipf(alpha) over `keys` keys with ranks shuffled onto ids, by inverse CDF.
std::vector<std::uint32_t> zipf_stream(std::uint32_t keys, double alpha, std::size_t n,
                                       std::uint64_t seed) {
  std::mt19937_64 rng{seed};
  std::vector<double> cdf(keys);
  double sum = 0.0;
  for (std::uint32_t r = 0; r < keys; ++r) {
    sum += std::pow(static_cast<double>(r + 1), -alpha);
    cdf[r] = sum;
  }
  std::vector<std::uint32_t> ids(keys);
  for (std::uint32_t i = 0; i < keys; ++i) {
    ids[i] = i;
  }
  std::shuffle(ids.begin(), ids.end(), rng);
  std::uniform_real_distribution<double> u{0.0, sum};
  std::vector<std::uint32_t> out(n);
  for (auto& k : out) {
    const auto r =
        static_cast<std::size_t>(std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin());
    k = ids[std::min<std::size_t>(r, keys - 1)];
  }
  return out;
}

constexpr std::uint32_t large_keys = 1u << 20;

const std::vector<std::uint32_t>& large_stream() {
  static const auto s = zipf_stream(large_keys, 0.9, 4'000'000, 1);
  return s;
}

void set_rate(benchmark::State& state, std::size_t per_iteration) {
  state.counters["accesses_per_s"] = benchmark::Counter(
      static_cast<double>(per_iteration) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}

// The exact counter plus histogram recording: what a profiler pays per access.
void exact_trace(benchmark::State& state) {
  const auto& r = trace_replay();
  wisp::reuse_distance_counter counter{r.key_space};
  for (auto _ : state) {
    counter.reset();
    wisp::reuse_histogram h{{wisp::cache_scope::global, 1, r.key_space}};
    for (const auto key : r.keys) {
      h.record(counter.access(key));
    }
    benchmark::DoNotOptimize(h.cold());
  }
  state.SetLabel(r.label);
  set_rate(state, r.keys.size());
}

// Baseline: an LRU stack as a vector (most recent first), linear search, rotate to the front.
// For 1,664 keys the stack fits in L1/L2 and std::find vectorises: the natural "simple and
// fast enough" implementation for a small key space.
void naive_trace(benchmark::State& state) {
  const auto& r = trace_replay();
  std::vector<std::uint32_t> stack;
  stack.reserve(r.key_space);
  for (auto _ : state) {
    stack.clear();
    wisp::reuse_histogram h{{wisp::cache_scope::global, 1, r.key_space}};
    for (const auto key : r.keys) {
      const auto it = std::find(stack.begin(), stack.end(), key);
      if (it == stack.end()) {
        h.record(wisp::reuse_distance_counter::cold);
        stack.insert(stack.begin(), key);
      } else {
        h.record(static_cast<std::uint32_t>(it - stack.begin()) + 1);
        std::rotate(stack.begin(), it, it + 1);
      }
    }
    benchmark::DoNotOptimize(h.cold());
  }
  state.SetLabel(r.label);
  set_rate(state, r.keys.size());
}

// Per-layer scope through scoped_reuse_counter (26 counters of 64 keys).
void exact_trace_per_layer(benchmark::State& state) {
  const auto& r = trace_replay();
  const std::uint32_t experts = 64;
  const std::uint32_t layers = r.key_space / experts;
  for (auto _ : state) {
    wisp::scoped_reuse_counter counter{wisp::cache_scope::per_layer, layers, experts};
    for (const auto key : r.keys) {
      counter.access(key / experts, key % experts);
    }
    benchmark::DoNotOptimize(counter.histogram().cold());
  }
  state.SetLabel(r.label.substr(0, r.label.rfind("global")) + "per-layer scope");
  set_rate(state, r.keys.size());
}

void exact_large(benchmark::State& state) {
  const auto& s = large_stream();
  wisp::reuse_distance_counter counter{large_keys};
  for (auto _ : state) {
    counter.reset();
    wisp::reuse_histogram h{{wisp::cache_scope::stream, 1, large_keys}};
    for (const auto key : s) {
      h.record(counter.access(key));
    }
    benchmark::DoNotOptimize(h.cold());
  }
  state.SetLabel("Zipf 0.9, 1M keys, 4M accesses");
  set_rate(state, s.size());
}

void sampled_large(benchmark::State& state) {
  const auto& s = large_stream();
  const double rate = static_cast<double>(state.range(0)) / 1000.0;
  for (auto _ : state) {
    wisp::sampled_reuse_counter sampled{large_keys, rate};
    for (const auto key : s) {
      sampled.access(key);
    }
    benchmark::DoNotOptimize(sampled.sampled_accesses());
  }
  state.SetLabel("Zipf 0.9, 1M keys, 4M accesses, SHARDS rate " + std::to_string(rate));
  set_rate(state, s.size());
}

BENCHMARK(exact_trace)->Name("reuse/exact/trace_global")->Unit(benchmark::kMillisecond);
BENCHMARK(naive_trace)->Name("reuse/naive_stack/trace_global")->Unit(benchmark::kMillisecond);
BENCHMARK(exact_trace_per_layer)
    ->Name("reuse/exact/trace_per_layer")
    ->Unit(benchmark::kMillisecond);
BENCHMARK(exact_large)->Name("reuse/exact/zipf_1M")->Unit(benchmark::kMillisecond);
BENCHMARK(sampled_large)
    ->Name("reuse/shards/zipf_1M")
    ->ArgName("rate_permille")
    ->Arg(10)
    ->Arg(100)
    ->Unit(benchmark::kMillisecond);

}  // namespace
