// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief One expert-parallel rank's residency: `rank_expert_map` (the rank's vLLM `expert_map`
/// per layer, validated, with the translation of a call's global ids to the rank's local ids) and
/// `rank_pager<Policy>`, a `pager` over the rank's local ids, in its own device budget, that takes
/// the router's global ids and hands back a global expert map.
///
/// An EP rank holds the host masters of its physical experts (rows `0 .. local_experts - 1` of its
/// expert tensors) and pages them into its own device slots. Its kernel is called with the global
/// `topk_ids` and an `int32[experts]` map from each global id to a device slot, -1 for every
/// expert it does not compute in this call, which is vLLM's `expert_map` convention: so the rank
/// pager's map can replace the engine's EP map as is. With replicas (EPLB), which rank computes a
/// (token, expert) is the dispatcher's choice (`replica_chooser`); the `prepare` overload taking
/// the target ranks keeps only this rank's pairs.
/// @code
/// // Rank 1 of 8 under vLLM's linear placement of 64 experts: local ids 0..7 = experts 8..15.
/// auto placement = wisp::expert_placement::linear(26, 64, 8);
/// wisp::rank_pager<wisp::lru> pager(placement, 1, /*top_k=*/6, /*capacity=*/69);
/// wisp::rank_prepare_result r = pager.prepare(layer, topk_ids, tokens, 6);
/// for (const wisp::copy_op& op : r.copy_plan) copy(master_row(op.expert), slot(op.slot));
/// fused_moe(hidden, topk_ids, weights, slots, r.expert_map);  // global id -> slot or -1
/// @endcode
#pragma once

#include <wisp/cache/eviction_policy.hpp>
#include <wisp/core/error.hpp>
#include <wisp/core/topk.hpp>
#include <wisp/pager/pager.hpp>
#include <wisp/parallel/placement.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace wisp {

/// @brief One rank's `expert_map` for every layer (global logical id -> local id or -1), with the
/// inverse, validated once; and the translation of a call's ids to the distinct local experts the
/// rank computes.
///
/// Construction is O(layers x (experts + local_experts)); `select` is O(tokens x k) and does not
/// allocate (it writes into the map's own scratch, so it is not thread-safe: one per rank, like a
/// pager).
class rank_expert_map {
 public:
  /// @brief From the rank's maps: `maps` is `int32[layers][experts]`, row `l` the rank's vLLM
  /// `expert_map` for layer `l`. A rank may hold no replica of some expert; which ranks hold the
  /// rest is the placement's business.
  /// @throws wisp::logic_error, naming the values, if a count is not positive, `rank < 0`, the
  ///   size is not `layers x experts`, a value is outside `[-1, local_experts)`, or two experts of
  ///   a layer share a local id.
  rank_expert_map(std::int32_t rank, std::int32_t layers, std::int32_t experts,
                  std::int32_t local_experts, std::span<const std::int32_t> maps)
      : rank_(rank), layers_(layers), experts_(experts), local_experts_(local_experts) {
    constexpr const char* where = "rank_expert_map";
    detail::check_ep_dims(where, layers, experts, 1, local_experts);
    WISP_EXPECTS(rank >= 0, where, ": rank must be >= 0, got ", rank);
    WISP_EXPECTS(maps.size() == static_cast<std::size_t>(layers) * experts, where, ": maps holds ",
                 maps.size(), " values but layers x experts = ", layers, " x ", experts, " = ",
                 static_cast<std::int64_t>(layers) * experts);
    std::vector<std::int32_t> owners;
    for (std::int32_t l = 0; l < layers; ++l) {
      detail::check_expert_map(
          where, rank, l,
          maps.subspan(static_cast<std::size_t>(l) * experts, static_cast<std::size_t>(experts)),
          local_experts, owners);
    }
    local_.assign(maps.begin(), maps.end());
    build();
  }
  /// The maps of `rank` in `placement`. @throws wisp::logic_error if the rank is out of range.
  rank_expert_map(const expert_placement& placement, std::int32_t rank)
      : rank_(rank),
        layers_(placement.layers()),
        experts_(placement.experts()),
        local_experts_(placement.local_experts()) {
    for (std::int32_t l = 0; l < layers_; ++l) {
      const auto row = placement.expert_map(rank, l);  // checks the rank
      local_.insert(local_.end(), row.begin(), row.end());
    }
    build();
  }

  [[nodiscard]] std::int32_t rank() const noexcept { return rank_; }
  [[nodiscard]] std::int32_t layers() const noexcept { return layers_; }
  [[nodiscard]] std::int32_t experts() const noexcept { return experts_; }
  [[nodiscard]] std::int32_t local_experts() const noexcept { return local_experts_; }

