// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Internal: an LRU pool whose capacity changes between accesses, for replaying adaptive
/// expert/KV splits (split_evaluation.hpp). The eviction is the cache area's `slot_cache<lru>`;
/// this adapter adds what a split may ask for and a slot cache does not hold: a capacity of 0
/// (every access misses, nothing is kept) and one above the key space (the whole key space fits).
/// Shrinking evicts least-recently-used keys; growing adds empty room. `access_call` serves a
/// layer's request as wisp's pager does: the call's keys never evict each other.
#pragma once

#include <wisp/cache/lru.hpp>
#include <wisp/cache/slot_cache.hpp>
#include <wisp/core/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace wisp::detail {

class lru_pool {
 public:
  explicit lru_pool(std::uint32_t key_space, std::uint64_t capacity = 0)
      : key_space_(key_space), capacity_(capacity) {
    WISP_EXPECTS(key_space >= 1 && key_space <= static_cast<std::uint32_t>(INT32_MAX),
                 "lru_pool: key space ", key_space, " is outside [1, 2^31)");
    rebuild();
  }

  /// Accesses `key`; returns true on a hit. O(1).
  /// @throws wisp::logic_error if `key` is outside the key space.
  bool access(std::uint32_t key) {
    WISP_EXPECTS(key < key_space_, "key ", key, " outside the key space ", key_space_);
    if (!cache_) {
      return false;
    }
    const access_context ctx = next_call(1);
    return cache_->access(static_cast<cache_key>(key), ctx).hit;
  }

  /// @brief One call: `hit[i]` says whether `keys[i]` (distinct) was resident before the call;
  /// every key becomes most recent, in call order, and the least recently used keys outside the
  /// call make room. Returns the misses. O(keys).
  /// @throws wisp::logic_error if a key is out of range, `hit` is too small, or the call holds
  /// more keys than the capacity (nothing changed then).
  std::uint32_t access_call(std::span<const std::uint32_t> keys, std::span<std::uint8_t> hit) {
    WISP_EXPECTS(hit.size() >= keys.size() && keys.size() <= capacity_, "a call of ", keys.size(),
                 " keys with room for ", hit.size(), " results in ", capacity_, " slots");
    keys_.resize(keys.size());
    for (std::size_t i = 0; i < keys.size(); ++i) {
      WISP_EXPECTS(keys[i] < key_space_, "key ", keys[i], " outside the key space ", key_space_);
      keys_[i] = static_cast<cache_key>(keys[i]);
    }
    if (keys.empty()) {
      return 0;
    }
    results_.resize(keys.size());
    const auto misses =
        static_cast<std::uint32_t>(cache_->access_call(keys_, next_call(keys.size()), results_));
    for (std::size_t i = 0; i < keys.size(); ++i) {
      hit[i] = results_[i].hit ? 1 : 0;
    }
    return misses;
  }

  /// Sets the capacity, evicting least-recently-used keys when shrinking. O(capacity + evicted).
  void set_capacity(std::uint64_t capacity) {
    capacity_ = capacity;
    const std::uint64_t slots = std::min<std::uint64_t>(capacity, key_space_);
    if (slots == 0 || !cache_) {
      rebuild();  // nothing resident to keep
    } else if (slots != static_cast<std::uint64_t>(cache_->capacity())) {
      (void)cache_->resize(static_cast<std::int32_t>(slots), next_call(0));  // unprotected: LRU
    }
  }

  [[nodiscard]] std::uint64_t capacity() const noexcept { return capacity_; }
  [[nodiscard]] std::uint64_t size() const noexcept {
    return cache_ ? static_cast<std::uint64_t>(cache_->size()) : 0;
  }

 private:
  void rebuild() {
    cache_.reset();
    const std::uint64_t slots = std::min<std::uint64_t>(capacity_, key_space_);
    if (slots > 0) {
      cache_.emplace(static_cast<std::int32_t>(key_space_), static_cast<std::int32_t>(slots));
    }
  }
  // Every access, call or resize is a call of its own, with nothing protected yet.
  access_context next_call(std::size_t accesses) noexcept {
    const access_context ctx{static_cast<std::uint32_t>(calls_), 0, time_};
    ++calls_;
    time_ += accesses;
    if (cache_) {
      cache_->begin_call(ctx);
    }
    return ctx;
  }

  std::uint32_t key_space_;
  std::uint64_t capacity_;
  std::optional<slot_cache<lru>> cache_;
  std::uint64_t calls_ = 0;
  std::uint64_t time_ = 0;
  std::vector<cache_key> keys_;
  std::vector<access_result> results_;
};

}  // namespace wisp::detail
