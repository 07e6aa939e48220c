// SPDX-License-Identifier: Apache-2.0
// host_swiglu_kernel against two oracles, on every instruction set this CPU runs:
// - a double-precision oracle of the math the file comment states (inputs and activations
//   rounded to bf16, bf16 x bf16 products): every output within the fp32 summation bound, plus
//   one bf16 step of each activation whose exact value lies within that bound of a rounding
//   boundary (the only place where the order of the fp32 sums can change a rounded value);
// - the textbook fp32 expert (`swiglu_activation` / `swiglu_output`, what reference_fused_moe
//   computes) within the documented normwise `host_swiglu_tolerance`.
// Then the properties: a row's output is the same bits in any batch, task grouping or thread
// count; and the refusals.
#include "support/expect_error.hpp"

#include <wisp/core/executor.hpp>
#include <wisp/kernel/bf16.hpp>
#include <wisp/kernel/host_swiglu.hpp>
#include <wisp/kernel/swiglu.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <stdexcept>
#include <vector>

namespace {

using wisp::bf16;
using wisp::host_isa;
using wisp::test::expect_error;

std::vector<host_isa> supported_isas() {
  std::vector<host_isa> out;
  for (const host_isa isa :
       {host_isa::scalar, host_isa::avx2, host_isa::avx512, host_isa::avx512_bf16}) {
    if (wisp::host_isa_supported(isa)) {
      out.push_back(isa);
    }
  }
  return out;
}

std::size_t sz(std::int32_t v) {
  return static_cast<std::size_t>(v);
}

// Experts with weights of standard deviation 1/sqrt(fan-in), as trained layers have, and inputs.
struct expert_case {
  wisp::swiglu_shape shape;
  std::vector<bf16> weights;  // [experts x row]
  std::int32_t experts;

  expert_case(wisp::swiglu_shape s, std::int32_t n, std::uint32_t seed)
      : shape(s), weights(sz(n) * 3 * s.matrix_values()), experts(n) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const std::size_t m = s.matrix_values();
    for (std::size_t e = 0; e < sz(n); ++e) {
      bf16* row = weights.data() + e * 3 * m;
      for (std::size_t v = 0; v < 2 * m; ++v) {
        row[v] = wisp::to_bf16(normal(rng) / std::sqrt(static_cast<float>(s.hidden)));
      }
      for (std::size_t v = 2 * m; v < 3 * m; ++v) {
        row[v] = wisp::to_bf16(normal(rng) / std::sqrt(static_cast<float>(s.intermediate)));
      }
    }
  }
  [[nodiscard]] const bf16* expert(std::int32_t e) const {
    return weights.data() + sz(e) * 3 * shape.matrix_values();
  }
};

std::vector<float> random_inputs(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) {
    v = normal(rng);
  }
  return x;
}

double round_bf16(double v) {
  return wisp::to_float(wisp::to_bf16(static_cast<float>(v)));
}

// The distance from v to the nearest point where rounding to bf16 changes (the midpoints between
// neighbouring bf16 values), and one bf16 step at v.
struct bf16_boundary {
  double distance;
  double step;
};
bf16_boundary nearest_boundary(float v) {
  const float r = wisp::to_float(wisp::to_bf16(v));
  const double step = std::ldexp(1.0, std::ilogb(r == 0.0f ? v : r) - 7);
  const double lo = static_cast<double>(r) - step / 2;
  const double hi = static_cast<double>(r) + step / 2;
  return {std::min(std::abs(v - lo), std::abs(hi - v)), step};
}