  /// The rank's `expert_map` of `layer` (`int32[experts]`). @throws on a bad layer.
  [[nodiscard]] std::span<const std::int32_t> expert_map(std::int32_t layer) const {
    check_layer("rank_expert_map::expert_map", layer);
    return {local_.data() + static_cast<std::size_t>(layer) * experts_,
            static_cast<std::size_t>(experts_)};
  }
  /// Local id of global expert `expert` in `layer`, or -1. O(1). @throws on bad indices.
  [[nodiscard]] std::int32_t local_of(std::int32_t layer, std::int32_t expert) const {
    check_layer("rank_expert_map::local_of", layer);
    WISP_EXPECTS(expert >= 0 && expert < experts_, "rank_expert_map::local_of: expert ", expert,
                 " is outside [0, experts = ", experts_, ")");
    return local_[static_cast<std::size_t>(layer) * experts_ + expert];
  }
  /// Global expert in row `local` of `layer`, or -1. O(1). @throws on bad indices.
  [[nodiscard]] std::int32_t logical_of(std::int32_t layer, std::int32_t local) const {
    check_layer("rank_expert_map::logical_of", layer);
    WISP_EXPECTS(local >= 0 && local < local_experts_, "rank_expert_map::logical_of: local id ",
                 local, " is outside [0, local_experts = ", local_experts_, ")");
    return logical_[static_cast<std::size_t>(layer) * local_experts_ + local];
  }

  /// @brief The distinct local experts this rank computes in a call of `layer` (`topk_ids`:
  /// `[tokens x k]` global ids), in first-seen order: every id the rank holds a replica of.
  /// A view into the map's scratch, valid until the next `select`. O(tokens x k), no allocation.
  /// @throws wisp::logic_error (nothing changed) on a bad layer, shape or id.
  template <topk_id Id>
  std::span<const std::int32_t> select(std::int32_t layer, std::span<const Id> topk_ids,
                                       std::int32_t tokens, std::int32_t k) {
    check_call("rank_expert_map::select", layer, topk_ids, tokens, k);
    return collect(layer, topk_ids, [](std::size_t) { return true; });
  }
  /// @brief The same for a call whose pairs were dispatched: `targets` (same shape) holds the rank
  /// computing each (token, expert); only this rank's pairs count.
  /// @throws wisp::logic_error (nothing changed) on a bad layer, shape or id, a `targets` of
  ///   another size, or a pair sent here whose expert this rank holds no replica of.
  template <topk_id Id>
  std::span<const std::int32_t> select(std::int32_t layer, std::span<const Id> topk_ids,
                                       std::span<const std::int32_t> targets, std::int32_t tokens,
                                       std::int32_t k) {
    check_call("rank_expert_map::select", layer, topk_ids, tokens, k);
    WISP_EXPECTS(targets.size() == topk_ids.size(), "rank_expert_map::select: targets holds ",
                 targets.size(), " ranks for ", topk_ids.size(), " ids");
    const std::int32_t* map = local_.data() + static_cast<std::size_t>(layer) * experts_;
    for (std::size_t i = 0; i < topk_ids.size(); ++i) {
      WISP_EXPECTS(targets[i] != rank_ || map[topk_ids[i]] >= 0, "rank_expert_map::select: pair ",
                   i, " (token ", i / static_cast<std::size_t>(k), ") sends expert ",
                   static_cast<std::int64_t>(topk_ids[i]), " of layer ", layer, " to rank ", rank_,
                   ", which holds no replica of it");
    }
    return collect(layer, topk_ids, [&](std::size_t i) { return targets[i] == rank_; });
  }

  /// @brief Writes the global map of `layer` (`out`: `int32[experts]`): the slot of each local
  /// expert in `locals`, read from `local_slots` (`int32[local_experts]`, a pager's map), at its
  /// global id, and -1 everywhere else. O(experts).
  /// @throws wisp::logic_error on a bad layer or sizes, or a local id outside the rank's rows.
  void to_global(std::int32_t layer, std::span<const std::int32_t> locals,
                 std::span<const std::int32_t> local_slots, std::span<std::int32_t> out) const {
    check_layer("rank_expert_map::to_global", layer);
    WISP_EXPECTS(out.size() == static_cast<std::size_t>(experts_) &&
                     local_slots.size() == static_cast<std::size_t>(local_experts_),
                 "rank_expert_map::to_global: out holds ", out.size(), " (want ", experts_,
                 ") and local_slots ", local_slots.size(), " (want ", local_experts_, ")");
    for (const std::int32_t local : locals) {
      WISP_EXPECTS(local >= 0 && local < local_experts_ &&
                       logical_[static_cast<std::size_t>(layer) * local_experts_ + local] >= 0,
                   "rank_expert_map::to_global: local id ", local, " is not a row of layer ", layer,
                   " on rank ", rank_);
    }
    std::fill(out.begin(), out.end(), -1);
    for (const std::int32_t local : locals) {
      out[static_cast<std::size_t>(
          logical_[static_cast<std::size_t>(layer) * local_experts_ + local])] =
          local_slots[static_cast<std::size_t>(local)];
    }
  }

