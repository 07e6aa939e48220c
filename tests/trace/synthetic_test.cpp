// SPDX-License-Identifier: Apache-2.0
#include "support/expect_error.hpp"
#include "support/traces.hpp"
#include "trace_test_util.hpp"

#include <wisp/trace/esft.hpp>
#include <wisp/trace/synthetic.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

namespace {

using wisp::make_synthetic_trace;
using wisp::synthetic_config;
using wisp::synthetic_preset;

TEST(Xoshiro, SplitmixReferenceAndStability) {
  // splitmix64 reference vector (seed 1234567, Vigna's splitmix64.c); xoshiro is then checked for
  // stability and range.
  std::uint64_t s = 1234567;
  EXPECT_EQ(wisp::detail::splitmix64(s), 6457827717110365317ull);
  EXPECT_EQ(wisp::detail::splitmix64(s), 3203168211198807973ull);
  wisp::detail::xoshiro256ss a(42);
  wisp::detail::xoshiro256ss b(42);
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(a(), b());
  }
  for (int i = 0; i < 1000; ++i) {
    ASSERT_LT(a.below(7), 7u);
  }
}

TEST(Synthetic, SameSeedSameTraceDifferentSeedDifferentTrace) {
  for (const auto name : wisp::synthetic_preset_names()) {
    const synthetic_config cfg = synthetic_preset(name);
    const auto a = make_synthetic_trace(cfg, 300, 7);
    const auto b = make_synthetic_trace(cfg, 300, 7);
    const auto c = make_synthetic_trace(cfg, 300, 8);
    EXPECT_EQ(a, b) << name;
    EXPECT_NE(a, c) << name;
    EXPECT_EQ(a.steps(), 300u);
    EXPECT_EQ(a.shape(), (wisp::moe_shape{cfg.layers, cfg.experts, cfg.top_k})) << name;
    ASSERT_FALSE(a.sequence_starts().empty());
    EXPECT_EQ(a.sequence_starts()[0], 0u);
  }
}

TEST(Synthetic, PresetsHaveTheDocumentedShapes) {
  auto shape = [](std::string_view n) {
    const auto c = synthetic_preset(n);
    return wisp::moe_shape{c.layers, c.experts, c.top_k};
  };
  EXPECT_EQ(shape("default"), (wisp::moe_shape{26, 64, 6}));
  EXPECT_EQ(shape("qwen3-30b-a3b"), (wisp::moe_shape{48, 128, 8}));
  EXPECT_EQ(shape("mixtral-8x7b"), (wisp::moe_shape{32, 8, 2}));
  EXPECT_EQ(shape("olmoe-1b-7b"), (wisp::moe_shape{16, 64, 8}));
  EXPECT_EQ(shape("qwen1.5-moe-a2.7b"), (wisp::moe_shape{24, 60, 4}));
  EXPECT_EQ(synthetic_preset("qwen1.5-moe-a2.7b").working_set, 3);  // round(0.85 x 4)
  wisp::test::expect_error([] { (void)synthetic_preset("gpt-9"); }, "qwen3-30b-a3b", "gpt-9");
}

TEST(Synthetic, ValidatesTheConfig) {
  synthetic_config c;
  c.locality = 0.8;
  c.coactivation = 0.3;
  EXPECT_THROW((void)make_synthetic_trace(c, 1, 1), wisp::logic_error);
  c = {};
  c.working_set = 65;
  EXPECT_THROW((void)make_synthetic_trace(c, 1, 1), wisp::logic_error);
  c = {};
  c.mean_sequence_length = 0.5;
  EXPECT_THROW((void)make_synthetic_trace(c, 1, 1), wisp::logic_error);
  c = {};
  c.top_k = 65;
  EXPECT_THROW((void)make_synthetic_trace(c, 1, 1), wisp::logic_error);
  // Extremes still produce valid traces: k == E, every mass on the working set.
  c = {};
  c.experts = 6;
  c.working_set = 6;
  c.locality = 1.0;
  c.coactivation = 0.0;
  EXPECT_EQ(make_synthetic_trace(c, 20, 1).steps(), 20u);
  EXPECT_EQ(make_synthetic_trace(c, 0, 1).steps(), 0u);
}

TEST(Synthetic, SkewAndLocalityRaiseHitRates) {
  const auto uniform = make_synthetic_trace(synthetic_preset("uniform"), 2000, 3);
  const auto skewed = make_synthetic_trace(synthetic_preset("default"), 2000, 3);
  EXPECT_GT(wisp_test::per_layer_lru_hit_rate(skewed, 16),
            wisp_test::per_layer_lru_hit_rate(uniform, 16) + 0.05);
  // LRU with capacity >= experts misses only cold.
  const double full = wisp_test::per_layer_lru_hit_rate(uniform, 64);
  EXPECT_NEAR(full, 1.0 - 26.0 * 64.0 / static_cast<double>(uniform.access_count()), 1e-9);
}

// The "default" preset tracks the real ESFT trace: per-layer LRU hit rate within 0.1 at 8, 16, 32
// with the same number of steps. Prints both curves (docs/synthetic.md quotes them).
TEST(Synthetic, DefaultPresetIsCalibratedAgainstEsft) {
  const auto synth = make_synthetic_trace(
      synthetic_preset("default"), wisp::default_synthetic_steps, wisp::default_synthetic_seed);
  const std::vector<int> caps = {1, 2, 4, 8, 16, 32, 64};
  const auto esft = wisp::test::esft_trace();
  const std::vector<double> s = wisp_test::per_layer_lru_curve(synth, caps);
  if (esft) {
    const std::vector<double> e = wisp_test::per_layer_lru_curve(*esft, caps);
    for (std::size_t i = 0; i < caps.size(); ++i) {
      std::printf("capacity %2d: esft %.4f synthetic %.4f diff %+.4f\n", caps[i], e[i], s[i],
                  s[i] - e[i]);
      if (caps[i] == 8 || caps[i] == 16 || caps[i] == 32) {
        EXPECT_LE(std::abs(s[i] - e[i]), 0.1) << "capacity " << caps[i];
      }
    }
  } else {
    for (std::size_t i = 0; i < caps.size(); ++i) {
      std::printf("capacity %2d: synthetic %.4f\n", caps[i], s[i]);
    }
  }
  // Also against the numbers measured on ESFT (docs/synthetic.md), so the synthetic side stays
  // guarded where the real trace is absent.
  const double esft_ref[] = {0.2678, 0.4727, 0.7263};  // capacities 8, 16, 32
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_LE(std::abs(s[3 + i] - esft_ref[i]), 0.1) << "capacity " << caps[3 + i];
  }
  WISP_TEST_NEEDS_TRACE(esft);  // the synthetic side is checked above either way
}

}  // namespace
