// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Internal: the resident keys of a policy by a two-word priority, ties broken by the
/// smaller key, with the smallest unprotected one on demand. Kept as an indexed binary min-heap
/// (set/erase O(log n), the smallest O(1 + p)) or unordered (set/erase O(1), the smallest by a
/// scan, O(n): cheaper when every key is rescored between victims anyway); rebuild O(n).
/// Allocation-free after `reset`.
#pragma once

#include <wisp/cache/eviction_policy.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace wisp::detail {

/// Lexicographic priority; the smallest one is at the top of a `key_heap`.
struct heap_priority {
  std::uint64_t major = 0;
  std::uint64_t minor = 0;
  friend constexpr auto operator<=>(const heap_priority&, const heap_priority&) = default;
  // Spelled out: nvcc 13 leaves the == implied by a defaulted <=> undefined.
  friend constexpr bool operator==(const heap_priority& x, const heap_priority& y) noexcept {
    return x.major == y.major && x.minor == y.minor;
  }
};

/// How a `basic_key_heap` keeps its keys. Both answer every query the same; only the costs
/// differ.
enum class key_order : std::uint8_t {
  heap,  ///< a binary heap: `set`, `erase` O(log n); `min_unprotected` O(1 + p)
  scan,  ///< unordered: `set`, `erase` O(1); `min_unprotected` O(n), a scan of every key
};

template <key_order Order>
class basic_key_heap {
 public:
  static constexpr key_order order = Order;

  void reset(std::int32_t key_space) {
    heap_.clear();
    heap_.reserve(static_cast<std::size_t>(key_space));
    pos_.assign(static_cast<std::size_t>(key_space), npos);
    prio_.assign(static_cast<std::size_t>(key_space), heap_priority{});
    if constexpr (Order == key_order::heap) {
      stack_.resize(static_cast<std::size_t>(key_space));  // the scanned order needs no stack
    }
  }

  [[nodiscard]] bool contains(cache_key key) const noexcept {
    return pos_[static_cast<std::size_t>(key)] != npos;
  }
  [[nodiscard]] std::size_t size() const noexcept { return heap_.size(); }
  /// The keys: in heap order (the smallest first, the rest unordered) with `key_order::heap`,
  /// unordered with `key_order::scan`. O(1).
  [[nodiscard]] std::span<const cache_key> keys() const noexcept { return heap_; }

  /// Inserts `key` (absent) or changes its priority (present). O(log n).
  void set(cache_key key, heap_priority prio) noexcept {
    const auto k = static_cast<std::size_t>(key);
    if (pos_[k] == npos) {
      prio_[k] = prio;
      pos_[k] = heap_.size();
      heap_.push_back(key);  // capacity reserved in reset: no allocation
      if constexpr (Order == key_order::heap) {
        sift_up(pos_[k]);
      }
      return;
    }
    const heap_priority old = prio_[k];
    prio_[k] = prio;
    if constexpr (Order == key_order::heap) {
      if (prio < old) {
        sift_up(pos_[k]);
      } else {
        sift_down(pos_[k]);
      }
    }
  }

  /// Removes `key` if present. O(log n).
  void erase(cache_key key) noexcept {
    const auto k = static_cast<std::size_t>(key);
    const std::size_t i = pos_[k];
    if (i == npos) {
      return;
    }
    const std::size_t last = heap_.size() - 1;
    pos_[k] = npos;
    const cache_key moved = heap_[last];
    heap_.pop_back();
    if (i != last) {
      place(i, moved);
      if constexpr (Order == key_order::heap) {
        sift_up(i);
        sift_down(pos_[static_cast<std::size_t>(moved)]);
      }
    }
  }

  /// Gives every key in the heap the priority `priority(key)` and restores the heap order
  /// (Floyd's bottom-up construction). O(n) calls of `priority` and O(n) sift steps.
  template <class Priority>
  void rebuild(Priority&& priority) noexcept {
    for (const cache_key key : heap_) {
      prio_[static_cast<std::size_t>(key)] = priority(key);
    }
    restore_order();
  }

  /// The priority `key` was last given (by `set`, `rebuild` or `rescore_all`), whether or not it
  /// is in the heap now; `{0, 0}` if none since `reset`. A policy may keep a per-key state here
  /// instead of beside the heap (one cache line per key touched, not two). O(1).
  [[nodiscard]] heap_priority priority(cache_key key) const noexcept {
    return prio_[static_cast<std::size_t>(key)];
  }

