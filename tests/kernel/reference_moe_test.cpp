// SPDX-License-Identifier: Apache-2.0
// exp_portable against std::exp, and reference_fused_moe against a double-precision oracle, with
// the properties the fused-MoE contract promises bit for bit: slots do not matter, hidden experts
// contribute nothing, a token's output does not depend on its batch, and the bf16 path is the fp32
// path rounded once.
#include "support/expect_error.hpp"

#include <wisp/kernel/bf16.hpp>
#include <wisp/kernel/fused_moe.hpp>
#include <wisp/kernel/reference_moe.hpp>
#include <wisp/kernel/swiglu.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <vector>

namespace {

using wisp::bf16;
using wisp::test::expect_error;

TEST(ExpPortable, IsWithinThreeTenthsOfAMillionthOfStdExp) {
  double worst = 0;
  for (float x = -87.0f; x <= 88.72f; x += 0.000731f) {
    const double want = std::exp(static_cast<double>(x));
    const double got = wisp::detail::exp_portable(x);
    worst = std::max(worst, std::abs(got - want) / want);
  }
  EXPECT_LT(worst, 3e-7);
  EXPECT_EQ(wisp::detail::exp_portable(0.0f), 1.0f);
  EXPECT_EQ(wisp::detail::exp_portable(-100.0f), 0.0f);
  EXPECT_TRUE(std::isinf(wisp::detail::exp_portable(89.0f)));
  EXPECT_TRUE(std::isnan(wisp::detail::exp_portable(std::numeric_limits<float>::quiet_NaN())));
}

// A batch with experts in a slot tensor, and a double-precision oracle of the contract.
struct moe_case {
  wisp::swiglu_shape shape{.hidden = 24, .intermediate = 10};
  std::int32_t experts = 12;
  std::int32_t slots = 7;
  std::int32_t tokens = 5;
  std::int32_t k = 3;
  std::vector<bf16> masters;        // [experts x row]
  std::vector<std::byte> slot_mem;  // [slots x row]
  std::vector<std::int32_t> map;    // [experts]
  std::vector<float> hidden;        // [tokens x H]
  std::vector<std::int32_t> ids;    // [tokens x k]
  std::vector<float> weights;       // [tokens x k]

  explicit moe_case(std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> w(-0.5f, 0.5f);
    const std::size_t row = shape.row_bytes() / sizeof(bf16);
    masters.resize(row * static_cast<std::size_t>(experts));
    for (bf16& v : masters) {
      v = wisp::to_bf16(w(rng));
    }
    slot_mem.resize(shape.row_bytes() * static_cast<std::size_t>(slots));
    // Experts 0..slots-1 resident in a shuffled placement, the rest hidden.
    std::vector<std::int32_t> order(static_cast<std::size_t>(slots));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    map.assign(static_cast<std::size_t>(experts), -1);
    for (std::int32_t e = 0; e < slots; ++e) {
      place(e, order[static_cast<std::size_t>(e)]);
    }
    hidden.resize(static_cast<std::size_t>(tokens * shape.hidden));
    for (float& v : hidden) {
      v = wisp::to_float(wisp::to_bf16(w(rng) * 4));
    }
    std::uniform_int_distribution<std::int32_t> id(0, experts - 1);
    for (std::int32_t t = 0; t < tokens * k; ++t) {
      ids.push_back(id(rng));
      weights.push_back(w(rng) + 0.5f);
    }
  }
  void place(std::int32_t expert, std::int32_t slot) {
    std::memcpy(slot_mem.data() + static_cast<std::size_t>(slot) * shape.row_bytes(),
                masters.data() + static_cast<std::size_t>(expert) * shape.row_bytes() / 2,
                shape.row_bytes());
    map[static_cast<std::size_t>(expert)] = slot;
  }
  [[nodiscard]] wisp::expert_tensor_view view() {
    return {slot_mem.data(), static_cast<std::size_t>(slots), shape.row_bytes()};
  }
  [[nodiscard]] std::vector<float> run() {
    std::vector<float> out(hidden.size(), -7.0f);
    wisp::reference_fused_moe kernel(shape);
    kernel(wisp::fused_moe_args{hidden, ids, weights, view(), map, out, tokens, k, shape.hidden});
    return out;
  }
  // The contract in double precision, straight from the master rows.
  [[nodiscard]] std::vector<double> oracle() const {
    const auto h = static_cast<std::size_t>(shape.hidden);
    const auto inter = static_cast<std::size_t>(shape.intermediate);
    std::vector<double> out(hidden.size(), 0.0);
    for (std::size_t t = 0; t < static_cast<std::size_t>(tokens); ++t) {
      for (std::size_t j = 0; j < static_cast<std::size_t>(k); ++j) {
        const std::int32_t e = ids[t * static_cast<std::size_t>(k) + j];
        if (map[static_cast<std::size_t>(e)] < 0) {
          continue;
        }
        const bf16* w = masters.data() + static_cast<std::size_t>(e) * 3 * h * inter;
        std::vector<double> act(inter);
        for (std::size_t i = 0; i < inter; ++i) {
          double g = 0;
          double u = 0;
          for (std::size_t c = 0; c < h; ++c) {
            g += static_cast<double>(wisp::to_float(w[i * h + c])) * hidden[t * h + c];
            u += static_cast<double>(wisp::to_float(w[h * inter + i * h + c])) * hidden[t * h + c];
          }
          act[i] = g / (1 + std::exp(-g)) * u;
        }
        for (std::size_t o = 0; o < h; ++o) {
          double y = 0;
          for (std::size_t i = 0; i < inter; ++i) {
            y += static_cast<double>(wisp::to_float(w[2 * h * inter + o * inter + i])) * act[i];
          }
          out[t * h + o] += weights[t * static_cast<std::size_t>(k) + j] * y;
        }
      }
    }
    return out;
  }
};

TEST(ReferenceFusedMoe, MatchesTheDoublePrecisionOracle) {
  for (std::uint32_t seed = 1; seed <= 5; ++seed) {
    moe_case c(seed);
    const std::vector<float> got = c.run();
    const std::vector<double> want = c.oracle();
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 2e-5 * (1 + std::abs(want[i]))) << "seed " << seed << " i " << i;
    }
  }
}

