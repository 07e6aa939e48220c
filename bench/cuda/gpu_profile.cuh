// SPDX-License-Identifier: Apache-2.0
// The measurements behind `--write-profile` (the device profile wisp-engine --device reads):
// - h2d_gbps, copy_latency_us: single cudaMemcpyAsync copies from pinned memory, each between
//   two events: 4 KiB copies give the latency, expert-row copies the bandwidth
//   (row / (time - latency));
// - the UVA copy kernel (not in the profile; in each decode file's `link`, beside the DMA
//   figure): the device pager's copy kernel (`device_pager::copy`, as the wisp-graph arm runs it)
//   reading the same row from mapped pinned memory, timed the same way;
// - device_memory_gbps: a 16-byte-vector copy kernel over 1 GiB, bytes read plus written;
// - moe_gbps: the GEMV fused-MoE kernel at batch 1 on one layer of the model's shape, every
//   expert resident, routed by the model's synthetic router: k expert rows per call over the
//   call's time;
// - peak_bf16_tflops: cuBLAS BF16 GEMM (8192^3, fp32 accumulate), or the datasheet figure of the
//   device when cuBLAS fails (the profile's source says which);
// - host_memory_gbps: memcpy of 1 GiB split over every host thread, bytes read plus written.
// The launch (an empty graph node) comes from the device-step timing. nvcc only.
#pragma once

#include "cublas_moe.cuh"
#include "decode_model.hpp"
#include "decode_report.hpp"
#include "gemv_moe.cuh"
#include "gpu_support.cuh"

#include <wisp/cuda/device_pager.cuh>
#include <wisp/cuda/pinned_host_store.cuh>
#include <wisp/cuda/runtime.cuh>

#include <cuda_runtime_api.h>

#include <cublas_v2.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

namespace wisp::bench {

/// Pinned host-to-device copies: the latency of a small copy and the bandwidth of large ones.
struct link_figures {
  summary latency_us;
  summary gbps;
};

namespace detail {

// The figures of `time_copy(bytes)` (seconds of one copy): after three warm-ups of each size,
// `small_reps` copies of 4 KiB (or `large_bytes` if less) give the latency, `large_reps` of
// `large_bytes` the bandwidth, large_bytes / (time - latency).
template <class TimeCopy>
link_figures time_link(TimeCopy& time_copy, std::size_t large_bytes, std::int32_t small_reps,
                       std::int32_t large_reps) {
  const std::size_t small = std::min<std::size_t>(4096, large_bytes);
  for (int i = 0; i < 3; ++i) {
    (void)time_copy(small);
    (void)time_copy(large_bytes);
  }
  std::vector<double> latency;
  for (std::int32_t i = 0; i < small_reps; ++i) {
    latency.push_back(time_copy(small) * 1e6);
  }
  link_figures f;
  f.latency_us = summarize(latency);
  std::vector<double> gbps;
  for (std::int32_t i = 0; i < large_reps; ++i) {
    const double seconds = time_copy(large_bytes) - f.latency_us.median * 1e-6;
    gbps.push_back(seconds > 0 ? static_cast<double>(large_bytes) / seconds / 1e9 : 0.0);
  }
  f.gbps = summarize(gbps);
  return f;
}

template <class Chunk>
__global__ void copy_chunks_kernel(const Chunk* from, Chunk* to, std::size_t n) {
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    to[i] = from[i];
  }
}

}  // namespace detail

/// @brief Times `small_reps` copies of 4 KiB and `large_reps` copies of `large_bytes` from pinned
/// memory, one at a time between two events. @throws wisp::cuda_error, wisp::out_of_memory.
[[nodiscard]] inline link_figures measure_h2d(std::size_t large_bytes, std::int32_t small_reps = 50,
                                              std::int32_t large_reps = 20) {
  detail::cuda_stream stream;
  detail::cuda_event start;
  detail::cuda_event stop;
  detail::pinned_array<std::byte> host(large_bytes, "measure_h2d: cudaMallocHost");
  detail::device_array<std::byte> device(large_bytes, "measure_h2d: cudaMalloc");
  std::memset(host.data(), 1, large_bytes);
  const auto time_copy = [&](std::size_t bytes) {
    WISP_CUDA_TRY(cudaEventRecord(start.get(), stream.get()));
    WISP_CUDA_TRY(
        cudaMemcpyAsync(device.data(), host.data(), bytes, cudaMemcpyHostToDevice, stream.get()));
    WISP_CUDA_TRY(cudaEventRecord(stop.get(), stream.get()));
    WISP_CUDA_TRY(cudaStreamSynchronize(stream.get()));
    return detail::elapsed_seconds(start, stop);
  };
  return detail::time_link(time_copy, large_bytes, small_reps, large_reps);
}

/// @brief Times the device pager's copy kernel (`device_pager::copy`, the wisp-graph arm's copy)
/// reading one row of `row_bytes` from mapped pinned memory (`pinned_host_store`) into device
/// memory: `small_reps` copies of its first 4 KiB give the latency, `large_reps` of the whole row
/// the bandwidth (row / (time - latency)), one launch at a time between two events, as
/// `measure_h2d` times DMA. @throws wisp::cuda_error, wisp::out_of_memory.
[[nodiscard]] inline link_figures measure_uva_copy_kernel(std::size_t row_bytes,
                                                          std::int32_t small_reps = 50,
                                                          std::int32_t large_reps = 20) {
  detail::cuda_stream stream;
  detail::cuda_event start;
  detail::cuda_event stop;
  const cuda::pinned_host_store master(1, expert_row_layout({row_bytes}));
  std::memset(master.row(0).data(), 1, master.row(0).size());
  const std::size_t stride = master.layout().row_bytes();
  detail::device_array<std::byte> slot(stride, "measure_uva_copy_kernel: cudaMalloc");
  // One step on an empty cache of one slot lists one copy (expert 0 to slot 0); every copy
  // below replays that list.
  cuda::device_pager pager({.layers = 1, .experts = 1, .capacity = 1});
  detail::device_array<std::int32_t> id(1, "measure_uva_copy_kernel: cudaMalloc");
  WISP_CUDA_TRY(cudaMemsetAsync(id.data(), 0, sizeof(std::int32_t), stream.get()));
  pager.step(0, id.data(), 1, stream.get());
  const auto time_copy = [&](std::size_t bytes) {
    WISP_CUDA_TRY(cudaEventRecord(start.get(), stream.get()));
    pager.copy(0, master.device_view(), {slot.data(), 1, stride}, bytes, stream.get());
    WISP_CUDA_TRY(cudaEventRecord(stop.get(), stream.get()));
    WISP_CUDA_TRY(cudaStreamSynchronize(stream.get()));
    return detail::elapsed_seconds(start, stop);
  };
  return detail::time_link(time_copy, row_bytes, small_reps, large_reps);
}

/// @brief GB/s of a device-to-device copy kernel over `bytes` (bytes read plus written).
[[nodiscard]] inline summary measure_device_memory_gbps(std::size_t bytes = std::size_t{1} << 30,
                                                        std::int32_t reps = 10) {
  using chunk = uint4;
  const std::size_t n = bytes / sizeof(chunk);
  detail::cuda_stream stream;
  detail::cuda_event start;
  detail::cuda_event stop;
  detail::device_array<chunk> from(n, "measure_device_memory_gbps: cudaMalloc");
  detail::device_array<chunk> to(n, "measure_device_memory_gbps: cudaMalloc");
  WISP_CUDA_TRY(cudaMemsetAsync(from.data(), 1, n * sizeof(chunk), stream.get()));
  std::vector<double> gbps;
  for (std::int32_t i = -2; i < reps; ++i) {  // two warm-ups
    WISP_CUDA_TRY(cudaEventRecord(start.get(), stream.get()));
    detail::copy_chunks_kernel<<<4096, 256, 0, stream.get()>>>(from.data(), to.data(), n);
    WISP_CUDA_TRY(cudaGetLastError());
    WISP_CUDA_TRY(cudaEventRecord(stop.get(), stream.get()));
    WISP_CUDA_TRY(cudaStreamSynchronize(stream.get()));
    if (i >= 0) {
      gbps.push_back(2.0 * static_cast<double>(n * sizeof(chunk)) /
                     detail::elapsed_seconds(start, stop) / 1e9);
    }
  }
  return summarize(gbps);
}

/// @brief TFLOP/s of a cuBLAS BF16 GEMM of `n x n x n` (fp32 accumulate and output).
/// @throws wisp::cuda_error when cuBLAS or CUDA fails (the caller falls back to a datasheet).
[[nodiscard]] inline summary measure_bf16_tflops(std::int32_t n = 8192, std::int32_t reps = 10) {
  const auto values = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
  detail::cuda_stream stream;
  detail::cuda_event start;
  detail::cuda_event stop;
  detail::device_array<bf16> a(values, "measure_bf16_tflops: cudaMalloc");
  detail::device_array<bf16> b(values, "measure_bf16_tflops: cudaMalloc");
  detail::device_array<float> c(values, "measure_bf16_tflops: cudaMalloc");
  // Random values (zeros would run faster than real data).
  detail::launch_fill_values(a.data(), values, 1, stream.get());
  detail::launch_fill_values(b.data(), values, 2, stream.get());
  cublasHandle_t handle = nullptr;
  WISP_BENCH_CUBLAS_TRY(cublasCreate(&handle));
  std::vector<double> tflops;
  try {
    WISP_BENCH_CUBLAS_TRY(cublasSetStream(handle, stream.get()));
    const float one = 1.0f;
    const float zero = 0.0f;
    for (std::int32_t i = -3; i < reps; ++i) {
      WISP_CUDA_TRY(cudaEventRecord(start.get(), stream.get()));
      WISP_BENCH_CUBLAS_TRY(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a.data(),
                                         CUDA_R_16BF, n, b.data(), CUDA_R_16BF, n, &zero, c.data(),
                                         CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      WISP_CUDA_TRY(cudaEventRecord(stop.get(), stream.get()));
      WISP_CUDA_TRY(cudaStreamSynchronize(stream.get()));
      if (i >= 0) {
        tflops.push_back(2.0 * n * static_cast<double>(n) * n /
                         detail::elapsed_seconds(start, stop) / 1e12);
      }
    }
  } catch (...) {
    (void)cublasDestroy(handle);
    throw;
  }
  (void)cublasDestroy(handle);
  return summarize(tflops);
}

/// @brief GB/s of a memcpy of `bytes` split over `threads` host threads (bytes read plus
/// written), median of `reps` after a warm-up that also touches every page.
[[nodiscard]] inline summary measure_host_memcpy_gbps(std::int32_t threads,
                                                      std::size_t bytes = std::size_t{1} << 30,
                                                      std::int32_t reps = 5) {
  std::vector<std::byte> from(bytes, std::byte{1});
  std::vector<std::byte> to(bytes);
  const auto parallel_copy = [&] {
    std::vector<std::thread> pool;
    const std::size_t share = (bytes + static_cast<std::size_t>(threads) - 1) / threads;
    for (std::int32_t t = 0; t < threads; ++t) {
      const std::size_t begin = std::min(bytes, static_cast<std::size_t>(t) * share);
      const std::size_t end = std::min(bytes, begin + share);
      pool.emplace_back(
          [&, begin, end] { std::memcpy(to.data() + begin, from.data() + begin, end - begin); });
    }
    for (std::thread& t : pool) {
      t.join();
    }
  };
  parallel_copy();
  std::vector<double> gbps;
  for (std::int32_t i = 0; i < reps; ++i) {
    const auto begin = std::chrono::steady_clock::now();
    parallel_copy();
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    gbps.push_back(2.0 * static_cast<double>(bytes) / s / 1e9);
  }
  return summarize(gbps);
}

/// @brief Microseconds per call of `kernel` at batch 1 on `rows` (one layer's experts behind
/// `map`), call `c` routed by the `top_k` ids and weights at `c x stride` of `ids`/`weights`
/// (device memory), one call between two events, after `warmup` calls.
template <class Kernel>
[[nodiscard]] summary time_moe_calls(Kernel& kernel, cudaStream_t stream,
                                     const expert_tensor_view& rows, const std::int32_t* map,
                                     std::int32_t experts, const bf16* hidden, bf16* out,
                                     const std::int32_t* ids, const float* weights,
                                     std::size_t stride, std::int32_t calls, std::int32_t top_k,
                                     std::int32_t warmup = 3) {
  detail::cuda_event start;
  detail::cuda_event stop;
  const std::int32_t h = kernel.shape().hidden;
  std::vector<double> us;
  for (std::int32_t i = -warmup; i < calls; ++i) {
    const std::size_t c = static_cast<std::size_t>((i + warmup) % calls) * stride;
    const basic_fused_moe_args<bf16> args{{hidden, static_cast<std::size_t>(h)},
                                          {ids + c, static_cast<std::size_t>(top_k)},
                                          {weights + c, static_cast<std::size_t>(top_k)},
                                          rows,
                                          {map, static_cast<std::size_t>(experts)},
                                          {out, static_cast<std::size_t>(h)},
                                          1,
                                          top_k,
                                          h};
    WISP_CUDA_TRY(cudaEventRecord(start.get(), stream));
    kernel(args);
    WISP_CUDA_TRY(cudaEventRecord(stop.get(), stream));
    WISP_CUDA_TRY(cudaStreamSynchronize(stream));
    if (i >= 0) {
      us.push_back(detail::elapsed_seconds(start, stop) * 1e6);
    }
  }
  return summarize(us);
}

/// @brief moe_gbps: the GEMV kernel on one layer of `model`'s shape (every expert resident,
/// random bytes, routed by `routing`'s layer 0 over `calls` tokens): expert bytes read per second.
[[nodiscard]] inline summary measure_moe_gbps(const decode_model& model,
                                              const decode_routing& routing,
                                              std::int32_t calls = 30) {
  const std::int32_t e = model.shape.experts;
  const std::int32_t k = model.shape.top_k;
  const std::int32_t h = model.expert.hidden;
  const std::size_t row = model.expert_bytes();
  WISP_EXPECTS(routing.tokens >= calls, "measure_moe_gbps: ", routing.tokens, " tokens for ", calls,
               " calls");
  detail::cuda_stream stream;
  detail::device_array<std::byte> rows(static_cast<std::size_t>(e) * row,
                                       "measure_moe_gbps: cudaMalloc of one layer");
  detail::launch_fill(rows.data(), row, model.expert, 0, 0, e, stream.get());
  std::vector<std::int32_t> ids;
  std::vector<float> weights;
  for (std::int32_t t = 0; t < calls; ++t) {
    const std::size_t at = routing.offset(t, 0);
    ids.insert(ids.end(), routing.ids.begin() + static_cast<std::ptrdiff_t>(at),
               routing.ids.begin() + static_cast<std::ptrdiff_t>(at + static_cast<std::size_t>(k)));
    weights.insert(
        weights.end(), routing.weights.begin() + static_cast<std::ptrdiff_t>(at),
        routing.weights.begin() + static_cast<std::ptrdiff_t>(at + static_cast<std::size_t>(k)));
  }
  std::vector<std::int32_t> identity(static_cast<std::size_t>(e));
  for (std::int32_t i = 0; i < e; ++i) {
    identity[static_cast<std::size_t>(i)] = i;
  }
  std::vector<bf16> hidden(static_cast<std::size_t>(h));
  for (std::int32_t i = 0; i < h; ++i) {
    hidden[static_cast<std::size_t>(i)] = hidden_value(0, static_cast<std::uint64_t>(i));
  }
  detail::device_array<std::int32_t> d_ids(ids.size());
  detail::device_array<float> d_weights(weights.size());
  detail::device_array<std::int32_t> d_map(identity.size());
  detail::device_array<bf16> d_hidden(hidden.size());
  detail::device_array<bf16> d_out(hidden.size());
  WISP_CUDA_TRY(cudaMemcpy(d_ids.data(), ids.data(), ids.size() * sizeof(std::int32_t),
                           cudaMemcpyHostToDevice));
  WISP_CUDA_TRY(cudaMemcpy(d_weights.data(), weights.data(), weights.size() * sizeof(float),
                           cudaMemcpyHostToDevice));
  WISP_CUDA_TRY(cudaMemcpy(d_map.data(), identity.data(), identity.size() * sizeof(std::int32_t),
                           cudaMemcpyHostToDevice));
  WISP_CUDA_TRY(cudaMemcpy(d_hidden.data(), hidden.data(), hidden.size() * sizeof(bf16),
                           cudaMemcpyHostToDevice));
  WISP_CUDA_TRY(cudaDeviceSynchronize());
  gemv_fused_moe kernel(model.expert, 1, k, stream.get());
  const summary us =
      time_moe_calls(kernel, stream.get(), {rows.data(), static_cast<std::size_t>(e), row},
                     d_map.data(), e, d_hidden.data(), d_out.data(), d_ids.data(), d_weights.data(),
                     static_cast<std::size_t>(k), calls, k);
  const double bytes = static_cast<double>(k) * static_cast<double>(row);
  const auto rate = [bytes](double micros) { return micros > 0 ? bytes / (micros * 1e3) : 0.0; };
  return {rate(us.median), rate(us.max), rate(us.min), us.count};
}

}  // namespace wisp::bench
