// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Choosing a built-in eviction policy by name, in one place: `builtin_policy_names`,
/// `builtin_policy_name` (spelling -> canonical name) and `visit_policy(name, f)`, which calls
/// `f(std::type_identity<P>{})` with the policy type `P` so that the caller instantiates its own
/// template once per policy (the simulator, the CLI, an engine's configuration).
/// @code
/// auto result = wisp::visit_policy(options.policy, [&]<class P>(std::type_identity<P>) {
///   return run_with(wisp::per_layer_cache<P>(layout, capacity));
/// });  // "least-stale" and "least_stale" both select wisp::least_stale
/// @endcode
#pragma once

#include <wisp/cache/belady.hpp>
#include <wisp/cache/decayed_frequency.hpp>
#include <wisp/cache/eviction_policy.hpp>
#include <wisp/cache/fifo.hpp>
#include <wisp/cache/fld.hpp>
#include <wisp/cache/learned_belady.hpp>
#include <wisp/cache/least_stale.hpp>
#include <wisp/cache/lfru.hpp>
#include <wisp/cache/lfu.hpp>
#include <wisp/cache/lru.hpp>
#include <wisp/cache/predicted_next_use.hpp>
#include <wisp/cache/reuse_probability.hpp>
#include <wisp/core/error.hpp>

#include <functional>
#include <string>
#include <string_view>
#include <type_traits>

namespace wisp {

/// @brief A list of policy types, for generating code over them: `P::name` for their names,
/// `apply<T>` for `T<P...>` (a `std::variant` of pagers, say).
template <class... P>
struct policy_list {
  static constexpr std::size_t size = sizeof...(P);
  /// The names (`P::name`), in list order.
  static constexpr std::string_view names[] = {P::name...};
  template <template <class...> class T>
  using apply = T<P...>;
};

/// The built-in policies, in the order tools report them: the one list that the names,
/// `visit_policy` and the Python `Pager` are generated from.
using builtin_policy_types =
    policy_list<lru, fifo, lfu, lfu_history, lfru, fld, least_stale, decayed_frequency,
                predicted_next_use, reuse_probability, learned_belady, belady>;

/// The names of the built-in policies (each type's `P::name`), in the order tools report them.
inline constexpr const auto& builtin_policy_names = builtin_policy_types::names;

/// @brief The canonical name of the built-in policy spelt `name`, reading `-` as `_`
/// ("least-stale" -> "least_stale"), or an empty view if there is none. O(number of policies).
/// Thread-safe.
[[nodiscard]] constexpr std::string_view builtin_policy_name(std::string_view name) noexcept {
  for (const std::string_view known : builtin_policy_names) {
    bool same = known.size() == name.size();
    for (std::size_t i = 0; same && i < name.size(); ++i) {
      same = known[i] == (name[i] == '-' ? '_' : name[i]);
    }
    if (same) {
      return known;
    }
  }
  return {};
}

namespace detail {
template <class F, class P, class... Rest>
decltype(auto) visit_policy_in(std::string_view canonical, std::string_view name, F& f,
                               policy_list<P, Rest...> /*unused*/) {
  if (canonical == P::name) {
    return std::invoke(f, std::type_identity<P>{});
  }
  if constexpr (sizeof...(Rest) > 0) {
    return visit_policy_in(canonical, name, f, policy_list<Rest...>{});
  } else {
    std::string known;
    for (const std::string_view n : builtin_policy_names) {
      known += known.empty() ? "" : ", ";
      known += n;
    }
    WISP_FAIL(logic_error, "unknown policy '", name, "' (known: ", known, ")");
  }
}
}  // namespace detail

/// @brief Calls `f(std::type_identity<P>{})` for the built-in policy `P` spelt `name` (see
/// `builtin_policy_name`) and returns what it returns; every policy's call must return the same
/// type. The one name-to-type switch of the library: type erasure at the edge, the work inside
/// `f` stays fully typed.
/// @throws wisp::logic_error "unknown policy 'NAME' (known: ...)" for any other name, before
///   calling `f`; whatever `f` throws.
template <class F>
decltype(auto) visit_policy(std::string_view name, F&& f) {
  return detail::visit_policy_in(builtin_policy_name(name), name, f, builtin_policy_types{});
}

}  // namespace wisp
