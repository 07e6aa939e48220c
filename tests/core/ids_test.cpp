// SPDX-License-Identifier: Apache-2.0
#include "support/expect_error.hpp"

#include <wisp/core/ids.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <sstream>
#include <type_traits>
#include <unordered_set>

namespace {

using namespace wisp::literals;

// Distinct id kinds do not convert into each other or from raw integers.
static_assert(!std::is_convertible_v<wisp::expert_id, wisp::layer_id>);
static_assert(!std::is_convertible_v<std::int32_t, wisp::expert_id>);
static_assert(!std::is_convertible_v<std::uint64_t, wisp::byte_size>);
static_assert(std::is_trivially_copyable_v<wisp::expert_id>);
static_assert(std::is_trivially_copyable_v<wisp::byte_size>);
static_assert(sizeof(wisp::expert_id) == sizeof(std::int32_t));

TEST(StrongId, ComparesHashesAndPrints) {
  const wisp::expert_id a{3};
  const wisp::expert_id b{5};
  EXPECT_LT(a, b);
  EXPECT_EQ(a, wisp::expert_id{3});
  EXPECT_EQ(a.value(), 3);
  const std::unordered_set<wisp::layer_id> layers{wisp::layer_id{1}, wisp::layer_id{1},
                                                  wisp::layer_id{2}};
  EXPECT_EQ(layers.size(), 2u);
  std::ostringstream out;
  out << a << ", " << wisp::layer_id{0};
  EXPECT_EQ(out.str(), "expert 3, layer 0");
}

TEST(ByteSize, LiteralsAreBinaryUnits) {
  EXPECT_EQ((1_KiB).count(), 1024u);
  EXPECT_EQ((2_MiB).count(), 2u * 1024u * 1024u);
  EXPECT_EQ((80_GiB).count(), 80ull * 1024u * 1024u * 1024u);
}

TEST(ByteSize, ArithmeticAgreesWithIntegers) {
  // Oracle: the same arithmetic on uint64 where it does not overflow.
  for (std::uint64_t a : {0ull, 1ull, 7ull, 4096ull, 9437184ull}) {
    for (std::uint64_t b : {1ull, 3ull, 2097152ull}) {
      const wisp::byte_size x{a};
      const wisp::byte_size y{b};
      EXPECT_EQ((x + y).count(), a + b);
      EXPECT_EQ((x * b).count(), a * b);
      EXPECT_EQ(x / y, a / b);
      EXPECT_EQ((x % y).count(), a % b);
      const std::uint64_t rounded = x.round_up(y).count();
      EXPECT_EQ(rounded % b, 0u);
      EXPECT_GE(rounded, a);
      EXPECT_LT(rounded - a, b);
      if (a >= b) {
        EXPECT_EQ((x - y).count(), a - b);
      }
    }
  }
}

TEST(ByteSize, OverflowAndUnderflowThrowWithTheOperands) {
  const wisp::byte_size max{std::numeric_limits<std::uint64_t>::max()};
  EXPECT_THROW((void)(max + 1_B), wisp::logic_error);
  EXPECT_THROW((void)(max * 2), wisp::logic_error);
  EXPECT_THROW((void)(1_B / 0_B), wisp::logic_error);
  EXPECT_THROW((void)(max.round_up(2_MiB)), wisp::logic_error);
  wisp::test::expect_error([] { (void)(1_KiB - 2_KiB); }, "1024 - 2048");
  wisp::byte_size budget = 1_GiB;
  EXPECT_THROW(budget -= 2_GiB, wisp::logic_error);
  EXPECT_EQ(budget, 1_GiB);  // a failed operation leaves the value unchanged
}

}  // namespace
