// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Reuse distances of (layer, expert) accesses in the global or the per-layer scope.
///
/// *Global*: one LRU stack over the keys `layer * experts + expert`. *Per-layer*: one stack per
/// layer over its expert ids; the histogram is the sum of the layers' histograms, so its miss
/// curve at capacity `c` is the total misses when every layer has `c` slots.
/// @code
/// wisp::reuse::scoped_reuse_counter counter{wisp::reuse::reuse_scope::per_layer, 26, 64};
/// counter.access(0, 17);
/// wisp::reuse::miss_curve curve{counter.histogram()};
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/reuse/histogram.hpp>
#include <wisp/reuse/reuse_distance.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace wisp::reuse {

/// @brief Exact reuse-distance profiling of a (layer, expert) stream in one scope.
///
/// Complexity: `access` as `reuse_distance_counter::access`, no allocation. Memory
/// O(layers * experts). Thread-safety: none.
class scoped_reuse_counter {
 public:
  using distance_type = reuse_distance_counter::distance_type;

  /// @throws wisp::logic_error if `layers` or `experts` is 0, or the scope is `stream`.
  scoped_reuse_counter(reuse_scope scope, std::uint32_t layers, std::uint32_t experts)
      : layers_(layers), experts_(experts) {
    WISP_EXPECTS(layers > 0 && experts > 0, "a scoped counter needs layers and experts, got ",
                 layers, " x ", experts);
    WISP_EXPECTS(scope != reuse_scope::stream,
                 "a scoped counter is global or per-layer; use reuse_distance_counter for a plain "
                 "stream");
    if (scope == reuse_scope::global) {
      counters_.emplace_back(std::size_t{layers} * experts);
      histogram_ = reuse_histogram{{scope, 1, layers * experts}};
    } else {
      counters_.reserve(layers);
      for (std::uint32_t l = 0; l < layers; ++l) {
        counters_.emplace_back(experts);
      }
      histogram_ = reuse_histogram{{scope, layers, experts}};
    }
  }

  /// @brief Records one access and returns its distance in this scope (`cold` on first sight).
  /// @throws wisp::logic_error if `layer` or `expert` is out of range (nothing recorded then).
  distance_type access(std::uint32_t layer, std::uint32_t expert) {
    WISP_EXPECTS(layer < layers_ && expert < experts_, "access (layer ", layer, ", expert ", expert,
                 ") outside ", layers_, " layers x ", experts_, " experts");
    const distance_type d = counters_.size() == 1 ? counters_[0].access(layer * experts_ + expert)
                                                  : counters_[layer].access(expert);
    histogram_.record(d);
    return d;
  }

  [[nodiscard]] reuse_scope scope() const noexcept { return histogram_.shape().scope; }
  /// Histogram of every access so far (summed over layers in the per-layer scope).
  [[nodiscard]] const reuse_histogram& histogram() const noexcept { return histogram_; }
  /// Distinct keys seen by the largest single cache (global: all keys; per-layer: the busiest
  /// layer). The curve reaches its cold floor at or below this capacity.
  [[nodiscard]] std::size_t distinct_per_cache() const noexcept {
    std::size_t most = 0;
    for (const auto& c : counters_) {
      most = std::max(most, c.distinct());
    }
    return most;
  }
  /// Distinct (layer, expert) keys seen, over all caches (equals `histogram().cold()`).
  [[nodiscard]] std::size_t distinct_total() const noexcept {
    std::size_t total = 0;
    for (const auto& c : counters_) {
      total += c.distinct();
    }
    return total;
  }

 private:
  std::uint32_t layers_;
  std::uint32_t experts_;
  std::vector<reuse_distance_counter> counters_;
  reuse_histogram histogram_;
};

}  // namespace wisp::reuse
