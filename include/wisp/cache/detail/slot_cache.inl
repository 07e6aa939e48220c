// SPDX-License-Identifier: Apache-2.0
// Implementation of slot_cache<Policy>; included at the end of <wisp/cache/slot_cache.hpp>.
#pragma once

#include <algorithm>
#include <utility>

namespace wisp {

template <eviction_policy Policy>
slot_cache<Policy>::slot_cache(key_layout layout, std::int32_t capacity, Policy policy)
    : layout_(layout), capacity_(capacity), policy_(std::move(policy)) {
  layout_.validate();
  const std::int32_t n = layout_.size();
  WISP_EXPECTS(capacity >= 1 && capacity <= n, "slot_cache: capacity ", capacity,
               " must be in [1, key_space = ", n, "]");
  const auto size = static_cast<std::size_t>(n);
  key_to_slot_.assign(size, -1);
  slot_to_key_.assign(size, no_key);
  free_.assign(size, -1);
  evicted_in_.assign(size, 0);
  protect_ = protect_set(n);
  if constexpr (call_eviction_policy<Policy>) {
    call_slots_.assign(size, -1);
    missed_.assign(size, no_key);
    victims_.assign(size, no_key);
    victim_marks_.assign(size, 0);
  }
  for (std::int32_t s = 0; s < capacity_; ++s) {
    free_[static_cast<std::size_t>(s)] = s;
  }
  free_size_ = static_cast<std::size_t>(capacity_);
  policy_.reset(layout_);
}

template <eviction_policy Policy>
void slot_cache<Policy>::check_key(cache_key key, const char* what) const {
  WISP_EXPECTS(key >= 0 && key < layout_.size(), "slot_cache::", what, ": key ", key,
               " is outside [0, key_space = ", layout_.size(), ")");
}

template <eviction_policy Policy>
void slot_cache<Policy>::check_keys(std::span<const cache_key> keys, const char* what) const {
  // `key | (n - 1 - key)` has its sign bit set exactly when `key` is outside [0, n): an
  // or-reduction the compiler vectorises. The cold path names the first bad key.
  const auto last = static_cast<std::uint32_t>(key_to_slot_.size()) - 1u;
  std::uint32_t acc = 0;
  for (const cache_key key : keys) {
    const auto u = static_cast<std::uint32_t>(key);
    acc |= u | (last - u);
  }
  if ((acc >> 31) != 0) [[unlikely]] {
    for (const cache_key key : keys) {
      check_key(key, what);
    }
  }
}

template <eviction_policy Policy>
void slot_cache<Policy>::check_context(const access_context& ctx) const {
  WISP_EXPECTS(ctx.layer >= 0 && ctx.layer < layout_.layers, "slot_cache: layer ", ctx.layer,
               " is outside [0, layers = ", layout_.layers, ")");
}

template <eviction_policy Policy>
void slot_cache<Policy>::begin_call(const access_context& ctx) noexcept {
  protect_.clear();
  call_step_ = ctx.step;
  call_layer_ = ctx.layer;
}

template <eviction_policy Policy>
bool slot_cache<Policy>::protect(cache_key key) {
  check_key(key, "protect");
  return protect_.insert(key);
}

template <eviction_policy Policy>
void slot_cache<Policy>::evict(cache_key victim, const access_context& ctx) {
  const auto v = static_cast<std::size_t>(victim);
  const std::int32_t slot = key_to_slot_[v];
  key_to_slot_[v] = -1;
  slot_to_key_[static_cast<std::size_t>(slot)] = no_key;
  free_[free_size_++] = slot;
  evicted_in_[v] = eviction_mark(ctx.step);
  policy_.on_erase(victim);
  ++stats_.evictions;
}

// The miss half of every access, shared by the checked single access and the bulk calls: no
// validation here, every caller has checked the key and the context and protected the key. Only
// the policy's victim is checked (a contract violation must not corrupt the maps).
template <eviction_policy Policy>
WISP_DETAIL_ALWAYS_INLINE access_result slot_cache<Policy>::miss_unchecked(cache_key key,
                                                                           const access_context ctx,
                                                                           bool newly_protected) {
  const auto k = static_cast<std::size_t>(key);
  std::int32_t slot;
  cache_key evicted = no_key;
  if (free_size_ == 0) {
    const cache_key victim = policy_.victim(ctx, protect_.view());
    const auto v = static_cast<std::size_t>(victim);
    // One unsigned compare rejects no_key and every other out-of-range victim.
    if (v >= key_to_slot_.size() || key_to_slot_[v] < 0 || protect_.contains(victim)) [[unlikely]] {
      if (newly_protected) {
        protect_.erase(key);
      }
      if (victim == no_key) {
        WISP_FAIL(logic_error, "slot_cache::access: miss on key ", key, " but all ", capacity_,
                  " resident keys are protected by the current call (step ", ctx.step, ", layer ",
                  ctx.layer, "); the call requests more distinct keys than the capacity");
      }
      WISP_FAIL(logic_error, "slot_cache::access: policy ", policy_name<Policy>(),
                " returned victim ", victim, ", which is not a resident unprotected key");
    }
    // The full cache's common case: the missing key takes the victim's slot directly (what
    // `evict` then a free-list pop would do, without the round trip through the free list).
    slot = key_to_slot_[v];
    key_to_slot_[v] = -1;
    evicted_in_[v] = eviction_mark(ctx.step);
    policy_.on_erase(victim);
    ++stats_.evictions;
    evicted = victim;
  } else {
    slot = free_[--free_size_];
  }
  key_to_slot_[k] = slot;
  slot_to_key_[static_cast<std::size_t>(slot)] = key;
  const bool collision = evicted_in_[k] == eviction_mark(ctx.step);
  if constexpr (noexcept(policy_.on_insert(key, ctx))) {
    policy_.on_insert(key, ctx);
  } else {
    try {
      policy_.on_insert(key, ctx);
    } catch (...) {
      // Only a policy whose contract was violated throws here (e.g. belady off its sequence):
      // undo the insertion so the cache stays consistent; the eviction, if any, stands (its slot
      // is free).
      key_to_slot_[k] = -1;
      slot_to_key_[static_cast<std::size_t>(slot)] = no_key;
      free_[free_size_++] = slot;
      throw;
    }
  }
  ++stats_.accesses;
  ++stats_.misses;
  stats_.collision_misses += collision ? 1u : 0u;
  return access_result{slot, false, evicted, collision};
}

template <eviction_policy Policy>
access_result slot_cache<Policy>::access(cache_key key, const access_context& ctx) {
  check_key(key, "access");
  check_context(ctx);
  if (ctx.step != call_step_ || ctx.layer != call_layer_) {
    begin_call(ctx);
  }
  const bool newly_protected = protect_.insert(key);
  if (const std::int32_t slot = key_to_slot_[static_cast<std::size_t>(key)]; slot >= 0) {
    policy_.on_hit(key, ctx);
    ++stats_.accesses;
    ++stats_.hits;
    return access_result{slot, true, no_key, false};
  }
  return miss_unchecked(key, ctx, newly_protected);
}

template <eviction_policy Policy>
WISP_DETAIL_ALWAYS_INLINE std::span<const cache_key> slot_cache<Policy>::protect_call(
    std::span<const cache_key> keys, const access_context& ctx, const char* where) {
  call_step_ = ctx.step;
  call_layer_ = ctx.layer;
  const std::span<const cache_key> distinct = protect_.assign(keys);  // begins the call
  if (distinct.size() > static_cast<std::size_t>(capacity_)) [[unlikely]] {
    fail_protect_call(distinct.size(), ctx, where);
  }
  return distinct;
}

template <eviction_policy Policy>
void slot_cache<Policy>::fail_protect_call(std::size_t distinct, const access_context& ctx,
                                           const char* where) {
  protect_.clear();
  WISP_FAIL(logic_error, "slot_cache::", where, ": ", distinct,
            " distinct keys requested but capacity is ", capacity_, " (step ", ctx.step, ", layer ",
            ctx.layer, ")");
}

template <eviction_policy Policy>
void slot_cache<Policy>::count_hits(std::size_t accesses, std::uint64_t misses_before) noexcept {
  const std::uint64_t hits = accesses - (stats_.misses - misses_before);
  stats_.accesses += hits;
  stats_.hits += hits;
}

template <eviction_policy Policy>
std::size_t slot_cache<Policy>::access_call(std::span<const cache_key> keys,
                                            const access_context& ctx,
                                            std::span<access_result> out) {
  // Validate the whole call once; the accesses below run unchecked.
  check_context(ctx);
  WISP_EXPECTS(out.size() >= keys.size(), "slot_cache::access_call: output holds ", out.size(),
               " results for ", keys.size(), " keys");
  check_keys(keys, "access_call");
  const std::size_t distinct = protect_call(keys, ctx, "access_call").size();
  access_result* results = out.data();
  auto record = [&results](cache_key /*key*/, const access_result& r) { *results++ = r; };
  if constexpr (call_eviction_policy<Policy>) {
    if (distinct == keys.size()) {  // repeated keys are accessed again: one at a time
      return run_whole_call(keys, ctx, record);
    }
  }
  const std::uint64_t misses_before = stats_.misses;
  access_each(keys, ctx, record);
  return static_cast<std::size_t>(stats_.misses - misses_before);
}

template <eviction_policy Policy>
template <class Visit>
requires std::invocable<Visit&, cache_key, const access_result&>
    WISP_DETAIL_ALWAYS_INLINE std::size_t slot_cache<Policy>::access_distinct(
        std::span<const cache_key> keys, const access_context& ctx, Visit&& visit) {
  // Validate the whole call once; the accesses run unchecked.
  check_context(ctx);
  check_keys(keys, "access_distinct");
  const std::span<const cache_key> call_keys = protect_call(keys, ctx, "access_distinct");
  if constexpr (call_eviction_policy<Policy>) {
    run_whole_call(call_keys, ctx, visit);
  } else {
    access_each(call_keys, ctx, visit);
  }
  return call_keys.size();
}

template <eviction_policy Policy>
template <class Visit>
WISP_DETAIL_ALWAYS_INLINE void slot_cache<Policy>::access_each(
    std::span<const cache_key> keys, const access_context& ctx, Visit& visit,
    std::span<const std::uint32_t> positions) {
  const std::uint64_t misses_before = stats_.misses;
  std::size_t i = 0;
  try {
    for (; i < keys.size(); ++i) {
      const cache_key key = keys[i];
      const access_context each{ctx.step, ctx.layer, ctx.time + i,
                                positions.empty() ? ctx.position : positions[i]};
      if (const std::int32_t slot = key_to_slot_[static_cast<std::size_t>(key)]; slot >= 0) {
        policy_.on_hit(key, each);
        visit(key, access_result{slot, true, no_key, false});
      } else {
        visit(key, miss_unchecked(key, each, false));
      }
    }
  } catch (...) {
    count_hits(i, misses_before);
    throw;
  }
  count_hits(keys.size(), misses_before);
}

template <eviction_policy Policy>
template <class Note, class OnMiss>
WISP_DETAIL_ALWAYS_INLINE typename slot_cache<Policy>::whole_call
slot_cache<Policy>::access_whole_call(std::span<const cache_key> keys, const access_context& ctx,
                                      Note& note, OnMiss& on_miss, call_scratch scratch) {
  const std::size_t n = keys.size();
  std::int32_t* const key_to_slot = key_to_slot_.data();
  // Each key's slot before the call (-1: a miss) and the misses, in access order.
  std::int32_t* const before = scratch.slots;
  cache_key* const missed = scratch.missed;
  std::size_t misses = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const cache_key key = keys[i];
    const std::int32_t slot = key_to_slot[static_cast<std::size_t>(key)];
    before[i] = slot;
    missed[misses] = key;  // kept only for a miss
    misses += static_cast<std::uint32_t>(slot) >> 31;
    note(i, key, slot);
  }
  // The policy's victims for the last misses (the first ones pop free slots, as single accesses
  // do).
  const std::size_t from_free = std::min(misses, free_size_);
  cache_key* const victims = scratch.victims;
  policy_.on_call(call_events{keys, std::span<const std::int32_t>(before, n),
                              std::span<cache_key>(victims, misses - from_free), ctx,
                              protect_.view()});
  // The misses in order: the j-th takes a popped free slot or the slot of the j-th victim. A
  // victim is checked first (and unmapped, so a victim named twice fails the second time) unless
  // the policy is one of wisp's own whole-call policies, whose victims their tests prove against
  // the per-access events (debug builds check those too).
  const std::uint64_t mark = eviction_mark(ctx.step);
  std::uint64_t* const evicted_in = evicted_in_.data();
  cache_key* const slot_to_key = slot_to_key_.data();
  std::uint64_t collisions = 0;
  const auto place = [&](cache_key key, std::int32_t slot) {
    const auto k = static_cast<std::size_t>(key);
    collisions += evicted_in[k] == mark ? 1u : 0u;
    key_to_slot[k] = slot;
    slot_to_key[static_cast<std::size_t>(slot)] = key;
    on_miss(key, slot);
  };
  const std::int32_t* const free_top = free_.data() + free_size_ - 1;
  for (std::size_t j = 0; j < from_free; ++j) {
    place(missed[j], free_top[-static_cast<std::ptrdiff_t>(j)]);
  }
  const cache_key* const evicting = missed + from_free;
  for (std::size_t j = 0; j < misses - from_free; ++j) {
    const cache_key victim = victims[j];
    const auto v = static_cast<std::size_t>(victim);
    if constexpr (detail::checks_call_victims<Policy>) {
      if (v >= key_to_slot_.size() || key_to_slot[v] < 0 || protect_.contains(victim))
          [[unlikely]] {
        fail_call_victim(victim, from_free, from_free + j, scratch);
      }
      victim_marks_[j] = evicted_in[v];
    }
    const std::int32_t slot = key_to_slot[v];
    key_to_slot[v] = -1;
    evicted_in[v] = mark;
    place(evicting[j], slot);
  }
  free_size_ -= from_free;
  stats_.accesses += n;
  stats_.hits += n - misses;
  stats_.misses += misses;
  stats_.evictions += misses - from_free;
  stats_.collision_misses += collisions;
  return whole_call{misses, from_free};
}

