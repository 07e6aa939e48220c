// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `zstd_coder`: exponent streams as Zstandard frames. Part of the optional `wisp::zstd`
/// target (links the system libzstd); the core never includes it.
/// @code
/// wisp::coder_set coders = wisp::core_coders();
/// coders.add(wisp::zstd_coder{.level = 19});
/// auto z = wisp::compressed_bf16::compress(weights, wisp::zstd_coder{}, 8);
/// z.decompress(out, coders);
/// @endcode
#pragma once

#include <wisp/compress/exponent_coder.hpp>
#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>

#include <zstd.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace wisp {

/// @brief Zstandard exponent coder (one frame per E-chunk, no frame checksum: the container has
/// CRCs). Thread-safe: every thread decodes with a context of its own, made on first use.
struct zstd_coder {
  /// Compression level, 1..ZSTD_maxCLevel(). 1, not zstd's usual 3: on exponent streams level 1
  /// is smaller (its matches are rarer; Huffman-coded literals do the work) and faster; see
  /// docs/compression.md for the measured levels.
  int level = 1;

  static constexpr std::string_view name = "zstd";
  [[nodiscard]] coder_id id() const noexcept { return coder_id::zstd; }
  /// "zstd", or "zstd-<level>" for a level other than the default 1.
  [[nodiscard]] std::string label() const {
    return level == 1 ? std::string(name) : "zstd-" + std::to_string(level);
  }

  /// Appends one frame holding `symbols`. O(n).
  /// @throws wisp::logic_error on a level outside 1..ZSTD_maxCLevel(); wisp::error if zstd fails.
  void encode(std::span<const std::uint8_t> symbols, std::vector<std::uint8_t>& sink) const {
    WISP_EXPECTS(level >= 1 && level <= ZSTD_maxCLevel(), "zstd_coder: level ", level,
                 " is outside [1, ", ZSTD_maxCLevel(), "]");
    const std::size_t at = sink.size();
    sink.resize(at + ZSTD_compressBound(symbols.size()));
    const std::size_t written =
        ZSTD_compress(sink.data() + at, sink.size() - at, symbols.data(), symbols.size(), level);
    if (ZSTD_isError(written) != 0) {
      WISP_FAIL(error, "zstd_coder: ZSTD_compress failed: ", ZSTD_getErrorName(written));
    }
    sink.resize(at + written);
  }

  /// Decodes the frame(s) in `encoded` into exactly `out.size()` symbols. O(n).
  /// @throws wisp::format_error if `encoded` is not that, as zstd checks it.
  void decode(std::span<const std::uint8_t> encoded, std::span<std::uint8_t> out) const {
    thread_local const std::unique_ptr<ZSTD_DCtx, decltype(&ZSTD_freeDCtx)> context(
        ZSTD_createDCtx(), &ZSTD_freeDCtx);
    if (context == nullptr) {
      throw std::bad_alloc();
    }
    const std::size_t got =
        ZSTD_decompressDCtx(context.get(), out.data(), out.size(), encoded.data(), encoded.size());
    if (ZSTD_isError(got) != 0) {
      throw format_error(std::string("zstd E-chunk does not decode: ") + ZSTD_getErrorName(got));
    }
    if (got != out.size()) {
      throw format_error("zstd E-chunk decodes to " + std::to_string(got) + " exponents, not " +
                         std::to_string(out.size()));
    }
  }
};
static_assert(exponent_coder<zstd_coder>);

}  // namespace wisp
