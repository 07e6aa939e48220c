// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Internal: one LRU list per layer, the structure behind `least_stale` and `fld`.
#pragma once

#include <wisp/cache/detail/key_lists.hpp>
#include <wisp/cache/eviction_policy.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace wisp {
namespace detail {

/// LRU lists of resident keys by layer, visited from the largest layer distance down: one list
/// per layer in global scope, a single list in per-layer scope (where the distance is constant).
class layer_lists {
 public:
  void reset(const key_layout& layout) {
    layout_ = layout;
    count_ = layout.scope == cache_scope::global ? layout.layers : 1;
    lists_.reset(layout.size(), count_);
  }
  void insert(cache_key key) noexcept { lists_.push_back(list_of(key), key); }
  void touch(cache_key key) noexcept { lists_.move_to_back(list_of(key), key); }
  void remove(cache_key key) noexcept { lists_.remove(key); }

  /// Calls `visit(k)` with the least recently used unprotected key of each non-empty list, from
  /// the largest layer distance from `layer` to the smallest, until `visit` returns true.
  template <class Visit>
  void farthest_first(std::int32_t layer, protected_keys is_protected, Visit&& visit) const {
    for (std::int32_t d = count_; d >= 1; --d) {  // list (layer + d) mod count has distance d
      const cache_key k = lists_.first_unprotected((layer + d) % count_, is_protected);
      if (k != no_key && visit(k)) {
        return;
      }
    }
  }

 private:
  [[nodiscard]] std::int32_t list_of(cache_key key) const noexcept {
    return count_ == 1 ? 0 : layout_.layer_of(key, 0);
  }

  key_layout layout_;
  std::int32_t count_ = 1;
  key_lists lists_;  // front = least recently used
};

}  // namespace detail

}  // namespace wisp