template <eviction_policy Policy>
template <class Visit>
WISP_DETAIL_ALWAYS_INLINE std::size_t slot_cache<Policy>::run_whole_call(
    std::span<const cache_key> keys, const access_context& ctx, Visit& visit) {
  auto no_note = [](std::size_t /*i*/, cache_key /*key*/, std::int32_t /*slot*/) {};
  auto no_miss = [](cache_key /*key*/, std::int32_t /*slot*/) {};
  return report_whole_call(keys, ctx, access_whole_call(keys, ctx, no_note, no_miss, own_scratch()),
                           visit);
}

template <eviction_policy Policy>
template <class Visit>
WISP_DETAIL_ALWAYS_INLINE std::size_t slot_cache<Policy>::report_whole_call(
    std::span<const cache_key> keys, const access_context& ctx, whole_call call, Visit& visit) {
  const std::int32_t* const before = call_slots_.data();
  const cache_key* const victims = victims_.data();
  const std::uint64_t mark = eviction_mark(ctx.step);
  const std::size_t from_free = call.from_free;
  // In access order, with no branch on hit or miss (it would mispredict on every miss).
  std::size_t j = 0;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const cache_key key = keys[i];
    const auto k = static_cast<std::size_t>(key);
    const std::int32_t hit_mask = ~(before[i] >> 31);  // all ones for a hit, 0 for a miss
    const std::size_t victim_index = j - from_free;    // of this key if it is an evicting miss
    const cache_key evicted = (j < from_free ? no_key : victims[victim_index]) | hit_mask;
    visit(key, access_result{key_to_slot_[k], hit_mask != 0, evicted,
                             hit_mask == 0 && evicted_in_[k] == mark});
    j += static_cast<std::size_t>(hit_mask + 1);
  }
  return call.misses;
}

