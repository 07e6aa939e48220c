// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The bit-field split of BF16 values: an exponent byte (bits 14..7) and a sign-mantissa
/// byte (bit 15 then bits 6..0), the one element rule (`bf16_join`) that host and device recovery
/// share, the vectorisable host loops over whole tensors, and the exponent statistics
/// (histogram, Shannon entropy) that bound what any exponent coder can reach.
///
/// In trained weights the 8 exponent bits carry about 2.6 bits of information while sign and
/// mantissa look random, so the exponent stream is compressed and the SM stream is kept raw.
/// @code
/// std::vector<wisp::bf16> w = ...;                     // BF16 weights
/// std::vector<std::uint8_t> sm(w.size()), ex(w.size());
/// wisp::split_bf16(w, sm, ex);
/// std::vector<wisp::bf16> back(w.size());
/// wisp::recover_bf16(sm, ex, back);                    // back == w, bit for bit
/// double bits = wisp::entropy_bits(wisp::exponent_histogram(w));
/// @endcode
#pragma once

#include <wisp/core/bf16.hpp>
#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

namespace wisp {

/// @brief Exponent field of a BF16 value (bits 14..7). Branch-free, usable in kernels.
[[nodiscard]] WISP_HOST_DEVICE constexpr std::uint8_t bf16_exponent(bf16 x) noexcept {
  return static_cast<std::uint8_t>(x.bits >> 7);
}

/// @brief Sign and mantissa of a BF16 value in one byte: sign in bit 7, mantissa in 6..0.
[[nodiscard]] WISP_HOST_DEVICE constexpr std::uint8_t bf16_sign_mantissa(bf16 x) noexcept {
  return static_cast<std::uint8_t>(((x.bits >> 8) & 0x80u) | (x.bits & 0x7Fu));
}

/// @brief Low byte of the BF16 value with sign-mantissa byte `sm` and exponent byte `exponent`:
/// exponent bit 0, then the 7 mantissa bits.
[[nodiscard]] WISP_HOST_DEVICE constexpr std::uint8_t bf16_low_byte(
    std::uint8_t sm, std::uint8_t exponent) noexcept {
  // (0 - bit) & 0x80 rather than bit << 7: SIMD units have no byte shift, but a byte subtract.
  return static_cast<std::uint8_t>((sm & 0x7Fu) | ((0u - (exponent & 1u)) & 0x80u));
}

/// @brief High byte of that BF16 value: the sign, then exponent bits 7..1.
[[nodiscard]] WISP_HOST_DEVICE constexpr std::uint8_t bf16_high_byte(
    std::uint8_t sm, std::uint8_t exponent) noexcept {
  return static_cast<std::uint8_t>((sm & 0x80u) | (exponent >> 1));
}

/// @brief The element rule of recovery: the BF16 value with sign-mantissa byte `sm` and
/// exponent byte `exponent`. Exact inverse of the two field extractors for all 65,536 bit
/// patterns (±0, subnormals, ±inf and every NaN payload included). Host and CUDA recovery both
/// build on it; it is written as two byte rules because whole vectors of bytes are what SIMD
/// units and coalesced loads handle best.
[[nodiscard]] WISP_HOST_DEVICE constexpr bf16 bf16_join(std::uint8_t sm,
                                                        std::uint8_t exponent) noexcept {
  return bf16{static_cast<std::uint16_t>(bf16_low_byte(sm, exponent) |
                                         (bf16_high_byte(sm, exponent) << 8))};
}

namespace detail {
/// Elements per step of the host loops: a fixed trip count lets compilers vectorise the inner
/// loop fully even at -O2 (GCC's cheapest cost model refuses loops that need an epilogue).
inline constexpr std::size_t bf16_vector_block = 64;

/// Recovery of `n` values without checks: the loop the host paths share. Each block computes
/// the low and the high bytes as byte vectors, then interleaves them. Not inlined: compilers drop
/// `__restrict` from inlined parameters and then refuse to vectorise at -O2.
[[gnu::noinline]] inline void recover_bf16_unchecked(const std::uint8_t* __restrict sm,
                                                     const std::uint8_t* __restrict exponents,
                                                     bf16* __restrict out, std::size_t n) noexcept {
  constexpr std::size_t b = bf16_vector_block;
  std::size_t i = 0;
  for (; i + b <= n; i += b) {
    std::uint8_t low[b];
    std::uint8_t high[b];
    for (std::size_t j = 0; j < b; ++j) {
      low[j] = bf16_low_byte(sm[i + j], exponents[i + j]);
      high[j] = bf16_high_byte(sm[i + j], exponents[i + j]);
    }
    for (std::size_t j = 0; j < b; ++j) {
      out[i + j].bits = static_cast<std::uint16_t>(low[j] | (high[j] << 8));
    }
  }
  for (; i < n; ++i) {
    out[i] = bf16_join(sm[i], exponents[i]);
  }
}

/// Split of `n` values without checks (not inlined, for the same reason).
[[gnu::noinline]] inline void split_bf16_unchecked(const bf16* __restrict values,
                                                   std::uint8_t* __restrict sm,
                                                   std::uint8_t* __restrict exponents,
                                                   std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + bf16_vector_block <= n; i += bf16_vector_block) {
    for (std::size_t j = 0; j < bf16_vector_block; ++j) {
      sm[i + j] = bf16_sign_mantissa(values[i + j]);
      exponents[i + j] = bf16_exponent(values[i + j]);
    }
  }
  for (; i < n; ++i) {
    sm[i] = bf16_sign_mantissa(values[i]);
    exponents[i] = bf16_exponent(values[i]);
  }
}
}  // namespace detail

