// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `device_pager`: the pager step on the device. One warp or one thread block runs the step
/// for a layer on `topk_ids` already in device memory, writing the layer's expert map and copy list
/// in device memory; a copy kernel then reads the listed pinned masters through their mapped device
/// pointers into the slots. No host synchronisation anywhere, so a whole MoE layer (router, step,
/// copies, fused MoE) can be captured in one CUDA graph and replayed with new routing each time.
/// nvcc only.
///
/// A decode-sized call (at most 32 ids on a layer of at most 32 slots) runs `warp_pager_step` on
/// one warp, straight on the state in global memory. A larger one runs `pager_step` on a block
/// that stages the layer's slot table and LRU list in shared memory and writes them back. Both
/// are the functions the host tests run (`<wisp/cuda/pager_step.hpp>`). A bad call cannot throw: it
/// hides every expert, copies nothing and is recorded in the layer's `pager_layer_info`
/// (`read_info` after a synchronisation). The eviction rule is the config's `step_policy`: `lru`
/// (the default) or `lfu_history` (one more 64-bit count per expert and layer).
/// @code
/// wisp::cuda::device_pager pager({.layers = L, .experts = E, .capacity = 16});
/// cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
/// for (int l = 0; l < L; ++l) {
///   router<<<...>>>(hidden, topk_ids, topk_weights);                 // your router
///   pager.step(l, topk_ids, tokens * k, s);
///   pager.copy(l, masters[l].device_view(), slots[l].view(), row_bytes, s);
///   moe(args(hidden, topk_ids, topk_weights, slots[l].view(), pager.map(l)));
/// }
/// cudaStreamEndCapture(s, &graph);                                     // replay at will
/// @endcode
#pragma once

#include <wisp/core/error.hpp>
#include <wisp/core/topk.hpp>
#include <wisp/cuda/block_group.cuh>
#include <wisp/cuda/copy_list.hpp>
#include <wisp/cuda/device_warp.cuh>
#include <wisp/cuda/pager_step.hpp>
#include <wisp/cuda/runtime.cuh>
#include <wisp/vmm/virtual_expert_tensor.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace wisp::cuda {

namespace detail {

template <topk_id Id>
__global__ void pager_step_kernel(pager_state state, std::int32_t layer, const Id* ids,
                                  std::int32_t n) {
  extern __shared__ std::int32_t pager_shared[];
  const pager_layer_ref global = state.layer(layer);
  const std::int32_t experts = global.experts;
  const std::int32_t capacity = global.capacity;
  std::int32_t* slot_of = pager_shared;
  std::int32_t* first = slot_of + experts;
  std::int32_t* lru = first + experts;
  std::int32_t* shown = lru + capacity;
  std::int32_t* victims = shown + capacity;
  std::int32_t* scan = victims + capacity;
  for (std::int32_t i = static_cast<std::int32_t>(threadIdx.x); i < experts;
       i += static_cast<std::int32_t>(blockDim.x)) {
    slot_of[i] = global.slot_of[i];
    first[i] = unseen;
  }
  for (std::int32_t q = static_cast<std::int32_t>(threadIdx.x); q < capacity;
       q += static_cast<std::int32_t>(blockDim.x)) {
    lru[q] = global.lru[q];
    shown[q] = global.shown[q];
  }
  __syncthreads();
  pager_layer_ref local = global;
  local.slot_of = slot_of;
  local.lru = lru;
  local.shown = shown;
  (void)pager_step(block_group(scan), local, pager_workspace{first, victims}, ids, n);
  __syncthreads();
  for (std::int32_t i = static_cast<std::int32_t>(threadIdx.x); i < experts;
       i += static_cast<std::int32_t>(blockDim.x)) {
    global.slot_of[i] = slot_of[i];
  }
  for (std::int32_t q = static_cast<std::int32_t>(threadIdx.x); q < capacity;
       q += static_cast<std::int32_t>(blockDim.x)) {
    global.lru[q] = lru[q];
    global.shown[q] = shown[q];
  }
}

// One warp: the layer's state stays in global memory (the warp step touches each entry it
// needs once); the victims' slots pass through shared memory. `capacity` is the layer's (the
// host knows it; reading it from the layer's info would put a load before the others).
template <topk_id Id>
__global__ void warp_pager_step_kernel(pager_state state, std::int32_t layer, std::int32_t capacity,
                                       const Id* ids, std::int32_t n) {
  __shared__ std::int32_t victim_slots[warp_step_limit];
  pager_layer_ref s = state.layer(layer);
  s.capacity = capacity;
  (void)warp_pager_step(device_warp{}, s, pager_workspace{nullptr, victim_slots}, ids, n);
}

// A template (over `copy_op`) so that the header defines it in every translation unit.
template <class Op>
__global__ void copy_list_kernel(const Op* list, const pager_layer_info* info,
                                 expert_tensor_view masters, expert_tensor_view slots,
                                 std::size_t row_bytes) {
  copy_listed_rows(list, info->copies, masters, slots, row_bytes, blockIdx.x, gridDim.x,
                   threadIdx.x, blockDim.x);
}

}  // namespace detail