template <eviction_policy Policy>
void slot_cache<Policy>::fail_call_victim(cache_key victim, std::size_t from_free, std::size_t j,
                                          call_scratch scratch) {
  // Misses [0, j) are mapped: unmap them, give back the free slots and remap the victims.
  for (std::size_t u = 0; u < j; ++u) {
    const cache_key key = scratch.missed[u];
    const std::int32_t slot = key_to_slot_[static_cast<std::size_t>(key)];
    key_to_slot_[static_cast<std::size_t>(key)] = -1;
    slot_to_key_[static_cast<std::size_t>(slot)] = no_key;
    if (u >= from_free) {
      const auto v = static_cast<std::size_t>(scratch.victims[u - from_free]);
      key_to_slot_[v] = slot;
      slot_to_key_[static_cast<std::size_t>(slot)] = scratch.victims[u - from_free];
      evicted_in_[v] = victim_marks_[u - from_free];
    }
  }
  if (victim == no_key) {
    WISP_FAIL(logic_error, "slot_cache::access: policy ", policy_name<Policy>(), " found ",
              j - from_free,
              " of the call's victims but no further one; every other resident "
              "key is protected by the current call");
  }
  WISP_FAIL(logic_error, "slot_cache::access: policy ", policy_name<Policy>(), " returned victim ",
            victim,
            ", which is not a resident unprotected key (or was already taken by this "
            "call)");
}

