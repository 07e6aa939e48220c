// SPDX-License-Identifier: Apache-2.0
// Implementation of pager<Policy>; included at the end of <wisp/pager/pager.hpp>.
#pragma once

#include <algorithm>

namespace wisp {

template <eviction_policy Policy>
template <class MakePolicy>
requires std::invocable<MakePolicy&, std::int32_t> &&
    std::convertible_to<std::invoke_result_t<MakePolicy&, std::int32_t>, Policy>
    pager<Policy>::pager(const pager_config& config, MakePolicy make_policy)
    : layers_(config.layers), experts_(config.experts), top_k_(config.top_k), scope_(config.scope) {
  WISP_EXPECTS(config.layers >= 1, "pager: layers must be >= 1, got ", config.layers);
  WISP_EXPECTS(config.experts >= 1, "pager: experts must be >= 1, got ", config.experts);
  WISP_EXPECTS(config.top_k >= 1, "pager: top_k must be >= 1, got ", config.top_k);
  WISP_EXPECTS(config.max_tokens >= 0, "pager: max_tokens must be >= 0, got ", config.max_tokens);
  const key_layout layout = scope_ == cache_scope::global
                                ? key_layout{cache_scope::global, config.layers, config.experts}
                                : key_layout{cache_scope::per_layer, config.layers, config.experts};
  layout.validate();
  const auto layers = static_cast<std::size_t>(layers_);
  const auto experts = static_cast<std::size_t>(experts_);

  if (scope_ == cache_scope::global) {
    WISP_EXPECTS(config.layer_capacities.empty(),
                 "pager: layer_capacities is for per-layer scope; the global pool has one "
                 "capacity (got ",
                 config.layer_capacities.size(), " entries)");
    WISP_EXPECTS(config.capacity >= top_k_ && config.capacity <= layout.size(), "pager: capacity ",
                 config.capacity, " of the global pool is below top_k ", top_k_,
                 " or above layers * experts = ", layout.size());
    caches_.emplace_back(layout, config.capacity, make_policy(0));
  } else {
    WISP_EXPECTS(config.layer_capacities.empty() || config.layer_capacities.size() == layers,
                 "pager: layer_capacities has ", config.layer_capacities.size(), " entries for ",
                 layers_, " layers");
    caches_.reserve(layers);
    for (std::int32_t l = 0; l < layers_; ++l) {
      const std::int32_t cap = config.layer_capacities.empty()
                                   ? config.capacity
                                   : config.layer_capacities[static_cast<std::size_t>(l)];
      WISP_EXPECTS(cap >= top_k_ && cap <= experts_, "pager: capacity ", cap, " of layer ", l,
                   " must be in [top_k = ", top_k_, ", experts = ", experts_,
                   "] (vLLM: --moe-expert-cache-size must be >= top_k)");
      caches_.emplace_back(layout, cap, make_policy(l));
    }
  }
  times_.assign(caches_.size(), 0);
  maps_.assign(layers * experts, -1);
  visible_.assign(layers * experts, -1);
  visible_count_.assign(layers, 0);
  copies_.assign(layers * experts, copy_op{});
  keys_.assign(experts, no_key);
  key_positions_.assign(experts, 0);
  seen_ = protect_set(experts_);
  keep_ = protect_set(layout.size());
  if constexpr (call_eviction_policy<Policy>) {
    // A call has at most `experts` distinct keys (one layer's), in either scope.
    call_scratch_.assign(3 * experts, -1);
  }
  prefetch_copies_.assign(experts, copy_op{});
  planner_ = group_planner(experts_, config.max_tokens, top_k_);
}

template <eviction_policy Policy>
template <topk_id Id>
void pager<Policy>::fail_over_capacity(const char* where, std::int32_t layer,
                                       std::span<const Id> ids, std::int32_t k,
                                       std::int32_t distinct) {
  const std::int32_t cap = cache_of(layer).capacity();
  const auto uk = static_cast<std::size_t>(k);
  // Name the widest row when it alone cannot fit (no split can help then).
  for (std::size_t r = 0; r * uk < ids.size(); ++r) {
    seen_.clear();
    std::int32_t row_distinct = 0;
    for (std::size_t j = 0; j < uk; ++j) {
      row_distinct += seen_.insert(static_cast<cache_key>(ids[r * uk + j])) ? 1 : 0;
    }
    if (row_distinct > cap) {
      WISP_FAIL(logic_error, where, ": layer ", layer, ": one token (row ", r, ") routes to ",
                row_distinct, " experts but capacity is ", cap,
                "; no split can serve it (raise the capacity to at least ", row_distinct, ")");
    }
  }
  WISP_FAIL(logic_error, where, ": layer ", layer, ": ", distinct,
            " distinct experts requested but capacity is ", cap,
            "; split the batch with plan_token_groups or plan_expert_groups");
}

template <eviction_policy Policy>
template <topk_id Id>
prepare_result pager<Policy>::prepare_impl(const char* where, std::int32_t layer,
                                           std::span<const Id> ids, std::int32_t tokens,
                                           std::int32_t k,
                                           std::span<const std::uint32_t> positions) {
  check_layer(where, layer);
  if (tokens < 0 || k < 1 ||
      static_cast<std::int64_t>(tokens) * k != static_cast<std::int64_t>(ids.size())) [[unlikely]] {
    detail::check_topk_shape(where, ids.size(), tokens, k);  // throws the message
  }
  // One position per row (of more than one row) gives each distinct expert its own: the keys are
  // then deduplicated here, so that the positions line up with them.
  const bool per_row = positions.size() > 1;
  WISP_EXPECTS(positions.size() <= 1 || positions.size() == static_cast<std::size_t>(tokens), where,
               ": ", positions.size(), " positions given for ", tokens,
               " rows (give 0, 1 or one per row)");

  // 1. Validate (only scratch is written until the cache call). A call of at most `capacity` ids
  //    cannot exceed the capacity, so it needs no deduplication here: the cache's bulk call
  //    deduplicates while protecting. A wider call (or, in global scope, one of more ids than
  //    `keys_` holds: it has duplicates) is deduplicated first to check its union.
  cache_type& cache = cache_of(layer);
  const cache_key base = key_of(layer, 0);
  std::span<const cache_key> keys;
  if (ids.size() <= static_cast<std::size_t>(cache.capacity()) && ids.size() <= keys_.size() &&
      !per_row) [[likely]] {
    // `id | (experts - 1 - id)` has its sign bit set exactly when `id` is outside
    // [0, experts): an or-reduction without an early exit, which the compiler vectorises. The
    // cold path finds the first bad id for the message.
    using uid = std::make_unsigned_t<Id>;
    const auto last = static_cast<uid>(experts_ - 1);
    uid acc = 0;
    const auto to_keys = [&] {
      for (std::size_t i = 0; i < ids.size(); ++i) {
        const auto id = static_cast<uid>(ids[i]);
        acc |= id | (last - id);
        keys_[i] = base + static_cast<cache_key>(id);
      }
      keys = std::span<const cache_key>(keys_.data(), ids.size());
    };
    if constexpr (std::is_same_v<Id, cache_key>) {
      if (base == 0) {
        for (const Id id : ids) {
          acc |= static_cast<uid>(id) | (last - static_cast<uid>(id));
        }
        keys = ids;  // per-layer keys are the ids themselves
      } else {
        to_keys();
      }
    } else {
      to_keys();
    }
    if ((acc >> (sizeof(uid) * 8 - 1)) != 0) [[unlikely]] {
      detail::check_topk_ids(where, ids, k, experts_);
    }
  } else {
    seen_.clear();
    std::size_t distinct = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const std::int64_t id = ids[i];
      if (id < 0 || id >= experts_) [[unlikely]] {
        detail::fail_bad_id(where, ids, i, k, experts_);
      }
      if (seen_.insert(static_cast<cache_key>(id))) {
        if (per_row) {
          key_positions_[distinct] = positions[i / static_cast<std::size_t>(k)];
        }
        keys_[distinct++] = base + static_cast<cache_key>(id);
      }
    }
    if (distinct > static_cast<std::size_t>(cache.capacity())) [[unlikely]] {
      fail_over_capacity(where, layer, ids, k, static_cast<std::int32_t>(distinct));
    }
    keys = std::span<const cache_key>(keys_.data(), distinct);
  }

