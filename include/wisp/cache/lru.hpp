// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `lru`: least recently used (`fifo`, the other list-ordered policy, is in fifo.hpp).
#pragma once

#include <wisp/cache/detail/key_lists.hpp>
#include <wisp/cache/eviction_policy.hpp>

#include <string_view>

namespace wisp {

/// @brief Least recently used: evicts the resident key whose last access is oldest.
///
/// An intrusive doubly-linked list over key-indexed arrays. `on_insert`, `on_hit`, `on_erase`:
/// O(1). `victim`: O(1 + p), p = protected keys at the LRU end that it skips (at most the size of
/// the current call). `on_call` (a whole call, see `call_eviction_policy`): O(keys + victims),
/// branch-free but for the victims: one pass moves the call's keys to the back in access order
/// (the order the per-access events leave), then the victims are taken from the front (no
/// protected key is left to skip there). Allocation-free after `reset`. Not thread-safe.
/// @code
/// wisp::slot_cache<wisp::lru> cache(wisp::key_layout{wisp::cache_scope::per_layer, 1, 64}, 8);
/// @endcode
class lru {
 public:
  static constexpr std::string_view name = "lru";

  /// Forgets every key; sizes for `layout.size()` keys. @throws std::bad_alloc
  void reset(const key_layout& layout) { order_.reset(layout.size(), 1); }
  void on_insert(cache_key key, const access_context& /*ctx*/) noexcept {
    order_.push_back(0, key);
  }
  void on_hit(cache_key key, const access_context& /*ctx*/) noexcept {
    order_.move_to_back(0, key);
  }
  void on_erase(cache_key key) noexcept { order_.remove(key); }
  /// The least recently used unprotected resident key, or `no_key`.
  [[nodiscard]] cache_key victim(const access_context& /*ctx*/,
                                 protected_keys is_protected) const noexcept {
    return order_.first_unprotected(0, is_protected);
  }
  /// A whole call: every key becomes most recent in access order; the victims are the least
  /// recently used keys not in the call.
  void on_call(const call_events& call) noexcept {
    order_.take_front_and_append(0, call.keys, call.victims);
  }

 private:
  detail::key_lists order_;  // front = least recently used
};
static_assert(call_eviction_policy<lru>);

namespace detail {
template <>
inline constexpr bool trusted_call_victims<lru> = true;  // tests: cache/whole_call_test.cpp
}  // namespace detail

}  // namespace wisp