template <eviction_policy Policy>
access_result slot_cache<Policy>::prefetch(cache_key key, const access_context& ctx,
                                           protected_keys keep) {
  check_key(key, "prefetch");
  check_context(ctx);
  const auto k = static_cast<std::size_t>(key);
  if (const std::int32_t slot = key_to_slot_[k]; slot >= 0) {
    return access_result{slot, true, no_key, false};
  }
  cache_key evicted = no_key;
  if (free_size_ == 0) {
    const cache_key victim = policy_.victim(ctx, keep);
    if (victim == no_key) {
      return access_result{};  // every resident key is kept: nothing to replace
    }
    const auto v = static_cast<std::size_t>(victim);
    WISP_EXPECTS(v < key_to_slot_.size() && key_to_slot_[v] >= 0 && !keep(victim),
                 "slot_cache::prefetch: policy ", policy_name<Policy>(), " returned victim ",
                 victim, ", which is not a resident key outside the kept ones");
    evict(victim, ctx);
    evicted = victim;
  }
  const std::int32_t slot = free_[--free_size_];
  key_to_slot_[k] = slot;
  slot_to_key_[static_cast<std::size_t>(slot)] = key;
  try {
    policy_.on_insert(key, ctx);
  } catch (...) {
    // A policy off its contract (belady takes only its own future sequence): undo the load.
    key_to_slot_[k] = -1;
    slot_to_key_[static_cast<std::size_t>(slot)] = no_key;
    free_[free_size_++] = slot;
    throw;
  }
  ++stats_.prefetches;
  return access_result{slot, false, evicted, false};
}

