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

/// The names of the built-in policies (each type's `P::name`), in the order tools report them.
inline constexpr std::string_view builtin_policy_names[] = {lru::name,
                                                            fifo::name,
                                                            lfu::name,
                                                            lfu_history::name,
                                                            lfru::name,
                                                            fld::name,
                                                            least_stale::name,
                                                            decayed_frequency::name,
                                                            predicted_next_use::name,
                                                            reuse_probability::name,
                                                            learned_belady::name,
                                                            belady::name};

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

/// @brief Calls `f(std::type_identity<P>{})` for the built-in policy `P` spelt `name` (see
/// `builtin_policy_name`) and returns what it returns; every policy's call must return the same
/// type. The one name-to-type switch of the library: type erasure at the edge, the work inside
/// `f` stays fully typed.
/// @throws wisp::logic_error "unknown policy 'NAME' (known: ...)" for any other name, before
///   calling `f`; whatever `f` throws.
template <class F>
decltype(auto) visit_policy(std::string_view name, F&& f) {
  const std::string_view canonical = builtin_policy_name(name);
  if (canonical == lru::name) {
    return std::invoke(f, std::type_identity<lru>{});
  }
  if (canonical == fifo::name) {
    return std::invoke(f, std::type_identity<fifo>{});
  }
  if (canonical == lfu::name) {
    return std::invoke(f, std::type_identity<lfu>{});
  }
  if (canonical == lfu_history::name) {
    return std::invoke(f, std::type_identity<lfu_history>{});
  }
  if (canonical == lfru::name) {
    return std::invoke(f, std::type_identity<lfru>{});
  }
  if (canonical == fld::name) {
    return std::invoke(f, std::type_identity<fld>{});
  }
  if (canonical == least_stale::name) {
    return std::invoke(f, std::type_identity<least_stale>{});
  }
  if (canonical == decayed_frequency::name) {
    return std::invoke(f, std::type_identity<decayed_frequency>{});
  }
  if (canonical == predicted_next_use::name) {
    return std::invoke(f, std::type_identity<predicted_next_use>{});
  }
  if (canonical == reuse_probability::name) {
    return std::invoke(f, std::type_identity<reuse_probability>{});
  }
  if (canonical == learned_belady::name) {
    return std::invoke(f, std::type_identity<learned_belady>{});
  }
  if (canonical == belady::name) {
    return std::invoke(f, std::type_identity<belady>{});
  }
  std::string known;
  for (const std::string_view n : builtin_policy_names) {
    known += known.empty() ? "" : ", ";
    known += n;
  }
  WISP_FAIL(logic_error, "unknown policy '", name, "' (known: ", known, ")");
}

}  // namespace wisp
