// SPDX-License-Identifier: Apache-2.0
// One device pager step per layer on a GPU (top-8 of 128 experts, capacity 32, 48 layers: the
// synthetic qwen3-30b-a3b preset), timed with CUDA events:
// - BM_step_graph: 8 forward passes x 48 layers of step kernels captured in one CUDA graph and
//   replayed (new routing copied in before each replay); the time per step is what a layer pays
//   inside a captured forward (target: < 2 us). The steps run as device_pager picks: one warp
//   (warp_pager_step), since 8 ids and 32 slots are within its limit;
// - BM_step_graph_block: the same graph with the block step (pager_step on 128 threads), the
//   form every call larger than a warp's runs;
// - BM_empty_graph: the same graph of empty kernels, the floor a graph node costs on the device;
// - BM_step_launch: the same steps launched one by one (launch overhead included);
// - BM_host_round_trip, the baseline a host pager needs per layer: topk_ids back to the host
//   (8 ids + a stream synchronisation), pager<lru>::prepare, the map up again (wall time).
// Without a GPU every benchmark reports an error.
//   wisp_cuda_gpu_bench --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true
#include <wisp/cache/lru.hpp>
#include <wisp/cuda/device_pager.cuh>
#include <wisp/cuda/runtime.cuh>
#include <wisp/pager/pager.hpp>
#include <wisp/trace/synthetic.hpp>

#include <cuda_runtime_api.h>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace {

constexpr std::int32_t capacity = 32;
constexpr std::int32_t passes_per_graph = 8;

struct routing {
  std::int32_t layers = 0;
  std::int32_t experts = 0;
  std::int32_t top_k = 0;
  std::size_t steps = 0;
  std::vector<std::int32_t> ids;  // [steps x layers x k]
};

const routing& trace() {
  static const routing r = [] {
    const auto t = wisp::make_synthetic_trace(wisp::synthetic_preset("qwen3-30b-a3b"), 512, 1);
    routing out{t.shape().layers, t.shape().experts, t.shape().top_k, t.steps(), {}};
    for (std::size_t s = 0; s < t.steps(); ++s) {
      for (std::int32_t l = 0; l < out.layers; ++l) {
        for (std::int32_t j = 0; j < out.top_k; ++j) {
          out.ids.push_back(t.expert(s, l, j));
        }
      }
    }
    return out;
  }();
  return r;
}

// The device side of a benchmark: a stream, timing events, the pager and the ids.
struct device_setup {
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  std::int32_t* all_ids = nullptr;  // the whole trace
  std::int32_t* window = nullptr;   // the passes one graph replay reads
  wisp::cuda::device_pager pager;

  device_setup()
      : pager({.layers = trace().layers, .experts = trace().experts, .capacity = capacity}) {
    const routing& r = trace();
    WISP_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    WISP_CUDA_TRY(cudaEventCreate(&start));
    WISP_CUDA_TRY(cudaEventCreate(&stop));
    WISP_CUDA_TRY(cudaMalloc(&all_ids, r.ids.size() * sizeof(std::int32_t)));
    WISP_CUDA_TRY(cudaMemcpy(all_ids, r.ids.data(), r.ids.size() * sizeof(std::int32_t),
                             cudaMemcpyHostToDevice));
    WISP_CUDA_TRY(cudaMalloc(&window, pass_ids() * passes_per_graph * sizeof(std::int32_t)));
    WISP_CUDA_TRY(cudaDeviceSynchronize());  // the upload ran on the legacy stream
  }
  ~device_setup() {
    (void)cudaStreamSynchronize(stream);
    (void)cudaFree(window);
    (void)cudaFree(all_ids);
    (void)cudaEventDestroy(stop);
    (void)cudaEventDestroy(start);
    (void)cudaStreamDestroy(stream);
  }
  [[nodiscard]] static std::size_t pass_ids() {
    return static_cast<std::size_t>(trace().layers) * static_cast<std::size_t>(trace().top_k);
  }
  [[nodiscard]] const std::int32_t* ids_of(std::size_t step, std::int32_t layer) const {
    return all_ids + step * pass_ids() +
           static_cast<std::size_t>(layer) * static_cast<std::size_t>(trace().top_k);
  }
  [[nodiscard]] float elapsed_seconds() const {
    float ms = 0;
    WISP_CUDA_TRY(cudaEventElapsedTime(&ms, start, stop));
    return ms / 1000.0f;
  }
};

