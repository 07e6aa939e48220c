// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `pinned_host_store`: the host masters of one layer's experts in page-locked memory,
/// one row per expert laid out by an `expert_row_layout` (weights, and block scales for FP8 or
/// quantised experts, in one row). nvcc only (it needs the CUDA runtime).
///
/// Page-locked memory is what lets the copy engine's `cudaMemcpyAsync` overlap with compute
/// (a pageable source forces a staging copy), and, mapped into the device's address space, what
/// the device pager's copy kernel reads directly (`device_view()`). Rows are addressed as in
/// `host_expert_store`: expert `e` at `e * layout.row_bytes()` from the base.
/// @code
/// wisp::expert_row_layout layout({w13_bytes, w2_bytes});
/// wisp::cuda::pinned_host_store masters(/*experts=*/64, layout);       // cudaHostAlloc
/// std::memcpy(masters.tensor(e, 0).data(), w13_of_e, w13_bytes);
/// wisp::copy_layout where{masters.host_view(), slots.view(), layout.row_bytes()};
/// @endcode
#pragma once

#include <wisp/core/error.hpp>
#include <wisp/cuda/runtime.cuh>
#include <wisp/transfer/row_layout.hpp>
#include <wisp/vmm/virtual_expert_tensor.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>

namespace wisp::cuda {

/// @brief Page-locked, device-mapped master rows of `experts` experts (see the file comment).
///
/// Move-only owner of the allocation (or of the registration of a caller's buffer). Memory is
/// zero-filled when allocated here. Thread safety: as a plain buffer; the caller must not change
/// a row while a copy of it may be in flight.
class pinned_host_store {
 public:
  /// @brief Allocates `experts` rows with `cudaHostAlloc(Mapped | Portable)`.
  /// @throws wisp::logic_error if `experts < 1` or the size overflows; wisp::out_of_memory;
  ///   wisp::cuda_error (for example without a device).
  pinned_host_store(std::int32_t experts, const expert_row_layout& layout)
      : layout_(layout), experts_(experts) {
    const std::size_t bytes = checked_bytes(experts, layout);
    void* p = nullptr;
    detail::check_allocation(cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable),
                             "pinned_host_store: cudaHostAlloc", bytes);
    base_ = static_cast<std::byte*>(p);
    std::memset(base_, 0, bytes);
    map_device_pointer();
  }

  /// @brief Page-locks the caller's `buffer` (`cudaHostRegister(Mapped | Portable)`) as the rows
  /// of `experts` experts; the buffer must outlive the store and is unregistered, not freed.
  /// @throws wisp::logic_error if the buffer is smaller than `experts * layout.row_bytes()`;
  ///   wisp::out_of_memory; wisp::cuda_error.
  pinned_host_store(std::span<std::byte> buffer, std::int32_t experts,
                    const expert_row_layout& layout)
      : layout_(layout), experts_(experts), registered_(true) {
    const std::size_t bytes = checked_bytes(experts, layout);
    WISP_EXPECTS(buffer.size() >= bytes, "pinned_host_store: a buffer of ", buffer.size(),
                 " bytes cannot hold ", experts, " rows of ", layout.row_bytes(), " bytes");
    detail::check_allocation(
        cudaHostRegister(buffer.data(), bytes, cudaHostRegisterMapped | cudaHostRegisterPortable),
        "pinned_host_store: cudaHostRegister", bytes);
    base_ = buffer.data();
    map_device_pointer();
  }

  pinned_host_store(pinned_host_store&& other) noexcept
      : layout_(other.layout_),
        experts_(other.experts_),
        registered_(other.registered_),
        base_(std::exchange(other.base_, nullptr)),
        device_base_(std::exchange(other.device_base_, nullptr)) {}
  pinned_host_store& operator=(pinned_host_store&& other) noexcept {
    if (this != &other) {
      release();
      layout_ = other.layout_;
      experts_ = other.experts_;
      registered_ = other.registered_;
      base_ = std::exchange(other.base_, nullptr);
      device_base_ = std::exchange(other.device_base_, nullptr);
    }
    return *this;
  }
  pinned_host_store(const pinned_host_store&) = delete;
  pinned_host_store& operator=(const pinned_host_store&) = delete;
  /// Frees (or unregisters) the rows; the caller must have waited for copies that read them.
  ~pinned_host_store() { release(); }

  /// Expert `expert`'s row. @throws wisp::logic_error if it is outside `[0, experts)`.
  [[nodiscard]] std::span<std::byte> row(std::int32_t expert) const {
    check_expert(expert);
    return {base_ + layout_.row_offset(static_cast<std::size_t>(expert)), layout_.row_bytes()};
  }
  /// Tensor `t` of expert `expert`'s row. @throws wisp::logic_error on a bad expert or tensor.
  [[nodiscard]] std::span<std::byte> tensor(std::int32_t expert, std::size_t t) const {
    return row(expert).subspan(layout_.offset(t), layout_.bytes(t));
  }
  /// The rows through host pointers (a `copy_layout`'s masters for the copy engine).
  [[nodiscard]] expert_tensor_view host_view() const noexcept {
    return {base_, static_cast<std::size_t>(experts_), layout_.row_bytes()};
  }
  /// The rows through their mapped device pointer (what a kernel reads, e.g. the device pager's
  /// copy kernel).
  [[nodiscard]] expert_tensor_view device_view() const noexcept {
    return {device_base_, static_cast<std::size_t>(experts_), layout_.row_bytes()};
  }
  [[nodiscard]] const expert_row_layout& layout() const noexcept { return layout_; }
  [[nodiscard]] std::int32_t experts() const noexcept { return experts_; }
  /// True if the rows are a registered caller buffer.
  [[nodiscard]] bool registered() const noexcept { return registered_; }

 private:
  static std::size_t checked_bytes(std::int32_t experts, const expert_row_layout& layout) {
    WISP_EXPECTS(experts >= 1, "pinned_host_store: experts must be >= 1, got ", experts);
    return layout.row_offset(static_cast<std::size_t>(experts));
  }
  void check_expert(std::int32_t expert) const {
    WISP_EXPECTS(expert >= 0 && expert < experts_, "pinned_host_store: expert ", expert,
                 " is outside [0, ", experts_, ")");
  }
  void map_device_pointer() {
    void* device = nullptr;
    const cudaError_t status = cudaHostGetDevicePointer(&device, base_, 0);
    if (status != cudaSuccess) {
      release();
      WISP_CUDA_TRY(status);
    }
    device_base_ = static_cast<std::byte*>(device);
  }
  void release() noexcept {
    if (base_ != nullptr) {
      (void)(registered_ ? cudaHostUnregister(base_) : cudaFreeHost(base_));
      base_ = nullptr;
      device_base_ = nullptr;
    }
  }

  expert_row_layout layout_;
  std::int32_t experts_ = 0;
  bool registered_ = false;
  std::byte* base_ = nullptr;
  std::byte* device_base_ = nullptr;
};

}  // namespace wisp::cuda
