// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Exact LRU stack (reuse) distance of every access of a stream of dense integer keys.
///
/// The stack distance of an access is the number of distinct keys touched since the previous
/// access of the same key, the key itself included: 1 means "the most recently used key again".
/// An LRU cache of capacity `c` hits the access exactly when its distance is `<= c` (Mattson,
/// Gecsei, Slutz and Traiger, 1970), so one pass over a stream gives the miss count of every
/// capacity at once (see `wisp/reuse/histogram.hpp`).
/// @code
/// wisp::reuse_distance_counter counter{64};   // keys 0..63
/// counter.access(3);   // reuse_distance_counter::cold (first sight)
/// counter.access(5);   // cold
/// counter.access(3);   // 2: {5, 3} were touched since the last 3
/// @endcode
///
/// **Calls.** An engine asks for a layer's `k` experts together, and its cache (wisp's pager,
/// `slot_cache`) never lets one of them evict another. `access_call` measures that cache: every
/// key of a call gets its distance in the stack as it was *before* the call, then the call's keys
/// move to the top. This is still a stack algorithm (a protected LRU cache of capacity `c >= k`
/// holds exactly the `c` most recent keys, the call counted as one step), so one pass still gives
/// every capacity at once.
/// @code
/// const std::uint32_t call[] = {3, 5};
/// std::uint32_t d[2];
/// counter.access_call(call, d);   // d = {1, 2}: both were in the stack before the call
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace wisp {

/// @brief Exact LRU stack distances in O(log D) per access and O(K + D) memory, where K is the
/// key space and D the number of distinct keys seen, independent of the stream length.
///
/// How: every key's most recent access is a mark at its timestamp slot. The distance of a
/// re-access is the number of marks at or after the key's previous slot. Marks live in a bitmap;
/// a Fenwick tree over the bitmap's 64-bit words ("sealed" words: those below the current
/// timestamp's word) counts marks per prefix of words, so a query is one Fenwick prefix sum plus
/// two popcounts, and an access updates the tree at most once (removing the old mark) plus once
/// per 64 accesses (sealing a word). When the slots run out, the live marks are renumbered in
/// order (compaction, O(slots)); slots are kept at least twice the live marks, so compaction is
/// amortised O(1) per access.
///
/// Complexity: `access` is amortised O(log(D / 64)) with no allocation once the slot array is
/// large enough (always, when `distinct_hint >= key_space`; otherwise it doubles when needed).
/// Thread-safety: none; one counter per thread.
class reuse_distance_counter {
 public:
  using key_type = std::uint32_t;
  using distance_type = std::uint32_t;

  /// Distance returned for the first access of a key (a compulsory, "cold" miss).
  static constexpr distance_type cold = std::numeric_limits<distance_type>::max();

  /// @param key_space keys are in `[0, key_space)`.
  /// @param distinct_hint how many distinct keys to size the slot array for up front (default:
  ///        all of `key_space`, which means no allocation ever after construction).
  /// @throws wisp::logic_error if `key_space` is 0 or does not fit in 31 bits.
  explicit reuse_distance_counter(std::size_t key_space, std::size_t distinct_hint = 0);

  /// @brief Records an access of `key` and returns its stack distance (`cold` on first sight).
  /// @throws wisp::logic_error if `key >= key_space()`; the counter is then unchanged.
  distance_type access(key_type key);

  /// @brief Records one call: `out[i]` is the distance of `keys[i]` in the stack as it was before
  /// the call (`cold` on first sight), then every key becomes most recent, in call order. A key
  /// repeated within the call gets distance 1 at its later occurrences (it is resident by then at
  /// every capacity) and is moved again. O(keys.size() log D), no allocation.
  /// @throws wisp::logic_error if a key is `>= key_space()` or `out.size() < keys.size()`; the
  ///         counter is then unchanged.
  void access_call(std::span<const key_type> keys, std::span<distance_type> out);

  /// @brief The distance the next access of `key` would have (`cold` if never seen), without
  /// recording anything. O(log D). @throws wisp::logic_error if `key >= key_space()`.
  [[nodiscard]] distance_type distance_of(key_type key) const;

  /// Forgets every access; keeps the allocated memory.
  void reset() noexcept;

  /// Size of the key space given at construction.
  [[nodiscard]] std::size_t key_space() const noexcept { return last_.size(); }
  /// Number of distinct keys accessed so far.
  [[nodiscard]] std::size_t distinct() const noexcept { return live_; }
  /// Number of accesses so far.
  [[nodiscard]] std::uint64_t accesses() const noexcept { return accesses_; }
  /// Number of timestamp slots currently allocated (at least twice `distinct()`).
  [[nodiscard]] std::size_t slot_capacity() const noexcept { return slot_key_.size(); }

 private:
  static constexpr std::uint32_t no_slot = std::numeric_limits<std::uint32_t>::max();

  [[nodiscard]] std::uint32_t prefix_words(std::uint32_t words) const noexcept;
  [[nodiscard]] distance_type peek(key_type key) const noexcept;  // distance_of, unchecked
  void tree_add(std::uint32_t word, std::uint32_t delta) noexcept;
  void seal_word(std::uint32_t word) noexcept;
  void compact();
  void rebuild_tree() noexcept;

  std::vector<std::uint32_t> last_;      // key -> slot of its latest access, or no_slot
  std::vector<std::uint32_t> slot_key_;  // slot -> key accessed at that timestamp
  std::vector<std::uint64_t> bits_;      // slot marks: bit set = latest access of its key
  std::vector<std::uint32_t> tree_;      // Fenwick tree over sealed words' popcounts, 1-based
  std::uint32_t now_ = 0;                // next timestamp slot
  std::uint32_t live_ = 0;               // marks set = distinct keys seen
  std::uint32_t sealed_ = 0;             // marks in sealed words (those below now_ / 64)
  std::uint64_t accesses_ = 0;
};

}  // namespace wisp

#include <wisp/reuse/detail/reuse_distance.inl>
