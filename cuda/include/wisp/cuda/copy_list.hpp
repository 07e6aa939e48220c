// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `copy_listed_rows`: the rule of the device pager's copy kernel, which reads a copy list
/// the step left in device memory and copies each listed master row into its slot, so the copies
/// need no host round trip (the masters are pinned host memory read through their mapped device
/// pointer). Host-safe: the host tests run it over host memory after each host step.
///
/// The work is split into 16-byte chunks when every row and both tensors allow it (else bytes):
/// item `i` of `count * chunks` is chunk `i % chunks` of entry `i / chunks`, so consecutive
/// workers (the threads of a warp) copy consecutive chunks of one row.
/// @code
/// // a kernel: worker = global thread index, workers = threads in the grid
/// wisp::cuda::copy_listed_rows(list, info->copies, masters, slots, row_bytes, worker, workers);
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/topk.hpp>
#include <wisp/vmm/expert_tensor_view.hpp>

#include <cstddef>
#include <cstdint>

namespace wisp::cuda {

namespace detail {
struct alignas(16) chunk16 {
  std::uint64_t lo;
  std::uint64_t hi;
};

template <class Chunk>
WISP_HOST_DEVICE void copy_listed_chunks(const copy_op* list, std::int32_t count,
                                         const expert_tensor_view& masters,
                                         const expert_tensor_view& slots, std::size_t row_bytes,
                                         std::size_t worker, std::size_t workers) noexcept {
  const std::size_t chunks = row_bytes / sizeof(Chunk);
  const std::size_t items = static_cast<std::size_t>(count) * chunks;
  for (std::size_t i = worker; i < items; i += workers) {
    const copy_op op = list[i / chunks];
    if (op.expert < 0 || static_cast<std::size_t>(op.expert) >= masters.rows || op.slot < 0 ||
        static_cast<std::size_t>(op.slot) >= slots.rows) {
      continue;  // never written by a step; a corrupt list must not write out of bounds
    }
    const std::size_t c = i % chunks;
    const auto* from =
        reinterpret_cast<const Chunk*>(masters.row(static_cast<std::size_t>(op.expert)));
    auto* to = reinterpret_cast<Chunk*>(slots.row(static_cast<std::size_t>(op.slot)));
    to[c] = from[c];
  }
}
}  // namespace detail

/// @brief Copies `row_bytes` bytes of master row `list[m].expert` to slot row `list[m].slot` for
/// every `m < count`, the share of worker `worker` of `workers` (see the file comment). Entries
/// outside the tensors are skipped. O(count x row_bytes / workers).
WISP_HOST_DEVICE inline void copy_listed_rows(const copy_op* list, std::int32_t count,
                                              const expert_tensor_view& masters,
                                              const expert_tensor_view& slots,
                                              std::size_t row_bytes, std::size_t worker,
                                              std::size_t workers) noexcept {
  const bool wide = row_bytes % 16 == 0 && masters.row_stride % 16 == 0 &&
                    slots.row_stride % 16 == 0 &&
                    reinterpret_cast<std::uintptr_t>(masters.base) % 16 == 0 &&
                    reinterpret_cast<std::uintptr_t>(slots.base) % 16 == 0;
  if (wide) {
    detail::copy_listed_chunks<detail::chunk16>(list, count, masters, slots, row_bytes, worker,
                                                workers);
  } else {
    detail::copy_listed_chunks<unsigned char>(list, count, masters, slots, row_bytes, worker,
                                              workers);
  }
}

}  // namespace wisp::cuda
