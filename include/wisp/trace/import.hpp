// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief What the importers (`import_jsonl`, `import_esft`) return, and what they do with a
/// token that lacks some of its layers.
///
/// Real routing logs are not always complete: a recorder may drop records, so that a few tokens
/// lack some layers. By default (`incomplete_tokens::error`) an importer refuses such a log at the
/// first gap; `skip` leaves those tokens out, `keep` keeps them with the layers that were recorded
/// (`routing_trace::append_partial_step`). Either way the `import_report` says how many tokens
/// and records were dropped or kept partial, so nothing is lost silently.
/// @code
/// wisp::jsonl_config opt;
/// opt.on_incomplete = wisp::incomplete_tokens::skip;
/// auto [trace, report] = wisp::import_jsonl("routing.jsonl", opt);
/// if (report.dropped_tokens > 0) { /* tell the user */ }
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/enum_names.hpp>
#include <wisp/trace/routing_trace.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace wisp {

/// @brief What an importer does with a token that lacks some of its layers.
enum class incomplete_tokens : std::uint8_t {
  error,  ///< refuse the input (`wisp::format_error` naming the first gap)
  skip,   ///< leave the token out
  keep,   ///< keep the token with the layers present (a partial step)
};

/// Names as used on the command line: "error", "skip", "keep" (`to_string`, `from_string`).
template <>
struct enum_names<incomplete_tokens> {
  static constexpr std::array<enum_name<incomplete_tokens>, 3> values{
      {{incomplete_tokens::error, "error"},
       {incomplete_tokens::skip, "skip"},
       {incomplete_tokens::keep, "keep"}}};
};

/// @deprecated From its name: `from_string<incomplete_tokens>(name)`.
[[deprecated("use wisp::from_string<wisp::incomplete_tokens>")]] [[nodiscard]] constexpr std::
    optional<incomplete_tokens>
    parse_incomplete_tokens(std::string_view name) noexcept {
  return from_string<incomplete_tokens>(name);
}

/// @brief What an import found missing and what it did about it. A *record* is one (token,
/// layer) entry of the input: a JSONL line, or one token's `top_k` ids in an ESFT layer file.
/// All zero when the input was complete.
struct import_report {
  std::size_t incomplete_tokens = 0;  ///< tokens lacking at least one layer
  std::size_t missing_records = 0;    ///< (token, layer) records those tokens lack
  std::size_t dropped_tokens = 0;     ///< `skip`: incomplete tokens left out
  std::size_t dropped_records = 0;    ///< `skip`: the records of those tokens, left out
  std::size_t partial_tokens = 0;     ///< `keep`: incomplete tokens kept with their layers present
  std::size_t incomplete_sequences = 0;  ///< sequences (ESFT lines, JSONL groups) with such tokens

  friend constexpr bool operator==(const import_report&, const import_report&) = default;
};

/// @brief An imported trace and its report.
struct imported_trace {
  routing_trace trace;
  import_report report;
};

}  // namespace wisp
