// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Per-user right-sizing (WiSP §4, §5.4): from a user's co-activation table, the smallest
/// per-layer expert cap that keeps that user's miss ratio under a target, without a sweep over
/// caps on the device.
///
/// The table's marginals are the user's routing frequencies: `p_l(j) = marginal(l, j) / passes` is
/// the probability that a pass routes expert `j` at layer `l` (a layer's probabilities sum to
/// top_k). Two models turn them into a miss ratio at a per-layer cap `c`:
///
/// - `right_size_model::lru` (default): an LRU cache under the independent reference model, by
///   Che's approximation (Che, Tung and Wang, "Hierarchical Web caching systems", IEEE JSAC 2002;
///   accurate for LRU per Fricker, Robert and Roberts, ITC 2012). The characteristic time `T`
///   (in passes) solves `sum_j (1 - exp(-p_j T)) = c`, and
///   `miss_l(c) = 1 - sum_j p_j (1 - exp(-p_j T)) / top_k`;
/// - `right_size_model::static_top`: a cache pinning the `c` most frequent experts misses on the
///   rest of the mass, `miss_l(c) = 1 - (sum of the c largest p_l(j)) / top_k` (the support of the
///   converged working set at that coverage; optimistic for an online policy, which must first
///   find the set).
///
/// Layer `l`'s cap is the smallest `c` in `[top_k, experts]` with `miss_l(c) <= target`. Both are
/// estimates from frequencies alone; `wisp predict --right-size` replays each user's later traffic
/// at the caps chosen and reports the measured miss ratio beside the target.
///
/// The result feeds the pager (`pager_config::layer_capacities = caps.layer_caps`) and the
/// allocator (`make_split(model, budget, caps.max_cap())` reserves enough for every layer;
/// `caps.slots()` is what the pager actually holds, the memory a per-user cap frees against a
/// global one).
/// @code
/// wisp::right_size_result caps = wisp::right_size(tables.table(alice), /*target=*/0.10);
/// cfg.layer_capacities = caps.layer_caps;
/// @endcode
#pragma once

#include <wisp/core/enum_names.hpp>
#include <wisp/core/error.hpp>
#include <wisp/predict/coactivation.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <numeric>
#include <vector>

namespace wisp {

/// How `right_size` turns routing frequencies into a miss ratio (see the file description).
enum class right_size_model : std::uint8_t {
  lru,         ///< LRU under the independent reference model (Che's approximation)
  static_top,  ///< the `c` most frequent experts pinned
};
/// "lru", "static" (as `wisp predict --right-size-model` spells them; `to_string`,
/// `from_string`).
template <>
struct enum_names<right_size_model> {
  static constexpr std::array<enum_name<right_size_model>, 2> values{
      {{right_size_model::lru, "lru"}, {right_size_model::static_top, "static"}}};
};

namespace detail {

/// Che's approximation: the LRU miss ratio of a cache of `capacity` slots over keys requested
/// with per-call probabilities `p` (summing to `top_k`). Bisection on the characteristic time.
[[nodiscard]] inline double che_lru_miss_ratio(const std::vector<double>& p, std::int32_t capacity,
                                               std::int32_t top_k) {
  std::int32_t positive = 0;
  for (const double x : p) {
    positive += x > 0.0 ? 1 : 0;
  }
  if (capacity >= positive) {
    return 0.0;  // every key ever requested fits (cold misses are not modelled)
  }
  const auto occupancy = [&p](double t) {
    double sum = 0.0;
    for (const double x : p) {
      sum += -std::expm1(-x * t);
    }
    return sum;
  };
  double low = 0.0;
  double high = 1.0;
  while (occupancy(high) < capacity) {
    high *= 2.0;
  }
  for (int i = 0; i < 100 && high - low > 1e-12 * high; ++i) {
    const double mid = 0.5 * (low + high);
    (occupancy(mid) < capacity ? low : high) = mid;
  }
  double hits = 0.0;
  for (const double x : p) {
    hits += x * -std::expm1(-x * low);
  }
  return std::max(0.0, 1.0 - hits / top_k);
}

}  // namespace detail

/// @brief What `right_size` chose.
struct right_size_result {
  std::vector<std::int32_t> layer_caps;      ///< per-layer cap, each in [top_k, experts]
  std::vector<double> predicted_miss_ratio;  ///< miss_l(cap_l) per layer (0 with no data)

  /// The largest layer cap: the uniform per-layer cap an allocator that takes one cap reserves.
  [[nodiscard]] std::int32_t max_cap() const noexcept {
    return layer_caps.empty() ? 0 : *std::max_element(layer_caps.begin(), layer_caps.end());
  }
  /// Slots over all layers (the expert memory of this user, in experts).
  [[nodiscard]] std::int64_t slots() const noexcept {
    return std::accumulate(layer_caps.begin(), layer_caps.end(), std::int64_t{0});
  }
};

/// @brief The smallest per-layer caps whose predicted miss ratio under `model` (see the file
/// description) is at most `target_miss_ratio`. A table that has learned nothing gets the full
/// cap (`experts`) on every layer. O(layers x experts^2) with the LRU model (a bisection per
/// cap), O(layers x experts log experts) with the static one; allocates the result.
/// @throws wisp::logic_error if `target_miss_ratio` is outside [0, 1].
[[nodiscard]] inline right_size_result right_size(const coactivation_predictor& table,
                                                  double target_miss_ratio,
                                                  right_size_model model = right_size_model::lru) {
  WISP_EXPECTS(target_miss_ratio >= 0.0 && target_miss_ratio <= 1.0,
               "right_size: target miss ratio must be in [0, 1], got ", target_miss_ratio);
  const moe_shape& shape = table.shape();
  right_size_result out;
  out.layer_caps.assign(static_cast<std::size_t>(shape.layers), shape.experts);
  out.predicted_miss_ratio.assign(static_cast<std::size_t>(shape.layers), 0.0);
  const double passes = table.passes();
  if (!(passes > 0.0)) {
    return out;
  }
  std::vector<double> p(static_cast<std::size_t>(shape.experts));
  for (std::int32_t l = 0; l < shape.layers; ++l) {
    for (std::int32_t j = 0; j < shape.experts; ++j) {
      p[static_cast<std::size_t>(j)] = table.marginal(l, j) / passes;
    }
    std::sort(p.begin(), p.end(), std::greater<>());
    double covered = 0.0;  // static model: the mass of the c most frequent experts
    for (std::int32_t c = 1; c <= shape.experts; ++c) {
      covered += p[static_cast<std::size_t>(c - 1)];
      if (c < shape.top_k) {
        continue;
      }
      const double miss = model == right_size_model::lru
                              ? detail::che_lru_miss_ratio(p, c, shape.top_k)
                              : std::max(0.0, 1.0 - covered / shape.top_k);
      if (miss <= target_miss_ratio + 1e-12 || c == shape.experts) {  // up to rounding
        out.layer_caps[static_cast<std::size_t>(l)] = c;
        out.predicted_miss_ratio[static_cast<std::size_t>(l)] = miss;
        break;
      }
    }
  }
  return out;
}

}  // namespace wisp
