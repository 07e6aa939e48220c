// SPDX-License-Identifier: Apache-2.0
// The example engine's modelled device against hand-computed schedules (the link's cost, copies
// a launch waits for, a layer-ahead copy overlapping compute), static-hot's staging against a
// list-based LRU oracle, the warm-up split of the workloads and real ESFT routing.
#include "support.hpp"
#include "support/paths.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <list>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace engine_test;

// on-demand, 1 layer, k = 1: each forward is embed 1, attention 10, plan 1, then the routed
// expert's copy (latency 4 + 10 on the link) that the kernel (5) waits for, combine 2, head 3:
// 36 us for the prefill (1 token) and 36 us for the one decode step.
TEST(EngineTimeline, OnDemandMatchesTheHandComputedSchedule) {
  const model_config c = micro(1, 1);
  const workload w = micro_workload(c, {{2}, {3}, {1}}, 1, 2);
  engine_options o;
  o.arm = arm_kind::on_demand;
  o.link = {.bytes_per_second = static_cast<double>(c.expert_bytes()) / (10 * us),
            .latency_seconds = 4 * us};
  const arm_result r = run_micro(c, w, o);
  ASSERT_TRUE(r.feasible) << r.note;
  EXPECT_NEAR(r.ttft_s, 36 * us, 1e-12);
  EXPECT_NEAR(r.tpot_s, 36 * us, 1e-12);
  EXPECT_NEAR(r.prefill_tok_s, 1 / (36 * us), 1e-3);
  EXPECT_NEAR(r.decode_tok_s, 1 / (36 * us), 1e-3);
  EXPECT_NEAR(r.seconds, 72 * us, 1e-12);
  EXPECT_NEAR(r.stall_seconds, 28 * us, 1e-12);  // two copies of 14 us on the critical path
  EXPECT_EQ(r.bytes_moved, 2 * c.expert_bytes());
  EXPECT_EQ(r.expert_copies, 2u);
  EXPECT_DOUBLE_EQ(r.hit_rate, 0.0);
}

// layer-offload, 3 layers of 4 experts, k = 2, a 2-token prefill (wide: 2 x 2 >= 4): layer 0
// resident, layers 1 and 2 streamed whole (one copy of 4 rows: 4 + 40 us) through one staging
// layer, each issued during the previous layer after its planning:
//   embed [0,1]; L0 attention [1,11], plan [11,12], kernel 4 positions [12,32], combine [32,34]
//   copy L1 [12,56] (after L0's plan: overlaps L0's kernel)
//   L1 attention [34,44], plan [44,45], kernel waits for the copy: [56,76], combine [76,78]
//   copy L2 [76,120] (the staging rows are free only when L1's kernel ends)
//   L2 attention [78,88], plan [88,89], kernel [120,140], combine [140,142]; head [142,145]
TEST(EngineTimeline, LayerOffloadIssuesAWholeLayerOneLayerAhead) {
  const model_config c = micro(3, 2);
  const std::vector<std::int32_t> step = {0, 1, 2, 3, 0, 1};  // 3 layers x k = 2
  const workload w = micro_workload(c, {step, step, step}, 2, 1);
  const model_weights weights(c);
  engine_options o;
  o.arm = arm_kind::layer_offload;
  o.link = {.bytes_per_second = static_cast<double>(c.expert_bytes()) / (10 * us),
            .latency_seconds = 4 * us};
  o.clock = modelled;
  o.max_running = 1;
  // Room for two layers of experts beside the floor: one resident, one staging.
  o.budget_bytes =
      2 * 4 * c.expert_bytes() + workload_floor(w.evaluated, 1).bytes(alloc_spec(c)).count();
  const arm_result r = run_arm(weights, o, w, record_warmup(weights, w, o));
  ASSERT_TRUE(r.feasible) << r.note;
  EXPECT_EQ(r.cap, 1);  // resident layers
  EXPECT_NEAR(r.ttft_s, 145 * us, 1e-12);
  EXPECT_NEAR(r.prefill_tok_s, 2 / (145 * us), 1e-3);
  EXPECT_NEAR(r.stall_seconds, (11 + 31) * us, 1e-12);
  EXPECT_EQ(r.bytes_moved, 8 * c.expert_bytes());
}

