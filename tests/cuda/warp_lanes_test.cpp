// SPDX-License-Identifier: Apache-2.0
// lockstep_warp, the host form of a warp's votes, against their definitions written out lane by
// lane, on random lane values (with many repeats, so that match sees groups of every size).
#include <wisp/cuda/warp_lanes.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <random>

namespace {

using wisp::cuda::lockstep_warp;

TEST(LockstepWarp, VotesEqualTheirDefinitions) {
  const lockstep_warp w;
  std::mt19937 rng(11);
  for (int round = 0; round < 200; ++round) {
    const auto range = static_cast<std::int32_t>(1 + rng() % 40);
    lockstep_warp::values<std::int32_t> v;
    for (std::int32_t& x : v.at) {
      x = static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(range)) - 3;
    }
    const auto same = w.match(v);
    const std::uint32_t odd = w.ballot([&](std::int32_t i) { return v[i] % 2 != 0; });
    const std::uint32_t any = w.reduce_or(w.lanes([&](std::int32_t i) -> std::uint32_t {
      return v[i] >= 0 && v[i] < 32 ? std::uint32_t{1} << v[i] : 0u;
    }));
    // Wide values too (above 2^31, where a signed comparison would differ).
    const auto wide = w.lanes([&](std::int32_t i) -> std::uint32_t {
      return static_cast<std::uint32_t>(v[i]) * 0x9e3779b9u;
    });
    const std::uint32_t least = w.reduce_min(wide);
    std::uint32_t want_least = wide[0];
    std::uint32_t want_any = 0;
    for (std::int32_t i = 0; i < 32; ++i) {
      std::uint32_t want_same = 0;
      for (std::int32_t j = 0; j < 32; ++j) {
        if (v[j] == v[i]) {
          want_same |= std::uint32_t{1} << j;
        }
      }
      ASSERT_EQ(same[i], want_same) << "lane " << i;
      ASSERT_TRUE(wisp::cuda::has_lane(same[i], i));
      ASSERT_EQ(wisp::cuda::has_lane(odd, i), v[i] % 2 != 0);
      want_least = wide[i] < want_least ? wide[i] : want_least;
      if (v[i] >= 0 && v[i] < 32) {
        want_any |= std::uint32_t{1} << v[i];
      }
      // The first lane of each value, and the number of first lanes below: first-seen order.
      std::int32_t first = 0;
      while (v[first] != v[i]) {
        ++first;
      }
      ASSERT_EQ(wisp::cuda::lowest_lane(same[i]), first);
    }
    ASSERT_EQ(any, want_any);
    ASSERT_EQ(least, want_least);
  }
}

TEST(LockstepWarp, BitHelpers) {
  EXPECT_EQ(wisp::cuda::popcount32(0u), 0);
  EXPECT_EQ(wisp::cuda::popcount32(0xffffffffu), 32);
  EXPECT_EQ(wisp::cuda::popcount32(0x80000101u), 3);
  EXPECT_EQ(wisp::cuda::lowest_lane(0x80000000u), 31);
  EXPECT_EQ(wisp::cuda::lowest_lane(0x00000120u), 5);
  EXPECT_EQ(wisp::cuda::lanes_below(0), 0u);
  EXPECT_EQ(wisp::cuda::lanes_below(5), 0x1fu);
  EXPECT_EQ(wisp::cuda::lanes_below(31), 0x7fffffffu);
  EXPECT_TRUE(wisp::cuda::has_lane(0x80000000u, 31));
  EXPECT_FALSE(wisp::cuda::has_lane(0x7fffffffu, 31));
  // each runs every lane once, in lane order.
  std::int32_t next = 0;
  lockstep_warp{}.each([&](std::int32_t i) { EXPECT_EQ(i, next++); });
  EXPECT_EQ(next, 32);
}

}  // namespace
