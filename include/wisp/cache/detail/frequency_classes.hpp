// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Internal: keys grouped by an access count into classes kept in increasing count order,
/// each class a list in the order its keys joined it (the O(1) LFU structure of Shah, Mitra and
/// Matani, 2010). Every operation O(1) but an insertion above count 1; allocation-free after
/// `reset`.
#pragma once

#include <wisp/cache/detail/key_lists.hpp>
#include <wisp/cache/eviction_policy.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace wisp::detail {

/// A key joins a class by one more access (into the class right after its own: O(1)) or by
/// insertion at a given count (a walk from the lowest class, O(1) at count 1), so the classes stay
/// sorted, and a class's front is its key whose last access is oldest. Class nodes are recycled
/// through a free list.
class frequency_classes {
 public:
  /// A class node (an index); `end()` closes the list.
  using class_id = std::int32_t;

  /// Empties every class; sizes for keys in `[0, key_space)`. @throws std::bad_alloc
  void reset(std::int32_t key_space) {
    const auto n = static_cast<std::size_t>(key_space);
    class_of_.assign(n, none);
    // Class nodes 0..n: at most n are in use, plus the one `promote` creates before it frees one.
    classes_.assign(n + 2, node{});
    end_ = static_cast<class_id>(n + 1);
    classes_[static_cast<std::size_t>(end_)] = {0, end_, end_};
    free_.resize(n + 1);
    for (std::size_t i = 0; i <= n; ++i) {
      free_[i] = static_cast<class_id>(n - i);  // the top of the stack is 0, then 1, 2, ...
    }
    free_size_ = n + 1;
    members_.reset(key_space, static_cast<std::int32_t>(n + 1));
  }

  /// Adds `key` (in no class) to the back of the class of `count` (>= 1), created if needed.
  /// O(1 + classes of a lower count), a walk from the lowest class: O(1) for `count == 1`.
  void insert(cache_key key, std::uint64_t count = 1) noexcept {
    class_id before = end_;
    class_id c = first();
    while (c != end_ && count_of_class(c) < count) {
      before = c;
      c = next(c);
    }
    join(key, c != end_ && count_of_class(c) == count ? c : new_class_after(before, count));
  }

  /// Moves `key` (in a class) to the back of the class of one more (one more access). O(1); a
  /// key alone in its class, with no class of one more, keeps its class, counted one more.
  void promote(cache_key key) noexcept {
    const class_id from = class_of_[static_cast<std::size_t>(key)];
    const std::uint64_t count = count_of_class(from) + 1;
    const class_id next = classes_[static_cast<std::size_t>(from)].next;
    const bool next_counts = next != end_ && count_of_class(next) == count;
    if (!next_counts && members_.front(from) == key && members_.next(key) == no_key) {
      // Alone in its class, and no class of one more: the class itself counts one more (still
      // below the next one). With counts spread out (whole-history counts) this is the usual hit.
      classes_[static_cast<std::size_t>(from)].count = count;
      return;
    }
    const class_id to = next_counts ? next : new_class_after(from, count);
    members_.remove(key);
    join(key, to);
    release_if_empty(from);
  }

  /// Removes `key` from its class; no-op if it is in none.
  void erase(cache_key key) noexcept {
    const class_id c = class_of_[static_cast<std::size_t>(key)];
    if (c == none) {
      return;
    }
    members_.remove(key);
    class_of_[static_cast<std::size_t>(key)] = none;
    release_if_empty(c);
  }

  /// The lowest-count class, or `end()` when every class is empty.
  [[nodiscard]] class_id first() const noexcept {
    return classes_[static_cast<std::size_t>(end_)].next;
  }
  /// The class after `c` in increasing count order, or `end()`.
  [[nodiscard]] class_id next(class_id c) const noexcept {
    return classes_[static_cast<std::size_t>(c)].next;
  }
  [[nodiscard]] class_id end() const noexcept { return end_; }
  [[nodiscard]] std::uint64_t count_of_class(class_id c) const noexcept {
    return classes_[static_cast<std::size_t>(c)].count;
  }
  /// The count of `key`, which must be in a class: 1 plus its promotions since its insertion.
  [[nodiscard]] std::uint64_t count_of(cache_key key) const noexcept {
    return count_of_class(class_of_[static_cast<std::size_t>(key)]);
  }
  /// The first key of class `c`, from the front, that `is_protected` rejects; `no_key` if none.
  /// O(1 + protected keys skipped).
  [[nodiscard]] cache_key first_unprotected(class_id c,
                                            protected_keys is_protected) const noexcept {
    return members_.first_unprotected(c, is_protected);
  }
  /// The front-most unprotected key of the lowest class that has one (the LFU victim); `no_key`
  /// if every key is protected. O(1 + protected keys skipped).
  [[nodiscard]] cache_key lowest_unprotected(protected_keys is_protected) const noexcept {
    for (class_id c = first(); c != end_; c = next(c)) {
      if (const cache_key k = first_unprotected(c, is_protected); k != no_key) {
        return k;
      }
    }
    return no_key;
  }

 private:
  static constexpr class_id none = -1;
  struct node {
    std::uint64_t count = 0;
    class_id prev = -1;
    class_id next = -1;
  };

  class_id new_class_after(class_id at, std::uint64_t count) noexcept {
    const class_id c = free_[--free_size_];  // never empty here (see reset)
    const class_id next = classes_[static_cast<std::size_t>(at)].next;
    classes_[static_cast<std::size_t>(c)] = {count, at, next};
    classes_[static_cast<std::size_t>(at)].next = c;
    classes_[static_cast<std::size_t>(next)].prev = c;
    return c;
  }
  void release_if_empty(class_id c) noexcept {
    if (members_.front(c) != no_key) {
      return;
    }
    const node& n = classes_[static_cast<std::size_t>(c)];
    classes_[static_cast<std::size_t>(n.prev)].next = n.next;
    classes_[static_cast<std::size_t>(n.next)].prev = n.prev;
    free_[free_size_++] = c;
  }
  void join(cache_key key, class_id c) noexcept {
    members_.push_back(c, key);
    class_of_[static_cast<std::size_t>(key)] = c;
  }

  std::vector<class_id> class_of_;  // key -> its class node, none if in no class
  std::vector<node> classes_;       // class nodes, a list sorted by count through end_
  std::vector<class_id> free_;      // unused class nodes, a stack of free_size_ entries
  std::size_t free_size_ = 0;
  key_lists members_;  // one list per class node, in joining order
  class_id end_ = 0;
};

}  // namespace wisp::detail