// pager+prefetch, 2 layers of 4 experts, k = 1, one row per layer, routing (l0, l1) = (s, s) at
// step s, so the warm-up (steps 0-2) teaches the predictor that layer 1 routes what layer 0 did.
// With 20 us kernels, each forward (embed 1; per layer attention 10, plan 1, kernel 20,
// combine 2; head 3) runs, from its start t:
//   L0 plan ends t+12; its miss is copied [t+12, t+26]; kernel [t+26, t+46]
//   the link is idle [t+26, t+46]: layer 1's predicted expert is copied [t+26, t+40]
//   L1 attention [t+48, t+58], plan [t+58, t+59]: a hit; kernel [t+59, t+79]; head ends t+84
// 84 us per forward, against 98 for the pager alone (layer 1's copy [t+59, t+73] in the way).
// With 5 us kernels the idle time (5 us) holds no copy (14 us): nothing is prefetched and the
// run is the pager's.
TEST(EngineTimeline, PrefetchFillsOnlyTheIdleLinkWithThePredictedExpert) {
  const model_config c = micro(2, 1);
  const workload w = micro_workload(c, {{0, 0}, {1, 1}, {2, 2}}, 1, 3);
  engine_options o;
  o.link = {.bytes_per_second = static_cast<double>(c.expert_bytes()) / (10 * us),
            .latency_seconds = 4 * us};
  o.cap = 1;
  const model_weights weights(c);
  auto run = [&](arm_kind arm, double kernel_us) {
    engine_options x = o;
    x.arm = arm;
    x.clock = [kernel_us](compute_op op, std::int64_t units) {
      return op == compute_op::kernel ? kernel_us * us * static_cast<double>(units)
                                      : modelled(op, units);
    };
    x.max_running = 1;
    x.budget_bytes = 1 << 20;
    return run_arm(weights, x, w, record_warmup(weights, w, x));
  };
  const arm_result pager = run(arm_kind::pager, 20);
  const arm_result prefetch = run(arm_kind::pager_prefetch, 20);
  expect_same(pager, prefetch);
  EXPECT_NEAR(pager.seconds, 3 * 98 * us, 1e-12);
  EXPECT_NEAR(prefetch.seconds, 3 * 84 * us, 1e-12);
  EXPECT_NEAR(prefetch.ttft_s, 84 * us, 1e-12);
  EXPECT_NEAR(prefetch.tpot_s, 84 * us, 1e-12);
  EXPECT_EQ(pager.expert_copies, 6u);
  EXPECT_EQ(prefetch.expert_copies, 3u);  // layer 0's misses only
  EXPECT_EQ(prefetch.prefetch_copies, 3u);
  EXPECT_EQ(prefetch.prefetch_useful, 3u);
  EXPECT_EQ(prefetch.bytes_moved, 6 * c.expert_bytes());
  EXPECT_DOUBLE_EQ(prefetch.hit_rate, 0.5);

  const arm_result narrow = run(arm_kind::pager_prefetch, 5);
  const arm_result plain = run(arm_kind::pager, 5);
  EXPECT_EQ(narrow.prefetch_copies, 0u);
  EXPECT_EQ(narrow.seconds, plain.seconds);
  EXPECT_EQ(narrow.expert_copies, plain.expert_copies);
}