TEST(ReferenceFusedMoe, OutputDoesNotDependOnSlotsOrBatch) {
  moe_case c(11);
  const std::vector<float> base = c.run();
  // Move every resident expert to another slot: the same bits.
  moe_case moved(11);
  for (std::int32_t e = 0; e < moved.slots; ++e) {
    moved.place(e, (c.map[static_cast<std::size_t>(e)] + 3) % moved.slots);
  }
  EXPECT_EQ(moved.run(), base);
  // Each token alone: the same bits as in the batch.
  const auto h = static_cast<std::size_t>(c.shape.hidden);
  const auto k = static_cast<std::size_t>(c.k);
  for (std::size_t t = 0; t < static_cast<std::size_t>(c.tokens); ++t) {
    std::vector<float> out(h);
    wisp::reference_fused_moe kernel(c.shape);
    kernel(wisp::fused_moe_args{std::span<const float>(c.hidden).subspan(t * h, h),
                                std::span<const std::int32_t>(c.ids).subspan(t * k, k),
                                std::span<const float>(c.weights).subspan(t * k, k), c.view(),
                                c.map, out, 1, c.k, c.shape.hidden});
    EXPECT_TRUE(
        std::equal(out.begin(), out.end(), base.begin() + static_cast<std::ptrdiff_t>(t * h)))
        << "token " << t;
  }
}

TEST(ReferenceFusedMoe, HiddenExpertsContributeNothingAndSplitsSumUp) {
  moe_case c(5);
  const std::vector<double> want = c.oracle();
  // Hide the experts of slots [0, 3) in one call, the others in a second call: the two partial
  // outputs add up to the whole (an expert split).
  moe_case first(5);
  moe_case second(5);
  for (std::int32_t e = 0; e < c.experts; ++e) {
    const std::int32_t s = c.map[static_cast<std::size_t>(e)];
    (s >= 0 && s < 3 ? second : first).map[static_cast<std::size_t>(e)] = -1;
  }
  const std::vector<float> a = first.run();
  const std::vector<float> b = second.run();
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i] + b[i], want[i], 2e-5 * (1 + std::abs(want[i])));
  }
  moe_case none(5);
  std::fill(none.map.begin(), none.map.end(), -1);
  for (const float v : none.run()) {
    ASSERT_EQ(v, 0.0f);
  }
}

TEST(ReferenceFusedMoe, Bf16ActivationsAreTheFp32PathRoundedOnce) {
  moe_case c(8);  // hidden already holds bf16-representable values
  const std::vector<float> fp32 = c.run();
  std::vector<bf16> hidden(c.hidden.size());
  std::transform(c.hidden.begin(), c.hidden.end(), hidden.begin(),
                 [](float f) { return wisp::to_bf16(f); });
  std::vector<bf16> out(hidden.size());
  std::vector<std::int64_t> ids(c.ids.begin(), c.ids.end());
  wisp::reference_fused_moe kernel(c.shape);
  kernel(wisp::basic_fused_moe_args<bf16, std::int64_t>{hidden, ids, c.weights, c.view(), c.map,
                                                        out, c.tokens, c.k, c.shape.hidden});
  for (std::size_t i = 0; i < out.size(); ++i) {
    ASSERT_EQ(out[i], wisp::to_bf16(fp32[i])) << i;
  }
}

TEST(ReferenceFusedMoe, BadArgumentsThrowAndWriteNothing) {
  moe_case c(2);
  std::vector<float> out(c.hidden.size(), -7.0f);
  wisp::reference_fused_moe kernel(c.shape);
  auto args = [&] {
    return wisp::fused_moe_args{c.hidden, c.ids,    c.weights, c.view(),      c.map,
                                out,      c.tokens, c.k,       c.shape.hidden};
  };
  c.ids[4] = c.experts;
  expect_error([&] { kernel(args()); }, "topk_ids[4] = 12", "expert map [0, 12)");
  c.ids[4] = 0;
  c.map[0] = c.slots;
  expect_error([&] { kernel(args()); }, "expert_map[0] = 7", "7-row expert tensor");
  c.map[0] = -1;
  wisp::fused_moe_args a = args();
  a.hidden_dim = 8;
  a.hidden = a.hidden.first(40);
  a.out = a.out.first(40);
  expect_error([&] { kernel(a); }, "hidden_dim 8", "hidden size is 24");
  a = args();
  a.experts.row_stride -= 2;
  expect_error([&] { kernel(a); }, "must hold 1440 bytes");
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float v) { return v == -7.0f; }));
  expect_error([] { wisp::reference_fused_moe({.hidden = 0, .intermediate = 4}); },
               "hidden 0 and intermediate 4");
}

}  // namespace
