// SPDX-License-Identifier: Apache-2.0
// expert_placement: vLLM's linear placement against its formula, import/export of per-rank
// expert maps (round trips on random placements, replica lists against a scan of the maps), and
// bad input refused naming the values.
#include "support/expect_error.hpp"

#include <wisp/parallel/placement.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace wisp {
namespace {

using test::expect_error;

// vLLM determine_expert_map(ep_size, ep_rank, global_num_experts, "linear"), written from its
// description: base = E / G, the first E % G ranks take one more, each a contiguous block.
std::vector<std::int32_t> vllm_linear_map(std::int32_t experts, std::int32_t ranks,
                                          std::int32_t rank) {
  const std::int32_t base = experts / ranks;
  const std::int32_t remainder = experts % ranks;
  const std::int32_t local = base + (rank < remainder ? 1 : 0);
  const std::int32_t start = rank * base + std::min(rank, remainder);
  std::vector<std::int32_t> map(static_cast<std::size_t>(experts), -1);
  for (std::int32_t i = 0; i < local; ++i) {
    map[static_cast<std::size_t>(start + i)] = i;
  }
  return map;
}

// A random placement as maps [layers][ranks][experts]: every expert on 1..ranks ranks, at most
// `local` per rank and layer, local ids shuffled.
std::vector<std::int32_t> random_maps(std::mt19937& rng, std::int32_t layers, std::int32_t experts,
                                      std::int32_t ranks, std::int32_t local) {
  std::vector<std::int32_t> maps(static_cast<std::size_t>(layers) * ranks * experts, -1);
  for (std::int32_t l = 0; l < layers; ++l) {
    std::vector<std::int32_t> used(static_cast<std::size_t>(ranks), 0);
    std::vector<std::vector<std::int32_t>> held(static_cast<std::size_t>(ranks));
    for (std::int32_t e = 0; e < experts; ++e) {  // one replica each, on a rank with room
      std::int32_t r = 0;
      do {
        r = static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(ranks));
      } while (used[static_cast<std::size_t>(r)] >= local);
      ++used[static_cast<std::size_t>(r)];
      held[static_cast<std::size_t>(r)].push_back(e);
    }
    for (std::int32_t extra = static_cast<std::int32_t>(rng() % 4); extra > 0; --extra) {
      const auto e = static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(experts));
      const auto r = static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(ranks));
      auto& h = held[static_cast<std::size_t>(r)];
      if (used[static_cast<std::size_t>(r)] < local &&
          std::find(h.begin(), h.end(), e) == h.end()) {
        ++used[static_cast<std::size_t>(r)];
        h.push_back(e);
      }
    }
    for (std::int32_t r = 0; r < ranks; ++r) {
      std::vector<std::int32_t> ids(static_cast<std::size_t>(local));
      for (std::int32_t i = 0; i < local; ++i) {
        ids[static_cast<std::size_t>(i)] = i;
      }
      std::shuffle(ids.begin(), ids.end(), rng);
      const auto& h = held[static_cast<std::size_t>(r)];
      for (std::size_t i = 0; i < h.size(); ++i) {
        maps[(static_cast<std::size_t>(l) * ranks + r) * experts + h[i]] = ids[i];
      }
    }
  }
  return maps;
}

TEST(placement, linear_is_vllms_linear_expert_map) {
  for (const auto& [experts, ranks] : {std::pair{64, 8}, std::pair{32, 8}, std::pair{60, 8},
                                       std::pair{7, 3}, std::pair{5, 8}, std::pair{1, 1}}) {
    const expert_placement p = expert_placement::linear(3, experts, ranks);
    EXPECT_EQ(p.local_experts(), (experts + ranks - 1) / ranks);
    for (std::int32_t l = 0; l < 3; ++l) {
      for (std::int32_t r = 0; r < ranks; ++r) {
        const auto map = p.expert_map(r, l);
        const std::vector<std::int32_t> want = vllm_linear_map(experts, ranks, r);
        EXPECT_EQ(std::vector<std::int32_t>(map.begin(), map.end()), want)
            << experts << " experts, rank " << r << " of " << ranks;
      }
      for (std::int32_t e = 0; e < experts; ++e) {
        ASSERT_EQ(p.replicas(l, e).size(), 1u);
      }
    }
  }
}

TEST(placement, expert_maps_round_trip_and_replicas_match_a_scan) {
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    const auto layers = static_cast<std::int32_t>(1 + rng() % 3);
    const auto ranks = static_cast<std::int32_t>(1 + rng() % 6);
    const auto experts = static_cast<std::int32_t>(1 + rng() % 12);
    const std::int32_t local = (experts + ranks - 1) / ranks + static_cast<std::int32_t>(rng() % 3);
    const std::vector<std::int32_t> maps = random_maps(rng, layers, experts, ranks, local);
    const expert_placement p =
        expert_placement::from_expert_maps(layers, experts, ranks, local, maps);
    ASSERT_EQ(std::vector<std::int32_t>(p.expert_maps().begin(), p.expert_maps().end()), maps);
    EXPECT_EQ(expert_placement::from_expert_maps(layers, experts, ranks, local, p.expert_maps()),
              p);
    for (std::int32_t l = 0; l < layers; ++l) {
      std::int32_t physical = 0;
      for (std::int32_t e = 0; e < experts; ++e) {
        std::vector<replica> scan;  // the oracle: every rank's map, in rank order
        for (std::int32_t r = 0; r < ranks; ++r) {
          const std::int32_t local_id =
              maps[(static_cast<std::size_t>(l) * ranks + r) * experts + e];
          if (local_id >= 0) {
            scan.push_back({r, local_id});
            EXPECT_EQ(p.logical_of(r, l, local_id), e);
          }
        }
        const auto got = p.replicas(l, e);
        EXPECT_EQ(std::vector<replica>(got.begin(), got.end()), scan);
        physical += static_cast<std::int32_t>(scan.size());
      }
      EXPECT_EQ(p.physical_experts(l), physical);
      std::int32_t held = 0;
      for (std::int32_t r = 0; r < ranks; ++r) {
        held += p.held(r, l);
      }
      EXPECT_EQ(held, physical);
    }
  }
}