// Checks `y` (rows x H) of one expert against the double oracle of the stated math.
void expect_matches_oracle(const wisp::swiglu_shape& s, const bf16* w, const float* x,
                           const float* y, std::int32_t rows, const char* what) {
  const std::size_t h = sz(s.hidden);
  const std::size_t in = sz(s.intermediate);
  const std::size_t m = s.matrix_values();
  constexpr double u = 0x1p-24;  // fp32 unit roundoff
  std::vector<double> act(in);
  std::vector<double> slack(in);  // a bf16 step where the rounding of act[i] may go either way
  for (std::size_t r = 0; r < sz(rows); ++r) {
    std::vector<double> xb(h);
    for (std::size_t k = 0; k < h; ++k) {
      xb[k] = round_bf16(x[r * h + k]);
    }
    for (std::size_t i = 0; i < in; ++i) {
      double g = 0, up = 0, gabs = 0, uabs = 0;
      for (std::size_t k = 0; k < h; ++k) {
        const double wg = wisp::to_float(w[i * h + k]);
        const double wu = wisp::to_float(w[m + i * h + k]);
        g += wg * xb[k];
        up += wu * xb[k];
        gabs += std::abs(wg * xb[k]);
        uabs += std::abs(wu * xb[k]);
      }
      // fp32 sums in any order are within n u sum|terms| (+ the float conversion itself).
      const double dg = (static_cast<double>(h) + 2) * u * gabs;
      const double du = (static_cast<double>(h) + 2) * u * uabs;
      const float a = wisp::swiglu(static_cast<float>(g), static_cast<float>(up));
      // d swiglu / dg = u silu'(g), |silu'| <= 1.1; d / du = silu(g), |silu(g)| <= |g| + 1.
      const double da = 1.1 * (std::abs(up) + du) * dg + (std::abs(g) + dg + 1) * du +
                        8 * u * std::abs(static_cast<double>(a)) + 1e-30;
      act[i] = round_bf16(a);
      const bf16_boundary b = nearest_boundary(a);
      slack[i] = b.distance <= da ? b.step : 0.0;
    }
    for (std::size_t o = 0; o < h; ++o) {
      double want = 0, abs_sum = 0, flips = 0;
      for (std::size_t i = 0; i < in; ++i) {
        const double wd = wisp::to_float(w[2 * m + o * in + i]);
        want += wd * act[i];
        abs_sum += std::abs(wd * act[i]);
        flips += std::abs(wd) * slack[i];
      }
      const double bound = (static_cast<double>(in) + 2) * u * (abs_sum + flips) + flips;
      ASSERT_LE(std::abs(static_cast<double>(y[r * h + o]) - want), bound)
          << what << ": row " << r << ", output " << o << ": got " << y[r * h + o] << ", want "
          << want;
    }
  }
}

// The textbook fp32 expert (reference_fused_moe's element rules) of one row: normwise error.
double normwise_error(const wisp::swiglu_shape& s, const bf16* w, const float* x, const float* y) {
  std::vector<float> act(sz(s.intermediate));
  for (std::int32_t i = 0; i < s.intermediate; ++i) {
    act[sz(i)] = wisp::swiglu_activation(w, x, s, i);
  }
  double err = 0, norm = 0;
  for (std::int32_t o = 0; o < s.hidden; ++o) {
    const double ref = wisp::swiglu_output(w, act.data(), s, o);
    err = std::max(err, std::abs(static_cast<double>(y[sz(o)]) - ref));
    norm = std::max(norm, std::abs(ref));
  }
  return err / norm;
}

// Shapes with vector tails of every kind: H and I below, at and off multiples of 8, 16 and 32.
const wisp::swiglu_shape kShapes[] = {
    {.hidden = 1, .intermediate = 1},   {.hidden = 7, .intermediate = 5},
    {.hidden = 32, .intermediate = 16}, {.hidden = 70, .intermediate = 45},
    {.hidden = 96, .intermediate = 33}, {.hidden = 257, .intermediate = 130},
};

TEST(HostSwiglu, EveryIsaMatchesTheOracleOfItsStatedMath) {
  wisp::thread_pool pool(2);
  for (const host_isa isa : supported_isas()) {
    for (const wisp::swiglu_shape& s : kShapes) {
      const expert_case c(s, 3, 11);
      for (const std::int32_t rows : {1, 2, 7, 8, 9, 17}) {
        const auto x = random_inputs(sz(rows) * sz(s.hidden), 100 + sz(rows));
        std::vector<float> y(x.size(), -1.0f);
        wisp::host_swiglu_kernel kernel(s, {.threads = 3, .isa = isa}, pool.executor());
        const wisp::host_expert_task task{
            .weights = c.expert(1), .x = x.data(), .y = y.data(), .rows = rows};
        kernel(std::span(&task, 1));
        SCOPED_TRACE(::testing::Message() << wisp::to_string(isa) << " H=" << s.hidden
                                          << " I=" << s.intermediate << " rows=" << rows);
        expect_matches_oracle(s, c.expert(1), x.data(), y.data(), rows, "oracle");
      }
    }
  }
}

