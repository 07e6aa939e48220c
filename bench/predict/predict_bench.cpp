// SPDX-License-Identifier: Apache-2.0
// Co-activation scoring: one target layer's 64 scores from 4 source layers of top-6 experts, and
// the top-6 of them — what a prefetcher does once per layer. The table is learned from the ESFT
// trace (or the synthetic default trace when it is absent; the label says which), and the passes
// scored are the trace's own, cycled.
//
// Baseline in the same binary: the same estimate written straightforwardly, as a user would
// without wisp: a dense table of conditional probabilities P(j at t | i at s) precomputed in
// double, summed per fired expert, then a std::partial_sort of the 64 indices for the top 6. Its
// scores equal wisp's within 1e-5 on every pass (checked at start-up; a mismatch skips it).
//
// Quote the time per iteration (one scoring + top-6) of predict/coactivation and the ratio
//   baseline/dense_double  /  predict/coactivation
// from one run.
#include "support/bench_trace.hpp"

#include <wisp/predict/coactivation.hpp>
#include <wisp/predict/routing_predictor.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

namespace {

constexpr std::int32_t k_best = 6;

struct setup {
  wisp::routing_trace trace{{1, 1, 1}};
  std::string source;
  std::unique_ptr<wisp::coactivation_predictor> table;
  std::vector<wisp::routing_pass> passes;  // 4 layers observed; target = layer 4
  std::vector<double> conditional;         // baseline: [4 sources x E x E], P(j at 4 | i at s)
};

constexpr std::int32_t target = 4;

const setup& fixture() {
  static const setup s = [] {
    setup out;
    auto loaded = wisp::bench::load_bench_trace();
    out.trace = std::move(loaded.trace);
    out.source = std::move(loaded.source);
    const auto shape = out.trace.shape();
    out.table = std::make_unique<wisp::coactivation_predictor>(shape);
    wisp::routing_pass pass(shape);
    for (std::size_t step = 0; step < out.trace.steps(); ++step) {
      pass.assign(out.trace, step);
      out.table->learn(pass);
    }
    std::vector<std::int32_t> ids(static_cast<std::size_t>(shape.top_k));
    for (std::size_t step = 0; step < 1024 && step < out.trace.steps(); ++step) {
      wisp::routing_pass p(shape);
      for (std::int32_t l = 0; l < target; ++l) {
        for (std::int32_t j = 0; j < shape.top_k; ++j) {
          ids[static_cast<std::size_t>(j)] = out.trace.expert(step, l, j);
        }
        p.observe(l, ids);
      }
      out.passes.push_back(std::move(p));
    }
    const auto e = static_cast<std::size_t>(shape.experts);
    out.conditional.assign(target * e * e, 0.0);
    for (std::int32_t s = 0; s < target; ++s) {
      for (std::int32_t i = 0; i < shape.experts; ++i) {
        for (std::int32_t j = 0; j < shape.experts; ++j) {
          out.conditional[(static_cast<std::size_t>(s) * e + static_cast<std::size_t>(i)) * e +
                          static_cast<std::size_t>(j)] = out.table->conditional(s, i, target, j);
        }
      }
    }
    return out;
  }();
  return s;
}

// The baseline: weights 0.5^(delta - 1), weighted mean over fired experts, partial_sort.
void baseline_top(const setup& s, const wisp::routing_pass& pass, std::vector<double>& scores,
                  std::vector<std::int32_t>& order, std::array<std::int32_t, k_best>& best) {
  const auto e = static_cast<std::size_t>(s.trace.shape().experts);
  std::fill(scores.begin(), scores.end(), 0.0);
  double total = 0;
  for (std::int32_t src = 0; src < target; ++src) {
    const double w = std::pow(0.5, target - src - 1);
    for (const std::int32_t i : pass.experts(src)) {
      if (s.table->marginal(src, i) <= 0) {
        continue;
      }
      const double* row = s.conditional.data() +
                          (static_cast<std::size_t>(src) * e + static_cast<std::size_t>(i)) * e;
      for (std::size_t j = 0; j < e; ++j) {
        scores[j] += w * row[j];
      }
      total += w;
    }
  }
  for (double& x : scores) {
    x /= total;
  }
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(
      order.begin(), order.begin() + k_best, order.end(), [&](std::int32_t a, std::int32_t b) {
        return scores[static_cast<std::size_t>(a)] > scores[static_cast<std::size_t>(b)] ||
               (scores[static_cast<std::size_t>(a)] == scores[static_cast<std::size_t>(b)] &&
                a < b);
      });
  std::copy(order.begin(), order.begin() + k_best, best.begin());
}

void wisp_score(benchmark::State& state) {
  const setup& s = fixture();
  std::vector<float> scores(static_cast<std::size_t>(s.trace.shape().experts));
  std::array<std::int32_t, k_best> best{};
  std::size_t i = 0;
  for (auto _ : state) {
    s.table->score(s.passes[i], target, scores);
    wisp::select_top_k(scores, best);
    benchmark::DoNotOptimize(best.data());
    i = i + 1 == s.passes.size() ? 0 : i + 1;
  }
  state.SetLabel(s.source + ", 64 experts, 4 source layers, top-6");
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}

void baseline_score(benchmark::State& state) {
  const setup& s = fixture();
  const auto e = static_cast<std::size_t>(s.trace.shape().experts);
  std::vector<double> scores(e);
  std::vector<std::int32_t> order(e);
  std::array<std::int32_t, k_best> best{};
  std::vector<float> wisp_scores(e);
  for (const wisp::routing_pass& pass : s.passes) {  // the same scores as wisp, or no figure
    baseline_top(s, pass, scores, order, best);
    s.table->score(pass, target, wisp_scores);
    for (std::size_t j = 0; j < e; ++j) {
      if (std::abs(scores[j] - static_cast<double>(wisp_scores[j])) > 1e-5) {
        state.SkipWithError("baseline scores differ from wisp's");
        return;
      }
    }
  }
  std::size_t i = 0;
  for (auto _ : state) {
    baseline_top(s, s.passes[i], scores, order, best);
    benchmark::DoNotOptimize(best.data());
    i = i + 1 == s.passes.size() ? 0 : i + 1;
  }
  state.SetLabel(s.source + " (same scores as wisp)");
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}

BENCHMARK(baseline_score)->Name("baseline/dense_double");
BENCHMARK(wisp_score)->Name("predict/coactivation");

}  // namespace
