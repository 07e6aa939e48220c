// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The device pager step: `pager<lru>::prepare` for one layer as one `WISP_HOST_DEVICE`
/// function of (state, ids) -> (expert map, copy list), run by one CUDA thread block per layer
/// (`wisp::cuda::device_pager`, `<wisp/cuda/device_pager.cuh>`) or by one host thread
/// (`host_pager_state`, here). Host-safe.
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
    pager_layer_info& info = *s.info;
    if (status == pager_step_status::bad_id) {  // name the first bad id
      for (std::int32_t i = 0; i < n; ++i) {
        if (ids[i] < 0 || ids[i] >= s.experts) {
          value = static_cast<std::int64_t>(ids[i]);
          break;
        }
      }
    }
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
    pager_layer_info& info = *s.info;
    info.resident = resident + from_free;
    info.shown = distinct;
    info.copies = misses;
    info.hits = distinct - misses;
    info.status = pager_step_status::ok;
    ++info.calls;
    info.total_hits += static_cast<std::uint64_t>(distinct - misses);
    info.total_misses += static_cast<std::uint64_t>(misses);
  }
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

  /// @brief Runs `pager_step` for `layer` on the calling thread. O(ids.size() + capacity).
  /// @throws wisp::logic_error (nothing changed) if `layer` is outside `[0, layers)` or `ids`
  ///   holds more than INT32_MAX ids. Bad ids and over-capacity calls are not thrown: they are
  ///   the step's status, as on a GPU.
  template <topk_id Id>
  pager_step_status step(std::int32_t layer, std::span<const Id> ids) {
    check_layer(layer);
    WISP_EXPECTS(ids.size() <= static_cast<std::size_t>(INT32_MAX),
                 "host_pager_state::step: ", ids.size(), " ids in one call");
    return pager_step(serial_group{}, state_.layer(layer), workspace(), ids.data(),
                      static_cast<std::int32_t>(ids.size()));
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