TEST(HostSwiglu, IsWithinTheStatedToleranceOfTheFp32Reference) {
  // Real widths (DeepSeek-V2-Lite's hidden size; its expert width halved to keep the test short)
  // and small ones; the worst normwise error is reported so a regression towards the bound shows.
  const wisp::swiglu_shape shapes[] = {{.hidden = 2048, .intermediate = 352},
                                       {.hidden = 96, .intermediate = 33}};
  for (const host_isa isa : supported_isas()) {
    for (const wisp::swiglu_shape& s : shapes) {
      const expert_case c(s, 2, 5);
      const std::int32_t rows = 3;
      const auto x = random_inputs(sz(rows) * sz(s.hidden), 6);
      std::vector<float> y(x.size());
      wisp::host_swiglu_kernel kernel(s, {.threads = 1, .isa = isa});
      const wisp::host_expert_task task{
          .weights = c.expert(0), .x = x.data(), .y = y.data(), .rows = rows};
      kernel(std::span(&task, 1));
      double worst = 0;
      for (std::size_t r = 0; r < sz(rows); ++r) {
        worst = std::max(worst, normwise_error(s, c.expert(0), x.data() + r * sz(s.hidden),
                                               y.data() + r * sz(s.hidden)));
      }
      RecordProperty(std::string(wisp::to_string(isa)) + "_H" + std::to_string(s.hidden),
                     std::to_string(worst));
      EXPECT_LE(worst, wisp::host_swiglu_tolerance) << wisp::to_string(isa) << " H=" << s.hidden;
      EXPECT_GT(worst, 0.0) << "bf16 activations should differ from fp32 ones somewhere";
    }
  }
}

TEST(HostSwiglu, ARowIsTheSameBitsInAnyBatchTaskGroupingOrThreadCount) {
  const wisp::swiglu_shape s{.hidden = 70, .intermediate = 45};
  const expert_case c(s, 4, 3);
  const std::int32_t rows[] = {1, 9, 17, 3};  // one task per expert
  std::vector<std::vector<float>> x;
  for (std::size_t t = 0; t < 4; ++t) {
    x.push_back(random_inputs(sz(rows[t]) * sz(s.hidden), 40 + static_cast<std::uint32_t>(t)));
  }
  wisp::thread_pool pool(3);
  for (const host_isa isa : supported_isas()) {
    // Alone: each row of each task computed by itself, on one thread.
    std::vector<std::vector<float>> alone;
    wisp::host_swiglu_kernel single(s, {.threads = 1, .isa = isa});
    for (std::size_t t = 0; t < 4; ++t) {
      std::vector<float> y(x[t].size());
      for (std::size_t r = 0; r < sz(rows[t]); ++r) {
        const wisp::host_expert_task task{.weights = c.expert(static_cast<std::int32_t>(t)),
                                          .x = x[t].data() + r * sz(s.hidden),
                                          .y = y.data() + r * sz(s.hidden),
                                          .rows = 1};
        single(std::span(&task, 1));
      }
      alone.push_back(std::move(y));
    }
    for (const std::int32_t threads : {1, 2, 4}) {
      wisp::host_swiglu_kernel kernel(s, {.threads = threads, .isa = isa}, pool.executor());
      std::vector<std::vector<float>> y;
      std::vector<wisp::host_expert_task> tasks;
      for (std::size_t t = 0; t < 4; ++t) {
        y.emplace_back(x[t].size(), 0.0f);
        tasks.push_back({.weights = c.expert(static_cast<std::int32_t>(t)),
                         .x = x[t].data(),
                         .y = y.back().data(),
                         .rows = rows[t]});
      }
      kernel(tasks);
      for (std::size_t t = 0; t < 4; ++t) {
        EXPECT_EQ(y[t], alone[t]) << wisp::to_string(isa) << ", " << threads << " threads, task "
                                  << t;
      }
    }
  }
}

// An executor that runs the tasks it takes on the calling thread, before `execute` returns, and
// refuses (throws) after `capacity` of them.
struct limited_inline_executor {
  std::shared_ptr<int> taken = std::make_shared<int>(0);
  int capacity = 0;
  void execute(const std::function<void()>& task) const {
    if (*taken >= capacity) {
      throw std::runtime_error("limited_inline_executor: no more tasks");
    }
    ++*taken;
    task();
  }
};

