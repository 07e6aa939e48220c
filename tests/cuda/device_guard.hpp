// SPDX-License-Identifier: Apache-2.0
// Skips a test that touches device memory when the Thrust device system is CUDA and this machine
// has no GPU. Under the CPP/OMP device systems "device" memory is host memory: nothing to skip.
#pragma once

#include <thrust/detail/config.h>

#include <gtest/gtest.h>

#if THRUST_DEVICE_SYSTEM == THRUST_DEVICE_SYSTEM_CUDA
#include <wisp/cuda/runtime.cuh>
#define WISP_SKIP_WITHOUT_DEVICE()                      \
  do {                                                  \
    if (::wisp::cuda::device_count() == 0) {            \
      GTEST_SKIP() << "no CUDA device on this machine"; \
    }                                                   \
  } while (false)
#else
#define WISP_SKIP_WITHOUT_DEVICE() static_cast<void>(0)
#endif
