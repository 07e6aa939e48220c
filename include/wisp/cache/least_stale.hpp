// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `least_stale` (SpecMD §4), the layer-position-aware policy; its stale-blind sibling
/// `fld` (farthest layer distance) is in fld.hpp and ranks by the same distance.
///
/// Both rank a resident key by its *layer distance* from the layer now executing, `c`:
///
///     d(key) = ((layer(key) - c - 1) mod L) + 1        in [1, L]
///
/// Layers run 0, 1, ..., L-1 in every forward pass, so `d` is the number of layer executions
/// until the key's layer runs again *after the current call*: the next layer has `d = 1`, and the
/// executing layer itself has `d = L`, because its keys that the current call did not request
/// (the requested ones are protected) are needed next in the following pass. The key needed last
/// has the largest `d`: first the executing layer, then the layers already passed in this pass,
/// most recently passed first, then the layers still ahead from the farthest to the nearest.
/// In per-layer scope every key of a cache has the same layer, `d` is constant and both policies
/// reduce to their tie-break (they then keep one list, not one per layer).
#pragma once

#include <wisp/cache/detail/layer_lists.hpp>
#include <wisp/cache/eviction_policy.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace wisp {

/// @brief SpecMD's Least-Stale. A resident key is *current* if it was accessed in the current
/// forward pass (`step == ctx.step`), *stale* otherwise. The eviction order, first to last, is the
/// lexicographic order of
///
///   1. stale before current (SpecMD: current experts are evicted only when nothing else can go);
///   2. larger layer distance `d` first (see the file description): the executing layer's
///      unrequested keys, then layers already passed in this pass, the most recently passed of
///      them first, then the layers still ahead from the farthest to the nearest;
///   3. least recently used first (distinct keys have distinct last-access times).
///
/// Why (2) orders by distance rather than SpecMD's "FIFO by layer position": the distance is when
/// the key's layer runs next, so (2) is Belady's choice for the cyclic layer order. It evicts the
/// executing and just-finished layers before layer 0 (needed first in the next pass), avoiding the
/// cyclic-scan pathology where FIFO/LRU miss on every access once the pass does not fit. Steps
/// must be non-decreasing.
///
/// One intrusive LRU list per layer (one in per-layer scope); stale keys form a prefix of each list
/// (steps never go back), so one walk per layer finds both classes. `on_insert`, `on_hit`,
/// `on_erase`: O(1). `victim`: O(L + p) in global scope, O(1 + p) per layer, p = protected keys
/// skipped. Allocation-free after `reset`. Not thread-safe.
class least_stale {
 public:
  static constexpr std::string_view name = "least_stale";

  /// Forgets every key; sizes for `layout.size()` keys and `layout.layers` layers.
  /// @throws std::bad_alloc
  void reset(const key_layout& layout) {
    lists_.reset(layout);
    step_.assign(static_cast<std::size_t>(layout.size()), 0);
  }
  void on_insert(cache_key key, const access_context& ctx) noexcept {
    step_[static_cast<std::size_t>(key)] = ctx.step;
    lists_.insert(key);
  }
  void on_hit(cache_key key, const access_context& ctx) noexcept {
    step_[static_cast<std::size_t>(key)] = ctx.step;
    lists_.touch(key);
  }
  void on_erase(cache_key key) noexcept { lists_.remove(key); }
  /// See the class description; `no_key` if every resident key is protected.
  [[nodiscard]] cache_key victim(const access_context& ctx,
                                 protected_keys is_protected) const noexcept {
    cache_key stale = no_key;
    cache_key current = no_key;
    lists_.farthest_first(ctx.layer, is_protected, [&](cache_key k) {
      if (step_[static_cast<std::size_t>(k)] != ctx.step) {
        stale = k;  // the farthest layer holding an unprotected stale key
        return true;
      }
      if (current == no_key) {
        current = k;
      }
      return false;
    });
    return stale != no_key ? stale : current;
  }

  /// True if resident `key` was last accessed in forward pass `step`.
  [[nodiscard]] bool is_current(cache_key key, std::uint32_t step) const noexcept {
    return step_[static_cast<std::size_t>(key)] == step;
  }

 private:
  detail::layer_lists lists_;
  std::vector<std::uint32_t> step_;  // step of the last access
};
static_assert(eviction_policy<least_stale>);

}  // namespace wisp
