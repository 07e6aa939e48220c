// SPDX-License-Identifier: Apache-2.0
// Conan test_package with -o "wisp/*:cuda=True": wisp::cuda (linked to the toolkit's CCCL by the
// recipe's CMake build module), compiled by the host compiler for Thrust's CPP device system.
#include <wisp/cuda/remap.hpp>

#include <thrust/device_vector.h>
#include <thrust/execution_policy.h>

#include <cstdint>
#include <cstdio>
#include <vector>

int main() {
  const std::vector<std::int32_t> host_map{3, -1, 0, 1};  // experts 0, 2, 3 resident
  const std::vector<std::int32_t> host_ids{0, 2, 1, 3};
  thrust::device_vector<std::int32_t> map(host_map.begin(), host_map.end());
  thrust::device_vector<std::int32_t> ids(host_ids.begin(), host_ids.end());
  thrust::device_vector<std::int32_t> slots(ids.size());
  wisp::cuda::remap_topk(thrust::device, ids.begin(), ids.end(),
                         thrust::raw_pointer_cast(map.data()), 4, slots.begin());
  const std::vector<std::int32_t> expected{3, 0, -1, 1};
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (slots[i] != expected[i]) {
      std::printf("test_package_cuda: slot %zu is %d, expected %d\n", i, int(slots[i]),
                  expected[i]);
      return 1;
    }
  }
  std::puts("test_package_cuda: wisp::cuda remap_topk ok");
  return 0;
}
