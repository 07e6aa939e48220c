// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `coactivation_predictor`: WiSP's parameter-free co-activation table (Appendix C) and its
/// distance-decayed scoring, with online learning, exponential forgetting, merging and a versioned
/// binary format.
///
/// **Table.** For every source layer `s`, later layer `t = s + delta` (`1 <= delta <= span`) and
/// expert pair `(i, j)`, the table counts the passes in which `i` fired at `s` and `j` at `t`;
/// `marginal(s, i)` counts the passes in which `i` fired at `s`. Their ratio is the conditional
/// co-activation probability `P(j at t | i at s)`.
///
/// **Score.** With layers `0 .. o-1` of the current pass observed, the score of expert `j` at
/// target layer `t >= o` is the weighted mean of the conditionals over the experts fired at the
/// `window` most recent observed layers, a source `delta` layers before the target weighing
/// `decay^(delta - 1)` (nearer layers weigh more):
///
///     score(j) = sum_s sum_{i fired at s} w(t - s) P(j at t | i at s)
///              / sum_s sum_{i fired at s} w(t - s)                       (over seen i only)
///
/// an estimate of the probability that `j` is routed at `t` (the scores of a layer sum to top_k).
/// When no source applies (nothing observed yet, every source beyond `span`, or never seen), the
/// score falls back to the marginal frequency `marginal(t, j) / passes`.
///
/// **Forgetting.** With `forgetting = f < 1` every count is multiplied by `f` per learned pass, so
/// a pass learned `n` passes ago weighs `f^n` (half-life `ln 2 / -ln f` passes). It is exact and
/// O(1) per pass: new passes are added with weight `f^-passes` and the table is rescaled by a power
/// of two when that weight grows large (scaling by a power of two is exact in floating point, and
/// the counts it means do not change). Without forgetting the counts are integers, exact up to
/// 2^23 passes per marginal; a marginal reaching that halves every count, so older passes then
/// weigh half of the newer ones (an ageing step, as in TinyLFU's periodic reset).
///
/// @code
/// wisp::coactivation_predictor table({.layers = 26, .experts = 64, .top_k = 6});
/// for (std::size_t s = 0; s < trace.steps(); ++s) { pass.assign(trace, s); table.learn(pass); }
/// std::ofstream out("user17.coact", std::ios::binary);
/// table.save(out);
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/predict/detail/binary_io.hpp>
#include <wisp/predict/detail/weighted_rows.hpp>
#include <wisp/predict/routing_predictor.hpp>
#include <wisp/trace/routing_trace.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <istream>
#include <limits>
#include <ostream>
#include <span>
#include <string_view>
#include <vector>

namespace wisp {

/// @brief Parameters of a `coactivation_predictor`.
struct coactivation_config {
  /// Observed layers a score uses: the `window` most recent ones (>= 1).
  std::int32_t window = 4;
  /// Weight ratio between a source layer and the next nearer one, in (0, 1]: a source `delta`
  /// layers before the target weighs `decay^(delta - 1)`.
  float decay = 0.5f;
  /// Farthest target distance served with co-activation (>= 1): distance 1 is the layer right
  /// after the last observed one. The table keeps `span() = max_distance + window - 1` layer
  /// distances.
  std::int32_t max_distance = 4;
  /// Per-pass multiplier of every count, in (0, 1]; 1 = no forgetting.
  double forgetting = 1.0;

  /// Layer distances the table keeps.
  [[nodiscard]] constexpr std::int32_t span() const noexcept { return max_distance + window - 1; }

  /// @throws wisp::logic_error naming the field if a parameter is out of range.
  void validate() const {
    WISP_EXPECTS(window >= 1 && window <= 1024,
                 "coactivation_config: window must be in [1, 1024], got ", window);
    WISP_EXPECTS(max_distance >= 1 && max_distance <= 1024,
                 "coactivation_config: max_distance must be in [1, 1024], got ", max_distance);
    WISP_EXPECTS(decay > 0.0f && decay <= 1.0f,
                 "coactivation_config: decay must be in (0, 1], got ", decay);
    WISP_EXPECTS(forgetting > 0.0 && forgetting <= 1.0,
                 "coactivation_config: forgetting must be in (0, 1], got ", forgetting);
  }