/// @brief The device pager of `layers` layers (see the file comment).
///
/// Owns the `pager_state` arrays in device memory (one allocation, fixed addresses: neither
/// copyable nor movable). Every cache starts empty and every map hides every expert. `step` and
/// `copy` are asynchronous on the given stream and capturable; the caller orders them (same
/// stream, or events) before the kernels that read the map and the slots.
class device_pager {
 public:
  /// Threads per step block (a multiple of 32).
  static constexpr unsigned step_threads = 128;
  /// Threads per block of the copy kernel.
  static constexpr unsigned copy_threads = 256;

  /// @throws wisp::logic_error if `config` is invalid or the step's shared memory
  ///   (`step_shared_bytes()`) exceeds 48 KiB (about 5000 experts per layer);
  ///   wisp::out_of_memory; wisp::cuda_error.
  explicit device_pager(const pager_state_config& config) {
    config.validate();
    state_.layers = config.layers;
    state_.experts = config.experts;
    state_.max_capacity = config.max_capacity();
    state_.policy = config.policy;
    WISP_EXPECTS(step_shared_bytes() <= 48 * 1024, "device_pager: the step needs ",
                 step_shared_bytes(), " bytes of shared memory (", config.experts,
                 " experts, capacity ", state_.max_capacity, "); at most 48 KiB");
    const auto layers = static_cast<std::size_t>(config.layers);
    const std::size_t per_expert = layers * static_cast<std::size_t>(config.experts);
    const std::size_t per_slot = layers * static_cast<std::size_t>(state_.max_capacity);
    // One allocation, each array 256-byte aligned.
    const std::size_t ints = aligned(per_expert * sizeof(std::int32_t));
    const std::size_t slot_ints = aligned(per_slot * sizeof(std::int32_t));
    const std::size_t ops = aligned(per_slot * sizeof(copy_op));
    const std::size_t infos = aligned(layers * sizeof(pager_layer_info));
    const std::size_t counts =
        config.policy == step_policy::lfu_history ? aligned(per_expert * sizeof(std::uint64_t)) : 0;
    bytes_ = 2 * ints + 2 * slot_ints + ops + infos + counts;
    void* p = nullptr;
    detail::check_allocation(cudaMalloc(&p, bytes_), "device_pager: cudaMalloc", bytes_);
    memory_ = static_cast<std::byte*>(p);
    std::byte* at = memory_;
    auto take = [&at](std::size_t n) {
      std::byte* here = at;
      at += n;
      return here;
    };
    state_.slot_of = reinterpret_cast<std::int32_t*>(take(ints));
    state_.map = reinterpret_cast<std::int32_t*>(take(ints));
    state_.lru = reinterpret_cast<std::int32_t*>(take(slot_ints));
    state_.shown = reinterpret_cast<std::int32_t*>(take(slot_ints));
    state_.copies = reinterpret_cast<copy_op*>(take(ops));
    state_.info = reinterpret_cast<pager_layer_info*>(take(infos));
    if (counts > 0) {
      state_.count = reinterpret_cast<std::uint64_t*>(take(counts));
    }
    std::vector<pager_layer_info> info(layers);
    for (std::int32_t l = 0; l < config.layers; ++l) {
      capacities_.push_back(config.capacity_of(l));
      info[static_cast<std::size_t>(l)].capacity = capacities_.back();
    }
    try {
      WISP_CUDA_TRY(cudaMemset(memory_, 0xff, bytes_ - counts));  // slots and maps -1, lists -1
      if (counts > 0) {
        WISP_CUDA_TRY(cudaMemset(state_.count, 0, counts));
      }
      WISP_CUDA_TRY(cudaMemcpy(state_.info, info.data(), layers * sizeof(pager_layer_info),
                               cudaMemcpyHostToDevice));
      // The copy kernel's grid: as many blocks as the device holds at once.
      int device = 0;
      int sms = 0;
      int per_sm = 0;
      WISP_CUDA_TRY(cudaGetDevice(&device));
      WISP_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
      WISP_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &per_sm, detail::copy_list_kernel<copy_op>, static_cast<int>(copy_threads), 0));
      copy_blocks_ = static_cast<std::size_t>(sms) * static_cast<std::size_t>(per_sm);
      // Both ran on the legacy stream (a pageable upload may return before its DMA lands); the
      // steps may run on any stream.
      WISP_CUDA_TRY(cudaDeviceSynchronize());
    } catch (...) {
      (void)cudaFree(memory_);
      throw;
    }
  }
  device_pager(const device_pager&) = delete;
  device_pager& operator=(const device_pager&) = delete;
  /// Frees the state (`cudaFree` waits for the device). The caller must not replay graphs that
  /// use it afterwards.
  ~device_pager() { (void)cudaFree(memory_); }

  /// @brief Enqueues one step of `layer` over the `n` routed ids at `ids` (device memory) on
  /// `stream`, as the kernel `kernel` names: by default (`automatic`) one warp
  /// (`warp_pager_step`) for a call of at most 32 ids on a layer of at most 32 slots, a block of
  /// `step_threads` (`pager_step`) otherwise. Both leave the same state, so the form may change
  /// from call to call. O(n + capacity) device work under `lru` (O(n + capacity^2) for an
  /// evicting `lfu_history` call), one block. Capturable (the form is chosen when the step is
  /// enqueued). Thread safety: steps of one layer must be ordered (one stream); other layers may
  /// step concurrently.
  /// @throws wisp::logic_error if `layer` is out of range, `n < 0`, `ids` is null with `n > 0`,
  ///   or `kernel` is `warp` and `n` or the layer's capacity exceeds `warp_step_limit`;
  ///   wisp::cuda_error if the launch fails.
  template <topk_id Id>
  void step(std::int32_t layer, const Id* ids, std::int32_t n, cudaStream_t stream,
            step_kernel kernel = step_kernel::automatic) {
    check_layer("step", layer);
    WISP_EXPECTS(n >= 0 && (n == 0 || ids != nullptr), "device_pager::step: ", n,
                 " ids at a null pointer");
    const std::int32_t capacity = capacity_of(layer);
    if (detail::checked_step_kernel("device_pager::step", kernel, n, layer, capacity) ==
        step_kernel::warp) {
      detail::warp_pager_step_kernel<Id>
          <<<1, warp_step_limit, 0, stream>>>(state_, layer, capacity, ids, n);
    } else {
      detail::pager_step_kernel<Id>
          <<<1, step_threads, step_shared_bytes(), stream>>>(state_, layer, ids, n);
    }
    WISP_CUDA_TRY(cudaGetLastError());
  }

  /// @brief Enqueues the copy kernel of `layer`'s last copy list on `stream`: `row_bytes` bytes
  /// of master row `e` (`masters`: device-accessible, e.g. `pinned_host_store::device_view()`)
  /// to slot row `s` (`slots`) per entry. The grid is sized for a full list (one block per tile
  /// of `copy_listed_rows`), at most the copy blocks the device holds at once (measured at
  /// construction); the work for the list the step left. Capturable.
  /// @throws wisp::logic_error on a bad layer, `row_bytes` larger than a row stride, or fewer
  ///   slot rows than the layer's capacity; wisp::cuda_error if the launch fails.
  void copy(std::int32_t layer, const expert_tensor_view& masters, const expert_tensor_view& slots,
            std::size_t row_bytes, cudaStream_t stream) {
    check_layer("copy", layer);
    WISP_EXPECTS(row_bytes <= masters.row_stride && row_bytes <= slots.row_stride,
                 "device_pager::copy: row_bytes ", row_bytes, " exceeds a row stride (masters ",
                 masters.row_stride, ", slots ", slots.row_stride, ")");
    const std::int32_t capacity = capacity_of(layer);
    WISP_EXPECTS(slots.rows >= static_cast<std::size_t>(capacity),
                 "device_pager::copy: ", slots.rows, " slot rows for a layer of ", capacity,
                 " slots");
    const auto grid = static_cast<unsigned>(
        copy_groups(static_cast<std::size_t>(capacity), row_bytes, copy_threads, copy_blocks_));
    detail::copy_list_kernel<<<grid, copy_threads, 0, stream>>>(copies(layer), info(layer), masters,
                                                                slots, row_bytes);
    WISP_CUDA_TRY(cudaGetLastError());
  }

  /// @brief Replaces every layer's state (slot tables, LRU lists, maps, copy lists, counters,
  /// and the call counts under `lfu_history`) with `from`'s: a device pager that continues where a
  /// host run of the same step left off, e.g. caches warmed by replaying a routing history on the
  /// host (the slots must then hold the experts `from` says they hold). Synchronous: the device is
  /// idle when it returns; graphs captured over this pager stay valid. O(layers x (experts +
  /// capacity)) bytes copied.
  /// @throws wisp::logic_error (nothing changed) if `from` has other layers, experts,
  ///   capacities or another policy; wisp::cuda_error.
  void load(const host_pager_state& from) {
    const pager_state& h = from.state();
    WISP_EXPECTS(h.layers == state_.layers && h.experts == state_.experts &&
                     h.max_capacity == state_.max_capacity,
                 "device_pager::load: a state of ", h.layers, " layers x ", h.experts, " experts (",
                 h.max_capacity, " slots) into a pager of ", state_.layers, " x ", state_.experts,
                 " (", state_.max_capacity, ")");
    WISP_EXPECTS(h.policy == state_.policy, "device_pager::load: a state of policy ",
                 step_policy_name(h.policy), " into a pager of policy ",
                 step_policy_name(state_.policy));
    for (std::int32_t l = 0; l < state_.layers; ++l) {
      WISP_EXPECTS(h.info[l].capacity == capacity_of(l), "device_pager::load: layer ", l, " has ",
                   h.info[l].capacity, " slots in the state, ", capacity_of(l), " here");
    }
    const auto layers = static_cast<std::size_t>(state_.layers);
    const std::size_t per_expert = layers * static_cast<std::size_t>(state_.experts);
    const std::size_t per_slot = layers * static_cast<std::size_t>(state_.max_capacity);
    const auto upload = [](void* to, const void* from_host, std::size_t bytes) {
      WISP_CUDA_TRY(cudaMemcpy(to, from_host, bytes, cudaMemcpyHostToDevice));
    };
    upload(state_.slot_of, h.slot_of, per_expert * sizeof(std::int32_t));
    upload(state_.map, h.map, per_expert * sizeof(std::int32_t));
    upload(state_.lru, h.lru, per_slot * sizeof(std::int32_t));
    upload(state_.shown, h.shown, per_slot * sizeof(std::int32_t));
    upload(state_.copies, h.copies, per_slot * sizeof(copy_op));
    upload(state_.info, h.info, layers * sizeof(pager_layer_info));
    if (state_.count != nullptr) {
      upload(state_.count, h.count, per_expert * sizeof(std::uint64_t));
    }
    // Pageable uploads may return before their DMA lands; steps may run on any stream.
    WISP_CUDA_TRY(cudaDeviceSynchronize());
  }

  /// Device address of `layer`'s expert map (fixed). @throws wisp::logic_error on a bad layer.
  [[nodiscard]] const std::int32_t* map(std::int32_t layer) const {
    check_layer("map", layer);
    return state_.map + static_cast<std::size_t>(layer) * static_cast<std::size_t>(state_.experts);
  }
  /// Device address of `layer`'s copy list (fixed). @throws wisp::logic_error on a bad layer.
  [[nodiscard]] const copy_op* copies(std::int32_t layer) const {
    check_layer("copies", layer);
    return state_.copies + static_cast<std::size_t>(layer) * state_.max_capacity;
  }
  /// Device address of `layer`'s counters (fixed). @throws wisp::logic_error on a bad layer.
  [[nodiscard]] const pager_layer_info* info(std::int32_t layer) const {
    check_layer("info", layer);
    return state_.info + layer;
  }
  /// Waits for `stream`, then reads `layer`'s counters. Not capturable (it synchronises).
  /// @throws wisp::logic_error on a bad layer; wisp::cuda_error.
  [[nodiscard]] pager_layer_info read_info(std::int32_t layer, cudaStream_t stream) const {
    pager_layer_info out;
    WISP_CUDA_TRY(cudaMemcpyAsync(&out, info(layer), sizeof out, cudaMemcpyDeviceToHost, stream));
    WISP_CUDA_TRY(cudaStreamSynchronize(stream));
    return out;
  }
  /// The eviction rule of every layer (the config's).
  [[nodiscard]] step_policy policy() const noexcept { return state_.policy; }
  /// The plain state (device pointers).
  [[nodiscard]] const pager_state& state() const noexcept { return state_; }
  /// Shared memory of one step block: slot table, first positions, LRU list, shown experts,
  /// victims and the scan scratch.
  [[nodiscard]] std::size_t step_shared_bytes() const noexcept {
    return (2 * static_cast<std::size_t>(state_.experts) +
            3 * static_cast<std::size_t>(state_.max_capacity) + block_group_scratch) *
           sizeof(std::int32_t);
  }

 private:
  static std::size_t aligned(std::size_t bytes) noexcept { return (bytes + 255) / 256 * 256; }
  void check_layer(const char* what, std::int32_t layer) const {
    WISP_EXPECTS(layer >= 0 && layer < state_.layers, "device_pager::", what, ": layer ", layer,
                 " is outside [0, ", state_.layers, ")");
  }
  [[nodiscard]] std::int32_t capacity_of(std::int32_t layer) const {
    return capacities_[static_cast<std::size_t>(layer)];
  }

  pager_state state_;
  std::byte* memory_ = nullptr;
  std::size_t bytes_ = 0;
  std::vector<std::int32_t> capacities_;  // per layer, host copy of info[l].capacity
  std::size_t copy_blocks_ = 1;           // copy-kernel blocks resident on the device at once
};

}  // namespace wisp::cuda
