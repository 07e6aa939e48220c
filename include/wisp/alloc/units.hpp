// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Parsing byte sizes as people write them ("24GiB", "1.5 GiB", "8000000000", "80GB"),
/// exactly: the result is an integer number of bytes or an error, never a rounded double.
/// @code
/// wisp::byte_size b = wisp::parse_byte_size("24GiB");   // 25769803776 B
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/core/ids.hpp>

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <limits>
#include <string>
#include <string_view>

namespace wisp {

/// @brief Parses `<digits>[.<digits>][ ]<unit>` where the unit is one of B, KiB, MiB, GiB, TiB
/// (powers of 1024), kB/KB, MB, GB, TB (powers of 1000), or nothing (bytes). The value must be a
/// whole number of bytes.
/// @throws wisp::logic_error naming the text on a malformed number, an unknown unit, a fraction
/// of a byte, or a value above 2^64 - 1.
[[nodiscard]] inline byte_size parse_byte_size(std::string_view text) {
  const std::string shown(text);
  std::size_t i = 0;
  std::uint64_t whole = 0;
  std::uint64_t frac = 0;
  std::uint64_t frac_scale = 1;
  bool digits = false;
  constexpr std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
    const auto d = static_cast<std::uint64_t>(text[i] - '0');
    WISP_EXPECTS(whole <= (max - d) / 10, "byte size '", shown, "' is too large");
    whole = whole * 10 + d;
    digits = true;
  }
  if (i < text.size() && text[i] == '.') {
    ++i;
    for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
      WISP_EXPECTS(frac_scale < 1000000, "byte size '", shown, "' has more than 6 decimals");
      frac = frac * 10 + static_cast<std::uint64_t>(text[i] - '0');
      frac_scale *= 10;
      digits = true;
    }
  }
  WISP_EXPECTS(digits, "byte size '", shown, "' must start with a number (e.g. 24GiB)");
  while (i < text.size() && text[i] == ' ') {
    ++i;
  }
  const std::string_view unit = text.substr(i);
  std::uint64_t scale = 0;
  struct named {
    std::string_view name;
    std::uint64_t scale;
  };
  constexpr named units[] = {
      {"", 1},
      {"B", 1},
      {"KiB", 1ull << 10},
      {"MiB", 1ull << 20},
      {"GiB", 1ull << 30},
      {"TiB", 1ull << 40},
      {"kB", 1000ull},
      {"KB", 1000ull},
      {"MB", 1000000ull},
      {"GB", 1000000000ull},
      {"TB", 1000000000000ull},
  };
  for (const auto& u : units) {
    if (u.name == unit) {
      scale = u.scale;
    }
  }
  WISP_EXPECTS(scale != 0, "byte size '", shown, "' has an unknown unit '", unit,
               "' (use B, KiB, MiB, GiB, TiB, kB, MB, GB or TB)");
  WISP_EXPECTS(whole <= max / scale, "byte size '", shown, "' is too large");
  // frac / frac_scale * scale must be a whole number of bytes. frac < 10^6 and scale <= 2^40,
  // so the product fits 64 bits exactly.
  const std::uint64_t part = frac * scale;
  WISP_EXPECTS(part % frac_scale == 0, "byte size '", shown, "' is not a whole number of bytes");
  const auto extra = static_cast<std::uint64_t>(part / frac_scale);
  WISP_EXPECTS(whole * scale <= max - extra, "byte size '", shown, "' is too large");
  return byte_size{whole * scale + extra};
}

/// @brief `bytes` in the largest binary unit that keeps it >= 1, two decimals ("24.00 GiB").
[[nodiscard]] inline std::string format_bytes(std::uint64_t bytes) {
  constexpr const char* names[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  std::size_t u = 0;
  while (v >= 1024.0 && u + 1 < std::size(names)) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0) {
    return std::to_string(bytes) + " B";
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f %s", v, names[u]);
  return buf;
}

/// @brief `bytes` exactly, with its size in GiB beside it: "25769803776 B (24.00 GiB)". For
/// budgets and pool sizes, which people read in GiB and engines take in bytes.
[[nodiscard]] inline std::string format_bytes_and_gib(std::uint64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%llu B (%.2f GiB)", static_cast<unsigned long long>(bytes),
                static_cast<double>(bytes) / static_cast<double>(1ull << 30));
  return buf;
}

}  // namespace wisp
