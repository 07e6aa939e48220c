// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `slot_cache<Policy>`: a fixed number of device slots holding keys (experts), with
/// key <-> slot maps, a free list, per-call protection and hit/miss/eviction/collision statistics.
///
/// The cache is pure bookkeeping: it says which slot an expert lives in and which expert a miss
/// displaced; moving the bytes is the caller's job (the pager's copy plan).
/// @code
/// wisp::slot_cache<wisp::lru> cache(wisp::key_layout{wisp::cache_scope::per_layer, 1,
/// /*experts=*/64}, /*capacity=*/8); std::array<wisp::cache_key, 2> ids{3, 17};
/// std::array<wisp::access_result, 2> out{};
/// cache.access_call(ids, {.step = 0, .layer = 0, .time = 0}, out);   // both protected
/// if (!out[0].hit) { /* copy expert 3 into slot out[0].slot */ }
/// @endcode
#pragma once

#include <wisp/cache/detail/inline.hpp>
#include <wisp/cache/eviction_policy.hpp>
#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace wisp {

/// What one access did.
struct access_result {
  std::int32_t slot = -1;      ///< slot that now holds the key
  bool hit = false;            ///< the key was resident before the access
  cache_key evicted = no_key;  ///< key displaced from `slot` by this miss, or `no_key`
  bool collision = false;      ///< miss on a key evicted earlier in the same forward pass (step)

  friend constexpr bool operator==(const access_result&, const access_result&) = default;
};

/// Counters of a cache (or the sum over a set of caches).
struct cache_stats {
  std::uint64_t accesses = 0;
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t evictions = 0;         ///< keys evicted by the policy (accesses and shrinks)
  std::uint64_t collision_misses = 0;  ///< misses on a key evicted earlier in the same step
  std::uint64_t prefetches = 0;        ///< keys loaded by `prefetch` (not accesses)

  /// hits / accesses, or 0 when there were no accesses.
  [[nodiscard]] constexpr double hit_rate() const noexcept {
    return accesses == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(accesses);
  }
  constexpr cache_stats& operator+=(const cache_stats& other) noexcept {
    accesses += other.accesses;
    hits += other.hits;
    misses += other.misses;
    evictions += other.evictions;
    collision_misses += other.collision_misses;
    prefetches += other.prefetches;
    return *this;
  }
  friend constexpr bool operator==(const cache_stats&, const cache_stats&) = default;
};

/// A resident key that `resize` moved from a slot beyond the new capacity to a free slot below it;
/// the caller copies the slot's bytes `from` -> `to`.
struct slot_move {
  cache_key key = no_key;
  std::int32_t from = -1;
  std::int32_t to = -1;
  friend constexpr bool operator==(const slot_move&, const slot_move&) = default;
};

/// What `resize` did: the keys it evicted (in eviction order) and the slots it relocated.
struct resize_report {
  std::vector<cache_key> evicted;
  std::vector<slot_move> moves;
};

/// @brief A fixed-slot cache of keys in `[0, layout.size())` governed by an `eviction_policy`.
///
/// - **Slots** are `[0, capacity)`. A miss takes a free slot (popped from the end of the free list,
///   as vLLM does; do not rely on absolute slot numbers) or, when none is free, the slot of the
///   policy's victim.
/// - **Calls and protection.** Accesses are grouped into *calls* (one MoE layer's request). Every
///   key requested by the current call is protected: the call can never evict it. A call starts at
///   `begin_call(ctx)`, at `access_call(...)`, or implicitly when an access's `(step, layer)`
///   differs from the current call's.
/// - **Collision miss** (SpecMD): a miss on a key that was evicted earlier in the same step.
/// - **Errors** throw `wisp::logic_error` naming the values; a failed operation leaves the cache
///   unchanged (the current call's protect set excepted where stated).
/// - **Cost.** All arrays are sized at construction (O(key_space) memory); no operation except
///   `resize`'s report allocates. Access is O(1) plus the policy's cost.
/// - **Thread safety:** none; one thread at a time (like a std container).
template <eviction_policy Policy>
class slot_cache {
 public:
  using policy_type = Policy;

