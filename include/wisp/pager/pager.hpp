// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `pager<Policy>`: the per-layer paging step of a MoE forward pass (WiSP §3.2,
/// Algorithm 1). Given one layer's routed `topk_ids`, it updates that layer's slot cache and hands
/// back the **expert map** (logical expert -> slot, or -1) and the **copy plan** (which host
/// masters to copy into which slots) for an unmodified fused-MoE kernel.
///
/// The map exposes **exactly** the experts of the call, not everything resident (vLLM's newest
/// `CachedWeightProvider`): with a token or expert split, an expert already summed by an earlier
/// group must not be visible again. Batches whose expert union exceeds the capacity are split with
/// `plan_token_groups` (fewest contiguous row groups; exact) or `plan_expert_groups` (a partition
/// of the union; each expert fetched at most once per forward) and each group is prepared in turn.
/// @code
/// wisp::pager<wisp::lru> pager({.layers = 24, .experts = 64, .top_k = 8, .capacity = 16});
/// std::vector<std::int32_t> ids = router_topk(hidden);        // [tokens x 8], row-major
/// wisp::prepare_result r = pager.prepare(layer, ids, tokens, 8);
/// for (const wisp::copy_op& op : r.copy_plan) {
///   copy_engine.h2d(master(op.expert), slot(op.slot));
/// }
/// fused_moe(hidden, ids, weights, slots, r.expert_map);  // same stream as the copies
/// pager.end_call(layer);  // once the kernel is done, if the layer is resized before its next call
/// @endcode
#pragma once

#include <wisp/cache/eviction_policy.hpp>
#include <wisp/cache/slot_cache.hpp>
#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/core/shape.hpp>
#include <wisp/core/topk.hpp>
#include <wisp/pager/group_planner.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

namespace wisp {

/// @brief What one `prepare` did, as views into pager-owned buffers of that layer.
///
/// Per-layer scope: valid until the next `prepare*` call **on the same layer**, a `resize_layer`
/// or `invalidate` of that layer, or until the pager is moved or destroyed. Global scope: until the
/// next `prepare*` on **any** layer (another layer's call may evict this one's experts), a
/// `resize_pool` or an `invalidate`. Trivially copyable.
struct prepare_result {
  std::int32_t layer = 0;
  /// `int32[experts]`: the slot of every expert of this call, -1 for every other expert (also for
  /// experts that are resident but not requested). In global scope slots index the shared pool.
  std::span<const std::int32_t> expert_map;
  /// The misses of this call, in access order: copy master `expert` into `slot` before the kernel
  /// runs. Slots are distinct and none holds another expert of this call.
  std::span<const copy_op> copy_plan;
  /// The distinct experts of this call in first-seen order (the order they were accessed).
  std::span<const std::int32_t> experts;
  /// Distinct experts that were resident; `hits + misses == experts.size()`.
  std::int32_t hits = 0;
  std::int32_t misses = 0;  ///< distinct experts that were not (`== copy_plan.size()`)
};

/// @brief What one `prefetch` did, as views into a pager-owned buffer: valid until the next
/// `prefetch`, or until the pager is moved or destroyed. Trivially copyable.
struct prefetch_result {
  std::int32_t layer = 0;
  /// Copies to issue, in candidate order: master `expert` into `slot`. Issue them at a lower
  /// priority than any call's copy plan (a demand copy must never wait behind a speculation).
  /// No slot holds an expert of the pending call.
  std::span<const copy_op> copy_plan;
  std::int32_t resident = 0;  ///< distinct candidates already resident (no copy)
  std::int32_t dropped = 0;   ///< distinct candidates left out: no slot could be taken
};

/// @brief Configuration of a `pager`.
struct pager_config {
  std::int32_t layers = 1;   ///< MoE layers, >= 1
  std::int32_t experts = 1;  ///< experts per layer E (or rows of the expert tensor when adapter
                             ///< experts are rerouted into it, see `reroute_table`), >= 1
  std::int32_t top_k = 1;    ///< the model's k; every capacity must be >= k
  /// Slots per layer (`cache_scope::per_layer`) or of the shared pool (`cache_scope::global`).
  std::int32_t capacity = 1;
  /// Per-layer scope only: slots of each layer (size `layers`); empty = `capacity` everywhere.
  std::vector<std::int32_t> layer_capacities = {};
  /// `per_layer` (WiSP: one cache per layer) or `global` (one pool over (layer, expert) keys).
  cache_scope scope = cache_scope::per_layer;
  /// Rows a token/expert split plans without allocating (`max_tokens x top_k` ids); a larger
  /// batch grows the planner once, or call `reserve_tokens` at start-up. `prepare` never
  /// depends on it.
  std::int32_t max_tokens = 0;