 private:
  void build() {
    logical_.assign(static_cast<std::size_t>(layers_) * local_experts_, -1);
    for (std::int32_t l = 0; l < layers_; ++l) {
      for (std::int32_t e = 0; e < experts_; ++e) {
        const std::int32_t local = local_[static_cast<std::size_t>(l) * experts_ + e];
        if (local >= 0) {
          logical_[static_cast<std::size_t>(l) * local_experts_ + local] = e;
        }
      }
    }
    seen_.assign(static_cast<std::size_t>(local_experts_), 0);
    picked_.reserve(static_cast<std::size_t>(local_experts_));
  }
  void check_layer(const char* where, std::int32_t layer) const {
    WISP_EXPECTS(layer >= 0 && layer < layers_, where, ": layer ", layer,
                 " is outside [0, layers = ", layers_, ")");
  }
  template <topk_id Id>
  void check_call(const char* where, std::int32_t layer, std::span<const Id> ids,
                  std::int32_t tokens, std::int32_t k) const {
    check_layer(where, layer);
    detail::check_topk_shape(where, ids.size(), tokens, k);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= experts_) {
        detail::fail_bad_id(where, ids, i, k, experts_);
      }
    }
  }
  template <topk_id Id, class Keep>
  std::span<const std::int32_t> collect(std::int32_t layer, std::span<const Id> ids, Keep keep) {
    if (++stamp_ == 0) {
      std::fill(seen_.begin(), seen_.end(), 0);
      stamp_ = 1;
    }
    picked_.clear();
    const std::int32_t* map = local_.data() + static_cast<std::size_t>(layer) * experts_;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const std::int32_t local = map[ids[i]];
      if (local >= 0 && keep(i) && seen_[static_cast<std::size_t>(local)] != stamp_) {
        seen_[static_cast<std::size_t>(local)] = stamp_;
        picked_.push_back(local);  // at most local_experts: reserved
      }
    }
    return picked_;
  }

  std::int32_t rank_;
  std::int32_t layers_;
  std::int32_t experts_;
  std::int32_t local_experts_;
  std::vector<std::int32_t> local_;    // [layers][experts]: global -> local or -1
  std::vector<std::int32_t> logical_;  // [layers][local_experts]: local -> global or -1
  std::vector<std::uint32_t> seen_;    // per local id: stamp of the select that saw it
  std::vector<std::int32_t> picked_;   // the last select's locals
  std::uint32_t stamp_ = 0;
};

/// @brief Orders a rank's distinct local experts of one call as the expert-parallel simulator
/// prepares them (`simulate_ep`, and the Python `Pager.prepare(..., targets=...)` of a live rank,
/// so that both count the same hits and misses): the experts already resident in `pager` first,
/// then the others, each part in its given (first-seen) order. The order is what the policy sees
/// within the call, and a call wider than the pager is prepared in groups of its capacity in
/// this order (resident experts in the first). O(n) (`std::stable_partition` may allocate a
/// buffer of `n` ids). Not thread-safe (reads the pager).
/// @throws wisp::logic_error if `layer` or an id is out of range for `pager`.
template <class Pager>
void order_resident_first(const Pager& pager, std::int32_t layer, std::span<std::int32_t> locals) {
  std::stable_partition(locals.begin(), locals.end(),
                        [&](std::int32_t e) { return pager.slot_of(layer, e) >= 0; });
}

/// @brief What one `rank_pager::prepare` did, as views into pager-owned buffers (the lifetime of
/// `prepare_result`, per-layer or global as the pager's scope). Trivially copyable.
struct rank_prepare_result {
  std::int32_t layer = 0;
  /// `int32[experts]`: the device slot of every global expert this rank computes in the call, -1
  /// for every other (vLLM's `expert_map`, for the kernel as is).
  std::span<const std::int32_t> expert_map;
  /// The misses: copy the rank's host master row `expert` (a **local** id) into `slot`.
  std::span<const copy_op> copy_plan;
  /// The call's distinct local experts, first-seen order.
  std::span<const std::int32_t> experts;
  std::int32_t hits = 0;
  std::int32_t misses = 0;
};

