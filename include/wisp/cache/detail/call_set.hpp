// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Internal: the keys protected by a `slot_cache`'s current call.
///
/// The same generation-stamped array as `wisp::protect_set` (and the same `protected_keys` view),
/// plus `assign`, the bulk insert that starts a cache call. It keeps the generation and the array
/// in registers for the whole loop (a member-at-a-time `insert` must reload the generation after
/// every stamp store, which may alias it), and only builds a deduplicated copy of the keys when
/// they repeat.
#pragma once

#include <wisp/cache/detail/inline.hpp>
#include <wisp/cache/eviction_policy.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace wisp::detail {

class call_set {
 public:
  call_set() = default;
  /// Sizes the set for keys in `[0, key_space)`. Allocates. @throws std::bad_alloc
  explicit call_set(std::int32_t key_space)
      : stamps_(static_cast<std::size_t>(std::max(key_space, 0)), 0u),
        distinct_(static_cast<std::size_t>(std::max(key_space, 0)) + 1, no_key) {}

  /// Empties the set. O(1) amortised, noexcept.
  void clear() noexcept {
    if (++generation_ == 0) {
      std::fill(stamps_.begin(), stamps_.end(), 0u);
      generation_ = 1;
    }
  }
  /// Adds `key` (in range, unchecked). Returns true if it was not in the set. O(1).
  bool insert(cache_key key) noexcept {
    std::uint32_t& stamp = stamps_[static_cast<std::size_t>(key)];
    const bool added = stamp != generation_;
    stamp = generation_;
    return added;
  }
  /// Removes `key` (in range, unchecked). O(1).
  void erase(cache_key key) noexcept {
    std::uint32_t& stamp = stamps_[static_cast<std::size_t>(key)];
    if (stamp == generation_) {
      stamp = 0;
    }
  }
  /// True if `key` (in range, unchecked) is in the set. O(1).
  [[nodiscard]] bool contains(cache_key key) const noexcept {
    return stamps_[static_cast<std::size_t>(key)] == generation_;
  }
  /// The predicate handed to `victim()`; valid until this set is destroyed or moved.
  [[nodiscard]] protected_keys view() const noexcept {
    return protected_keys{stamps_.data(), generation_};
  }

  /// Empties the set, then adds every key of `keys` (in range, unchecked) and returns their
  /// distinct keys in first-seen order: `keys` itself when they are distinct (the common case:
  /// one pass, no copy), else a list kept in this set. Valid until the next call. O(keys.size()).
  WISP_DETAIL_ALWAYS_INLINE std::span<const cache_key> assign(
      std::span<const cache_key> keys) noexcept {
    clear();
    std::uint32_t* const stamps = stamps_.data();
    const std::uint32_t generation = generation_;
    bool repeated = false;
    for (const cache_key key : keys) {
      std::uint32_t& stamp = stamps[static_cast<std::size_t>(key)];
      repeated |= stamp == generation;
      stamp = generation;
    }
    if (!repeated) [[likely]] {
      return keys;
    }
    return assign_repeated(keys);
  }

 private:
  // `assign` of keys that repeat: start over under a fresh generation, keeping the first
  // occurrence of each key (branch-free: `distinct_` has one spare entry for the store after the
  // last new key).
  std::span<const cache_key> assign_repeated(std::span<const cache_key> keys) noexcept {
    clear();
    std::uint32_t* const stamps = stamps_.data();
    cache_key* const out = distinct_.data();
    const std::uint32_t fresh = generation_;
    std::size_t count = 0;
    for (const cache_key key : keys) {
      std::uint32_t& stamp = stamps[static_cast<std::size_t>(key)];
      const bool added = stamp != fresh;
      stamp = fresh;
      out[count] = key;  // overwritten by the next key unless this one was new
      count += added ? 1u : 0u;
    }
    return {out, count};
  }

  std::vector<std::uint32_t> stamps_;
  std::vector<cache_key> distinct_;
  std::uint32_t generation_ = 1;
};

}  // namespace wisp::detail
