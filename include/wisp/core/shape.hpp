// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `wisp::moe_shape`: the routing dimensions of a Mixture-of-Experts model (MoE layers,
/// routed experts per layer, experts chosen per token), the one shape type every area takes.
///
/// Traces (`routing_trace`), the simulator, the predictors and the kernels take a `moe_shape`;
/// `pager_config::shape()`, `model_spec::shape()` and a `key_layout` aggregate
/// (`key_layout{scope, s.layers, s.experts}`) convert the other configuration types to and from it.
/// @code
/// constexpr wisp::moe_shape deepseek_v2_lite{.layers = 26, .experts = 64, .top_k = 6};
/// deepseek_v2_lite.validate();  // throws wisp::logic_error naming a bad field
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>

#include <cstddef>
#include <cstdint>
#include <ostream>

namespace wisp {

/// @brief The routing dimensions of an MoE model. A valid shape has `layers > 0`,
/// `0 < experts <= max_experts` and `0 < top_k <= experts` (see `validate`).
///
/// Literal, trivially copyable value type.
struct moe_shape {
  std::int32_t layers = 1;   ///< Number of MoE layers (dense layers are not counted).
  std::int32_t experts = 1;  ///< Routed experts per layer; ids are in `[0, experts)`.
  std::int32_t top_k = 1;    ///< Experts chosen per token and layer.

  /// Largest supported number of experts (trace ids are stored in at most 16 bits).
  static constexpr std::int32_t max_experts = 65536;

  /// @brief Throws `wisp::logic_error` naming the bad field unless the shape is valid. O(1).
  void validate() const {
    WISP_EXPECTS(layers > 0, "MoE shape needs layers > 0, got ", layers);
    WISP_EXPECTS(experts > 0 && experts <= max_experts,
                 "MoE shape needs 0 < experts <= ", max_experts, ", got ", experts);
    WISP_EXPECTS(top_k > 0 && top_k <= experts, "MoE shape needs 0 < top_k <= experts (", experts,
                 "), got ", top_k);
  }

  /// Expert ids per forward step: `layers * top_k`.
  [[nodiscard]] constexpr std::size_t ids_per_step() const noexcept {
    return static_cast<std::size_t>(layers) * static_cast<std::size_t>(top_k);
  }

  friend constexpr bool operator==(const moe_shape&, const moe_shape&) = default;

  /// Prints the shape as "26 layers x 64 experts, top-6".
  friend std::ostream& operator<<(std::ostream& out, const moe_shape& s) {
    return out << s.layers << " layers x " << s.experts << " experts, top-" << s.top_k;
  }
};

}  // namespace wisp
