// SPDX-License-Identifier: Apache-2.0
// Shared pieces of the example engine's tests: a tiny model, its workload, and one arm's run.
#pragma once

#include "../../examples/engine/engine.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace engine_test {

using namespace wisp_engine;

inline model_config tiny() {
  model_config c;
  c.layers = 2;
  c.experts = 8;
  c.top_k = 2;
  c.hidden = 32;
  c.intermediate = 16;
  c.heads = 2;
  c.vocab = 64;
  c.block_tokens = 4;
  c.seed = 11;
  return c;
}

/// `n` requests of 5-11 prompt tokens and 6-7 generated, routed from trace step `101 * i`.
inline std::vector<request> tiny_requests(const model_config& c, std::int32_t n,
                                          std::int32_t first = 0) {
  std::vector<request> out;
  for (std::int32_t i = first; i < first + n; ++i) {
    request r;
    r.id = i - first;
    for (std::int32_t t = 0; t < 5 + 3 * (i % 3); ++t) {
      r.prompt.push_back((i * 7 + t * 13) % c.vocab);
    }
    r.max_new_tokens = 6 + i % 2;
    r.trace_offset = static_cast<std::uint64_t>(i) * 101;
    out.push_back(std::move(r));
  }
  return out;
}

/// Two warm-up and six evaluated tiny requests over a 1024-step synthetic trace.
inline workload tiny_workload(const model_config& c) {
  workload w;
  w.name = "tiny";
  w.trace = synthetic_domain(c, 1024, 5);
  w.warmup = tiny_requests(c, 2, 6);
  w.evaluated = tiny_requests(c, 6);
  return w;
}

struct fixture {
  model_config cfg = tiny();
  model_weights weights{cfg};
  workload wl = tiny_workload(cfg);

  [[nodiscard]] engine_options options(arm_kind arm,
                                       routing_source src = routing_source::trace) const {
    engine_options o;
    o.arm = arm;
    o.budget_bytes = 1 << 20;  // everything fits
    o.max_running = 3;
    o.routing = src;
    o.dynamic_burst = 2;
    return o;
  }
  /// Bytes of `rows` expert rows per layer plus the KV floor every baseline keeps.
  [[nodiscard]] std::uint64_t budget_for_rows(std::int32_t rows, std::int32_t max_running) const {
    return static_cast<std::uint64_t>(rows) * cfg.layers * cfg.expert_bytes() +
           workload_floor(wl.evaluated, max_running).bytes(alloc_spec(cfg)).count();
  }
  [[nodiscard]] arm_result run(const engine_options& o) const {
    return run_arm(weights, o, wl, record_warmup(weights, wl, o));
  }
};

inline void expect_same(const arm_result& a, const arm_result& b) {
  ASSERT_TRUE(a.feasible) << a.note;
  ASSERT_TRUE(b.feasible) << b.note;
  EXPECT_EQ(a.outputs, b.outputs) << a.name << " " << a.policy << " vs " << b.name;
  EXPECT_EQ(a.logits_hashes, b.logits_hashes) << a.name << " " << a.policy << " vs " << b.name;
}

// ------------------------------------------------ micro shapes for hand-computed schedules

inline constexpr double us = 1e-6;

// Fixed compute costs (seconds): what the hand-computed schedules below add up.
inline double modelled(compute_op op, std::int64_t units) {
  switch (op) {
    case compute_op::embed:
      return 1 * us;
    case compute_op::attention:
      return 10 * us;
    case compute_op::plan:
      return 1 * us;
    case compute_op::kernel:
      return 5 * us * static_cast<double>(units);
    case compute_op::combine:
      return 2 * us;
    case compute_op::head:
      return 3 * us;
    case compute_op::host:
      return 5 * us * static_cast<double>(units);
  }
  return 0;
}

inline model_config micro(std::int32_t layers, std::int32_t top_k) {
  model_config c;
  c.layers = layers;
  c.experts = 4;
  c.top_k = top_k;
  c.hidden = 8;
  c.intermediate = 4;
  c.heads = 2;
  c.vocab = 16;
  c.block_tokens = 4;
  return c;
}

// One evaluated session (and one warm-up) routed by `steps` (each step: layers x k ids).
inline workload micro_workload(const model_config& c,
                               const std::vector<std::vector<std::int32_t>>& steps,
                               std::int32_t prompt, std::int32_t generate) {
  workload w;
  w.trace = wisp::routing_trace(wisp::moe_shape{c.layers, c.experts, c.top_k});
  for (const auto& s : steps) {
    w.trace.append_step(s);
  }
  request r;
  r.prompt.assign(static_cast<std::size_t>(prompt), 1);
  r.max_new_tokens = generate;
  w.warmup = {r};
  w.evaluated = {r};
  return w;
}

inline arm_result run_micro(const model_config& c, const workload& w, engine_options o) {
  const model_weights weights(c);
  o.clock = modelled;
  o.max_running = 1;
  o.budget_bytes = 1 << 20;
  return run_arm(weights, o, w, record_warmup(weights, w, o));
}

}  // namespace engine_test
