// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Reuse distances of (layer, expert) accesses in the global or the per-layer scope.
///
/// *Global*: one LRU stack over the keys `layer * experts + expert`. *Per-layer*: one stack per
/// layer over its expert ids; the histogram is the sum of the layers' histograms, so its miss
/// curve at capacity `c` is the total misses when every layer has `c` slots.
///
/// *Granularity*: `access_call` measures a layer's request (its top-k experts) as one call whose
/// keys cannot evict each other, as wisp's pager and `wisp sim` run it; `access` measures every
/// expert access on its own (the textbook LRU of Mattson et al.). See `reuse_granularity`.
/// @code
/// wisp::scoped_reuse_counter counter{wisp::cache_scope::per_layer, 26, 64};
/// const std::uint32_t experts[] = {17, 3};
/// counter.access_call(0, experts);   // layer 0 asks for experts 17 and 3
/// wisp::miss_curve curve{counter.histogram()};
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/enum_names.hpp>
#include <wisp/core/error.hpp>
#include <wisp/reuse/histogram.hpp>
#include <wisp/reuse/reuse_distance.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace wisp {

/// @brief How the accesses of one layer's request are measured.
///
/// `call` (the default everywhere): the request's `k` experts are one call, each looked up in the
/// LRU stack as it was before the call; the curve is then exactly the miss count of a cache that
/// protects a call's experts from each other (wisp's `pager`, `slot_cache::access_call`,
/// `wisp sim --policy lru`) at every capacity of at least one call. `access`: every expert access
/// on its own (plain LRU), which may evict an expert the same request asks for a moment later and
/// so over-counts misses (on the ESFT trace with 8 slots per layer: 939,182 against 883,712).
enum class reuse_granularity : std::uint8_t {
  call,    ///< a (step, layer) request at a time, as the pager serves it
  access,  ///< one expert access at a time, textbook LRU
};

/// The granularities' names on the command line and in Python: "call", "access" (`to_string`,
/// `from_string`).
template <>
struct enum_names<reuse_granularity> {
  static constexpr std::array<enum_name<reuse_granularity>, 2> values{
      {{reuse_granularity::call, "call"}, {reuse_granularity::access, "access"}}};
};

/// @deprecated The granularity named `name`: `from_string<reuse_granularity>(name)`.
[[deprecated("use wisp::from_string<wisp::reuse_granularity>")]] [[nodiscard]] constexpr std::
    optional<reuse_granularity>
    parse_granularity(std::string_view name) noexcept {
  return from_string<reuse_granularity>(name);
}

/// @brief Exact reuse-distance profiling of a (layer, expert) stream in one scope.
///
/// Complexity: `access` and `access_call` as the `reuse_distance_counter` ones, no allocation
/// (after the first call of the largest size). Memory O(layers * experts). Thread-safety: none.
class scoped_reuse_counter {
 public:
  using distance_type = reuse_distance_counter::distance_type;

  /// @throws wisp::logic_error if `layers` or `experts` is 0, or the scope is `stream`.
  scoped_reuse_counter(cache_scope scope, std::uint32_t layers, std::uint32_t experts)
      : layers_(layers), experts_(experts) {
    WISP_EXPECTS(layers > 0 && experts > 0, "a scoped counter needs layers and experts, got ",
                 layers, " x ", experts);
    WISP_EXPECTS(scope != cache_scope::stream,
                 "a scoped counter is global or per-layer; use reuse_distance_counter for a plain "
                 "stream");
    if (scope == cache_scope::global) {
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

  /// @brief Records one call of `layer` for `experts` (see `reuse_distance_counter::access_call`)
  /// and writes each expert's distance in this scope to `out`.
  /// @throws wisp::logic_error if `layer` or an expert is out of range or `out` is too small
  ///   (nothing recorded then).
  void access_call(std::uint32_t layer, std::span<const std::uint32_t> experts,
                   std::span<distance_type> out) {
    WISP_EXPECTS(layer < layers_, "call of layer ", layer, " outside ", layers_, " layers");
    for (const std::uint32_t e : experts) {
      WISP_EXPECTS(e < experts_, "call of layer ", layer, ": expert ", e, " outside ", experts_,
                   " experts");
    }
    if (counters_.size() == 1) {
      keys_.resize(experts.size());
      for (std::size_t i = 0; i < experts.size(); ++i) {
        keys_[i] = layer * experts_ + experts[i];
      }
      counters_[0].access_call(keys_, out);
    } else {
      counters_[layer].access_call(experts, out);
    }
    for (std::size_t i = 0; i < experts.size(); ++i) {
      histogram_.record(out[i]);
    }
  }

  /// @brief `access_call` that keeps the distances to itself (they go into `histogram()`).
  void access_call(std::uint32_t layer, std::span<const std::uint32_t> experts) {
    distances_.resize(experts.size());
    access_call(layer, experts, distances_);
  }

  [[nodiscard]] cache_scope scope() const noexcept { return histogram_.shape().scope; }
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
  std::vector<std::uint32_t> keys_;       // a global call's keys
  std::vector<distance_type> distances_;  // distances of `access_call` without an output
};

}  // namespace wisp
