// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `decayed_frequency`: an adaptive frequency + recency policy. Evicts the resident key with
/// the smallest exponentially decayed access count, the count being kept for every key, resident
/// or not.
///
/// Each access at forward pass `s` adds `2^(s / half_life)` to its key's count; comparing counts
/// at pass `now` is comparing `sum_i 2^(-(now - s_i) / half_life)`, LRFU's combined recency and
/// frequency value with `F(x) = 2^(-x / half_life)` (Lee et al., "LRFU: a spectrum of policies
/// that subsumes the least recently used and least frequently used policies", IEEE Trans.
/// Computers 50(12), 2001). Two choices differ from LRFU as published:
///
/// - **History outside the cache.** LRFU forgets a block's value when it is evicted. Here every key
///   keeps its decayed count after eviction, as TinyLFU keeps frequencies of non-resident items
///   (Einziger, Friedman and Manes, "TinyLFU: a highly efficient cache admission policy", ACM
///   Trans. Storage 13(4), 2017); with at most `L x E` experts the history costs one double per
///   key (kept in the key's heap priority, beside its last access), and an expert that returns is
///   judged by its whole recent past, not as a newcomer.
/// - **Time is the forward pass** (`ctx.step`), not the access: every layer's cache decays at the
///   same rate whatever its traffic.
///
/// `half_life` (in passes) moves the policy between LFU (infinite) and a recency order (small). On
/// the ESFT trace, per-layer scope, 21 of 64 slots, the misses fall from 1.77x Belady's (LRU) to
/// about 1.49x at the default of 256 passes (docs/predict.md has the sweep).
///
/// The order of the counts does not change as time passes (every count decays by the same factor),
/// so an indexed heap keeps it: `on_insert`, `on_hit`, `on_erase` O(log n), `victim` O(1 + p).
/// Counts are stored scaled (`detail::decay_clock`); every 512 half-lives they are divided by an
/// exact power of two and the heap is rebuilt. Ties (equal counts) go to the least recently
/// used key. Allocation-free after `reset`. Not thread-safe.
/// @code
/// wisp::per_layer_cache<wisp::decayed_frequency> caches(26, 64, 21,
///                                                       wisp::decayed_frequency(/*half_life=*/256));
/// @endcode
#pragma once

#include <wisp/cache/detail/decay_clock.hpp>
#include <wisp/cache/detail/key_heap.hpp>
#include <wisp/cache/eviction_policy.hpp>
#include <wisp/core/error.hpp>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace wisp {

class decayed_frequency {
 public:
  static constexpr std::string_view name = "decayed_frequency";
  /// The default half-life, in forward passes.
  static constexpr double default_half_life = 256.0;

  /// @throws wisp::logic_error unless `half_life` is finite and > 0.
  explicit decayed_frequency(double half_life = default_half_life)
      : clock_(half_life, "decayed_frequency") {}

  /// Forgets every key (and every count); sizes for `layout.size()` keys. @throws std::bad_alloc
  void reset(const key_layout& layout) {
    heap_.reset(layout.size());
    tick_ = 0;
    clock_.reset();
  }
  void on_insert(cache_key key, const access_context& ctx) noexcept { bump(key, ctx); }
  void on_hit(cache_key key, const access_context& ctx) noexcept { bump(key, ctx); }
  void on_erase(cache_key key) noexcept { heap_.erase(key); }  // the count stays
  /// The unprotected resident key with the smallest decayed count (then least recently used), or
  /// `no_key`.
  [[nodiscard]] cache_key victim(const access_context& /*ctx*/,
                                 protected_keys is_protected) noexcept {
    return heap_.min_unprotected(is_protected);
  }

  /// The decayed count of `key` at pass `step` (>= the last access): `sum_i 2^-((step - s_i) /
  /// half_life)`; 0 for a key never accessed.
  [[nodiscard]] double count(cache_key key, std::uint32_t step) const noexcept {
    const double stored = stored_count(heap_.priority(key));
    return stored == 0.0 ? 0.0 : stored * clock_.to_count(step);
  }
  [[nodiscard]] double half_life() const noexcept { return clock_.half_life(); }

 private:
  void bump(cache_key key, const access_context& ctx) noexcept {
    if (!clock_.at(ctx.step)) {
      advance(ctx.step);
    }
    const double count = stored_count(heap_.priority(key)) + clock_.weight();
    heap_.set(key, {std::bit_cast<std::uint64_t>(count), ++tick_});
  }
  // Every key's priority in the heap is its state, kept after an eviction: (the bits of its
  // count scaled by clock_, its last access tick). Non-negative doubles order as their bits.
  [[nodiscard]] static double stored_count(detail::heap_priority prio) noexcept {
    return std::bit_cast<double>(prio.major);
  }
  void advance(std::uint32_t step) noexcept {
    const int shift = clock_.advance(step);
    if (shift == 0) {
      return;
    }
    // Counts that became equal (or 0) may change the order: rescore_all restores it.
    heap_.rescore_all([shift](detail::heap_priority prio) {
      prio.major = std::bit_cast<std::uint64_t>(std::ldexp(stored_count(prio), -shift));
      return prio;
    });
  }

  detail::decay_clock clock_;
  // Every key of the key space by (scaled count, last access tick); the resident ones in order.
  detail::key_heap heap_;
  std::uint64_t tick_ = 0;
};
static_assert(eviction_policy<decayed_frequency>);

}  // namespace wisp
