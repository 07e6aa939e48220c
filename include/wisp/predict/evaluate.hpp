// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Online precision@k / recall@k of a `routing_predictor` on a routing trace: for every
/// step, every observed prefix and every distance, predict, compare with what the trace routed,
/// then learn the step (predict, then learn, as a live server would).
///
/// For distance `d`, a target layer `t >= d` is predicted once per step from layers `0 .. t-d`
/// (layer `t - d` is the last one observed; distance 1 is the next layer). With `hits` the
/// predicted experts the trace routed at `t`:
///
///     precision@k = sum hits / (k x predictions)        recall@k = sum hits / (top_k x
///     predictions)
///
/// (they are equal when `k == top_k`).
/// @code
/// wisp::coactivation_predictor table(trace.shape());
/// const std::int32_t distances[] = {1, 2, 3, 4};
/// const std::int32_t ks[] = {6};
/// auto quality = wisp::evaluate_online(trace, table, distances, ks);
/// // quality[0].precision: precision@6 for the next layer
/// @endcode
#pragma once

#include <wisp/core/error.hpp>
#include <wisp/predict/routing_predictor.hpp>
#include <wisp/trace/routing_trace.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace wisp {

/// @brief Prediction quality at one (distance, k).
struct prediction_quality {
  std::int32_t distance = 1;      ///< target layer - last observed layer
  std::int32_t k = 1;             ///< experts predicted per target
  std::uint64_t predictions = 0;  ///< (step, target layer) pairs predicted
  std::uint64_t hits = 0;         ///< predicted experts that were routed
  double precision = 0.0;         ///< hits / (k x predictions)
  double recall = 0.0;            ///< hits / (top_k x predictions)
};

/// @brief Runs `predictor` online over `trace` (see the file description) and returns one entry
/// per (distance, k), distances outer, in the order given.
///
/// O(steps x layers x distances x (score cost + experts x max k)); allocates its buffers once.
/// `predictor` learns every step of the trace.
/// @throws wisp::logic_error if a distance is outside `[1, layers - 1]`, a k outside
///   `[1, experts]`, either list is empty, or the predictor throws.
template <routing_predictor Predictor>
std::vector<prediction_quality> evaluate_online(const routing_trace& trace, Predictor& predictor,
                                                std::span<const std::int32_t> distances,
                                                std::span<const std::int32_t> ks) {
  const moe_shape& shape = trace.shape();
  WISP_EXPECTS(!distances.empty() && !ks.empty(), "evaluate_online: ", distances.size(),
               " distances and ", ks.size(), " values of k given; both lists must be non-empty");
  for (const std::int32_t d : distances) {
    WISP_EXPECTS(d >= 1 && d < shape.layers, "evaluate_online: distance ", d,
                 " is outside [1, layers - 1 = ", shape.layers - 1, "]");
  }
  for (const std::int32_t k : ks) {
    WISP_EXPECTS(k >= 1 && k <= shape.experts, "evaluate_online: k = ", k,
                 " is outside [1, experts = ", shape.experts, "]");
  }
  const std::int32_t max_k = *std::max_element(ks.begin(), ks.end());
  std::vector<prediction_quality> out;
  for (const std::int32_t d : distances) {
    for (const std::int32_t k : ks) {
      out.push_back(prediction_quality{d, k, 0, 0, 0.0, 0.0});
    }
  }
  routing_pass pass(shape);
  std::vector<float> scores(static_cast<std::size_t>(shape.experts));
  std::vector<std::int32_t> best(static_cast<std::size_t>(max_k));
  std::vector<char> routed(static_cast<std::size_t>(shape.experts), 0);
  std::vector<std::int32_t> layer_ids(static_cast<std::size_t>(shape.top_k));
  for (std::size_t step = 0; step < trace.steps(); ++step) {
    pass.clear();
    for (std::int32_t observed = 0; observed < shape.layers; ++observed) {
      if (observed >= 1) {
        for (std::size_t di = 0; di < distances.size(); ++di) {
          const std::int32_t target = observed - 1 + distances[di];
          if (target >= shape.layers) {
            continue;
          }
          predictor.score(pass, target, scores);
          select_top_k(scores, best);
          for (std::int32_t j = 0; j < shape.top_k; ++j) {
            routed[static_cast<std::size_t>(trace.expert(step, target, j))] = 1;
          }
          for (std::size_t ki = 0; ki < ks.size(); ++ki) {
            prediction_quality& q = out[di * ks.size() + ki];
            ++q.predictions;
            for (std::int32_t r = 0; r < q.k; ++r) {
              q.hits += routed[static_cast<std::size_t>(best[static_cast<std::size_t>(r)])] != 0;
            }
          }
          for (std::int32_t j = 0; j < shape.top_k; ++j) {
            routed[static_cast<std::size_t>(trace.expert(step, target, j))] = 0;
          }
        }
      }
      for (std::int32_t j = 0; j < shape.top_k; ++j) {
        layer_ids[static_cast<std::size_t>(j)] = trace.expert(step, observed, j);
      }
      pass.observe(observed, layer_ids);
    }
    predictor.learn(pass);
  }
  for (prediction_quality& q : out) {
    if (q.predictions > 0) {
      const double n = static_cast<double>(q.predictions);
      q.precision = static_cast<double>(q.hits) / (n * q.k);
      q.recall = static_cast<double>(q.hits) / (n * shape.top_k);
    }
  }
  return out;
}

}  // namespace wisp
