// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The device pager's state (`pager_state`: plain arrays per layer, device or host memory),
/// its shape and policy (`pager_state_config`, `step_policy`), each layer's counters
/// (`pager_layer_info`) and the choice of step form (`step_kernel`). The steps themselves are in
/// `<wisp/cuda/pager_step.hpp>`. Host-safe.
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/core/scope.hpp>
#include <wisp/core/topk.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
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

/// @brief The eviction rule of a device pager's step (`pager_state_config::policy`): which
/// resident expert a miss displaces once the layer's slots are full. Both rules fill free slots
/// first (the highest first) and never evict an expert the call requests.
enum class step_policy : std::int32_t {
  /// Least recently used, per layer: the same decisions as `pager<lru>` (and `pager<least_stale>`)
  /// in per-layer scope. The default.
  lru = 0,
  /// Least frequently used over the whole history, per layer: the same decisions as
  /// `pager<lfu_history>` in per-layer scope. Each layer counts every call's distinct experts
  /// (`pager_state::count`, kept across evictions); a miss displaces the unrequested resident
  /// expert with the lowest count, ties to the least recently used. One 64-bit counter per
  /// expert and layer.
  lfu_history = 1,
};

/// The policy's name as the host policy spells it (`lru`, `lfu_history`), or "unknown". O(1).
[[nodiscard]] constexpr const char* step_policy_name(step_policy p) noexcept {
  switch (p) {
    case step_policy::lru:
      return "lru";
    case step_policy::lfu_history:
      return "lfu_history";
  }
  return "unknown";
}

/// @brief One layer's arrays, as the step reads and writes them. Trivially copyable.
struct pager_layer_ref {
  std::int32_t experts = 0;
  std::int32_t capacity = 0;
  step_policy policy = step_policy::lru;
  std::int32_t* slot_of = nullptr;  ///< `[experts]`: the slot of each resident expert, else -1
  std::int32_t* lru = nullptr;      ///< `[capacity]`: resident experts, least recently used first
  std::int32_t* shown = nullptr;    ///< `[capacity]`: the last call's experts, first-seen order
  std::int32_t* map = nullptr;      ///< `[experts]`: the expert map (output)
  copy_op* copies = nullptr;        ///< `[capacity]`: the copy list (output)
  pager_layer_info* info = nullptr;
  /// `[experts]`: each expert's calls so far (`lfu_history`; null under `lru`)
  std::uint64_t* count = nullptr;
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
  step_policy policy = step_policy::lru;            ///< the eviction rule of every layer

  /// @throws wisp::logic_error naming the bad value if a count is not positive, `layers *
  ///   experts` overflows int32, `layer_capacities` has the wrong size, a capacity is outside
  ///   `[1, experts]`, or `policy` is not a `step_policy`.
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
    WISP_EXPECTS(policy == step_policy::lru || policy == step_policy::lfu_history,
                 "pager_state_config: unknown step policy ", static_cast<std::int32_t>(policy));
  }
  /// @brief The device pager that mirrors a host pager of config `host` under `policy`: its
  /// layers, experts and per-layer capacities. `host` is a `wisp::pager_config`, or any type with
  /// its members `layers`, `experts`, `capacity`, `layer_capacities` and `scope` (cuda/ does not
  /// include the pager area). The result is validated; `top_k` has no counterpart here, since the
  /// device step reports a call over its capacity instead of refusing it. O(layers).
  /// @throws wisp::logic_error if `host.scope` is not `cache_scope::per_layer` (the device step
  ///   keeps one cache per layer), and as `validate`.
  template <class HostConfig>
  requires requires(const HostConfig& h) {
    { h.layers } -> std::convertible_to<std::int32_t>;
    { h.experts } -> std::convertible_to<std::int32_t>;
    { h.capacity } -> std::convertible_to<std::int32_t>;
    { h.layer_capacities } -> std::convertible_to<const std::vector<std::int32_t>&>;
    { h.scope } -> std::convertible_to<cache_scope>;
  }
  [[nodiscard]] static pager_state_config from_pager(const HostConfig& host,
                                                     step_policy policy = step_policy::lru) {
    WISP_EXPECTS(host.scope == cache_scope::per_layer,
                 "pager_state_config::from_pager: the device step keeps one cache per layer; the "
                 "host pager's scope is ",
                 to_string(host.scope));
    pager_state_config c{.layers = host.layers,
                         .experts = host.experts,
                         .capacity = host.capacity,
                         .layer_capacities = host.layer_capacities,
                         .policy = policy};
    c.validate();
    return c;
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
  step_policy policy = step_policy::lru;
  std::int32_t* slot_of = nullptr;   ///< `[layers x experts]`
  std::int32_t* lru = nullptr;       ///< `[layers x max_capacity]`
  std::int32_t* shown = nullptr;     ///< `[layers x max_capacity]`
  std::int32_t* map = nullptr;       ///< `[layers x experts]`
  copy_op* copies = nullptr;         ///< `[layers x max_capacity]`
  pager_layer_info* info = nullptr;  ///< `[layers]`
  std::uint64_t* count = nullptr;    ///< `[layers x experts]` under `lfu_history`, else null

  /// Layer `l`'s arrays (unchecked). O(1).
  [[nodiscard]] WISP_HOST_DEVICE pager_layer_ref layer(std::int32_t l) const noexcept {
    const std::size_t e = static_cast<std::size_t>(l) * static_cast<std::size_t>(experts);
    const std::size_t c = static_cast<std::size_t>(l) * static_cast<std::size_t>(max_capacity);
    return pager_layer_ref{experts,  info[l].capacity,
                           policy,   slot_of + e,
                           lru + c,  shown + c,
                           map + e,  copies + c,
                           info + l, count == nullptr ? nullptr : count + e};
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

}  // namespace detail

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

}  // namespace wisp::cuda
