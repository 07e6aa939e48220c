// SPDX-License-Identifier: Apache-2.0
// Implementation of slot_cache<Policy>; included at the end of <wisp/cache/slot_cache.hpp>.
#pragma once

#include <algorithm>

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
void slot_cache<Policy>::protect(cache_key key) {
  check_key(key, "protect");
  protect_.insert(key);
}

template <eviction_policy Policy>
void slot_cache<Policy>::evict(cache_key victim, const access_context& ctx) {
  const auto v = static_cast<std::size_t>(victim);
  const std::int32_t slot = key_to_slot_[v];
  key_to_slot_[v] = -1;
  slot_to_key_[static_cast<std::size_t>(slot)] = no_key;
  free_[free_size_++] = slot;
  evicted_in_[v] = static_cast<std::uint64_t>(ctx.step) + 1;
  policy_.on_erase(victim);
  ++stats_.evictions;
}

template <eviction_policy Policy>
access_result slot_cache<Policy>::access(cache_key key, const access_context& ctx) {
  check_key(key, "access");
  check_context(ctx);
  if (ctx.step != call_step_ || ctx.layer != call_layer_) {
    begin_call(ctx);
  }
  const bool newly_protected = protect_.insert(key);
  const auto k = static_cast<std::size_t>(key);

  if (const std::int32_t slot = key_to_slot_[k]; slot >= 0) {
    policy_.on_hit(key, ctx);
    ++stats_.accesses;
    ++stats_.hits;
    return access_result{slot, true, no_key, false};
  }

  access_result result;
  if (free_size_ == 0) {
    const cache_key victim = policy_.victim(ctx, protect_.view());
    if (victim == no_key) [[unlikely]] {
      if (newly_protected) {
        protect_.erase(key);
      }
      WISP_FAIL(logic_error, "slot_cache::access: miss on key ", key, " but all ", capacity_,
                " resident keys are protected by the current call (step ", ctx.step, ", layer ",
                ctx.layer, "); the call requests more distinct keys than the capacity");
    }
    const bool valid_victim = victim >= 0 && victim < layout_.size() &&
                              key_to_slot_[static_cast<std::size_t>(victim)] >= 0 &&
                              !protect_.contains(victim);
    if (!valid_victim) [[unlikely]] {
      if (newly_protected) {
        protect_.erase(key);
      }
      WISP_FAIL(logic_error, "slot_cache::access: policy ", policy_name<Policy>(),
                " returned victim ", victim, ", which is not a resident unprotected key");
    }
    evict(victim, ctx);
    result.evicted = victim;
  }
  const std::int32_t slot = free_[--free_size_];
  key_to_slot_[k] = slot;
  slot_to_key_[static_cast<std::size_t>(slot)] = key;
  result.slot = slot;
  result.collision = evicted_in_[k] == static_cast<std::uint64_t>(ctx.step) + 1;
  try {
    policy_.on_insert(key, ctx);
  } catch (...) {
    // Only a policy whose contract was violated throws here (e.g. belady off its sequence):
    // undo the insertion so the cache stays consistent; the eviction, if any, stands.
    key_to_slot_[k] = -1;
    slot_to_key_[static_cast<std::size_t>(slot)] = no_key;
    free_[free_size_++] = slot;
    throw;
  }
  ++stats_.accesses;
  ++stats_.misses;
  stats_.collision_misses += result.collision ? 1u : 0u;
  return result;
}

template <eviction_policy Policy>
std::size_t slot_cache<Policy>::access_call(std::span<const cache_key> keys,
                                            const access_context& ctx,
                                            std::span<access_result> out) {
  check_context(ctx);
  WISP_EXPECTS(out.size() >= keys.size(), "slot_cache::access_call: output holds ", out.size(),
               " results for ", keys.size(), " keys");
  for (const cache_key key : keys) {
    check_key(key, "access_call");
  }
  begin_call(ctx);
  std::int32_t distinct = 0;
  for (const cache_key key : keys) {
    distinct += protect_.insert(key) ? 1 : 0;
  }
  if (distinct > capacity_) [[unlikely]] {
    protect_.clear();
    WISP_FAIL(logic_error, "slot_cache::access_call: ", distinct,
              " distinct keys requested but capacity is ", capacity_, " (step ", ctx.step,
              ", layer ", ctx.layer, ")");
  }
  std::size_t misses = 0;
  access_context each = ctx;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    each.time = ctx.time + i;
    out[i] = access(keys[i], each);
    misses += out[i].hit ? 0u : 1u;
  }
  return misses;
}

