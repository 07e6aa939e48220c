// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The device pager step: `pager<lru>::prepare` for one layer as a `WISP_HOST_DEVICE`
/// function of (state, ids) -> (expert map, copy list), in two forms with the same results:
/// `pager_step`, run by one CUDA thread block per layer or one host thread, for any call, and
/// `warp_pager_step`, run by one warp (or 32 lanes in lockstep on the host), for calls of at
/// most 32 ids on layers of at most 32 slots. `wisp::cuda::device_pager`
/// (`<wisp/cuda/device_pager.cuh>`) runs them on a GPU, `host_pager_state` (here) on the host.
/// Host-safe.
///
/// The state is a plain struct of arrays (`pager_state`): device memory on a GPU, so a whole MoE
/// layer (router, step, copies, fused MoE) runs without a host synchronisation and can be captured
/// in one CUDA graph; host memory in host runs, where the tests replay the ESFT trace through the
/// very same function and require its hits, misses, maps and copy lists to equal `pager<lru>`'s
/// and `pager<least_stale>`'s.
///
/// One call of layer `l` with ids `ids[0, n)` does what `pager::prepare` does with a per-layer
/// LRU cache of `capacity(l)` slots:
/// - the distinct ids, in first-seen order, become the layer's visible experts; the map shows
///   exactly them (`map[e]` = slot) and hides the previous call's (-1);
/// - the resident ones hit; the others miss, in access order, and each takes a free slot (the
///   highest first, as `slot_cache` pops its free list) or else the slot of the least recently
///   used resident expert that the call does not request; the copy list is `(expert, slot)` per
///   miss, in that order;
/// - the call's experts become the most recently used, in access order.
/// In per-layer scope `least_stale` evicts exactly as `lru` (every resident expert of a layer has
/// the same layer distance, and the experts used in the current pass are the most recent ones, so
/// the first unrequested one in LRU order is also the stalest): one step serves both.
///
/// A bad call (an id outside `[0, experts)`, or more distinct ids than the capacity) leaves the
/// cache unchanged, hides every expert, empties the copy list and is recorded in the layer's
/// `pager_layer_info` (status, and the first failure with its offending value): a kernel cannot
/// throw, so a host reads the info after synchronising.
/// @code
/// wisp::cuda::host_pager_state pager({.layers = 26, .experts = 64, .capacity = 16});
/// pager.step(layer, ids);                                // ids: std::span<const std::int32_t>
/// std::span<const std::int32_t> map = pager.map(layer);  // == pager<lru>::prepare(...).expert_map
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/core/topk.hpp>
#include <wisp/cuda/thread_group.hpp>
#include <wisp/cuda/warp_lanes.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace wisp::cuda {

/// Outcome of one step, in `pager_layer_info::status`.
enum class pager_step_status : std::int32_t {
  ok = 0,
  bad_id = 1,         ///< an id outside `[0, experts)`; the value is the id
  over_capacity = 2,  ///< more distinct ids than the capacity; the value is their number
};

/// @brief Counters and the last call's outcome of one layer (in the state's memory).
struct pager_layer_info {
  std::int32_t capacity = 0;  ///< slots of the layer (fixed at construction)
  std::int32_t resident = 0;  ///< experts resident now
  std::int32_t shown = 0;     ///< distinct experts of the last call, all visible in the map
  std::int32_t copies = 0;    ///< entries of the last call's copy list (= its misses)
  std::int32_t hits = 0;      ///< the last call's hits (`hits + copies == shown`)
  pager_step_status status = pager_step_status::ok;       ///< the last call's outcome
  pager_step_status first_error = pager_step_status::ok;  ///< the first failed call's status
  std::int64_t first_error_value = 0;  ///< its bad id or its number of distinct ids
  std::uint64_t first_error_call = 0;  ///< its index among the layer's calls
  std::uint64_t calls = 0;             ///< steps run on the layer, failed ones included
  std::uint64_t total_hits = 0;
  std::uint64_t total_misses = 0;
};

