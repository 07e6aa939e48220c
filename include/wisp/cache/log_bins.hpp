// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `half_octave_bin`: the log-spaced bins of counts and distances that `learned_belady`
/// (reuse distances) and `hindsight_reuse` (popularity) group by.
/// @code
/// static_assert(wisp::half_octave_bin(4) == 4 && wisp::half_octave_bin(6) == 5);
/// @endcode
#pragma once

#include <bit>
#include <cstdint>

namespace wisp {

/// The bin of `n`: `n` itself up to 4, then two bins per power of two (`n - 1` in
/// `[2^e, 1.5 x 2^e)` is bin `2e + 1`, in `[1.5 x 2^e, 2^(e+1))` bin `2e + 2`). O(1);
/// thread-safe.
[[nodiscard]] constexpr std::int32_t half_octave_bin(std::uint64_t n) noexcept {
  if (n <= 4) {
    return static_cast<std::int32_t>(n);
  }
  const std::uint64_t x = n - 1;
  const int e = static_cast<int>(std::bit_width(x)) - 1;  // >= 2
  return 2 * e + static_cast<std::int32_t>((x >> (e - 1)) & 1u) + 1;
}

}  // namespace wisp