/// @brief Splits BF16 values into their sign-mantissa and exponent bytes.
/// One pass, O(n); written as a plain element loop that compilers vectorise.
/// Thread safety: distinct outputs may be filled concurrently.
/// @throws wisp::logic_error if the three spans differ in length (nothing written).
inline void split_bf16(std::span<const bf16> values, std::span<std::uint8_t> sm,
                       std::span<std::uint8_t> exponents) {
  WISP_EXPECTS(sm.size() == values.size() && exponents.size() == values.size(),
               "split_bf16: ", values.size(), " values but ", sm.size(), " SM bytes and ",
               exponents.size(), " exponent bytes");
  detail::split_bf16_unchecked(values.data(), sm.data(), exponents.data(), values.size());
}

/// @brief Recovers BF16 values from their sign-mantissa and exponent bytes (`bf16_join` per
/// element). One pass, O(n), vectorised by the compiler (no aliasing between the three buffers).
/// Thread safety: disjoint output ranges may be recovered concurrently.
/// @throws wisp::logic_error if the three spans differ in length (nothing written).
inline void recover_bf16(std::span<const std::uint8_t> sm, std::span<const std::uint8_t> exponents,
                         std::span<bf16> out) {
  WISP_EXPECTS(sm.size() == out.size() && exponents.size() == out.size(),
               "recover_bf16: ", sm.size(), " SM bytes and ", exponents.size(),
               " exponent bytes for ", out.size(), " values");
  detail::recover_bf16_unchecked(sm.data(), exponents.data(), out.data(), out.size());
}

/// Count of each exponent value (0..255) in a tensor or exponent stream.
using exponent_counts = std::array<std::uint64_t, 256>;

/// @brief Histogram of the exponent field of `values`. O(n). Thread safety: pure.
[[nodiscard]] inline exponent_counts exponent_histogram(std::span<const bf16> values) {
  exponent_counts counts{};
  for (const bf16 v : values) {
    ++counts[bf16_exponent(v)];
  }
  return counts;
}

/// @brief Shannon entropy in bits per symbol of a histogram (0 for an empty one). O(256).
[[nodiscard]] inline double entropy_bits(const exponent_counts& counts) {
  double total = 0;
  for (const std::uint64_t c : counts) {
    total += static_cast<double>(c);
  }
  double h = 0;
  for (const std::uint64_t c : counts) {
    if (c != 0) {
      const double p = static_cast<double>(c) / total;
      h -= p * std::log2(p);
    }
  }
  return h;
}

/// @brief The smallest fraction of its raw size a BF16 tensor with this exponent histogram can be
/// stored in when the SM bytes stay raw and the exponents take their entropy: `(8 + H) / 16`.
[[nodiscard]] inline double entropy_bound_ratio(const exponent_counts& counts) {
  return (8.0 + entropy_bits(counts)) / 16.0;
}

}  // namespace wisp