  /// @param layout    key space (scope, layers, experts); `layout.size()` keys.
  /// @param capacity  number of slots, in `[1, layout.size()]`.
  /// @param policy    the policy value; `reset(layout)` is called on it.
  /// @throws wisp::logic_error on an invalid layout or capacity; std::bad_alloc.
  slot_cache(key_layout layout, std::int32_t capacity, Policy policy = Policy{});

  /// Shorthand: per-layer scope over `key_space` keys (one layer).
  slot_cache(std::int32_t key_space, std::int32_t capacity, Policy policy = Policy{})
      : slot_cache(key_layout{cache_scope::per_layer, 1, key_space}, capacity, std::move(policy)) {}

  // ------------------------------------------------------------------ calls and accesses

  /// Starts a new call for `(ctx.step, ctx.layer)`: the protect set becomes empty. O(1), noexcept.
  void begin_call(const access_context& ctx) noexcept;

  /// Protects `key` for the rest of the current call without accessing it. O(1).
  /// @returns true if `key` was not protected yet in this call (so callers can deduplicate).
  /// @throws wisp::logic_error if `key` is outside `[0, key_space)`.
  bool protect(cache_key key);

  /// One access. Starts a new call first if `(ctx.step, ctx.layer)` differs from the current
  /// call's. The key is protected for the rest of the call. O(1) + policy hook.
  /// @throws wisp::logic_error if `key` or `ctx.layer` is out of range, or on a miss when every
  ///   resident key is protected (the cache is unchanged, the key is not left protected).
  access_result access(cache_key key, const access_context& ctx);

  /// One whole call: starts a call, protects every key of `keys`, then accesses them in order; the
  /// i-th access uses time `ctx.time + i`. Duplicates are allowed (later ones hit).
  /// O(keys.size()) + policy hooks.
  /// @param out receives one result per key; `out.size() >= keys.size()`.
  /// @returns the number of misses.
  /// @throws wisp::logic_error if a key or `ctx.layer` is out of range, `out` is too small, or the
  ///   call requests more distinct keys than `capacity()`. Nothing is accessed then (the previous
  ///   call's protection is gone in the last case).
  std::size_t access_call(std::span<const cache_key> keys, const access_context& ctx,
                          std::span<access_result> out);

  /// @brief One whole call over the *distinct* keys of `keys`, checked once up front, reporting
  /// each access to `visit` instead of through a result array (the pager's hot path).
  ///
  /// Checks `ctx.layer` and every key, starts a call, protects every key, then accesses each
  /// distinct key once, in first-seen order: the i-th distinct key uses time `ctx.time + i`, and
  /// `visit(key, result)` is called right after its access (`result` is only valid during the
  /// call of `visit`). Duplicates are skipped, not accessed again. `visit` must not throw.
  /// O(keys.size()) + policy hooks; no allocation.
  /// @code
  /// cache.access_distinct(ids, {.step = s, .layer = 0, .time = t},
  ///                       [&](wisp::cache_key key, const wisp::access_result& r) {
  ///                         if (!r.hit) { /* copy key into slot r.slot */ }
  ///                       });
  /// @endcode
  /// @returns the number of distinct keys (= accesses made).
  /// @throws wisp::logic_error if `ctx.layer` or a key is out of range, or the call requests more
  ///   distinct keys than `capacity()`. Nothing is accessed then (the previous call's protection is
  ///   gone in the last case, as with `access_call`).
  template <class Visit>
  requires std::invocable<Visit&, cache_key, const access_result&>
      WISP_DETAIL_ALWAYS_INLINE std::size_t access_distinct(std::span<const cache_key> keys,
                                                            const access_context& ctx,
                                                            Visit&& visit);

  /// What `access_call_unchecked` returns.
  struct unchecked_call {
    std::span<const cache_key> keys;  ///< distinct keys of the call, first-seen order
    std::size_t misses = 0;           ///< accesses that missed
  };

