// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief A synthetic MoE router: deterministic routing traces with tunable popularity skew,
/// temporal locality (per-topic working sets that drift), topic shifts and cross-layer
/// co-activation. The "default" preset is calibrated against the real ESFT trace (per-layer LRU
/// hit rates within 0.1 at capacities 8, 16, 32; see docs/synthetic.md).
///
/// **Model.** Each step routes one token through every layer. At layer *l* the router draws
/// `top_k` distinct experts without replacement from a mixture of three distributions:
/// - *popularity* (mass `1 - locality - coactivation`): Zipf over a per-layer random ranking of
///   the experts, exponent `zipf_exponent * (1 + zipf_spread * u_l)` with `u_l` in [-1, 1] drawn
///   per layer;
/// - *working set* (mass `locality`): uniform over the current topic's `working_set` hot experts of
///   that layer. Topics come from a pool of `topics` hot-set families drawn from the popularity
///   distribution; a new sequence (mean length `mean_sequence_length`) or a topic shift
///   (probability `topic_shift_probability` per step) switches topic; every step each layer's hot
///   set swaps one member with probability `drift_rate`;
/// - *co-activation* (mass `coactivation`, layers >= 1): uniform over the images, under a fixed
///   per-layer random permutation, of the experts chosen at the previous layer for this token.
///
/// **Determinism.** The generator uses its own xoshiro256** seeded by splitmix64 and only integer
/// arithmetic while sampling; the mixture weights are quantised to integers once from the
/// configuration (the only floating-point step is `std::pow` for the Zipf ranks). The same config,
/// step count and seed give the same trace on every platform and standard library.
///
/// @code
/// auto cfg = wisp::synthetic_preset("default");
/// wisp::routing_trace t = wisp::make_synthetic_trace(cfg, 8222, 42);
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/detail/random.hpp>
#include <wisp/core/error.hpp>
#include <wisp/core/model.hpp>
#include <wisp/trace/routing_trace.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace wisp {

/// @brief Parameters of the synthetic router. Every field is checked by `validate()`.
struct synthetic_config {
  std::int32_t layers = 26;   ///< MoE layers.
  std::int32_t experts = 64;  ///< Experts per layer.
  std::int32_t top_k = 6;     ///< Experts chosen per token and layer.
  /// Zipf exponent of the per-layer popularity ranking (0 = uniform; larger = more skewed).
  double zipf_exponent = 0.6;
  /// Per-layer variation of the exponent: layer *l* uses `zipf_exponent * (1 + zipf_spread * u_l)`,
  /// `u_l` uniform in [-1, 1]. In [0, 1].
  double zipf_spread = 0.25;
  /// Hot experts per layer in a topic's working set, in [1, experts].
  std::int32_t working_set = 5;
  /// Probability mass of the working set in each draw, in [0, 1].
  double locality = 0.4;
  /// Probability mass of the co-activated experts (previous layer's choices, permuted), in [0, 1];
  /// `locality + coactivation <= 1`.
  double coactivation = 0.1;
  /// Per step and layer, probability that one hot expert is replaced by a fresh popular one.
  double drift_rate = 0.1;
  /// Number of distinct topics (working-set families) sequences choose from, >= 1.
  std::int32_t topics = 8;
  /// Mean sequence length in steps (geometric); each sequence picks a topic. >= 1.
  double mean_sequence_length = 65.0;
  /// Per-step probability of switching topic inside a sequence, in [0, 1].
  double topic_shift_probability = 0.0;

  /// @brief Throws `wisp::logic_error` naming the first invalid field.
  void validate() const {
    moe_shape{layers, experts, top_k}.validate();
    WISP_EXPECTS(zipf_exponent >= 0 && zipf_exponent <= 8, "zipf_exponent must be in [0, 8], got ",
                 zipf_exponent);
    WISP_EXPECTS(zipf_spread >= 0 && zipf_spread <= 1, "zipf_spread must be in [0, 1], got ",
                 zipf_spread);
    WISP_EXPECTS(working_set >= 1 && working_set <= experts,
                 "working_set must be in [1, experts=", experts, "], got ", working_set);
    WISP_EXPECTS(locality >= 0 && locality <= 1, "locality must be in [0, 1], got ", locality);
    WISP_EXPECTS(coactivation >= 0 && coactivation <= 1, "coactivation must be in [0, 1], got ",
                 coactivation);
    WISP_EXPECTS(locality + coactivation <= 1, "locality + coactivation must be <= 1, got ",
                 locality + coactivation);
    WISP_EXPECTS(drift_rate >= 0 && drift_rate <= 1, "drift_rate must be in [0, 1], got ",
                 drift_rate);
    WISP_EXPECTS(topics >= 1, "topics must be >= 1, got ", topics);
    WISP_EXPECTS(mean_sequence_length >= 1, "mean_sequence_length must be >= 1, got ",
                 mean_sequence_length);
    WISP_EXPECTS(topic_shift_probability >= 0 && topic_shift_probability <= 1,
                 "topic_shift_probability must be in [0, 1], got ", topic_shift_probability);
  }
};