  friend constexpr bool operator==(const coactivation_config&,
                                   const coactivation_config&) = default;
};

/// @brief The co-activation predictor (see the file description). Models `routing_predictor`.
///
/// Memory: `layers x span x experts^2` floats (26 x 7 x 64^2 x 4 B = 3 MB for DeepSeek-V2-Lite with
/// the default config) plus `layers x experts` marginals, allocated at construction.
/// `score`: O(window x top_k x experts), no allocation (rows are summed 16 outputs at a time, in
/// registers). `learn`: O(layers x span x top_k^2).
/// Thread safety: `score` and the queries are const and may run concurrently; `learn`, `merge`
/// and `load` need exclusive access.
class coactivation_predictor {
 public:
  static constexpr std::string_view name = "coactivation";
  /// Format identifier (8 bytes) and version of `save` / `load`.
  static constexpr std::string_view magic = "WISPCOA1";
  static constexpr std::uint32_t format_version = 1;

  /// An empty table (every score falls back to the marginal, itself 0 before any pass).
  /// @throws wisp::logic_error on an invalid shape or config; std::bad_alloc.
  explicit coactivation_predictor(const moe_shape& shape, const coactivation_config& config = {})
      : shape_(shape), config_(config) {
    shape_.validate();
    config_.validate();
    const auto layers = static_cast<std::size_t>(shape_.layers);
    const auto experts = static_cast<std::size_t>(shape_.experts);
    const auto span = static_cast<std::size_t>(config_.span());
    WISP_EXPECTS(static_cast<double>(layers) * span * experts * experts < 1e9,
                 "coactivation_predictor: the table of ", layers, " layers x ", span,
                 " distances x ", experts, "^2 experts is over 1e9 entries");
    pairs_.assign(layers * span * experts * experts, 0.0f);
    marginals_.assign(layers * experts, 0.0f);
  }

  // ------------------------------------------------------------------ predictor

  /// @brief Scores every expert of layer `target` from the observed layers of `pass` (see the
  /// file description). O(window x top_k x experts), no allocation.
  /// @throws wisp::logic_error if the pass shape differs, `target` is not in
  ///   `[pass.observed(), layers)`, or `scores.size() != experts`.
  void score(const routing_pass& pass, std::int32_t target, std::span<float> scores) const {
    // One function on purpose: the prediction hot path (~180 ns, bench/predict), whose gather
    // and flush share locals that stay in registers.
    check_query("coactivation_predictor::score", pass, target, scores);
    const std::size_t experts = static_cast<std::size_t>(shape_.experts);
    float* out = scores.data();
    const std::int32_t observed = pass.observed();
    const std::int32_t nearest = target - observed + 1;  // distance of the last observed layer
    const std::int32_t farthest =
        std::min(target - std::max(0, observed - config_.window), config_.span());
    const float first_weight = power(config_.decay, nearest - 1);
    const float* marginals = marginals_.data();
    const float* pairs = pairs_.data();
    // out = sum over rows of (weight / marginal / total) x pair row. The rows that take part
    // (experts seen at their layer) are gathered with their weights and marginals while `total`
    // is summed, then scaled together (the divisions vectorise). Up to `capacity` rows (the usual
    // case: 4 layers x top-6 = 24) this is the only pass; more rows are summed a batch at a time
    // in a second pass.
    detail::weighted_rows batch;
    std::array<float, detail::weighted_rows::capacity> marginal;
    float total = 0.0f;
    bool one_batch = true;
    const auto gather = [&](std::int32_t source, std::int32_t delta, std::int32_t i, float weight,
                            float n) {
      batch.rows[batch.count] = pairs + pair_row(source, delta, i);
      batch.scales[batch.count] = weight;
      marginal[batch.count++] = n;
    };
    float weight = first_weight;
    for (std::int32_t delta = nearest; delta <= farthest; ++delta, weight *= config_.decay) {
      const std::int32_t source = target - delta;
      for (const std::int32_t i : pass.experts(source)) {
        const float n = marginals[marginal_index(source, i)];
        if (n > 0.0f) {
          total += weight;
          if (batch.count < batch.capacity) {
            gather(source, delta, i, weight, n);
          } else {
            one_batch = false;
          }
        }
      }
    }
    if (!(total > 0.0f)) {  // no source applies: the target layer's marginal frequency
      const float inverse = passes_ > 0.0 ? static_cast<float>(1.0 / passes_) : 0.0f;
      const float* row = marginals + marginal_index(target, 0);
      for (std::size_t j = 0; j < experts; ++j) {
        out[j] = row[j] * inverse;
      }
      return;
    }
    const float norm = 1.0f / total;
    bool overwrite = true;
    const auto flush = [&] {
      for (std::size_t r = 0; r < batch.count; ++r) {
        batch.scales[r] = batch.scales[r] * norm / marginal[r];
      }
      detail::add_weighted_rows(out, batch, experts, overwrite);
      overwrite = false;
      batch.count = 0;
    };
    if (one_batch) {
      flush();
      return;
    }
    batch.count = 0;
    weight = first_weight;
    for (std::int32_t delta = nearest; delta <= farthest; ++delta, weight *= config_.decay) {
      const std::int32_t source = target - delta;
      for (const std::int32_t i : pass.experts(source)) {
        const float n = marginals[marginal_index(source, i)];
        if (n > 0.0f) {
          gather(source, delta, i, weight, n);
          if (batch.count == batch.capacity) {
            flush();
          }
        }
      }
    }
    if (batch.count > 0) {
      flush();
    }
  }