  /// @brief The fastest whole call, for a component that has already validated its keys: what
  /// the pager runs per layer, open to any pager-like layer built on `slot_cache`.
  ///
  /// Starts a call, protects every key of `keys` (duplicates allowed) and accesses each distinct
  /// key once, in first-seen order, as `access_distinct` does, but without checking the keys or
  /// the layer and without a per-key `access_result`: a whole-call policy
  /// (`call_eviction_policy`, e.g. `lru`) takes the call in one `on_call`, in branch-free passes.
  /// It reports through two callbacks, neither of which may throw:
  /// - `on_miss(key, slot)` once per miss, in access order, with the key's new slot;
  /// - `note(i, key, slot)` once per distinct key `i`, in order, with the key's slot: -1 for a
  ///   miss whose `on_miss` is still to come (whole-call policies report the misses after the
  ///   notes), else its slot (a caller that stores both ends with every key's slot).
  ///
  /// `positions`, when not empty, holds one token position per key of `keys`, which must then be
  /// distinct: the i-th access's `access_context::position` is `positions[i]` (a batch whose rows
  /// sit at different positions; a whole-call policy's `call_events::ctx` has the first one).
  /// Empty: every access has `ctx.position`.
  ///
  /// `scratch`, when not empty, is where a whole-call policy's call keeps its working arrays:
  /// three of `scratch.size() / 3` entries each, used only during the call (a call of more keys
  /// than that uses the cache's own). Components that run many caches on one thread, such as
  /// `pager` with one cache per layer, give all of them one scratch, so that their calls touch
  /// the same few cache lines instead of each cache's own. It must not be in use by another
  /// call at the same time.
  ///
  /// Precondition: `ctx.layer` is a layer of the layout and every key is in `[0, key_space())`;
  /// violating it is undefined behaviour (check with `access_distinct` when in doubt).
  /// O(keys.size()) + policy hooks; no allocation.
  /// @code
  /// // keys of one layer, checked against [base, base + experts) by the caller
  /// auto call = cache.access_call_unchecked(keys, ctx,
  ///     [&](std::size_t, wisp::cache_key key, std::int32_t slot) { map[key - base] = slot; },
  ///     [&](wisp::cache_key key, std::int32_t slot) { plan.push_back({key - base, slot}); });
  /// @endcode
  /// @returns the distinct keys (valid until the next call) and the number of misses.
  /// @throws wisp::logic_error if the call requests more distinct keys than `capacity()` (nothing
  ///   accessed, the previous call's protection gone, as with `access_call`), or if the policy
  ///   breaks its contract (a whole-call policy's call is then undone, possibly after some
  ///   `note`s and `on_miss`es were made).
  template <class Note, class OnMiss>
  requires std::invocable<Note&, std::size_t, cache_key, std::int32_t> &&
      std::invocable<OnMiss&, cache_key, std::int32_t>
          WISP_DETAIL_ALWAYS_INLINE unchecked_call access_call_unchecked(
              std::span<const cache_key> keys, const access_context& ctx, Note&& note,
              OnMiss&& on_miss, std::span<const std::uint32_t> positions = {},
              std::span<std::int32_t> scratch = {});

  /// @brief Loads `key` ahead of the call that will request it (a prefetch), outside any call:
  /// the current call and its protection are unchanged, and no access is counted.
  ///
  /// A resident key is left as it is (`hit`). Otherwise the key takes a free slot or the slot of
  /// the policy's victim among the resident keys for which `keep` is false (the caller keeps the
  /// experts of pending calls, and the other keys of the same prefetch, out of reach), and the
  /// policy sees `on_insert(key, ctx)`: to Least-Stale, a key prefetched in pass `ctx.step` is
  /// *current*. Counted in `stats().prefetches` (and `evictions`); an expert evicted here and
  /// requested later in the same step is a collision miss. O(1) + policy hooks.
  /// @returns the result (`slot == -1` and nothing changed when every resident key is kept).
  /// @throws wisp::logic_error if `key` or `ctx.layer` is out of range, or if the policy breaks its
  ///   contract (the cache is then unchanged but for an eviction that already happened).
  access_result prefetch(cache_key key, const access_context& ctx, protected_keys keep);

  /// Drops `key` if resident, returning its slot to the free list; no-op otherwise. Not counted
  /// as an eviction. O(1) + `on_erase`. @returns whether it was resident.
  /// @throws wisp::logic_error if `key` is outside `[0, key_space)`.
  bool invalidate(cache_key key);