namespace detail {

/// Draws one index with probability proportional to `w` (total > 0), integer arithmetic only.
[[nodiscard]] inline std::size_t draw_weighted(const std::vector<std::uint64_t>& w,
                                               std::uint64_t total,
                                               wisp::detail::xoshiro256ss& rng) noexcept {
  std::uint64_t r = rng.below(total);
  std::size_t i = 0;
  while (r >= w[i]) {
    r -= w[i];
    ++i;
  }
  return i;
}

/// The router of `make_synthetic_trace`: per-layer Zipf popularity over a random ranking, the
/// co-activation links, the topics' working sets and the current one, all drawn from one
/// generator in a fixed order (so a trace depends only on the config, the steps and the seed).
class synthetic_router {
 public:
  synthetic_router(const synthetic_config& cfg, std::uint64_t seed)
      : L_(static_cast<std::size_t>(cfg.layers)),
        E_(static_cast<std::size_t>(cfg.experts)),
        K_(static_cast<std::size_t>(cfg.top_k)),
        W_(static_cast<std::size_t>(cfg.working_set)),
        T_(static_cast<std::size_t>(cfg.topics)),
        rng_(seed),
        base_(L_ * E_),
        link_(L_ * E_),
        w_(E_),
        topics_(T_ * L_ * W_),
        hot_(L_ * W_),
        in_hot_(L_ * E_, 0) {
    // Mass of each component, quantised once. Scale 2^40 keeps sums of <= 65536 terms below 2^57.
    constexpr double scale = 1099511627776.0;  // 2^40
    hot_weight_ =
        static_cast<std::uint64_t>(std::llround(cfg.locality * scale / static_cast<double>(W_)));
    link_weight_ = static_cast<std::uint64_t>(
        std::llround(cfg.coactivation * scale / static_cast<double>(K_)));
    draw_popularity(cfg, 1.0 - cfg.locality - cfg.coactivation, scale);
    for (std::size_t t = 0; t < T_; ++t) {  // each topic holds a working set per layer
      for (std::size_t l = 0; l < L_; ++l) {
        draw_popular(l, W_, topics_.data() + (t * L_ + l) * W_);
      }
    }
  }

  [[nodiscard]] xoshiro256ss& rng() noexcept { return rng_; }
  [[nodiscard]] std::size_t topics() const noexcept { return T_; }

  /// Makes topic `t`'s working sets the current ones.
  void set_topic(std::size_t t) {
    std::fill(in_hot_.begin(), in_hot_.end(), std::uint8_t{0});
    std::copy_n(topics_.begin() + static_cast<std::ptrdiff_t>(t * L_ * W_), L_ * W_, hot_.begin());
    for (std::size_t l = 0; l < L_; ++l) {
      for (std::size_t i = 0; i < W_; ++i) {
        in_hot_[l * E_ + hot_[l * W_ + i]] = 1;
      }
    }
  }

  /// Routes layer `l` of a step into `ids[l*K, (l+1)*K)` (layer l-1's ids already there): first
  /// the drift of its working set (with probability `p_drift`), then K distinct draws.
  void route_layer(std::size_t l, std::uint64_t p_drift, std::vector<std::int32_t>& ids) {
    // Drift: replace one hot expert by a popular expert outside the working set.
    if (W_ < E_ && rng_.chance(p_drift)) {
      const std::size_t victim = static_cast<std::size_t>(rng_.below(W_));
      std::uint64_t total = 0;
      for (std::size_t e = 0; e < E_; ++e) {
        w_[e] = in_hot_[l * E_ + e] != 0 ? 0 : base_[l * E_ + e];
        total += w_[e];
      }
      const std::size_t e = draw_weighted(w_, total, rng_);
      in_hot_[l * E_ + hot_[l * W_ + victim]] = 0;
      hot_[l * W_ + victim] = static_cast<std::uint32_t>(e);
      in_hot_[l * E_ + e] = 1;
    }
    std::uint64_t total = 0;
    for (std::size_t e = 0; e < E_; ++e) {
      w_[e] = base_[l * E_ + e] + (in_hot_[l * E_ + e] != 0 ? hot_weight_ : 0);
    }
    if (l > 0) {
      for (std::size_t j = 0; j < K_; ++j) {
        w_[link_[l * E_ + static_cast<std::size_t>(ids[(l - 1) * K_ + j])]] += link_weight_;
      }
    }
    for (std::size_t e = 0; e < E_; ++e) {
      total += w_[e];
    }
    for (std::size_t j = 0; j < K_; ++j) {
      const std::size_t e = draw_weighted(w_, total, rng_);
      ids[l * K_ + j] = static_cast<std::int32_t>(e);
      total -= w_[e];
      w_[e] = 0;
    }
  }

