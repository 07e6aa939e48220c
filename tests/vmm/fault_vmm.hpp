// SPDX-License-Identifier: Apache-2.0
// A vmm_backend for tests: posix_vmm underneath (real memory), plus counters of live handles,
// mapped granules and reservations, and fault injection: the n-th fallible call (create, map or
// set_access) throws. Counters live in a shared block so they survive the backend being moved
// into a page_pool.
#pragma once

#include <wisp/core/error.hpp>
#include <wisp/vmm/posix_vmm.hpp>
#include <wisp/vmm/vmm_backend.hpp>

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace wisp::test {

/// The system page size: the granule the vmm tests use, so pages stay small and many.
inline const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));

/// Thrown by an injected map/set_access failure (create failures throw wisp::out_of_memory).
class injected_error : public error {
 public:
  using error::error;
};

struct fault_counters {
  std::int64_t live_handles = 0;     // created and not released
  std::int64_t mapped_granules = 0;  // mapped and not unmapped
  std::int64_t live_reservations = 0;
  std::int64_t fallible_calls = 0;  // create + map + set_access calls seen
  std::int64_t fail_at = 0;         // > 0: the fail_at-th fallible call from now throws
};

class fault_vmm {
 public:
  using handle = posix_vmm::handle;

  explicit fault_vmm(std::size_t granule = 4096)
      : inner_(posix_vmm_options{.granule = granule, .commit = true}),
        counters_(std::make_shared<fault_counters>()) {}

  [[nodiscard]] fault_counters& counters() const noexcept { return *counters_; }
  [[nodiscard]] std::shared_ptr<fault_counters> shared_counters() const { return counters_; }

  /// Arms the fault: the n-th fallible call from now fails (0 disarms).
  void fail_at(std::int64_t n) noexcept { counters_->fail_at = n; }

  [[nodiscard]] std::size_t granularity() const noexcept { return inner_.granularity(); }

  std::byte* reserve(std::size_t granules) {
    std::byte* p = inner_.reserve(granules);
    ++counters_->live_reservations;
    return p;
  }
  void free(std::byte* p, std::size_t granules) noexcept {
    inner_.free(p, granules);
    --counters_->live_reservations;
  }
  handle create(std::size_t granules) {
    if (tick()) {
      throw out_of_memory("injected create failure");
    }
    handle h = inner_.create(granules);
    ++counters_->live_handles;
    return h;
  }
  void release(handle h) noexcept {
    inner_.release(h);
    --counters_->live_handles;
  }
  void map(std::byte* at, handle h, std::size_t offset, std::size_t granules) {
    if (tick()) {
      throw injected_error("injected map failure");
    }
    inner_.map(at, h, offset, granules);
    counters_->mapped_granules += static_cast<std::int64_t>(granules);
  }
  void set_access(std::byte* at, std::size_t granules) {
    if (tick()) {
      throw injected_error("injected set_access failure");
    }
    inner_.set_access(at, granules);
  }
  void unmap(std::byte* at, std::size_t granules) noexcept {
    inner_.unmap(at, granules);
    counters_->mapped_granules -= static_cast<std::int64_t>(granules);
  }

 private:
  bool tick() noexcept {
    ++counters_->fallible_calls;
    return counters_->fail_at > 0 && --counters_->fail_at == 0;
  }

  posix_vmm inner_;
  std::shared_ptr<fault_counters> counters_;
};

static_assert(vmm_backend<fault_vmm>);

}  // namespace wisp::test