/// @brief One layer's arrays, as the step reads and writes them. Trivially copyable.
struct pager_layer_ref {
  std::int32_t experts = 0;
  std::int32_t capacity = 0;
  std::int32_t* slot_of = nullptr;  ///< `[experts]`: the slot of each resident expert, else -1
  std::int32_t* lru = nullptr;      ///< `[capacity]`: resident experts, least recently used first
  std::int32_t* shown = nullptr;    ///< `[capacity]`: the last call's experts, first-seen order
  std::int32_t* map = nullptr;      ///< `[experts]`: the expert map (output)
  copy_op* copies = nullptr;        ///< `[capacity]`: the copy list (output)
  pager_layer_info* info = nullptr;
};

/// @brief Scratch of one step: `first` holds `unseen` in every entry before and after a step.
struct pager_workspace {
  std::int32_t* first = nullptr;    ///< `[experts]`: first position of each id in the call
  std::int32_t* victims = nullptr;  ///< `[capacity]`
};

/// The value of `pager_workspace::first` entries outside a step.
inline constexpr std::int32_t unseen = INT32_MAX;

/// @brief Shape of a device pager: `layers` layers of `experts` experts, and the slots of each.
struct pager_state_config {
  std::int32_t layers = 1;
  std::int32_t experts = 1;
  std::int32_t capacity = 1;  ///< slots of every layer, unless `layer_capacities` is given
  std::vector<std::int32_t> layer_capacities = {};  ///< slots per layer (size `layers`)

  /// @throws wisp::logic_error naming the bad value if a count is not positive, `layers *
  ///   experts` overflows int32, `layer_capacities` has the wrong size, or a capacity is outside
  ///   `[1, experts]`.
  void validate() const {
    WISP_EXPECTS(layers >= 1 && experts >= 1, "pager_state_config: layers ", layers,
                 " and experts ", experts, " must be >= 1");
    WISP_EXPECTS(static_cast<std::int64_t>(layers) * experts <= INT32_MAX,
                 "pager_state_config: layers * experts = ",
                 static_cast<std::int64_t>(layers) * experts, " overflows int32");
    WISP_EXPECTS(
        layer_capacities.empty() || layer_capacities.size() == static_cast<std::size_t>(layers),
        "pager_state_config: layer_capacities has ", layer_capacities.size(), " entries for ",
        layers, " layers");
    for (std::int32_t l = 0; l < layers; ++l) {
      const std::int32_t c = capacity_of(l);
      WISP_EXPECTS(c >= 1 && c <= experts, "pager_state_config: capacity ", c, " of layer ", l,
                   " must be in [1, experts = ", experts, "]");
    }
  }
  /// Slots of layer `l` (unchecked).
  [[nodiscard]] std::int32_t capacity_of(std::int32_t l) const {
    return layer_capacities.empty() ? capacity : layer_capacities[static_cast<std::size_t>(l)];
  }
  /// The largest capacity: the stride of the per-slot arrays.
  [[nodiscard]] std::int32_t max_capacity() const {
    std::int32_t m = capacity;
    if (!layer_capacities.empty()) {
      m = 0;
      for (const std::int32_t c : layer_capacities) {
        m = c > m ? c : m;
      }
    }
    return m;
  }
};

/// @brief The state of every layer: plain arrays, row-major per layer. Trivially copyable (a
/// kernel takes it by value). Per-slot arrays have a stride of `max_capacity`.
struct pager_state {
  std::int32_t layers = 0;
  std::int32_t experts = 0;
  std::int32_t max_capacity = 0;
  std::int32_t* slot_of = nullptr;   ///< `[layers x experts]`
  std::int32_t* lru = nullptr;       ///< `[layers x max_capacity]`
  std::int32_t* shown = nullptr;     ///< `[layers x max_capacity]`
  std::int32_t* map = nullptr;       ///< `[layers x experts]`
  copy_op* copies = nullptr;         ///< `[layers x max_capacity]`
  pager_layer_info* info = nullptr;  ///< `[layers]`

  /// Layer `l`'s arrays (unchecked). O(1).
  [[nodiscard]] WISP_HOST_DEVICE pager_layer_ref layer(std::int32_t l) const noexcept {
    const std::size_t e = static_cast<std::size_t>(l) * static_cast<std::size_t>(experts);
    const std::size_t c = static_cast<std::size_t>(l) * static_cast<std::size_t>(max_capacity);
    return pager_layer_ref{experts,   info[l].capacity, slot_of + e, lru + c,
                           shown + c, map + e,          copies + c,  info + l};
  }
};

