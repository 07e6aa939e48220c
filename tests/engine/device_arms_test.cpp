// SPDX-License-Identifier: Apache-2.0
// The example engine on a modelled GPU: a device profile's roofline charges computed by hand; the
// arms of the low-VRAM regime (cpu-experts, cpu-moe-layers, llama.cpp-cache, pager+hybrid) against
// hand-computed schedules; determinism of the modelled times; the deterministic arms' copies, bytes
// and outputs the same under the profile as under the host's CPU time.
#include "support.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace {

using namespace engine_test;

// Micro link: 16 B/us and 4 us per copy, so a micro expert (192 B) copies in 16 us and one
// token's hidden state (8 x 2 B) crosses in 5 us.
constexpr wisp::link_model micro_link{.bytes_per_second = 16e6, .latency_seconds = 4e-6};

// A profile with round figures: 1 GB/s device memory (1 B per ns), 1 TFLOP/s, 2 us per launch,
// 4 us per copy (the host sync too).
wisp::device_profile round_profile() {
  wisp::device_profile p;
  p.name = "round";
  p.device_memory_gbps = 1;
  p.peak_bf16_tflops = 1;
  p.h2d_gbps = 0.016;
  p.copy_latency_us = 4;
  p.launch_us = 2;
  p.host_memory_gbps = 1;
  p.host_threads = 1;
  return p;
}

// `full`, 1 layer (H = 8, E = 4, k = 1, vocab 16): each op is the larger of its bytes at 1 B/ns
// and its FLOPs at 1 FLOP/ps, plus a 2 us launch; `full` needs no host sync.
//   embed      T x H x (2 + 4) = 48 B                                      2.048 us
//   attention  weights 2 x (4H^2 + E H) = 576 B, K and V 2 x H x 4 B per position read and
//              written ((history + T) x 64 B), activations 4 x H x T x 4 = 128 B
//              prefill (history 1): 576 + 128 + 128 = 832 B               2.832 us
//              decode  (history 2): 576 + 192 + 128 = 896 B               2.896 us
//   kernel     one expert (192 B) + 2 x H x positions (16 B)               2.208 us
//   combine    4 x H x T x (k + 2) = 96 B                                  2.096 us
//   head       2 x V x H + 4 x H x T = 288 B                               2.288 us
// prefill 11.472 us, decode 11.536 us. The FLOP side is smaller everywhere (under 1 ns).
TEST(EngineDevice, AProfileChargesTheRooflineComputedByHand) {
  const model_config c = micro(1, 1);
  const workload w = micro_workload(c, {{2}, {3}, {1}}, 1, 2);
  const model_weights weights(c);
  engine_options o;
  o.arm = arm_kind::full;
  o.device = round_profile();
  o.link = micro_link;
  o.max_running = 1;
  o.budget_bytes = 1 << 20;
  const arm_result r = run_arm(weights, o, w, record_warmup(weights, w, o));
  ASSERT_TRUE(r.feasible) << r.note;
  EXPECT_NEAR(r.ttft_s, 11.472 * us, 1e-12);
  EXPECT_NEAR(r.tpot_s, 11.536 * us, 1e-12);
  EXPECT_NEAR(r.seconds, (11.472 + 11.536) * us, 1e-12);
  // on-demand adds one host sync (4 us) and one copy (16 us) the kernel waits for.
  o.arm = arm_kind::on_demand;
  const arm_result d = run_arm(weights, o, w, record_warmup(weights, w, o));
  EXPECT_NEAR(d.ttft_s, (11.472 + 4 + 16) * us, 1e-12);
  EXPECT_NEAR(d.stall_seconds, 2 * 16 * us, 1e-12);
  expect_same(r, d);
}

// Modelled time does not depend on the host: the same run twice gives the same times, bit for
// bit (what lets the spread of an arm's runs be 1.00 on a shared machine).
TEST(EngineDevice, ModelledTimesAreTheSameInEveryRun) {
  const fixture f;
  for (const arm_kind arm : {arm_kind::static_hot, arm_kind::cpu_experts, arm_kind::pager_hybrid,
                             arm_kind::llama_cpp_cache}) {
    SCOPED_TRACE(std::string(arm_name(arm)));
    engine_options o = f.options(arm);
    o.device = wisp::device_profile_preset("rtx-4090");
    o.link = o.device->link();
    o.budget_bytes = f.budget_for_rows(f.cfg.top_k + 2, o.max_running);
    const arm_result a = f.run(o);
    const arm_result b = f.run(o);
    expect_same(a, b);
    EXPECT_EQ(a.seconds, b.seconds);
    EXPECT_EQ(a.decode_tok_s, b.decode_tok_s);
    EXPECT_EQ(a.prefill_tok_s, b.prefill_tok_s);
    EXPECT_EQ(a.host_seconds, b.host_seconds);
  }
}

