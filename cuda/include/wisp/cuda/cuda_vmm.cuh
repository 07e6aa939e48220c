// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `wisp::cuda::cuda_vmm`: the `vmm_backend` on the CUDA driver's virtual memory management
/// API (cuMem*). nvcc only.
///
/// The driver library is not linked: the cuMem* entry points are fetched at run time through the
/// runtime's `cudaGetDriverEntryPointByVersion` (as PyTorch does), and `<cuda.h>` is included for
/// its types only. A binary using this header links cudart alone, starts on a machine without a
/// driver, and gets a `wisp::cuda_error` from the `cuda_vmm` constructor there.
///
/// Call sequence (docs/vmm.md; ANCHORS §6 "canonical sequence"):
/// 1. `cuMemGetAllocationGranularity(prop{PINNED, DEVICE dev})` (MINIMUM, or RECOMMENDED);
/// 2. `cuMemAddressReserve(&va, n * g, alignment g, hint 0)` once per tensor;
/// 3. `cuMemCreate(&h, g, prop)` per page → `cuMemMap(va + off, g, 0, h)` → `cuMemSetAccess` over
///    each run of new pages for the owning device and every peer that can access it (peer access
///    enabled with `cudaDeviceEnablePeerAccess` does not cover cuMemMap memory);
/// 4. before `cuMemUnmap`, wait for the fence event or synchronise the stream: unmapping is not
///    stream-ordered; then `cuMemUnmap`, and `cuMemRelease` when the pool trims the page;
/// 5. `cuMemAddressFree` when the tensor dies.
/// A call that fails part-way is rolled back by `page_pool` and `virtual_expert_tensor` (created
/// handles released, mapped pages unmapped); `CUDA_ERROR_OUT_OF_MEMORY` is `wisp::out_of_memory`,
/// any other failure `wisp::cuda_error`.
/// @code
/// wisp::page_pool<wisp::cuda::cuda_vmm> pool(wisp::cuda::cuda_vmm({.device = 0, .stream = s}));
/// wisp::virtual_expert_tensor<wisp::cuda::cuda_vmm> w(pool, {.max_rows = 256,
///                                                           .row_stride = 9 << 20});
/// w.resize_resident(64);             // device memory behind rows [0, 64)
/// my_kernel<<<grid, block, 0, s>>>(w.view());
/// w.resize_resident(32);             // waits for s, then unmaps
/// @endcode
#pragma once

#include <wisp/core/error.hpp>
#include <wisp/cuda/runtime.cuh>
#include <wisp/vmm/vmm_backend.hpp>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace wisp::cuda {

