// SPDX-License-Identifier: Apache-2.0
// The BF16 field split and its element rule against bit-by-bit oracles, for all 65,536 patterns;
// entropy against closed forms.
#include "support.hpp"
#include "support/expect_error.hpp"

#include <wisp/compress/bf16.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace {

// Bit i of x.
unsigned bit(unsigned x, int i) {
  return (x >> i) & 1u;
}

TEST(Bf16, FieldsOfEveryPatternMatchTheBitLayout) {
  for (unsigned x = 0; x < 65536; ++x) {
    unsigned exponent = 0;
    for (int i = 0; i < 8; ++i) {
      exponent |= bit(x, 7 + i) << i;  // exponent bits 14..7
    }
    unsigned sm = bit(x, 15) << 7;  // sign, then mantissa bits 6..0
    for (int i = 0; i < 7; ++i) {
      sm |= bit(x, i) << i;
    }
    const wisp::bf16 v{static_cast<std::uint16_t>(x)};
    ASSERT_EQ(wisp::bf16_exponent(v), exponent) << x;
    ASSERT_EQ(wisp::bf16_sign_mantissa(v), sm) << x;
    ASSERT_EQ(wisp::bf16_join(static_cast<std::uint8_t>(sm), static_cast<std::uint8_t>(exponent)),
              v)
        << x;
  }
}

TEST(Bf16, SplitAndRecoverEveryPatternAtEveryLengthAndOffset) {
  const std::vector<wisp::bf16> all = wisp::test::all_bf16_patterns(7);
  std::vector<std::uint8_t> sm(all.size()), ex(all.size());
  wisp::split_bf16(all, sm, ex);
  std::vector<wisp::bf16> back(all.size());
  wisp::recover_bf16(sm, ex, back);
  EXPECT_EQ(back, all);
  // Lengths and start offsets that are not multiples of any vector width.
  for (std::size_t offset : {0u, 1u, 3u, 5u}) {
    for (std::size_t n : {0u, 1u, 2u, 15u, 17u, 31u, 33u, 63u, 65u, 127u}) {
      const std::span<const wisp::bf16> in(all.data() + offset, n);
      std::vector<std::uint8_t> s(n + 1, 0xAB), e(n + 1, 0xCD);
      wisp::split_bf16(in, std::span(s).first(n), std::span(e).first(n));
      EXPECT_EQ(s[n], 0xAB);  // nothing written past the end
      EXPECT_EQ(e[n], 0xCD);
      std::vector<wisp::bf16> out(n + 1, wisp::bf16{0xEEEE});
      wisp::recover_bf16(std::span(s).first(n), std::span(e).first(n), std::span(out).first(n));
      EXPECT_TRUE(std::equal(in.begin(), in.end(), out.begin())) << offset << " " << n;
      EXPECT_EQ(out[n], wisp::bf16{0xEEEE});
    }
  }
}

TEST(Bf16, MismatchedLengthsThrowAndWriteNothing) {
  std::vector<wisp::bf16> v(4, wisp::bf16{1});
  std::vector<std::uint8_t> s(4, 9), e(3, 9);
  wisp::test::expect_error([&] { wisp::split_bf16(v, s, e); }, "4 values", "3 exponent bytes");
  EXPECT_EQ(s, std::vector<std::uint8_t>(4, 9));
  wisp::test::expect_error([&] { wisp::recover_bf16(s, e, v); }, "3 exponent bytes");
  EXPECT_EQ(v, std::vector<wisp::bf16>(4, wisp::bf16{1}));
}

TEST(Bf16, EntropyOfClosedFormHistograms) {
  wisp::exponent_counts c{};
  EXPECT_EQ(wisp::entropy_bits(c), 0.0);
  c[127] = 10;
  EXPECT_EQ(wisp::entropy_bits(c), 0.0);
  c = {};
  for (int s = 0; s < 4; ++s) {
    c[static_cast<std::size_t>(s)] = 5;
  }
  EXPECT_DOUBLE_EQ(wisp::entropy_bits(c), 2.0);
  c = {};
  c[0] = 2;
  c[1] = 1;
  c[2] = 1;  // 1/2, 1/4, 1/4
  EXPECT_DOUBLE_EQ(wisp::entropy_bits(c), 1.5);
  EXPECT_DOUBLE_EQ(wisp::entropy_bound_ratio(c), 9.5 / 16);
  const std::vector<wisp::bf16> all = wisp::test::all_bf16_patterns(0);
  EXPECT_DOUBLE_EQ(wisp::entropy_bits(wisp::exponent_histogram(all)), 8.0);
}

}  // namespace
