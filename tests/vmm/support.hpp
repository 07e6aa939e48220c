// SPDX-License-Identifier: Apache-2.0
// Test helpers for the vmm area: full snapshots of a tensor (mapped rows, refcounts, pages,
// contents) and of its pool, and an independent oracle of per-granule reference counts computed
// from scratch from the set of mapped rows.
#pragma once

#include "vmm/fault_vmm.hpp"

#include <wisp/vmm/adapter_layout.hpp>
#include <wisp/vmm/page_pool.hpp>
#include <wisp/vmm/virtual_expert_tensor.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

namespace wisp::test {

// The pool, tensor and adapter layout over the counting, fault-injecting backend.
using pool_t = page_pool<fault_vmm>;
using tensor = virtual_expert_tensor<fault_vmm>;
using layout = adapter_layout<fault_vmm>;

/// Everything observable about a tensor, its pool and the backend's live resources.
struct snapshot {
  std::vector<std::uint8_t> mapped;  // per row
  std::vector<std::uint32_t> refs;   // per granule
  std::vector<int> fds;              // per granule: page fd or -1
  std::vector<std::byte> contents;   // bytes of every mapped row, in row order
  std::size_t mapped_rows = 0;
  std::size_t mapped_granules = 0;
  std::size_t resident = 0;
  std::byte* base = nullptr;
  page_pool_stats pool;
  std::int64_t live_handles = 0;
  std::int64_t backend_mapped = 0;
  friend bool operator==(const snapshot&, const snapshot&) = default;
};

template <class B>
snapshot take(const virtual_expert_tensor<B>& t) {
  snapshot s;
  for (std::size_t r = 0; r < t.max_rows(); ++r) {
    s.mapped.push_back(t.is_mapped(r) ? 1 : 0);
    if (t.is_mapped(r)) {
      const std::byte* p = t.row(r);
      s.contents.insert(s.contents.end(), p, p + t.row_stride());
    }
  }
  for (std::size_t g = 0; g < t.granules(); ++g) {
    s.refs.push_back(t.granule_refcount(g));
    if constexpr (std::is_same_v<typename B::handle, posix_vmm::handle>) {
      s.fds.push_back(t.granule_refcount(g) != 0 ? t.page(g).fd : -1);
    }
  }
  s.mapped_rows = t.mapped_rows();
  s.mapped_granules = t.mapped_granules();
  s.resident = t.resident_rows();
  s.base = t.data();
  s.pool = t.pool().stats();
  if constexpr (std::is_same_v<B, fault_vmm>) {
    s.live_handles = t.pool().backend().counters().live_handles;
    s.backend_mapped = t.pool().backend().counters().mapped_granules;
  }
  return s;
}

/// Oracle: per-granule count of mapped rows, from the row set alone.
inline std::vector<std::uint32_t> oracle_refcounts(const std::vector<std::uint8_t>& mapped,
                                                   std::size_t stride, std::size_t granule,
                                                   std::size_t granules) {
  std::vector<std::uint32_t> refs(granules, 0);
  for (std::size_t r = 0; r < mapped.size(); ++r) {
    if (mapped[r] == 0) {
      continue;
    }
    // Granules of the row's first and last byte, inclusive.
    const std::size_t first = r * stride / granule;
    const std::size_t last = ((r + 1) * stride - 1) / granule;
    for (std::size_t g = first; g <= last; ++g) {
      ++refs[g];
    }
  }
  return refs;
}

/// Fills row `r` with a pattern derived from (r, stamp).
inline void fill_row(std::byte* p, std::size_t stride, std::size_t r, std::uint32_t stamp) {
  for (std::size_t i = 0; i < stride; ++i) {
    p[i] = static_cast<std::byte>((r * 131u + i * 7u + stamp * 31u) & 0xFFu);
  }
}
inline bool row_holds(const std::byte* p, std::size_t stride, std::size_t r, std::uint32_t stamp) {
  for (std::size_t i = 0; i < stride; ++i) {
    if (p[i] != static_cast<std::byte>((r * 131u + i * 7u + stamp * 31u) & 0xFFu)) {
      return false;
    }
  }
  return true;
}

}  // namespace wisp::test