  /// @brief The config of a pager for `shape` with `capacity` slots per layer (or in the shared
  /// pool), every other field at its default. O(1).
  [[nodiscard]] static pager_config for_shape(const moe_shape& shape, std::int32_t capacity,
                                              cache_scope scope = cache_scope::per_layer) {
    pager_config c;
    c.layers = shape.layers;
    c.experts = shape.experts;
    c.top_k = shape.top_k;
    c.capacity = capacity;
    c.scope = scope;
    return c;
  }
  /// The routing shape `{layers, experts, top_k}`. O(1).
  [[nodiscard]] constexpr moe_shape shape() const noexcept { return {layers, experts, top_k}; }
};

/// @brief Per-layer expert paging over `slot_cache<Policy>` (or one global pool).
///
/// - **Hot path.** `prepare` is O(tokens x k) and allocation-free: every buffer is sized at
///   construction from `experts` (maps, distinct-expert lists, copy plans) — the
///   number of distinct experts of one call never exceeds `experts`, so `prepare` has no
///   max-token limit. Distinct experts are accessed in first-seen order; all of them are
///   protected for the whole call, so no miss evicts an expert of the same call. The ids are
///   checked once, up front; the cache call then runs without re-checking them (its bulk
///   path), deduplicating while it protects. With a whole-call policy (`lru`, see
///   `call_eviction_policy`) the call has no branch on hit or miss.
/// - **Policy context.** `ctx.layer` is the layer; `ctx.step` is `step()` (advance it with
///   `begin_step()` once per forward pass — Least-Stale and collision counts use it); `ctx.time`
///   counts the accesses of the cache serving the layer (so a per-layer `belady` is built from that
///   layer's sequence of distinct experts, first-seen order, call after call); `ctx.position` is
///   the token position given to `prepare` (per expert for a batch of rows; 0 without), so that a
///   position-aware policy serves as it simulates.
/// - **Errors.** Invalid arguments throw `wisp::logic_error` naming the values and leave the pager
///   unchanged, including every previously returned result.
/// - **Thread safety:** none; one thread at a time (like a std container).
template <eviction_policy Policy>
class pager {
 public:
  using policy_type = Policy;
  using cache_type = slot_cache<Policy>;

  /// Every cache gets a copy of `prototype`.
  /// @throws wisp::logic_error if a count is not positive, `layer_capacities` has the wrong size or
  ///   is given in global scope, or a capacity is outside `[top_k, experts]` (per layer) or
  ///   `[top_k, layers * experts]` (global); std::bad_alloc.
  explicit pager(const pager_config& config, const Policy& prototype = Policy{})
      : pager(config, [&prototype](std::int32_t) { return prototype; }) {}

  /// Cache `c` gets `make_policy(c)`: `c` is the layer (per-layer scope) or 0 (global). Use it
  /// for policies built from a per-layer future (`belady`). @throws as the other constructor.
  template <class MakePolicy>
  requires std::invocable<MakePolicy&, std::int32_t> &&
      std::convertible_to<std::invoke_result_t<MakePolicy&, std::int32_t>, Policy>
      pager(const pager_config& config, MakePolicy make_policy);

  // ------------------------------------------------------------------ the paging step