  // 2. Hide the previous call's experts, make this call's resident in one bulk cache call (begin
  //    the call, protect every key, access the distinct ones in first-seen order at times time,
  //    time + 1, ...; each miss lands in the copy plan) and show them as the cache reports them.
  //    Every precondition was checked above, so nothing below throws unless the policy breaks its
  //    contract (`victim` returning a protected or absent key, `belady` off its sequence).
  const std::size_t off = offset(layer);
  std::int32_t* map = maps_.data() + off;
  std::int32_t* visible = visible_.data() + off;
  copy_op* copies = copies_.data() + off;
  std::int32_t& visible_count = visible_count_[static_cast<std::size_t>(layer)];
  const std::int32_t shown_before = visible_count;  // a local: the stores below may alias it
  for (std::int32_t i = 0; i < shown_before; ++i) {
    map[visible[i]] = -1;
  }
  visible_count = 0;
  std::uint64_t& time = times_[cache_index(layer)];
  // Each key is shown with its slot as it is noted (-1 for a miss of a whole-call policy, shown
  // again with its new slot as it lands in the copy plan).
  auto show = [map, visible, base](std::size_t i, cache_key key, std::int32_t slot) {
    visible[i] = key - base;
    map[key - base] = slot;
  };
  copy_op* plan_end = copies;
  auto plan_copy = [map, &plan_end, base](cache_key key, std::int32_t slot) {
    if constexpr (call_eviction_policy<Policy>) {
      map[key - base] = slot;
    } else {
      (void)map;  // shown once the call has succeeded
    }
    *plan_end++ = copy_op{key - base, slot};
  };
  // The keys and the layer were checked above against the same bounds the cache would check.
  const access_context ctx{step_, layer, time, positions.empty() ? 0u : positions[0]};
  const std::span<const std::uint32_t> key_positions =
      per_row ? std::span<const std::uint32_t>(key_positions_.data(), keys.size())
              : std::span<const std::uint32_t>{};
  typename cache_type::unchecked_call call;
  if constexpr (call_eviction_policy<Policy>) {
    try {
      call = cache.access_call_unchecked(keys, ctx, show, plan_copy, key_positions, call_scratch_);
    } catch (...) {
      // The policy broke its contract and the cache undid the call; some of its keys may have
      // been shown already: show none.
      std::fill(map, map + experts_, -1);
      throw;
    }
  } else {
    call =
        cache.access_call_unchecked(keys, ctx, show, plan_copy, key_positions);  // shows at the end
  }
  const auto misses = static_cast<std::int32_t>(call.misses);
  const std::size_t distinct = call.keys.size();
  visible_count = static_cast<std::int32_t>(distinct);
  time += distinct;
  pending_layer_ = layer;

