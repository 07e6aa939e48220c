// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `resize_layer_rows`: resizes one per-layer pager layer together with the expert tensor
/// that holds its slots (a `virtual_expert_tensor`, or any `resident_row_tensor`), in the one
/// order that keeps every resident expert's bytes in its slot: grow the tensor, resize the
/// layer's cache, copy the moved rows, shrink the tensor. Strong guarantee for the pair.
///
/// The pager's header does not include the VMM: the tensor is reached through the small
/// `resident_row_tensor` concept, which `wisp::virtual_expert_tensor` models.
/// @code
/// pager.end_call(layer);  // the layer's kernel has finished: its experts may move or go
/// wisp::resize_layer_rows(pager, layer, new_capacity, tensors[layer]);
/// // pager.capacity(layer) == tensors[layer].resident_rows() == new_capacity, and each resident
/// // expert's weights are in tensors[layer].row(pager.slot_of(layer, expert))
/// @endcode
#pragma once

#include <wisp/cache/eviction_policy.hpp>
#include <wisp/cache/slot_cache.hpp>
#include <wisp/core/error.hpp>
#include <wisp/pager/pager.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace wisp {

/// @brief An expert tensor whose slot rows `[0, resident_rows())` are backed and can be grown or
/// shrunk in place: `resize_resident` growing has the strong guarantee and shrinking never fails;
/// row `r` starts at `row(r)` and spans `row_stride()` bytes.
template <class T>
concept resident_row_tensor = requires(T& t, const T& ct, std::size_t n) {
  { ct.resident_rows() } -> std::convertible_to<std::size_t>;
  { ct.row_stride() } -> std::convertible_to<std::size_t>;
  { ct.row(n) } -> std::convertible_to<std::byte*>;
  t.resize_resident(n);
};

/// @brief Sets `layer`'s slot count to `capacity` in `pager` (per-layer scope) and the resident
/// rows of `tensor`, the layer's slots, to the same, moving the bytes of every expert the
/// pager's resize relocates (`resize_report::moves`, row by row, `row_stride()` bytes each).
///
/// The experts of the layer's current call stay resident and in place unless `end_call(layer)`
/// was called first; evicted experts' rows are simply dropped or reused.
/// O(|capacity - rows| x row_stride / granule) mapping + `pager::resize_layer` + the copies.
/// Not thread-safe: nothing may read the layer's slots meanwhile.
/// @returns the pager's report (its moves are already copied).
/// @throws wisp::logic_error if the tensor has fewer resident rows than the layer has slots;
///   whatever `tensor.resize_resident` throws when growing (e.g.
///   wisp::out_of_memory), and as `pager::resize_layer` (a bad layer or capacity, global scope,
///   a shrink below the current call's experts). Strong guarantee: the pager and the tensor are
///   then both as before. Arguments are checked before the tensor is touched; if the pager
///   still fails after the tensor grew (std::bad_alloc), the tensor is shrunk back and its pool
///   keeps the pages as free pages.
template <eviction_policy Policy, resident_row_tensor Tensor>
resize_report resize_layer_rows(pager<Policy>& pager, std::int32_t layer, std::int32_t capacity,
                                Tensor& tensor) {
  const std::size_t rows_before = tensor.resident_rows();
  WISP_EXPECTS(rows_before >= static_cast<std::size_t>(pager.capacity(layer)),
               "resize_layer_rows: the tensor has ", rows_before, " resident rows but layer ",
               layer, " has ", pager.capacity(layer), " slots (every slot needs its row)");
  // The pager's own argument checks, before the tensor is touched (its pool keeps the pages a
  // grow took, so a refused resize must not grow it first).
  WISP_EXPECTS(pager.scope() == cache_scope::per_layer,
               "resize_layer_rows: the pager has one global pool; resize it with resize_pool");
  WISP_EXPECTS(capacity >= pager.top_k() && capacity <= pager.experts(),
               "resize_layer_rows: capacity ", capacity, " of layer ", layer,
               " must be in [top_k = ", pager.top_k(), ", experts = ", pager.experts(), "]");
  const auto rows = static_cast<std::size_t>(capacity);
  if (rows > rows_before) {
    tensor.resize_resident(rows);  // grow first: the moves below may land in the new rows
  }
  resize_report report;
  try {
    report = pager.resize_layer(layer, capacity);
  } catch (...) {  // a shrink below the current call's experts, or std::bad_alloc
    if (tensor.resident_rows() != rows_before) {
      tensor.resize_resident(rows_before);  // a shrink: never fails
    }
    throw;
  }
  // Nothing below fails: the moves go from slots >= capacity to free slots below it (disjoint).
  const std::size_t stride = tensor.row_stride();
  for (const slot_move& m : report.moves) {
    std::memcpy(tensor.row(static_cast<std::size_t>(m.to)),
                tensor.row(static_cast<std::size_t>(m.from)), stride);
  }
  if (rows < tensor.resident_rows()) {
    tensor.resize_resident(rows);  // shrink last: the rows just moved from are no longer needed
  }
  return report;
}

}  // namespace wisp
