// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `warp_pager_step`: the warp form of the device pager step (see
/// `<wisp/cuda/pager_step.hpp>`), for calls of at most 32 ids on layers of at most 32 slots, run by
/// one warp (`device_warp`) or 32 lanes in lockstep on the host (`lockstep_warp`). Host-safe.
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/topk.hpp>
#include <wisp/cuda/pager_state.hpp>
#include <wisp/cuda/warp_lanes.hpp>

#include <cstdint>

namespace wisp::cuda {

/// @brief `pager_step` for a call of at most 32 ids on a layer of at most 32 slots (decode), run
/// by one warp with votes instead of a thread block with scans: same state, same results, call
/// by call, so the two may alternate on one layer (`step_kernel`).
///
/// Lane `i` holds id `i` and LRU position `i`. A match vote finds each id's first lane (the
/// distinct ids, in first-seen order, by counting the first lanes below it); a vote over the
/// call's slot table entries splits hits from misses; an or over the hits' slots tells each LRU
/// position whether the call requests its expert; the unrequested ones, ranked, are the
/// victims and the survivors: in LRU order under `lru`; by (count, LRU position) under
/// `lfu_history`, where each victim is the least key left, found by a warp min over the counts'
/// 32-bit halves and a ballot. The longest dependency chain is two rounds of loads (the ids and
/// the layer's state, then the slot table and count entries they name) and a handful of votes
/// (plus two or three per victim of a call that evicts by count), with a warp sync between the
/// state's reads and its writes and one to hand the victims' slots to the misses.
///
/// @param w    the warp (`lockstep_warp` on the host, `device_warp` in a kernel); every lane
///             calls the step
/// @param s    the layer's arrays (`pager_state::layer`); `s.capacity <= warp_step_limit`
/// @param ws   scratch: `ws.victims` (`s.capacity` ints, shared memory on a GPU); `ws.first` is
///             not used
/// @param ids  the call's routed ids, `n` of them, `0 <= n <= warp_step_limit`
/// @return the status, also in `s.info->status` (every lane returns the same one)
/// Preconditions (unchecked, as in a kernel; `device_pager::step` and `host_pager_state::step`
/// check them): the limits above. Bad ids and over-capacity calls fail as in `pager_step`. Work:
/// a fixed number of warp operations (loads, one match, five ballots, one or, two syncs), no
/// loop under `lru`; under `lfu_history` a call that evicts `v` experts also takes one ballot,
/// then per victim a min and a ballot (and one more min when a count reaches 2^32).
/// Thread safety: one warp per layer at a time; other layers may step concurrently, each with
/// its own `ws.victims`.
WISP_DETAIL_EXEC_CHECK_DISABLE
template <warp_lanes Warp, topk_id Id>
WISP_HOST_DEVICE pager_step_status warp_pager_step(const Warp& w, const pager_layer_ref& s,
                                                   const pager_workspace& ws, const Id* ids,
                                                   std::int32_t n) {
  std::int32_t* const victim_slots = ws.victims;
  const std::int32_t capacity = s.capacity;
  // Every load that depends on nothing the step computes, at once (the counters too: read at the
  // end, after the step's stores, they would cost one more round trip).
  pager_layer_info info = *s.info;
  const std::int32_t resident = info.resident;
  const auto id = w.lanes([&](std::int32_t i) -> std::int64_t {
    return i < n ? static_cast<std::int64_t>(ids[i]) : -1;
  });
  const auto old_lru = w.lanes([&](std::int32_t i) -> std::int32_t {
    return i < capacity ? s.lru[i] : -1;  // used below `resident` only
  });
  const auto old_shown = w.lanes([&](std::int32_t i) -> std::int32_t {
    return i < capacity ? s.shown[i] : -1;  // used below `info.shown` only
  });
  // Hides the previous call's experts (before any lane shows the new ones: a sync apart).
  auto hide_previous = [&] {
    w.each([&](std::int32_t i) {
      if (i < info.shown) {
        s.map[old_shown[i]] = -1;
      }
    });
  };
  // A failed call: hidden map, the counters updated by lane 0, nothing else changed.
  auto fail = [&](pager_step_status status, std::int64_t value) {
    hide_previous();
    w.each([&](std::int32_t i) {
      if (i == 0) {
        detail::record_failure(info, status, value);
        *s.info = info;
      }
    });
    return status;
  };

  const std::uint32_t bad =
      w.ballot([&](std::int32_t i) { return i < n && (id[i] < 0 || id[i] >= s.experts); });
  if (bad != 0) {
    // Another lane's id: read again (on a GPU a lane holds only its own).
    return fail(pager_step_status::bad_id, static_cast<std::int64_t>(ids[lowest_lane(bad)]));
  }

  // The distinct ids: the lanes that hold an id first, in lane (= first-seen) order.
  const auto expert = w.lanes([&](std::int32_t i) { return static_cast<std::int32_t>(id[i]); });
  const auto same = w.match(expert);
  const std::uint32_t first =
      w.ballot([&](std::int32_t i) { return i < n && lowest_lane(same[i]) == i; });
  const std::int32_t distinct = popcount32(first);
  if (distinct > capacity) {
    return fail(pager_step_status::over_capacity, distinct);
  }

  // Hits and misses; which LRU positions the call requests (a resident expert is requested iff
  // its slot is a hit's slot).
  const auto slot = w.lanes([&](std::int32_t i) -> std::int32_t {
    return has_lane(first, i) ? s.slot_of[expert[i]] : -1;
  });
  const auto lru_slot = w.lanes(
      [&](std::int32_t i) -> std::int32_t { return i < resident ? s.slot_of[old_lru[i]] : -1; });
  const bool by_count = s.policy == step_policy::lfu_history;
  // Under `lfu_history`: the counts of the LRU list's experts and of the call's.
  const auto lru_count = w.lanes([&](std::int32_t i) -> std::uint64_t {
    return by_count && i < resident ? s.count[old_lru[i]] : 0;
  });
  const auto call_count = w.lanes([&](std::int32_t i) -> std::uint64_t {
    return by_count && has_lane(first, i) ? s.count[expert[i]] : 0;
  });
  const std::uint32_t miss =
      w.ballot([&](std::int32_t i) { return slot[i] < 0 && has_lane(first, i); });
  const std::uint32_t hit_slots = w.reduce_or(w.lanes([&](std::int32_t i) -> std::uint32_t {
    return slot[i] >= 0 ? std::uint32_t{1} << static_cast<std::uint32_t>(slot[i]) : 0u;
  }));
  const std::uint32_t unrequested =
      w.ballot([&](std::int32_t i) { return i < resident && !has_lane(hit_slots, lru_slot[i]); });
  const std::int32_t misses = popcount32(miss);
  const std::int32_t free_slots = capacity - resident;
  const std::int32_t from_free = misses < free_slots ? misses : free_slots;
  const std::int32_t evicting = misses - from_free;
  // Each unrequested expert's rank among the unrequested ones: in LRU order under `lru`. Under
  // `lfu_history`, and only when the call evicts, the `evicting` victims are picked one by one,
  // each the least (count, LRU position) of those left: a min over the low halves of the counts
  // (after one over the high halves when some count reaches 2^32), then the lowest lane that
  // holds it; the others keep a rank of `evicting`. The `evicting` lowest ranks are the victims,
  // in rank order.
  auto rank = w.lanes([&](std::int32_t i) { return popcount32(unrequested & lanes_below(i)); });
  if (by_count && evicting > 0) {
    rank = w.lanes([&](std::int32_t) { return evicting; });
    const auto high =
        w.lanes([&](std::int32_t i) { return static_cast<std::uint32_t>(lru_count[i] >> 32u); });
    const auto low =
        w.lanes([&](std::int32_t i) { return static_cast<std::uint32_t>(lru_count[i]); });
    const bool wide =
        w.ballot([&](std::int32_t i) { return has_lane(unrequested, i) && high[i] != 0; }) != 0;
    constexpr std::uint32_t none = ~std::uint32_t{0};
    std::uint32_t left = unrequested;  // never empty here: evicting <= popcount(unrequested)
    for (std::int32_t r = 0; r < evicting; ++r) {
      std::uint32_t least_high = 0;
      if (wide) {
        least_high = w.reduce_min(
            w.lanes([&](std::int32_t i) { return has_lane(left, i) ? high[i] : none; }));
      }
      const auto tied = [&](std::int32_t i) { return has_lane(left, i) && high[i] == least_high; };
      const std::uint32_t least_low =
          w.reduce_min(w.lanes([&](std::int32_t i) { return tied(i) ? low[i] : none; }));
      const std::int32_t victim =
          lowest_lane(w.ballot([&](std::int32_t i) { return tied(i) && low[i] == least_low; }));
      left &= ~(std::uint32_t{1} << static_cast<std::uint32_t>(victim));
      rank = w.lanes([&](std::int32_t i) { return i == victim ? r : rank[i]; });
    }
  }
  const std::uint32_t victims =
      w.ballot([&](std::int32_t i) { return has_lane(unrequested, i) && rank[i] < evicting; });
  const std::uint32_t survivors = unrequested & ~victims;
  const std::int32_t kept = popcount32(survivors);
  hide_previous();
  w.sync();  // every lane has read the state, and hidden the previous experts, before any writes

  // The victims give up their slots; the survivors move to the front of the list, in order.
  w.each([&](std::int32_t i) {
    if (has_lane(victims, i)) {
      victim_slots[rank[i]] = lru_slot[i];
      s.slot_of[old_lru[i]] = -1;
    } else if (has_lane(survivors, i)) {
      s.lru[popcount32(survivors & lanes_below(i))] = old_lru[i];
    }
  });
  w.sync();

  // Each miss takes a free slot (the highest first) or its victim's; the call's experts become
  // the most recent, in first-seen order, and visible in the map.
  w.each([&](std::int32_t i) {
    if (!has_lane(first, i)) {
      return;
    }
    const std::int32_t e = expert[i];
    std::int32_t to = slot[i];
    if (has_lane(miss, i)) {
      const std::int32_t m = popcount32(miss & lanes_below(i));
      to = m < from_free ? free_slots - 1 - m : victim_slots[m - from_free];
      s.copies[m] = copy_op{e, to};
      s.slot_of[e] = to;
    }
    const std::int32_t j = popcount32(first & lanes_below(i));
    s.shown[j] = e;
    s.lru[kept + j] = e;
    s.map[e] = to;
    if (by_count) {
      s.count[e] = call_count[i] + 1;
    }
  });
  w.each([&](std::int32_t i) {
    if (i == 0) {
      detail::record_success(info, distinct, misses, from_free);
      *s.info = info;
    }
  });
  return pager_step_status::ok;
}

}  // namespace wisp::cuda
