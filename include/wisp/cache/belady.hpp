// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `belady`: the offline optimum (MIN), built from the whole future access sequence.
#pragma once

#include <wisp/cache/detail/key_heap.hpp>
#include <wisp/cache/eviction_policy.hpp>
#include <wisp/core/error.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>
#include <vector>

namespace wisp {

/// @brief Belady's MIN: evicts the unprotected resident key whose next use is farthest in the
/// future; keys never used again go first (among them the smallest key).
///
/// Built from the sequence of keys this cache will see, in order, with the stream time of each
/// access (by default `0, 1, 2, ...`; pass explicit times when the cache sees a sub-stream, e.g.
/// one layer of a per-layer set). Every access must then carry `ctx.time` equal to the time of the
/// next sequence entry and that entry's key. Given the same protection, no policy has fewer
/// misses on that sequence.
///
/// Next uses are precomputed at construction (O(n) time and memory); an indexed heap on next
/// use gives `on_insert`, `on_hit`, `on_erase` O(log n) and `victim` O(1 + p). Allocation-free
/// after `reset`. Not thread-safe.
/// @code
/// std::vector<wisp::cache_key> future = {0, 1, 2, 0, 1, 3};
/// wisp::slot_cache<wisp::belady> cache(4, 2, wisp::belady(future));
/// @endcode
class belady {
 public:
  static constexpr std::string_view name = "belady";
  /// Next-use value of a key that is never used again.
  static constexpr std::uint64_t never = std::numeric_limits<std::uint64_t>::max();

  /// An empty future (any access is then a contract violation).
  belady() = default;

  /// @param keys  the keys of the accesses, in order; access i happens at time `times[i]`.
  /// @param times increasing stream times, or empty for `0, 1, ..., keys.size() - 1`.
  /// @throws wisp::logic_error if a key is negative, sizes differ or times do not increase.
  explicit belady(std::span<const cache_key> keys, std::span<const std::uint64_t> times = {})
      : keys_(keys.begin(), keys.end()), times_(times.begin(), times.end()) {
    WISP_EXPECTS(times.empty() || times.size() == keys.size(), "belady: ", times.size(),
                 " times for ", keys.size(), " keys");
    cache_key max_key = -1;
    for (std::size_t i = 0; i < keys_.size(); ++i) {
      WISP_EXPECTS(keys_[i] >= 0, "belady: key ", keys_[i], " at position ", i, " is negative");
      WISP_EXPECTS(times_.empty() || i == 0 || times_[i - 1] < times_[i],
                   "belady: times must increase, but position ", i, " has time ",
                   times_.empty() ? 0 : times_[i], " after ",
                   times_.empty() || i == 0 ? 0 : times_[i - 1]);
      max_key = keys_[i] > max_key ? keys_[i] : max_key;
    }
    max_key_ = max_key;
    next_.assign(keys_.size(), never);
    std::vector<std::uint64_t> upcoming(static_cast<std::size_t>(max_key + 1), never);
    for (std::size_t i = keys_.size(); i-- > 0;) {
      const auto k = static_cast<std::size_t>(keys_[i]);
      next_[i] = upcoming[k];
      upcoming[k] = time_at(i);
    }
  }

  /// Forgets every resident key and rewinds to the start of the sequence.
  /// @throws wisp::logic_error if the sequence holds a key outside `[0, layout.size())`.
  void reset(const key_layout& layout) {
    WISP_EXPECTS(max_key_ < layout.size(), "belady: the future sequence holds key ", max_key_,
                 " but the key space is ", layout.size());
    heap_.reset(layout.size());
    cursor_ = 0;
  }
  /// @throws wisp::logic_error if `(key, ctx.time)` is not the next entry of the sequence.
  void on_insert(cache_key key, const access_context& ctx) { consume(key, ctx); }
  /// @throws wisp::logic_error if `(key, ctx.time)` is not the next entry of the sequence.
  void on_hit(cache_key key, const access_context& ctx) { consume(key, ctx); }
  void on_erase(cache_key key) noexcept { heap_.erase(key); }
  /// The unprotected resident key used farthest in the future (never-again first), or `no_key`.
  [[nodiscard]] cache_key victim(const access_context& /*ctx*/,
                                 protected_keys is_protected) noexcept {
    return heap_.min_unprotected(is_protected);
  }

  /// Number of sequence entries consumed so far.
  [[nodiscard]] std::size_t position() const noexcept { return cursor_; }
  /// Length of the sequence.
  [[nodiscard]] std::size_t length() const noexcept { return keys_.size(); }

 private:
  [[nodiscard]] std::uint64_t time_at(std::size_t i) const noexcept {
    return times_.empty() ? static_cast<std::uint64_t>(i) : times_[i];
  }
  void consume(cache_key key, const access_context& ctx) {
    WISP_EXPECTS(cursor_ < keys_.size(), "belady: access to key ", key, " at time ", ctx.time,
                 " beyond the end of the future sequence (", keys_.size(), " accesses)");
    WISP_EXPECTS(keys_[cursor_] == key && time_at(cursor_) == ctx.time, "belady: access to key ",
                 key, " at time ", ctx.time, " but the future sequence says key ", keys_[cursor_],
                 " at time ", time_at(cursor_));
    const std::uint64_t next = next_[cursor_++];
    heap_.set(key, {never - next, 0});  // smallest priority = farthest next use
  }

  std::vector<cache_key> keys_;
  std::vector<std::uint64_t> times_;
  std::vector<std::uint64_t> next_;  // time of the next access to the same key, or never
  cache_key max_key_ = -1;
  detail::key_heap heap_;
  std::size_t cursor_ = 0;
};
static_assert(eviction_policy<belady>);

}  // namespace wisp
