// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The body of the reference fused-MoE kernel: one token computed by one `thread_group`
/// (a CUDA block per token on a GPU, `serial_group` on the host), from the element rules of
/// `<wisp/kernel/swiglu.hpp>` in the same order as `wisp::reference_fused_moe`, so both give the
/// same bits. Host-safe; `wisp::cuda::reference_fused_moe` (`<wisp/cuda/kernels.cuh>`) launches
/// it.
///
/// The group splits each visible expert's work by output element: first the `I` activations
/// (one per rank, strided), a barrier, then the `H` outputs, each accumulated in the group's
/// scratch by the one rank that owns it. Written for clarity, not speed: this is the example a
/// kernel author reads to see what a wisp-paged kernel consumes (bf16 hidden, top-k ids and
/// weights, the slot tensor and the expert map), not a GEMM.
/// @code
/// const auto p = wisp::cuda::make_fused_moe_params(args, shape);   // host: checks the shapes
/// for (std::int32_t t = 0; t < p.tokens; ++t) {
///   wisp::cuda::fused_moe_token(wisp::cuda::serial_group{}, p, t, scratch.data());
/// }
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/core/topk.hpp>
#include <wisp/cuda/thread_group.hpp>
#include <wisp/kernel/bf16.hpp>
#include <wisp/kernel/fused_moe.hpp>
#include <wisp/kernel/reference_moe.hpp>
#include <wisp/kernel/swiglu.hpp>
#include <wisp/vmm/expert_tensor_view.hpp>

#include <cstddef>
#include <cstdint>

namespace wisp::cuda {

/// @brief A `basic_fused_moe_args` as raw pointers plus the expert shape: what the kernel takes
/// by value. Trivially copyable.
template <class Activation, topk_id Id>
struct fused_moe_params {
  const Activation* hidden = nullptr;  ///< `[tokens x H]`
  const Id* topk_ids = nullptr;        ///< `[tokens x top_k]`
  const float* topk_weights = nullptr;
  expert_tensor_view experts;                ///< slot rows, each `shape.row_bytes()` or more
  const std::int32_t* expert_map = nullptr;  ///< `[map_size]`
  std::size_t map_size = 0;
  Activation* out = nullptr;  ///< `[tokens x H]`
  std::int32_t tokens = 0;
  std::int32_t top_k = 1;
  swiglu_shape shape;
};

/// @brief Checks `a` against `shape` (`check_swiglu_moe_args`) and returns its parameters. O(1).
/// @throws wisp::logic_error naming the first bad value.
template <class Activation, topk_id Id>
fused_moe_params<Activation, Id> make_fused_moe_params(
    const basic_fused_moe_args<Activation, Id>& a, const swiglu_shape& shape) {
  check_swiglu_moe_args("fused MoE", a, shape);
  return fused_moe_params<Activation, Id>{a.hidden.data(),
                                          a.topk_ids.data(),
                                          a.topk_weights.data(),
                                          a.experts,
                                          a.expert_map.data(),
                                          a.expert_map.size(),
                                          a.out.data(),
                                          a.tokens,
                                          a.top_k,
                                          shape};
}

/// Floats of scratch one token needs: its input, the activations and the output sums.
[[nodiscard]] WISP_HOST_DEVICE constexpr std::size_t fused_moe_scratch_floats(
    const swiglu_shape& shape) noexcept {
  return 2 * static_cast<std::size_t>(shape.hidden) + static_cast<std::size_t>(shape.intermediate);
}

/// @brief Computes token `t`'s output row with the group `g` (see the file comment).
///
/// Positions whose id is out of the map, or whose map entry is not a row of `experts`, are
/// skipped (`visible_row`): a kernel cannot throw. `scratch` holds
/// `fused_moe_scratch_floats(p.shape)` floats shared by the group. O(k x H x I) work, split over
/// the group; `sync`s between phases.
WISP_DETAIL_EXEC_CHECK_DISABLE
template <thread_group Group, class Activation, topk_id Id>
WISP_HOST_DEVICE void fused_moe_token(const Group& g, const fused_moe_params<Activation, Id>& p,
                                      std::int32_t t, float* scratch) {
  const std::int32_t r = g.rank();
  const std::int32_t size = g.size();
  const std::int32_t h = p.shape.hidden;
  const std::size_t row0 = static_cast<std::size_t>(t) * static_cast<std::size_t>(h);
  float* x = scratch;
  float* acc = scratch + h;
  float* act = acc + h;
  for (std::int32_t i = r; i < h; i += size) {
    x[i] = to_float(p.hidden[row0 + static_cast<std::size_t>(i)]);
    acc[i] = 0.0f;
  }
  g.sync();
  for (std::int32_t j = 0; j < p.top_k; ++j) {
    const std::size_t pos = static_cast<std::size_t>(t) * static_cast<std::size_t>(p.top_k) +
                            static_cast<std::size_t>(j);
    const std::int32_t row =
        wisp::visible_row(p.expert_map, p.map_size, p.experts.rows, p.topk_ids[pos]);
    if (row < 0) {
      continue;  // the same decision in every rank
    }
    const auto* w = reinterpret_cast<const bf16*>(p.experts.row(static_cast<std::size_t>(row)));
    for (std::int32_t i = r; i < p.shape.intermediate; i += size) {
      act[i] = swiglu_activation(w, x, p.shape, i);
    }
    g.sync();
    const float weight = p.topk_weights[pos];
    for (std::int32_t o = r; o < h; o += size) {
      acc[o] = wisp::fma_rn(weight, swiglu_output(w, act, p.shape, o), acc[o]);
    }
    g.sync();  // `act` is rewritten by the next expert
  }
  for (std::int32_t o = r; o < h; o += size) {
    p.out[row0 + static_cast<std::size_t>(o)] = activation_from_float<Activation>(acc[o]);
  }
}

}  // namespace wisp::cuda