// What an arm copies does not depend on how compute is charged, except where the timeline feeds
// a decision (pager+prefetch fills idle link time; cpu-experts and pager+hybrid weigh the
// host against the link): the same copies, bytes and outputs under a profile and under the host's
// CPU time, so `--device host` reproduces the engine's earlier figures.
TEST(EngineDevice, TheDeterministicArmsCopyTheSameUnderEveryClock) {
  const fixture f;
  for (const arm_kind arm :
       {arm_kind::full, arm_kind::layer_offload, arm_kind::on_demand, arm_kind::static_hot,
        arm_kind::llama_cpp_cache, arm_kind::pager, arm_kind::pager_plan, arm_kind::pager_dynamic,
        arm_kind::pager_zip, arm_kind::tiered}) {
    SCOPED_TRACE(std::string(arm_name(arm)));
    engine_options o = f.options(arm);
    o.budget_bytes =
        f.budget_for_rows(arm == arm_kind::full ? f.cfg.experts : f.cfg.top_k + 2, o.max_running);
    const arm_result host = f.run(o);
    o.device = wisp::device_profile_preset("l4");
    const arm_result gpu = f.run(o);
    expect_same(host, gpu);
    EXPECT_EQ(host.expert_copies, gpu.expert_copies);
    EXPECT_EQ(host.bytes_moved, gpu.bytes_moved);
    EXPECT_EQ(host.hit_rate, gpu.hit_rate);
    EXPECT_EQ(host.cap, gpu.cap);
    EXPECT_EQ(host.kv_blocks, gpu.kv_blocks);
  }
}

// Micro runs of the regime's arms: 1 layer of 4 experts, k = 1, the micro link, one session of a
// 1-token prompt and 5 generated tokens routed to experts 0, 2, 2, 3, 3 (the warm-up is the same
// session, replayed first). Compute from `modelled` (embed 1, attention 10, plan 1, kernel 5 per
// position, combine 2, head 3, host 5 per position): a forward whose expert is resident takes
// 1 + 10 + 1 + 5 + 2 + 3 = 22 us; one whose expert the host computes takes 1 + 10 + 1, then the
// hidden state out (5), the host (5), the output back (5), then combine and head: 32 us; one
// whose expert is copied takes 1 + 10 + 1, the copy (16), then 5 + 2 + 3: 38 us.
workload regime_workload(const model_config& c) {
  return micro_workload(c, {{0}, {2}, {2}, {3}, {3}}, 1, 5);
}

engine_options regime_options(arm_kind arm) {
  engine_options o;
  o.arm = arm;
  o.link = micro_link;
  return o;
}

// pager+hybrid at one row, the estimator remembering one call (an expert the previous call
// routed is worth one hit, the 5 us of host time it saves). One expert on the host costs 10 us
// of transfers + 5 us = 15 us, a copy 16 us. The warm-up leaves expert 3 resident; then
//   0: worth nothing, and a copy would evict 3, worth 5 us: host           32 us
//   2: worth nothing (3 is no longer worth anything either): host 15 < 16  32 us
//   2: worth 5 us: copy, objective 16 - 5 = 11 < 15                        38 us
//   3: worth nothing, a copy would evict 2 (worth 5 us): host             32 us
//   3: worth 5 us, 2 is worth nothing now: copy                            38 us
TEST(EngineRegime, PagerHybridMatchesTheHandComputedSchedule) {
  const model_config c = micro(1, 1);
  engine_options o = regime_options(arm_kind::pager_hybrid);
  o.cap = 1;
  o.value_rate = 1;
  const arm_result r = run_micro(c, regime_workload(c), o);
  ASSERT_TRUE(r.feasible) << r.note;
  EXPECT_NEAR(r.ttft_s, 32 * us, 1e-12);
  EXPECT_NEAR(r.seconds, (32 + 32 + 38 + 32 + 38) * us, 1e-12);
  EXPECT_NEAR(r.tpot_s, (32 + 38 + 32 + 38) / 4.0 * us, 1e-12);
  EXPECT_EQ(r.host_experts, 3u);
  EXPECT_EQ(r.host_positions, 3u);
  EXPECT_EQ(r.expert_copies, 2u);
  EXPECT_DOUBLE_EQ(r.hit_rate, 0.0);
  EXPECT_NEAR(r.host_seconds, 3 * 5 * us, 1e-12);
  EXPECT_EQ(r.bytes_moved, 2 * c.expert_bytes());
  const arm_result full = run_micro(c, regime_workload(c), regime_options(arm_kind::full));
  expect_same(full, r);
}

