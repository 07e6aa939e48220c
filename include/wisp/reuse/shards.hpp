// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Sampled miss-ratio curves: fixed-rate SHARDS (Waldspurger, Park, Garthwaite and Ahmad,
/// "Efficient MRC Construction with SHARDS", FAST 2015).
///
/// A key is *sampled* when `hash(key) mod P < T`; the rate is `R = T / P`. Because the filter is
/// on keys (spatial), a sampled key keeps every one of its accesses, and the LRU stack of the
/// sampled keys is a uniform thinning of the full stack: a key at true distance `d` sees about
/// `1 + (d - 1) R` sampled keys. Distances measured on the sampled substream are scaled back by
/// `1 / R` and counts by `1 / R`; the ratio estimate needs only the sample.
///
/// Cost: one hash per access, plus an exact counter update for the sampled fraction `R`.
/// Accuracy: see docs/reuse.md (mean absolute error of the miss-ratio curve, measured and
/// asserted in tests/reuse/shards_test.cpp). The estimate is only as fine as the number of
/// sampled *keys*: with `K` distinct keys, about `K R` are sampled, and the curve moves in steps
/// of `1 / R` capacity units. A small key space (e.g. 1,664 ESFT keys) needs a high rate.
/// @code
/// wisp::sampled_reuse_counter sampled{1u << 20, 0.01};
/// for (std::uint32_t key : stream) sampled.access(key);
/// wisp::miss_ratio_curve mrc = sampled.estimate(1u << 20);
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/reuse/histogram.hpp>
#include <wisp/reuse/reuse_distance.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace wisp {

/// @brief Miss ratios of an LRU cache at capacities 0..max_capacity (estimated or exact).
class miss_ratio_curve {
 public:
  miss_ratio_curve() = default;
  /// @throws wisp::logic_error if `ratios` is empty.
  explicit miss_ratio_curve(std::vector<double> ratios) : ratios_(std::move(ratios)) {
    WISP_EXPECTS(!ratios_.empty(), "a miss-ratio curve needs capacity 0 at least");
  }

  /// @brief The exact curve of `curve` at capacities 0..max_capacity.
  [[nodiscard]] static miss_ratio_curve from(const miss_curve& curve, std::uint64_t max_capacity) {
    std::vector<double> ratios(max_capacity + 1);
    for (std::uint64_t c = 0; c <= max_capacity; ++c) {
      ratios[c] = curve.miss_ratio(c);
    }
    return miss_ratio_curve{std::move(ratios)};
  }

  /// Largest capacity held; beyond it the ratio stays at `ratio(max_capacity())`.
  [[nodiscard]] std::uint64_t max_capacity() const noexcept {
    return ratios_.empty() ? 0 : ratios_.size() - 1;
  }
  [[nodiscard]] double ratio(std::uint64_t capacity) const noexcept {
    if (ratios_.empty()) {
      return 0.0;
    }
    return ratios_[std::min<std::uint64_t>(capacity, ratios_.size() - 1)];
  }
  [[nodiscard]] std::span<const double> values() const noexcept { return ratios_; }

 private:
  std::vector<double> ratios_;
};

/// @brief Mean of `|a(c) - b(c)|` over capacities `first..last` (inclusive).
/// @throws wisp::logic_error if `first > last`.
[[nodiscard]] inline double mean_absolute_error(const miss_ratio_curve& a,
                                                const miss_ratio_curve& b, std::uint64_t first,
                                                std::uint64_t last) {
  WISP_EXPECTS(first <= last, "empty capacity range ", first, "..", last);
  double sum = 0.0;
  for (std::uint64_t c = first; c <= last; ++c) {
    sum += std::abs(a.ratio(c) - b.ratio(c));
  }
  return sum / static_cast<double>(last - first + 1);
}

