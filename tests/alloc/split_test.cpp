// SPDX-License-Identifier: Apache-2.0
// Exact split arithmetic, the admission floor, the smallest feasible budget and byte parsing.
#include "support/expect_error.hpp"

#include <wisp/alloc/model_spec.hpp>
#include <wisp/alloc/split.hpp>
#include <wisp/alloc/units.hpp>
#include <wisp/core/error.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace {

using namespace wisp::literals;
using wisp::admission_floor;
using wisp::byte_size;
using wisp::make_split;
using wisp::model_preset;

TEST(Split, HandComputedQwen3At24GiB) {
  const auto m = model_preset("qwen3-30b-a3b");
  // cap 32: 32 x 48 x 9 MiB = 13824 MiB; rest 24576 - 13824 = 10752 MiB; block 1.5 MiB -> 7168.
  const auto s = make_split(m, 24_GiB, 32);
  EXPECT_EQ(s.expert_cap, 32);
  EXPECT_EQ(s.expert_bytes, 13824_MiB);
  EXPECT_EQ(s.kv_blocks, 7168u);
  EXPECT_EQ(s.kv_tokens, 7168u * 16);
  EXPECT_EQ(s.kv_bytes, 10752_MiB);
  EXPECT_EQ(s.slack, 0_B);
}

// WiSP Table 3: Qwen3-30B-A3B under vLLM with a fixed budget; the KV tokens the engine allocated
// at each expert cap, as published (not recomputed here).
TEST(Split, WispTable3KvTokensOfQwen3) {
  const auto m = model_preset("qwen3-30b-a3b");
  const byte_size budget{40565735424};
  EXPECT_EQ(make_split(m, budget, 8).kv_tokens, 375792u);
  EXPECT_EQ(make_split(m, budget, 16).kv_tokens, 338928u);
  EXPECT_EQ(make_split(m, budget, 32).kv_tokens, 265200u);
}

TEST(Split, HandComputedEveryPreset) {
  struct row {
    const char* name;
    byte_size budget;
    std::int32_t cap;
    std::uint64_t blocks;
    std::uint64_t slack;
  };
  // Computed by hand: blocks = floor((B - cap x L x expert) / (16 x kv_per_token)).
  const row rows[] = {
      // OLMoE: 8 GiB - 21 x 16 x 12 MiB = 8192 - 4032 = 4160 MiB; block 2 MiB -> 2080, slack 0.
      {"olmoe-1b-7b", 8_GiB, 21, 2080, 0},
      // Mixtral: 80 GiB - 4 x 32 x 336 MiB = 81920 - 43008 = 38912 MiB; block 2 MiB -> 19456.
      {"mixtral-8x7b", 80_GiB, 4, 19456, 0},
      // DeepSeek-V2-Lite: 12 GiB - 16 x 26 x 16.5 MiB = 12884901888 - 7197425664 = 5687476224 B;
      // block 16 x 31104 = 497664 B -> 11428 blocks (5687304192 B), slack 172032 B.
      {"deepseek-v2-lite", 12_GiB, 16, 11428, 172032},
      // Qwen1.5-MoE: 10 GiB - 20 x 24 x 16.5 MiB = 10240 - 7920 = 2320 MiB; block 3 MiB -> 773
      // blocks (2319 MiB), slack 1 MiB.
      {"qwen1.5-moe-a2.7b", 10_GiB, 20, 773, 1048576},
      // Qwen3: 24 GiB - 49 x 432 MiB = 24576 - 21168 = 3408 MiB; 1.5 MiB blocks -> 2272.
      {"qwen3-30b-a3b", 24_GiB, 49, 2272, 0},
  };
  for (const row& r : rows) {
    SCOPED_TRACE(r.name);
    const auto m = model_preset(r.name);
    const auto s = make_split(m, r.budget, r.cap);
    EXPECT_EQ(s.kv_blocks, r.blocks);
    EXPECT_EQ(s.slack.count(), r.slack);
    EXPECT_EQ(s.expert_bytes + s.kv_bytes + s.slack, r.budget);  // conserved exactly
    EXPECT_LT(s.slack, m.kv_block_bytes());
  }
}

TEST(Split, ConservationAtEveryCapAndOddBudgets) {
  for (const auto& entry : wisp::model_presets()) {
    const auto m = entry.config.spec();
    for (const std::uint64_t budget :
         {m.cap_unit_bytes().count() * m.experts, m.cap_unit_bytes().count() * m.top_k + 12345,
          (24_GiB).count() + 7, (80_GiB).count() - 1}) {
      for (std::int32_t c = m.top_k; c <= m.experts; ++c) {
        if (m.expert_pool_bytes(c).count() > budget) {
          EXPECT_THROW((void)make_split(m, byte_size{budget}, c), wisp::logic_error);
          continue;
        }
        const auto s = make_split(m, byte_size{budget}, c);
        ASSERT_EQ(s.expert_bytes.count() + s.kv_bytes.count() + s.slack.count(), budget);
        ASSERT_EQ(s.kv_blocks, (budget - s.expert_bytes.count()) / m.kv_block_bytes().count());
        ASSERT_LT(s.slack, m.kv_block_bytes());
      }
    }
  }
}

