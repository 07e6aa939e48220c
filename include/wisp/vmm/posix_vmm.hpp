// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `posix_vmm`: a `vmm_backend` on Linux virtual memory. Address ranges are `mmap`ed
/// `PROT_NONE`, physical memory is one `memfd` per handle, mapping is `mmap(MAP_FIXED |
/// MAP_SHARED)` of the memfd, unmapping maps `PROT_NONE` anonymous memory back over the range so
/// the reservation stays. It manages real memory on the CPU with the same call sequence as the CUDA
/// driver, which makes every layer above it testable (and sanitizable) without a GPU.
///
/// Defined on Linux only (`WISP_HAS_POSIX_VMM` is 1 there, 0 elsewhere); the header compiles
/// everywhere.
/// @code
/// wisp::posix_vmm vm;                                  // 2 MiB granules, like CUDA
/// std::byte* va = vm.reserve(8);                       // 16 MiB of address space
/// auto h = vm.create(2);                               // 4 MiB of memory
/// vm.map(va, h, 0, 2);
/// vm.set_access(va, 2);
/// va[0] = std::byte{1};
/// vm.unmap(va, 2);
/// vm.release(h);
/// vm.free(va, 8);
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/vmm/vmm_backend.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

#if defined(__linux__)
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#define WISP_HAS_POSIX_VMM 1
#else
#define WISP_HAS_POSIX_VMM 0
#endif

namespace wisp {

/// @brief An operating-system call failed for a reason other than exhaustion (which is
/// `wisp::out_of_memory`). Carries `errno`; the message names the call and `strerror` text.
class os_error : public error {
 public:
  os_error(int code, const std::string& what) : error(what), code_(code) {}
  /// The `errno` value.
  [[nodiscard]] int code() const noexcept { return code_; }

 private:
  int code_;
};

#if WISP_HAS_POSIX_VMM

/// Options of `posix_vmm`.
struct posix_vmm_options {
  /// Bytes per granule; a non-zero multiple of the page size. 2 MiB matches CUDA's usual
  /// granularity; tests use the page size to exercise many granules cheaply.
  std::size_t granule = std::size_t{2} << 20;
  /// `create` commits the memory (`fallocate`), like `cuMemCreate`, so exhaustion is reported
  /// by `create` as `wisp::out_of_memory` instead of a `SIGBUS` on first touch.
  bool commit = true;
};

/// @brief `vmm_backend` on Linux `mmap` and `memfd_create`.
///
/// A handle owns one memfd of `granules * granularity()` bytes; `map` may map any granule-aligned
/// part of it (unlike CUDA, whose `cuMemMap` offset must be 0). A copyable value: copies share
/// nothing but the configuration. Thread-safety: the calls are as thread-safe as the syscalls;
/// the object itself holds no mutable state.
class posix_vmm {
 public:
  /// A physical allocation: an open memfd and its size in granules.
  struct handle {
    int fd = -1;
    std::size_t granules = 0;
    friend bool operator==(const handle&, const handle&) = default;
  };

  /// @throws wisp::logic_error if `options.granule` is zero or not a multiple of the page size.
  explicit posix_vmm(posix_vmm_options options = {}) : options_(options) {
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    WISP_EXPECTS(options_.granule != 0 && options_.granule % page == 0, "posix_vmm: granule ",
                 options_.granule, " B is not a non-zero multiple of the page size ", page, " B");
  }

  /// Bytes per granule. O(1).
  [[nodiscard]] std::size_t granularity() const noexcept { return options_.granule; }

  /// @brief Reserves `granules` granules of address space, aligned to a granule, `PROT_NONE`.
  /// O(1) syscalls.
  /// @throws wisp::logic_error if `granules` is 0 or the size overflows; wisp::out_of_memory if
  ///   the address space is exhausted; wisp::os_error on another failure.
  [[nodiscard]] std::byte* reserve(std::size_t granules) {
    const std::size_t bytes = checked_bytes("reserve", granules);
    const std::size_t g = options_.granule;
    WISP_EXPECTS(bytes <= SIZE_MAX - g, "posix_vmm::reserve: ", granules, " granules overflow");
    void* raw =
        ::mmap(nullptr, bytes + g, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) {
      fail_errno("mmap(PROT_NONE) reserving ", bytes + g, " B");
    }
    // Trim to a granule-aligned window, as cuMemAddressReserve aligns to the granularity.
    const auto start = reinterpret_cast<std::uintptr_t>(raw);
    const std::uintptr_t aligned = (start + g - 1) / g * g;
    if (aligned != start) {
      ::munmap(raw, aligned - start);
    }
    const std::size_t tail = (start + bytes + g) - (aligned + bytes);
    if (tail != 0) {
      ::munmap(reinterpret_cast<void*>(aligned + bytes), tail);
    }
    return reinterpret_cast<std::byte*>(aligned);
  }

  /// Returns a reservation (and anything still mapped in it). O(1) syscalls.
  void free(std::byte* base, std::size_t granules) noexcept {
    if (base != nullptr && granules != 0) {
      ::munmap(base, granules * options_.granule);
    }
  }

