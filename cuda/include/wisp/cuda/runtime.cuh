// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief CUDA runtime error handling (`wisp::cuda_error`, `WISP_CUDA_TRY`) and device discovery.
/// nvcc only: it needs the CUDA runtime.
#pragma once

#include <wisp/core/error.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <vector>

namespace wisp {

/// @brief A CUDA runtime or driver call failed. Carries the numeric error code.
class cuda_error : public error {
 public:
  cuda_error(int code, const std::string& what) : error(what), code_(code) {}
  /// The `cudaError_t` (or `CUresult`) value.
  [[nodiscard]] int code() const noexcept { return code_; }

 private:
  int code_;
};

namespace cuda {

/// @brief Number of CUDA devices this process can use; 0 when there is no device or no driver
/// (never throws, so tests and engines can fall back to the host).
[[nodiscard]] inline int device_count() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
}

namespace detail {

/// @brief Checks the status of an allocating call (`cudaMalloc`, `cudaHostAlloc`,
/// `cudaHostRegister`, ...) for `bytes` bytes.
/// @throws wisp::out_of_memory for `cudaErrorMemoryAllocation`, wisp::cuda_error for any other
///   failure; both name the call and the size.
inline void check_allocation(cudaError_t status, const char* call, std::size_t bytes) {
  if (status == cudaSuccess) [[likely]] {
    return;
  }
  (void)cudaGetLastError();
  const std::string message =
      ::wisp::detail::concat(call, " of ", bytes, " bytes failed: ", cudaGetErrorName(status), " (",
                             cudaGetErrorString(status), ")");
  if (status == cudaErrorMemoryAllocation) {
    throw out_of_memory(message);
  }
  throw cuda_error(static_cast<int>(status), message);
}

}  // namespace detail
}  // namespace cuda
}  // namespace wisp

/// @brief Evaluates a CUDA runtime call; on failure throws `wisp::cuda_error` naming the call,
/// the error and file:line.
#define WISP_CUDA_TRY(call)                                                                      \
  do {                                                                                           \
    const cudaError_t wisp_detail_status = (call);                                               \
    if (wisp_detail_status != cudaSuccess) [[unlikely]] {                                        \
      (void)cudaGetLastError();                                                                  \
      throw ::wisp::cuda_error(                                                                  \
          static_cast<int>(wisp_detail_status),                                                  \
          ::wisp::detail::concat(#call, " failed: ", cudaGetErrorName(wisp_detail_status), " (", \
                                 cudaGetErrorString(wisp_detail_status), ") at ", __FILE__, ":", \
                                 __LINE__));                                                     \
    }                                                                                            \
  } while (false)

namespace wisp::cuda::detail {

/// Appends `n` events made with `cudaEventDisableTiming` to `events`; the events made before a
/// failure stay there for the caller to destroy. @throws wisp::cuda_error.
inline void create_events(std::vector<cudaEvent_t>& events, std::size_t n) {
  events.reserve(events.size() + n);
  for (std::size_t i = 0; i < n; ++i) {
    cudaEvent_t e = nullptr;
    WISP_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    events.push_back(e);
  }
}

}  // namespace wisp::cuda::detail
