// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief A small versioned text format for reuse histograms, so that histograms measured by
/// separate workers can be stored, shipped and merged.
///
/// Format (one item per line, `\n` line ends, every number a decimal without sign):
///
///     wisp-reuse-histogram v1
///     scope global            (stream | global | layer)
///     partitions 1            (layers for scope layer; 1 otherwise)
///     keys 1664               (keys per partition; 0 = unknown / unbounded)
///     cold 1664               (cold accesses)
///     warm 1280968            (accesses with a finite distance = sum of the counts below)
///     distances 3             (number of distance lines that follow)
///     1 200                   (distance count), distances strictly increasing, counts > 0
///     5 17
///     700 3
///     end
///
/// The reader rejects anything else with `wisp::format_error` naming the byte offset.
/// @code
/// std::string text = wisp::to_text(histogram);
/// wisp::reuse_histogram back = wisp::parse_histogram(text);   // == histogram
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/reuse/histogram.hpp>

#include <charconv>
#include <cstdint>
#include <istream>
#include <iterator>
#include <limits>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>

namespace wisp {

/// Format identifier written on the first line.
inline constexpr std::string_view histogram_magic = "wisp-reuse-histogram";
/// Current format version.
inline constexpr std::uint32_t histogram_format_version = 1;

/// @brief Writes `histogram` in the text format above. O(max distance).
inline void write_histogram(std::ostream& out, const reuse_histogram& histogram) {
  std::uint64_t lines = 0;
  for (std::uint32_t d = 1; d <= histogram.max_distance(); ++d) {
    lines += histogram.count(d) != 0 ? 1 : 0;
  }
  const auto& shape = histogram.shape();
  out << histogram_magic << " v" << histogram_format_version << '\n'
      << "scope " << to_string(shape.scope) << '\n'
      << "partitions " << shape.partitions << '\n'
      << "keys " << shape.keys_per_partition << '\n'
      << "cold " << histogram.cold() << '\n'
      << "warm " << histogram.warm() << '\n'
      << "distances " << lines << '\n';
  for (std::uint32_t d = 1; d <= histogram.max_distance(); ++d) {
    if (const auto n = histogram.count(d); n != 0) {
      out << d << ' ' << n << '\n';
    }
  }
  out << "end\n";
}

/// @brief `histogram` in the text format, as a string.
[[nodiscard]] inline std::string to_text(const reuse_histogram& histogram) {
  std::ostringstream out;
  write_histogram(out, histogram);
  return std::move(out).str();
}

namespace detail {

/// Line-and-token reader that knows the byte offset of everything it hands out.
class histogram_text_reader {
 public:
  explicit histogram_text_reader(std::string_view text) : text_(text) {}

  /// Next line without its '\n'; throws at end of input.
  std::string_view line(std::string_view what) {
    if (pos_ >= text_.size()) {
      fail(pos_, "unexpected end of input, expected ", what);
    }
    line_start_ = pos_;
    const auto end = text_.find('\n', pos_);
    if (end == std::string_view::npos) {
      fail(text_.size(), "line ", what, " is not terminated by a newline");
    }
    pos_ = end + 1;
    return text_.substr(line_start_, end - line_start_);
  }

  /// Parses "<name> <number>" from the next line.
  std::uint64_t field(std::string_view name, std::uint64_t max) {
    const std::string_view l = line(name);
    if (l.size() <= name.size() || l.substr(0, name.size()) != name || l[name.size()] != ' ') {
      fail(line_start_, "expected '", name, " <number>', found '", l, "'");
    }
    return number(l.substr(name.size() + 1), line_start_ + name.size() + 1, name, max);
  }

  /// Parses a whole token as an unsigned decimal <= max.
  std::uint64_t number(std::string_view token, std::uint64_t offset, std::string_view what,
                       std::uint64_t max) const {
    std::uint64_t value = 0;
    const auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), value);
    if (token.empty() || ec == std::errc::invalid_argument || end != token.data() + token.size()) {
      fail(offset, what, ": '", token, "' is not an unsigned decimal number");
    }
    if (ec == std::errc::result_out_of_range || value > max) {
      fail(offset, what, ": ", token, " is out of range (at most ", max, ")");
    }
    return value;
  }

  [[nodiscard]] std::uint64_t line_start() const noexcept { return line_start_; }
  [[nodiscard]] std::uint64_t position() const noexcept { return pos_; }
  [[nodiscard]] bool at_end() const noexcept { return pos_ == text_.size(); }

  template <class... Parts>
  [[noreturn]] static void fail(std::uint64_t offset, const Parts&... parts) {
    throw format_error(offset, ::wisp::detail::concat("reuse histogram: ", parts...));
  }

