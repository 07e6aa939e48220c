// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Internal: the resident keys of a policy that picks its victim by scanning them (the
/// scoring policies): a dense array plus each key's index in it, so that inserting and erasing a
/// key cost O(1) and a scan touches resident keys only.
#pragma once

#include <wisp/cache/eviction_policy.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace wisp::detail {

class resident_keys {
 public:
  /// Empties the set and sizes it for keys `[0, keys)`. @throws std::bad_alloc
  void reset(std::size_t keys) {
    index_.assign(keys, absent);
    keys_.clear();
    keys_.reserve(keys);  // insert never allocates
  }
  void insert(cache_key key) noexcept {
    index_[static_cast<std::size_t>(key)] = static_cast<std::uint32_t>(keys_.size());
    keys_.push_back(key);
  }
  /// Removes `key` if present (its place goes to the last key).
  void erase(cache_key key) noexcept {
    const auto k = static_cast<std::size_t>(key);
    const std::uint32_t i = index_[k];
    if (i == absent) {
      return;
    }
    const cache_key moved = keys_.back();
    keys_[i] = moved;
    index_[static_cast<std::size_t>(moved)] = i;
    keys_.pop_back();
    index_[k] = absent;
  }

  /// The unprotected key with the smallest `rank(key)`, ties to the smaller `last[key]` (the
  /// least recently used); `no_key` if every key is protected. O(size) calls of `rank`.
  template <class Rank>
  [[nodiscard]] cache_key least(protected_keys is_protected, Rank rank,
                                std::span<const std::uint64_t> last) const {
    cache_key best = no_key;
    double best_rank = 0.0;
    for (const cache_key key : keys_) {
      if (is_protected(key)) {
        continue;
      }
      const double r = rank(key);
      if (best == no_key || r < best_rank ||
          (r == best_rank &&
           last[static_cast<std::size_t>(key)] < last[static_cast<std::size_t>(best)])) {
        best = key;
        best_rank = r;
      }
    }
    return best;
  }

 private:
  static constexpr std::uint32_t absent = ~std::uint32_t{0};

  std::vector<std::uint32_t> index_;  // [key] position in keys_, or `absent`
  std::vector<cache_key> keys_;       // resident keys, unordered
};

}  // namespace wisp::detail
