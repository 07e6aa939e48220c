// SPDX-License-Identifier: Apache-2.0
// Per-call cost of the paging step on the real ESFT trace (26 MoE layers x 64 experts, top-6),
// batch 1, both scopes, beside llama.cpp's upstream expert cache (`llama_cpp_cache`, the strongest
// production C++ alternative) replaying the same calls in the same binary.
//
// esft/<policy>/<scope>/<capacity>: `pager<P>::prepare` of one (token, layer) call with the token's
// position in its sequence; esft/llama_cpp/<scope>/<capacity>: `llama_cpp_cache::plan` of the
// same call. Every benchmark first replays the whole trace once (warm-up, untimed), then times one
// more pass, call by call, so every row averages over the same 213,772 calls. Counter `miss_rate`
// = misses / accesses of the timed pass. Run with --benchmark_repetitions and
// --benchmark_enable_random_interleaving to interleave the rows (bench/results/ has the logs).
#include "support/bench_trace.hpp"

#include <wisp/cache/visit_policy.hpp>
#include <wisp/pager/llama_cpp_cache.hpp>
#include <wisp/pager/pager.hpp>

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace {

/// The trace as calls: call c is layer `layer[c]` of the token at `position[c]`, ids
/// `[c * k, (c + 1) * k)`; a new token starts at layer 0.
struct trace_calls {
  std::int32_t layers = 0, experts = 0, k = 0;
  std::vector<std::int32_t> ids;
  std::vector<std::int32_t> layer;
  std::vector<std::uint32_t> position;
  std::string source;
  [[nodiscard]] std::size_t size() const noexcept { return layer.size(); }
};

const trace_calls& calls() {
  static const trace_calls c = [] {
    const wisp::bench::bench_trace loaded = wisp::bench::load_bench_trace();
    const wisp::routing_trace& t = loaded.trace;
    trace_calls out;
    out.layers = t.shape().layers;
    out.experts = t.shape().experts;
    out.k = t.shape().top_k;
    out.source = loaded.source;
    const auto starts = t.sequence_starts();
    std::size_t next_start = 0;
    std::size_t start = 0;
    t.for_each_call([&](std::uint32_t step, std::int32_t layer, std::span<const std::int32_t> ids) {
      while (next_start < starts.size() && starts[next_start] <= step) {
        start = starts[next_start++];
      }
      out.ids.insert(out.ids.end(), ids.begin(), ids.end());
      out.layer.push_back(layer);
      out.position.push_back(static_cast<std::uint32_t>(step - start));
    });
    return out;
  }();
  return c;
}

const char* scope_name(wisp::cache_scope scope) {
  return scope == wisp::cache_scope::global ? "global" : "layer";
}

/// Replays every call through `step(c)` (warm-up), zeroes `misses` and `accesses`, then times
/// one call per iteration from the first one on; sets `miss_rate` of the timed calls.
template <class Step>
void replay(benchmark::State& state, std::uint64_t& misses, std::uint64_t& accesses, Step&& step) {
  const trace_calls& c = calls();
  for (std::size_t i = 0; i < c.size(); ++i) {
    step(i);
  }
  misses = accesses = 0;
  std::size_t i = 0;
  for (auto _ : state) {
    step(i);
    i = i + 1 == c.size() ? 0 : i + 1;
  }
  state.SetLabel(c.source);
  state.counters["miss_rate"] =
      static_cast<double>(misses) / static_cast<double>(accesses == 0 ? 1 : accesses);
}

template <class Policy>
void BM_pager(benchmark::State& state, wisp::cache_scope scope, std::int32_t capacity) {
  const trace_calls& c = calls();
  wisp::pager<Policy> pager(wisp::pager_config{.layers = c.layers,
                                               .experts = c.experts,
                                               .top_k = c.k,
                                               .capacity = capacity,
                                               .scope = scope});
  const auto k = static_cast<std::size_t>(c.k);
  std::uint64_t accesses = 0, misses = 0;
  replay(state, misses, accesses, [&](std::size_t i) {
    if (c.layer[i] == 0) {
      pager.begin_step();
    }
    const wisp::prepare_result r =
        pager.prepare(c.layer[i], std::span<const std::int32_t>(c.ids.data() + i * k, k), 1, c.k,
                      std::span<const std::uint32_t>(&c.position[i], 1));
    benchmark::DoNotOptimize(r.expert_map.data());
    misses += static_cast<std::uint64_t>(r.misses);
    accesses += static_cast<std::uint64_t>(r.hits + r.misses);
  });
}

void BM_llama_cpp(benchmark::State& state, wisp::cache_scope scope, std::int32_t capacity) {
  const trace_calls& c = calls();
  wisp::llama_cpp_cache llama(wisp::llama_cpp_cache_config{.layers = c.layers,
                                                           .experts = c.experts,
                                                           .top_k = c.k,
                                                           .capacity = capacity,
                                                           .scope = scope});
  const auto k = static_cast<std::size_t>(c.k);
  std::uint64_t accesses = 0, misses = 0;
  replay(state, misses, accesses, [&](std::size_t i) {
    const wisp::llama_cpp_plan p =
        llama.plan(c.layer[i], std::span<const std::int32_t>(c.ids.data() + i * k, k), 1);
    benchmark::DoNotOptimize(p.expert_map.data());
    misses += static_cast<std::uint64_t>(p.misses);
    accesses += static_cast<std::uint64_t>(p.hits + p.misses);
  });
}

// One timed pass of the ESFT trace: 8,222 tokens x 26 layers (also the synthetic fallback's).
constexpr benchmark::IterationCount pass_calls = 8222 * 26;

// Capacities: per layer, a quarter and a half of the 64 experts, and top_k + 2; globally an
// eighth, a quarter and a half of the 1,664 keys, and the 83 and 166 slots (1/20, 1/10) of
// llama.cpp's published comparison.
const int registered = [] {
  const std::pair<wisp::cache_scope, std::vector<std::int32_t>> grid[] = {
      {wisp::cache_scope::per_layer, {8, 16, 32}},
      {wisp::cache_scope::global, {83, 166, 208, 416, 832}},
  };
  for (const auto& cell : grid) {
    // Not a structured binding: clang 14 cannot capture one in the lambdas below.
    const wisp::cache_scope scope = cell.first;
    for (const std::int32_t capacity : cell.second) {
      const std::string suffix =
          std::string("/") + scope_name(scope) + "/" + std::to_string(capacity);
      benchmark::RegisterBenchmark(("esft/llama_cpp" + suffix).c_str(),
                                   [scope = scope, capacity](benchmark::State& state) {
                                     BM_llama_cpp(state, scope, capacity);
                                   })
          ->Iterations(pass_calls);
      for (const std::string_view name : wisp::builtin_policy_names) {
        wisp::visit_policy(name, [&]<class P>(std::type_identity<P>) {
          if constexpr (!std::is_same_v<P, wisp::belady>) {  // offline: it needs the future
            benchmark::RegisterBenchmark(("esft/" + std::string(name) + suffix).c_str(),
                                         [scope = scope, capacity](benchmark::State& state) {
                                           BM_pager<P>(state, scope, capacity);
                                         })
                ->Iterations(pass_calls);
          }
        });
      }
    }
  }
  return 0;
}();

}  // namespace
