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

/// Each list is circular through a sentinel node (index `key_space + list`), so linking and
/// unlinking never branch on "first" or "last"; `prev`/`next` of a node sit side by side.
class key_lists {
 public:
  /// Sizes for keys in [0, key_space) and `lists` lists, all empty.
  void reset(std::int32_t key_space, std::int32_t lists) {
    key_space_ = static_cast<std::size_t>(key_space);
    nodes_.assign(static_cast<std::size_t>(key_space) + static_cast<std::size_t>(lists), node{});
    for (std::int32_t l = 0; l < lists; ++l) {
      const cache_key s = sentinel(l);
      nodes_[static_cast<std::size_t>(s)] = node{s, s};
    }
    list_of_.assign(static_cast<std::size_t>(key_space), -1);
  }

  /// Appends `key` (not in any list) at the back (most recent end) of `list`.
  void push_back(std::int32_t list, cache_key key) noexcept {
    link_back(list, key);
    list_of_[static_cast<std::size_t>(key)] = list;
  }

  /// Unlinks `key` from its list (no-op if in none).
  void remove(cache_key key) noexcept {
    const auto k = static_cast<std::size_t>(key);
    if (list_of_[k] < 0) {
      return;
    }
    unlink(key);
    list_of_[k] = -1;
  }

  /// Moves `key`, which is in `list`, to the back of `list`. O(1), branch-free: the hot path of
  /// every list policy's `on_hit`.
  void move_to_back(std::int32_t list, cache_key key) noexcept {
    unlink(key);
    link_back(list, key);
  }

  /// The first (least recent) key of `list`, or `no_key` if it is empty.
  [[nodiscard]] cache_key front(std::int32_t list) const noexcept {
    return key_or_none(nodes_[static_cast<std::size_t>(sentinel(list))].next);
  }
  /// The key after `key` in its list, or `no_key` at the back.
  [[nodiscard]] cache_key next(cache_key key) const noexcept {
    return key_or_none(nodes_[static_cast<std::size_t>(key)].next);
  }
  [[nodiscard]] std::int32_t list_of(cache_key key) const noexcept {
    return list_of_[static_cast<std::size_t>(key)];
  }

  /// First key of `list`, from the front, that `is_protected` rejects; `no_key` if none.
  /// O(1 + protected keys skipped).
  [[nodiscard]] cache_key first_unprotected(std::int32_t list,
                                            protected_keys is_protected) const noexcept {
    const node* const nodes = nodes_.data();
    const cache_key end = sentinel(list);
    cache_key k = nodes[static_cast<std::size_t>(end)].next;
    while (k != end && is_protected(k)) {
      k = nodes[static_cast<std::size_t>(k)].next;
    }
    return k == end ? no_key : k;
  }

 private:
  struct node {
    cache_key prev = no_key;
    cache_key next = no_key;
  };

  [[nodiscard]] cache_key sentinel(std::int32_t list) const noexcept {
    return static_cast<cache_key>(key_space_) + list;
  }
  [[nodiscard]] cache_key key_or_none(cache_key k) const noexcept {
    return static_cast<std::size_t>(k) >= key_space_ ? no_key : k;
  }
  void unlink(cache_key key) noexcept {
    node* const nodes = nodes_.data();
    const node n = nodes[static_cast<std::size_t>(key)];
    nodes[static_cast<std::size_t>(n.prev)].next = n.next;
    nodes[static_cast<std::size_t>(n.next)].prev = n.prev;
  }
  void link_back(std::int32_t list, cache_key key) noexcept {
    node* const nodes = nodes_.data();
    const cache_key s = sentinel(list);
    node& end = nodes[static_cast<std::size_t>(s)];
    const cache_key tail = end.prev;
    nodes[static_cast<std::size_t>(key)] = node{tail, s};
    nodes[static_cast<std::size_t>(tail)].next = key;
    end.prev = key;
  }

  // Not an int32: the list stores (int32) could alias it and force a reload after each one.
  std::size_t key_space_ = 0;
  std::vector<node> nodes_;            // key_space keys, then one sentinel per list
  std::vector<std::int32_t> list_of_;  // the list of each key, -1 if none
};

}  // namespace wisp::detail
