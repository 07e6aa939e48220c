// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `fused_moe_kernel`: the concept a user-supplied fused-MoE kernel models, and
/// `basic_fused_moe_args` / `fused_moe_args`, the trivially copyable argument block wisp hands it.
///
/// The kernel is the engine's own code (a Triton/CUTLASS launch on a GPU, a loop on the CPU). wisp
/// never calls it; the engine does, after `pager::prepare` and the copy plan. The kernel reads
/// expert weights **only** through `expert_map` and `experts` (row `expert_map[e]` of the expert
/// tensor holds expert `e`), so it never knows whether the weights are paged: with every expert
/// resident the map is the identity, with a pager it is the call's `prepare_result::expert_map`.
///
/// Contract (what every model must do, and what the engine may rely on):
/// - `out` row `t` (`t < tokens`) is overwritten with `sum_j topk_weights[t*k + j] *
///   expert(topk_ids[t*k + j])(hidden row t)` over the positions `j` whose expert is visible
///   (`expert_map[id] >= 0`); positions whose expert is hidden contribute nothing (an expert split
///   sums partial outputs; a token split makes every position of its rows visible).
/// - A token's output depends only on its own row, ids, weights and the bytes of its experts, so
///   the output is the same whatever the batch composition or the slots the experts occupy.
/// - The kernel reads rows `expert_map[e]` of `experts` for the visible ids of the batch and no
///   other row; rows that are not mapped must not be touched.
///
/// `fused_moe_args` (fp32 activations, int32 ids) is what the CPU engines use;
/// `basic_fused_moe_args<bf16>` is the GPU form (bf16 activations, the same ids, fp32 gate
/// weights) that `wisp::reference_fused_moe` and `wisp::cuda::reference_fused_moe` take.
/// @code
/// struct my_kernel {
///   void operator()(const wisp::fused_moe_args& a) { /* launch */ }
/// };
/// static_assert(wisp::fused_moe_kernel<my_kernel>);
/// auto r = pager.prepare(layer, ids, tokens, k);
/// engine.wait(engine.copy(where, r.copy_plan, engine.consumer_event()));   // a copy_engine
/// kernel(wisp::fused_moe_args{hidden, ids, weights, tensor.view(), r.expert_map, out,
///                             tokens, k, hidden_dim});
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/core/expert_tensor_view.hpp>
#include <wisp/core/topk.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

namespace wisp {

/// @brief Everything a fused-MoE kernel reads and writes for one launch, over activations of type
/// `Activation` (`float`, or `wisp::bf16` on GPUs) and ids of type `Id` (`int32` or `int64`).
/// Trivially copyable (a device kernel can take it by value); it owns nothing.
template <class Activation, topk_id Id = std::int32_t>
struct basic_fused_moe_args {
  using activation_type = Activation;
  using id_type = Id;

  std::span<const Activation> hidden;        ///< `[tokens x hidden_dim]` input activations
  std::span<const Id> topk_ids;              ///< `[tokens x top_k]` routed logical experts
  std::span<const float> topk_weights;       ///< `[tokens x top_k]` gate weights
  expert_tensor_view experts;                ///< the rows the kernel may read (slots)
  std::span<const std::int32_t> expert_map;  ///< `int32[E]`: row of expert `e`, or -1 (hidden)
  std::span<Activation> out;                 ///< `[tokens x hidden_dim]` output, overwritten
  std::int32_t tokens = 0;
  std::int32_t top_k = 1;
  std::int32_t hidden_dim = 0;
};

/// The argument block of CPU kernels: fp32 activations, int32 ids.
using fused_moe_args = basic_fused_moe_args<float, std::int32_t>;
static_assert(std::is_trivially_copyable_v<fused_moe_args>);

/// @brief A fused-MoE kernel: callable with a `const Args&` (by default `fused_moe_args`; see the
/// file comment for the contract a model must keep).
template <class K, class Args = fused_moe_args>
concept fused_moe_kernel = requires(K& kernel, const Args& args) {
  kernel(args);
};

/// The row a fused-MoE kernel reads for routed id `id`: `map[id]` when `id` is in
/// `[0, map_size)` and `map[id]` is a row in `[0, rows)`, else -1 (the position contributes
/// nothing). Host kernels reject the invalid cases up front; device kernels, which cannot throw,
/// skip them through this rule instead of reading out of bounds. O(1).
template <topk_id Id>
WISP_HOST_DEVICE std::int32_t visible_row(const std::int32_t* map, std::size_t map_size,
                                          std::size_t rows, Id id) noexcept {
  if (id < 0 || static_cast<std::uint64_t>(id) >= map_size) {
    return -1;
  }
  const std::int32_t row = map[static_cast<std::size_t>(id)];
  return row >= 0 && static_cast<std::size_t>(row) < rows ? row : -1;
}

/// @brief Checks the shapes of `a` (spans sized for `tokens`, `top_k` and `hidden_dim`).
/// O(1). Engines call it in debug paths; kernels may call it before launching.
/// @throws wisp::logic_error naming the first bad size.
template <class Activation, topk_id Id>
void check_fused_moe_args(const basic_fused_moe_args<Activation, Id>& a) {
  detail::check_topk_shape("fused_moe_args", a.topk_ids.size(), a.tokens, a.top_k);
  WISP_EXPECTS(a.topk_weights.size() == a.topk_ids.size(), "fused_moe_args: topk_weights holds ",
               a.topk_weights.size(), " entries for ", a.topk_ids.size(), " topk_ids");
  WISP_EXPECTS(a.hidden_dim >= 1, "fused_moe_args: hidden_dim must be >= 1, got ", a.hidden_dim);
  const auto values = static_cast<std::size_t>(a.tokens) * static_cast<std::size_t>(a.hidden_dim);
  WISP_EXPECTS(a.hidden.size() == values && a.out.size() == values, "fused_moe_args: hidden holds ",
               a.hidden.size(), " and out ", a.out.size(),
               " values but tokens * hidden_dim = ", values);
}

}  // namespace wisp