  /// @brief Folds a complete pass into the table (after one forgetting step). O(layers x span x
  /// top_k^2); no allocation.
  /// @throws wisp::logic_error if the pass shape differs or the pass is not complete.
  void learn(const routing_pass& pass) {
    WISP_EXPECTS(pass.shape() == shape_, "coactivation_predictor::learn: pass shape (",
                 pass.shape(), ") differs from the table shape (", shape_, ")");
    WISP_EXPECTS(pass.complete(), "coactivation_predictor::learn: only ", pass.observed(), " of ",
                 shape_.layers, " layers observed; learn takes complete passes");
    weight_ /= config_.forgetting;
    const auto w = static_cast<float>(weight_);
    const std::int32_t span = config_.span();
    float largest = 0.0f;
    for (std::int32_t s = 0; s < shape_.layers; ++s) {
      for (const std::int32_t i : pass.experts(s)) {
        float& m = marginals_[marginal_index(s, i)];
        m += w;
        largest = std::max(largest, m);
        for (std::int32_t delta = 1; delta <= span && s + delta < shape_.layers; ++delta) {
          float* row = pairs_.data() + pair_row(s, delta, i);
          for (const std::int32_t j : pass.experts(s + delta)) {
            row[j] += w;
          }
        }
      }
    }
    passes_ += weight_;
    keep_in_range(largest);
  }

  // ------------------------------------------------------------------ combining and storing

  /// @brief Adds `other`'s counts to this table (e.g. a worker's table into the population one).
  /// Forgetting ages both tables independently; their counts are added as they weigh now.
  /// O(table size).
  /// @throws wisp::logic_error, leaving this table unchanged, if the shapes or configs differ.
  void merge(const coactivation_predictor& other) {
    WISP_EXPECTS(other.shape_ == shape_, "coactivation_predictor::merge: shape ", other.shape_,
                 " differs from ", shape_);
    WISP_EXPECTS(other.config_ == config_,
                 "coactivation_predictor::merge: the tables were built with different configs "
                 "(window ",
                 other.config_.window, " vs ", config_.window, ", max_distance ",
                 other.config_.max_distance, " vs ", config_.max_distance, ", decay ",
                 other.config_.decay, " vs ", config_.decay, ", forgetting ",
                 other.config_.forgetting, " vs ", config_.forgetting, ")");
    const auto ratio = static_cast<float>(weight_ / other.weight_);
    for (std::size_t x = 0; x < pairs_.size(); ++x) {
      pairs_[x] += ratio * other.pairs_[x];
    }
    for (std::size_t x = 0; x < marginals_.size(); ++x) {
      marginals_[x] += ratio * other.marginals_[x];
    }
    passes_ += static_cast<double>(ratio) * other.passes_;
    keep_in_range(*std::max_element(marginals_.begin(), marginals_.end()));
  }

