// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief An exponentially decayed, binned reuse-distance histogram for online controllers.
///
/// The controller that splits memory between expert slots and KV blocks needs the *current*
/// marginal value of one more slot, not the all-time one. Accesses are gathered into bursts (e.g.
/// one per scheduler step); closing a burst applies
///
///     H <- decay * H + burst
///
/// to every bin, so a burst `j` steps old weighs `decay^j`. Cold (compulsory) accesses are kept
/// apart: no capacity removes them, so the *warm* curve excludes them.
///
/// Bins: edges `e_0 = 1 < e_1 < ... < e_m`; bin `i` holds distances in `[e_i, e_{i+1})`, and an
/// overflow bin holds `d >= e_m`. Within a bin the mass is taken as spread evenly over its
/// distances, so `hits(c) = sum_i mass_i * clamp((c - e_i + 1) / (e_{i+1} - e_i), 0, 1)` for
/// `c < e_m` (exact with unit bins), and `marginal(c) = hits(c + 1) - hits(c)` is the hit mass
/// gained by the `(c+1)`-th slot.
/// @code
/// wisp::decayed_histogram h{wisp::decayed_histogram::unit_edges(64), 0.9};
/// h.record(3); h.record(wisp::reuse_distance_counter::cold);
/// h.end_burst();
/// double gain = h.marginal(8);   // decayed hits gained going from 8 to 9 slots
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/reuse/histogram.hpp>
#include <wisp/reuse/reuse_distance.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace wisp {

/// @brief Binned reuse-distance histogram with per-burst exponential decay.
///
/// Complexity: `record` O(log bins), `end_burst` O(bins), `hits` O(bins), `marginals` O(bins +
/// max capacity). No allocation after construction. Thread-safety: none.
class decayed_histogram {
 public:
  using distance_type = reuse_distance_counter::distance_type;

  /// @param edges strictly increasing bin edges starting at 1 (at least one edge).
  /// @param decay weight kept per burst, in [0, 1]: 0 keeps only the last burst, 1 never forgets.
  /// @throws wisp::logic_error on invalid edges or decay.
  decayed_histogram(std::vector<distance_type> edges, double decay)
      : edges_(std::move(edges)), decay_(decay) {
    WISP_EXPECTS(!edges_.empty() && edges_.front() == 1, "bin edges must start at distance 1");
    WISP_EXPECTS(edges_.back() != reuse_distance_counter::cold,
                 "the cold sentinel cannot be a bin edge");
    for (std::size_t i = 1; i < edges_.size(); ++i) {
      WISP_EXPECTS(edges_[i - 1] < edges_[i], "bin edges must increase strictly: edge ", i - 1,
                   " is ", edges_[i - 1], ", edge ", i, " is ", edges_[i]);
    }
    WISP_EXPECTS(decay >= 0.0 && decay <= 1.0, "decay ", decay, " is outside [0, 1]");
    mass_.assign(edges_.size(), 0.0);  // the last one is the overflow bin
    pending_.assign(edges_.size(), 0.0);
  }

  /// @brief Edges 1, 2, ..., max_distance + 1: one bin per distance up to `max_distance` (exact).
  [[nodiscard]] static std::vector<distance_type> unit_edges(distance_type max_distance) {
    std::vector<distance_type> edges(std::size_t{max_distance} + 1);
    for (std::size_t i = 0; i < edges.size(); ++i) {
      edges[i] = static_cast<distance_type>(i + 1);
    }
    return edges;
  }

  /// @brief Edges 1, 2, 4, ... while `<= max_distance`, then `max_distance + 1`.
  [[nodiscard]] static std::vector<distance_type> power_of_two_edges(distance_type max_distance) {
    std::vector<distance_type> edges;
    for (std::uint64_t e = 1; e <= max_distance; e *= 2) {
      edges.push_back(static_cast<distance_type>(e));
    }
    edges.push_back(max_distance + 1);
    return edges;
  }

  /// @brief Adds `weight` accesses of `distance` to the open burst (`cold` counts as cold).
  /// @throws wisp::logic_error if `distance` is 0.
  void record(distance_type distance, double weight = 1.0) {
    if (distance == reuse_distance_counter::cold) {
      pending_cold_ += weight;
      return;
    }
    WISP_EXPECTS(distance > 0, "a stack distance is at least 1");
    pending_[bin_of(distance)] += weight;
  }

