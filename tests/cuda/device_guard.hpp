// SPDX-License-Identifier: Apache-2.0
// Skips a test that needs a GPU when this machine has none, or fails it when the environment
// sets WISP_REQUIRE_GPU=1 (scripts/gpu_check.sh does, so that a GPU machine without a usable
// device cannot pass by skipping everything).
// - WISP_SKIP_WITHOUT_GPU(): for nvcc-only tests (*.cu).
// - WISP_SKIP_WITHOUT_DEVICE(): for host-testable tests (*.cpp) that touch Thrust device memory;
//   under the CPP/OMP device systems "device" memory is host memory and nothing is skipped.
#pragma once

#include <thrust/detail/config.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <string_view>

namespace wisp::cuda::testing {
[[nodiscard]] inline bool gpu_required() {
  const char* v = std::getenv("WISP_REQUIRE_GPU");
  return v != nullptr && std::string_view(v) == "1";
}
}  // namespace wisp::cuda::testing

#if defined(__CUDACC__)
#include <wisp/cuda/runtime.cuh>
#define WISP_SKIP_WITHOUT_GPU()                                                      \
  do {                                                                               \
    if (::wisp::cuda::device_count() == 0) {                                         \
      if (::wisp::cuda::testing::gpu_required()) {                                   \
        FAIL() << "WISP_REQUIRE_GPU=1 but no CUDA device is usable on this machine"; \
      }                                                                              \
      GTEST_SKIP() << "no CUDA device on this machine";                              \
    }                                                                                \
  } while (false)
#endif

#if THRUST_DEVICE_SYSTEM == THRUST_DEVICE_SYSTEM_CUDA
#define WISP_SKIP_WITHOUT_DEVICE() WISP_SKIP_WITHOUT_GPU()
#else
#define WISP_SKIP_WITHOUT_DEVICE() static_cast<void>(0)
#endif
