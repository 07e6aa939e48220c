// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `host_pager_state`: the device pager's state in host memory, stepped on the host by the
/// very functions a GPU runs (`<wisp/cuda/pager_step.hpp>`). Host-safe.
#pragma once

#include <wisp/core/error.hpp>
#include <wisp/core/topk.hpp>
#include <wisp/cuda/pager_block_step.hpp>
#include <wisp/cuda/pager_state.hpp>
#include <wisp/cuda/pager_warp_step.hpp>
#include <wisp/cuda/thread_group.hpp>
#include <wisp/cuda/warp_lanes.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace wisp::cuda {

/// @brief The device pager's state in host memory, for running `pager_step` on the host (tests,
/// benchmarks, a CPU engine): owns the arrays of a `pager_state` and a workspace. The policy is
/// the config's (`step_policy`, `lru` by default).
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
    if (config.policy == step_policy::lfu_history) {
      count_.assign(layers * experts, 0);
    }
    first_.assign(experts, unseen);
    victims_.assign(slots, -1);
    state_ = pager_state{config.layers,
                         config.experts,
                         config.max_capacity(),
                         config.policy,
                         slot_of_.data(),
                         lru_.data(),
                         shown_.data(),
                         map_.data(),
                         copies_.data(),
                         info_.data(),
                         count_.empty() ? nullptr : count_.data()};
  }
  host_pager_state(host_pager_state&&) noexcept = default;
  host_pager_state& operator=(host_pager_state&&) noexcept = default;
  host_pager_state(const host_pager_state&) = delete;
  host_pager_state& operator=(const host_pager_state&) = delete;

  /// @brief Runs one step of `layer` on the calling thread, in the form `kernel` names: the
  /// block step (`serial_group`, the default) or the warp step (`lockstep_warp`); `automatic`
  /// picks as `device_pager::step` does (`pick_step_kernel`). Every form gives the same result.
  /// O(ids.size() + capacity), O(ids.size() + capacity^2) for an evicting `lfu_history` call
  /// in the block form.
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
  /// Layer `layer`'s count of each expert's calls (`lfu_history`; empty under `lru`).
  /// @throws wisp::logic_error on a bad layer.
  [[nodiscard]] std::span<const std::uint64_t> counts(std::int32_t layer) const {
    check_layer(layer);
    const pager_layer_ref s = state_.layer(layer);
    return {s.count, s.count == nullptr ? 0 : static_cast<std::size_t>(state_.experts)};
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
  std::vector<std::uint64_t> count_;  // empty under `lru`
  std::vector<std::int32_t> first_;
  std::vector<std::int32_t> victims_;
  pager_state state_;
};

}  // namespace wisp::cuda