namespace detail {

/// The driver entry points cuda_vmm uses, fetched once per process.
struct driver_api {
  CUresult(CUDAAPI* get_error_name)(CUresult, const char**) = nullptr;
  CUresult(CUDAAPI* get_error_string)(CUresult, const char**) = nullptr;
  CUresult(CUDAAPI* device_get)(CUdevice*, int) = nullptr;
  CUresult(CUDAAPI* device_get_attribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
  CUresult(CUDAAPI* mem_get_allocation_granularity)(std::size_t*, const CUmemAllocationProp*,
                                                    CUmemAllocationGranularity_flags) = nullptr;
  CUresult(CUDAAPI* mem_address_reserve)(CUdeviceptr*, std::size_t, std::size_t, CUdeviceptr,
                                         unsigned long long) = nullptr;
  CUresult(CUDAAPI* mem_address_free)(CUdeviceptr, std::size_t) = nullptr;
  CUresult(CUDAAPI* mem_create)(CUmemGenericAllocationHandle*, std::size_t,
                                const CUmemAllocationProp*, unsigned long long) = nullptr;
  CUresult(CUDAAPI* mem_release)(CUmemGenericAllocationHandle) = nullptr;
  CUresult(CUDAAPI* mem_map)(CUdeviceptr, std::size_t, std::size_t, CUmemGenericAllocationHandle,
                             unsigned long long) = nullptr;
  CUresult(CUDAAPI* mem_unmap)(CUdeviceptr, std::size_t) = nullptr;
  CUresult(CUDAAPI* mem_set_access)(CUdeviceptr, std::size_t, const CUmemAccessDesc*,
                                    std::size_t) = nullptr;
};

/// The ABI version of the entry points requested (CUDA 12.0; cuMem* exist since 10.2).
inline constexpr unsigned int driver_abi_version = 12000;

template <class Fn>
void load_entry_point(Fn& fn, const char* symbol) {
  void* raw = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t rc =
      cudaGetDriverEntryPointByVersion(symbol, &raw, driver_abi_version, cudaEnableDefault, &found);
  if (rc != cudaSuccess || found != cudaDriverEntryPointSuccess || raw == nullptr) {
    (void)cudaGetLastError();
    throw ::wisp::cuda_error(
        static_cast<int>(rc != cudaSuccess ? rc : cudaErrorSymbolNotFound),
        ::wisp::detail::concat("cuda_vmm: cannot get the driver entry point ", symbol, ": ",
                               rc != cudaSuccess ? cudaGetErrorString(rc)
                               : found == cudaDriverEntryPointVersionNotSufficent
                                   ? "the driver is older than CUDA 12.0"
                                   : "symbol not found"));
  }
  fn = reinterpret_cast<Fn>(raw);
}

/// Loads the entry points on first use (thread-safe); a failure is retried on the next call.
/// @throws wisp::cuda_error when there is no driver or it lacks a symbol.
inline const driver_api& driver() {
  static const driver_api api = [] {
    driver_api a;
    load_entry_point(a.get_error_name, "cuGetErrorName");
    load_entry_point(a.get_error_string, "cuGetErrorString");
    load_entry_point(a.device_get, "cuDeviceGet");
    load_entry_point(a.device_get_attribute, "cuDeviceGetAttribute");
    load_entry_point(a.mem_get_allocation_granularity, "cuMemGetAllocationGranularity");
    load_entry_point(a.mem_address_reserve, "cuMemAddressReserve");
    load_entry_point(a.mem_address_free, "cuMemAddressFree");
    load_entry_point(a.mem_create, "cuMemCreate");
    load_entry_point(a.mem_release, "cuMemRelease");
    load_entry_point(a.mem_map, "cuMemMap");
    load_entry_point(a.mem_unmap, "cuMemUnmap");
    load_entry_point(a.mem_set_access, "cuMemSetAccess");
    return a;
  }();
  return api;
}

}  // namespace detail

/// Options of `cuda_vmm`.
struct cuda_vmm_options {
  int device = 0;                        ///< the device whose memory the pages are
  cudaStream_t stream = nullptr;         ///< work on it is waited for before unmapping
  bool recommended_granularity = false;  ///< use RECOMMENDED instead of MINIMUM granularity
};

/// @brief `vmm_backend` on the CUDA driver's cuMem* API, for one device.
///
/// A copyable value (the driver objects belong to the pool and tensors that use it). Handles are
/// `CUmemGenericAllocationHandle`s; `map` maps a whole handle (the driver requires offset 0), so
/// `page_pool`'s one-granule pages fit it. Thread-safety: as the driver calls; the object's
/// stream and fence must not be changed concurrently with an `unmap`.
class cuda_vmm {
 public:
  using handle = CUmemGenericAllocationHandle;

  /// @brief Initialises the device's primary context, fetches the driver entry points, checks
  /// VMM support, queries the granularity and the peers that can access the device.
  /// @throws wisp::logic_error if `options.device` is not a device of this machine;
  ///   wisp::cuda_error without a driver or device, if the device lacks VMM support, or if a
  ///   query fails.
  explicit cuda_vmm(cuda_vmm_options options = {})
      : stream_(options.stream), device_(options.device) {
    int count = 0;
    WISP_CUDA_TRY(cudaGetDeviceCount(&count));
    WISP_EXPECTS(options.device >= 0 && options.device < count, "cuda_vmm: device ", options.device,
                 " is outside [0, ", count, ")");
    WISP_CUDA_TRY(cudaInitDevice(options.device, 0, 0));
    api_ = &detail::driver();
    CUdevice dev = 0;
    check(api_->device_get(&dev, options.device), "cuDeviceGet");
    int vmm = 0;
    check(api_->device_get_attribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                                     dev),
          "cuDeviceGetAttribute(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)");
    if (vmm == 0) {
      throw cuda_error(static_cast<int>(CUDA_ERROR_NOT_SUPPORTED),
                       ::wisp::detail::concat("cuda_vmm: device ", options.device,
                                              " does not support virtual memory management"));
    }
    prop_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop_.location.id = dev;
    check(api_->mem_get_allocation_granularity(&granularity_, &prop_,
                                               options.recommended_granularity
                                                   ? CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
                                                   : CU_MEM_ALLOC_GRANULARITY_MINIMUM),
          "cuMemGetAllocationGranularity");
    access_.push_back(access_for(options.device));
    for (int peer = 0; peer < count; ++peer) {
      int can = 0;
      if (peer != options.device &&
          cudaDeviceCanAccessPeer(&can, peer, options.device) == cudaSuccess && can != 0) {
        access_.push_back(access_for(peer));
      }
    }
    (void)cudaGetLastError();
  }

  /// Work on `stream` is waited for before unmapping (used when no fence event is set).
  void set_stream(cudaStream_t stream) noexcept { stream_ = stream; }
  /// If non-null, unmapping waits for this event instead of the stream: record it after the last
  /// kernel that reads the rows about to be unmapped.
  void set_fence(cudaEvent_t event) noexcept { fence_ = event; }