/// @brief A `pager<Policy>` over one EP rank's local experts, in that rank's own budget, driven
/// by the router's global ids.
///
/// `prepare` is `select` + `pager::prepare_experts` + the global map: O(tokens x k + experts), no
/// allocation. Errors throw `wisp::logic_error` naming the values and change nothing; a call with
/// more distinct local experts than the capacity is refused as the pager refuses it (split it
/// first). Not thread-safe (one per rank, one thread).
template <eviction_policy Policy>
class rank_pager {
 public:
  /// The pager of `map`'s rank: `capacity` slots in `scope` (global: one pool over all the
  /// rank's (layer, local expert) keys; per-layer: `capacity` in each layer).
  /// @throws wisp::logic_error if `top_k` or `capacity` is invalid for the pager (see
  ///   `pager_config`), e.g. a rank below `top_k` slots.
  rank_pager(rank_expert_map map, std::int32_t top_k, std::int32_t capacity,
             cache_scope scope = cache_scope::global, const Policy& prototype = Policy{})
      : map_(std::move(map)),
        pager_(config(map_, top_k, capacity, scope), prototype),
        global_(static_cast<std::size_t>(map_.layers()) * map_.experts(), -1) {}
  /// The pager of rank `rank` of `placement`. @throws as above, or on a bad rank.
  rank_pager(const expert_placement& placement, std::int32_t rank, std::int32_t top_k,
             std::int32_t capacity, cache_scope scope = cache_scope::global,
             const Policy& prototype = Policy{})
      : rank_pager(rank_expert_map(placement, rank), top_k, capacity, scope, prototype) {}

  /// @brief Makes every expert of the call that this rank holds a replica of resident and
  /// visible. @throws wisp::logic_error (nothing changed) as `rank_expert_map::select` and
  /// `pager::prepare_experts`.
  template <topk_id Id>
  rank_prepare_result prepare(std::int32_t layer, std::span<const Id> topk_ids, std::int32_t tokens,
                              std::int32_t k) {
    return finish(layer, map_.select(layer, topk_ids, tokens, k));
  }
  /// @brief The same for a dispatched call: only the pairs whose `targets` entry is this rank.
  /// @throws wisp::logic_error (nothing changed) as the `select` taking targets.
  template <topk_id Id>
  rank_prepare_result prepare(std::int32_t layer, std::span<const Id> topk_ids,
                              std::span<const std::int32_t> targets, std::int32_t tokens,
                              std::int32_t k) {
    return finish(layer, map_.select(layer, topk_ids, targets, tokens, k));
  }

  /// Ends `layer`'s call (`pager::end_call`): its experts leave the global map too.
  void end_call(std::int32_t layer) {
    pager_.end_call(layer);
    std::fill_n(global_.begin() + static_cast<std::ptrdiff_t>(layer) * map_.experts(),
                map_.experts(), -1);
  }
  /// Starts the next forward pass (`pager::begin_step`).
  void begin_step() noexcept { pager_.begin_step(); }
  /// Slot of global expert `expert` of `layer` on this rank if resident, else -1 (also when the
  /// rank holds no replica of it). @throws on bad indices.
  [[nodiscard]] std::int32_t slot_of(std::int32_t layer, std::int32_t expert) const {
    const std::int32_t local = map_.local_of(layer, expert);
    return local < 0 ? -1 : pager_.slot_of(layer, local);
  }

  [[nodiscard]] const rank_expert_map& map() const noexcept { return map_; }
  /// The pager over local ids (stats, capacity, cache...).
  [[nodiscard]] const pager<Policy>& local_pager() const noexcept { return pager_; }

 private:
  static pager_config config(const rank_expert_map& map, std::int32_t top_k, std::int32_t capacity,
                             cache_scope scope) {
    pager_config c;
    c.layers = map.layers();
    c.experts = map.local_experts();
    c.top_k = top_k;
    c.capacity = capacity;
    c.scope = scope;
    return c;
  }
  rank_prepare_result finish(std::int32_t layer, std::span<const std::int32_t> locals) {
    const prepare_result r = pager_.prepare_experts(layer, locals);
    const std::span<std::int32_t> row(
        global_.data() + static_cast<std::size_t>(layer) * map_.experts(),
        static_cast<std::size_t>(map_.experts()));
    map_.to_global(layer, r.experts, r.expert_map, row);
    return {layer, row, r.copy_plan, r.experts, r.hits, r.misses};
  }

  rank_expert_map map_;
  pager<Policy> pager_;
  std::vector<std::int32_t> global_;  // [layers][experts]: each layer's last global map
};

}  // namespace wisp
