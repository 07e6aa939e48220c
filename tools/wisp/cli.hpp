// SPDX-License-Identifier: Apache-2.0
// What every subcommand of the `wisp` tool shares: usage errors, option validators that say the
// bound in words (CLI11's own print a double's 308 digits and let "-1" wrap to 2^64 - 1 in an
// unsigned option), and the one-line warnings and notes on stderr.
#pragma once

#include <wisp/core/error.hpp>

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <sstream>
#include <string>
#include <system_error>

namespace wisp::tool {

/// A usage error: wisp::logic_error with a plain message (no source location: the user typed it).
template <class... Parts>
[[noreturn]] void usage_error(const Parts&... parts) {
  std::ostringstream message;
  (message << ... << parts);
  throw wisp::logic_error(message.str());
}

/// The names of `names`, comma-separated ("lru, fifo, ..."): the lists the help texts show.
template <class Names>
std::string comma_list(const Names& names) {
  std::string out;
  for (const auto& name : names) {
    out += out.empty() ? "" : ", ";
    out += name;
  }
  return out;
}

/// Prints "wisp: warning: ..." on stderr (something the user should know; the command goes on).
template <class... Parts>
void warn(const Parts&... parts) {
  std::ostringstream message;
  (message << ... << parts);
  std::fprintf(stderr, "wisp: warning: %s\n", message.str().c_str());
}

/// Refuses an output file that is the input file, however spelled (it would be truncated before
/// it is read).
inline void refuse_overwriting(const std::string& input, const std::string& output) {
  std::error_code ec;
  if (std::filesystem::exists(output, ec) && std::filesystem::equivalent(input, output, ec)) {
    usage_error("-o ", output, " would overwrite its input ", input, "; write to another file");
  }
}

/// @brief Accepts a whole number in `[min, max]`, written with digits only (no sign, no
/// fraction), and says so otherwise: "must be a whole number >= 1, got '-1'".
inline CLI::Validator whole_number(std::uint64_t min,
                                   std::uint64_t max = std::numeric_limits<std::uint64_t>::max()) {
  std::string bound = max == std::numeric_limits<std::uint64_t>::max()
                          ? ">= " + std::to_string(min)
                          : "in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  return CLI::Validator(
      [min, max, bound](std::string& text) -> std::string {
        const bool digits = !text.empty() && text.find_first_not_of("0123456789") == text.npos;
        errno = 0;
        const unsigned long long value = digits ? std::strtoull(text.c_str(), nullptr, 10) : 0;
        if (!digits || errno == ERANGE || value < min || value > max) {
          return "must be a whole number " + bound + ", got '" + text + "'";
        }
        return {};
      },
      "INTEGER " + bound, "whole_number");
}

/// @brief Accepts a finite number `>= min` (or `> min` when `strict`): "must be a number > 0,
/// got 'nan'".
inline CLI::Validator number_above(double min, bool strict) {
  std::ostringstream shown;
  shown << (strict ? "> " : ">= ") << min;
  const std::string bound = shown.str();
  return CLI::Validator(
      [min, strict, bound](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = text.empty() ? NAN : std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(value) ||
            (strict ? value <= min : value < min)) {
          return "must be a number " + bound + ", got '" + text + "'";
        }
        return {};
      },
      "NUMBER " + bound, "number_above");
}

}  // namespace wisp::tool
