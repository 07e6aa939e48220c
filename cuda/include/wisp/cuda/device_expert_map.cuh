// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `device_expert_map`: the per-layer `int32[E]` expert maps a fused-MoE kernel reads, in
/// device memory at fixed addresses, updated in place from the host pager's maps on the copy
/// stream, one or two buffers per layer. nvcc only.
///
/// A kernel that reads layer `l`'s map may still run when the host has already prepared the next
/// call of `l` (a token or expert split prepares the groups of one layer back to back). With two
/// buffers the next upload goes to the other one, so it does not wait for that kernel; with one
/// it waits (on the device, not the host). Either way:
/// - `upload(l, map, copy_stream)` copies through pinned staging to the layer's next buffer, after
///   the kernels that read that buffer before have released it, and returns its address;
/// - `acquire(l, compute)` makes the compute stream wait for the upload and returns the address;
/// - `release(l, compute)` records, after the kernels that read the map were enqueued, that the
///   buffer may be overwritten once they are done.
/// Addresses never change (a graph captured over `buffer(l, b)` stays valid), but uploads are
/// eager host work and are refused during stream capture: a captured forward pages with the
/// device pager, which writes its maps in the graph itself (docs/cuda.md).
/// @code
/// wisp::cuda::device_expert_map maps(layers, experts);
/// auto r = pager.prepare(layer, ids, tokens, k);
/// maps.upload(layer, r.expert_map, engine.stream());
/// const std::int32_t* map = maps.acquire(layer, compute);
/// moe(args_with(map));                                   // on compute
/// maps.release(layer, compute);
/// @endcode
#pragma once

#include <wisp/core/error.hpp>
#include <wisp/cuda/runtime.cuh>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace wisp::cuda {

/// @brief Per-layer device expert maps at fixed addresses (see the file comment).
///
/// Memory: `layers x buffers x experts` int32 on the device and as pinned staging, two events
/// per buffer; all allocated by the constructor, nothing afterwards. Every map starts all -1.
/// Thread safety: one thread at a time. Neither copyable nor movable (kernels and graphs hold its
/// addresses).
class device_expert_map {
 public:
  /// @throws wisp::logic_error if a count is < 1, `buffers` is not 1 or 2, or the size
  ///   overflows; wisp::out_of_memory; wisp::cuda_error.
  device_expert_map(std::int32_t layers, std::int32_t experts, std::int32_t buffers = 2)
      : layers_(layers), experts_(experts), buffers_(buffers) {
    WISP_EXPECTS(layers >= 1 && experts >= 1, "device_expert_map: layers ", layers, " and experts ",
                 experts, " must be >= 1");
    WISP_EXPECTS(buffers == 1 || buffers == 2, "device_expert_map: buffers must be 1 or 2, got ",
                 buffers);
    const std::size_t maps = static_cast<std::size_t>(layers) * static_cast<std::size_t>(buffers);
    WISP_EXPECTS(maps <= SIZE_MAX / sizeof(std::int32_t) / static_cast<std::size_t>(experts),
                 "device_expert_map: ", maps, " maps of ", experts, " entries overflow size_t");
    const std::size_t bytes = maps * static_cast<std::size_t>(experts) * sizeof(std::int32_t);
    try {
      void* p = nullptr;
      detail::check_allocation(cudaMalloc(&p, bytes), "device_expert_map: cudaMalloc", bytes);
      device_ = static_cast<std::int32_t*>(p);
      detail::check_allocation(cudaMallocHost(&p, bytes), "device_expert_map: cudaMallocHost",
                               bytes);
      staging_ = static_cast<std::int32_t*>(p);
      WISP_CUDA_TRY(cudaMemset(device_, 0xff, bytes));  // -1 everywhere
      WISP_CUDA_TRY(cudaDeviceSynchronize());
      detail::create_events(events_, 2 * maps);
    } catch (...) {
      destroy();
      throw;
    }
    current_.assign(static_cast<std::size_t>(layers), 0);
  }
  device_expert_map(const device_expert_map&) = delete;
  device_expert_map& operator=(const device_expert_map&) = delete;
  /// Waits for every upload, then frees. The caller must have finished the kernels that read.
  ~device_expert_map() { destroy(); }

