// SPDX-License-Identifier: Apache-2.0
// Inputs of the compress tests: synthetic Gaussian BF16 weights, every BF16 bit pattern, and the
// exponent coders this build has (the optional ones when their targets are linked).
#pragma once

#include <wisp/compress/bf16.hpp>
#include <wisp/compress/compressed_bf16.hpp>
#include <wisp/compress/exponent_coder.hpp>
#include <wisp/compress/huffman.hpp>
#include <wisp/core/bf16.hpp>
#if defined(WISP_TEST_HAVE_ZSTD)
#include <wisp/compress/zstd.hpp>
#endif
#if defined(WISP_TEST_HAVE_LZ4)
#include <wisp/compress/lz4.hpp>
#endif

#include <algorithm>
#include <cstdint>
#include <ios>
#include <numeric>
#include <ostream>
#include <random>
#include <vector>

namespace wisp {
/// How GoogleTest prints a `bf16` in a failure: its bits in hex.
inline void PrintTo(const bf16& x, std::ostream* os) {
  *os << "bf16{0x" << std::hex << x.bits << std::dec << "}";
}
}  // namespace wisp

namespace wisp::test {

/// `n` BF16 values drawn from N(0, sigma^2), rounded to nearest even: what a trained weight
/// matrix looks like to the exponent coder.
inline std::vector<bf16> gaussian_bf16(std::size_t n, float sigma, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<bf16> out(n);
  for (bf16& v : out) {
    v = to_bf16(normal(rng));
  }
  return out;
}

/// All 65,536 BF16 bit patterns, shuffled with `seed` (0: in order).
inline std::vector<bf16> all_bf16_patterns(std::uint64_t seed) {
  std::vector<bf16> out(65536);
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i].bits = static_cast<std::uint16_t>(i);
  }
  if (seed != 0) {
    std::mt19937_64 rng(seed);
    std::shuffle(out.begin(), out.end(), rng);
  }
  return out;
}

/// Every exponent coder of this build, as encoders (lz4 and lz4hc both).
inline std::vector<any_coder> all_coders() {
  std::vector<any_coder> out{raw_coder{}, huffman_coder{}, huffman_coder{.block = 7}};
#if defined(WISP_TEST_HAVE_ZSTD)
  out.emplace_back(zstd_coder{});
#endif
#if defined(WISP_TEST_HAVE_LZ4)
  out.emplace_back(lz4_coder{});
  out.emplace_back(lz4_coder{.hc_level = 9});
#endif
  return out;
}

/// Decoders for everything `all_coders()` writes.
inline coder_set all_decoders() {
  coder_set set = core_coders();
#if defined(WISP_TEST_HAVE_ZSTD)
  set.add(zstd_coder{});
#endif
#if defined(WISP_TEST_HAVE_LZ4)
  set.add(lz4_coder{});
#endif
  return set;
}

}  // namespace wisp::test