  /// @brief Makes exactly the experts of `topk_ids` (`[tokens x k]`, row-major) of `layer`
  /// resident and visible, in one call of that layer's cache.
  ///
  /// An empty batch (`tokens == 0`) is valid: no access, an empty plan, a map of all -1.
  /// O(tokens x k) + policy hooks; no allocation.
  /// @throws wisp::logic_error, leaving everything unchanged, if `layer` is outside
  ///   `[0, layers)`, `tokens < 0`, `k < 1`, `topk_ids.size() != tokens * k`, an id is outside
  ///   `[0, experts)`, or the call has more distinct experts than the capacity (split it first
  ///   with `plan_token_groups` / `plan_expert_groups`; a single row over the capacity is
  ///   reported as "one token routes to N experts but capacity C").
  /// @throws wisp::logic_error if the policy breaks its contract (names a victim that is not a
  ///   resident unprotected key). The layer's map then shows no expert; a whole-call policy's
  ///   call is undone, while with a per-access policy the accesses before the failing one stand.
  prepare_result prepare(std::int32_t layer, std::span<const std::int32_t> topk_ids,
                         std::int32_t tokens, std::int32_t k) {
    return prepare_impl("pager::prepare", layer, topk_ids, tokens, k);
  }
  /// @copydoc prepare
  prepare_result prepare(std::int32_t layer, std::span<const std::int64_t> topk_ids,
                         std::int32_t tokens, std::int32_t k) {
    return prepare_impl("pager::prepare", layer, topk_ids, tokens, k);
  }

  /// @brief `prepare` with the token positions that position-aware policies read
  /// (`access_context::position`, e.g. `reuse_probability`, `learned_belady`): `positions` holds
  /// one position for the whole call (decode at batch 1), or one per row (`tokens` entries), in
  /// which case each distinct expert's access carries the position of the first row that routes
  /// to it. Empty: position 0, as `prepare` without positions. Same semantics, costs and errors
  /// as `prepare`, plus:
  /// @throws wisp::logic_error, leaving everything unchanged, if `positions` has neither 0, 1 nor
  ///   `tokens` entries.
  prepare_result prepare(std::int32_t layer, std::span<const std::int32_t> topk_ids,
                         std::int32_t tokens, std::int32_t k,
                         std::span<const std::uint32_t> positions) {
    return prepare_impl("pager::prepare", layer, topk_ids, tokens, k, positions);
  }
  /// @copydoc prepare(std::int32_t, std::span<const std::int32_t>, std::int32_t, std::int32_t,
  /// std::span<const std::uint32_t>)
  prepare_result prepare(std::int32_t layer, std::span<const std::int64_t> topk_ids,
                         std::int32_t tokens, std::int32_t k,
                         std::span<const std::uint32_t> positions) {
    return prepare_impl("pager::prepare", layer, topk_ids, tokens, k, positions);
  }

  /// Makes exactly `experts` (duplicates allowed) of `layer` visible: one group of a split.
  /// Same semantics, costs and errors as `prepare` over a `[experts.size() x 1]` batch.
  prepare_result prepare_experts(std::int32_t layer, std::span<const std::int32_t> experts) {
    WISP_EXPECTS(experts.size() <= static_cast<std::size_t>(experts_),
                 "pager::prepare_experts: ", experts.size(), " experts given but the layer has ",
                 experts_);  // a larger list has duplicates or bad ids; keeps tokens in int32
    return prepare_impl("pager::prepare_experts", layer, experts,
                        static_cast<std::int32_t>(experts.size()), 1);
  }
  /// Prepares one token group (`prepare_experts(layer, group.experts)`).
  prepare_result prepare(std::int32_t layer, const token_group& group) {
    return prepare_experts(layer, group.experts);
  }
  /// Prepares one expert group (`prepare_experts(layer, group.experts)`).
  prepare_result prepare(std::int32_t layer, const expert_group& group) {
    return prepare_experts(layer, group.experts);
  }

  // ------------------------------------------------------------------ prefetch