  /// @brief Writes the table in wisp's binary format (little-endian): magic `WISPCOA1`, version,
  /// shape, config, pass weights, marginals, pair counts, CRC-32 of all of it. O(table size).
  void save(std::ostream& out) const {
    detail::binary_writer w(out);
    w.bytes(std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(magic.data()),
                                          magic.size()));
    w.u32(format_version);
    w.i32(shape_.layers);
    w.i32(shape_.experts);
    w.i32(shape_.top_k);
    w.i32(config_.window);
    w.i32(config_.max_distance);
    w.f32(config_.decay);
    w.f64(config_.forgetting);
    w.f64(passes_);
    w.f64(weight_);
    for (const float m : marginals_) {
      w.f32(m);
    }
    for (const float p : pairs_) {
      w.f32(p);
    }
    w.finish();
    WISP_EXPECTS(out.good(), "coactivation_predictor::save: the stream failed while writing");
  }

  /// @brief Reads a table written by `save`. O(table size).
  /// @throws wisp::format_error (with the byte offset) on a wrong magic or version, an invalid
  ///   shape or config, a negative or non-finite count, truncated input or a checksum mismatch.
  [[nodiscard]] static coactivation_predictor load(std::istream& in) {
    detail::binary_reader r(in, "coactivation table");
    std::array<std::uint8_t, 8> head{};
    r.bytes(head, "magic");
    if (std::string_view(reinterpret_cast<const char*>(head.data()), head.size()) != magic) {
      r.fail(0, "not a co-activation table (bad magic)");
    }
    const std::uint64_t version_at = r.offset();
    if (const std::uint32_t version = r.u32("version"); version != format_version) {
      r.fail(version_at, "unsupported version ", version, " (this build reads version ",
             format_version, ")");
    }
    const std::uint64_t shape_at = r.offset();
    moe_shape shape{};
    shape.layers = r.i32("layers");
    shape.experts = r.i32("experts");
    shape.top_k = r.i32("top_k");
    coactivation_config config;
    config.window = r.i32("window");
    config.max_distance = r.i32("max_distance");
    config.decay = r.f32("decay");
    config.forgetting = r.f64("forgetting");
    try {
      shape.validate();
      config.validate();
    } catch (const logic_error& e) {
      r.fail(shape_at, "invalid shape or config: ", e.what());
    }
    coactivation_predictor table(shape, config);
    const std::uint64_t counts_at = r.offset();
    table.passes_ = r.f64("passes");
    table.weight_ = r.f64("weight");
    if (!(std::isfinite(table.passes_) && table.passes_ >= 0 && std::isfinite(table.weight_) &&
          table.weight_ > 0)) {
      r.fail(counts_at, "invalid pass weights ", table.passes_, " and ", table.weight_);
    }
    const auto read_counts = [&r](std::vector<float>& counts, const char* field) {
      for (float& c : counts) {
        const std::uint64_t at = r.offset();
        c = r.f32(field);
        if (!(std::isfinite(c) && c >= 0.0f)) {
          r.fail(at, field, " count ", c, " is negative or not finite");
        }
      }
    };
    read_counts(table.marginals_, "marginal");
    read_counts(table.pairs_, "pair");
    r.finish();
    return table;
  }

  // ------------------------------------------------------------------ queries

  [[nodiscard]] const moe_shape& shape() const noexcept { return shape_; }
  [[nodiscard]] const coactivation_config& config() const noexcept { return config_; }
  /// Learned passes, each weighted by its forgetting factor (the count of passes without it).
  [[nodiscard]] double passes() const noexcept { return passes_ / weight_; }
  /// Weighted passes in which expert `i` fired at layer `s`. @throws on an out-of-range index.
  [[nodiscard]] double marginal(std::int32_t s, std::int32_t i) const {
    check_expert("marginal", s, i);
    return marginals_[marginal_index(s, i)] / weight_;
  }
  /// Weighted passes in which `i` fired at `s` and `j` at `t` (0 when `t - s` is outside
  /// `[1, span]`). @throws on an out-of-range index.
  [[nodiscard]] double pair(std::int32_t s, std::int32_t i, std::int32_t t, std::int32_t j) const {
    check_expert("pair", s, i);
    check_expert("pair", t, j);
    const std::int32_t delta = t - s;
    if (delta < 1 || delta > config_.span()) {
      return 0.0;
    }
    return pairs_[pair_row(s, delta, i) + static_cast<std::size_t>(j)] / weight_;
  }
  /// `P(j at t | i at s) = pair / marginal`, 0 if `i` never fired at `s`.
  [[nodiscard]] double conditional(std::int32_t s, std::int32_t i, std::int32_t t,
                                   std::int32_t j) const {
    const double m = marginal(s, i);
    return m > 0.0 ? pair(s, i, t, j) / m : 0.0;
  }

