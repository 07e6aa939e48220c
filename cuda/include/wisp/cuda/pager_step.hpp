// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The device pager step: `pager<lru>::prepare` (or `pager<lfu_history>::prepare`, by the
/// state's `step_policy`) for one layer as a `WISP_HOST_DEVICE`
/// function of (state, ids) -> (expert map, copy list), in two forms with the same results:
/// `pager_step`, run by one CUDA thread block per layer or one host thread, for any call, and
/// `warp_pager_step`, run by one warp (or 32 lanes in lockstep on the host), for calls of at
/// most 32 ids on layers of at most 32 slots. `wisp::cuda::device_pager`
/// (`<wisp/cuda/device_pager.cuh>`) runs them on a GPU, `host_pager_state` (here) on the host.
/// Host-safe.
///
/// The forms live in `<wisp/cuda/pager_block_step.hpp>` and `<wisp/cuda/pager_warp_step.hpp>`,
/// the state in `<wisp/cuda/pager_state.hpp>`, its host owner in
/// `<wisp/cuda/host_pager_state.hpp>`; this header includes them all.
///
/// The state is a plain struct of arrays (`pager_state`): device memory on a GPU, so a whole MoE
/// layer (router, step, copies, fused MoE) runs without a host synchronisation and can be captured
/// in one CUDA graph; host memory in host runs, where the tests replay the ESFT trace through the
/// very same function and require its hits, misses, maps and copy lists to equal `pager<lru>`'s
/// and `pager<least_stale>`'s (and, under `lfu_history`, `pager<lfu_history>`'s).
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
/// Under `step_policy::lfu_history` the same holds with one change, as in `pager<lfu_history>`:
/// each layer counts its experts' calls over the whole history (an evicted expert keeps its
/// count), every call adds one to each of its distinct experts, and a miss displaces the
/// unrequested resident expert of lowest count, ties to the least recently used.
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
/// wisp::cuda::host_pager_state by_count(
///     {.layers = 26, .experts = 64, .capacity = 16, .policy =
///     wisp::cuda::step_policy::lfu_history});
/// @endcode
#pragma once

#include <wisp/cuda/host_pager_state.hpp>
#include <wisp/cuda/pager_block_step.hpp>
#include <wisp/cuda/pager_state.hpp>
#include <wisp/cuda/pager_warp_step.hpp>