  prepare_result result;
  result.layer = layer;
  result.expert_map = std::span<const std::int32_t>(map, static_cast<std::size_t>(experts_));
  result.copy_plan = std::span<const copy_op>(copies, static_cast<std::size_t>(misses));
  result.experts = std::span<const std::int32_t>(visible, distinct);
  result.hits = static_cast<std::int32_t>(distinct) - misses;
  result.misses = misses;
  return result;
}

template <eviction_policy Policy>
template <topk_id Id>
std::span<const expert_group> pager<Policy>::plan_expert_groups_impl(std::int32_t layer,
                                                                     std::span<const Id> ids,
                                                                     std::int32_t tokens,
                                                                     std::int32_t k) {
  const std::int32_t cap = capacity_for("plan_expert_groups", layer);
  const cache_type& cache = cache_of(layer);
  const cache_key base = key_of(layer, 0);
  return planner_.plan_expert_groups(
      ids, tokens, k, cap, [&](std::int32_t expert) { return cache.slot_of(base + expert) >= 0; });
}

template <eviction_policy Policy>
prefetch_result pager<Policy>::prefetch(std::int32_t layer,
                                        std::span<const std::int32_t> candidates) {
  check_layer("pager::prefetch", layer);
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    WISP_EXPECTS(candidates[i] >= 0 && candidates[i] < experts_, "pager::prefetch: candidate ", i,
                 " = ", candidates[i], " of layer ", layer, " is outside [0, experts = ", experts_,
                 ")");
  }
  cache_type& cache = cache_of(layer);
  // Out of reach: the pending call's experts when it used this cache, then every candidate.
  keep_.clear();
  if (pending_layer_ >= 0 && cache_index(pending_layer_) == cache_index(layer)) {
    const std::size_t off = offset(pending_layer_);
    for (std::int32_t i = 0; i < visible_count_[static_cast<std::size_t>(pending_layer_)]; ++i) {
      keep_.insert(key_of(pending_layer_, visible_[off + static_cast<std::size_t>(i)]));
    }
  }
  prefetch_result result;
  result.layer = layer;
  std::size_t planned = 0;
  seen_.clear();
  for (const std::int32_t expert : candidates) {
    if (seen_.insert(expert)) {
      keep_.insert(key_of(layer, expert));
    }
  }
  seen_.clear();
  const access_context ctx{step_, layer, times_[cache_index(layer)]};
  for (const std::int32_t expert : candidates) {
    if (!seen_.insert(expert)) {
      continue;  // a duplicate
    }
    const access_result r = cache.prefetch(key_of(layer, expert), ctx, keep_.view());
    if (r.hit) {
      ++result.resident;
    } else if (r.slot < 0) {
      ++result.dropped;
    } else {
      prefetch_copies_[planned++] = copy_op{expert, r.slot};
      if (r.evicted != no_key) {  // hide it wherever it was shown
        const std::int32_t victim_layer =
            scope_ == cache_scope::global ? r.evicted / experts_ : layer;
        maps_[offset(victim_layer) +
              static_cast<std::size_t>(r.evicted - key_of(victim_layer, 0))] = -1;
      }
    }
  }
  result.copy_plan = std::span<const copy_op>(prefetch_copies_.data(), planned);
  return result;
}