 private:
  // Per-layer popularity: Zipf weights over a random ranking (every expert keeps weight >= 1),
  // then the layer's co-activation links (a random permutation).
  void draw_popularity(const synthetic_config& cfg, double base_mass, double scale) {
    std::vector<std::uint32_t> perm(E_);
    for (std::size_t l = 0; l < L_; ++l) {
      const double u = static_cast<double>(rng_.below(2001)) / 1000.0 - 1.0;
      const double s = cfg.zipf_exponent * (1.0 + cfg.zipf_spread * u);
      for (std::size_t e = 0; e < E_; ++e) {
        perm[e] = static_cast<std::uint32_t>(e);
      }
      for (std::size_t e = E_; e > 1; --e) {  // Fisher-Yates
        std::swap(perm[e - 1], perm[rng_.below(e)]);
      }
      double norm = 0;
      for (std::size_t r = 0; r < E_; ++r) {
        norm += 1.0 / std::pow(static_cast<double>(r + 1), s);
      }
      for (std::size_t r = 0; r < E_; ++r) {
        const double p = 1.0 / std::pow(static_cast<double>(r + 1), s) / norm;
        base_[l * E_ + perm[r]] = std::max<std::uint64_t>(
            1, static_cast<std::uint64_t>(std::llround(p * base_mass * scale)));
      }
      for (std::size_t e = 0; e < E_; ++e) {
        perm[e] = static_cast<std::uint32_t>(e);
      }
      for (std::size_t e = E_; e > 1; --e) {
        std::swap(perm[e - 1], perm[rng_.below(e)]);
      }
      std::copy(perm.begin(), perm.end(), link_.begin() + static_cast<std::ptrdiff_t>(l * E_));
    }
  }

  // Draws `count` distinct experts of layer l from the popularity distribution into `out`.
  void draw_popular(std::size_t l, std::size_t count, std::uint32_t* out) {
    std::uint64_t total = 0;
    for (std::size_t e = 0; e < E_; ++e) {
      w_[e] = base_[l * E_ + e];
      total += w_[e];
    }
    for (std::size_t i = 0; i < count; ++i) {
      const std::size_t e = draw_weighted(w_, total, rng_);
      out[i] = static_cast<std::uint32_t>(e);
      total -= w_[e];
      w_[e] = 0;
    }
  }

  std::size_t L_, E_, K_, W_, T_;
  xoshiro256ss rng_;
  std::vector<std::uint64_t> base_;    // popularity weight of (layer, expert)
  std::vector<std::uint32_t> link_;    // link[l*E + e]: image at layer l of expert e at l-1
  std::vector<std::uint64_t> w_;       // draw weights of one layer (scratch)
  std::vector<std::uint32_t> topics_;  // topic t's working set of layer l at (t*L + l)*W
  std::vector<std::uint32_t> hot_;     // current working sets
  std::vector<std::uint8_t> in_hot_;   // membership of `hot_`
  std::uint64_t hot_weight_ = 0;
  std::uint64_t link_weight_ = 0;
};

}  // namespace detail