  /// @brief Loads the `candidates` of `layer` (best first; duplicates ignored) ahead of its next
  /// call, and returns the copies to issue (SpecMD §3.1.4). No map shows a prefetched expert
  /// before the call that requests it.
  ///
  /// Each candidate that is not resident takes a free slot or the slot of the policy's victim
  /// (`slot_cache::prefetch`); victims are never experts of the **pending call** (the most recent
  /// `prepare*`, whose kernel may still be reading its slots: in global scope always, in per-layer
  /// scope when `layer` is that call's layer) nor other candidates of this prefetch. A candidate
  /// with no slot left is dropped. The policy sees an insertion in the current step: Least-Stale
  /// treats prefetched experts as *current*. An expert a prefetch evicts disappears from every map
  /// that showed it. Candidates already resident change nothing.
  ///
  /// O(candidates) + policy hooks; no allocation.
  /// @throws wisp::logic_error, leaving everything unchanged, on a bad layer or a candidate
  ///   outside `[0, experts)`; or if the policy breaks its contract (as `prepare`).
  prefetch_result prefetch(std::int32_t layer, std::span<const std::int32_t> candidates);

  /// @brief Ends `layer`'s current call, once its kernel no longer reads the slots: its experts
  /// stop being protected (a `resize_layer` or a prefetch may now evict them) and disappear from
  /// the layer's map. Nothing is evicted or counted; the cache's contents and the policy are
  /// unchanged, and results of the layer's last `prepare*` are no longer valid.
  ///
  /// For a resize, the same as an empty `prepare(layer, {}, 0, k)`, without starting a call. In
  /// global scope the pool protects only the pending call, so ending another layer only hides
  /// its map. The pending call is over (`pending_layer()` becomes -1) if it was `layer`'s.
  /// O(experts of the call). Not thread-safe.
  /// @code
  /// pager.end_call(layer);                        // the layer's kernel has finished
  /// auto report = pager.resize_layer(layer, 12);  // may now evict the call's experts
  /// @endcode
  /// @throws wisp::logic_error (nothing changed) if `layer` is outside `[0, layers)`.
  void end_call(std::int32_t layer);

  /// The layer of the pending call (the most recent `prepare*`), or -1 before the first.
  [[nodiscard]] std::int32_t pending_layer() const noexcept { return pending_layer_; }

  // ------------------------------------------------------------------ splitting a wide batch

  /// @brief The fewest contiguous row groups of the batch whose expert unions fit the capacity of
  /// `layer` (see `group_planner::plan_token_groups`). Does not touch the cache.
  ///
  /// The plan views the pager's planner buffers: valid until the next `plan_*` or
  /// `reserve_tokens` call (`prepare` does not invalidate it, so prepare the groups in turn).
  /// @throws wisp::logic_error on a bad layer, shape or id, or a single row over the capacity.
  std::span<const token_group> plan_token_groups(std::int32_t layer,
                                                 std::span<const std::int32_t> topk_ids,
                                                 std::int32_t tokens, std::int32_t k) {
    return planner_.plan_token_groups(topk_ids, tokens, k,
                                      capacity_for("plan_token_groups", layer));
  }
  /// @copydoc plan_token_groups
  std::span<const token_group> plan_token_groups(std::int32_t layer,
                                                 std::span<const std::int64_t> topk_ids,
                                                 std::int32_t tokens, std::int32_t k) {
    return planner_.plan_token_groups(topk_ids, tokens, k,
                                      capacity_for("plan_token_groups", layer));
  }

  /// @brief Partitions the batch's distinct experts into `ceil(union / capacity)` groups, experts
  /// resident in `layer`'s cache first (see `group_planner::plan_expert_groups`). Does not touch
  /// the cache. Same lifetime and errors as `plan_token_groups` (no per-row limit).
  std::span<const expert_group> plan_expert_groups(std::int32_t layer,
                                                   std::span<const std::int32_t> topk_ids,
                                                   std::int32_t tokens, std::int32_t k) {
    return plan_expert_groups_impl(layer, topk_ids, tokens, k);
  }
  /// @copydoc plan_expert_groups
  std::span<const expert_group> plan_expert_groups(std::int32_t layer,
                                                   std::span<const std::int64_t> topk_ids,
                                                   std::int32_t tokens, std::int32_t k) {
    return plan_expert_groups_impl(layer, topk_ids, tokens, k);
  }

