// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `fifo`: first in, first out.
#pragma once

#include <wisp/cache/detail/key_lists.hpp>
#include <wisp/cache/eviction_policy.hpp>

#include <string_view>

namespace wisp {

/// @brief First in, first out: evicts the resident key inserted longest ago; hits do not reorder.
///
/// Same structure and costs as `lru`: one intrusive list, `on_insert`, `on_hit`, `on_erase` O(1),
/// `victim` O(1 + p), p = protected keys skipped; allocation-free after `reset`. Not thread-safe.
class fifo {
 public:
  static constexpr std::string_view name = "fifo";

  /// Forgets every key; sizes for `layout.size()` keys. @throws std::bad_alloc
  void reset(const key_layout& layout) { order_.reset(layout.size(), 1); }
  void on_insert(cache_key key, const access_context& /*ctx*/) noexcept {
    order_.push_back(0, key);
  }
  void on_hit(cache_key /*key*/, const access_context& /*ctx*/) noexcept {}
  void on_erase(cache_key key) noexcept { order_.remove(key); }
  /// The oldest-inserted unprotected resident key, or `no_key`. O(1 + p).
  [[nodiscard]] cache_key victim(const access_context& /*ctx*/,
                                 protected_keys is_protected) const noexcept {
    return order_.first_unprotected(0, is_protected);
  }

 private:
  detail::key_lists order_;  // front = inserted first
};
static_assert(eviction_policy<fifo>);

}  // namespace wisp
