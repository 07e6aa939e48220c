// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Internal: the platform-independent random generator behind wisp's synthetic workloads
/// (routing traces, KV request mixes): xoshiro256** seeded by splitmix64, integer arithmetic only,
/// so the same seed gives the same sequence on every compiler and standard library.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

namespace wisp::detail {

/// splitmix64 step (Vigna), used to seed xoshiro.
[[nodiscard]] constexpr std::uint64_t splitmix64(std::uint64_t& state) noexcept {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// xoshiro256** 1.0 (Blackman & Vigna): small, fast, identical output on every platform.
class xoshiro256ss {
 public:
  explicit constexpr xoshiro256ss(std::uint64_t seed) noexcept {
    for (auto& word : s_) {
      word = splitmix64(seed);
    }
  }
  constexpr std::uint64_t operator()() noexcept {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  /// Uniform integer in [0, n), n > 0, unbiased (rejection).
  constexpr std::uint64_t below(std::uint64_t n) noexcept {
    const std::uint64_t threshold = (0 - n) % n;
    std::uint64_t r = (*this)();
    while (r < threshold) {
      r = (*this)();
    }
    return r % n;
  }
  /// True with probability `threshold / 2^64`.
  constexpr bool chance(std::uint64_t threshold) noexcept { return (*this)() < threshold; }

 private:
  static constexpr std::uint64_t rotl(std::uint64_t x, int k) noexcept {
    return (x << k) | (x >> (64 - k));
  }
  std::array<std::uint64_t, 4> s_{};
};

/// Probability p in [0, 1] as a threshold for `xoshiro256ss::chance`.
[[nodiscard]] inline std::uint64_t probability_threshold(double p) noexcept {
  if (p <= 0) {
    return 0;
  }
  if (p >= 1) {
    return ~std::uint64_t{0};
  }
  return static_cast<std::uint64_t>(std::ldexp(p, 64));
}

}  // namespace wisp::detail
