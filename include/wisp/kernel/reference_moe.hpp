// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `reference_fused_moe`: the host reference fused-MoE kernel over SwiGLU bf16 experts
/// (`swiglu_shape`), for `fused_moe_args` (fp32 activations) and `basic_fused_moe_args<bf16>`.
///
/// It is the plain loop of the element rules in `<wisp/kernel/swiglu.hpp>`: per token, per
/// visible position in order, the expert's activations, then its outputs accumulated with the
/// gate weight. `wisp::cuda::reference_fused_moe` computes the same rules with one thread block
/// per token and gives the same bits; the tests check the one against the other.
/// @code
/// wisp::reference_fused_moe kernel({.hidden = 64, .intermediate = 32});
/// auto r = pager.prepare(layer, ids, tokens, k);
/// store.apply(r.copy_plan);                         // slots now hold the experts' rows
/// kernel(wisp::basic_fused_moe_args<wisp::bf16>{hidden, ids, weights, slots, r.expert_map, out,
///                                               tokens, k, 64});
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/core/topk.hpp>
#include <wisp/kernel/bf16.hpp>
#include <wisp/kernel/fused_moe.hpp>
#include <wisp/kernel/swiglu.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace wisp {

/// @brief Checks that `a` suits a fused MoE over SwiGLU experts of `shape` (used by every wisp
/// kernel over them): `check_fused_moe_args`, `hidden_dim == shape.hidden`, and expert rows of at
/// least `shape.row_bytes()` bytes, 2-byte aligned. O(1).
/// @throws wisp::logic_error naming the first bad value, prefixed by `where`.
template <class Activation, topk_id Id>
void check_swiglu_moe_args(const char* where, const basic_fused_moe_args<Activation, Id>& a,
                           const swiglu_shape& shape) {
  shape.validate();
  check_fused_moe_args(a);
  WISP_EXPECTS(a.hidden_dim == shape.hidden, where, ": hidden_dim ", a.hidden_dim,
               " but the experts' hidden size is ", shape.hidden);
  WISP_EXPECTS(a.experts.rows == 0 ||
                   (a.experts.row_stride >= shape.row_bytes() &&
                    reinterpret_cast<std::uintptr_t>(a.experts.base) % alignof(bf16) == 0 &&
                    a.experts.row_stride % alignof(bf16) == 0),
               where, ": expert rows of ", a.experts.row_stride, " bytes must hold ",
               shape.row_bytes(), " bytes and be 2-byte aligned");
}

/// @brief Host reference fused MoE over SwiGLU bf16 expert rows (see the file comment).
///
/// Owns its scratch (sized at construction: no allocation per call). O(tokens x k x H x I) per
/// call. Not thread-safe (one object per thread).
class reference_fused_moe {
 public:
  /// @throws wisp::logic_error on an invalid shape; std::bad_alloc.
  explicit reference_fused_moe(swiglu_shape shape) : shape_(shape) {
    shape_.validate();
    x_.resize(static_cast<std::size_t>(shape_.hidden));
    acc_.resize(static_cast<std::size_t>(shape_.hidden));
    act_.resize(static_cast<std::size_t>(shape_.intermediate));
  }

  /// @brief Overwrites `a.out` as the `fused_moe_kernel` contract says.
  /// @throws wisp::logic_error (nothing written) if `check_swiglu_moe_args` fails, or a position
  ///   routes to an id outside `[0, expert_map.size())` or
  ///   through a map entry that is neither -1 nor a row of `experts`.
  template <class Activation, topk_id Id>
  void operator()(const basic_fused_moe_args<Activation, Id>& a) {
    check(a);
    const std::size_t h = x_.size();
    const auto k = static_cast<std::size_t>(a.top_k);
    for (std::size_t t = 0; t < static_cast<std::size_t>(a.tokens); ++t) {
      for (std::size_t i = 0; i < h; ++i) {
        x_[i] = to_float(a.hidden[t * h + i]);
        acc_[i] = 0.0f;
      }
      for (std::size_t pos = t * k; pos < (t + 1) * k; ++pos) {
        const std::int32_t row =
            visible_row(a.expert_map.data(), a.expert_map.size(), a.experts.rows, a.topk_ids[pos]);
        if (row < 0) {
          continue;
        }
        const auto* w = reinterpret_cast<const bf16*>(a.experts.row(static_cast<std::size_t>(row)));
        for (std::int32_t i = 0; i < shape_.intermediate; ++i) {
          act_[static_cast<std::size_t>(i)] = swiglu_activation(w, x_.data(), shape_, i);
        }
        const float weight = a.topk_weights[pos];
        for (std::int32_t o = 0; o < shape_.hidden; ++o) {
          float& acc = acc_[static_cast<std::size_t>(o)];
          acc = fma_rn(weight, swiglu_output(w, act_.data(), shape_, o), acc);
        }
      }
      for (std::size_t i = 0; i < h; ++i) {
        a.out[t * h + i] = activation_from_float<Activation>(acc_[i]);
      }
    }
  }

  [[nodiscard]] const swiglu_shape& shape() const noexcept { return shape_; }

 private:
  template <class Activation, topk_id Id>
  void check(const basic_fused_moe_args<Activation, Id>& a) const {
    check_swiglu_moe_args("reference_fused_moe", a, shape_);
    for (std::size_t i = 0; i < a.topk_ids.size(); ++i) {
      const std::int64_t id = a.topk_ids[i];
      WISP_EXPECTS(id >= 0 && static_cast<std::uint64_t>(id) < a.expert_map.size(),
                   "reference_fused_moe: topk_ids[", i, "] = ", id,
                   " is outside the expert map [0, ", a.expert_map.size(), ")");
      const std::int32_t row = a.expert_map[static_cast<std::size_t>(id)];
      WISP_EXPECTS(row == -1 || (row >= 0 && static_cast<std::size_t>(row) < a.experts.rows),
                   "reference_fused_moe: expert_map[", id, "] = ", row,
                   " is neither -1 nor a row of the ", a.experts.rows, "-row expert tensor");
    }
  }

  swiglu_shape shape_;
  std::vector<float> x_;    // the token's input, as floats
  std::vector<float> acc_;  // the token's output sum
  std::vector<float> act_;  // one expert's activations
};
static_assert(fused_moe_kernel<reference_fused_moe>);
static_assert(fused_moe_kernel<reference_fused_moe, basic_fused_moe_args<bf16>>);

}  // namespace wisp