/// @brief Generates `steps` steps of synthetic routing. Deterministic in (`cfg`, `steps`, `seed`).
/// Sequence starts are recorded (the first step always starts one).
/// Time O(steps * layers * top_k * experts), memory O(steps * layers * top_k) for the trace.
/// @throws wisp::logic_error if `cfg` is invalid or `steps > routing_trace::max_steps`.
[[nodiscard]] inline routing_trace make_synthetic_trace(const synthetic_config& cfg,
                                                        std::size_t steps, std::uint64_t seed) {
  cfg.validate();
  WISP_EXPECTS(steps <= routing_trace::max_steps, "too many steps: ", steps);
  detail::synthetic_router router(cfg, seed);
  detail::xoshiro256ss& rng = router.rng();
  const std::uint64_t p_new_sequence =
      wisp::detail::probability_threshold(1.0 / cfg.mean_sequence_length);
  const std::uint64_t p_shift = wisp::detail::probability_threshold(cfg.topic_shift_probability);
  const std::uint64_t p_drift = wisp::detail::probability_threshold(cfg.drift_rate);
  routing_trace trace({cfg.layers, cfg.experts, cfg.top_k});
  trace.reserve(steps);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(cfg.layers) *
                                static_cast<std::size_t>(cfg.top_k));
  for (std::size_t step = 0; step < steps; ++step) {
    if (step == 0 || rng.chance(p_new_sequence)) {
      trace.begin_sequence();
      router.set_topic(static_cast<std::size_t>(rng.below(router.topics())));
    } else if (rng.chance(p_shift)) {
      router.set_topic(static_cast<std::size_t>(rng.below(router.topics())));
    }
    for (std::size_t l = 0; l < static_cast<std::size_t>(cfg.layers); ++l) {
      router.route_layer(l, p_drift, ids);
    }
    trace.append_step(ids);
  }
  return trace;
}

/// Steps of the synthetic stand-in for the ESFT trace: as many as that trace has tokens, so a
/// replay of `make_synthetic_trace(synthetic_preset("default"), default_synthetic_steps,
/// default_synthetic_seed)` is comparable with one of `import_esft`.
inline constexpr std::size_t default_synthetic_steps = 8222;
/// Seed of the synthetic stand-in for the ESFT trace.
inline constexpr std::uint64_t default_synthetic_seed = 1;

/// @brief The default router's dynamics for a model of another shape: its working set scaled to
/// `top_k` as the model presets scale it (`round(0.85 k)`, at least 1, at most `experts`).
/// @code
/// auto cfg = wisp::synthetic_for_shape({.layers = 24, .experts = 60, .top_k = 4});
/// @endcode
/// @throws wisp::logic_error if the shape is invalid.
[[nodiscard]] inline synthetic_config synthetic_for_shape(const moe_shape& shape) {
  shape.validate();
  synthetic_config c;
  c.layers = shape.layers;
  c.experts = shape.experts;
  c.top_k = shape.top_k;
  c.working_set = std::clamp<std::int32_t>((17 * shape.top_k + 10) / 20, 1, shape.experts);
  return c;
}

/// @brief Names accepted by `synthetic_preset`: "default", one per model preset of
/// `wisp::model_presets()` (same names, same order; the shape comes from the preset), then
/// "uniform".
[[nodiscard]] inline std::vector<std::string_view> synthetic_preset_names() {
  std::vector<std::string_view> names{"default"};
  for (const model_preset_entry& p : model_presets()) {
    names.push_back(p.config.name);
  }
  names.push_back("uniform");
  return names;
}

/// @brief A named configuration.
/// - "default" / "deepseek-v2-lite": the ESFT trace's shape (26 layers, 64 experts, top-6),
///   calibrated to its per-layer LRU hit rates;
/// - every other model preset ("qwen3-30b-a3b", "olmoe-1b-7b", "mixtral-8x7b",
///   "qwen1.5-moe-a2.7b"): the same locality model at the preset's shape (`synthetic_for_shape`),
///   with a flatter popularity for mixtral-8x7b (8 experts, top-2);
/// - "uniform": the default shape with no skew or locality (every draw uniform), a baseline.
/// @throws wisp::logic_error listing the valid names if `name` is unknown.
[[nodiscard]] inline synthetic_config synthetic_preset(std::string_view name) {
  if (name == "default" || name == "deepseek-v2-lite") {
    return synthetic_config{};
  }
  if (const model_preset_entry* p = find_model_preset(name)) {
    synthetic_config c = synthetic_for_shape(p->config.spec().shape());
    if (name == "mixtral-8x7b") {
      c.zipf_exponent = 0.3;
    }
    return c;
  }
  if (name == "uniform") {
    synthetic_config c;
    c.zipf_exponent = 0;
    c.zipf_spread = 0;
    c.locality = 0;
    c.coactivation = 0;
    c.drift_rate = 0;
    return c;
  }
  std::string valid;
  for (const auto n : synthetic_preset_names()) {
    valid += valid.empty() ? "" : ", ";
    valid += n;
  }
  WISP_FAIL(wisp::logic_error, "unknown synthetic preset '", name, "' (valid: ", valid, ")");
}

}  // namespace wisp