// Reports the mean microseconds per step over the timed iterations.
void report_steps(benchmark::State& state, double seconds, std::int64_t steps_per_iteration) {
  const auto steps = static_cast<double>(state.iterations() * steps_per_iteration);
  state.SetItemsProcessed(state.iterations() * steps_per_iteration);
  state.counters["us_per_step"] = steps > 0 ? seconds / steps * 1e6 : 0.0;
}

bool skip_without_gpu(benchmark::State& state) {
  if (wisp::cuda::device_count() == 0) {
    state.SkipWithError("no CUDA device on this machine");
    return true;
  }
  return false;
}

// An empty kernel with a step's launch shape: what a graph node costs by itself.
__global__ void empty_step_kernel(const std::int32_t* ids, std::int32_t n) {
  (void)ids;
  (void)n;
}

// Captures `enqueue(ids, n)` for 8 passes x every layer in one graph and times its replays (new
// routing copied in before each); reports microseconds per step.
template <class Enqueue>
void time_graph(benchmark::State& state, device_setup& d, Enqueue enqueue) {
  const routing& r = trace();
  const std::int32_t k = r.top_k;
  cudaGraph_t graph = nullptr;
  WISP_CUDA_TRY(cudaStreamBeginCapture(d.stream, cudaStreamCaptureModeThreadLocal));
  for (std::int32_t p = 0; p < passes_per_graph; ++p) {
    for (std::int32_t l = 0; l < r.layers; ++l) {
      enqueue(l,
              d.window + static_cast<std::size_t>(p) * device_setup::pass_ids() +
                  static_cast<std::size_t>(l) * static_cast<std::size_t>(k),
              k);
    }
  }
  WISP_CUDA_TRY(cudaStreamEndCapture(d.stream, &graph));
  cudaGraphExec_t exec = nullptr;
  WISP_CUDA_TRY(cudaGraphInstantiate(&exec, graph, 0));
  const std::size_t windows = r.steps / passes_per_graph;
  std::size_t next = 0;
  auto replay = [&](bool timed) {
    WISP_CUDA_TRY(
        cudaMemcpyAsync(d.window, d.ids_of(next * passes_per_graph, 0),
                        device_setup::pass_ids() * passes_per_graph * sizeof(std::int32_t),
                        cudaMemcpyDeviceToDevice, d.stream));
    next = (next + 1) % windows;
    if (timed) {
      WISP_CUDA_TRY(cudaEventRecord(d.start, d.stream));
    }
    WISP_CUDA_TRY(cudaGraphLaunch(exec, d.stream));
    if (timed) {
      WISP_CUDA_TRY(cudaEventRecord(d.stop, d.stream));
    }
    WISP_CUDA_TRY(cudaStreamSynchronize(d.stream));
  };
  for (std::size_t w = 0; w < windows; ++w) {
    replay(false);  // warm-up: caches full, graph uploaded
  }
  double seconds = 0;
  for (auto _ : state) {
    replay(true);
    const double t = d.elapsed_seconds();
    state.SetIterationTime(t);
    seconds += t;
  }
  report_steps(state, seconds, static_cast<std::int64_t>(passes_per_graph) * r.layers);
  (void)cudaGraphExecDestroy(exec);
  (void)cudaGraphDestroy(graph);
}

