// SPDX-License-Identifier: Apache-2.0
// The device pager step timed on a GPU, per layer, in the forms and with the levers docs/cuda.md
// names: `P` forward passes x every layer of nodes captured in one CUDA graph and replayed (new
// routing copied in before each replay), interleaved repetitions, CUDA events. Forms:
// - "automatic", "warp", "block": device_pager::step as it picks, forced warp, forced block;
// - "warp_lfu_history": the forced warp step under step_policy::lfu_history (counts over the
//   history, the policy the ESFT-routed decode picks);
// - "empty_node": an empty kernel per node, the floor a graph node costs;
// - "router_only": a stand-in router kernel per layer (one warp writes the layer's top-k ids, as a
//   router leaves them); "router_then_step": that router, then the step (two nodes per layer);
//   "fused_router_step": one kernel that routes and then runs `warp_pager_step` as a device
//   function (the lever that removes the step's node). fused - router_only is what the step
//   costs when fused into the router;
// - "launched": the automatic steps launched one by one, no graph;
// - "host_round_trip": what a host pager pays per layer instead: topk_ids to the host with a
//   stream synchronisation, pager<lru>::prepare, the map back (wall time).
// nvcc only.
#pragma once

#include "decode_report.hpp"
#include "gpu_support.cuh"

#include <wisp/cache/lru.hpp>
#include <wisp/cuda/device_pager.cuh>
#include <wisp/cuda/device_warp.cuh>
#include <wisp/cuda/pager_step.hpp>
#include <wisp/cuda/runtime.cuh>
#include <wisp/pager/pager.hpp>
#include <wisp/trace/synthetic.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace wisp::bench {

namespace detail {

// An empty kernel with a step's launch shape.
template <class Id>
__global__ void empty_step_kernel(const Id* ids, std::int32_t n) {
  (void)ids;
  (void)n;
}

// The stand-in router: lane j writes id j of the layer's routing where the step will read it.
template <class Id>
__global__ void router_kernel(const Id* routed, Id* topk_ids, std::int32_t n) {
  const auto lane = static_cast<std::int32_t>(threadIdx.x);
  if (lane < n) {
    topk_ids[lane] = routed[lane];
  }
}

// The router and the warp step in one kernel: the lever that removes the step's graph node.
template <class Id>
__global__ void route_and_step_kernel(cuda::pager_state state, std::int32_t layer,
                                      std::int32_t capacity, const Id* routed, Id* topk_ids,
                                      std::int32_t n) {
  __shared__ std::int32_t victim_slots[cuda::warp_step_limit];
  const auto lane = static_cast<std::int32_t>(threadIdx.x);
  if (lane < n) {
    topk_ids[lane] = routed[lane];
  }
  __syncwarp();
  cuda::pager_layer_ref s = state.layer(layer);
  s.capacity = capacity;
  (void)cuda::warp_pager_step(cuda::device_warp{}, s, cuda::pager_workspace{nullptr, victim_slots},
                              topk_ids, n);
}

}  // namespace detail

/// How the device step is timed.
struct device_step_options {
  std::int32_t capacity = 32;    ///< slots per layer (the warp form serves up to 32)
  std::int32_t passes = 8;       ///< forward passes per graph
  std::int32_t replays = 50;     ///< timed replays per repetition and form
  std::int32_t repetitions = 5;  ///< interleaved over the forms
  std::size_t steps = 512;       ///< tokens of routing (synthetic qwen3-30b-a3b, seed 1)
};

