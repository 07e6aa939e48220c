// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Layer-position-aware policies: `least_stale` (SpecMD §4) and `fld` (farthest layer
/// distance).
///
/// Both rank a resident key by its *layer distance* from the layer now executing, `c`:
///
///     d(key) = (layer(key) - c) mod L        in [0, L)
///
/// Layers run 0, 1, ..., L-1 in every forward pass, so `d` is the number of layer executions
/// until the key's layer runs again: the key needed last has the largest `d`. Layers already
/// passed in this pass (`layer < c`) have `d >= L - c`, larger than any layer still ahead
/// (`d <= L - 1 - c`), so they rank first; among them the layer passed most recently (c - 1) is
/// needed last (next pass) and goes first. In per-layer scope every key of a cache has the same
/// layer, `d` is constant and both policies reduce to their tie-break.
#pragma once

#include <wisp/cache/detail/key_lists.hpp>
#include <wisp/cache/eviction_policy.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace wisp {

/// @brief Farthest layer distance: evicts the unprotected resident key with the largest
/// `d = (layer(key) - ctx.layer) mod L`; ties go to the least recently used.
///
/// One intrusive LRU list per layer. `on_insert`, `on_hit`, `on_erase`: O(1). `victim`: O(L + p),
/// p = protected keys skipped. Allocation-free after `reset`. Not thread-safe.
class fld {
 public:
  static constexpr std::string_view name = "fld";

  /// Forgets every key; sizes for `layout.size()` keys and `layout.layers` layers.
  /// @throws std::bad_alloc
  void reset(const key_layout& layout) {
    layout_ = layout;
    lists_.reset(layout.size(), layout.layers);
  }
  void on_insert(cache_key key, const access_context& ctx) noexcept {
    lists_.push_back(layout_.layer_of(key, ctx.layer), key);
  }
  void on_hit(cache_key key, const access_context& /*ctx*/) noexcept {
    lists_.move_to_back(lists_.list_of(key), key);
  }
  void on_erase(cache_key key) noexcept { lists_.remove(key); }
  /// See the class description; `no_key` if every resident key is protected.
  [[nodiscard]] cache_key victim(const access_context& ctx,
                                 protected_keys is_protected) const noexcept {
    const std::int32_t layers = layout_.layers;
    for (std::int32_t d = layers - 1; d >= 0; --d) {
      const cache_key k = lists_.first_unprotected((ctx.layer + d) % layers, is_protected);
      if (k != no_key) {
        return k;
      }
    }
    return no_key;
  }

 private:
  key_layout layout_;
  detail::key_lists lists_;  // one list per layer, front = least recently used
};
static_assert(eviction_policy<fld>);

/// @brief SpecMD's Least-Stale. A resident key is *current* if it was accessed in the current
/// forward pass (`step == ctx.step`), *stale* otherwise. The eviction order, first to last, is the
/// lexicographic order of
///
///   1. stale before current (SpecMD: current experts are evicted only when nothing else can go);
///   2. larger layer distance `d = (layer(key) - ctx.layer) mod L` first, i.e. layers already
///      passed in this pass first, the most recently passed of them first, then the layers still
///      ahead from the farthest to the nearest, the executing layer last;
///   3. least recently used first (distinct keys have distinct last-access times).
///
/// Why (2) orders by distance rather than SpecMD's "FIFO by layer position": the distance is when
/// the key's layer runs next, so (2) is Belady's choice for the cyclic layer order. It evicts the
/// just-finished layer before layer 0 (needed first in the next pass), which is what avoids the
/// cyclic-scan pathology where FIFO/LRU miss on every access once the pass does not fit. Steps
/// must be non-decreasing.
///
/// One intrusive LRU list per layer; stale keys form a prefix of each list (steps never go back),
/// so one walk per layer finds both classes. `on_insert`, `on_hit`, `on_erase`: O(1). `victim`:
/// O(L + p), p = protected keys skipped. Allocation-free after `reset`. Not thread-safe.
class least_stale {
 public:
  static constexpr std::string_view name = "least_stale";

  /// Forgets every key; sizes for `layout.size()` keys and `layout.layers` layers.
  /// @throws std::bad_alloc
  void reset(const key_layout& layout) {
    layout_ = layout;
    lists_.reset(layout.size(), layout.layers);
    step_.assign(static_cast<std::size_t>(layout.size()), 0);
  }
  void on_insert(cache_key key, const access_context& ctx) noexcept {
    step_[static_cast<std::size_t>(key)] = ctx.step;
    lists_.push_back(layout_.layer_of(key, ctx.layer), key);
  }
  void on_hit(cache_key key, const access_context& ctx) noexcept {
    step_[static_cast<std::size_t>(key)] = ctx.step;
    lists_.move_to_back(lists_.list_of(key), key);
  }
  void on_erase(cache_key key) noexcept { lists_.remove(key); }
  /// See the class description; `no_key` if every resident key is protected.
  [[nodiscard]] cache_key victim(const access_context& ctx,
                                 protected_keys is_protected) const noexcept {
    const std::int32_t layers = layout_.layers;
    cache_key current = no_key;
    for (std::int32_t d = layers - 1; d >= 0; --d) {
      const cache_key k = lists_.first_unprotected((ctx.layer + d) % layers, is_protected);
      if (k == no_key) {
        continue;
      }
      if (step_[static_cast<std::size_t>(k)] != ctx.step) {
        return k;  // the farthest layer holding an unprotected stale key
      }
      if (current == no_key) {
        current = k;
      }
    }
    return current;
  }

  /// True if resident `key` was last accessed in forward pass `step`.
  [[nodiscard]] bool is_current(cache_key key, std::uint32_t step) const noexcept {
    return step_[static_cast<std::size_t>(key)] == step;
  }

 private:
  key_layout layout_;
  detail::key_lists lists_;          // one list per layer, front = least recently used
  std::vector<std::uint32_t> step_;  // step of the last access
};
static_assert(eviction_policy<least_stale>);

}  // namespace wisp
