// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `fld`: farthest layer distance, the order of `least_stale` without its stale/current
/// split (the layer distance `d` is defined in least_stale.hpp's description).
#pragma once

#include <wisp/cache/detail/layer_lists.hpp>
#include <wisp/cache/eviction_policy.hpp>

#include <string_view>

namespace wisp {

/// @brief Farthest layer distance: evicts the unprotected resident key with the largest layer
/// distance `d` (defined in least_stale.hpp's description); ties go to the least recently used.
///
/// One intrusive LRU list per layer (one in per-layer scope). `on_insert`, `on_hit`, `on_erase`:
/// O(1). `victim`: O(L + p) in global scope, O(1 + p) per layer, p = protected keys skipped.
/// Allocation-free after `reset`. Not thread-safe.
class fld {
 public:
  static constexpr std::string_view name = "fld";

  /// Forgets every key; sizes for `layout.size()` keys and `layout.layers` layers.
  /// @throws std::bad_alloc
  void reset(const key_layout& layout) { lists_.reset(layout); }
  void on_insert(cache_key key, const access_context& /*ctx*/) noexcept { lists_.insert(key); }
  void on_hit(cache_key key, const access_context& /*ctx*/) noexcept { lists_.touch(key); }
  void on_erase(cache_key key) noexcept { lists_.remove(key); }
  /// See the class description; `no_key` if every resident key is protected.
  [[nodiscard]] cache_key victim(const access_context& ctx,
                                 protected_keys is_protected) const noexcept {
    cache_key found = no_key;
    lists_.farthest_first(ctx.layer, is_protected, [&](cache_key k) {
      found = k;
      return true;
    });
    return found;
  }

 private:
  detail::layer_lists lists_;
};
static_assert(eviction_policy<fld>);

}  // namespace wisp
