// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief wisp's exception hierarchy and the `WISP_EXPECTS` / `WISP_FAIL` macros.
///
/// Every exception wisp throws derives from `wisp::error` (itself a `std::runtime_error`), so an
/// engine can catch all of them in one place. Messages name the offending values:
/// @code
/// WISP_EXPECTS(capacity >= k, "capacity ", capacity, " is below top-k ", k);
/// // throws wisp::logic_error:
/// //   "capacity 3 is below top-k 6 [expects capacity >= k at pager.hpp:42]"
/// @endcode
#pragma once

#include <wisp/core/config.hpp>

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace wisp {

/// @brief Base of every exception wisp throws.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// @brief A precondition was violated: bad argument, id out of range, impossible configuration.
/// The object the call was made on is unchanged.
class logic_error : public error {
 public:
  using error::error;
};

/// @brief A memory pool, slot range or address range is exhausted. The object the call was made on
/// is unchanged and nothing was leaked.
class out_of_memory : public error {
 public:
  using error::error;
};

/// @brief A file or record is malformed (truncated, corrupted, inconsistent with its header).
class format_error : public error {
 public:
  /// Offset value meaning "the position is not known or not meaningful" (e.g. a text line).
  static constexpr std::uint64_t no_offset = ~std::uint64_t{0};

  /// @param offset byte offset in the input where the problem was detected, or `no_offset`.
  /// @param what   description of the problem; the offset is prepended when known.
  format_error(std::uint64_t offset, const std::string& what)
      : error(located(offset, what)), offset_(offset), problem_(what) {}

  explicit format_error(const std::string& what) : format_error(no_offset, what) {}

  /// Byte offset of the problem, or `no_offset`.
  [[nodiscard]] std::uint64_t offset() const noexcept { return offset_; }

  /// The problem without the "at byte N: " prefix.
  [[nodiscard]] const std::string& problem() const noexcept { return problem_; }

  /// The same error located in `file`: "FILE: at byte N: problem". For readers that take a path
  /// and parse a stream.
  [[nodiscard]] format_error in_file(const std::string& file) const {
    return format_error(offset_, file, problem_);
  }

 private:
  format_error(std::uint64_t offset, const std::string& file, const std::string& problem)
      : error(file + ": " + located(offset, problem)),
        offset_(offset),
        problem_(file + ": " + problem) {}
  // `what` behind "at byte N: " when the offset is known.
  static std::string located(std::uint64_t offset, const std::string& what) {
    return offset == no_offset ? what : "at byte " + std::to_string(offset) + ": " + what;
  }

  std::uint64_t offset_;
  std::string problem_;  // the description without the offset
};

/// @brief No configuration satisfies the constraints (e.g. no memory split meets the KV admission
/// floor). The message states the constraint and what would make it feasible.
class infeasible_error : public error {
 public:
  using error::error;
};

namespace detail {

/// Concatenates the streamed representation of every argument. Cold path only.
template <class... Parts>
[[nodiscard]] std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return std::move(out).str();
}

/// Builds the message and throws `Error`. Kept out of line of the caller's hot path.
template <class Error, class... Parts>
[[noreturn]] void throw_with_location(const char* file, int line, const char* condition,
                                      const Parts&... parts) {
  std::string message = concat(parts...);
  message += " [";
  if (condition != nullptr) {
    message += "expects ";
    message += condition;
    message += " at ";
  }
  message += file;
  message += ':';
  message += std::to_string(line);
  message += ']';
  throw Error(message);
}

}  // namespace detail
}  // namespace wisp

/// @brief Throws `wisp::logic_error` unless `cond` holds. The remaining arguments are streamed
/// into the message (put the offending values there); the condition and file:line are appended.
#define WISP_EXPECTS(cond, ...)                                                           \
  do {                                                                                    \
    if (!(cond)) [[unlikely]] {                                                           \
      ::wisp::detail::throw_with_location<::wisp::logic_error>(__FILE__, __LINE__, #cond, \
                                                               __VA_ARGS__);              \
    }                                                                                     \
  } while (false)

/// @brief Throws `error_type` (a `wisp::error` taking a string) with the streamed arguments and
/// file:line as its message.
#define WISP_FAIL(error_type, ...) \
  ::wisp::detail::throw_with_location<error_type>(__FILE__, __LINE__, nullptr, __VA_ARGS__)
