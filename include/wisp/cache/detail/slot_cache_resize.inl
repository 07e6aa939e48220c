// SPDX-License-Identifier: Apache-2.0
// slot_cache<Policy>'s changes of residency outside an access: `invalidate` and `resize`;
// included at the end of <wisp/cache/slot_cache.hpp>.
#pragma once

#include <algorithm>
#include <utility>

namespace wisp {

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

}  // namespace wisp
