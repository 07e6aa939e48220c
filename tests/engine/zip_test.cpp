// SPDX-License-Identifier: Apache-2.0
// The example engine's `pager+zip` arm (examples/engine/zip_masters.hpp, device.hpp): the
// compressed masters decode to the exact bytes, a miss costs its compressed bytes on the link
// plus its decode on the device's decode queue (a hand-computed schedule), and the arm makes the
// pager's copies with the pager's outputs while moving fewer bytes.
#include "support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace {

using namespace engine_test;

TEST(EngineZip, EveryExpertDecodesToItsMasterBytes) {
  const model_config c = tiny();
  const model_weights w(c);
  const zip_masters zip(w);
  std::vector<std::byte> row(c.expert_bytes());
  std::uint64_t link = 0;
  for (std::int32_t l = 0; l < c.layers; ++l) {
    for (std::int32_t e = 0; e < c.experts; ++e) {
      std::fill(row.begin(), row.end(), std::byte{0xAB});
      zip.decode(l, e, row.data());
      EXPECT_EQ(std::memcmp(row.data(), w.master(l, e), row.size()), 0) << l << " " << e;
      link += zip.link_bytes(l, e);
    }
  }
  // Gaussian BF16 weights: the exponents compress, so the masters move fewer bytes.
  EXPECT_LT(link, c.all_expert_bytes());
  EXPECT_DOUBLE_EQ(zip.ratio(),
                   static_cast<double>(link) / static_cast<double>(c.all_expert_bytes()));
}

// pager+zip, 1 layer, k = 1, cap 1: the warm-up leaves expert 3 resident, so both evaluated
// forwards miss (experts 2, then 3). A raw expert would cost 4 + 10 us on the link; its
// compressed bytes cost 4 + 10 x rho us (rho = its link bytes over its raw bytes), then 6 us of
// decode, then the kernel: embed 1, attention [1,11], plan [11,12], link [12, 16 + 10 rho],
// decode [.., 22 + 10 rho], kernel 5, combine 2, head 3: 32 + 10 rho us per forward, against the
// pager's 36.
TEST(EngineZip, AMissCostsItsCompressedBytesThenItsDecode) {
  const model_config c = micro(1, 1);
  const workload w = micro_workload(c, {{2}, {3}, {1}}, 1, 2);
  engine_options o;
  o.cap = 1;
  o.link = {.bytes_per_second = static_cast<double>(c.expert_bytes()) / (10 * us),
            .latency_seconds = 4 * us};
  o.decode_bytes_per_second = static_cast<double>(c.expert_bytes()) / (6 * us);
  o.arm = arm_kind::pager;
  const arm_result pager = run_micro(c, w, o);
  o.arm = arm_kind::pager_zip;
  const arm_result zip = run_micro(c, w, o);
  expect_same(pager, zip);
  EXPECT_NEAR(pager.ttft_s, 36 * us, 1e-12);
  EXPECT_NEAR(pager.tpot_s, 36 * us, 1e-12);

  const zip_masters masters{model_weights(c)};
  const auto rho = [&](std::int32_t e) {
    return static_cast<double>(masters.link_bytes(0, e)) / static_cast<double>(c.expert_bytes());
  };
  EXPECT_NEAR(zip.ttft_s, (32 + 10 * rho(2)) * us, 1e-12);
  EXPECT_NEAR(zip.tpot_s, (32 + 10 * rho(3)) * us, 1e-12);
  EXPECT_NEAR(zip.seconds, (64 + 10 * (rho(2) + rho(3))) * us, 1e-12);
  EXPECT_EQ(zip.expert_copies, 2u);
  EXPECT_EQ(zip.bytes_moved, masters.link_bytes(0, 2) + masters.link_bytes(0, 3));
  EXPECT_EQ(zip.raw_bytes, 2 * c.expert_bytes());
  EXPECT_NEAR(zip.decode_seconds, 12 * us, 1e-12);
  EXPECT_EQ(zip.host_decoded_bytes, 2 * c.expert_bytes());  // the warm-up's decodes not counted
}

// At a budget where the pager evicts: the same copies as `pager` at the same policy and cap (the
// policy sees the same calls), the same outputs, each copy at its compressed size.
TEST(EngineZip, MakesThePagersCopiesWithFewerBytes) {
  const fixture f;
  const zip_masters masters(f.weights);
  std::uint64_t least = std::numeric_limits<std::uint64_t>::max(), most = 0;
  for (std::int32_t l = 0; l < f.cfg.layers; ++l) {
    for (std::int32_t e = 0; e < f.cfg.experts; ++e) {
      least = std::min(least, masters.link_bytes(l, e));
      most = std::max(most, masters.link_bytes(l, e));
    }
  }
  for (const char* policy : {"lru", "lfu"}) {
    SCOPED_TRACE(policy);
    engine_options o = f.options(arm_kind::pager);
    o.policy = policy;
    o.budget_bytes = f.budget_for_rows(f.cfg.top_k + 2, o.max_running);
    const arm_result pager = f.run(o);
    o.arm = arm_kind::pager_zip;
    const arm_result zip = f.run(o);
    expect_same(pager, zip);
    ASSERT_GT(pager.expert_copies, 0u);
    EXPECT_EQ(zip.expert_copies, pager.expert_copies);
    EXPECT_EQ(zip.cap, pager.cap);
    EXPECT_EQ(zip.raw_bytes, pager.bytes_moved);
    EXPECT_EQ(pager.raw_bytes, pager.bytes_moved);
    EXPECT_GE(zip.bytes_moved, zip.expert_copies * least);
    EXPECT_LE(zip.bytes_moved, zip.expert_copies * most);
    EXPECT_LT(zip.bytes_moved, pager.bytes_moved);
    EXPECT_NEAR(zip.decode_seconds, static_cast<double>(zip.raw_bytes) / o.decode_bytes_per_second,
                1e-9 * zip.decode_seconds);
  }
}

}  // namespace