// Everything but the link is fixed: the run at 5 GB/s takes longer than at 25 GB/s by exactly
// bytes x (1/5 - 1/25) ns, and the same bytes move (on-demand: every copy is on the critical
// path).
TEST(EngineTimeline, TheLinkBandwidthChangesExactlyTheCopyTime) {
  const fixture f;
  engine_options o = f.options(arm_kind::on_demand);
  o.clock = modelled;
  o.link.bytes_per_second = 25e9;
  const arm_result fast = f.run(o);
  o.link.bytes_per_second = 5e9;
  const arm_result slow = f.run(o);
  expect_same(fast, slow);
  ASSERT_EQ(fast.bytes_moved, slow.bytes_moved);
  const double extra = static_cast<double>(fast.bytes_moved) * (1 / 5e9 - 1 / 25e9);
  EXPECT_NEAR(slow.seconds - fast.seconds, extra, 1e-9 * slow.seconds);
  EXPECT_LT(slow.decode_tok_s, fast.decode_tok_s);
  // The pager moves fewer bytes, so the same change costs it less.
  o.arm = arm_kind::pager;
  o.cap = f.cfg.top_k + 2;
  const arm_result pager_slow = f.run(o);
  o.link.bytes_per_second = 25e9;
  const arm_result pager_fast = f.run(o);
  EXPECT_LT(pager_slow.seconds - pager_fast.seconds, extra);
  EXPECT_GT(pager_slow.seconds, pager_fast.seconds);
}

// The modelled figures do not depend on the host: two runs with the same compute model give the
// same times bit for bit.
TEST(EngineTimeline, ModelledRunsAreDeterministic) {
  const fixture f;
  for (const arm_kind arm : {arm_kind::layer_offload, arm_kind::static_hot, arm_kind::pager}) {
    engine_options o = f.options(arm);
    o.clock = modelled;
    o.budget_bytes = f.budget_for_rows(f.cfg.top_k + 2, o.max_running);
    const arm_result a = f.run(o), b = f.run(o);
    EXPECT_EQ(a.seconds, b.seconds);
    EXPECT_EQ(a.ttft_s, b.ttft_s);
    EXPECT_EQ(a.decode_tok_s, b.decode_tok_s);
  }
}

// ------------------------------------------------------------------ static-hot's staging

// Calls of one token (k distinct experts, never more misses than staging rows): the copies are
// the misses of pinned experts plus an LRU list of S staged experts.
TEST(EngineStaticHot, StagingMatchesAnLruListOracle) {
  std::mt19937 rng(3);
  const std::int32_t E = 16, K = 3, cap = 9;
  std::vector<std::int32_t> order(E);
  std::iota(order.begin(), order.end(), 0);
  for (std::int32_t hot = 0; hot <= cap - K; ++hot) {
    const std::span<const std::int32_t> pinned(order.data(), static_cast<std::size_t>(hot));
    detail::hot_layer layer(E, K, pinned, cap);
    std::list<std::int32_t> lru;  // front: most recent
    const auto staged = static_cast<std::size_t>(cap - hot);
    std::uint64_t copies = 0, oracle = 0;
    for (int call = 0; call < 400; ++call) {
      std::vector<std::int32_t> ids;
      while (ids.size() < static_cast<std::size_t>(K)) {
        const auto e = static_cast<std::int32_t>(rng() % (rng() % 2 ? 6u : 16u));  // skewed
        if (std::find(ids.begin(), ids.end(), e) == ids.end()) {
          ids.push_back(e);
        }
      }
      ASSERT_EQ(layer.plan(ids), 1u);
      copies += layer.launches()[0].copied.size();
      std::vector<std::int32_t> misses;
      for (const std::int32_t e : ids) {
        if (e < hot) {
          continue;
        }
        const auto it = std::find(lru.begin(), lru.end(), e);
        if (it != lru.end()) {
          lru.splice(lru.begin(), lru, it);
        } else {
          misses.push_back(e);
        }
      }
      for (const std::int32_t e : misses) {
        if (lru.size() == staged) {
          lru.pop_back();
        }
        lru.push_front(e);
        ++oracle;
      }
    }
    EXPECT_EQ(copies, oracle) << "hot " << hot;
  }
}

