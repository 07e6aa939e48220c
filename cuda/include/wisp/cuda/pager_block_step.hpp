// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `pager_step`: the block form of the device pager step (see `<wisp/cuda/pager_step.hpp>`),
/// run by a CUDA thread block or by one host thread (`serial_group`), for any call. Host-safe.
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/topk.hpp>
#include <wisp/cuda/pager_state.hpp>
#include <wisp/cuda/thread_group.hpp>

#include <cstdint>

namespace wisp::cuda {

namespace detail {

// A victim chosen by count, in `pager_workspace::first` between the ranking and the walk.
inline constexpr std::int32_t evicted_mark = -1;

// A failed step: restores the workspace, leaves the cache as it was, records the failure.
WISP_DETAIL_EXEC_CHECK_DISABLE
template <thread_group Group, topk_id Id>
WISP_HOST_DEVICE pager_step_status fail_step(const Group& g, const pager_layer_ref& s,
                                             const pager_workspace& w, const Id* ids,
                                             std::int32_t n, pager_step_status status,
                                             std::int64_t value) {
  for (std::int32_t i = g.rank(); i < n; i += g.size()) {
    const Id id = ids[i];
    if (id >= 0 && id < s.experts) {
      w.first[id] = unseen;
    }
  }
  g.sync();
  if (g.rank() == 0) {
    if (status == pager_step_status::bad_id) {  // name the first bad id
      for (std::int32_t i = 0; i < n; ++i) {
        if (ids[i] < 0 || ids[i] >= s.experts) {
          value = static_cast<std::int64_t>(ids[i]);
          break;
        }
      }
    }
    record_failure(*s.info, status, value);
  }
  return status;
}

}  // namespace detail

/// @brief One paging step of one layer (see the file comment), run by every thread of `g`.
///
/// @param g    the threads that run the step; every one of them calls it
/// @param s    the layer's arrays (`pager_state::layer`)
/// @param w    scratch: `w.first` all `unseen` (restored on return), `w.victims` any contents
/// @param ids  the call's routed ids, `n` of them (`[tokens x k]` row-major, or any list)
/// @return the status, also in `s.info->status` (every thread returns the same one)
/// Work O(n + capacity) in total under `lru`, O(n + capacity^2) under `lfu_history` (each
/// unrequested resident ranked against the others, only in calls that evict), split over the
/// group; `sync`s between its phases. No allocation. Thread safety: one group per layer at a
/// time; other layers may step concurrently, each with its own workspace.
WISP_DETAIL_EXEC_CHECK_DISABLE
template <thread_group Group, topk_id Id>
WISP_HOST_DEVICE pager_step_status pager_step(const Group& g, const pager_layer_ref& s,
                                              const pager_workspace& w, const Id* ids,
                                              std::int32_t n) {
  const std::int32_t r = g.rank();
  const std::int32_t p = g.size();
  const std::int32_t capacity = s.capacity;
  const std::int32_t resident = s.info->resident;
  const std::int32_t shown_before = s.info->shown;

  // 1. Hide the previous call's experts; note each id's first position in the call.
  for (std::int32_t j = r; j < shown_before; j += p) {
    s.map[s.shown[j]] = -1;
  }
  bool bad = false;
  for (std::int32_t i = r; i < n; i += p) {
    const Id id = ids[i];
    if (id < 0 || id >= s.experts) {
      bad = true;
    } else {
      g.atomic_min(&w.first[id], i);
    }
  }
  if (g.any(bad)) {
    return detail::fail_step(g, s, w, ids, n, pager_step_status::bad_id, 0);
  }

  // 2. The distinct ids in first-seen order become the shown experts (only the first `capacity`
  //    are stored: a wider call fails below).
  std::int32_t distinct = 0;
  for (std::int32_t base = 0; base < n; base += p) {
    const std::int32_t i = base + r;
    const bool first_here = i < n && w.first[ids[i]] == i;
    std::int32_t total = 0;
    const std::int32_t at = distinct + g.exclusive_sum(first_here ? 1 : 0, total);
    if (first_here && at < capacity) {
      s.shown[at] = static_cast<std::int32_t>(ids[i]);
    }
    distinct += total;
  }
  if (distinct > capacity) {
    return detail::fail_step(g, s, w, ids, n, pager_step_status::over_capacity, distinct);
  }
  g.sync();

  // 3. Misses, in access order, become the copy list (their slots are chosen in step 6).
  std::int32_t misses = 0;
  for (std::int32_t base = 0; base < distinct; base += p) {
    const std::int32_t j = base + r;
    const bool miss = j < distinct && s.slot_of[s.shown[j]] < 0;
    std::int32_t total = 0;
    const std::int32_t at = misses + g.exclusive_sum(miss ? 1 : 0, total);
    if (miss) {
      s.copies[at].expert = s.shown[j];
    }
    misses += total;
  }
  const std::int32_t free_slots = capacity - resident;
  const std::int32_t from_free = misses < free_slots ? misses : free_slots;
  const std::int32_t evicting = misses - from_free;

  // 4. Under `lfu_history`, the victims are the `evicting` unrequested residents of lowest
  //    (count, LRU position), smallest first: each is ranked against the others in O(resident),
  //    then marked in `w.first` (restored in step 6) so that the walk below keeps the others.
  const bool by_count = s.policy == step_policy::lfu_history;
  std::int32_t to_evict_in_walk = evicting;
  if (by_count && evicting > 0) {
    for (std::int32_t q = r; q < resident; q += p) {
      const std::int32_t e = s.lru[q];
      if (w.first[e] != unseen) {
        continue;  // requested: not a candidate
      }
      const std::uint64_t count = s.count[e];
      std::int32_t rank = 0;
      for (std::int32_t j = 0; j < resident; ++j) {
        const std::int32_t other = s.lru[j];
        const std::uint64_t c = s.count[other];
        rank += w.first[other] == unseen && (c < count || (c == count && j < q)) ? 1 : 0;
      }
      if (rank < evicting) {
        w.victims[rank] = e;
      }
    }
    g.sync();
    for (std::int32_t m = r; m < evicting; m += p) {
      w.first[w.victims[m]] = detail::evicted_mark;
    }
    g.sync();
    to_evict_in_walk = 0;
  }

  // 5. Walk the LRU list: the first `to_evict_in_walk` residents the call does not request (and
  //    has not marked) are the victims; the other unmarked, unrequested ones move to the front,
  //    in order. (An element is read before the scan's barrier and written after it, to a
  //    position no later than its own.)
  std::int32_t unrequested = 0;
  for (std::int32_t base = 0; base < resident; base += p) {
    const std::int32_t q = base + r;
    const std::int32_t e = q < resident ? s.lru[q] : -1;
    const bool free_to_go = q < resident && w.first[e] == unseen;
    std::int32_t total = 0;
    const std::int32_t rank = unrequested + g.exclusive_sum(free_to_go ? 1 : 0, total);
    if (free_to_go) {
      if (rank < to_evict_in_walk) {
        w.victims[rank] = e;
      } else {
        s.lru[rank - to_evict_in_walk] = e;
      }
    }
    unrequested += total;
  }
  g.sync();

  // 6. Each miss takes a free slot (the highest first) or its victim's slot.
  for (std::int32_t m = r; m < misses; m += p) {
    std::int32_t slot = 0;
    if (m < from_free) {
      slot = free_slots - 1 - m;
    } else {
      const std::int32_t victim = w.victims[m - from_free];
      slot = s.slot_of[victim];
      s.slot_of[victim] = -1;
      w.first[victim] = unseen;
    }
    s.copies[m].slot = slot;
    s.slot_of[s.copies[m].expert] = slot;
  }
  g.sync();

  // 7. The call's experts become the most recent, in access order, visible in the map, and
  //    counted once each.
  const std::int32_t kept = unrequested - to_evict_in_walk;
  for (std::int32_t j = r; j < distinct; j += p) {
    const std::int32_t e = s.shown[j];
    s.lru[kept + j] = e;
    s.map[e] = s.slot_of[e];
    w.first[e] = unseen;
    if (by_count) {
      ++s.count[e];
    }
  }
  g.sync();
  if (r == 0) {
    detail::record_success(*s.info, distinct, misses, from_free);
  }
  return pager_step_status::ok;
}

}  // namespace wisp::cuda