namespace detail {

// The counters after a failed call: nothing shown or copied, the first failure kept.
WISP_HOST_DEVICE inline void record_failure(pager_layer_info& info, pager_step_status status,
                                            std::int64_t value) noexcept {
  if (info.first_error == pager_step_status::ok) {
    info.first_error = status;
    info.first_error_value = value;
    info.first_error_call = info.calls;
  }
  info.status = status;
  info.shown = 0;
  info.copies = 0;
  info.hits = 0;
  ++info.calls;
}

// The counters after a call that showed `distinct` experts, `misses` of them copied, and took
// `from_free` free slots.
WISP_HOST_DEVICE inline void record_success(pager_layer_info& info, std::int32_t distinct,
                                            std::int32_t misses, std::int32_t from_free) noexcept {
  info.resident += from_free;
  info.shown = distinct;
  info.copies = misses;
  info.hits = distinct - misses;
  info.status = pager_step_status::ok;
  ++info.calls;
  info.total_hits += static_cast<std::uint64_t>(distinct - misses);
  info.total_misses += static_cast<std::uint64_t>(misses);
}

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
/// Work O(n + capacity) in total, split over the group; `sync`s between its phases. No
/// allocation. Thread safety: one group per layer at a time.
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

  // 3. Misses, in access order, become the copy list (their slots are chosen in step 5).
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

  // 4. Walk the LRU list: the first `evicting` residents the call does not request are the
  //    victims; the other unrequested ones move to the front, in order. (An element is read
  //    before the scan's barrier and written after it, to a position no later than its own.)
  std::int32_t unrequested = 0;
  for (std::int32_t base = 0; base < resident; base += p) {
    const std::int32_t q = base + r;
    const std::int32_t e = q < resident ? s.lru[q] : -1;
    const bool free_to_go = q < resident && w.first[e] == unseen;
    std::int32_t total = 0;
    const std::int32_t rank = unrequested + g.exclusive_sum(free_to_go ? 1 : 0, total);
    if (free_to_go) {
      if (rank < evicting) {
        w.victims[rank] = e;
      } else {
        s.lru[rank - evicting] = e;
      }
    }
    unrequested += total;
  }
  g.sync();

  // 5. Each miss takes a free slot (the highest first) or its victim's slot.
  for (std::int32_t m = r; m < misses; m += p) {
    std::int32_t slot = 0;
    if (m < from_free) {
      slot = free_slots - 1 - m;
    } else {
      const std::int32_t victim = w.victims[m - from_free];
      slot = s.slot_of[victim];
      s.slot_of[victim] = -1;
    }
    s.copies[m].slot = slot;
    s.slot_of[s.copies[m].expert] = slot;
  }
  g.sync();

  // 6. The call's experts become the most recent, in access order, and visible in the map.
  const std::int32_t kept = unrequested - evicting;
  for (std::int32_t j = r; j < distinct; j += p) {
    const std::int32_t e = s.shown[j];
    s.lru[kept + j] = e;
    s.map[e] = s.slot_of[e];
    w.first[e] = unseen;
  }
  g.sync();
  if (r == 0) {
    detail::record_success(*s.info, distinct, misses, from_free);
  }
  return pager_step_status::ok;
}

/// The most ids of one call, and the most slots of a layer, that `warp_pager_step` serves.
inline constexpr std::int32_t warp_step_limit = 32;

/// @brief Which form of the step runs a call. Both give the same results.
enum class step_kernel : std::int32_t {
  /// `warp` where the call and the layer are within `warp_step_limit`, else `block`.
  automatic = 0,
  /// `pager_step`: a thread block (or one host thread), any call.
  block = 1,
  /// `warp_pager_step`: one warp, calls and layers within `warp_step_limit`.
  warp = 2,
};

