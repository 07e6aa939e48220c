// SPDX-License-Identifier: Apache-2.0
// Test support for the predict area: random traces with co-activation structure, the ESFT trace
// when present, and a brute-force co-activation oracle (counts recomputed from every stored pass).
#pragma once

#include "support/traces.hpp"

#include <wisp/predict/coactivation.hpp>
#include <wisp/predict/routing_predictor.hpp>
#include <wisp/trace/esft.hpp>
#include <wisp/trace/routing_trace.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <random>
#include <span>
#include <vector>

namespace wisp::test {

/// A random trace whose layer l+1 routing depends on layer l's (a shifted copy with noise), so
/// co-activations carry signal. Distinct ids per row; weights decreasing along the row.
inline routing_trace structured_trace(moe_shape shape, std::size_t steps, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  routing_trace t(shape);
  std::vector<std::int32_t> ids(shape.ids_per_step());
  std::vector<float> weights(ids.size());
  for (std::size_t s = 0; s < steps; ++s) {
    if (s % 10 == 0) {
      t.begin_sequence();
    }
    for (std::int32_t l = 0; l < shape.layers; ++l) {
      std::vector<std::int32_t> row;
      while (static_cast<std::int32_t>(row.size()) < shape.top_k) {
        std::int32_t e;
        if (l > 0 && rng() % 3 != 0) {  // follow the previous layer's choice, shifted
          const auto prev = ids[static_cast<std::size_t>((l - 1) * shape.top_k) + row.size()];
          e = (prev * 3 + l + static_cast<std::int32_t>(rng() % 2)) % shape.experts;
        } else {
          e = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(shape.experts));
        }
        if (std::find(row.begin(), row.end(), e) == row.end()) {
          row.push_back(e);
        }
      }
      for (std::int32_t j = 0; j < shape.top_k; ++j) {
        ids[static_cast<std::size_t>(l * shape.top_k + j)] = row[static_cast<std::size_t>(j)];
        weights[static_cast<std::size_t>(l * shape.top_k + j)] = 1.0f / static_cast<float>(j + 2);
      }
    }
    t.append_step(ids, weights);
  }
  return t;
}

/// Brute-force co-activation: every learned pass is kept, counts are recomputed per query in
/// double with the forgetting weights f^(passes after it).
class coactivation_oracle {
 public:
  coactivation_oracle(moe_shape shape, coactivation_config config)
      : shape_(shape), config_(config) {}

  void learn(const routing_pass& pass) {
    std::vector<std::vector<std::int32_t>> ids;
    for (std::int32_t l = 0; l < shape_.layers; ++l) {
      ids.emplace_back(pass.experts(l).begin(), pass.experts(l).end());
    }
    passes_.push_back(std::move(ids));
  }

  [[nodiscard]] double weight(std::size_t p) const {
    return std::pow(config_.forgetting, static_cast<double>(passes_.size() - 1 - p));
  }
  [[nodiscard]] double passes() const {
    double n = 0;
    for (std::size_t p = 0; p < passes_.size(); ++p) {
      n += weight(p);
    }
    return n;
  }
  [[nodiscard]] bool fired(std::size_t p, std::int32_t l, std::int32_t e) const {
    const auto& row = passes_[p][static_cast<std::size_t>(l)];
    return std::find(row.begin(), row.end(), e) != row.end();
  }
  [[nodiscard]] double marginal(std::int32_t l, std::int32_t i) const {
    double n = 0;
    for (std::size_t p = 0; p < passes_.size(); ++p) {
      n += fired(p, l, i) ? weight(p) : 0.0;
    }
    return n;
  }
  [[nodiscard]] double pair(std::int32_t s, std::int32_t i, std::int32_t t, std::int32_t j) const {
    if (t - s < 1 || t - s > config_.span()) {
      return 0.0;
    }
    double n = 0;
    for (std::size_t p = 0; p < passes_.size(); ++p) {
      n += fired(p, s, i) && fired(p, t, j) ? weight(p) : 0.0;
    }
    return n;
  }
  /// The documented score, term by term.
  [[nodiscard]] std::vector<double> score(const routing_pass& pass, std::int32_t target) const {
    std::vector<double> out(static_cast<std::size_t>(shape_.experts), 0.0);
    double total = 0.0;
    const std::int32_t o = pass.observed();
    for (std::int32_t s = std::max(0, o - config_.window); s < o; ++s) {
      const std::int32_t delta = target - s;
      if (delta > config_.span()) {
        continue;
      }
      const double w = std::pow(static_cast<double>(config_.decay), delta - 1);
      for (const std::int32_t i : pass.experts(s)) {
        const double m = marginal(s, i);
        if (m <= 0) {
          continue;
        }
        for (std::int32_t j = 0; j < shape_.experts; ++j) {
          out[static_cast<std::size_t>(j)] += w * pair(s, i, target, j) / m;
        }
        total += w;
      }
    }
    if (total > 0) {
      for (double& x : out) {
        x /= total;
      }
    } else if (passes() > 0) {
      for (std::int32_t j = 0; j < shape_.experts; ++j) {
        out[static_cast<std::size_t>(j)] = marginal(target, j) / passes();
      }
    }
    return out;
  }

 private:
  moe_shape shape_;
  coactivation_config config_;
  std::vector<std::vector<std::vector<std::int32_t>>> passes_;
};

/// Observes the first `layers` layers of `step` into `pass` (cleared first).
inline void observe_prefix(routing_pass& pass, const routing_trace& t, std::size_t step,
                           std::int32_t layers) {
  pass.clear();
  std::vector<std::int32_t> ids(static_cast<std::size_t>(t.shape().top_k));
  for (std::int32_t l = 0; l < layers; ++l) {
    for (std::int32_t j = 0; j < t.shape().top_k; ++j) {
      ids[static_cast<std::size_t>(j)] = t.expert(step, l, j);
    }
    pass.observe(l, ids);
  }
}

}  // namespace wisp::test
