// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief One spelling for turning a public enum into text and back: each such enum specialises
/// `enum_names` beside its definition with the name of every value, and `wisp::to_string(value)`
/// / `wisp::from_string<E>(text)` read that one table, so the two directions cannot disagree.
/// @code
/// enum class color : std::uint8_t { red, green };
/// template <>
/// struct wisp::enum_names<color> {
///   static constexpr std::array<wisp::enum_name<color>, 2> values{{{color::red, "red"},
///                                                                  {color::green, "green"}}};
/// };
/// static_assert(wisp::to_string(color::green) == "green");
/// static_assert(wisp::from_string<color>("red") == color::red);
/// @endcode
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

namespace wisp {

/// @brief One value of an enum and its name.
template <class E>
struct enum_name {
  E value;
  std::string_view name;
};

/// @brief The names of the values of enum `E`: specialised for each public enum with a
/// `static constexpr` array `values` of `enum_name<E>` (one entry per value, distinct names).
template <class E>
struct enum_names;

/// @brief An enum that has an `enum_names` table.
template <class E>
concept named_enum = std::is_enum_v<E> && requires {
  enum_names<E>::values;
};

/// The name of `value`, or "unknown" for a value the table does not list (a byte read from a
/// file, say). O(values of E).
template <named_enum E>
[[nodiscard]] constexpr std::string_view to_string(E value) noexcept {
  for (const enum_name<E>& n : enum_names<E>::values) {
    if (n.value == value) {
      return n.name;
    }
  }
  return "unknown";
}

/// The value of `E` called `name` (exact, case-sensitive), or `std::nullopt`. O(values of E).
template <named_enum E>
[[nodiscard]] constexpr std::optional<E> from_string(std::string_view name) noexcept {
  for (const enum_name<E>& n : enum_names<E>::values) {
    if (n.name == name) {
      return n.value;
    }
  }
  return std::nullopt;
}

/// The names of `E`'s values, comma-separated, for error messages ("none, top-k, percentile").
/// @throws std::bad_alloc.
template <named_enum E>
[[nodiscard]] std::string enum_name_list() {
  std::string out;
  for (const enum_name<E>& n : enum_names<E>::values) {
    out += out.empty() ? "" : ", ";
    out += n.name;
  }
  return out;
}

}  // namespace wisp