  /// @brief Uploads `map` (`experts` entries, host memory) as layer `layer`'s next map on
  /// `stream`; returns the device address it will be at. O(experts); blocks the host only when
  /// the staging of that buffer is still being read by an earlier upload (more than `buffers`
  /// uploads of the layer in flight).
  /// @throws wisp::logic_error (nothing changed) on a bad layer, a map of the wrong size, or a
  ///   `stream` under capture; wisp::cuda_error.
  const std::int32_t* upload(std::int32_t layer, std::span<const std::int32_t> map,
                             cudaStream_t stream) {
    check_layer("upload", layer);
    WISP_EXPECTS(map.size() == static_cast<std::size_t>(experts_),
                 "device_expert_map::upload: ", map.size(), " entries for a map of ", experts_,
                 " experts");
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    WISP_CUDA_TRY(cudaStreamIsCapturing(stream, &capture));
    WISP_EXPECTS(capture == cudaStreamCaptureStatusNone,
                 "device_expert_map::upload: the stream is being captured; uploads are eager "
                 "(a captured forward pages with device_pager)");
    const std::int32_t b = (current_[static_cast<std::size_t>(layer)] + 1) % buffers_;
    const std::size_t at = index(layer, b);
    WISP_CUDA_TRY(cudaEventSynchronize(uploaded(at)));  // staging free again
    std::memcpy(staging_ + at * experts(), map.data(), map.size_bytes());
    WISP_CUDA_TRY(cudaStreamWaitEvent(stream, released(at), 0));
    WISP_CUDA_TRY(cudaMemcpyAsync(device_ + at * experts(), staging_ + at * experts(),
                                  map.size_bytes(), cudaMemcpyHostToDevice, stream));
    WISP_CUDA_TRY(cudaEventRecord(uploaded(at), stream));
    current_[static_cast<std::size_t>(layer)] = b;
    return device_ + at * experts();
  }

  /// `compute` waits for the layer's last upload; returns its map's address.
  /// @throws wisp::logic_error on a bad layer; wisp::cuda_error.
  const std::int32_t* acquire(std::int32_t layer, cudaStream_t compute) {
    check_layer("acquire", layer);
    const std::size_t at = index(layer, current_[static_cast<std::size_t>(layer)]);
    WISP_CUDA_TRY(cudaStreamWaitEvent(compute, uploaded(at), 0));
    return device_ + at * experts();
  }

  /// Records on `compute` that the kernels reading the layer's current map have been enqueued:
  /// its buffer is overwritten only after them. @throws wisp::logic_error; wisp::cuda_error.
  void release(std::int32_t layer, cudaStream_t compute) {
    check_layer("release", layer);
    const std::size_t at = index(layer, current_[static_cast<std::size_t>(layer)]);
    WISP_CUDA_TRY(cudaEventRecord(released(at), compute));
  }

  /// The fixed address of buffer `b` of layer `layer`. @throws wisp::logic_error.
  [[nodiscard]] const std::int32_t* buffer(std::int32_t layer, std::int32_t b) const {
    check_layer("buffer", layer);
    WISP_EXPECTS(b >= 0 && b < buffers_, "device_expert_map::buffer: buffer ", b, " of ", buffers_);
    return device_ + index(layer, b) * experts();
  }
  /// The address of the layer's last upload (buffer 0 before any).
  [[nodiscard]] const std::int32_t* current(std::int32_t layer) const {
    check_layer("current", layer);
    return buffer(layer, current_[static_cast<std::size_t>(layer)]);
  }
  [[nodiscard]] std::int32_t layers() const noexcept { return layers_; }
  [[nodiscard]] std::int32_t buffers() const noexcept { return buffers_; }

 private:
  [[nodiscard]] std::size_t experts() const noexcept { return static_cast<std::size_t>(experts_); }
  [[nodiscard]] std::size_t index(std::int32_t layer, std::int32_t b) const noexcept {
    return static_cast<std::size_t>(layer) * static_cast<std::size_t>(buffers_) +
           static_cast<std::size_t>(b);
  }
  [[nodiscard]] cudaEvent_t uploaded(std::size_t at) const noexcept { return events_[2 * at]; }
  [[nodiscard]] cudaEvent_t released(std::size_t at) const noexcept { return events_[2 * at + 1]; }
  void check_layer(const char* what, std::int32_t layer) const {
    WISP_EXPECTS(layer >= 0 && layer < layers_, "device_expert_map::", what, ": layer ", layer,
                 " is outside [0, ", layers_, ")");
  }
  void destroy() noexcept {
    for (cudaEvent_t e : events_) {
      (void)cudaEventSynchronize(e);
      (void)cudaEventDestroy(e);
    }
    events_.clear();
    if (staging_ != nullptr) {
      (void)cudaFreeHost(staging_);
      staging_ = nullptr;
    }
    if (device_ != nullptr) {
      (void)cudaFree(device_);
      device_ = nullptr;
    }
  }

  std::int32_t layers_;
  std::int32_t experts_;
  std::int32_t buffers_;
  std::int32_t* device_ = nullptr;
  std::int32_t* staging_ = nullptr;
  std::vector<cudaEvent_t> events_;    // per buffer: uploaded, released
  std::vector<std::int32_t> current_;  // per layer: the buffer of the last upload
};

}  // namespace wisp::cuda
