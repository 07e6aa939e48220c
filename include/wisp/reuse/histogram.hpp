// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Reuse-distance histograms and the LRU miss curve they give for every capacity at once.
///
/// For LRU, an access with stack distance `d` hits in a cache of capacity `c` exactly when
/// `d <= c`. So `misses(c) = cold + #{accesses with d > c}`, and one histogram of distances gives
/// the whole curve by a suffix sum.
///
/// Scopes: a *global* histogram describes one cache over every (layer, expert) key. A *per-layer*
/// histogram is the sum of one histogram per layer (one cache per layer, keys = expert ids); its
/// curve at capacity `c` is the total miss count when every layer has `c` slots, because
/// `sum_l (cold_l + #{d_l > c}) = cold + #{d > c}` over the summed histogram.
/// @code
/// wisp::reuse_histogram h{{wisp::cache_scope::stream, 1, 64}};
/// wisp::reuse_distance_counter counter{64};
/// for (std::uint32_t key : stream) h.record(counter.access(key));
/// wisp::miss_curve curve{h};
/// double r = curve.miss_ratio(8);   // miss ratio of an 8-slot LRU cache
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/core/scope.hpp>
#include <wisp/reuse/reuse_distance.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <span>
#include <string_view>
#include <vector>

namespace wisp {

/// @brief The scope a histogram describes; the one scope type is `cache_scope` (core/scope.hpp).
using reuse_scope [[deprecated("use wisp::cache_scope")]] = cache_scope;

/// @deprecated The scope named `name`: `from_string<cache_scope>(name)`.
[[deprecated(
    "use wisp::from_string<wisp::cache_scope>")]] [[nodiscard]] constexpr std::optional<cache_scope>
parse_scope(std::string_view name) noexcept {
  return from_string<cache_scope>(name);
}

/// @brief What a histogram was measured over. Histograms merge only when their shapes are equal.
struct histogram_shape {
  cache_scope scope = cache_scope::stream;
  /// Number of independent caches whose histograms are summed (layers for `per_layer`, else 1).
  std::uint32_t partitions = 1;
  /// Keys per cache (experts for `per_layer`, layers * experts for `global`); bounds distances.
  std::uint32_t keys_per_partition = 0;

  friend constexpr bool operator==(const histogram_shape&, const histogram_shape&) = default;
};

/// @brief Counts of stack distances plus the count of cold (first-sight) accesses.
///
/// Complexity: `record` is O(1) (no allocation for distances up to `keys_per_partition`), the
/// queries O(1), `merge` O(max distance). Thread-safety: none.
class reuse_histogram {
 public:
  using distance_type = reuse_distance_counter::distance_type;

  reuse_histogram() = default;

  /// @throws wisp::logic_error if `shape.partitions` is 0.
  explicit reuse_histogram(histogram_shape shape) : shape_(shape) {
    WISP_EXPECTS(shape.partitions > 0, "a histogram needs at least one partition");
    counts_.assign(std::size_t{shape.keys_per_partition} + 1, 0);
  }

  /// @brief Adds `count` accesses of distance `distance`; `reuse_distance_counter::cold` counts
  /// as cold. @throws wisp::logic_error if `distance` is 0 or exceeds `keys_per_partition` (when
  /// that is non-zero).
  void add(distance_type distance, std::uint64_t count = 1) {
    if (distance == reuse_distance_counter::cold) {
      cold_ += count;
      return;
    }
    WISP_EXPECTS(distance > 0, "a stack distance is at least 1");
    WISP_EXPECTS(shape_.keys_per_partition == 0 || distance <= shape_.keys_per_partition,
                 "distance ", distance, " exceeds the ", shape_.keys_per_partition,
                 " keys of a partition");
    if (distance >= counts_.size()) [[unlikely]] {
      counts_.resize(std::size_t{distance} + 1, 0);
    }
    counts_[distance] += count;
    warm_ += count;
    max_distance_ = std::max(max_distance_, distance);
  }

  /// Same as `add(distance, 1)`: feed it the result of `reuse_distance_counter::access`.
  void record(distance_type distance) { add(distance, 1); }

  /// @brief Adds every count of `other` to this histogram (the histogram of the union of two
  /// *independent* streams or caches, e.g. two layers, two workers replaying different requests).
  /// It is not the histogram of two halves of one stream replayed back to back: distances across
  /// the split are not additive. @throws wisp::logic_error if the shapes differ (unchanged then).
  reuse_histogram& merge(const reuse_histogram& other) {
    WISP_EXPECTS(shape_ == other.shape_, "cannot merge histograms of different shapes (",
                 shape_.scope, " ", shape_.partitions, "x", shape_.keys_per_partition, " vs ",
                 other.shape_.scope, " ", other.shape_.partitions, "x",
                 other.shape_.keys_per_partition, ")");
    if (other.counts_.size() > counts_.size()) {
      counts_.resize(other.counts_.size(), 0);
    }
    for (std::size_t d = 1; d < other.counts_.size(); ++d) {
      counts_[d] += other.counts_[d];
    }
    cold_ += other.cold_;
    warm_ += other.warm_;
    max_distance_ = std::max(max_distance_, other.max_distance_);
    return *this;
  }

