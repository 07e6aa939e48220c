// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Internal: the weighted row sum at the heart of co-activation scoring,
/// `out[j] (+)= sum_r scale_r x row_r[j]`, with a 256-bit (AVX) version chosen at run time.
///
/// The default x86-64 target has 128-bit SSE2 vectors only. When the build does not already
/// target AVX, GCC and clang also compile the same loop for AVX (`target("avx")`) and
/// `add_weighted_rows` picks it once per process if the CPU and OS support it. The AVX version
/// performs the same multiplications and additions in the same order, 8 lanes at a time instead of
/// 4, and has no FMA, so both return bit-identical sums (a test checks it). Other compilers and
/// architectures, and builds that target AVX already, compile the portable loop only.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__)) && \
    !defined(__AVX__) && !defined(__CUDACC__)
#define WISP_DETAIL_AVX_DISPATCH 1
// Forces the portable loop into its AVX caller, so that it is compiled for AVX there.
#define WISP_DETAIL_INLINE_BODY [[gnu::always_inline]] inline
#else
#define WISP_DETAIL_AVX_DISPATCH 0
#define WISP_DETAIL_INLINE_BODY inline
#endif

namespace wisp::detail {

/// Up to `capacity` rows and their scales, the terms of one weighted row sum.
struct weighted_rows {
  static constexpr std::size_t capacity = 32;
  std::array<const float*, capacity> rows;
  std::array<float, capacity> scales;
  std::size_t count = 0;
};

/// out[j] (+)= sum_r t.scales[r] x t.rows[r][j], for j < n (`overwrite`: out starts at 0).
/// Sixteen outputs at a time stay in registers across all the rows: each row is loaded once and
/// `out` once per call. Two accumulators take the rows in pairs, for twice the independent
/// additions in flight.
WISP_DETAIL_INLINE_BODY void add_weighted_rows_portable(float* out, const weighted_rows& t,
                                                        std::size_t n, bool overwrite) noexcept {
  constexpr std::size_t block = 16;
  std::size_t j = 0;
  for (; j + block <= n; j += block) {
    std::array<float, block> acc{};
    std::array<float, block> odd{};
    if (!overwrite) {
      std::copy(out + j, out + j + block, acc.begin());
    }
    std::size_t r = 0;
    for (; r + 2 <= t.count; r += 2) {
      const float* a = t.rows[r] + j;
      const float* b = t.rows[r + 1] + j;
      const float sa = t.scales[r];
      const float sb = t.scales[r + 1];
      for (std::size_t x = 0; x < block; ++x) {
        acc[x] += sa * a[x];
        odd[x] += sb * b[x];
      }
    }
    if (r < t.count) {
      const float* a = t.rows[r] + j;
      for (std::size_t x = 0; x < block; ++x) {
        acc[x] += t.scales[r] * a[x];
      }
    }
    for (std::size_t x = 0; x < block; ++x) {
      out[j + x] = acc[x] + odd[x];
    }
  }
  for (; j < n; ++j) {
    float acc = overwrite ? 0.0f : out[j];
    for (std::size_t r = 0; r < t.count; ++r) {
      acc += t.scales[r] * t.rows[r][j];
    }
    out[j] = acc;
  }
}

#if WISP_DETAIL_AVX_DISPATCH
/// The same loop compiled for AVX (no FMA: the products are rounded before they are added).
[[gnu::target("avx")]] inline void add_weighted_rows_avx(float* out, const weighted_rows& t,
                                                         std::size_t n, bool overwrite) noexcept {
  add_weighted_rows_portable(out, t, n, overwrite);
}

/// Whether this CPU and its OS run AVX code (tested once).
inline bool cpu_has_avx() noexcept {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx") != 0;
  }();
  return yes;
}
#endif

/// `add_weighted_rows_portable`, run with AVX where the build allows a run-time choice and the
/// CPU has it.
inline void add_weighted_rows(float* out, const weighted_rows& t, std::size_t n,
                              bool overwrite) noexcept {
#if WISP_DETAIL_AVX_DISPATCH
  if (cpu_has_avx()) {
    add_weighted_rows_avx(out, t, n, overwrite);
    return;
  }
#endif
  add_weighted_rows_portable(out, t, n, overwrite);
}

}  // namespace wisp::detail