/// The form `automatic` picks for a call of `n` ids on a layer of `capacity` slots. O(1).
[[nodiscard]] constexpr step_kernel pick_step_kernel(step_kernel requested, std::int64_t n,
                                                     std::int32_t capacity) noexcept {
  if (requested != step_kernel::automatic) {
    return requested;
  }
  return n <= warp_step_limit && capacity <= warp_step_limit ? step_kernel::warp
                                                             : step_kernel::block;
}

namespace detail {
// The form a call of `n` ids on `layer` runs (`pick_step_kernel`); a forced `warp` beyond its
// limits is refused. `who` names the caller in the message.
inline step_kernel checked_step_kernel(const char* who, step_kernel requested, std::int64_t n,
                                       std::int32_t layer, std::int32_t capacity) {
  const step_kernel kernel = pick_step_kernel(requested, n, capacity);
  WISP_EXPECTS(kernel != step_kernel::warp || (n <= warp_step_limit && capacity <= warp_step_limit),
               who, ": the warp step serves at most ", warp_step_limit,
               " ids and slots; the call has ", n, " ids, layer ", layer, " ", capacity, " slots");
  return kernel;
}
}  // namespace detail

/// @brief `pager_step` for a call of at most 32 ids on a layer of at most 32 slots (decode), run
/// by one warp with votes instead of a thread block with scans: same state, same results, call
/// by call, so the two may alternate on one layer (`step_kernel`).
///
/// Lane `i` holds id `i` and LRU position `i`. A match vote finds each id's first lane (the
/// distinct ids, in first-seen order, by counting the first lanes below it); a vote over the
/// call's slot table entries splits hits from misses; an or over the hits' slots tells each LRU
/// position whether the call requests its expert; the unrequested ones, counted in LRU order,
/// are the victims and the survivors. The longest dependency chain is two rounds of loads (the
/// ids and the layer's state, then the slot table entries they name) and a handful of votes, with
/// a warp sync between the state's reads and its writes and one to hand the victims' slots to the
/// misses.
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
/// a fixed number of warp operations (loads, one match, four ballots, one or, two syncs), no
/// loop. Thread safety: one warp per layer at a time.
WISP_DETAIL_EXEC_CHECK_DISABLE
template <class Warp, topk_id Id>
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
  const std::int32_t kept = popcount32(unrequested) - evicting;
  hide_previous();
  w.sync();  // every lane has read the state, and hidden the previous experts, before any writes

  // The first `evicting` unrequested experts in LRU order give up their slots; the others move
  // to the front of the list, in order.
  w.each([&](std::int32_t i) {
    if (has_lane(unrequested, i)) {
      const std::int32_t rank = popcount32(unrequested & lanes_below(i));
      if (rank < evicting) {
        victim_slots[rank] = lru_slot[i];
        s.slot_of[old_lru[i]] = -1;
      } else {
        s.lru[rank - evicting] = old_lru[i];
      }
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
  });
  w.each([&](std::int32_t i) {
    if (i == 0) {
      detail::record_success(info, distinct, misses, from_free);
      *s.info = info;
    }
  });
  return pager_step_status::ok;
}

/// @brief The device pager's state in host memory, for running `pager_step` on the host (tests,
/// benchmarks, a CPU engine): owns the arrays of a `pager_state` and a workspace.
///
/// Every cache starts empty and the maps hide every expert. Move-only. Thread safety: one thread
/// at a time.
class host_pager_state {
 public:
  /// @throws wisp::logic_error if `config` is invalid; std::bad_alloc.
  explicit host_pager_state(const pager_state_config& config) {
    config.validate();
    const auto layers = static_cast<std::size_t>(config.layers);
    const auto experts = static_cast<std::size_t>(config.experts);
    const auto slots = static_cast<std::size_t>(config.max_capacity());
    slot_of_.assign(layers * experts, -1);
    lru_.assign(layers * slots, -1);
    shown_.assign(layers * slots, -1);
    map_.assign(layers * experts, -1);
    copies_.assign(layers * slots, copy_op{});
    info_.assign(layers, pager_layer_info{});
    for (std::int32_t l = 0; l < config.layers; ++l) {
      info_[static_cast<std::size_t>(l)].capacity = config.capacity_of(l);
    }
    first_.assign(experts, unseen);
    victims_.assign(slots, -1);
    state_ = pager_state{config.layers,   config.experts, config.max_capacity(),
                         slot_of_.data(), lru_.data(),    shown_.data(),
                         map_.data(),     copies_.data(), info_.data()};
  }
  host_pager_state(host_pager_state&&) noexcept = default;
  host_pager_state& operator=(host_pager_state&&) noexcept = default;
  host_pager_state(const host_pager_state&) = delete;
  host_pager_state& operator=(const host_pager_state&) = delete;