TEST(HostSwiglu, CompletesTheSameOnAnExecutorThatRunsInlineOrRefusesTasks) {
  // Threads that wait for a phase to end must not wait for a task that runs on the caller before
  // the caller's own share, nor for one the executor refused.
  const wisp::swiglu_shape s{.hidden = 40, .intermediate = 24};
  const expert_case c(s, 2, 4);
  const auto x = random_inputs(5 * sz(s.hidden), 8);
  const auto run = [&](wisp::host_swiglu_kernel& kernel) {
    std::vector<float> y0(x.size()), y1(x.size());
    const std::vector<wisp::host_expert_task> tasks = {
        {.weights = c.expert(0), .x = x.data(), .y = y0.data(), .rows = 5},
        {.weights = c.expert(1), .x = x.data(), .y = y1.data(), .rows = 5}};
    kernel(tasks);
    y0.insert(y0.end(), y1.begin(), y1.end());
    return y0;
  };
  wisp::host_swiglu_kernel single(s, {.threads = 1});
  const std::vector<float> want = run(single);
  for (const int capacity : {0, 1, 2, 100}) {
    wisp::host_swiglu_kernel kernel(s, {.threads = 4},
                                    limited_inline_executor{.capacity = capacity});
    EXPECT_EQ(run(kernel), want) << "capacity " << capacity;
  }
}

TEST(HostSwiglu, KeepsItsScratchAcrossCallsOfEverySize) {
  // A large call after a small one and a small one after a large one (the scratch grows once and
  // is reused): every result equals a fresh kernel's.
  const wisp::swiglu_shape s{.hidden = 40, .intermediate = 24};
  const expert_case c(s, 1, 9);
  wisp::host_swiglu_kernel kept(s, {.threads = 1});
  for (const std::int32_t rows : {2, 64, 1, 33}) {
    const auto x = random_inputs(sz(rows) * sz(s.hidden), 70 + sz(rows));
    std::vector<float> a(x.size()), b(x.size());
    const wisp::host_expert_task ta{
        .weights = c.expert(0), .x = x.data(), .y = a.data(), .rows = rows};
    const wisp::host_expert_task tb{
        .weights = c.expert(0), .x = x.data(), .y = b.data(), .rows = rows};
    kept(std::span(&ta, 1));
    wisp::host_swiglu_kernel fresh(s, {.threads = 1});
    fresh(std::span(&tb, 1));
    EXPECT_EQ(a, b) << rows << " rows";
  }
}

TEST(HostSwiglu, BestIsaIsSupportedAndNamed) {
  EXPECT_TRUE(wisp::host_isa_supported(wisp::best_host_isa()));
  EXPECT_TRUE(wisp::host_isa_supported(host_isa::scalar));
  EXPECT_EQ(wisp::from_string<host_isa>(wisp::to_string(host_isa::avx512_bf16)),
            host_isa::avx512_bf16);
  const wisp::host_swiglu_kernel kernel({.hidden = 4, .intermediate = 4});
  EXPECT_EQ(kernel.isa(), wisp::best_host_isa());
  EXPECT_EQ(kernel.threads(), 1);
}

TEST(HostSwiglu, RefusesBadInputNamingTheValuesAndWritesNothing) {
  const wisp::swiglu_shape s{.hidden = 8, .intermediate = 4};
  expect_error<wisp::logic_error>(
      [] { wisp::host_swiglu_kernel({.hidden = 0, .intermediate = 4}); }, "hidden 0");
  expect_error<wisp::logic_error>([&] { wisp::host_swiglu_kernel(s, {.threads = 0}); },
                                  "threads must be >= 1, got 0");
  for (const host_isa isa : {host_isa::avx2, host_isa::avx512, host_isa::avx512_bf16}) {
    if (!wisp::host_isa_supported(isa)) {
      expect_error<wisp::logic_error>([&] { wisp::host_swiglu_kernel(s, {.isa = isa}); },
                                      "does not run the");
    }
  }
  const expert_case c(s, 1, 1);
  const auto x = random_inputs(2 * 8, 2);
  std::vector<float> y(16, 7.0f);
  wisp::host_swiglu_kernel kernel(s);
  const wisp::host_expert_task good{
      .weights = c.expert(0), .x = x.data(), .y = y.data(), .rows = 2};
  const auto refuse = [&](wisp::host_expert_task bad, const char* message) {
    const std::vector<wisp::host_expert_task> tasks = {good, bad};
    expect_error<wisp::logic_error>([&] { kernel(tasks); }, message);
    EXPECT_EQ(y, std::vector<float>(16, 7.0f)) << "a refused call wrote an output";
  };
  wisp::host_expert_task bad = good;
  bad.rows = 0;
  refuse(bad, "task 1 has 0 rows, need >= 1");
  bad = good;
  bad.x = nullptr;
  refuse(bad, "task 1 has a null");
  bad = good;
  bad.weights = reinterpret_cast<const bf16*>(reinterpret_cast<const char*>(c.expert(0)) + 1);
  refuse(bad, "task 1's weights are not 2-byte aligned");
  kernel(std::span<const wisp::host_expert_task>{});  // no task: nothing to do
}

}  // namespace