TEST(placement, from_replica_ranks_gives_local_ids_in_logical_order) {
  // Layer 0: expert 0 on ranks 0 and 1, expert 1 on rank 0, experts 2 and 3 on rank 1.
  const std::vector<std::vector<std::int32_t>> ranks_of = {{0, 1}, {0}, {1}, {1}};
  const expert_placement p = expert_placement::from_replica_ranks(1, 4, 2, 3, ranks_of);
  const std::vector<std::int32_t> rank0 = {0, 1, -1, -1};
  const std::vector<std::int32_t> rank1 = {0, -1, 1, 2};
  EXPECT_EQ(std::vector<std::int32_t>(p.expert_map(0, 0).begin(), p.expert_map(0, 0).end()), rank0);
  EXPECT_EQ(std::vector<std::int32_t>(p.expert_map(1, 0).begin(), p.expert_map(1, 0).end()), rank1);
  EXPECT_EQ(p.logical_of(0, 0, 2), -1);  // an empty row
  const std::vector<std::int32_t> maps = {0, 1, -1, -1, 0, -1, 1, 2};
  EXPECT_EQ(expert_placement::from_expert_maps(1, 4, 2, 3, maps), p);
}

TEST(placement, bad_expert_maps_are_refused_naming_the_values) {
  const std::vector<std::int32_t> good = {0, 1, -1, -1, 0, -1, 1, 2};
  expect_error(
      [&] { (void)expert_placement::from_expert_maps(1, 4, 2, 3, std::span(good).first(7)); },
      "holds 7 values", "1 x 2 x 4 = 8");
  auto bad = good;
  bad[6] = 3;  // rank 1, expert 2 -> local 3, but 3 rows
  expect_error([&] { (void)expert_placement::from_expert_maps(1, 4, 2, 3, bad); }, "rank 1",
               "expert_map[2] = 3", "local_experts = 3");
  bad = good;
  bad[7] = 1;  // rank 1: experts 2 and 3 both at local 1
  expect_error([&] { (void)expert_placement::from_expert_maps(1, 4, 2, 3, bad); },
               "experts 2 and 3 both map to local id 1", "duplicate slot");
  bad = good;
  bad[1] = -1;  // expert 1 held nowhere
  expect_error([&] { (void)expert_placement::from_expert_maps(1, 4, 2, 3, bad); },
               "logical expert 1 has no replica");
  bad = good;
  bad[2] = -2;
  expect_error([&] { (void)expert_placement::from_expert_maps(1, 4, 2, 3, bad); },
               "expert_map[2] = -2");
}

TEST(placement, bad_replica_ranks_are_refused_naming_the_values) {
  using ranks_list = std::vector<std::vector<std::int32_t>>;
  expect_error(
      [] {
        (void)expert_placement::from_replica_ranks(1, 3, 2, 2, ranks_list{{0}, {2}, {1}});
      },
      "expert 1", "replica rank 2 is outside [0, ranks = 2)");
  expect_error(
      [] {
        (void)expert_placement::from_replica_ranks(1, 3, 2, 2, ranks_list{{0}, {}, {1}});
      },
      "expert 1 has no replica");
  expect_error(
      [] {
        (void)expert_placement::from_replica_ranks(1, 3, 2, 2, ranks_list{{0, 0}, {1}, {1}});
      },
      "expert 0 has two replicas on rank 0");
  expect_error(
      [] {
        (void)expert_placement::from_replica_ranks(1, 3, 2, 1, ranks_list{{0}, {0}, {1}});
      },
      "rank 0 would hold more than local_experts = 1");
  expect_error([] { (void)expert_placement::from_replica_ranks(2, 3, 2, 2, ranks_list{{0}}); },
               "replica_ranks has 1 entries", "2 x 3 = 6");
  expect_error([] { (void)expert_placement::linear(1, 8, 0); }, "ranks must be >= 1, got 0");
}

TEST(placement, queries_check_their_arguments) {
  const expert_placement p = expert_placement::linear(2, 8, 4);
  expect_error([&] { (void)p.expert_map(4, 0); }, "rank 4 is outside [0, ranks = 4)");
  expect_error([&] { (void)p.replicas(2, 0); }, "layer 2 is outside [0, layers = 2)");
  expect_error([&] { (void)p.replicas(0, 8); }, "expert 8 is outside [0, experts = 8)");
  expect_error([&] { (void)p.logical_of(0, 0, 2); }, "local id 2 is outside");
}

}  // namespace
}  // namespace wisp