/// @brief Parameters of `sampled_reuse_counter`.
struct shards_options {
  /// Sampling rate `R` in (0, 1]; rounded to a multiple of `1 / 2^24`.
  double rate = 0.01;
  /// Selects the hash function: a different seed samples a different subset of keys.
  std::uint64_t seed = 0;
  /// SHARDS_adj (Waldspurger et al., FAST'15, section 4.3): the number of sampled accesses `N_s`
  /// deviates from its expectation `N R` mostly because a few very hot keys fell in or out of the
  /// sample; add the difference `N R - N_s` to the hits of the smallest distance and normalise
  /// by `N R` instead of `N_s`.
  bool adjust = true;
};

/// @brief Fixed-rate SHARDS: exact stack distances of a hash-sampled subset of the keys.
///
/// Complexity: `access` is one 64-bit hash and a compare; sampled accesses add an exact counter
/// update (amortised O(log sampled keys)). Memory: 4 bytes per key of the key space (dense keys,
/// so no hash table) plus O(sampled keys). Thread-safety: none.
class sampled_reuse_counter {
 public:
  using key_type = reuse_distance_counter::key_type;

  /// Hash modulus `P`: the rate is `threshold() / P`.
  static constexpr std::uint64_t modulus = std::uint64_t{1} << 24;

  /// @param key_space keys are in `[0, key_space)`.
  /// @param options rate, hash seed and correction (see `shards_options`).
  /// @throws wisp::logic_error if the rate is outside (0, 1] or `key_space` is invalid.
  sampled_reuse_counter(std::size_t key_space, shards_options options)
      : threshold_(threshold_for(options.rate)),
        seed_(mix(options.seed ^ 0x9e3779b97f4a7c15ull)),
        adjust_(options.adjust),
        counter_(key_space, expected_sampled_keys(key_space, options.rate)),
        sample_({cache_scope::stream, 1, 0}) {}

  /// Same as `sampled_reuse_counter(key_space, shards_options{rate, seed})`.
  sampled_reuse_counter(std::size_t key_space, double rate, std::uint64_t seed = 0)
      : sampled_reuse_counter(key_space, shards_options{rate, seed, true}) {}

  /// @brief Whether `key` belongs to the sample (`hash(key) mod P < T`).
  [[nodiscard]] bool sampled(key_type key) const noexcept {
    return (mix(key ^ seed_) & (modulus - 1)) < threshold_;
  }

  /// @brief Records one access; returns whether it was sampled.
  /// @throws wisp::logic_error if `key >= key_space` (nothing recorded then).
  bool access(key_type key) {
    WISP_EXPECTS(key < counter_.key_space(), "key ", key, " is outside the key space [0, ",
                 counter_.key_space(), ")");
    ++accesses_;
    if (!sampled(key)) {
      return false;
    }
    sample_.record(counter_.access(key));
    return true;
  }

  /// The effective rate `T / P`.
  [[nodiscard]] double rate() const noexcept {
    return static_cast<double>(threshold_) / static_cast<double>(modulus);
  }
  /// Whether SHARDS_adj is applied (see `shards_options::adjust`).
  [[nodiscard]] bool adjusted() const noexcept { return adjust_; }
  /// All accesses seen, sampled or not.
  [[nodiscard]] std::uint64_t accesses() const noexcept { return accesses_; }
  /// Accesses of sampled keys.
  [[nodiscard]] std::uint64_t sampled_accesses() const noexcept { return sample_.accesses(); }
  /// Distinct sampled keys so far.
  [[nodiscard]] std::size_t sampled_keys() const noexcept { return counter_.distinct(); }
  /// Histogram of distances measured on the sampled substream (unscaled).
  [[nodiscard]] const reuse_histogram& sample_histogram() const noexcept { return sample_; }