template <eviction_policy Policy>
bool slot_cache<Policy>::contains(cache_key key) const {
  check_key(key, "contains");
  return key_to_slot_[static_cast<std::size_t>(key)] >= 0;
}

template <eviction_policy Policy>
std::int32_t slot_cache<Policy>::slot_of(cache_key key) const {
  check_key(key, "slot_of");
  return key_to_slot_[static_cast<std::size_t>(key)];
}

template <eviction_policy Policy>
cache_key slot_cache<Policy>::key_in_slot(std::int32_t slot) const {
  WISP_EXPECTS(slot >= 0 && slot < capacity_, "slot_cache::key_in_slot: slot ", slot,
               " is outside [0, capacity = ", capacity_, ")");
  return slot_to_key_[static_cast<std::size_t>(slot)];
}

template <eviction_policy Policy>
bool slot_cache<Policy>::is_protected(cache_key key) const {
  check_key(key, "is_protected");
  return protect_.contains(key);
}

template <eviction_policy Policy>
bool slot_cache<Policy>::invariants_hold() const {
  const std::int32_t n = layout_.size();
  if (capacity_ < 1 || capacity_ > n || free_size_ > static_cast<std::size_t>(capacity_)) {
    return false;
  }
  std::vector<char> seen_free(static_cast<std::size_t>(capacity_), 0);
  for (std::size_t i = 0; i < free_size_; ++i) {
    const std::int32_t s = free_[i];
    if (s < 0 || s >= capacity_ || seen_free[static_cast<std::size_t>(s)] != 0 ||
        slot_to_key_[static_cast<std::size_t>(s)] != no_key) {
      return false;
    }
    seen_free[static_cast<std::size_t>(s)] = 1;
  }
  std::int32_t resident = 0;
  for (std::int32_t s = 0; s < capacity_; ++s) {
    const cache_key k = slot_to_key_[static_cast<std::size_t>(s)];
    if (k == no_key) {
      if (seen_free[static_cast<std::size_t>(s)] == 0) {
        return false;  // an empty slot that is not free is lost
      }
      continue;
    }
    if (k < 0 || k >= n || key_to_slot_[static_cast<std::size_t>(k)] != s) {
      return false;
    }
    ++resident;
  }
  std::int32_t mapped = 0;
  for (std::int32_t k = 0; k < n; ++k) {
    const std::int32_t s = key_to_slot_[static_cast<std::size_t>(k)];
    if (s >= 0) {
      if (s >= capacity_ || slot_to_key_[static_cast<std::size_t>(s)] != k) {
        return false;
      }
      ++mapped;
    }
  }
  for (std::int32_t s = capacity_; s < n; ++s) {
    if (slot_to_key_[static_cast<std::size_t>(s)] != no_key) {
      return false;
    }
  }
  return mapped == resident && resident + free_count() == capacity_;
}