  /// Changes the number of slots. Growing adds free slots. Shrinking first evicts (through the
  /// policy, never a protected key of the current call) until at most `new_capacity` keys are
  /// resident, then moves keys living in slots `>= new_capacity` into free slots below it.
  /// Strong guarantee (provided the policy's `victim` does not throw). O(capacity + evictions x
  /// policy victim cost). Allocates the report.
  /// @throws wisp::logic_error if `new_capacity` is outside `[1, key_space]`, or if fewer than
  ///   `size() - new_capacity` resident keys are unprotected.
  resize_report resize(std::int32_t new_capacity, const access_context& ctx);

  // ------------------------------------------------------------------ queries (all O(1))

  /// True if `key` is resident. @throws wisp::logic_error if `key` is out of range.
  [[nodiscard]] bool contains(cache_key key) const;
  /// The slot holding `key`, or -1. @throws wisp::logic_error if `key` is out of range.
  [[nodiscard]] std::int32_t slot_of(cache_key key) const;
  /// The key in `slot`, or `no_key`. @throws wisp::logic_error if `slot` is outside
  /// `[0, capacity)`.
  [[nodiscard]] cache_key key_in_slot(std::int32_t slot) const;
  /// True if `key` is protected in the current call. @throws on an out-of-range key.
  [[nodiscard]] bool is_protected(cache_key key) const;

  [[nodiscard]] std::int32_t capacity() const noexcept { return capacity_; }
  [[nodiscard]] std::int32_t size() const noexcept { return capacity_ - free_count(); }
  [[nodiscard]] std::int32_t free_count() const noexcept {
    return static_cast<std::int32_t>(free_size_);
  }
  [[nodiscard]] std::int32_t key_space() const noexcept { return layout_.size(); }
  [[nodiscard]] const key_layout& layout() const noexcept { return layout_; }
  [[nodiscard]] const cache_stats& stats() const noexcept { return stats_; }
  /// Zeroes the counters (the contents stay).
  void reset_stats() noexcept { stats_ = cache_stats{}; }
  [[nodiscard]] const Policy& policy() const noexcept { return policy_; }
  /// The free slots, in pop order reversed (the last one is taken next).
  [[nodiscard]] std::span<const std::int32_t> free_slots() const noexcept {
    return {free_.data(), free_size_};
  }

  /// Calls `f(key, slot)` for every resident key, in slot order. O(capacity).
  template <class F>
  void for_each_resident(F&& f) const {
    for (std::int32_t s = 0; s < capacity_; ++s) {
      if (const cache_key k = slot_to_key_[static_cast<std::size_t>(s)]; k != no_key) {
        f(k, s);
      }
    }
  }

  /// Checks every internal invariant (maps agree, no slot holds two keys, free + resident =
  /// capacity, free slots are empty and distinct). O(key_space). For tests and debugging.
  [[nodiscard]] bool invariants_hold() const;

