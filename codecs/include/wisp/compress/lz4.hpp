// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `lz4_coder`: exponent streams as LZ4 blocks, written by LZ4 (fast) or LZ4HC (slower,
/// smaller); one decoder reads both. Part of the optional `wisp::lz4` target (links the system
/// liblz4); the core never includes it.
/// @code
/// wisp::coder_set coders = wisp::core_coders();
/// coders.add(wisp::lz4_coder{}).add(wisp::lz4_coder{.hc_level = 9});   // "lz4", "lz4hc"
/// @endcode
#pragma once

#include <wisp/compress/exponent_coder.hpp>
#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>

#include <lz4.h>
#include <lz4hc.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace wisp {

/// @brief LZ4 exponent coder: one raw LZ4 block per E-chunk (the container knows the size).
/// Stateless and thread-safe.
struct lz4_coder {
  /// 0: LZ4's fast compressor ("lz4"); 1..LZ4HC_CLEVEL_MAX: LZ4HC at that level ("lz4hc").
  int hc_level = 0;

  static constexpr std::string_view name = "lz4";
  [[nodiscard]] coder_id id() const noexcept { return coder_id::lz4; }
  /// "lz4", or "lz4hc" for LZ4HC (at any level).
  [[nodiscard]] std::string label() const { return hc_level == 0 ? "lz4" : "lz4hc"; }

  /// Appends one block holding `symbols`. O(n).
  /// @throws wisp::logic_error on a level outside 0..LZ4HC_CLEVEL_MAX or an E-chunk over
  /// LZ4_MAX_INPUT_SIZE bytes (use more E-chunks); wisp::error if LZ4 fails.
  void encode(std::span<const std::uint8_t> symbols, std::vector<std::uint8_t>& sink) const {
    WISP_EXPECTS(hc_level >= 0 && hc_level <= LZ4HC_CLEVEL_MAX, "lz4_coder: HC level ", hc_level,
                 " is outside [0, ", LZ4HC_CLEVEL_MAX, "]");
    WISP_EXPECTS(symbols.size() <= LZ4_MAX_INPUT_SIZE, "lz4_coder: an E-chunk of ", symbols.size(),
                 " exponents exceeds LZ4's ", LZ4_MAX_INPUT_SIZE, "; use more E-chunks");
    const int n = static_cast<int>(symbols.size());
    const std::size_t at = sink.size();
    sink.resize(at + static_cast<std::size_t>(LZ4_compressBound(n)));
    const auto* src = reinterpret_cast<const char*>(symbols.data());
    auto* dst = reinterpret_cast<char*>(sink.data() + at);
    const int capacity = static_cast<int>(sink.size() - at);
    const int written = hc_level == 0 ? LZ4_compress_default(src, dst, n, capacity)
                                      : LZ4_compress_HC(src, dst, n, capacity, hc_level);
    if (written <= 0) {
      WISP_FAIL(error, "lz4_coder: compressing ", n, " exponents failed (", written, ")");
    }
    sink.resize(at + static_cast<std::size_t>(written));
  }

  /// Decodes the block `encoded` into exactly `out.size()` symbols. O(n).
  /// @throws wisp::format_error if `encoded` is not that, as LZ4's safe decoder checks it.
  void decode(std::span<const std::uint8_t> encoded, std::span<std::uint8_t> out) const {
    if (encoded.size() > LZ4_MAX_INPUT_SIZE || out.size() > LZ4_MAX_INPUT_SIZE) {
      throw format_error("lz4 E-chunk of " + std::to_string(encoded.size()) + " bytes for " +
                         std::to_string(out.size()) + " exponents exceeds LZ4's limits");
    }
    const int got = LZ4_decompress_safe(
        reinterpret_cast<const char*>(encoded.data()), reinterpret_cast<char*>(out.data()),
        static_cast<int>(encoded.size()), static_cast<int>(out.size()));
    if (got < 0 || static_cast<std::size_t>(got) != out.size()) {
      throw format_error("lz4 E-chunk does not decode to exactly " + std::to_string(out.size()) +
                         " exponents (LZ4 returned " + std::to_string(got) + ")");
    }
  }
};
static_assert(exponent_coder<lz4_coder>);

}  // namespace wisp