// cpu-experts at 3 rows a layer: 2 staging rows (2k), 1 pinned, the warm-up's most routed (2 and 3
// twice each: the lower id, 2). Host per position 5 us: alone, a host expert (15 us) beats a
// copy (16 us), so 0 and both 3s go to the host: 32 + 22 + 22 + 32 + 32 us. At 7 us per position
// (17 us) the copy wins and they are staged: 38 + 22 + 22 + 38 + 38 us.
TEST(EngineRegime, CpuExpertsMatchesTheHandComputedSchedule) {
  const model_config c = micro(1, 1);
  engine_options o = regime_options(arm_kind::cpu_experts);
  o.cap = 3;
  const arm_result r = run_micro(c, regime_workload(c), o);
  ASSERT_TRUE(r.feasible) << r.note;
  EXPECT_EQ(r.cap, 1);  // pinned per layer
  EXPECT_NEAR(r.seconds, (32 + 22 + 22 + 32 + 32) * us, 1e-12);
  EXPECT_EQ(r.host_experts, 3u);
  EXPECT_EQ(r.expert_copies, 0u);
  EXPECT_DOUBLE_EQ(r.hit_rate, 0.4);
  o.clock = [](compute_op op, std::int64_t units) {
    return op == compute_op::host ? 7 * us * static_cast<double>(units) : modelled(op, units);
  };
  const model_weights weights(c);
  o.max_running = 1;
  o.budget_bytes = 1 << 20;
  const workload w = regime_workload(c);
  const arm_result staged = run_arm(weights, o, w, record_warmup(weights, w, o));
  EXPECT_NEAR(staged.seconds, (38 + 22 + 22 + 38 + 38) * us, 1e-12);
  EXPECT_EQ(staged.host_experts, 0u);
  EXPECT_EQ(staged.expert_copies, 3u);
  expect_same(r, staged);
}

// cpu-moe-layers, 2 layers of 4 experts, k = 1, 3 rows a layer: 6 rows hold one whole layer (4)
// beside the 2k = 2 staging rows, so `--n-cpu-moe 1`: layer 0's experts stay on the host and
// every expert routed there is computed by the host, while layer 1 always hits. Decode calls
// route one expert per layer, so half of all accesses hit and the other half are host experts.
TEST(EngineRegime, CpuMoeLayersComputesTheFirstLayersOnTheHost) {
  const model_config c = micro(2, 1);
  engine_options o = regime_options(arm_kind::cpu_moe_layers);
  o.cap = 3;
  const workload w = micro_workload(c, {{1, 2}, {3, 0}, {2, 1}}, 1, 2);
  const arm_result r = run_micro(c, w, o);
  ASSERT_TRUE(r.feasible) << r.note;
  EXPECT_EQ(r.cap, 4);  // a resident layer's rows
  EXPECT_NE(r.note.find("--n-cpu-moe 1"), std::string::npos) << r.note;
  EXPECT_EQ(r.expert_copies, 0u);
  EXPECT_EQ(2 * r.host_experts, r.expert_accesses);
  EXPECT_DOUBLE_EQ(r.hit_rate, 0.5);
  expect_same(run_micro(c, w, regime_options(arm_kind::full)), r);
  // When every layer fits (4 rows a layer), nothing is left on the host.
  o.cap = 4;
  const arm_result all = run_micro(c, w, o);
  ASSERT_TRUE(all.feasible) << all.note;
  EXPECT_NE(all.note.find("--n-cpu-moe 0"), std::string::npos) << all.note;
  EXPECT_EQ(all.host_experts, 0u);
  EXPECT_DOUBLE_EQ(all.hit_rate, 1.0);
}

