// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Internal: a family of intrusive doubly-linked lists over dense keys (every key is in at
/// most one list). Single-key operations O(1), allocation-free after `reset`.
#pragma once

#include <wisp/cache/eviction_policy.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace wisp::detail {

/// Each list is circular through a sentinel node (index `key_space + list`), so linking and
/// unlinking never branch on "first" or "last"; a key in no list is linked to itself, so
/// unlinking it is a harmless no-op; `prev`/`next` of a node sit side by side.
class key_lists {
 public:
  /// Sizes for keys in [0, key_space) and `lists` lists, all empty.
  void reset(std::int32_t key_space, std::int32_t lists) {
    key_space_ = static_cast<std::size_t>(key_space);
    nodes_.resize(static_cast<std::size_t>(key_space) + static_cast<std::size_t>(lists));
    // Every key (in no list yet) and every sentinel (of an empty list) is linked to itself.
    for (std::size_t k = 0; k < nodes_.size(); ++k) {
      nodes_[k] = node{static_cast<cache_key>(k), static_cast<cache_key>(k)};
    }
  }

  /// Appends `key` (not in any list) at the back (most recent end) of `list`.
  void push_back(std::int32_t list, cache_key key) noexcept { link_back(list, key); }

  /// Unlinks `key` from its list (no-op if in none). Branch-free.
  void remove(cache_key key) noexcept {
    unlink(key);
    nodes_[static_cast<std::size_t>(key)] = node{key, key};
  }

  /// Moves `key`, which is in `list`, to the back of `list`. O(1), branch-free: the hot path of
  /// every list policy's `on_hit`.
  void move_to_back(std::int32_t list, cache_key key) noexcept {
    unlink(key);
    link_back(list, key);
  }

  /// @brief The whole-call update of `lru`: moves `keys` (distinct; each in `list` or in no
  /// list) to the back of `list`, in order, then removes the `victims.size()` front-most keys of
  /// `list` that are not in `keys` (writing them to `victims`, `no_key` where the list runs out).
  ///
  /// O(keys.size() + victims.size()). One branch-free pass moves the keys: each is unlinked (a
  /// key in no list is linked to itself, so that is a no-op for it) and chained after the
  /// previous one; the chain is closed once, at the end. The victims are then the keys in front
  /// of the first moved one.
  void take_front_and_append(std::int32_t list, std::span<const cache_key> keys,
                             std::span<cache_key> victims) noexcept {
    if (keys.empty()) {
      return;  // no key, so no miss and no victim
    }
    node* const nodes = nodes_.data();
    const cache_key s = sentinel(list);
    // Every link but the chain's last `next` (and `s.prev`) stays exact through the pass, so each
    // unlink sees its true neighbours. The first key is unlinked before the tail is read: it may
    // be the tail.
    unlink(keys[0]);
    cache_key tail = nodes[static_cast<std::size_t>(s)].prev;
    for (const cache_key key : keys) {
      unlink(key);  // a no-op the second time for keys[0]
      nodes[static_cast<std::size_t>(tail)].next = key;
      nodes[static_cast<std::size_t>(key)].prev = tail;
      tail = key;
    }
    nodes[static_cast<std::size_t>(tail)].next = s;
    nodes[static_cast<std::size_t>(s)].prev = tail;
    const cache_key stop = keys[0];
    cache_key front = nodes[static_cast<std::size_t>(s)].next;
    for (cache_key& victim : victims) {
      if (front == stop) [[unlikely]] {
        victim = no_key;
        continue;
      }
      victim = front;
      const cache_key next = nodes[static_cast<std::size_t>(front)].next;
      nodes[static_cast<std::size_t>(front)] = node{front, front};
      front = next;
    }
    nodes[static_cast<std::size_t>(s)].next = front;
    nodes[static_cast<std::size_t>(front)].prev = s;
  }

  /// The first (least recent) key of `list`, or `no_key` if it is empty.
  [[nodiscard]] cache_key front(std::int32_t list) const noexcept {
    return key_or_none(nodes_[static_cast<std::size_t>(sentinel(list))].next);
  }
  /// The key after `key` in its list, or `no_key` at the back.
  [[nodiscard]] cache_key next(cache_key key) const noexcept {
    return key_or_none(nodes_[static_cast<std::size_t>(key)].next);
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
    // Two 4-byte loads, not one 8-byte one: a neighbour's unlink may just have stored one half of
    // this node, and a wider load would not be forwarded from that store.
    node* const nodes = nodes_.data();
    const cache_key prev = nodes[static_cast<std::size_t>(key)].prev;
    const cache_key next = nodes[static_cast<std::size_t>(key)].next;
    nodes[static_cast<std::size_t>(prev)].next = next;
    nodes[static_cast<std::size_t>(next)].prev = prev;
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
  std::vector<node> nodes_;  // key_space keys, then one sentinel per list
};

}  // namespace wisp::detail