  [[nodiscard]] const histogram_shape& shape() const noexcept { return shape_; }
  /// Accesses of distance `distance` (0 outside the recorded range).
  [[nodiscard]] std::uint64_t count(distance_type distance) const noexcept {
    return distance < counts_.size() ? counts_[distance] : 0;
  }
  /// Cold (compulsory) accesses: first sight of a key in its cache.
  [[nodiscard]] std::uint64_t cold() const noexcept { return cold_; }
  /// Accesses with a finite distance.
  [[nodiscard]] std::uint64_t warm() const noexcept { return warm_; }
  /// All accesses.
  [[nodiscard]] std::uint64_t accesses() const noexcept { return cold_ + warm_; }
  /// Largest distance with a non-zero count, 0 when there is none.
  [[nodiscard]] distance_type max_distance() const noexcept { return max_distance_; }

  friend bool operator==(const reuse_histogram& a, const reuse_histogram& b) noexcept {
    if (a.shape_ != b.shape_ || a.cold_ != b.cold_ || a.warm_ != b.warm_ ||
        a.max_distance_ != b.max_distance_) {
      return false;
    }
    for (distance_type d = 1; d <= a.max_distance_; ++d) {
      if (a.count(d) != b.count(d)) {
        return false;
      }
    }
    return true;
  }

 private:
  histogram_shape shape_{};
  std::vector<std::uint64_t> counts_ = std::vector<std::uint64_t>(1, 0);  // [0] unused
  std::uint64_t cold_ = 0;
  std::uint64_t warm_ = 0;
  distance_type max_distance_ = 0;
};

/// @brief Merged copy: `merge(a, b) == reuse_histogram(a).merge(b)`.
/// @throws wisp::logic_error if the shapes differ.
[[nodiscard]] inline reuse_histogram merge(reuse_histogram a, const reuse_histogram& b) {
  a.merge(b);
  return a;
}

/// @brief Misses of an LRU cache at every capacity 0..max_distance, from one histogram.
///
/// `misses(c) = cold + #{d > c}`; for `c >= max_capacity()` only cold misses remain. Built in
/// O(max distance); queries O(1). For a per-layer histogram, `c` is the slots of *each* layer and
/// misses are summed over layers.
class miss_curve {
 public:
  miss_curve() = default;

  explicit miss_curve(const reuse_histogram& histogram)
      : accesses_(histogram.accesses()), cold_(histogram.cold()) {
    const auto top = histogram.max_distance();
    misses_.assign(std::size_t{top} + 1, 0);
    std::uint64_t beyond = histogram.cold();
    for (auto c = top; c > 0; --c) {  // misses(c) = misses(c + 1) + count(c + 1)
      misses_[c] = beyond;
      beyond += histogram.count(c);
    }
    misses_[0] = beyond;  // capacity 0 misses everything
  }

  /// Total accesses.
  [[nodiscard]] std::uint64_t accesses() const noexcept { return accesses_; }
  /// Cold misses: the floor of the curve.
  [[nodiscard]] std::uint64_t cold() const noexcept { return cold_; }
  /// Smallest capacity at which only cold misses remain (the largest distance seen).
  [[nodiscard]] std::uint64_t max_capacity() const noexcept {
    return misses_.empty() ? 0 : misses_.size() - 1;
  }
  /// Misses of an LRU cache with `capacity` slots (per cache).
  [[nodiscard]] std::uint64_t misses(std::uint64_t capacity) const noexcept {
    if (misses_.empty()) {
      return 0;
    }
    return capacity < misses_.size() ? misses_[capacity] : cold_;
  }
  /// `misses(capacity) / accesses()`, 0 when there are no accesses.
  [[nodiscard]] double miss_ratio(std::uint64_t capacity) const noexcept {
    return accesses_ == 0 ? 0.0
                          : static_cast<double>(misses(capacity)) / static_cast<double>(accesses_);
  }
  /// `1 - miss_ratio(capacity)`.
  [[nodiscard]] double hit_ratio(std::uint64_t capacity) const noexcept {
    return accesses_ == 0 ? 0.0 : 1.0 - miss_ratio(capacity);
  }
  /// @brief Smallest capacity whose hit ratio is at least `target`, or `std::nullopt` when even
  /// an unbounded cache falls short (cold misses). O(log max_capacity).
  [[nodiscard]] std::optional<std::uint64_t> capacity_for_hit_ratio(double target) const {
    if (accesses_ == 0) {
      return std::nullopt;
    }
    // misses is non-increasing in capacity: find the first c with misses(c) <= allowed.
    const double allowed = (1.0 - target) * static_cast<double>(accesses_);
    const auto it = std::partition_point(misses_.begin(), misses_.end(), [&](std::uint64_t m) {
      return static_cast<double>(m) > allowed;
    });
    if (it == misses_.end()) {
      return std::nullopt;
    }
    return static_cast<std::uint64_t>(it - misses_.begin());
  }
  /// Misses at capacities 0..max_capacity().
  [[nodiscard]] std::span<const std::uint64_t> values() const noexcept { return misses_; }

 private:
  std::vector<std::uint64_t> misses_;
  std::uint64_t accesses_ = 0;
  std::uint64_t cold_ = 0;
};

}  // namespace wisp