  [[nodiscard]] int device() const noexcept { return device_; }
  /// Bytes per granule, from `cuMemGetAllocationGranularity`. O(1).
  [[nodiscard]] std::size_t granularity() const noexcept { return granularity_; }
  /// Devices given read-write access to mapped memory: this device first, then its peers.
  [[nodiscard]] const std::vector<CUmemAccessDesc>& access() const noexcept { return access_; }

  /// @brief `cuMemAddressReserve` of `granules` granules aligned to a granule.
  /// @throws wisp::logic_error on 0 or overflow; wisp::out_of_memory; wisp::cuda_error.
  [[nodiscard]] std::byte* reserve(std::size_t granules) {
    const std::size_t bytes = checked_bytes("reserve", granules);
    CUdeviceptr va = 0;
    check(api_->mem_address_reserve(&va, bytes, granularity_, 0, 0), "cuMemAddressReserve");
    return to_pointer(va);
  }

  /// `cuMemAddressFree` (status ignored: nothing can be done about it here).
  void free(std::byte* base, std::size_t granules) noexcept {
    if (base != nullptr && granules != 0) {
      (void)api_->mem_address_free(to_device(base), granules * granularity_);
    }
  }

  /// @brief `cuMemCreate` of `granules` granules of pinned device memory.
  /// @throws wisp::logic_error on 0 or overflow; wisp::out_of_memory on
  ///   `CUDA_ERROR_OUT_OF_MEMORY`; wisp::cuda_error otherwise. Nothing is created on failure.
  [[nodiscard]] handle create(std::size_t granules) {
    const std::size_t bytes = checked_bytes("create", granules);
    handle h = 0;
    check(api_->mem_create(&h, bytes, &prop_, 0), "cuMemCreate");
    return h;
  }

  /// `cuMemRelease` (the memory lives on while still mapped).
  void release(handle h) noexcept { (void)api_->mem_release(h); }

  /// @brief `cuMemMap` of the whole handle (`granules` granules) at `at`.
  /// @throws wisp::logic_error if `offset != 0` (the driver maps whole handles only);
  ///   wisp::out_of_memory; wisp::cuda_error. Nothing is mapped on failure.
  void map(std::byte* at, handle h, std::size_t offset, std::size_t granules) {
    WISP_EXPECTS(offset == 0, "cuda_vmm::map: offset ", offset,
                 " granules; cuMemMap maps a handle from its start only");
    const std::size_t bytes = checked_bytes("map", granules);
    check(api_->mem_map(to_device(at), bytes, 0, h, 0), "cuMemMap");
  }

  /// @brief `cuMemSetAccess` read-write for this device and every peer over a mapped range.
  /// @throws wisp::out_of_memory; wisp::cuda_error.
  void set_access(std::byte* at, std::size_t granules) {
    check(api_->mem_set_access(to_device(at), granules * granularity_, access_.data(),
                               access_.size()),
          "cuMemSetAccess");
  }

  /// @brief Waits for the fence event (or synchronises the stream), then `cuMemUnmap`.
  /// cuMemUnmap is not stream-ordered: without the wait, a kernel still reading the rows would
  /// fault. Statuses are ignored: they only fail on a dead context, where the memory is gone.
  void unmap(std::byte* at, std::size_t granules) noexcept {
    if (fence_ != nullptr) {
      (void)cudaEventSynchronize(fence_);
    } else {
      (void)cudaStreamSynchronize(stream_);
    }
    (void)api_->mem_unmap(to_device(at), granules * granularity_);
  }

 private:
  static CUmemAccessDesc access_for(int device) noexcept {
    CUmemAccessDesc d{};
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = device;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return d;
  }
  static std::byte* to_pointer(CUdeviceptr p) noexcept {
    return reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(p));
  }
  static CUdeviceptr to_device(std::byte* p) noexcept {
    return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p));
  }

  [[nodiscard]] std::size_t checked_bytes(const char* what, std::size_t granules) const {
    WISP_EXPECTS(granules != 0 && granules <= SIZE_MAX / granularity_, "cuda_vmm::", what, ": ",
                 granules, " granules of ", granularity_, " B");
    return granules * granularity_;
  }

  void check(CUresult rc, const char* call) const {
    if (rc == CUDA_SUCCESS) [[likely]] {
      return;
    }
    const char* name = "unknown CUresult";
    const char* text = "";
    if (api_ != nullptr) {
      (void)api_->get_error_name(rc, &name);
      (void)api_->get_error_string(rc, &text);
    }
    std::string message = ::wisp::detail::concat("cuda_vmm: ", call, " on device ", device_,
                                                 " failed: ", name, " (", text, ")");
    if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
      throw out_of_memory(message);
    }
    throw cuda_error(static_cast<int>(rc), message);
  }

  const detail::driver_api* api_ = nullptr;
  CUmemAllocationProp prop_{};
  std::size_t granularity_ = 0;
  std::vector<CUmemAccessDesc> access_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t fence_ = nullptr;
  int device_ = 0;
};

static_assert(vmm_backend<cuda_vmm>);

}  // namespace wisp::cuda