// Wide calls: every routed expert is visible in exactly one launch, at a row that holds it, no
// two experts of a launch share a row, and only misses are copied.
TEST(EngineStaticHot, WideCallsSplitIntoLaunchesThatCoverEveryExpertOnce) {
  std::mt19937 rng(5);
  const std::int32_t E = 12, cap = 6;
  const std::vector<std::int32_t> pinned = {4, 7};
  detail::hot_layer layer(E, 2, pinned, cap);
  std::vector<std::int32_t> row_holds(static_cast<std::size_t>(cap), -1);
  row_holds[0] = 4;
  row_holds[1] = 7;
  for (int call = 0; call < 200; ++call) {
    std::vector<std::int32_t> ids(24);
    for (auto& e : ids) {
      e = static_cast<std::int32_t>(rng() % E);
    }
    std::vector<std::int32_t> held_before = row_holds;
    const std::size_t n = layer.plan(ids);
    std::vector<int> visible(static_cast<std::size_t>(E), 0);
    for (std::size_t i = 0; i < n; ++i) {
      const auto& l = layer.launches()[i];
      std::vector<int> row_used(static_cast<std::size_t>(cap), 0);
      for (const std::int32_t e : l.copied) {  // copies land before the launch reads
        const auto it = std::find(l.experts.begin(), l.experts.end(), e);
        ASSERT_NE(it, l.experts.end());
        row_holds[static_cast<std::size_t>(
            l.rows[static_cast<std::size_t>(it - l.experts.begin())])] = e;
      }
      for (std::size_t j = 0; j < l.experts.size(); ++j) {
        ++visible[static_cast<std::size_t>(l.experts[j])];
        EXPECT_EQ(row_holds[static_cast<std::size_t>(l.rows[j])], l.experts[j]);
        EXPECT_EQ(++row_used[static_cast<std::size_t>(l.rows[j])], 1);
      }
    }
    for (std::int32_t e = 0; e < E; ++e) {
      const bool routed = std::find(ids.begin(), ids.end(), e) != ids.end();
      EXPECT_EQ(visible[static_cast<std::size_t>(e)], routed ? 1 : 0);
    }
    std::size_t copied = 0, misses = 0;
    for (std::size_t i = 0; i < n; ++i) {
      copied += layer.launches()[i].copied.size();
    }
    for (std::int32_t e = 0; e < E; ++e) {
      const bool routed = std::find(ids.begin(), ids.end(), e) != ids.end();
      const bool held = std::find(held_before.begin(), held_before.end(), e) != held_before.end();
      misses += routed && !held ? 1 : 0;
    }
    EXPECT_EQ(copied, misses);
    EXPECT_EQ(row_holds[0], 4);  // pinned rows never change
    EXPECT_EQ(row_holds[1], 7);
  }
}

// ------------------------------------------------------------------ workloads

TEST(EngineWorkload, TheWarmUpIsTheFirstFifthAndNeverEvaluated) {
  const model_config c = tiny();
  for (const char* name : {"chat", "shift"}) {
    const workload w = synthetic_workload(name, c, 16);
    EXPECT_EQ(w.warmup.size(), 4u);
    EXPECT_EQ(w.evaluated.size(), 16u);
    for (const request& r : w.evaluated) {
      EXPECT_LT(r.trace_offset + r.prompt.size() + static_cast<std::size_t>(r.max_new_tokens),
                w.trace.steps());
    }
  }
  EXPECT_THROW((void)synthetic_workload("nope", c, 4), wisp::logic_error);
  EXPECT_THROW((void)synthetic_workload("chat", c, 0), wisp::logic_error);
}

TEST(EngineWorkload, ShiftChangesTheRoutingDomainEveryPhase) {
  const model_config c = tiny();
  const workload w = synthetic_workload("shift", c, 16);
  ASSERT_EQ(w.trace.steps(), 4u * 4096u);  // four domains
  // Sessions of phase p (4 sessions each; the warm-up is phase 0) route from domain p % 4.
  for (std::size_t i = 0; i < w.evaluated.size(); ++i) {
    const std::size_t phase = (i + w.warmup.size()) / 4;
    EXPECT_EQ(w.evaluated[i].trace_offset / 4096, phase % 4) << "session " << i;
  }
}