  /// @brief Creates `granules` granules of physical memory: a memfd of that size, committed when
  /// `options.commit`. O(size) when committing (the kernel zeroes the pages), O(1) otherwise.
  /// @throws wisp::logic_error if `granules` is 0; wisp::out_of_memory on `ENOMEM`, `ENOSPC`,
  ///   `EMFILE` or `ENFILE` (memory or descriptors exhausted); wisp::os_error otherwise. Nothing
  ///   is left open on failure.
  [[nodiscard]] handle create(std::size_t granules) {
    const std::size_t bytes = checked_bytes("create", granules);
    const int fd = ::memfd_create("wisp-vmm", MFD_CLOEXEC);
    if (fd < 0) {
      fail_errno("memfd_create");
    }
    const int rc = options_.commit ? ::posix_fallocate(fd, 0, static_cast<off_t>(bytes))
                                   : (::ftruncate(fd, static_cast<off_t>(bytes)) == 0 ? 0 : errno);
    if (rc != 0) {
      ::close(fd);
      errno = rc;
      fail_errno(options_.commit ? "posix_fallocate of " : "ftruncate to ", bytes, " B");
    }
    return handle{fd, granules};
  }

  /// Closes the memfd; memory still mapped somewhere stays alive until unmapped. O(1).
  void release(handle h) noexcept {
    if (h.fd >= 0) {
      ::close(h.fd);
    }
  }

  /// @brief Maps granules `[offset, offset + granules)` of `h` at `at`, `PROT_NONE` until
  /// `set_access`. O(1) syscalls.
  /// @throws wisp::logic_error if the part is empty or outside the handle, or `at` is not
  ///   granule-aligned; wisp::out_of_memory on `ENOMEM` (e.g. `vm.max_map_count` reached);
  ///   wisp::os_error otherwise. Nothing is mapped on failure.
  void map(std::byte* at, handle h, std::size_t offset, std::size_t granules) {
    WISP_EXPECTS(granules != 0 && offset <= h.granules && granules <= h.granules - offset,
                 "posix_vmm::map: granules [", offset, ", ", offset + granules,
                 ") are outside the handle's ", h.granules, " granules");
    WISP_EXPECTS(reinterpret_cast<std::uintptr_t>(at) % options_.granule == 0,
                 "posix_vmm::map: ", static_cast<void*>(at), " is not aligned to the granule ",
                 options_.granule);
    void* got = ::mmap(at, granules * options_.granule, PROT_NONE, MAP_SHARED | MAP_FIXED, h.fd,
                       static_cast<off_t>(offset * options_.granule));
    if (got == MAP_FAILED) {
      fail_errno("mmap(MAP_FIXED | MAP_SHARED) of ", granules, " granules at ",
                 static_cast<void*>(at));
    }
  }

  /// @brief Makes a mapped range readable and writable. O(1) syscalls.
  /// @throws wisp::out_of_memory on `ENOMEM`; wisp::os_error otherwise.
  void set_access(std::byte* at, std::size_t granules) {
    if (::mprotect(at, granules * options_.granule, PROT_READ | PROT_WRITE) != 0) {
      fail_errno("mprotect(PROT_READ | PROT_WRITE) of ", granules, " granules at ",
                 static_cast<void*>(at));
    }
  }

  /// @brief Unmaps a range and keeps it reserved (`PROT_NONE` anonymous memory over it). O(1)
  /// syscalls. Replacing whole mappings cannot fail on Linux short of a kernel bug; if it does,
  /// the memory would stay visible at `at` while its handle is reused, so the process aborts
  /// with the errno text instead.
  void unmap(std::byte* at, std::size_t granules) noexcept {
    void* got = ::mmap(at, granules * options_.granule, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    if (got == MAP_FAILED) {
      std::fprintf(stderr, "wisp::posix_vmm::unmap: mmap(PROT_NONE, MAP_FIXED) at %p failed: %s\n",
                   static_cast<void*>(at), std::strerror(errno));
      std::abort();
    }
  }

  /// The options it was built with.
  [[nodiscard]] const posix_vmm_options& options() const noexcept { return options_; }

 private:
  [[nodiscard]] std::size_t checked_bytes(const char* what, std::size_t granules) const {
    WISP_EXPECTS(granules != 0, "posix_vmm::", what, ": 0 granules");
    WISP_EXPECTS(granules <= SIZE_MAX / options_.granule, "posix_vmm::", what, ": ", granules,
                 " granules of ", options_.granule, " B overflow size_t");
    return granules * options_.granule;
  }

  template <class... Parts>
  [[noreturn]] static void fail_errno(const Parts&... parts) {
    const int code = errno;
    std::string message = detail::concat("posix_vmm: ", parts..., " failed: ", std::strerror(code),
                                         " (errno ", code, ")");
    if (code == ENOMEM || code == ENOSPC || code == EMFILE || code == ENFILE) {
      throw out_of_memory(message);
    }
    throw os_error(code, message);
  }

  posix_vmm_options options_;
};

static_assert(vmm_backend<posix_vmm>);

#endif  // WISP_HAS_POSIX_VMM

}  // namespace wisp
