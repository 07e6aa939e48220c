// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Baseline routing predictors in the `routing_predictor` interface:
/// `frequency_predictor` (each layer's most frequent experts) and `previous_token_predictor`
/// (the experts the previous pass routed at the same layer).
///
/// Neither looks at the layers already observed in the current pass; they are what the
/// co-activation predictor has to beat.
/// @code
/// wisp::frequency_predictor freq({.layers = 26, .experts = 64, .top_k = 6});
/// freq.score(pass, /*target=*/3, scores);   // scores[j] = share of passes routing j at layer 3
/// @endcode
#pragma once

#include <wisp/core/error.hpp>
#include <wisp/predict/routing_predictor.hpp>
#include <wisp/trace/routing_trace.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace wisp {
namespace detail {

inline void check_baseline_query(const char* where, const moe_shape& shape,
                                 const routing_pass& pass, std::int32_t target,
                                 std::span<float> scores) {
  WISP_EXPECTS(pass.shape() == shape, where, ": pass shape (", pass.shape(),
               ") differs from the predictor shape (", shape, ")");
  WISP_EXPECTS(target >= pass.observed() && target < shape.layers, where, ": target layer ", target,
               " is outside [observed = ", pass.observed(), ", layers = ", shape.layers, ")");
  WISP_EXPECTS(scores.size() == static_cast<std::size_t>(shape.experts), where, ": ", scores.size(),
               " scores for ", shape.experts, " experts");
}

inline void check_learned_pass(const char* where, const moe_shape& shape,
                               const routing_pass& pass) {
  WISP_EXPECTS(pass.shape() == shape, where, ": pass shape (", pass.shape(),
               ") differs from the predictor shape (", shape, ")");
  WISP_EXPECTS(pass.complete(), where, ": only ", pass.observed(), " of ", shape.layers,
               " layers observed; learn takes complete passes");
}

}  // namespace detail

/// @brief Per-layer frequency: `score(j) = passes routing j at the target layer / passes`.
///
/// Memory `layers x experts` counts. `score`: O(experts); `learn`: O(layers x top_k). No
/// allocation after construction. Thread safety: const calls may run concurrently.
class frequency_predictor {
 public:
  static constexpr std::string_view name = "frequency";

  /// @throws wisp::logic_error on an invalid shape.
  explicit frequency_predictor(const moe_shape& shape) : shape_(shape) {
    shape_.validate();
    counts_.assign(
        static_cast<std::size_t>(shape_.layers) * static_cast<std::size_t>(shape_.experts), 0);
  }

  /// @throws wisp::logic_error on a shape mismatch, a target outside `[observed, layers)` or a
  ///   wrong `scores` size.
  void score(const routing_pass& pass, std::int32_t target, std::span<float> scores) const {
    detail::check_baseline_query("frequency_predictor::score", shape_, pass, target, scores);
    const auto experts = static_cast<std::size_t>(shape_.experts);
    const std::uint64_t* row = counts_.data() + static_cast<std::size_t>(target) * experts;
    const float inverse = passes_ == 0 ? 0.0f : 1.0f / static_cast<float>(passes_);
    for (std::size_t j = 0; j < experts; ++j) {
      scores[j] = static_cast<float>(row[j]) * inverse;
    }
  }

  /// @throws wisp::logic_error on a shape mismatch or an incomplete pass.
  void learn(const routing_pass& pass) {
    detail::check_learned_pass("frequency_predictor::learn", shape_, pass);
    const auto experts = static_cast<std::size_t>(shape_.experts);
    for (std::int32_t l = 0; l < shape_.layers; ++l) {
      for (const std::int32_t j : pass.experts(l)) {
        ++counts_[static_cast<std::size_t>(l) * experts + static_cast<std::size_t>(j)];
      }
    }
    ++passes_;
  }

  [[nodiscard]] std::uint64_t passes() const noexcept { return passes_; }

 private:
  moe_shape shape_;
  std::vector<std::uint64_t> counts_;  // [layers x experts]
  std::uint64_t passes_ = 0;
};
static_assert(routing_predictor<frequency_predictor>);

/// @brief The previous token: `score(j) = 1` if the last learned pass routed `j` at the target
/// layer, else 0 (all 0 before the first pass). Ties among the top_k go to the smaller id.
///
/// Memory `layers x top_k` ids. `score`: O(experts); `learn`: O(layers x top_k). No allocation
/// after construction. Thread safety: const calls may run concurrently.
class previous_token_predictor {
 public:
  static constexpr std::string_view name = "previous-token";

  /// @throws wisp::logic_error on an invalid shape.
  explicit previous_token_predictor(const moe_shape& shape) : last_(shape) {}

  /// @throws wisp::logic_error on a shape mismatch, a target outside `[observed, layers)` or a
  ///   wrong `scores` size.
  void score(const routing_pass& pass, std::int32_t target, std::span<float> scores) const {
    detail::check_baseline_query("previous_token_predictor::score", last_.shape(), pass, target,
                                 scores);
    std::fill(scores.begin(), scores.end(), 0.0f);
    if (last_.complete()) {
      for (const std::int32_t j : last_.experts(target)) {
        scores[static_cast<std::size_t>(j)] = 1.0f;
      }
    }
  }

  /// @throws wisp::logic_error on a shape mismatch or an incomplete pass.
  void learn(const routing_pass& pass) {
    detail::check_learned_pass("previous_token_predictor::learn", last_.shape(), pass);
    last_.clear();
    for (std::int32_t l = 0; l < pass.shape().layers; ++l) {
      last_.observe(l, pass.experts(l));
    }
  }

 private:
  routing_pass last_;
};
static_assert(routing_predictor<previous_token_predictor>);

}  // namespace wisp