  /// Grows the planner so batches of `tokens x k` ids plan without allocation. Invalidates plans.
  void reserve_tokens(std::int32_t tokens, std::int32_t k) { planner_.reserve(tokens, k); }

  // ------------------------------------------------------------------ steps, residency, resizing

  /// Starts the next forward pass (`step()` + 1). O(1).
  void begin_step() noexcept { ++step_; }
  /// The current forward-pass index given to the policies as `ctx.step`.
  [[nodiscard]] std::uint32_t step() const noexcept { return step_; }

  /// Drops `expert` of `layer` from its cache (its slot returns to the free list) and hides it
  /// from that layer's current map. No-op if absent. O(1). @returns whether it was resident.
  /// @throws wisp::logic_error on an out-of-range layer or expert.
  bool invalidate(std::int32_t layer, std::int32_t expert);

  /// Per-layer scope: changes `layer`'s slot count (see `slot_cache::resize`; the caller copies
  /// each reported move's bytes `from` -> `to` and may free slots `>= capacity`). The layer's
  /// current map is updated to the new slots; the experts of its current call stay resident
  /// (`end_call` first to release them). Strong guarantee. No allocation but the report.
  /// `resize_layer_rows` (wisp/pager/resize_layer_rows.hpp) does this together with the
  /// layer's expert tensor.
  /// @throws wisp::logic_error in global scope, on a bad layer, or if `capacity` is outside
  ///   `[top_k, experts]` or cannot be reached without evicting the layer's current experts.
  resize_report resize_layer(std::int32_t layer, std::int32_t capacity);

  /// Global scope: changes the pool's slot count (see `resize_layer`); every layer's current map
  /// is updated (an expert evicted by the shrink becomes -1 in its layer's map).
  /// @throws wisp::logic_error in per-layer scope or if `capacity` is outside
  ///   `[top_k, layers * experts]` or cannot be reached without evicting the current call's keys.
  resize_report resize_pool(std::int32_t capacity);

  // ------------------------------------------------------------------ queries

  [[nodiscard]] std::int32_t layers() const noexcept { return layers_; }
  [[nodiscard]] std::int32_t experts() const noexcept { return experts_; }
  [[nodiscard]] std::int32_t top_k() const noexcept { return top_k_; }
  [[nodiscard]] cache_scope scope() const noexcept { return scope_; }
  /// Slots available to `layer` (the pool's in global scope). @throws on a bad layer.
  [[nodiscard]] std::int32_t capacity(std::int32_t layer) const {
    return capacity_for("pager::capacity", layer);
  }
  /// Slot of `expert` of `layer` if resident (whether or not visible), else -1. O(1).
  /// @throws wisp::logic_error on an out-of-range layer or expert.
  [[nodiscard]] std::int32_t slot_of(std::int32_t layer, std::int32_t expert) const {
    check_expert("pager::slot_of", layer, expert);
    return cache_of(layer).slot_of(key_of(layer, expert));
  }
  /// The layer's current map (as returned by its last `prepare`; all -1 before). O(1).
  [[nodiscard]] std::span<const std::int32_t> expert_map(std::int32_t layer) const {
    check_layer("pager::expert_map", layer);
    return {maps_.data() + offset(layer), static_cast<std::size_t>(experts_)};
  }
  /// The cache serving `layer` (the shared pool in global scope). @throws on a bad layer.
  [[nodiscard]] const cache_type& cache(std::int32_t layer) const {
    check_layer("pager::cache", layer);
    return cache_of(layer);
  }
  /// Counters of the cache serving `layer`. @throws on a bad layer.
  [[nodiscard]] const cache_stats& stats(std::int32_t layer) const { return cache(layer).stats(); }
  /// Counters summed over every cache. O(layers).
  [[nodiscard]] cache_stats stats() const noexcept {
    return total_stats(std::span<const cache_type>(caches_));
  }