  /// @brief Runs one step of `layer` on the calling thread, in the form `kernel` names: the
  /// block step (`serial_group`, the default) or the warp step (`lockstep_warp`); `automatic`
  /// picks as `device_pager::step` does (`pick_step_kernel`). Every form gives the same result.
  /// O(ids.size() + capacity).
  /// @throws wisp::logic_error (nothing changed) if `layer` is outside `[0, layers)`, `ids`
  ///   holds more than INT32_MAX ids, or `kernel` is `warp` and the call or the layer exceeds
  ///   `warp_step_limit`. Bad ids and over-capacity calls are not thrown: they are the step's
  ///   status, as on a GPU.
  template <topk_id Id>
  pager_step_status step(std::int32_t layer, std::span<const Id> ids,
                         step_kernel kernel = step_kernel::block) {
    check_layer(layer);
    WISP_EXPECTS(ids.size() <= static_cast<std::size_t>(INT32_MAX),
                 "host_pager_state::step: ", ids.size(), " ids in one call");
    const pager_layer_ref s = state_.layer(layer);
    const auto n = static_cast<std::int32_t>(ids.size());
    if (detail::checked_step_kernel("host_pager_state::step", kernel, n, layer, s.capacity) ==
        step_kernel::warp) {
      return warp_pager_step(lockstep_warp{}, s, workspace(), ids.data(), n);
    }
    return pager_step(serial_group{}, s, workspace(), ids.data(), n);
  }

  /// The plain state (pointers into this object), e.g. to run the step with another group.
  [[nodiscard]] const pager_state& state() const noexcept { return state_; }
  /// The workspace `step` uses (one step at a time).
  [[nodiscard]] pager_workspace workspace() noexcept {
    return pager_workspace{first_.data(), victims_.data()};
  }
  /// Layer `layer`'s expert map. @throws wisp::logic_error on a bad layer.
  [[nodiscard]] std::span<const std::int32_t> map(std::int32_t layer) const {
    check_layer(layer);
    return {state_.layer(layer).map, static_cast<std::size_t>(state_.experts)};
  }
  /// Layer `layer`'s last copy list. @throws wisp::logic_error on a bad layer.
  [[nodiscard]] std::span<const copy_op> copies(std::int32_t layer) const {
    check_layer(layer);
    const pager_layer_ref s = state_.layer(layer);
    return {s.copies, static_cast<std::size_t>(s.info->copies)};
  }
  /// Layer `layer`'s last call's experts, first-seen order. @throws wisp::logic_error.
  [[nodiscard]] std::span<const std::int32_t> shown(std::int32_t layer) const {
    check_layer(layer);
    const pager_layer_ref s = state_.layer(layer);
    return {s.shown, static_cast<std::size_t>(s.info->shown)};
  }
  /// Layer `layer`'s counters. @throws wisp::logic_error on a bad layer.
  [[nodiscard]] const pager_layer_info& info(std::int32_t layer) const {
    check_layer(layer);
    return info_[static_cast<std::size_t>(layer)];
  }

 private:
  void check_layer(std::int32_t layer) const {
    WISP_EXPECTS(layer >= 0 && layer < state_.layers, "host_pager_state: layer ", layer,
                 " is outside [0, ", state_.layers, ")");
  }

  std::vector<std::int32_t> slot_of_;
  std::vector<std::int32_t> lru_;
  std::vector<std::int32_t> shown_;
  std::vector<std::int32_t> map_;
  std::vector<copy_op> copies_;
  std::vector<pager_layer_info> info_;
  std::vector<std::int32_t> first_;
  std::vector<std::int32_t> victims_;
  pager_state state_;
};

}  // namespace wisp::cuda
