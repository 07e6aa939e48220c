// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `lfu` (least frequently used) and `lfru` (vLLM's frequency/recency score).
#pragma once

#include <wisp/cache/detail/key_heap.hpp>
#include <wisp/cache/eviction_policy.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace wisp {
namespace detail {

/// Exact 128-bit product of two 64-bit values, compared lexicographically (portable: no __int128).
struct wide_product {
  std::uint64_t high = 0;
  std::uint64_t low = 0;
  friend constexpr auto operator<=>(const wide_product&, const wide_product&) = default;
};

[[nodiscard]] constexpr wide_product multiply(std::uint64_t a, std::uint64_t b) noexcept {
  const std::uint64_t a_lo = a & 0xffffffffu;
  const std::uint64_t a_hi = a >> 32;
  const std::uint64_t b_lo = b & 0xffffffffu;
  const std::uint64_t b_hi = b >> 32;
  const std::uint64_t lo_lo = a_lo * b_lo;
  const std::uint64_t hi_lo = a_hi * b_lo;
  const std::uint64_t lo_hi = a_lo * b_hi;
  const std::uint64_t hi_hi = a_hi * b_hi;
  const std::uint64_t cross = (lo_lo >> 32) + (hi_lo & 0xffffffffu) + lo_hi;
  return wide_product{hi_hi + (hi_lo >> 32) + (cross >> 32), (cross << 32) | (lo_lo & 0xffffffffu)};
}

}  // namespace detail

/// @brief Least frequently used: evicts the resident key with the fewest accesses since it was
/// inserted (the count restarts at 1 when an evicted key comes back); ties go to the least
/// recently used.
///
/// An indexed binary heap on (count, last access). `on_insert`, `on_hit`, `on_erase`: O(log n).
/// `victim`: O(1 + p), p = protected keys above the answer in the heap. Allocation-free after
/// `reset`. Not thread-safe.
class lfu {
 public:
  static constexpr std::string_view name = "lfu";

  /// Forgets every key; sizes for `layout.size()` keys. @throws std::bad_alloc
  void reset(const key_layout& layout) {
    heap_.reset(layout.size());
    count_.assign(static_cast<std::size_t>(layout.size()), 0);
    tick_ = 0;
  }
  void on_insert(cache_key key, const access_context& /*ctx*/) noexcept {
    count_[static_cast<std::size_t>(key)] = 1;
    heap_.set(key, {1, ++tick_});
  }
  void on_hit(cache_key key, const access_context& /*ctx*/) noexcept {
    const std::uint64_t count = ++count_[static_cast<std::size_t>(key)];
    heap_.set(key, {count, ++tick_});
  }
  void on_erase(cache_key key) noexcept { heap_.erase(key); }
  /// The unprotected resident key with the smallest (count, last access), or `no_key`.
  [[nodiscard]] cache_key victim(const access_context& /*ctx*/,
                                 protected_keys is_protected) noexcept {
    return heap_.min_unprotected(is_protected);
  }

 private:
  detail::key_heap heap_;
  std::vector<std::uint64_t> count_;
  std::uint64_t tick_ = 0;
};
static_assert(eviction_policy<lfu>);

/// @brief vLLM's LFRU (PR #37190, `CachedWeightProvider`): a clock ticks once per access (hit or
/// miss); a key remembers its access count `freq` (1 on insertion) and the clock of its last
/// access `last`; the victim minimises `freq / (clock - last + 1)`, evaluated at the clock before
/// the missing key's own tick. Ties go to the least recently used key.
///
/// The score's order changes as the clock advances, so `victim` scans the resident keys:
/// O(resident), exactly like vLLM. Scores are compared exactly by cross-multiplication (no
/// floating point). Other hooks O(1). Allocation-free after `reset`. Not thread-safe.
class lfru {
 public:
  static constexpr std::string_view name = "lfru";

  /// Forgets every key and restarts the clock; sizes for `layout.size()` keys.
  /// @throws std::bad_alloc
  void reset(const key_layout& layout) {
    const auto n = static_cast<std::size_t>(layout.size());
    freq_.assign(n, 0);
    last_.assign(n, 0);
    index_.assign(n, -1);
    resident_.clear();
    resident_.reserve(n);
    clock_ = 0;
  }
  void on_insert(cache_key key, const access_context& /*ctx*/) noexcept {
    const auto k = static_cast<std::size_t>(key);
    freq_[k] = 1;
    last_[k] = ++clock_;
    index_[k] = static_cast<std::int32_t>(resident_.size());
    resident_.push_back(key);  // reserved in reset: no allocation
  }
  void on_hit(cache_key key, const access_context& /*ctx*/) noexcept {
    const auto k = static_cast<std::size_t>(key);
    ++freq_[k];
    last_[k] = ++clock_;
  }
  void on_erase(cache_key key) noexcept {
    const auto k = static_cast<std::size_t>(key);
    const std::int32_t i = index_[k];
    if (i < 0) {
      return;
    }
    const cache_key moved = resident_.back();
    resident_[static_cast<std::size_t>(i)] = moved;
    index_[static_cast<std::size_t>(moved)] = i;
    resident_.pop_back();
    index_[k] = -1;
  }
  /// The unprotected resident key with the lowest score, or `no_key`. O(resident).
  [[nodiscard]] cache_key victim(const access_context& /*ctx*/,
                                 protected_keys is_protected) const noexcept {
    cache_key best = no_key;
    for (const cache_key key : resident_) {
      if (!is_protected(key) && (best == no_key || before(key, best))) {
        best = key;
      }
    }
    return best;
  }

  /// Current score of a resident key (for reports and tests).
  [[nodiscard]] double score(cache_key key) const noexcept {
    const auto k = static_cast<std::size_t>(key);
    return static_cast<double>(freq_[k]) / static_cast<double>(clock_ - last_[k] + 1);
  }
  /// The clock: number of accesses seen since `reset`.
  [[nodiscard]] std::uint64_t clock() const noexcept { return clock_; }

 private:
  // a evicts before b: freq_a / age_a < freq_b / age_b, then older last access.
  [[nodiscard]] bool before(cache_key a, cache_key b) const noexcept {
    const auto ia = static_cast<std::size_t>(a);
    const auto ib = static_cast<std::size_t>(b);
    const detail::wide_product lhs = detail::multiply(freq_[ia], clock_ - last_[ib] + 1);
    const detail::wide_product rhs = detail::multiply(freq_[ib], clock_ - last_[ia] + 1);
    return lhs < rhs || (lhs == rhs && last_[ia] < last_[ib]);
  }

  std::vector<std::uint64_t> freq_;
  std::vector<std::uint64_t> last_;
  std::vector<std::int32_t> index_;  // position in resident_, -1 if absent
  std::vector<cache_key> resident_;
  std::uint64_t clock_ = 0;
};
static_assert(eviction_policy<lfru>);

}  // namespace wisp
