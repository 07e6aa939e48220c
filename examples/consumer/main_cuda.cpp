// SPDX-License-Identifier: Apache-2.0
// Uses the wisp::cuda component from an install; built for the Thrust CPP device system.
#include <wisp/cuda/remap.hpp>

#include <thrust/device_vector.h>
#include <thrust/execution_policy.h>

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
      std::printf("consumer_cuda: slot %zu is %d, expected %d\n", i, int(slots[i]), expected[i]);
      return 1;
    }
  }
  std::puts("consumer_cuda: remap_topk ok");
  return 0;
}
