// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Internal: exponential decay over forward passes as a growing weight, shared by the
/// decayed-frequency policies.
///
/// An event at pass `s` adds `weight() = 2^((s - base) / half_life)`; two sums of such weights
/// compare as the decayed counts `sum 2^(-(now - s_i) / half_life)` at any `now`, and the order
/// never changes as time passes. The weight is kept below 2^512 by moving `base`: `advance`
/// then returns the power of two by which the owner divides every stored sum (exact).
#pragma once

#include <wisp/core/error.hpp>

#include <cmath>
#include <cstdint>

namespace wisp::detail {

class decay_clock {
 public:
  /// @throws wisp::logic_error unless `half_life` is finite and > 0 (`what` names the owner).
  decay_clock(double half_life, const char* what) : half_life_(half_life) {
    WISP_EXPECTS(std::isfinite(half_life) && half_life > 0.0, what,
                 ": half_life must be finite and > 0 passes, got ", half_life);
  }

  void reset() noexcept {
    started_ = false;
    base_ = 0.0;
    weight_ = 1.0;
  }
  /// True when the clock already stands at pass `step`.
  [[nodiscard]] bool at(std::uint32_t step) const noexcept { return started_ && step == step_; }
  /// Moves to pass `step` (passes never go back). Returns `e >= 0`: every stored sum must be
  /// multiplied by `2^-e` (0: nothing to do).
  [[nodiscard]] int advance(std::uint32_t step) noexcept {
    if (!started_) {
      started_ = true;
      base_ = step;
    }
    step_ = step;
    int shift = 0;
    const double exponent = (static_cast<double>(step) - base_) / half_life_;
    if (exponent > 512.0) {
      shift = static_cast<int>(std::floor(exponent));
      base_ += shift * half_life_;
    }
    weight_ = std::exp2((static_cast<double>(step) - base_) / half_life_);
    return shift;
  }
  /// The weight of an event at the current pass.
  [[nodiscard]] double weight() const noexcept { return weight_; }
  /// The factor turning a stored sum into its decayed count at pass `step`.
  [[nodiscard]] double to_count(std::uint32_t step) const noexcept {
    return std::exp2(-(static_cast<double>(step) - base_) / half_life_);
  }
  [[nodiscard]] double half_life() const noexcept { return half_life_; }

 private:
  double half_life_;
  double base_ = 0.0;    // the pass stored sums are scaled to
  double weight_ = 1.0;  // 2^((step_ - base_) / half_life_)
  std::uint32_t step_ = 0;
  bool started_ = false;
};

}  // namespace wisp::detail