template <eviction_policy Policy>
template <class Note, class OnMiss>
requires std::invocable<Note&, std::size_t, cache_key, std::int32_t> &&
    std::invocable<OnMiss&, cache_key, std::int32_t>
        WISP_DETAIL_ALWAYS_INLINE typename slot_cache<Policy>::unchecked_call
        slot_cache<Policy>::access_call_unchecked(std::span<const cache_key> keys,
                                                  const access_context& ctx, Note&& note,
                                                  OnMiss&& on_miss,
                                                  std::span<const std::uint32_t> positions,
                                                  std::span<std::int32_t> scratch) {
  const std::span<const cache_key> distinct = protect_call(keys, ctx, "access_distinct");
  if constexpr (call_eviction_policy<Policy>) {
    access_context first = ctx;
    first.position = positions.empty() ? ctx.position : positions[0];
    const std::size_t stride = scratch.size() / 3;
    const call_scratch where =
        distinct.size() <= stride
            ? call_scratch{scratch.data(), scratch.data() + stride, scratch.data() + 2 * stride}
            : own_scratch();
    return {distinct, access_whole_call(distinct, first, note, on_miss, where).misses};
  } else {
    (void)scratch;  // per-access policies need none
    auto report = [&on_miss](cache_key key, const access_result& r) {
      if (!r.hit) {
        on_miss(key, r.slot);
      }
    };
    const std::uint64_t misses_before = stats_.misses;
    access_each(distinct, ctx, report, positions);
    for (std::size_t i = 0; i < distinct.size(); ++i) {
      note(i, distinct[i], key_to_slot_[static_cast<std::size_t>(distinct[i])]);
    }
    return {distinct, static_cast<std::size_t>(stats_.misses - misses_before)};
  }
}

}  // namespace wisp