  /// Replaces the priority of every key of the key space, in the heap or not, by
  /// `change(priority)` and restores the heap order. O(key_space) calls of `change` and O(n) sift
  /// steps.
  template <class Change>
  void rescore_all(Change&& change) noexcept {
    for (heap_priority& prio : prio_) {
      prio = change(prio);
    }
    restore_order();
  }

  /// The smallest key (by priority, then key) with `!is_protected(key)`, or `no_key`.
  /// `key_order::heap`: O(1 + p), p = protected keys that sit above it in the heap (a search of
  /// the protected region around the root; the answer has only protected ancestors).
  /// `key_order::scan`: O(n). `is_protected` is a `protected_keys` or any predicate on the keys.
  template <class IsProtected>
  [[nodiscard]] cache_key min_unprotected(const IsProtected& is_protected) noexcept {
    if constexpr (Order == key_order::scan) {
      return scan_min_unprotected(is_protected);
    } else {
      return heap_min_unprotected(is_protected);
    }
  }

 private:
  static constexpr std::size_t npos = ~std::size_t{0};

  // A search of the protected region around the root.
  template <class IsProtected>
  [[nodiscard]] cache_key heap_min_unprotected(const IsProtected& is_protected) noexcept {
    if (heap_.empty()) {
      return no_key;
    }
    if (!is_protected(heap_[0])) {
      return heap_[0];  // the usual case: no search
    }
    // Every position is pushed at most once, so the stack (sized to the key space) never
    // overflows.
    cache_key best = no_key;
    std::size_t* const stack = stack_.data();
    std::size_t top = 0;
    stack[top++] = 0;
    while (top > 0) {
      const std::size_t i = stack[--top];
      const cache_key k = heap_[i];
      if (!is_protected(k)) {
        if (best == no_key || before(k, best)) {
          best = k;
        }
        continue;  // its descendants are not smaller
      }
      for (std::size_t c = 2 * i + 1; c <= 2 * i + 2 && c < heap_.size(); ++c) {
        stack[top++] = c;
      }
    }
    return best;
  }
  // Every key in turn; the protection test only for a key that would be the new smallest.
  template <class IsProtected>
  [[nodiscard]] cache_key scan_min_unprotected(const IsProtected& is_protected) const noexcept {
    cache_key best = no_key;
    heap_priority best_prio;
    for (const cache_key k : heap_) {
      const heap_priority& p = prio_[static_cast<std::size_t>(k)];
      if ((best == no_key || p < best_prio || (p == best_prio && k < best)) && !is_protected(k)) {
        best = k;
        best_prio = p;
      }
    }
    return best;
  }
  [[nodiscard]] bool before(cache_key a, cache_key b) const noexcept {
    const heap_priority& pa = prio_[static_cast<std::size_t>(a)];
    const heap_priority& pb = prio_[static_cast<std::size_t>(b)];
    return pa < pb || (pa == pb && a < b);
  }
  // Floyd's bottom-up construction over the current priorities.
  void restore_order() noexcept {
    if constexpr (Order == key_order::heap) {
      for (std::size_t i = heap_.size() / 2; i-- > 0;) {
        sift_down(i);
      }
    }
  }
  void place(std::size_t i, cache_key key) noexcept {
    heap_[i] = key;
    pos_[static_cast<std::size_t>(key)] = i;
  }
  void sift_up(std::size_t i) noexcept {
    const cache_key key = heap_[i];
    while (i > 0) {
      const std::size_t parent = (i - 1) / 2;
      if (!before(key, heap_[parent])) {
        break;
      }
      place(i, heap_[parent]);
      i = parent;
    }
    place(i, key);
  }
  void sift_down(std::size_t i) noexcept {
    const cache_key key = heap_[i];
    const std::size_t n = heap_.size();
    while (true) {
      std::size_t child = 2 * i + 1;
      if (child >= n) {
        break;
      }
      if (child + 1 < n && before(heap_[child + 1], heap_[child])) {
        ++child;
      }
      if (!before(heap_[child], key)) {
        break;
      }
      place(i, heap_[child]);
      i = child;
    }
    place(i, key);
  }

  std::vector<cache_key> heap_;  // the keys, in heap order or (scan) unordered
  std::vector<std::size_t> pos_;
  std::vector<heap_priority> prio_;
  std::vector<std::size_t> stack_;  // heap order: scratch of min_unprotected, key_space positions
};

/// The binary heap (decayed_frequency, predicted_next_use, belady; reuse_probability in global
/// scope).
using key_heap = basic_key_heap<key_order::heap>;
/// The unordered keys (reuse_probability in per-layer scope).
using scanned_keys = basic_key_heap<key_order::scan>;

}  // namespace wisp::detail
