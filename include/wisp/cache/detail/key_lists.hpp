// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Internal: a family of intrusive doubly-linked lists over dense keys (every key is in at
/// most one list). All operations O(1), allocation-free after `reset`.
#pragma once

#include <wisp/cache/eviction_policy.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace wisp::detail {

class key_lists {
 public:
  /// Sizes for keys in [0, key_space) and `lists` lists, all empty.
  void reset(std::int32_t key_space, std::int32_t lists) {
    prev_.assign(static_cast<std::size_t>(key_space), no_key);
    next_.assign(static_cast<std::size_t>(key_space), no_key);
    list_of_.assign(static_cast<std::size_t>(key_space), -1);
    head_.assign(static_cast<std::size_t>(lists), no_key);
    tail_.assign(static_cast<std::size_t>(lists), no_key);
  }

  /// Appends `key` (not in any list) at the back (most recent end) of `list`.
  void push_back(std::int32_t list, cache_key key) noexcept {
    const auto l = static_cast<std::size_t>(list);
    const auto k = static_cast<std::size_t>(key);
    prev_[k] = tail_[l];
    next_[k] = no_key;
    if (tail_[l] != no_key) {
      next_[static_cast<std::size_t>(tail_[l])] = key;
    } else {
      head_[l] = key;
    }
    tail_[l] = key;
    list_of_[k] = list;
  }

  /// Unlinks `key` from its list (no-op if in none).
  void remove(cache_key key) noexcept {
    const auto k = static_cast<std::size_t>(key);
    const std::int32_t list = list_of_[k];
    if (list < 0) {
      return;
    }
    const auto l = static_cast<std::size_t>(list);
    const cache_key p = prev_[k];
    const cache_key n = next_[k];
    if (p != no_key) {
      next_[static_cast<std::size_t>(p)] = n;
    } else {
      head_[l] = n;
    }
    if (n != no_key) {
      prev_[static_cast<std::size_t>(n)] = p;
    } else {
      tail_[l] = p;
    }
    prev_[k] = next_[k] = no_key;
    list_of_[k] = -1;
  }

  /// Moves `key` to the back of `list`.
  void move_to_back(std::int32_t list, cache_key key) noexcept {
    remove(key);
    push_back(list, key);
  }

  [[nodiscard]] cache_key front(std::int32_t list) const noexcept {
    return head_[static_cast<std::size_t>(list)];
  }
  [[nodiscard]] cache_key next(cache_key key) const noexcept {
    return next_[static_cast<std::size_t>(key)];
  }
  [[nodiscard]] std::int32_t list_of(cache_key key) const noexcept {
    return list_of_[static_cast<std::size_t>(key)];
  }

  /// First key of `list`, from the front, that `is_protected` rejects; `no_key` if none.
  /// O(1 + protected keys skipped).
  [[nodiscard]] cache_key first_unprotected(std::int32_t list,
                                            protected_keys is_protected) const noexcept {
    cache_key k = front(list);
    while (k != no_key && is_protected(k)) {
      k = next(k);
    }
    return k;
  }

 private:
  std::vector<cache_key> prev_;
  std::vector<cache_key> next_;
  std::vector<std::int32_t> list_of_;
  std::vector<cache_key> head_;
  std::vector<cache_key> tail_;
};

}  // namespace wisp::detail
