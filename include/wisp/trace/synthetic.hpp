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

}  // namespace detail

/// @brief Generates `steps` steps of synthetic routing. Deterministic in (`cfg`, `steps`, `seed`).
/// Sequence starts are recorded (the first step always starts one).
/// Time O(steps * layers * top_k * experts), memory O(steps * layers * top_k) for the trace.
/// @throws wisp::logic_error if `cfg` is invalid or `steps > routing_trace::max_steps`.
[[nodiscard]] inline routing_trace make_synthetic_trace(const synthetic_config& cfg,
                                                        std::size_t steps, std::uint64_t seed) {
  cfg.validate();
  WISP_EXPECTS(steps <= routing_trace::max_steps, "too many steps: ", steps);
  const auto L = static_cast<std::size_t>(cfg.layers);
  const auto E = static_cast<std::size_t>(cfg.experts);
  const auto K = static_cast<std::size_t>(cfg.top_k);
  const auto W = static_cast<std::size_t>(cfg.working_set);
  wisp::detail::xoshiro256ss rng(seed);

  // Mass of each component, quantised once. Scale 2^40 keeps sums of <= 65536 terms below 2^57.
  constexpr double scale = 1099511627776.0;  // 2^40
  const double base_mass = 1.0 - cfg.locality - cfg.coactivation;
  const auto hot_weight =
      static_cast<std::uint64_t>(std::llround(cfg.locality * scale / static_cast<double>(W)));
  const auto link_weight =
      static_cast<std::uint64_t>(std::llround(cfg.coactivation * scale / static_cast<double>(K)));

  // Per-layer popularity: Zipf weights over a random ranking; every expert keeps weight >= 1.
  std::vector<std::uint64_t> base(L * E);
  std::vector<std::uint32_t> link(L * E);  // link[l*E + e]: image at layer l of expert e at l-1
  std::vector<std::uint32_t> perm(E);
  for (std::size_t l = 0; l < L; ++l) {
    const double u = static_cast<double>(rng.below(2001)) / 1000.0 - 1.0;
    const double s = cfg.zipf_exponent * (1.0 + cfg.zipf_spread * u);
    for (std::size_t e = 0; e < E; ++e) {
      perm[e] = static_cast<std::uint32_t>(e);
    }
    for (std::size_t e = E; e > 1; --e) {  // Fisher-Yates
      std::swap(perm[e - 1], perm[rng.below(e)]);
    }
    double norm = 0;
    for (std::size_t r = 0; r < E; ++r) {
      norm += 1.0 / std::pow(static_cast<double>(r + 1), s);
    }
    for (std::size_t r = 0; r < E; ++r) {
      const double p = 1.0 / std::pow(static_cast<double>(r + 1), s) / norm;
      base[l * E + perm[r]] = std::max<std::uint64_t>(
          1, static_cast<std::uint64_t>(std::llround(p * base_mass * scale)));
    }
    for (std::size_t e = 0; e < E; ++e) {
      perm[e] = static_cast<std::uint32_t>(e);
    }
    for (std::size_t e = E; e > 1; --e) {
      std::swap(perm[e - 1], perm[rng.below(e)]);
    }
    std::copy(perm.begin(), perm.end(), link.begin() + static_cast<std::ptrdiff_t>(l * E));
  }

  std::vector<std::uint64_t> w(E);
  // Draws `count` distinct experts of layer l from the popularity distribution into `out`.
  auto draw_popular = [&](std::size_t l, std::size_t count, std::uint32_t* out) {
    std::uint64_t total = 0;
    for (std::size_t e = 0; e < E; ++e) {
      w[e] = base[l * E + e];
      total += w[e];
    }
    for (std::size_t i = 0; i < count; ++i) {
      const std::size_t e = detail::draw_weighted(w, total, rng);
      out[i] = static_cast<std::uint32_t>(e);
      total -= w[e];
      w[e] = 0;
    }
  };

  // Topic pool: each topic holds a working set per layer.
  const auto T = static_cast<std::size_t>(cfg.topics);
  std::vector<std::uint32_t> topics(T * L * W);
  for (std::size_t t = 0; t < T; ++t) {
    for (std::size_t l = 0; l < L; ++l) {
      draw_popular(l, W, topics.data() + (t * L + l) * W);
    }
  }

  const std::uint64_t p_new_sequence =
      wisp::detail::probability_threshold(1.0 / cfg.mean_sequence_length);
  const std::uint64_t p_shift = wisp::detail::probability_threshold(cfg.topic_shift_probability);
  const std::uint64_t p_drift = wisp::detail::probability_threshold(cfg.drift_rate);

  routing_trace trace({cfg.layers, cfg.experts, cfg.top_k});
  trace.reserve(steps);
  std::vector<std::uint32_t> hot(L * W);       // current working sets
  std::vector<std::uint8_t> in_hot(L * E, 0);  // membership of `hot`
  std::vector<std::int32_t> ids(L * K);
  std::vector<std::uint32_t> fresh(W + 1);
  auto set_topic = [&](std::size_t t) {
    std::fill(in_hot.begin(), in_hot.end(), std::uint8_t{0});
    std::copy_n(topics.begin() + static_cast<std::ptrdiff_t>(t * L * W), L * W, hot.begin());
    for (std::size_t l = 0; l < L; ++l) {
      for (std::size_t i = 0; i < W; ++i) {
        in_hot[l * E + hot[l * W + i]] = 1;
      }
    }
  };

  for (std::size_t step = 0; step < steps; ++step) {
    if (step == 0 || rng.chance(p_new_sequence)) {
      trace.begin_sequence();
      set_topic(static_cast<std::size_t>(rng.below(T)));
    } else if (rng.chance(p_shift)) {
      set_topic(static_cast<std::size_t>(rng.below(T)));
    }
    for (std::size_t l = 0; l < L; ++l) {
      // Drift: replace one hot expert by a popular expert outside the working set.
      if (W < E && rng.chance(p_drift)) {
        const std::size_t victim = static_cast<std::size_t>(rng.below(W));
        std::uint64_t total = 0;
        for (std::size_t e = 0; e < E; ++e) {
          w[e] = in_hot[l * E + e] != 0 ? 0 : base[l * E + e];
          total += w[e];
        }
        const std::size_t e = detail::draw_weighted(w, total, rng);
        in_hot[l * E + hot[l * W + victim]] = 0;
        hot[l * W + victim] = static_cast<std::uint32_t>(e);
        in_hot[l * E + e] = 1;
      }
      std::uint64_t total = 0;
      for (std::size_t e = 0; e < E; ++e) {
        w[e] = base[l * E + e] + (in_hot[l * E + e] != 0 ? hot_weight : 0);
      }
      if (l > 0) {
        for (std::size_t j = 0; j < K; ++j) {
          w[link[l * E + static_cast<std::size_t>(ids[(l - 1) * K + j])]] += link_weight;
        }
      }
      for (std::size_t e = 0; e < E; ++e) {
        total += w[e];
      }
      for (std::size_t j = 0; j < K; ++j) {
        const std::size_t e = detail::draw_weighted(w, total, rng);
        ids[l * K + j] = static_cast<std::int32_t>(e);
        total -= w[e];
        w[e] = 0;
      }
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