 private:
  std::string_view text_;
  std::size_t pos_ = 0;
  std::size_t line_start_ = 0;
};

}  // namespace detail

/// @brief Parses a histogram written by `write_histogram`. O(input size).
/// @throws wisp::format_error (with the byte offset) on a wrong magic or version, an unknown
/// scope, a missing or malformed field, non-increasing or out-of-range distances, zero counts,
/// counts that do not add up to `warm`, a missing `end` line or trailing data.
[[nodiscard]] inline reuse_histogram parse_histogram(std::string_view text) {
  detail::histogram_text_reader in{text};
  constexpr auto u32_max = std::numeric_limits<std::uint32_t>::max();
  constexpr auto u64_max = std::numeric_limits<std::uint64_t>::max();

  const std::string_view magic = in.line("the format header");
  if (magic.substr(0, histogram_magic.size()) != histogram_magic ||
      magic.size() < histogram_magic.size() + 2 || magic[histogram_magic.size()] != ' ' ||
      magic[histogram_magic.size() + 1] != 'v') {
    in.fail(0, "not a wisp reuse histogram (expected '", histogram_magic, " v",
            histogram_format_version, "')");
  }
  const std::uint64_t version = in.number(magic.substr(histogram_magic.size() + 2),
                                          histogram_magic.size() + 2, "version", u32_max);
  if (version != histogram_format_version) {
    in.fail(histogram_magic.size() + 2, "unsupported format version ", version, " (this reader ",
            "understands version ", histogram_format_version, ")");
  }

  const std::string_view scope_line = in.line("scope");
  constexpr std::string_view scope_key = "scope ";
  const auto scope = scope_line.substr(0, scope_key.size()) == scope_key
                         ? from_string<cache_scope>(scope_line.substr(scope_key.size()))
                         : std::nullopt;
  if (!scope) {
    in.fail(in.line_start(), "expected 'scope stream|global|layer', found '", scope_line, "'");
  }
  const std::uint64_t partitions_at = in.position();
  const auto partitions = static_cast<std::uint32_t>(in.field("partitions", u32_max));
  if (partitions == 0 || (*scope != cache_scope::per_layer && partitions != 1)) {
    in.fail(partitions_at, "partitions ", partitions, " is invalid for scope ", *scope);
  }
  const auto keys = static_cast<std::uint32_t>(in.field("keys", u32_max - 1));
  const std::uint64_t cold = in.field("cold", u64_max);
  const std::uint64_t warm_at = in.position();
  const std::uint64_t warm = in.field("warm", u64_max);
  const std::uint64_t lines = in.field("distances", keys == 0 ? u32_max : keys);

  reuse_histogram histogram{{*scope, partitions, keys}};
  histogram.add(reuse_distance_counter::cold, cold);
  std::uint64_t previous = 0;
  std::uint64_t sum = 0;
  for (std::uint64_t i = 0; i < lines; ++i) {
    const std::string_view l = in.line("a distance line");
    const auto space = l.find(' ');
    if (space == std::string_view::npos) {
      in.fail(in.line_start(), "expected '<distance> <count>', found '", l, "'");
    }
    const std::uint64_t at = in.line_start();
    const std::uint64_t d =
        in.number(l.substr(0, space), at, "distance", keys == 0 ? u32_max - 1 : keys);
    if (d <= previous) {
      in.fail(at, "distance ", d, " does not follow ", previous, " in increasing order",
              d == 0 ? " (distances start at 1)" : "");
    }
    const std::uint64_t n = in.number(l.substr(space + 1), at + space + 1, "count", u64_max);
    if (n == 0) {
      in.fail(at + space + 1, "count of distance ", d, " is 0 (zero counts are not written)");
    }
    if (sum > u64_max - n) {
      in.fail(at + space + 1, "counts overflow 64 bits");
    }
    sum += n;
    histogram.add(static_cast<std::uint32_t>(d), n);
    previous = d;
  }
  if (sum != warm) {
    in.fail(warm_at, "warm is ", warm, " but the distance counts add up to ", sum);
  }
  if (in.line("'end'") != "end") {
    in.fail(in.line_start(), "expected 'end' after ", lines, " distance lines");
  }
  if (!in.at_end()) {
    in.fail(in.position(), "trailing data after 'end'");
  }
  return histogram;
}

/// @brief Reads a whole stream and parses it with `parse_histogram`.
/// @throws wisp::format_error as `parse_histogram`.
[[nodiscard]] inline reuse_histogram read_histogram(std::istream& in) {
  const std::string text{std::istreambuf_iterator<char>{in}, std::istreambuf_iterator<char>{}};
  return parse_histogram(text);
}

}  // namespace wisp
