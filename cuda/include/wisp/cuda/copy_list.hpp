// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `copy_listed_rows`: the rule of the device pager's copy kernel, which reads a copy list
/// the step left in device memory and copies each listed master row into its slot, so the copies
/// need no host round trip (the masters are pinned host memory read through their mapped device
/// pointer). Host-safe: the host tests run it over host memory after each host step.
///
/// The work is split into 16-byte chunks when every row and both tensors allow it (else bytes),
/// and the chunks of each row into tiles of `lanes x copy_unroll` chunks. Group `g` of `groups`
/// (a thread block) copies tiles `g`, `g + groups`, ... of the list's rows in row order; lane `l`
/// of its `lanes` (a thread) loads chunks `l`, `l + lanes`, ... of the tile (`copy_unroll` of
/// them, all issued before the first store, so that many reads are in flight over PCIe) and then
/// stores them. Consecutive lanes copy consecutive chunks; a tile lies in one row, so the row is
/// found by one division per tile, not per chunk.
/// @code
/// // a kernel: group = block index, groups = blocks, lane = thread in the block, lanes = threads
/// wisp::cuda::copy_listed_rows(list, info->copies, masters, slots, row_bytes, blockIdx.x,
///                              gridDim.x, threadIdx.x, blockDim.x);
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/topk.hpp>
#include <wisp/vmm/expert_tensor_view.hpp>

#include <cstddef>
#include <cstdint>

namespace wisp::cuda {

/// Chunks each lane of `copy_listed_rows` loads before it stores them.
inline constexpr std::size_t copy_unroll = 8;

namespace detail {
struct alignas(16) chunk16 {
  std::uint64_t lo;
  std::uint64_t hi;
};

template <class Chunk>
WISP_HOST_DEVICE void copy_listed_chunks(const copy_op* list, std::int32_t count,
                                         const expert_tensor_view& masters,
                                         const expert_tensor_view& slots, std::size_t row_bytes,
                                         std::size_t group, std::size_t groups, std::size_t lane,
                                         std::size_t lanes) noexcept {
  const std::size_t chunks = row_bytes / sizeof(Chunk);
  const std::size_t tile = lanes * copy_unroll;
  const std::size_t tiles_per_row = (chunks + tile - 1) / tile;
  const std::size_t tiles = count > 0 ? static_cast<std::size_t>(count) * tiles_per_row : 0;
  for (std::size_t t = group; t < tiles; t += groups) {
    const std::size_t m = t / tiles_per_row;
    const copy_op op = list[m];
    if (op.expert < 0 || static_cast<std::size_t>(op.expert) >= masters.rows || op.slot < 0 ||
        static_cast<std::size_t>(op.slot) >= slots.rows) {
      continue;  // never written by a step; a corrupt list must not write out of bounds
    }
    const auto* from =
        reinterpret_cast<const Chunk*>(masters.row(static_cast<std::size_t>(op.expert)));
    auto* to = reinterpret_cast<Chunk*>(slots.row(static_cast<std::size_t>(op.slot)));
    const std::size_t first = (t - m * tiles_per_row) * tile + lane;
    Chunk held[copy_unroll] = {};
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (std::size_t k = 0; k < copy_unroll; ++k) {
      const std::size_t c = first + k * lanes;
      if (c < chunks) {
        held[k] = from[c];
      }
    }
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (std::size_t k = 0; k < copy_unroll; ++k) {
      const std::size_t c = first + k * lanes;
      if (c < chunks) {
        to[c] = held[k];
      }
    }
  }
}
}  // namespace detail

/// @brief Copies `row_bytes` bytes of master row `list[m].expert` to slot row `list[m].slot` for
/// every `m < count`, the share of lane `lane` of `lanes` in group `group` of `groups` (see the
/// file comment); every lane of every group together copies each byte once. Entries outside the
/// tensors are skipped; a `count` of 0 or less copies nothing.
/// Preconditions (unchecked, as in a kernel): `lane < lanes`, `group < groups`, `lanes >= 1`.
/// O(count x row_bytes / (groups x lanes)) per lane.
WISP_HOST_DEVICE inline void copy_listed_rows(const copy_op* list, std::int32_t count,
                                              const expert_tensor_view& masters,
                                              const expert_tensor_view& slots,
                                              std::size_t row_bytes, std::size_t group,
                                              std::size_t groups, std::size_t lane,
                                              std::size_t lanes) noexcept {
  const bool wide = row_bytes % 16 == 0 && masters.row_stride % 16 == 0 &&
                    slots.row_stride % 16 == 0 &&
                    reinterpret_cast<std::uintptr_t>(masters.base) % 16 == 0 &&
                    reinterpret_cast<std::uintptr_t>(slots.base) % 16 == 0;
  if (wide) {
    detail::copy_listed_chunks<detail::chunk16>(list, count, masters, slots, row_bytes, group,
                                                groups, lane, lanes);
  } else {
    detail::copy_listed_chunks<unsigned char>(list, count, masters, slots, row_bytes, group, groups,
                                              lane, lanes);
  }
}

/// @brief Groups (thread blocks) for a copy of up to `rows` rows of `row_bytes` by groups of
/// `lanes` lanes: one per tile (see the file comment), at most `resident_groups` (the groups
/// the device holds at once; grid-striding covers the rest), at least one. O(1).
[[nodiscard]] WISP_HOST_DEVICE constexpr std::size_t copy_groups(
    std::size_t rows, std::size_t row_bytes, std::size_t lanes,
    std::size_t resident_groups) noexcept {
  const std::size_t tile_bytes = lanes * copy_unroll * 16;  // the wide path's tiles
  const std::size_t tiles = rows * ((row_bytes + tile_bytes - 1) / tile_bytes);
  const std::size_t cap = resident_groups < 1 ? 1 : resident_groups;
  return tiles < 1 ? 1 : tiles > cap ? cap : tiles;
}

}  // namespace wisp::cuda
