// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `wisp::cache_scope`: which keys one cache holds, the one scope vocabulary of caches,
/// pagers, reuse histograms, the simulator, the CLI and Python.
/// @code
/// static_assert(wisp::to_string(wisp::cache_scope::per_layer) == "layer");
/// static_assert(wisp::from_string<wisp::cache_scope>("global") == wisp::cache_scope::global);
/// @endcode
#pragma once

#include <wisp/core/enum_names.hpp>
#include <wisp/core/error.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string_view>

namespace wisp {

/// @brief Which keys one cache holds. Its names (files, the command line, Python) are "layer",
/// "global" and "stream".
enum class cache_scope : std::uint8_t {
  per_layer,  ///< one cache per layer, key = expert id (WiSP)
  global,     ///< one cache over every layer, key = layer * experts + expert (SpecMD)
  stream,     ///< one cache over a plain stream of keys (reuse histograms of non-MoE streams)
};

template <>
struct enum_names<cache_scope> {
  static constexpr std::array<enum_name<cache_scope>, 3> values{{
      {cache_scope::per_layer, "layer"},
      {cache_scope::global, "global"},
      {cache_scope::stream, "stream"},
  }};
};

inline std::ostream& operator<<(std::ostream& out, cache_scope scope) {
  return out << to_string(scope);
}

/// The scope of a cache or pager from its name: "layer" or "global" ("stream" describes only
/// histograms). O(1).
/// @throws wisp::logic_error naming `name` when it is neither.
[[nodiscard]] inline cache_scope cache_scope_from_string(std::string_view name) {
  const std::optional<cache_scope> scope = from_string<cache_scope>(name);
  WISP_EXPECTS(scope && *scope != cache_scope::stream, "scope must be 'layer' or 'global', got '",
               name, "'");
  return *scope;
}

}  // namespace wisp