void BM_step_graph(benchmark::State& state) {
  if (skip_without_gpu(state)) {
    return;
  }
  device_setup d;
  time_graph(state, d, [&](std::int32_t layer, const std::int32_t* ids, std::int32_t n) {
    d.pager.step(layer, ids, n, d.stream);
  });
  const wisp::cuda::pager_layer_info info = d.pager.read_info(0, d.stream);
  state.counters["hit_rate"] = static_cast<double>(info.total_hits) /
                               static_cast<double>(info.total_hits + info.total_misses);
}
BENCHMARK(BM_step_graph)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_step_graph_block(benchmark::State& state) {
  if (skip_without_gpu(state)) {
    return;
  }
  device_setup d;
  time_graph(state, d, [&](std::int32_t layer, const std::int32_t* ids, std::int32_t n) {
    d.pager.step(layer, ids, n, d.stream, wisp::cuda::step_kernel::block);
  });
}
BENCHMARK(BM_step_graph_block)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_empty_graph(benchmark::State& state) {
  if (skip_without_gpu(state)) {
    return;
  }
  device_setup d;
  time_graph(state, d, [&](std::int32_t, const std::int32_t* ids, std::int32_t n) {
    empty_step_kernel<<<1, 32, 0, d.stream>>>(ids, n);
    WISP_CUDA_TRY(cudaGetLastError());
  });
}
BENCHMARK(BM_empty_graph)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_step_launch(benchmark::State& state) {
  if (skip_without_gpu(state)) {
    return;
  }
  device_setup d;
  const routing& r = trace();
  std::size_t step = 0;
  auto pass = [&] {
    for (std::int32_t l = 0; l < r.layers; ++l) {
      d.pager.step(l, d.ids_of(step, l), r.top_k, d.stream);
    }
    step = (step + 1) % r.steps;
  };
  for (std::size_t s = 0; s < r.steps; ++s) {
    pass();
  }
  double seconds = 0;
  for (auto _ : state) {
    WISP_CUDA_TRY(cudaEventRecord(d.start, d.stream));
    pass();
    WISP_CUDA_TRY(cudaEventRecord(d.stop, d.stream));
    WISP_CUDA_TRY(cudaStreamSynchronize(d.stream));
    const double t = d.elapsed_seconds();
    state.SetIterationTime(t);
    seconds += t;
  }
  report_steps(state, seconds, r.layers);
}
BENCHMARK(BM_step_launch)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_host_round_trip(benchmark::State& state) {
  if (skip_without_gpu(state)) {
    return;
  }
  device_setup d;
  const routing& r = trace();
  wisp::pager<wisp::lru> pager(
      {.layers = r.layers, .experts = r.experts, .top_k = r.top_k, .capacity = capacity});
  std::int32_t* host_ids = nullptr;  // pinned, as an engine would have them
  std::int32_t* host_map = nullptr;
  std::int32_t* device_map = nullptr;
  WISP_CUDA_TRY(
      cudaMallocHost(&host_ids, static_cast<std::size_t>(r.top_k) * sizeof(std::int32_t)));
  WISP_CUDA_TRY(
      cudaMallocHost(&host_map, static_cast<std::size_t>(r.experts) * sizeof(std::int32_t)));
  WISP_CUDA_TRY(
      cudaMalloc(&device_map, static_cast<std::size_t>(r.experts) * sizeof(std::int32_t)));
  std::size_t step = 0;
  auto pass = [&] {
    pager.begin_step();
    for (std::int32_t l = 0; l < r.layers; ++l) {
      WISP_CUDA_TRY(cudaMemcpyAsync(host_ids, d.ids_of(step, l),
                                    static_cast<std::size_t>(r.top_k) * sizeof(std::int32_t),
                                    cudaMemcpyDeviceToHost, d.stream));
      WISP_CUDA_TRY(cudaStreamSynchronize(d.stream));
      const wisp::prepare_result p = pager.prepare(
          l, std::span<const std::int32_t>(host_ids, static_cast<std::size_t>(r.top_k)), 1,
          r.top_k);
      std::copy(p.expert_map.begin(), p.expert_map.end(), host_map);
      WISP_CUDA_TRY(cudaMemcpyAsync(device_map, host_map, p.expert_map.size_bytes(),
                                    cudaMemcpyHostToDevice, d.stream));
    }
    WISP_CUDA_TRY(cudaStreamSynchronize(d.stream));
    step = (step + 1) % r.steps;
  };
  for (std::size_t s = 0; s < r.steps; ++s) {
    pass();
  }
  double seconds = 0;
  for (auto _ : state) {
    const auto begin = std::chrono::steady_clock::now();
    pass();
    const double t =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    state.SetIterationTime(t);
    seconds += t;
  }
  report_steps(state, seconds, r.layers);
  (void)cudaFree(device_map);
  (void)cudaFreeHost(host_map);
  (void)cudaFreeHost(host_ids);
}
BENCHMARK(BM_host_round_trip)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace
