// SPDX-License-Identifier: Apache-2.0
// What the GPU benchmark's parts share: owners of device and pinned arrays, streams, events and
// graphs (every CUDA call checked), the kernel that writes the experts' random bytes, and the
// host memory the system says is available. nvcc only.
#pragma once

#include "decode_model.hpp"

#include <wisp/core/error.hpp>
#include <wisp/cuda/runtime.cuh>
#include <wisp/kernel/bf16.hpp>
#include <wisp/kernel/swiglu.hpp>

#include <cuda_runtime_api.h>

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <utility>

namespace wisp::bench::detail {

/// `n` values of `T` in device memory (cudaMalloc), freed on destruction.
template <class T>
class device_array {
 public:
  device_array() = default;
  explicit device_array(std::size_t n, const char* what = "cudaMalloc") : size_(n) {
    void* p = nullptr;
    cuda::detail::check_allocation(cudaMalloc(&p, (n == 0 ? 1 : n) * sizeof(T)), what,
                                   n * sizeof(T));
    data_ = static_cast<T*>(p);
  }
  device_array(device_array&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  device_array& operator=(device_array&& o) noexcept {
    if (this != &o) {
      (void)cudaFree(data_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  device_array(const device_array&) = delete;
  device_array& operator=(const device_array&) = delete;
  ~device_array() { (void)cudaFree(data_); }
  [[nodiscard]] T* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

/// `n` values of `T` in page-locked host memory (cudaMallocHost), freed on destruction.
template <class T>
class pinned_array {
 public:
  explicit pinned_array(std::size_t n, const char* what = "cudaMallocHost") : size_(n) {
    void* p = nullptr;
    cuda::detail::check_allocation(cudaMallocHost(&p, (n == 0 ? 1 : n) * sizeof(T)), what,
                                   n * sizeof(T));
    data_ = static_cast<T*>(p);
  }
  pinned_array(const pinned_array&) = delete;
  pinned_array& operator=(const pinned_array&) = delete;
  ~pinned_array() { (void)cudaFreeHost(data_); }
  [[nodiscard]] T* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

class cuda_event {
 public:
  cuda_event() { WISP_CUDA_TRY(cudaEventCreate(&e_)); }
  cuda_event(const cuda_event&) = delete;
  cuda_event& operator=(const cuda_event&) = delete;
  ~cuda_event() { (void)cudaEventDestroy(e_); }
  [[nodiscard]] cudaEvent_t get() const noexcept { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

/// A non-blocking stream, synchronised and destroyed with the object.
class cuda_stream {
 public:
  cuda_stream() { WISP_CUDA_TRY(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  cuda_stream(const cuda_stream&) = delete;
  cuda_stream& operator=(const cuda_stream&) = delete;
  ~cuda_stream() {
    (void)cudaStreamSynchronize(s_);
    (void)cudaStreamDestroy(s_);
  }
  [[nodiscard]] cudaStream_t get() const noexcept { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

/// A captured and instantiated graph, destroyed with the object.
class cuda_graph {
 public:
  cuda_graph() = default;
  cuda_graph(const cuda_graph&) = delete;
  cuda_graph& operator=(const cuda_graph&) = delete;
  ~cuda_graph() { reset(); }

  /// Captures what `enqueue()` puts on `stream` and instantiates it. A failure ends the capture
  /// (the stream stays usable) and rethrows.
  void capture(cudaStream_t stream, const std::function<void()>& enqueue) {
    reset();
    WISP_CUDA_TRY(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    try {
      enqueue();
    } catch (...) {
      cudaGraph_t broken = nullptr;
      (void)cudaStreamEndCapture(stream, &broken);
      if (broken != nullptr) {
        (void)cudaGraphDestroy(broken);
      }
      (void)cudaGetLastError();
      throw;
    }
    WISP_CUDA_TRY(cudaStreamEndCapture(stream, &graph_));
    WISP_CUDA_TRY(cudaGraphInstantiate(&exec_, graph_, 0));
  }
  void launch(cudaStream_t stream) const {
    WISP_EXPECTS(exec_ != nullptr, "cuda_graph::launch: nothing captured");
    WISP_CUDA_TRY(cudaGraphLaunch(exec_, stream));
  }
  [[nodiscard]] bool ready() const noexcept { return exec_ != nullptr; }
  void reset() noexcept {
    if (exec_ != nullptr) {
      (void)cudaGraphExecDestroy(exec_);
      exec_ = nullptr;
    }
    if (graph_ != nullptr) {
      (void)cudaGraphDestroy(graph_);
      graph_ = nullptr;
    }
  }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

/// Seconds between two events recorded on a stream that has been synchronised since.
inline double elapsed_seconds(const cuda_event& start, const cuda_event& stop) {
  float ms = 0;
  WISP_CUDA_TRY(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return ms / 1000.0;
}

// Rows `[0, count)` at `base` (stride `stride`) get experts `first, first + 1, ...` of `layer`,
// value by value (`master_value`). Two bf16 values per thread and step.
template <class Shape>
__global__ void fill_experts_kernel(std::byte* base, std::size_t stride, Shape shape,
                                    std::int32_t layer, std::int32_t first, std::int32_t count) {
  const std::size_t per_row = 3 * shape.matrix_values();
  const std::size_t n = per_row * static_cast<std::size_t>(count);
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t row = i / per_row;
    const std::size_t at = i % per_row;
    auto* values = reinterpret_cast<bf16*>(base + row * stride);
    values[at] = master_value(shape, layer, first + static_cast<std::int32_t>(row), at);
  }
}

/// Writes experts `[first, first + count)` of `layer` into the rows at `base` on `stream`.
inline void launch_fill(std::byte* base, std::size_t stride, const swiglu_shape& shape,
                        std::int32_t layer, std::int32_t first, std::int32_t count,
                        cudaStream_t stream) {
  if (count <= 0) {
    return;
  }
  fill_experts_kernel<<<8192, 256, 0, stream>>>(base, stride, shape, layer, first, count);
  WISP_CUDA_TRY(cudaGetLastError());
}

template <class Value>
__global__ void fill_values_kernel(Value* out, std::size_t n, std::uint64_t stream) {
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    out[i] = hashed_bf16(stream, i, 1.0f);
  }
}

/// Writes `n` bf16 values uniform in [-1, 1) (a hash of `stream` and the index) at `out`.
inline void launch_fill_values(bf16* out, std::size_t n, std::uint64_t stream, cudaStream_t s) {
  fill_values_kernel<<<8192, 256, 0, s>>>(out, n, stream);
  WISP_CUDA_TRY(cudaGetLastError());
}

/// The host memory the system says is available (`MemAvailable` of /proc/meminfo, else the
/// free pages `sysconf` counts), or 0.
[[nodiscard]] inline std::uint64_t host_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    std::uint64_t kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") {
      return kib * 1024;
    }
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0
             ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page)
             : 0;
}

}  // namespace wisp::bench::detail
