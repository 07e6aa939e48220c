// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `lfru`: vLLM's frequency/recency policy, without its per-miss scan.
#pragma once

#include <wisp/cache/detail/frequency_classes.hpp>
#include <wisp/cache/detail/key_lists.hpp>
#include <wisp/cache/eviction_policy.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace wisp {
namespace detail {

/// Exact 128-bit product of two 64-bit values, compared lexicographically.
struct wide_product {
  std::uint64_t high = 0;
  std::uint64_t low = 0;
  friend constexpr auto operator<=>(const wide_product&, const wide_product&) = default;
  // Spelled out: nvcc 13 leaves the == implied by a defaulted <=> undefined.
  friend constexpr bool operator==(const wide_product& x, const wide_product& y) noexcept {
    return x.high == y.high && x.low == y.low;
  }
};

/// `a * b` from 32-bit halves: the portable product, for compilers without a 128-bit integer.
[[nodiscard]] constexpr wide_product multiply_halves(std::uint64_t a, std::uint64_t b) noexcept {
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

/// `a * b`, exact: one multiply instruction where the compiler has a 128-bit integer (g++ and
/// clang on 64-bit targets), `multiply_halves` elsewhere.
[[nodiscard]] constexpr wide_product multiply(std::uint64_t a, std::uint64_t b) noexcept {
#if defined(__SIZEOF_INT128__)
  __extension__ typedef unsigned __int128 uint128;  // __extension__: no -Wpedantic warning
  const uint128 p = static_cast<uint128>(a) * b;
  return wide_product{static_cast<std::uint64_t>(p >> 64), static_cast<std::uint64_t>(p)};
#else
  return multiply_halves(a, b);
#endif
}

}  // namespace detail

/// @brief vLLM's LFRU (PR #37190, `CachedWeightProvider`): a clock ticks once per access (hit or
/// miss); a key remembers its access count `freq` (1 on insertion) and the clock of its last
/// access `last`; the victim minimises `freq / (clock - last + 1)`, evaluated at the clock before
/// the missing key's own tick. Ties go to the least recently used key.
///
/// The score's order changes as the clock advances, so vLLM scans every resident key per miss.
/// This implementation picks exactly the same victims without the full scan: keys are grouped by
/// `freq` into classes kept in increasing order (each a list in order of `last`, since an access
/// always makes a key the newest of its new class), so a class's best candidate is its oldest
/// unprotected key; classes are visited from the lowest `freq` up and the walk stops at the first
/// class whose `freq` divided by the age of the oldest resident key already exceeds the best
/// score found, since no key from there on can reach it. Scores are compared exactly by
/// cross-multiplication (no floating point).
///
/// `on_insert`, `on_hit`, `on_erase`: O(1). `victim`: O(1 + classes visited + p), at most
/// O(distinct counts among resident keys); on the ESFT trace it visits a few classes where a scan
/// would visit hundreds of keys. Allocation-free after `reset`. Not thread-safe.
class lfru {
 public:
  static constexpr std::string_view name = "lfru";

  /// Forgets every key and restarts the clock; sizes for `layout.size()` keys.
  /// @throws std::bad_alloc
  void reset(const key_layout& layout) {
    last_.assign(static_cast<std::size_t>(layout.size()), 0);
    classes_.reset(layout.size());
    recency_.reset(layout.size(), 1);
    clock_ = 0;
  }
  void on_insert(cache_key key, const access_context& /*ctx*/) noexcept {
    last_[static_cast<std::size_t>(key)] = ++clock_;
    classes_.insert(key);
    recency_.push_back(0, key);
  }
  void on_hit(cache_key key, const access_context& /*ctx*/) noexcept {
    classes_.promote(key);
    last_[static_cast<std::size_t>(key)] = ++clock_;
    recency_.move_to_back(0, key);
  }
  void on_erase(cache_key key) noexcept {
    classes_.erase(key);
    recency_.remove(key);
  }
  /// The unprotected resident key with the lowest score, or `no_key`.
  [[nodiscard]] cache_key victim(const access_context& /*ctx*/,
                                 protected_keys is_protected) const noexcept {
    const cache_key oldest = recency_.front(0);
    if (oldest == no_key) {
      return no_key;
    }
    const std::uint64_t max_age = age(oldest);  // no resident key is older
    cache_key best = no_key;
    detail::wide_product best_times_max_age;  // freq(best) * max_age, set with best
    for (auto c = classes_.first(); c != classes_.end(); c = classes_.next(c)) {
      const std::uint64_t f = classes_.count_of_class(c);
      // Every key from this class on scores at least f / max_age: stop once that is worse.
      if (best != no_key && detail::multiply(f, age(best)) > best_times_max_age) {
        break;
      }
      const cache_key candidate = classes_.first_unprotected(c, is_protected);
      if (candidate != no_key && (best == no_key || before(candidate, best))) {
        best = candidate;
        best_times_max_age = detail::multiply(f, max_age);
      }
    }
    return best;
  }

  /// Current score of a resident key (for reports and tests).
  [[nodiscard]] double score(cache_key key) const noexcept {
    return static_cast<double>(classes_.count_of(key)) / static_cast<double>(age(key));
  }
  /// The clock: number of accesses seen since `reset`.
  [[nodiscard]] std::uint64_t clock() const noexcept { return clock_; }

 private:
  [[nodiscard]] std::uint64_t age(cache_key key) const noexcept {
    return clock_ - last_[static_cast<std::size_t>(key)] + 1;
  }
  // a evicts before b: freq_a / age_a < freq_b / age_b, then older last access.
  [[nodiscard]] bool before(cache_key a, cache_key b) const noexcept {
    const detail::wide_product lhs = detail::multiply(classes_.count_of(a), age(b));
    const detail::wide_product rhs = detail::multiply(classes_.count_of(b), age(a));
    return lhs < rhs ||
           (lhs == rhs && last_[static_cast<std::size_t>(a)] < last_[static_cast<std::size_t>(b)]);
  }

  std::vector<std::uint64_t> last_;
  detail::frequency_classes classes_;  // resident keys by freq, each class oldest `last` first
  detail::key_lists recency_;          // every resident key, oldest `last` first
  std::uint64_t clock_ = 0;
};
static_assert(eviction_policy<lfru>);

}  // namespace wisp