 private:
  // Keeps the stored counts exact and finite, given the largest marginal. Two cases:
  // - the pass weight grew past 2^32 (forgetting): divide every stored value and the weight by
  //   2^32; a power of two is exact and the counts the table means do not change;
  // - a marginal reached 2^23 passes of the current weight (floats count exactly below 2^24):
  //   halve the stored counts, so older passes weigh half of the newer ones (an ageing step).
  void keep_in_range(float largest) noexcept {
    if (weight_ >= 4294967296.0) {
      scale_counts(0x1p-32f);
      weight_ *= 0x1p-32;
      largest *= 0x1p-32f;
    }
    if (static_cast<double>(largest) >= 8388608.0 * weight_) {
      scale_counts(0.5f);
    }
  }
  void scale_counts(float factor) noexcept {
    for (float& p : pairs_) {
      p *= factor;
    }
    for (float& m : marginals_) {
      m *= factor;
    }
    passes_ *= static_cast<double>(factor);
  }

  static float power(float base, std::int32_t exponent) noexcept {
    float r = 1.0f;
    for (std::int32_t e = 0; e < exponent; ++e) {
      r *= base;
    }
    return r;
  }

  void check_expert(const char* what, std::int32_t layer, std::int32_t expert) const {
    WISP_EXPECTS(layer >= 0 && layer < shape_.layers, "coactivation_predictor::", what, ": layer ",
                 layer, " is outside [0, ", shape_.layers, ")");
    WISP_EXPECTS(expert >= 0 && expert < shape_.experts, "coactivation_predictor::", what,
                 ": expert ", expert, " is outside [0, ", shape_.experts, ")");
  }
  void check_query(const char* where, const routing_pass& pass, std::int32_t target,
                   std::span<float> scores) const {
    WISP_EXPECTS(pass.shape() == shape_, where, ": pass shape (", pass.shape(),
                 ") differs from the table shape (", shape_, ")");
    WISP_EXPECTS(target >= pass.observed() && target < shape_.layers, where, ": target layer ",
                 target, " is outside [observed = ", pass.observed(), ", layers = ", shape_.layers,
                 ")");
    WISP_EXPECTS(scores.size() == static_cast<std::size_t>(shape_.experts), where, ": ",
                 scores.size(), " scores for ", shape_.experts, " experts");
  }
  [[nodiscard]] std::size_t marginal_index(std::int32_t layer, std::int32_t expert) const noexcept {
    return static_cast<std::size_t>(layer) * static_cast<std::size_t>(shape_.experts) +
           static_cast<std::size_t>(expert);
  }
  [[nodiscard]] std::size_t pair_row(std::int32_t s, std::int32_t delta,
                                     std::int32_t i) const noexcept {
    const auto experts = static_cast<std::size_t>(shape_.experts);
    const std::size_t block =
        static_cast<std::size_t>(s) * static_cast<std::size_t>(config_.span()) +
        static_cast<std::size_t>(delta - 1);
    return (block * experts + static_cast<std::size_t>(i)) * experts;
  }

  moe_shape shape_;
  coactivation_config config_;
  std::vector<float> pairs_;      // [layers x span x experts x experts], scaled by weight_
  std::vector<float> marginals_;  // [layers x experts], scaled by weight_
  double passes_ = 0.0;           // weighted passes, scaled by weight_
  double weight_ = 1.0;           // weight of the next pass: forgetting^-passes, rescaled
};
static_assert(routing_predictor<coactivation_predictor>);

}  // namespace wisp
