// SPDX-License-Identifier: Apache-2.0
// The whole library in one translation unit of wisp_cuda_test: with WISP_CUDA_USE_NVCC this file
// is compiled as CUDA, so nvcc (with warnings as errors) sees every core header a CUDA source of
// an engine may include, not only the ones the device code uses.
#include <wisp/cuda/copy_list.hpp>
#include <wisp/cuda/remap.hpp>
#include <wisp/wisp.hpp>

#include <gtest/gtest.h>

namespace {

TEST(Umbrella, CoreHeadersCompileBesideTheCudaOnes) {
  wisp::pager<wisp::lfru> p(wisp::pager_config::for_shape({2, 8, 2}, 4));
  const std::int32_t ids[] = {1, 5, 5, 7};
  const auto r = p.prepare(0, ids, /*tokens=*/2, /*k=*/2);
  EXPECT_EQ(r.copy_plan.size(), 3u);  // three distinct experts, all cold
  EXPECT_EQ(r.misses, 3);
}

}  // namespace
