// SPDX-License-Identifier: Apache-2.0
#include "device_guard.hpp"

#include <wisp/cuda/remap.hpp>

#include <thrust/device_vector.h>
#include <thrust/execution_policy.h>
#include <thrust/host_vector.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace {

// Oracle: the obvious host loop.
std::vector<std::int32_t> remap_oracle(const std::vector<std::int32_t>& ids,
                                       const std::vector<std::int32_t>& map) {
  std::vector<std::int32_t> out;
  for (const std::int32_t id : ids) {
    const bool valid = id >= 0 && id < static_cast<std::int32_t>(map.size());
    out.push_back(valid ? map[static_cast<std::size_t>(id)] : wisp::cuda::invalid_expert);
  }
  return out;
}

std::vector<std::int32_t> remap_on_device(const std::vector<std::int32_t>& ids,
                                          const std::vector<std::int32_t>& map) {
  const thrust::device_vector<std::int32_t> d_ids(ids.begin(), ids.end());
  const thrust::device_vector<std::int32_t> d_map(map.begin(), map.end());
  thrust::device_vector<std::int32_t> d_out(ids.size(), 12345);
  const auto end = wisp::cuda::remap_topk(thrust::device, d_ids.begin(), d_ids.end(),
                                          thrust::raw_pointer_cast(d_map.data()),
                                          static_cast<std::int32_t>(map.size()), d_out.begin());
  EXPECT_EQ(end, d_out.end());
  const thrust::host_vector<std::int32_t> h_out = d_out;
  return {h_out.begin(), h_out.end()};
}

TEST(Remap, MatchesHostLoopOnRandomBatches) {
  WISP_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(7);
  for (const int experts : {1, 8, 64, 128}) {
    // A random placement: each expert resident in a distinct slot with probability 1/2.
    std::vector<std::int32_t> map(static_cast<std::size_t>(experts), wisp::cuda::not_resident);
    std::int32_t next_slot = 0;
    for (auto& slot : map) {
      if (rng() % 2 == 0) {
        slot = next_slot++;
      }
    }
    std::uniform_int_distribution<std::int32_t> id_dist(-3, experts + 2);  // some out of range
    std::vector<std::int32_t> ids(1000);
    for (auto& id : ids) {
      id = id_dist(rng);
    }
    EXPECT_EQ(remap_on_device(ids, map), remap_oracle(ids, map)) << "experts=" << experts;
  }
}

TEST(Remap, OutOfRangeIdsAreFlaggedNotDropped) {
  WISP_SKIP_WITHOUT_DEVICE();
  const std::vector<std::int32_t> map{0, wisp::cuda::not_resident, 1};
  const std::vector<std::int32_t> got = remap_on_device({-1, 0, 1, 2, 3, 1 << 30}, map);
  EXPECT_EQ(got, (std::vector<std::int32_t>{-2, 0, -1, 1, -2, -2}));
}

TEST(Remap, EmptyRangeAndBadArguments) {
  WISP_SKIP_WITHOUT_DEVICE();
  EXPECT_TRUE(remap_on_device({}, {}).empty());
  thrust::device_vector<std::int32_t> ids(2, 0);
  thrust::device_vector<std::int32_t> out(2);
  EXPECT_THROW(
      wisp::cuda::remap_topk(thrust::device, ids.begin(), ids.end(), nullptr, 4, out.begin()),
      wisp::logic_error);
  const std::int32_t map[1] = {0};
  EXPECT_THROW(wisp::cuda::remap_topk(thrust::host, ids.begin(), ids.end(), map, -1, out.begin()),
               wisp::logic_error);
}

}  // namespace