TEST(EngineWorkload, ARecordedTraceGivesOneSessionPerSequence) {
  const model_config c = tiny();
  wisp::routing_trace t(wisp::moe_shape{c.layers, c.experts, c.top_k});
  std::vector<std::int32_t> step;
  for (std::int32_t l = 0; l < c.layers; ++l) {
    for (std::int32_t j = 0; j < c.top_k; ++j) {
      step.push_back(j);
    }
  }
  const std::size_t lengths[] = {10, 1, 60, 7, 7, 9, 12, 30, 4, 5, 8};
  for (const std::size_t n : lengths) {
    t.begin_sequence();
    for (std::size_t i = 0; i < n; ++i) {
      t.append_step(step);
    }
  }
  const workload w = trace_workload(t, c);
  ASSERT_EQ(w.warmup.size() + w.evaluated.size(), 10u);  // the 1-step sequence is skipped
  EXPECT_EQ(w.warmup.size(), 2u);                        // 20%
  EXPECT_EQ(w.evaluated[0].prompt.size() + 3u, 7u);      // the third usable: 7 steps
  EXPECT_EQ(w.evaluated[0].max_new_tokens, 3);
  EXPECT_EQ(w.evaluated[0].trace_offset, 71u);
  const request& long_one = w.warmup[1];  // 60 steps: at most 24 generated
  EXPECT_EQ(long_one.max_new_tokens, 24);
  EXPECT_EQ(long_one.prompt.size(), 36u);
  EXPECT_EQ(trace_workload(t, c, 3).evaluated.size(), 3u);
  model_config other = c;
  other.experts = 16;
  EXPECT_THROW((void)trace_workload(t, other), wisp::logic_error);
}

// Real routing: the ESFT trace (DeepSeek-V2-Lite, 26 layers x 64 experts, top-6) drives a tiny
// model of that shape; every arm gives the same bytes, and static-hot's profile beats nothing it
// has not seen.
TEST(EngineWorkload, RealEsftRoutingKeepsEveryArmIdentical) {
  const std::filesystem::path dir =
      wisp::test::traces_dir() / "raw" / "esft_deepseek_v2_lite_intent";
  if (!std::filesystem::exists(dir)) {
    GTEST_SKIP() << "no ESFT trace at " << dir;
  }
  wisp::routing_trace t = read_routing_trace(dir.string()).trace;
  model_config c = tiny();
  c.layers = t.shape().layers;
  c.experts = t.shape().experts;
  c.top_k = t.shape().top_k;
  c.hidden = 16;
  c.intermediate = 8;
  const workload w = trace_workload(std::move(t), c, 2);
  EXPECT_EQ(w.warmup.size(), 25u);  // 20% of 127 sequences
  const model_weights weights(c);
  engine_options o;
  o.max_running = 2;
  o.arm = arm_kind::full;
  o.budget_bytes = full_fit_budget(c, w, o.max_running);
  const warmup_log log = record_warmup(weights, w, o);
  const arm_result ref = run_arm(weights, o, w, log);
  o.budget_bytes = static_cast<std::uint64_t>(21) * c.layers * c.expert_bytes() +
                   workload_floor(w.evaluated, o.max_running).bytes(alloc_spec(c)).count();
  o.device = wisp::device_profile_preset("rtx-4090");
  for (const arm_kind arm :
       {arm_kind::layer_offload, arm_kind::on_demand, arm_kind::static_hot,
        arm_kind::llama_cpp_cache, arm_kind::cpu_experts, arm_kind::cpu_moe_layers, arm_kind::pager,
        arm_kind::tiered, arm_kind::pager_hybrid}) {
    SCOPED_TRACE(std::string(arm_name(arm)));
    o.arm = arm;
    const arm_result r = run_arm(weights, o, w, log);
    expect_same(ref, r);
    if (arm == arm_kind::static_hot || arm == arm_kind::pager || arm == arm_kind::tiered ||
        arm == arm_kind::pager_hybrid) {
      EXPECT_EQ(r.cap, 21);  // about a third of each layer's experts
    }
    if (arm != arm_kind::layer_offload && arm != arm_kind::on_demand) {
      EXPECT_GT(r.hit_rate, 0.0);
    }
  }
}

}  // namespace