  /// @brief Closes the open burst: every bin becomes `decay * bin + burst`.
  void end_burst() noexcept {
    for (std::size_t i = 0; i < mass_.size(); ++i) {
      mass_[i] = decay_ * mass_[i] + pending_[i];
      pending_[i] = 0.0;
    }
    cold_ = decay_ * cold_ + pending_cold_;
    pending_cold_ = 0.0;
    ++bursts_;
  }

  /// @brief Records every count of `burst` and closes the burst.
  void add_burst(const reuse_histogram& burst) {
    for (distance_type d = 1; d <= burst.max_distance(); ++d) {
      if (const auto n = burst.count(d); n != 0) {
        record(d, static_cast<double>(n));
      }
    }
    record(reuse_distance_counter::cold, static_cast<double>(burst.cold()));
    end_burst();
  }

  [[nodiscard]] double decay() const noexcept { return decay_; }
  [[nodiscard]] std::span<const distance_type> edges() const noexcept { return edges_; }
  /// Decayed mass of bin `i` (the last index is the overflow bin `d >= edges().back()`).
  [[nodiscard]] std::span<const double> bins() const noexcept { return mass_; }
  /// Decayed cold accesses (excluded from the warm curve).
  [[nodiscard]] double cold() const noexcept { return cold_; }
  /// Decayed warm accesses: all bins, the overflow bin included.
  [[nodiscard]] double warm_total() const noexcept {
    double total = 0.0;
    for (const double m : mass_) {
      total += m;
    }
    return total;
  }
  /// Bursts closed so far.
  [[nodiscard]] std::uint64_t bursts() const noexcept { return bursts_; }
  /// Largest capacity the bins resolve: `edges().back() - 1`. Larger capacities are clamped.
  [[nodiscard]] distance_type max_capacity() const noexcept { return edges_.back() - 1; }

  /// @brief Decayed warm hits of an LRU cache of `capacity` slots (clamped to `max_capacity()`).
  [[nodiscard]] double hits(std::uint64_t capacity) const noexcept {
    const std::uint64_t c = std::min<std::uint64_t>(capacity, max_capacity());
    double total = 0.0;
    for (std::size_t i = 0; i + 1 < edges_.size(); ++i) {
      const std::uint64_t lo = edges_[i];
      const std::uint64_t hi = edges_[i + 1];  // exclusive
      if (c < lo) {
        break;
      }
      total += c + 1 >= hi
                   ? mass_[i]
                   : mass_[i] * static_cast<double>(c + 1 - lo) / static_cast<double>(hi - lo);
    }
    return total;
  }

  /// @brief Warm miss ratio `1 - hits(c) / warm_total()` (0 when there is no warm mass).
  [[nodiscard]] double warm_miss_ratio(std::uint64_t capacity) const noexcept {
    const double total = warm_total();
    return total > 0.0 ? 1.0 - hits(capacity) / total : 0.0;
  }

  /// @brief Decayed hits gained by the `(c+1)`-th slot: `hits(c + 1) - hits(c)` (0 from
  /// `max_capacity()` on).
  [[nodiscard]] double marginal(std::uint64_t capacity) const noexcept {
    return capacity >= max_capacity() ? 0.0 : hits(capacity + 1) - hits(capacity);
  }

  /// @brief `marginal(c)` for c = 0..max_capacity()-1 in one O(bins + max capacity) pass.
  [[nodiscard]] std::vector<double> marginals() const {
    std::vector<double> out(max_capacity(), 0.0);
    for (std::size_t i = 0; i + 1 < edges_.size(); ++i) {
      const double per_slot = mass_[i] / static_cast<double>(edges_[i + 1] - edges_[i]);
      for (std::uint64_t d = edges_[i]; d < edges_[i + 1]; ++d) {
        out[d - 1] = per_slot;  // slot d (going from d-1 to d slots) catches distance d
      }
    }
    return out;
  }

 private:
  [[nodiscard]] std::size_t bin_of(distance_type distance) const noexcept {
    // Last edge <= distance; the overflow bin is the last one.
    const auto it = std::upper_bound(edges_.begin(), edges_.end(), distance);
    return static_cast<std::size_t>(it - edges_.begin()) - 1;
  }

  std::vector<distance_type> edges_;
  double decay_;
  std::vector<double> mass_;
  std::vector<double> pending_;
  double cold_ = 0.0;
  double pending_cold_ = 0.0;
  std::uint64_t bursts_ = 0;
};

}  // namespace wisp
