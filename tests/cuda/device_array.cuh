// SPDX-License-Identifier: Apache-2.0
// device_array<T>: a cudaMalloc'd array for the GPU tests, filled from and read back into
// std::vectors with synchronous copies (never inside a capture). An upload from pageable memory
// may return before its DMA lands, and work on a non-blocking stream does not wait for the legacy
// stream that cudaMemcpy uses: upload synchronises the device.
#pragma once

#include <wisp/cuda/runtime.cuh>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>
#include <vector>

namespace wisp::cuda::testing {

template <class T>
class device_array {
 public:
  explicit device_array(std::size_t n) : size_(n) {
    WISP_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&data_), (n == 0 ? 1 : n) * sizeof(T)));
  }
  explicit device_array(const std::vector<T>& values) : device_array(values.size()) {
    upload(values);
  }
  device_array(const device_array&) = delete;
  device_array& operator=(const device_array&) = delete;
  ~device_array() { (void)cudaFree(data_); }

  [[nodiscard]] T* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::span<T> span() const noexcept { return {data_, size_}; }

  void upload(const std::vector<T>& values) {
    WISP_EXPECTS(values.size() == size_, "device_array::upload: ", values.size(), " values for ",
                 size_);
    WISP_CUDA_TRY(cudaMemcpy(data_, values.data(), size_ * sizeof(T), cudaMemcpyHostToDevice));
    WISP_CUDA_TRY(cudaDeviceSynchronize());
  }
  [[nodiscard]] std::vector<T> download() const {
    std::vector<T> out(size_);
    WISP_CUDA_TRY(cudaMemcpy(out.data(), data_, size_ * sizeof(T), cudaMemcpyDeviceToHost));
    return out;
  }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

/// Reads `n` values at device address `p`.
template <class T>
[[nodiscard]] std::vector<T> download(const T* p, std::size_t n) {
  std::vector<T> out(n);
  WISP_CUDA_TRY(cudaMemcpy(out.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  return out;
}

}  // namespace wisp::cuda::testing
