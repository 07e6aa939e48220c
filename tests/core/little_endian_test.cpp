// SPDX-License-Identifier: Apache-2.0
// Little-endian integer I/O against a byte-by-byte oracle (byte i holds bits 8i..8i+7): every
// width, random values, unaligned addresses, and the typed loads and stores agreeing with the
// width-given ones.
#include <wisp/core/detail/little_endian.hpp>

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <random>
#include <vector>

namespace {

using wisp::detail::append_le;
using wisp::detail::load_le;
using wisp::detail::store_le;

// The oracle: the little-endian bytes of the low `width` bytes of v.
std::vector<std::uint8_t> bytes_of(std::uint64_t v, int width) {
  std::vector<std::uint8_t> out;
  for (int i = 0; i < width; ++i) {
    out.push_back(static_cast<std::uint8_t>((v / (std::uint64_t{1} << (8 * i))) % 256));
  }
  return out;
}

std::uint64_t low_bytes(std::uint64_t v, int width) {
  return width == 8 ? v : v % (std::uint64_t{1} << (8 * width));
}

TEST(LittleEndian, EveryWidthMatchesTheByteOracle) {
  std::mt19937_64 rng(1);
  for (int trial = 0; trial < 2000; ++trial) {
    const std::uint64_t v = rng();
    for (int width = 0; width <= 8; ++width) {
      const std::vector<std::uint8_t> want = bytes_of(v, width);
      std::vector<std::uint8_t> appended = {0xAA};
      append_le(appended, v, width);
      ASSERT_EQ(std::vector<std::uint8_t>(appended.begin() + 1, appended.end()), want) << width;
      std::vector<std::uint8_t> stored(10, 0xEE);
      store_le(stored.data() + 1, v, width);
      for (int i = 0; i < width; ++i) {
        ASSERT_EQ(stored[static_cast<std::size_t>(1 + i)], want[static_cast<std::size_t>(i)]);
      }
      ASSERT_EQ(stored[static_cast<std::size_t>(1 + width)], 0xEE) << "wrote past the width";
      ASSERT_EQ(load_le(want.data(), width), low_bytes(v, width)) << width;
    }
  }
}

TEST(LittleEndian, TypedLoadsAndStoresAtAnyAlignment) {
  std::mt19937_64 rng(2);
  std::vector<std::uint8_t> buffer(32);
  for (int trial = 0; trial < 1000; ++trial) {
    const std::uint64_t v = rng();
    for (std::size_t at = 0; at < 8; ++at) {
      store_le<std::uint64_t>(buffer.data() + at, v);
      ASSERT_EQ(std::vector<std::uint8_t>(buffer.begin() + static_cast<long>(at),
                                          buffer.begin() + static_cast<long>(at) + 8),
                bytes_of(v, 8));
      ASSERT_EQ(load_le<std::uint64_t>(buffer.data() + at), v);
      ASSERT_EQ(load_le<std::uint32_t>(buffer.data() + at), low_bytes(v, 4));
      ASSERT_EQ(load_le<std::uint16_t>(buffer.data() + at), low_bytes(v, 2));
      store_le<std::uint32_t>(buffer.data() + at, static_cast<std::uint32_t>(v));
      ASSERT_EQ(load_le(buffer.data() + at, 4), low_bytes(v, 4));
      store_le<std::uint16_t>(buffer.data() + at, static_cast<std::uint16_t>(v));
      ASSERT_EQ(load_le(buffer.data() + at, 2), low_bytes(v, 2));
    }
  }
}

constexpr std::array<std::uint8_t, 3> three{1, 2, 3};
static_assert(load_le(three.data(), 3) == 0x030201);  // usable in constant expressions

}  // namespace