// A call of at least 32 rows copies its routed experts of a host layer to the staging rows, as
// llama.cpp offloads large batches: the 36-token prompt's layer-0 call routes all 4 experts and
// stages them; each decode call's expert is computed by the host.
TEST(EngineRegime, CpuMoeLayersStagesTheHostLayersOfCallsOf32RowsOrMore) {
  const model_config c = micro(2, 1);
  std::vector<std::vector<std::int32_t>> steps;
  for (std::int32_t s = 0; s < 40; ++s) {
    steps.push_back({s % 4, (s + 1) % 4});
  }
  const workload w = micro_workload(c, steps, 36, 3);
  engine_options o = regime_options(arm_kind::cpu_moe_layers);
  o.cap = 3;
  const arm_result r = run_micro(c, w, o);
  ASSERT_TRUE(r.feasible) << r.note;
  EXPECT_EQ(r.expert_copies, 4u);
  EXPECT_EQ(r.bytes_moved, 4 * c.expert_bytes());
  EXPECT_EQ(2 * (r.host_experts + r.expert_copies), r.expert_accesses);
  EXPECT_GE(r.host_experts, 1u);
  expect_same(run_micro(c, w, regime_options(arm_kind::full)), r);
}

// llama.cpp-cache, 2 layers of 4 experts, k = 2, 3 rows a layer: 6 rows, 2k = 4 staging rows, a
// global pool of 2 slots. Every layer routes experts 1 and 2, so each call misses both (the pool
// holds the other layer's) and uploads them in ascending order into the two LRU slots, 0 and 1:
// one merged copy of 2 rows, 4 + 24 = 28 us. A forward of one token:
//   embed [0,1]; L0 attention [1,11], plan [11,12], copy [12,40], kernel (2 positions) [40,50],
//   combine [50,52]; L1 attention [52,62], plan [62,63], copy [63,91] (its slots' reader, L0's
//   kernel, is done), kernel [91,101], combine [101,103]; head [103,106]
TEST(EngineRegime, LlamaCppCacheMergesSortedUploadsAsHandComputed) {
  const model_config c = micro(2, 2);
  const std::vector<std::int32_t> step = {1, 2, 2, 1};  // L0 (1, 2), L1 (2, 1): sorted uploads
  engine_options o = regime_options(arm_kind::llama_cpp_cache);
  o.cap = 3;
  const arm_result r = run_micro(c, micro_workload(c, {step, step, step}, 1, 2), o);
  ASSERT_TRUE(r.feasible) << r.note;
  EXPECT_NEAR(r.ttft_s, 106 * us, 1e-12);
  EXPECT_NEAR(r.seconds, 2 * 106 * us, 1e-12);
  EXPECT_EQ(r.expert_copies, 8u);
  EXPECT_EQ(r.upload_runs, 4u);
  EXPECT_EQ(r.bypassed_calls, 0u);
  EXPECT_EQ(r.bytes_moved, 8 * c.expert_bytes());
  EXPECT_DOUBLE_EQ(r.hit_rate, 0.0);
}

// A prompt of more than 32 tokens bypasses the pool: its misses go through the staging rows in
// launches of k and the pool is left as it was, so the decode that follows finds what the
// warm-up's decode left. Outputs are full's.
TEST(EngineRegime, LlamaCppCachePrefillsOfMoreThan32TokensBypassThePool) {
  const model_config c = micro(2, 2);
  std::vector<std::vector<std::int32_t>> steps;
  for (std::int32_t s = 0; s < 40; ++s) {
    steps.push_back({s % 4, (s + 1) % 4, (s + 2) % 4, (s + 3) % 4});
  }
  const workload w = micro_workload(c, steps, 36, 2);
  engine_options o = regime_options(arm_kind::llama_cpp_cache);
  o.cap = 3;
  const arm_result r = run_micro(c, w, o);
  ASSERT_TRUE(r.feasible) << r.note;
  EXPECT_EQ(r.bypassed_calls, 2u);  // the prefill's call in each layer
  const arm_result full = run_micro(c, w, regime_options(arm_kind::full));
  expect_same(full, r);
}

}  // namespace
