// SPDX-License-Identifier: Apache-2.0
// nvcc-only tests of the CUDA runtime helpers; they need no GPU.
#include <wisp/cuda/runtime.cuh>

#include <gtest/gtest.h>

#include <string>

namespace {

TEST(Runtime, DeviceCountNeverThrows) {
  EXPECT_GE(wisp::cuda::device_count(), 0);
}

TEST(Runtime, CudaTryNamesTheCallAndTheError) {
  try {
    WISP_CUDA_TRY(cudaSetDevice(1 << 20));  // no machine has that many devices
    FAIL() << "cudaSetDevice(1 << 20) succeeded";
  } catch (const wisp::cuda_error& e) {
    EXPECT_NE(e.code(), 0);
    EXPECT_NE(std::string(e.what()).find("cudaSetDevice(1 << 20) failed"), std::string::npos)
        << e.what();
  }
}

}  // namespace