template <eviction_policy Policy>
bool slot_cache<Policy>::invalidate(cache_key key) {
  check_key(key, "invalidate");
  const auto k = static_cast<std::size_t>(key);
  const std::int32_t slot = key_to_slot_[k];
  if (slot < 0) {
    return false;
  }
  key_to_slot_[k] = -1;
  slot_to_key_[static_cast<std::size_t>(slot)] = no_key;
  free_[free_size_++] = slot;
  policy_.on_erase(key);
  return true;
}

template <eviction_policy Policy>
resize_report slot_cache<Policy>::resize(std::int32_t new_capacity, const access_context& ctx) {
  const std::int32_t n = layout_.size();
  WISP_EXPECTS(new_capacity >= 1 && new_capacity <= n, "slot_cache::resize: new capacity ",
               new_capacity, " must be in [1, key_space = ", n, "]");
  check_context(ctx);
  resize_report report;
  if (new_capacity >= capacity_) {
    for (std::int32_t s = capacity_; s < new_capacity; ++s) {
      free_[free_size_++] = s;
    }
    capacity_ = new_capacity;
    return report;
  }

  const std::int32_t resident = size();
  std::int32_t protected_resident = 0;
  std::int32_t high_resident = 0;  // resident keys in slots >= new_capacity
  for (std::int32_t s = 0; s < capacity_; ++s) {
    const cache_key k = slot_to_key_[static_cast<std::size_t>(s)];
    if (k != no_key) {
      protected_resident += protect_.contains(k) ? 1 : 0;
      high_resident += s >= new_capacity ? 1 : 0;
    }
  }
  const std::int32_t to_evict = std::max(resident - new_capacity, 0);
  WISP_EXPECTS(to_evict <= resident - protected_resident, "slot_cache::resize: shrinking from ",
               capacity_, " to ", new_capacity, " slots must evict ", to_evict, " of ", resident,
               " resident keys, but ", protected_resident,
               " are protected by the current call, leaving only ", resident - protected_resident,
               " evictable");
  report.evicted.reserve(static_cast<std::size_t>(to_evict));
  report.moves.reserve(static_cast<std::size_t>(high_resident));

  // Feasibility was checked above and the report is reserved, so with a policy that honours its
  // contract (a resident unprotected key whenever one exists) nothing below can fail.
  for (std::int32_t i = 0; i < to_evict; ++i) {
    const cache_key victim = policy_.victim(ctx, protect_.view());
    WISP_EXPECTS(victim >= 0 && victim < n && key_to_slot_[static_cast<std::size_t>(victim)] >= 0 &&
                     !protect_.contains(victim),
                 "slot_cache::resize: policy ", policy_name<Policy>(), " returned victim ", victim,
                 ", which is not a resident unprotected key");
    evict(victim, ctx);
    report.evicted.push_back(victim);
  }

  // Drop free slots beyond the new capacity, keeping the order of the others.
  std::size_t kept = 0;
  for (std::size_t i = 0; i < free_size_; ++i) {
    if (free_[i] < new_capacity) {
      free_[kept++] = free_[i];
    }
  }
  free_size_ = kept;
  // Relocate keys living beyond the new capacity into free low slots.
  for (std::int32_t s = new_capacity; s < capacity_; ++s) {
    const cache_key k = slot_to_key_[static_cast<std::size_t>(s)];
    if (k == no_key) {
      continue;
    }
    const std::int32_t to = free_[--free_size_];
    slot_to_key_[static_cast<std::size_t>(s)] = no_key;
    slot_to_key_[static_cast<std::size_t>(to)] = k;
    key_to_slot_[static_cast<std::size_t>(k)] = to;
    report.moves.push_back(slot_move{k, s, to});
  }
  capacity_ = new_capacity;
  return report;
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

}  // namespace wisp