template <eviction_policy Policy>
void pager<Policy>::refresh_map(std::int32_t layer) {
  const std::size_t off = offset(layer);
  const cache_type& cache = cache_of(layer);
  const cache_key base = key_of(layer, 0);
  const std::int32_t count = visible_count_[static_cast<std::size_t>(layer)];
  for (std::int32_t i = 0; i < count; ++i) {
    const std::int32_t expert = visible_[off + static_cast<std::size_t>(i)];
    maps_[off + static_cast<std::size_t>(expert)] = cache.slot_of(base + expert);
  }
}

template <eviction_policy Policy>
void pager<Policy>::end_call(std::int32_t layer) {
  check_layer("pager::end_call", layer);
  const std::size_t off = offset(layer);
  std::int32_t& visible_count = visible_count_[static_cast<std::size_t>(layer)];
  for (std::int32_t i = 0; i < visible_count; ++i) {
    maps_[off + static_cast<std::size_t>(visible_[off + static_cast<std::size_t>(i)])] = -1;
  }
  visible_count = 0;
  // Per-layer caches protect only their layer's last call; the global pool only the pending one.
  if (scope_ == cache_scope::per_layer || pending_layer_ == layer) {
    cache_of(layer).begin_call(access_context{step_, layer, times_[cache_index(layer)]});
  }
  if (pending_layer_ == layer) {
    pending_layer_ = -1;
  }
}

template <eviction_policy Policy>
bool pager<Policy>::invalidate(std::int32_t layer, std::int32_t expert) {
  check_expert("pager::invalidate", layer, expert);
  const bool was_resident = cache_of(layer).invalidate(key_of(layer, expert));
  maps_[offset(layer) + static_cast<std::size_t>(expert)] = -1;
  return was_resident;
}

template <eviction_policy Policy>
resize_report pager<Policy>::resize_layer(std::int32_t layer, std::int32_t capacity) {
  WISP_EXPECTS(scope_ == cache_scope::per_layer,
               "pager::resize_layer: the pager has one global pool; use resize_pool");
  check_layer("pager::resize_layer", layer);
  WISP_EXPECTS(capacity >= top_k_ && capacity <= experts_, "pager::resize_layer: capacity ",
               capacity, " of layer ", layer, " must be in [top_k = ", top_k_,
               ", experts = ", experts_, "]");
  // The layer's cache still protects its last call, i.e. exactly the visible experts.
  resize_report report =
      cache_of(layer).resize(capacity, access_context{step_, layer, times_[cache_index(layer)]});
  refresh_map(layer);
  return report;
}

template <eviction_policy Policy>
resize_report pager<Policy>::resize_pool(std::int32_t capacity) {
  WISP_EXPECTS(scope_ == cache_scope::global,
               "pager::resize_pool: the pager has per-layer caches; use resize_layer");
  const std::int32_t keys = layers_ * experts_;
  WISP_EXPECTS(capacity >= top_k_ && capacity <= keys, "pager::resize_pool: capacity ", capacity,
               " must be in [top_k = ", top_k_, ", layers * experts = ", keys, "]");
  resize_report report = caches_.front().resize(capacity, access_context{step_, 0, times_.front()});
  for (std::int32_t l = 0; l < layers_; ++l) {
    refresh_map(l);
  }
  return report;
}

}  // namespace wisp