TEST(Split, CapOutsideTopKToExpertsIsRejected) {
  const auto m = model_preset("olmoe-1b-7b");
  EXPECT_THROW((void)make_split(m, 80_GiB, 7), wisp::logic_error);
  EXPECT_THROW((void)make_split(m, 80_GiB, 65), wisp::logic_error);
  EXPECT_NO_THROW((void)make_split(m, 80_GiB, 8));   // capacity == k
  EXPECT_NO_THROW((void)make_split(m, 80_GiB, 64));  // capacity == E
  wisp::test::expect_error([&] { (void)make_split(m, 80_GiB, 0); }, "[8, 64]");
}

TEST(AdmissionFloor, BlocksRoundUpAndAdmits) {
  const auto m = model_preset("olmoe-1b-7b");
  const admission_floor f{3, 1000};  // 3000 tokens -> ceil(3000 / 16) = 188 blocks
  EXPECT_EQ(f.tokens(), 3000u);
  EXPECT_EQ(f.blocks(16), 188u);
  auto s = make_split(m, 80_GiB, 64);
  s.kv_blocks = 188;
  EXPECT_TRUE(f.admits(m, s));  // 188 x 16 = 3008 >= 3000
  s.kv_blocks = 187;
  EXPECT_FALSE(f.admits(m, s));  // 2992 < 3000
  EXPECT_EQ(admission_floor{}.blocks(16), 0u);
  EXPECT_THROW((void)(admission_floor{~0ull, 2}.tokens()), wisp::logic_error);
}

TEST(AdmissionFloor, MaxFeasibleCapMatchesBruteForce) {
  for (const auto& entry : wisp::model_presets()) {
    const auto m = entry.config.spec();
    for (const admission_floor f : {admission_floor{0, 0}, admission_floor{4, 8192},
                                    admission_floor{1, 32768}, admission_floor{16, 4096}}) {
      const auto lowest = wisp::minimum_budget(m, f);
      for (std::uint64_t step = 0; step < 40; ++step) {
        const byte_size budget{lowest.count() + step * (m.cap_unit_bytes().count() / 3 + 977)};
        std::int32_t brute = 0;
        for (std::int32_t c = m.top_k; c <= m.experts; ++c) {
          if (m.expert_pool_bytes(c) <= budget && f.admits(m, make_split(m, budget, c))) {
            brute = c;
          } else {
            break;
          }
        }
        ASSERT_EQ(wisp::max_feasible_cap(m, budget, f), brute)
            << entry.config.name << " budget " << budget.count();
        ASSERT_TRUE(wisp::feasible(m, budget, f, brute));
      }
    }
  }
}

TEST(AdmissionFloor, SmallestBudgetIsExact) {
  for (const auto& entry : wisp::model_presets()) {
    const auto m = entry.config.spec();
    const admission_floor f{4, 8191};
    const auto lowest = wisp::minimum_budget(m, f);
    EXPECT_EQ(wisp::max_feasible_cap(m, lowest, f), m.top_k);
    const byte_size below{lowest.count() - 1};
    wisp::test::expect_error<wisp::infeasible_error>(
        [&] { (void)wisp::max_feasible_cap(m, below, f); }, std::to_string(below.count()),
        std::to_string(lowest.count()), "32764 tokens");  // the floor
  }
}

TEST(AdmissionFloor, BudgetBelowTheMinimumExpertCap) {
  const auto m = model_preset("qwen3-30b-a3b");
  wisp::test::expect_error<wisp::infeasible_error>(
      [&] { (void)wisp::max_feasible_cap(m, 1_GiB, {}); },
      "below the fixed cost of the minimum expert cap",
      std::to_string(m.expert_pool_bytes(8).count()), "budget 1073741824 B (1.00 GiB)");
}

TEST(Units, BytesWithGibBeside) {
  EXPECT_EQ(wisp::format_bytes_and_gib(25769803776), "25769803776 B (24.00 GiB)");
  EXPECT_EQ(wisp::format_bytes_and_gib(0), "0 B (0.00 GiB)");
  EXPECT_EQ(wisp::format_bytes_and_gib(40565735424), "40565735424 B (37.78 GiB)");
}

TEST(Units, ParsesSizesExactly) {
  using wisp::parse_byte_size;
  EXPECT_EQ(parse_byte_size("24GiB"), 24_GiB);
  EXPECT_EQ(parse_byte_size("24 GiB"), 24_GiB);
  EXPECT_EQ(parse_byte_size("1.5GiB"), 1536_MiB);
  EXPECT_EQ(parse_byte_size("8000000000"), byte_size{8000000000});
  EXPECT_EQ(parse_byte_size("80GB"), byte_size{80000000000});
  EXPECT_EQ(parse_byte_size("512B"), 512_B);
  EXPECT_EQ(parse_byte_size("0.5KiB"), 512_B);
  EXPECT_EQ(parse_byte_size("18446744073709551615"), byte_size{~0ull});
  EXPECT_THROW((void)parse_byte_size("18446744073709551616"), wisp::logic_error);
  EXPECT_THROW((void)parse_byte_size("GiB"), wisp::logic_error);
  EXPECT_THROW((void)parse_byte_size("24 gigs"), wisp::logic_error);
  EXPECT_THROW((void)parse_byte_size("1.5"), wisp::logic_error);  // 1.5 bytes
  EXPECT_THROW((void)parse_byte_size("-1GiB"), wisp::logic_error);
  EXPECT_THROW((void)parse_byte_size("20000000000GiB"), wisp::logic_error);
}

}  // namespace
