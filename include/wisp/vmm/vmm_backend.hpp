// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The `vmm_backend` concept: what `page_pool` and `virtual_expert_tensor` need from a
/// virtual-memory API (the CUDA driver's cuMem*, POSIX mmap + memfd, AscendCL's aclrt*Mem*).
///
/// Every size a backend takes is a count of *granules*, the backend's allocation granularity
/// (`cuMemGetAllocationGranularity` on CUDA, 2 MiB by default for `posix_vmm`), so a misaligned
/// byte count cannot reach the backend. Addresses are `std::byte*` (on CUDA a device pointer in
/// the unified address space).
///
/// | operation | CUDA driver | POSIX (`posix_vmm`) |
/// |---|---|---|
/// | `granularity()` | `cuMemGetAllocationGranularity` | configured, multiple of the page size |
/// | `reserve(n)` / `free(p, n)` | `cuMemAddressReserve` / `cuMemAddressFree` | `mmap(PROT_NONE)` /
/// `munmap` | | `create(n)` / `release(h)` | `cuMemCreate` / `cuMemRelease` | `memfd_create` +
/// `fallocate` / `close` | | `map(p, h, off, n)` | `cuMemMap` | `mmap(MAP_FIXED | MAP_SHARED, fd,
/// off)` | | `set_access(p, n)` | `cuMemSetAccess` (device + peers) | `mprotect(PROT_READ |
/// PROT_WRITE)` | | `unmap(p, n)` | wait for the stream, `cuMemUnmap` | `mmap(PROT_NONE, MAP_FIXED
/// | MAP_ANONYMOUS)` |
///
/// @code
/// template <wisp::vmm_backend B>
/// std::byte* map_one(B& b) {
///   std::byte* va = b.reserve(4);              // 4 granules of address space, nothing behind it
///   auto h = b.create(1);                      // one granule of physical memory
///   b.map(va + 2 * b.granularity(), h, 0, 1);  // behind the third granule
///   b.set_access(va + 2 * b.granularity(), 1); // readable and writable from now on
///   return va;
/// }
/// @endcode
#pragma once

#include <wisp/core/config.hpp>

#include <concepts>
#include <cstddef>

namespace wisp {

/// @brief A virtual-memory API: reserve address ranges, create physical memory in granules, map it
/// (or part of it) into a reserved range and make it accessible, unmap and release it.
///
/// Requirements on `B` (all counts are granules of `granularity()` bytes):
/// - `B::handle`: a physical allocation; semiregular (a default value, copyable).
/// - `granularity() const noexcept -> std::size_t`: bytes per granule, a power of two or at least
///   a multiple of the OS page size; constant for the backend's lifetime.
/// - `reserve(n) -> std::byte*`: reserves `n` granules of address space aligned to a granule, with
///   nothing mapped. Throws `wisp::out_of_memory` when the address space is exhausted.
/// - `free(p, n) noexcept`: returns a range from `reserve` (unmapped first by the caller).
/// - `create(n) -> handle`: `n` granules of physical memory. Throws `wisp::out_of_memory` when
///   memory is exhausted, another `wisp::error` on other failures; nothing is created then.
/// - `release(h) noexcept`: frees a handle that is no longer mapped.
/// - `map(p, h, offset, n)`: maps granules `[offset, offset + n)` of `h` at `p` (granule-aligned
///   inside a reservation, currently unmapped); the mapping is not yet accessible. On failure
///   nothing is mapped.
/// - `set_access(p, n)`: makes a fully mapped range readable and writable (for CUDA: by the owning
///   device and every peer). On failure the access of the range is unspecified but it stays mapped.
/// - `unmap(p, n) noexcept`: unmaps a range made only of whole mappings and leaves it reserved.
///   Backends whose memory is used asynchronously wait for that use first.
template <class B>
concept vmm_backend = std::movable<B> && std::semiregular<typename B::handle> &&
    requires(B& b, const B& cb, std::byte* p, std::size_t n, typename B::handle h) {
  { cb.granularity() }
  noexcept->std::same_as<std::size_t>;
  { b.reserve(n) } -> std::same_as<std::byte*>;
  { b.free(p, n) }
  noexcept;
  { b.create(n) } -> std::same_as<typename B::handle>;
  { b.release(h) }
  noexcept;
  b.map(p, h, n, n);
  b.set_access(p, n);
  { b.unmap(p, n) }
  noexcept;
};

namespace detail {

/// Anti-model: its `unmap` may throw, which would make every unmapping path of the tensor
/// throwing, so it is not a `vmm_backend`.
struct throwing_unmap_backend {
  using handle = int;
  [[nodiscard]] std::size_t granularity() const noexcept { return 4096; }
  std::byte* reserve(std::size_t);
  void free(std::byte*, std::size_t) noexcept;
  handle create(std::size_t);
  void release(handle) noexcept;
  void map(std::byte*, handle, std::size_t, std::size_t);
  void set_access(std::byte*, std::size_t);
  void unmap(std::byte*, std::size_t);  // not noexcept
};
static_assert(!vmm_backend<throwing_unmap_backend>);

/// Anti-model: no physical handles at all (a plain allocator is not a virtual-memory API).
struct allocator_only {
  [[nodiscard]] std::size_t granularity() const noexcept { return 4096; }
  std::byte* reserve(std::size_t);
  void free(std::byte*, std::size_t) noexcept;
};
static_assert(!vmm_backend<allocator_only>);

}  // namespace detail
}  // namespace wisp
