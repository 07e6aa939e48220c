// SPDX-License-Identifier: Apache-2.0
// wisp::bf16's float -> BF16 rounding against an exact-arithmetic oracle (finite values; ties,
// infinities, overflow and NaNs), and the round trip through to_float.
#include <wisp/core/bf16.hpp>

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

namespace {

// Nearest BF16 by exact arithmetic: the two neighbours that bracket f, ties to an even mantissa.
std::uint16_t nearest_bf16(float f) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
  const auto down = static_cast<std::uint16_t>(bits >> 16);  // truncation: towards zero
  if ((bits & 0xFFFFu) == 0) {
    return down;
  }
  const auto up = static_cast<std::uint16_t>(down + 1);  // next magnitude (may become inf)
  const double lo = std::bit_cast<float>(std::uint32_t{down} << 16);
  const double hi = (up & 0x7F80u) == 0x7F80u && (down & 0x7F80u) != 0x7F80u
                        ? std::ldexp(1.0, 128) * (f < 0 ? -1 : 1)  // rounding past FLT_MAX
                        : std::bit_cast<float>(std::uint32_t{up} << 16);
  const double dl = std::abs(static_cast<double>(f) - lo);
  const double dh = std::abs(hi - static_cast<double>(f));
  if (dl != dh) {
    return dl < dh ? down : up;
  }
  return (down & 1u) == 0 ? down : up;
}

TEST(Bf16, RoundsToNearestEvenLikeTheOracle) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    float f = std::bit_cast<float>(bits(rng));
    if (!std::isfinite(f) || std::abs(f) > 3.3e38f) {
      continue;  // NaN, inf and the values that round to inf are checked below
    }
    ASSERT_EQ(wisp::to_bf16(f).bits, nearest_bf16(f)) << f;
    ASSERT_EQ(wisp::to_float(wisp::to_bf16(wisp::to_float(wisp::to_bf16(f)))),
              wisp::to_float(wisp::to_bf16(f)));
  }
  // Exact ties: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7 and goes to the even 1.
  EXPECT_EQ(wisp::to_float(wisp::to_bf16(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_EQ(wisp::to_float(wisp::to_bf16(1.0f + 3.0f / 256)), 1.0f + 4.0f / 256);
  EXPECT_TRUE(std::isinf(wisp::to_float(wisp::to_bf16(std::numeric_limits<float>::max()))));
  EXPECT_TRUE(std::isnan(wisp::to_float(wisp::to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(wisp::to_float(wisp::to_bf16(std::bit_cast<float>(0x7f800001u)))))
      << "a signalling NaN whose payload sits in the low bits must not round to inf";
  EXPECT_EQ(wisp::to_bf16(-0.0f).bits, 0x8000u);
}

TEST(Bf16, FromFloatRoundsToNearestEvenLikeExactArithmetic) {
  std::mt19937_64 rng(5);
  for (int i = 0; i < 200000; ++i) {
    auto bits = static_cast<std::uint32_t>(rng());
    if (i % 4 == 0) {
      bits = (bits & 0xFFFF0000u) | 0x8000u;  // exact ties
    }
    const float f = std::bit_cast<float>(bits);
    if (std::isnan(f)) {
      const std::uint16_t b = wisp::to_bf16(f).bits;
      EXPECT_EQ(b & 0x7F80u, 0x7F80u);
      EXPECT_NE(b & 0x7Fu, 0u) << "NaN became infinity: " << bits;
      EXPECT_EQ(b >> 15, bits >> 31);
      continue;
    }
    ASSERT_EQ(wisp::to_bf16(f).bits, nearest_bf16(f)) << std::hex << bits;
  }
  EXPECT_EQ(wisp::to_bf16(std::numeric_limits<float>::infinity()).bits, 0x7F80u);
  EXPECT_EQ(wisp::to_bf16(-0.0f).bits, 0x8000u);
  EXPECT_EQ(wisp::to_bf16(std::numeric_limits<float>::max()).bits, 0x7F80u);  // rounds to inf
}

}  // namespace