 private:
  template <topk_id Id>
  prepare_result prepare_impl(const char* where, std::int32_t layer, std::span<const Id> ids,
                              std::int32_t tokens, std::int32_t k,
                              std::span<const std::uint32_t> positions = {});
  template <topk_id Id>
  [[noreturn]] void fail_over_capacity(const char* where, std::int32_t layer,
                                       std::span<const Id> ids, std::int32_t k,
                                       std::int32_t distinct);
  template <topk_id Id>
  std::span<const expert_group> plan_expert_groups_impl(std::int32_t layer, std::span<const Id> ids,
                                                        std::int32_t tokens, std::int32_t k);
  void refresh_map(std::int32_t layer);

  void check_layer(const char* where, std::int32_t layer) const {
    WISP_EXPECTS(layer >= 0 && layer < layers_, where, ": layer ", layer,
                 " is outside [0, layers = ", layers_, ")");
  }
  void check_expert(const char* where, std::int32_t layer, std::int32_t expert) const {
    check_layer(where, layer);
    WISP_EXPECTS(expert >= 0 && expert < experts_, where, ": expert ", expert,
                 " is outside [0, experts = ", experts_, ")");
  }
  [[nodiscard]] std::int32_t capacity_for(const char* where, std::int32_t layer) const {
    check_layer(where, layer);
    return cache_of(layer).capacity();
  }
  [[nodiscard]] std::size_t cache_index(std::int32_t layer) const noexcept {
    return scope_ == cache_scope::global ? 0u : static_cast<std::size_t>(layer);
  }
  [[nodiscard]] cache_type& cache_of(std::int32_t layer) noexcept {
    return caches_[cache_index(layer)];
  }
  [[nodiscard]] const cache_type& cache_of(std::int32_t layer) const noexcept {
    return caches_[cache_index(layer)];
  }
  [[nodiscard]] cache_key key_of(std::int32_t layer, std::int32_t expert) const noexcept {
    return scope_ == cache_scope::global ? layer * experts_ + expert : expert;
  }
  [[nodiscard]] std::size_t offset(std::int32_t layer) const noexcept {
    return static_cast<std::size_t>(layer) * static_cast<std::size_t>(experts_);
  }

  std::int32_t pending_layer_ = -1;  // layer of the most recent prepare*
  std::int32_t layers_ = 1;
  std::int32_t experts_ = 1;
  std::int32_t top_k_ = 1;
  cache_scope scope_ = cache_scope::per_layer;
  std::uint32_t step_ = 0;
  std::vector<cache_type> caches_;           // one per layer, or one (global)
  std::vector<std::uint64_t> times_;         // per cache: accesses so far (ctx.time)
  std::vector<std::int32_t> maps_;           // [layers x experts]: slot or -1
  std::vector<std::int32_t> visible_;        // [layers x experts]: first visible_count_[l] used
  std::vector<std::int32_t> visible_count_;  // per layer
  std::vector<copy_op> copies_;              // [layers x experts]: the layer's last copy plan
  std::vector<cache_key> keys_;              // scratch [experts]: the call's keys (ids + base)
  // [3 x experts] for a whole-call policy (else empty): the working arrays of every cache's
  // whole calls, shared by the caches (one thread at a time), so that the calls of different
  // layers reuse the same cache lines
  std::vector<std::int32_t> call_scratch_;
  std::vector<std::uint32_t> key_positions_;  // scratch [experts]: their positions (per-row calls)
  protect_set seen_;                          // scratch: "expert seen" (wide calls, messages)
  protect_set keep_;                          // scratch of prefetch: keys it must not evict
  std::vector<copy_op> prefetch_copies_;      // [experts]: the last prefetch's copy plan
  group_planner planner_;
};

}  // namespace wisp

#include <wisp/pager/detail/pager.inl>
