// SPDX-License-Identifier: Apache-2.0
// The device pager step run on the host (the block step with serial_group, one thread doing a
// block's work; the warp step with lockstep_warp, its 32 lanes in turn), against the host
// pager<lru> on the same calls, in the same binary. Two streams: top-8 of 128 experts at
// capacity 32 (the synthetic qwen3-30b-a3b preset, the target's shape) and the ESFT trace at
// capacity 16 (its synthetic stand-in when the trace is absent). One call = one (token, layer)
// step; items/s is steps/s. Quote medians of interleaved repetitions:
//   wisp_cuda_bench --benchmark_repetitions=9 --benchmark_enable_random_interleaving=true
#include "support/bench_trace.hpp"

#include <wisp/cache/lru.hpp>
#include <wisp/cuda/pager_step.hpp>
#include <wisp/pager/pager.hpp>
#include <wisp/trace/routing_trace.hpp>
#include <wisp/trace/synthetic.hpp>

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace {

// A trace flattened into calls: call c is layer c % layers, ids [c * k, (c + 1) * k).
struct call_stream {
  std::int32_t layers = 0;
  std::int32_t experts = 0;
  std::int32_t top_k = 0;
  std::int32_t capacity = 0;
  std::vector<std::int32_t> ids;
  std::string label;

  [[nodiscard]] std::size_t calls() const noexcept {
    return ids.size() / static_cast<std::size_t>(top_k);
  }
};

call_stream flatten(const wisp::routing_trace& t, std::int32_t capacity, std::string label) {
  call_stream s{t.shape().layers, t.shape().experts, t.shape().top_k, capacity, {},
                std::move(label)};
  for (std::size_t step = 0; step < t.steps(); ++step) {
    for (std::int32_t l = 0; l < s.layers; ++l) {
      for (std::int32_t j = 0; j < s.top_k; ++j) {
        s.ids.push_back(t.expert(step, l, j));
      }
    }
  }
  return s;
}

const call_stream& stream(std::int64_t which) {
  static const call_stream qwen =
      flatten(wisp::make_synthetic_trace(wisp::synthetic_preset("qwen3-30b-a3b"), 2000, 1), 32,
              "top-8 of 128, capacity 32 (synthetic qwen3-30b-a3b)");
  static const call_stream esft = [] {
    const wisp::bench::bench_trace b = wisp::bench::load_bench_trace();
    return flatten(b.trace, 16, "top-6 of 64, capacity 16 (" + b.source + ")");
  }();
  return which == 0 ? qwen : esft;
}

// Runs one call of the stream from `cursor` and advances it cyclically.
template <class Step>
void run(benchmark::State& state, Step&& step) {
  const call_stream& s = stream(state.range(0));
  const auto k = static_cast<std::size_t>(s.top_k);
  const std::size_t calls = s.calls();
  for (std::size_t c = 0; c < calls; ++c) {  // warm-up pass: caches full, as in steady state
    step(static_cast<std::int32_t>(c % static_cast<std::size_t>(s.layers)),
         std::span<const std::int32_t>(s.ids.data() + c * k, k));
  }
  std::size_t cursor = 0;
  for (auto _ : state) {
    step(static_cast<std::int32_t>(cursor % static_cast<std::size_t>(s.layers)),
         std::span<const std::int32_t>(s.ids.data() + cursor * k, k));
    cursor = cursor + 1 == calls ? 0 : cursor + 1;
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(s.label);
}

void BM_device_step_on_host(benchmark::State& state) {
  const call_stream& s = stream(state.range(0));
  wisp::cuda::host_pager_state pager(
      {.layers = s.layers, .experts = s.experts, .capacity = s.capacity});
  run(state, [&](std::int32_t layer, std::span<const std::int32_t> ids) {
    benchmark::DoNotOptimize(pager.step(layer, ids));
  });
}
BENCHMARK(BM_device_step_on_host)->Arg(0)->Arg(1);

// The warp step run in lockstep on the host (32 lanes one after another): the host form of what
// device_pager runs for these calls on a GPU.
void BM_warp_step_on_host(benchmark::State& state) {
  const call_stream& s = stream(state.range(0));
  wisp::cuda::host_pager_state pager(
      {.layers = s.layers, .experts = s.experts, .capacity = s.capacity});
  run(state, [&](std::int32_t layer, std::span<const std::int32_t> ids) {
    benchmark::DoNotOptimize(pager.step(layer, ids, wisp::cuda::step_kernel::warp));
  });
}
BENCHMARK(BM_warp_step_on_host)->Arg(0)->Arg(1);

void BM_pager_lru(benchmark::State& state) {
  const call_stream& s = stream(state.range(0));
  wisp::pager<wisp::lru> pager(
      {.layers = s.layers, .experts = s.experts, .top_k = s.top_k, .capacity = s.capacity});
  run(state, [&](std::int32_t layer, std::span<const std::int32_t> ids) {
    if (layer == 0) {
      pager.begin_step();
    }
    benchmark::DoNotOptimize(pager.prepare(layer, ids, 1, s.top_k).expert_map.data());
  });
}
BENCHMARK(BM_pager_lru)->Arg(0)->Arg(1);

}  // namespace
