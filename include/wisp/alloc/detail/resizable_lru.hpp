// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief An LRU cache over dense integer keys whose capacity can change between accesses (for
/// the evaluation of adaptive splits). Shrinking evicts least-recently-used keys; growing adds
/// empty room (evicted keys stay evicted). `access_call` serves a layer's request as wisp's pager
/// does: the call's keys never evict each other.
#pragma once

#include <wisp/core/error.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace wisp::alloc::detail {

class resizable_lru {
 public:
  explicit resizable_lru(std::uint32_t key_space, std::uint64_t capacity = 0)
      : prev_(key_space, none),
        next_(key_space, none),
        resident_(key_space, 0),
        capacity_(capacity) {}

  /// Accesses `key`; returns true on a hit. O(1).
  bool access(std::uint32_t key) {
    WISP_EXPECTS(key < resident_.size(), "key ", key, " outside the key space ", resident_.size());
    if (resident_[key] != 0) {
      unlink(key);
      push_front(key);
      return true;
    }
    if (capacity_ == 0) {
      return false;
    }
    if (size_ == capacity_) {
      evict();
    }
    resident_[key] = 1;
    ++size_;
    push_front(key);
    return false;
  }

  /// @brief One call: `hit[i]` says whether `keys[i]` (distinct) was resident before the call;
  /// then every key becomes most recent, in call order, and the least recently used keys outside
  /// the call make room. Returns the misses. O(keys).
  /// @throws wisp::logic_error if a key is out of range, `hit` is too small, or the call holds
  /// more keys than the capacity (nothing changed then).
  std::uint32_t access_call(std::span<const std::uint32_t> keys, std::span<std::uint8_t> hit) {
    WISP_EXPECTS(hit.size() >= keys.size() && keys.size() <= capacity_, "a call of ", keys.size(),
                 " keys with room for ", hit.size(), " results in ", capacity_, " slots");
    for (const std::uint32_t key : keys) {
      WISP_EXPECTS(key < resident_.size(), "key ", key, " outside the key space ",
                   resident_.size());
    }
    std::uint32_t misses = 0;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      hit[i] = resident_[keys[i]];
      misses += hit[i] != 0 ? 0u : 1u;
    }
    for (const std::uint32_t key : keys) {  // most recent in call order: the last one in front
      if (resident_[key] != 0) {
        unlink(key);
      } else {
        resident_[key] = 1;
        ++size_;
      }
      push_front(key);
    }
    while (size_ > capacity_) {  // the tail is older than every key of the call
      evict();
    }
    return misses;
  }

  /// Sets the capacity, evicting least-recently-used keys when shrinking. O(evicted).
  void set_capacity(std::uint64_t capacity) {
    capacity_ = capacity;
    while (size_ > capacity_) {
      evict();
    }
  }

  [[nodiscard]] std::uint64_t capacity() const noexcept { return capacity_; }
  [[nodiscard]] std::uint64_t size() const noexcept { return size_; }

 private:
  static constexpr std::uint32_t none = 0xFFFFFFFFu;

  void unlink(std::uint32_t k) {
    (prev_[k] == none ? head_ : next_[prev_[k]]) = next_[k];
    (next_[k] == none ? tail_ : prev_[next_[k]]) = prev_[k];
  }
  void push_front(std::uint32_t k) {
    prev_[k] = none;
    next_[k] = head_;
    (head_ == none ? tail_ : prev_[head_]) = k;
    head_ = k;
  }
  void evict() {
    const std::uint32_t victim = tail_;
    unlink(victim);
    resident_[victim] = 0;
    --size_;
  }

  std::vector<std::uint32_t> prev_;
  std::vector<std::uint32_t> next_;
  std::vector<std::uint8_t> resident_;
  std::uint32_t head_ = none;
  std::uint32_t tail_ = none;
  std::uint64_t size_ = 0;
  std::uint64_t capacity_;
};

}  // namespace wisp::alloc::detail
