// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The LFU policies: `lfu` (counts while resident) and `lfu_history` (counts over the
/// whole history, as SpecMD defines LFU). vLLM's frequency/recency score is `lfru` (lfru.hpp).
#pragma once

#include <wisp/cache/detail/frequency_classes.hpp>
#include <wisp/cache/eviction_policy.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace wisp {

/// @brief Least frequently used, counting while resident ("in-cache LFU"): evicts the resident
/// key with the fewest accesses since it was last inserted (the count restarts at 1 when an
/// evicted key comes back); ties go to the least recently used. Compare `lfu_history`.
///
/// Keys are grouped by count into classes in increasing order, each in order of last access (the
/// O(1) LFU structure): an insertion joins the lowest class and a hit moves a key into the next
/// one, so no operation searches. `on_insert`, `on_hit`, `on_erase`: O(1). `victim`: O(1 + p),
/// p = protected keys ahead of the answer. Allocation-free after `reset`. Not thread-safe.
class lfu {
 public:
  static constexpr std::string_view name = "lfu";

  /// Forgets every key and every count; sizes for `layout.size()` keys. @throws std::bad_alloc
  void reset(const key_layout& layout) {
    classes_.reset(layout.size());
    count_.assign(static_cast<std::size_t>(layout.size()), 0);
  }
  void on_insert(cache_key key, const access_context& /*ctx*/) noexcept {
    count_[static_cast<std::size_t>(key)] = 1;
    classes_.insert(key);
  }
  void on_hit(cache_key key, const access_context& /*ctx*/) noexcept {
    ++count_[static_cast<std::size_t>(key)];
    classes_.promote(key);
  }
  void on_erase(cache_key key) noexcept { classes_.erase(key); }
  /// The unprotected resident key with the smallest (count, last access), or `no_key`.
  [[nodiscard]] cache_key victim(const access_context& /*ctx*/,
                                 protected_keys is_protected) const noexcept {
    return classes_.lowest_unprotected(is_protected);
  }
  /// The count `key` is ranked by: its accesses since its last insertion (an evicted key shows
  /// the count it left with). 0 for a key never seen.
  [[nodiscard]] std::uint64_t count(cache_key key) const noexcept {
    return count_[static_cast<std::size_t>(key)];
  }

 private:
  detail::frequency_classes classes_;  // resident keys by count, least recently used first
  std::vector<std::uint64_t> count_;
};
static_assert(eviction_policy<lfu>);

/// @brief Least frequently used over the whole history ("perfect LFU", SpecMD's LFU): evicts the
/// resident key with the fewest accesses since `reset`, counting the accesses made while it was
/// evicted too; ties go to the least recently used. Unlike `lfu`, an expert that was popular
/// keeps its rank when it comes back, at the cost of one counter per key for the whole run.
///
/// The same classes as `lfu`, keyed by the whole-history count: a hit moves a key into the next
/// class (O(1)); a returning key re-enters at its old count plus one, found by a walk from the
/// lowest class. `on_hit`, `on_erase`: O(1). `on_insert`: O(1 + c), c = classes of a lower count
/// (few: the keys evicted are the least counted, so they come back near the bottom). `victim`:
/// O(1 + p), p = protected keys ahead of the answer. Allocation-free after `reset`. Not
/// thread-safe.
/// @code
/// wisp::slot_cache<wisp::lfu_history> cache(wisp::key_layout{wisp::cache_scope::global, 26, 64},
/// 208);
/// @endcode
class lfu_history {
 public:
  static constexpr std::string_view name = "lfu_history";

  /// Forgets every key and every count; sizes for `layout.size()` keys. @throws std::bad_alloc
  void reset(const key_layout& layout) {
    classes_.reset(layout.size());
    count_.assign(static_cast<std::size_t>(layout.size()), 0);
  }
  void on_insert(cache_key key, const access_context& /*ctx*/) noexcept {
    classes_.insert(key, ++count_[static_cast<std::size_t>(key)]);
  }
  void on_hit(cache_key key, const access_context& /*ctx*/) noexcept {
    ++count_[static_cast<std::size_t>(key)];
    classes_.promote(key);
  }
  void on_erase(cache_key key) noexcept { classes_.erase(key); }  // the count stays
  /// The unprotected resident key with the smallest (count, last access), or `no_key`.
  [[nodiscard]] cache_key victim(const access_context& /*ctx*/,
                                 protected_keys is_protected) const noexcept {
    return classes_.lowest_unprotected(is_protected);
  }
  /// The count `key` is ranked by: its accesses since `reset`. 0 for a key never seen.
  [[nodiscard]] std::uint64_t count(cache_key key) const noexcept {
    return count_[static_cast<std::size_t>(key)];
  }

 private:
  detail::frequency_classes classes_;  // resident keys by count, least recently used first
  std::vector<std::uint64_t> count_;   // every key's count, resident or not
};
static_assert(eviction_policy<lfu_history>);

}  // namespace wisp