/// @brief Times the forms of the file comment; microseconds per layer, one value per
/// repetition. Throws wisp::cuda_error on a CUDA failure.
[[nodiscard]] inline device_step_report time_device_step(const device_step_options& o) {
  using clock = std::chrono::steady_clock;
  const routing_trace trace =
      make_synthetic_trace(synthetic_preset("qwen3-30b-a3b"), o.steps, decode_routing_seed);
  const decode_routing r = routing_from_trace(trace, static_cast<std::int32_t>(o.steps),
                                              "synthetic router, preset qwen3-30b-a3b, seed 1");
  const std::int32_t layers = r.shape.layers;
  const std::int32_t k = r.shape.top_k;
  const std::size_t pass_ids = r.per_token();
  const std::size_t windows = o.steps / static_cast<std::size_t>(o.passes);
  WISP_EXPECTS(windows >= 1, "device step: ", o.steps, " steps for ", o.passes, " passes");

  detail::cuda_stream stream;
  const cudaStream_t s = stream.get();
  detail::cuda_event start;
  detail::cuda_event stop;
  detail::device_array<std::int32_t> all_ids(r.ids.size());
  detail::device_array<std::int32_t> window(pass_ids * static_cast<std::size_t>(o.passes));
  detail::device_array<std::int32_t> topk(pass_ids * static_cast<std::size_t>(o.passes));
  WISP_CUDA_TRY(cudaMemcpy(all_ids.data(), r.ids.data(), r.ids.size() * sizeof(std::int32_t),
                           cudaMemcpyHostToDevice));
  WISP_CUDA_TRY(cudaDeviceSynchronize());
  const cuda::pager_state_config config{
      .layers = layers, .experts = r.shape.experts, .capacity = o.capacity};
  const auto at = [&](std::int32_t* base, std::int32_t pass, std::int32_t layer) {
    return base + static_cast<std::size_t>(pass) * pass_ids +
           static_cast<std::size_t>(layer) * static_cast<std::size_t>(k);
  };

  struct form {
    std::string name;
    std::unique_ptr<cuda::device_pager> pager;
    detail::cuda_graph graph;
    std::size_t next = 0;
    std::vector<double> us;
  };
  std::vector<std::unique_ptr<form>> forms;
  const auto add = [&](std::string name, bool with_pager,
                       const std::function<void(form&, std::int32_t, std::int32_t)>& node,
                       cuda::step_policy policy = cuda::step_policy::lru) {
    auto f = std::make_unique<form>();
    f->name = std::move(name);
    if (with_pager) {
      cuda::pager_state_config c = config;
      c.policy = policy;
      f->pager = std::make_unique<cuda::device_pager>(c);
    }
    form& ref = *f;
    f->graph.capture(s, [&] {
      for (std::int32_t p = 0; p < o.passes; ++p) {
        for (std::int32_t l = 0; l < layers; ++l) {
          node(ref, p, l);
        }
      }
    });
    forms.push_back(std::move(f));
  };
  const auto step = [&](cuda::step_kernel kernel) {
    return [&, kernel](form& f, std::int32_t p, std::int32_t l) {
      f.pager->step(l, at(window.data(), p, l), k, s, kernel);
    };
  };
  add("automatic", true, step(cuda::step_kernel::automatic));
  add("warp", true, step(cuda::step_kernel::warp));
  add("block", true, step(cuda::step_kernel::block));
  add("warp_lfu_history", true, step(cuda::step_kernel::warp), cuda::step_policy::lfu_history);
  add("empty_node", false, [&](form&, std::int32_t p, std::int32_t l) {
    detail::empty_step_kernel<<<1, 32, 0, s>>>(at(window.data(), p, l), k);
    WISP_CUDA_TRY(cudaGetLastError());
  });
  add("router_only", false, [&](form&, std::int32_t p, std::int32_t l) {
    detail::router_kernel<<<1, 32, 0, s>>>(at(window.data(), p, l), at(topk.data(), p, l), k);
    WISP_CUDA_TRY(cudaGetLastError());
  });
  add("router_then_step", true, [&](form& f, std::int32_t p, std::int32_t l) {
    detail::router_kernel<<<1, 32, 0, s>>>(at(window.data(), p, l), at(topk.data(), p, l), k);
    WISP_CUDA_TRY(cudaGetLastError());
    f.pager->step(l, at(topk.data(), p, l), k, s);
  });
  add("fused_router_step", true, [&](form& f, std::int32_t p, std::int32_t l) {
    detail::route_and_step_kernel<<<1, 32, 0, s>>>(
        f.pager->state(), l, o.capacity, at(window.data(), p, l), at(topk.data(), p, l), k);
    WISP_CUDA_TRY(cudaGetLastError());
  });

  const std::size_t window_bytes =
      pass_ids * static_cast<std::size_t>(o.passes) * sizeof(std::int32_t);
  const auto replay = [&](form& f, bool timed) -> double {
    WISP_CUDA_TRY(cudaMemcpyAsync(
        window.data(), all_ids.data() + f.next * static_cast<std::size_t>(o.passes) * pass_ids,
        window_bytes, cudaMemcpyDeviceToDevice, s));
    f.next = (f.next + 1) % windows;
    if (timed) {
      WISP_CUDA_TRY(cudaEventRecord(start.get(), s));
    }
    f.graph.launch(s);
    if (timed) {
      WISP_CUDA_TRY(cudaEventRecord(stop.get(), s));
    }
    WISP_CUDA_TRY(cudaStreamSynchronize(s));
    return timed ? detail::elapsed_seconds(start, stop) : 0.0;
  };
  for (auto& f : forms) {
    for (std::size_t w = 0; w < windows; ++w) {
      (void)replay(*f, false);  // warm-up: caches full, graph uploaded
    }
  }

  // Launched one by one, and the host round trip: one pass of steps each.
  cuda::device_pager launched(config);
  std::size_t launched_step = 0;
  const auto launch_pass = [&] {
    for (std::int32_t l = 0; l < layers; ++l) {
      launched.step(l,
                    all_ids.data() + launched_step * pass_ids +
                        static_cast<std::size_t>(l) * static_cast<std::size_t>(k),
                    k, s);
    }
    launched_step = (launched_step + 1) % o.steps;
  };
  pager<lru> host_pager(
      {.layers = layers, .experts = r.shape.experts, .top_k = k, .capacity = o.capacity});
  std::int32_t* host_ids = nullptr;
  std::int32_t* host_map = nullptr;
  WISP_CUDA_TRY(cudaMallocHost(&host_ids, static_cast<std::size_t>(k) * sizeof(std::int32_t)));
  WISP_CUDA_TRY(
      cudaMallocHost(&host_map, static_cast<std::size_t>(r.shape.experts) * sizeof(std::int32_t)));
  detail::device_array<std::int32_t> device_map(static_cast<std::size_t>(r.shape.experts));
  std::size_t round_trip_step = 0;
  const auto round_trip_pass = [&] {
    host_pager.begin_step();
    for (std::int32_t l = 0; l < layers; ++l) {
      WISP_CUDA_TRY(cudaMemcpyAsync(host_ids,
                                    all_ids.data() + round_trip_step * pass_ids +
                                        static_cast<std::size_t>(l) * static_cast<std::size_t>(k),
                                    static_cast<std::size_t>(k) * sizeof(std::int32_t),
                                    cudaMemcpyDeviceToHost, s));
      WISP_CUDA_TRY(cudaStreamSynchronize(s));
      const prepare_result p = host_pager.prepare(
          l, std::span<const std::int32_t>(host_ids, static_cast<std::size_t>(k)), 1, k);
      std::copy(p.expert_map.begin(), p.expert_map.end(), host_map);
      WISP_CUDA_TRY(cudaMemcpyAsync(device_map.data(), host_map, p.expert_map.size_bytes(),
                                    cudaMemcpyHostToDevice, s));
    }
    WISP_CUDA_TRY(cudaStreamSynchronize(s));
    round_trip_step = (round_trip_step + 1) % o.steps;
  };
  std::vector<double> launched_us;
  std::vector<double> round_trip_us;
  try {
    for (std::size_t w = 0; w < o.steps; ++w) {  // warm-up, as the graphs
      launch_pass();
      round_trip_pass();
    }
    WISP_CUDA_TRY(cudaStreamSynchronize(s));
    const double per_pass = static_cast<double>(layers) * o.passes;
    for (std::int32_t rep = 0; rep < o.repetitions; ++rep) {
      for (std::size_t i = 0; i < forms.size(); ++i) {
        form& f = *forms[(i + static_cast<std::size_t>(rep)) % forms.size()];
        double seconds = 0;
        for (std::int32_t n = 0; n < o.replays; ++n) {
          seconds += replay(f, true);
        }
        f.us.push_back(seconds / o.replays / per_pass * 1e6);
      }
      WISP_CUDA_TRY(cudaEventRecord(start.get(), s));
      for (std::int32_t n = 0; n < o.replays; ++n) {
        launch_pass();
      }
      WISP_CUDA_TRY(cudaEventRecord(stop.get(), s));
      WISP_CUDA_TRY(cudaStreamSynchronize(s));
      launched_us.push_back(detail::elapsed_seconds(start, stop) / o.replays / layers * 1e6);
      const auto begin = clock::now();
      for (std::int32_t n = 0; n < o.replays; ++n) {
        round_trip_pass();
      }
      round_trip_us.push_back(std::chrono::duration<double>(clock::now() - begin).count() /
                              o.replays / layers * 1e6);
    }
  } catch (...) {
    (void)cudaFreeHost(host_map);
    (void)cudaFreeHost(host_ids);
    throw;
  }
  (void)cudaFreeHost(host_map);
  (void)cudaFreeHost(host_ids);

  device_step_report report;
  report.shape = r.shape;
  report.capacity = o.capacity;
  report.passes = o.passes;
  report.replays = o.replays;
  report.repetitions = o.repetitions;
  report.routing = r.source;
  for (const auto& f : forms) {
    report.forms.emplace_back(f->name, summarize(f->us));
  }
  report.forms.emplace_back("launched", summarize(launched_us));
  report.forms.emplace_back("host_round_trip", summarize(round_trip_us));
  const cuda::pager_layer_info info = forms.front()->pager->read_info(0, s);
  report.hit_rate =
      static_cast<double>(info.total_hits) /
      static_cast<double>(std::max<std::uint64_t>(1, info.total_hits + info.total_misses));
  return report;
}

}  // namespace wisp::bench