 private:
  void check_key(cache_key key, const char* what) const;
  // Checks every key of a call at once (branch-free scan; the cold path names the first bad one).
  void check_keys(std::span<const cache_key> keys, const char* what) const;
  void check_context(const access_context& ctx) const;
  void evict(cache_key victim, const access_context& ctx);
  // What `evicted_in_` records for an eviction in `step`: step + 1, so that 0 means never, in 64
  // bits, so that no step's mark is 0.
  [[nodiscard]] static constexpr std::uint64_t eviction_mark(std::uint32_t step) noexcept {
    return static_cast<std::uint64_t>(step) + 1;
  }
  // The miss half of every access: `key` is in range, protected by the current call (which
  // matches `ctx`) and not resident. The 16-byte result comes back in registers.
  // `newly_protected`: the access itself protected `key` (undone if the access fails). Always
  // inlined: as a call it cost `fifo`, `fld` and `least_stale` up to 44% of their time per bulk
  // call (bench/results/2026-11-28-inlined-miss-path.md).
  WISP_DETAIL_ALWAYS_INLINE access_result miss_unchecked(cache_key key, access_context ctx,
                                                         bool newly_protected);
  // The bulk calls count their hits once: the accesses made minus the misses counted since.
  void count_hits(std::size_t accesses, std::uint64_t misses_before) noexcept;
  // Starts a call for `ctx` and protects `keys` (already checked); returns the distinct ones in
  // first-seen order (valid until the next call), or throws (protection cleared) if they exceed
  // the capacity.
  std::span<const cache_key> protect_call(std::span<const cache_key> keys,
                                          const access_context& ctx, const char* where);
  // Thrown by `protect_call` (after clearing the protection).
  [[noreturn]] void fail_protect_call(std::size_t distinct, const access_context& ctx,
                                      const char* where);
  // The accesses of a protected call, one after the other (a repeated key hits).
  template <class Visit>
  void access_each(std::span<const cache_key> keys, const access_context& ctx, Visit& visit,
                   std::span<const std::uint32_t> positions = {});
  struct whole_call {
    std::size_t misses = 0;
    std::size_t from_free = 0;  // the first misses took free slots, the others evicted
  };
  // Where a whole call keeps each key's slot before the call, its misses and its victims (at
  // least as many entries each as the call has keys): the cache's own arrays, or a caller's.
  struct call_scratch {
    std::int32_t* slots;
    cache_key* missed;
    cache_key* victims;
  };
  [[nodiscard]] call_scratch own_scratch() noexcept {
    return {call_slots_.data(), missed_.data(), victims_.data()};
  }
  // The same accesses, slots and counters through the policy's `on_call`, in branch-free passes
  // over the protected distinct `keys` plus one over the misses. Calls `note(i, key, slot)` for
  // each key in order with its slot before the call (-1 for a miss), then `on_miss(key, slot)`
  // for each miss in order with its new slot.
  template <class Note, class OnMiss>
  whole_call access_whole_call(std::span<const cache_key> keys, const access_context& ctx,
                               Note& note, OnMiss& on_miss, call_scratch scratch);
  // `access_whole_call`, then `report_whole_call`; returns the misses.
  template <class Visit>
  std::size_t run_whole_call(std::span<const cache_key> keys, const access_context& ctx,
                             Visit& visit);
  // Reports every access of the last `access_whole_call` to `visit`, in order.
  template <class Visit>
  std::size_t report_whole_call(std::span<const cache_key> keys, const access_context& ctx,
                                whole_call call, Visit& visit);
  // Thrown by `access_whole_call` for a bad victim met at miss `j`, after undoing misses [0, j).
  [[noreturn]] void fail_call_victim(cache_key victim, std::size_t from_free, std::size_t j,
                                     call_scratch scratch);

  key_layout layout_;
  std::int32_t capacity_ = 0;
  Policy policy_;
  std::vector<std::int32_t> key_to_slot_;  // key_space entries, -1 if absent
  std::vector<cache_key> slot_to_key_;     // key_space entries (capacity used), no_key if free
  std::vector<std::int32_t> free_;         // key_space entries, first free_size_ used
  std::size_t free_size_ = 0;
  std::vector<std::uint64_t> evicted_in_;  // key -> step + 1 of its last eviction, 0 = never
  protect_set protect_;                    // the current call's keys
  // Scratch of `access_whole_call` (empty unless the policy takes whole calls): each key's slot
  // before the call, the missed keys, the victims and their previous eviction marks (to undo a
  // failed call). A call has at most `capacity_` distinct keys, so key_space entries suffice.
  std::vector<std::int32_t> call_slots_;
  std::vector<cache_key> missed_;
  std::vector<cache_key> victims_;
  std::vector<std::uint64_t> victim_marks_;
  std::uint32_t call_step_ = 0;
  std::int32_t call_layer_ = -1;
  cache_stats stats_;
};

/// Counters summed over `caches` (the caches of a `per_layer_cache` or a `pager`). O(caches).
template <eviction_policy Policy>
[[nodiscard]] cache_stats total_stats(std::span<const slot_cache<Policy>> caches) noexcept {
  cache_stats total;
  for (const slot_cache<Policy>& c : caches) {
    total += c.stats();
  }
  return total;
}

}  // namespace wisp

#include <wisp/cache/detail/slot_cache.inl>
#include <wisp/cache/detail/slot_cache_resize.inl>