  /// @brief Estimated miss ratio of an LRU cache of `capacity` slots. O(sampled max distance);
  /// use `estimate` for a whole curve.
  ///
  /// A sampled distance `s` stands for a true distance `1 + (s - 1) / R` (the key itself plus
  /// `(s - 1) / R` others; plain `s / R` would misplace immediate re-use), so capacity `c` hits
  /// the sampled accesses with `s <= 1 + (c - 1) R`; between integer sampled distances the count
  /// is interpolated linearly. Without adjustment the ratio is normalised by the sampled accesses
  /// `N_s`; with `shards_options::adjust`, see there. Clamped to [0, 1]; 1 at capacity 0 or when
  /// nothing was sampled.
  [[nodiscard]] double estimated_miss_ratio(std::uint64_t capacity) const {
    return ratio_at(capacity, prefix_hits());
  }

  /// @brief Estimated misses at `capacity`: the estimated ratio times all accesses (with
  /// adjustment, exactly the sample's misses scaled by `1 / R`).
  [[nodiscard]] double estimated_misses(std::uint64_t capacity) const {
    return estimated_miss_ratio(capacity) * static_cast<double>(accesses_);
  }

  /// @brief Estimated miss-ratio curve at capacities 0..max_capacity. O(max_capacity + sampled
  /// max distance).
  [[nodiscard]] miss_ratio_curve estimate(std::uint64_t max_capacity) const {
    const std::vector<double> prefix = prefix_hits();
    std::vector<double> ratios(max_capacity + 1);
    for (std::uint64_t c = 0; c <= max_capacity; ++c) {
      ratios[c] = ratio_at(c, prefix);
    }
    return miss_ratio_curve{std::move(ratios)};
  }

 private:
  [[nodiscard]] static constexpr std::uint64_t mix(std::uint64_t x) noexcept {
    // MurmurHash3's 64-bit finaliser: every input bit affects every output bit.
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
  }

  [[nodiscard]] static std::uint64_t threshold_for(double rate) {
    WISP_EXPECTS(rate > 0.0 && rate <= 1.0, "sampling rate ", rate, " is outside (0, 1]");
    const auto t = static_cast<std::uint64_t>(std::llround(rate * static_cast<double>(modulus)));
    return std::max<std::uint64_t>(t, 1);
  }

  [[nodiscard]] static std::size_t expected_sampled_keys(std::size_t key_space, double rate) {
    const double expected = static_cast<double>(key_space) * rate;
    return std::min(key_space, static_cast<std::size_t>(2.0 * expected) + 64);
  }

  // prefix[s] = sampled hits of a cache holding s sampled keys = #{sampled d <= s}.
  [[nodiscard]] std::vector<double> prefix_hits() const {
    std::vector<double> prefix(std::size_t{sample_.max_distance()} + 1, 0.0);
    double sum = 0.0;
    for (std::size_t s = 1; s < prefix.size(); ++s) {
      sum += static_cast<double>(sample_.count(static_cast<std::uint32_t>(s)));
      prefix[s] = sum;
    }
    return prefix;
  }

  [[nodiscard]] double ratio_at(std::uint64_t capacity,
                                const std::vector<double>& prefix) const noexcept {
    const auto sampled = static_cast<double>(sample_.accesses());
    if (sampled == 0.0 || capacity == 0) {
      return 1.0;
    }
    double hits = sample_hits(capacity, prefix);
    double total = sampled;
    if (adjust_) {
      total = static_cast<double>(accesses_) * rate();
      hits += total - sampled;
    }
    return std::clamp(1.0 - hits / total, 0.0, 1.0);
  }

  [[nodiscard]] double sample_hits(std::uint64_t capacity,
                                   const std::vector<double>& prefix) const noexcept {
    const double x = 1.0 + static_cast<double>(capacity - 1) * rate();
    const auto top = static_cast<double>(prefix.size() - 1);
    if (x >= top) {
      return prefix.back();
    }
    const auto lo = static_cast<std::size_t>(x);
    const double frac = x - static_cast<double>(lo);
    return prefix[lo] + frac * (prefix[lo + 1] - prefix[lo]);
  }

  std::uint64_t threshold_;
  std::uint64_t seed_;
  bool adjust_;
  reuse_distance_counter counter_;
  reuse_histogram sample_;
  std::uint64_t accesses_ = 0;
};

}  // namespace wisp
