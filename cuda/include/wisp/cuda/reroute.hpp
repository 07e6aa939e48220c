// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The element rules of the reroute and remap kernels: ExpertWeave's batched rerouting
/// (§4.3: a token's routed expert -> the row of its adapter's fine-tuned copy in the virtual
/// weight tensor), alone or fused with the remap through an expert map (row -> slot). Host-safe.
///
/// `reroute_to_row` applies the table of a `wisp::reroute_table` (`table()`, uploaded as is);
/// `reroute_to_slot` follows it with `expert_to_slot` over the rows, so a kernel that takes slot
/// ids gets them in one pass. `reroute_ids` is the loop every thread of the kernel runs (and the
/// host runs with `first = 0, stride = 1`): the host tests compare it with
/// `reroute_table::apply` and the pager's map on the ESFT trace.
/// @code
/// wisp::cuda::reroute_to_slot rule{{table.data(), adapters, experts}, {map, rows}};
/// wisp::cuda::reroute_ids(rule, ids, n, k, adapter_ids, out, 0, 1);   // host
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/topk.hpp>
#include <wisp/cuda/remap.hpp>

#include <cstddef>
#include <cstdint>

namespace wisp::cuda {

/// @brief Reroutes one id: adapter -1 (the base model) keeps expert `id`; adapter `a` takes
/// `table[a * experts + id]`. An id outside `[0, experts)` or an adapter outside
/// `[-1, adapters)` yields `invalid_expert`. Trivially copyable.
struct reroute_to_row {
  const std::int32_t* table = nullptr;  ///< `[adapters x experts]` (`reroute_table::table()`)
  std::int32_t adapters = 0;
  std::int32_t experts = 0;

  template <topk_id Id>
  WISP_HOST_DEVICE std::int32_t operator()(std::int32_t adapter, Id id) const noexcept {
    if (id < 0 || id >= experts || adapter < -1 || adapter >= adapters) {
      return invalid_expert;
    }
    const auto e = static_cast<std::int32_t>(id);
    return adapter < 0 ? e : table[static_cast<std::size_t>(adapter) * experts + e];
  }
};

/// @brief Reroutes, then maps the row to its slot (`not_resident` if it has none); invalid
/// inputs yield `invalid_expert`. Trivially copyable.
struct reroute_to_slot {
  reroute_to_row reroute;
  expert_to_slot remap;  ///< over the rows of the expert tensor

  template <topk_id Id>
  WISP_HOST_DEVICE std::int32_t operator()(std::int32_t adapter, Id id) const noexcept {
    const std::int32_t row = reroute(adapter, id);
    return row < 0 ? row : remap(row);
  }
};

/// @brief `out[i] = rule(adapter_ids[i / k], ids[i])` for `i = first, first + stride, ...` below
/// `n` (`[tokens x k]` ids, one adapter id per token). `out` may alias `ids` when both are int32.
/// O(n / stride).
template <class Rule, topk_id Id>
WISP_HOST_DEVICE void reroute_ids(const Rule& rule, const Id* ids, std::size_t n, std::int32_t k,
                                  const std::int32_t* adapter_ids, std::int32_t* out,
                                  std::size_t first, std::size_t stride) noexcept {
  for (std::size_t i = first; i < n; i += stride) {
    out[i] = rule(adapter_ids[i / static_cast<std::size_t>(k)], ids[i]);
  }
}

}  // namespace wisp::cuda
