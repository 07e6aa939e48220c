// SPDX-License-Identifier: Apache-2.0
// The example engine (examples/engine): output preservation across arms, caps, policies, routing
// sources, a shrink-then-grow resize cycle and failed resizes; the scheduler's admission, fairness
// and rejection; the fused-MoE kernel concept. Tiny shapes so that the suite runs in seconds in
// Debug.
#include "../../examples/engine/engine.hpp"

#include <wisp/kernel/fused_moe.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

namespace {

using namespace wisp_engine;

model_config tiny() {
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

std::vector<request> tiny_requests(const model_config& c, std::int32_t n = 6) {
  std::vector<request> out;
  for (std::int32_t i = 0; i < n; ++i) {
    request r;
    r.id = i;
    for (std::int32_t t = 0; t < 5 + 3 * (i % 3); ++t) {
      r.prompt.push_back((i * 7 + t * 13) % c.vocab);
    }
    r.max_new_tokens = 6 + i % 2;
    r.trace_offset = static_cast<std::uint64_t>(i) * 101;
    out.push_back(std::move(r));
  }
  return out;
}

struct fixture {
  model_config cfg = tiny();
  model_weights weights{cfg};
  wisp::trace::routing_trace trace = default_trace(cfg, 512, 5);
  std::vector<request> reqs = tiny_requests(cfg);

  engine_options options(arm_kind arm, routing_source src = routing_source::trace) const {
    engine_options o;
    o.arm = arm;
    o.budget_bytes = 1 << 20;  // everything fits
    o.bandwidth = 0;
    o.max_running = 3;
    o.routing = src;
    o.trace = &trace;
    o.dynamic_burst = 2;
    return o;
  }
  arm_result run(const engine_options& o) const { return run_arm(weights, o, reqs); }
};

void expect_same(const arm_result& a, const arm_result& b) {
  ASSERT_TRUE(a.feasible) << a.note;
  ASSERT_TRUE(b.feasible) << b.note;
  EXPECT_EQ(a.outputs, b.outputs) << a.name << " vs " << b.name;
  EXPECT_EQ(a.logits_hashes, b.logits_hashes) << a.name << " vs " << b.name;
}

// The reference is `full` at a budget where everything fits; the other arms run at a budget with
// room for k + 2 experts per layer beside the KV floor, so every pager arm evicts.
TEST(EngineArms, EveryArmProducesTheSameTokensAndLogits) {
  for (const routing_source src : {routing_source::trace, routing_source::model}) {
    const fixture f;
    const arm_result ref = f.run(f.options(arm_kind::full, src));
    ASSERT_TRUE(ref.feasible);
    for (const auto& out : ref.outputs) {
      EXPECT_FALSE(out.empty());
    }
    engine_options o = f.options(arm_kind::full, src);
    o.budget_bytes =
        static_cast<std::uint64_t>(f.cfg.top_k + 2) * f.cfg.layers * f.cfg.expert_bytes() +
        workload_floor(f.reqs, o.max_running).bytes(alloc_spec(f.cfg)).count();
    EXPECT_FALSE(f.run(o).feasible);  // not every expert fits
    for (const arm_kind arm : {arm_kind::static_offload, arm_kind::pager, arm_kind::pager_plan,
                               arm_kind::pager_dynamic}) {
      SCOPED_TRACE(std::string(arm_name(arm)));
      o.arm = arm;
      const arm_result r = f.run(o);
      expect_same(ref, r);
      if (arm != arm_kind::static_offload) {
        EXPECT_LT(r.cap, f.cfg.experts);
        // More than every expert once: evicted experts were fetched again.
        EXPECT_GT(r.bytes_moved, f.cfg.all_expert_bytes());
      }
    }
  }
}

TEST(EngineArms, EveryCapAndPolicyPreservesOutput) {
  const fixture f;
  for (const routing_source src : {routing_source::trace, routing_source::model}) {
    const arm_result ref = f.run(f.options(arm_kind::full, src));
    for (const std::string_view policy : policy_names()) {
      for (std::int32_t cap = f.cfg.top_k; cap <= f.cfg.experts; ++cap) {
        engine_options o = f.options(arm_kind::pager, src);
        o.policy = std::string(policy);
        o.cap = cap;
        const arm_result r = f.run(o);
        SCOPED_TRACE(std::string(policy) + " cap " + std::to_string(cap));
        expect_same(ref, r);
        EXPECT_EQ(r.cap, cap);
        if (cap < f.cfg.experts) {
          // More than every expert once: evicted experts were fetched again.
          EXPECT_GT(r.bytes_moved, f.cfg.all_expert_bytes());
        }
      }
    }
  }
}

TEST(EngineArms, ShrinkThenGrowResizeCyclePreservesOutput) {
  const fixture f;
  for (const routing_source src : {routing_source::trace, routing_source::model}) {
    const arm_result ref = f.run(f.options(arm_kind::full, src));
    engine_options o = f.options(arm_kind::pager, src);
    o.cap = f.cfg.experts;
    o.forced_resizes = {{2, f.cfg.top_k}, {5, f.cfg.experts}, {8, 3}, {11, f.cfg.experts - 1}};
    const arm_result r = f.run(o);
    expect_same(ref, r);
    EXPECT_EQ(r.resizes, 4u);  // successful ones only
    EXPECT_EQ(r.resize_failures, 0u);
    EXPECT_EQ(r.cap, f.cfg.experts - 1);
  }
}

// A resize whose last layer fails after that layer's tensor has grown (as a throwing
// pager::resize_layer would) restores every layer, the failing one included: the engine checks
// each layer's pager cap and tensor rows against the split in force after every attempt.
TEST(EngineArms, AResizeThatFailsPartWayRestoresEveryLayer) {
  const fixture f;
  const arm_result ref = f.run(f.options(arm_kind::full));
  engine_options o = f.options(arm_kind::pager);
  o.cap = f.cfg.experts;
  o.forced_resizes = {{2, 3}, {5, f.cfg.experts}};  // shrink, then a grow that fails
  int faults = 0;
  o.layer_fault = [&](std::int32_t layer, std::int32_t cap) {
    return layer == f.cfg.layers - 1 && cap == f.cfg.experts && faults++ == 0;
  };
  const arm_result r = f.run(o);
  expect_same(ref, r);
  EXPECT_EQ(faults, 1);
  EXPECT_EQ(r.resizes, 1u);
  EXPECT_EQ(r.resize_failures, 1u);
  EXPECT_EQ(r.cap, 3);
}

TEST(EngineArms, AForcedResizeMustFitTheBudget) {
  const fixture f;
  engine_options o = f.options(arm_kind::pager);
  o.cap = f.cfg.top_k;
  o.budget_bytes = f.cfg.all_expert_bytes() / 2 + (256u << 10);  // cap E does not fit beside KV
  o.forced_resizes = {{1, f.cfg.experts}};
  EXPECT_THROW((void)f.run(o), wisp::logic_error);
  o.arm = arm_kind::full;
  o.budget_bytes = 1 << 20;
  EXPECT_THROW((void)f.run(o), wisp::logic_error);  // not a pager arm
}

TEST(EngineArms, KvPreemptionRecomputesToTheSameOutput) {
  const fixture f;
  const arm_result ref = f.run(f.options(arm_kind::full));
  engine_options o = f.options(arm_kind::pager);
  o.cap = f.cfg.top_k;
  const std::uint64_t experts =
      static_cast<std::uint64_t>(o.cap) * f.cfg.layers * f.cfg.expert_bytes();
  const std::uint64_t block = f.cfg.block_tokens * f.cfg.kv_bytes_per_token();
  o.budget_bytes = experts + 6 * block;  // 6 blocks: one long session fits, three do not
  const arm_result r = f.run(o);
  expect_same(ref, r);
  EXPECT_GT(r.preemptions, 0u);
  EXPECT_EQ(r.kv_blocks, 6u);
}

TEST(EngineArms, FullIsInfeasibleWhenExpertsDoNotFit) {
  const fixture f;
  engine_options o = f.options(arm_kind::full);
  o.budget_bytes = f.cfg.all_expert_bytes();  // no room left for the KV floor
  const arm_result r = f.run(o);
  EXPECT_FALSE(r.feasible);
  EXPECT_THAT(r.note, testing::HasSubstr("infeasible"));
  o.arm = arm_kind::pager;
  EXPECT_TRUE(f.run(o).feasible);
}

TEST(EngineArms, DynamicResizesOnAShiftingWorkloadAndKeepsOutput) {
  fixture f;
  f.reqs = make_workload("shift", f.cfg, 8);
  for (request& r : f.reqs) {  // shorter, for Debug
    r.prompt.resize(std::min<std::size_t>(r.prompt.size(), 24));
    r.max_new_tokens = std::min(r.max_new_tokens, 4);
  }
  const arm_result ref = f.run(f.options(arm_kind::full));
  engine_options o = f.options(arm_kind::pager_dynamic);
  o.controller.dead_zone = 1;  // 8 experts: a one-cap move is worth making
  // Room for the floor plus a few caps' worth of bytes: the law has something to trade.
  const auto floor = workload_floor(f.reqs, o.max_running);  // what full would keep
  o.budget_bytes =
      static_cast<std::uint64_t>(f.cfg.top_k + 3) * f.cfg.layers * f.cfg.expert_bytes() +
      floor.bytes(alloc_spec(f.cfg)).count();
  const arm_result dyn = f.run(o);
  expect_same(ref, dyn);
  EXPECT_GT(dyn.resizes, 0u);
  // The online controller itself proposed at least one of the applied moves.
  EXPECT_GT(dyn.controller_moves, 0u);
  EXPECT_EQ(dyn.resize_failures, 0u);
  ASSERT_FALSE(dyn.resize_log.empty());
  for (const resize_event& ev : dyn.resize_log) {
    EXPECT_TRUE(ev.applied);
    EXPECT_EQ(ev.cap_after, ev.to_cap);
    EXPECT_EQ(ev.kv_after, ev.to_kv);
  }
  o.arm = arm_kind::pager_plan;
  expect_same(ref, f.run(o));
}

// A lever that fails: the failed attempt is rolled back (shrink undone) and the previous split
// stands, in the engine and in the controller (the next attempt starts from it); output is kept.
TEST(EngineArms, FailedDynamicResizeStepKeepsThePreviousSplit) {
  fixture f;
  f.reqs = make_workload("shift", f.cfg, 8);
  for (request& r : f.reqs) {
    r.prompt.resize(std::min<std::size_t>(r.prompt.size(), 24));
    r.max_new_tokens = std::min(r.max_new_tokens, 4);
  }
  const arm_result ref = f.run(f.options(arm_kind::full));
  for (const int fail_at : {1, 2}) {  // the first step (nothing done) or the second (undo)
    SCOPED_TRACE("failing lever call " + std::to_string(fail_at));
    engine_options o = f.options(arm_kind::pager_dynamic);
    o.controller.dead_zone = 1;
    const auto floor = workload_floor(f.reqs, o.max_running);
    o.budget_bytes =
        static_cast<std::uint64_t>(f.cfg.top_k + 3) * f.cfg.layers * f.cfg.expert_bytes() +
        floor.bytes(alloc_spec(f.cfg)).count();
    int calls = 0;
    std::vector<std::pair<wisp::alloc::pool, std::uint64_t>> pulls;
    o.lever_fault = [&](wisp::alloc::pool which, std::uint64_t to) {
      pulls.emplace_back(which, to);
      return ++calls == fail_at;
    };
    const arm_result r = f.run(o);
    expect_same(ref, r);
    EXPECT_EQ(r.resize_failures, 1u);
    ASSERT_GE(r.resize_log.size(), 2u);
    const resize_event& failed = r.resize_log.front();
    EXPECT_FALSE(failed.applied);
    EXPECT_EQ(failed.cap_after, failed.from_cap);
    EXPECT_EQ(failed.kv_after, failed.from_kv);
    if (fail_at == 2) {  // step 1 was pulled, step 2 failed, step 1 was undone to its start
      ASSERT_GE(pulls.size(), 3u);
      EXPECT_EQ(pulls[2].first, pulls[0].first);
      EXPECT_EQ(pulls[2].second, pulls[0].first == wisp::alloc::pool::kv
                                     ? failed.from_kv
                                     : static_cast<std::uint64_t>(failed.from_cap));
    }
    // The next attempt starts from the split that stood, and succeeds.
    const resize_event& next = r.resize_log[1];
    EXPECT_EQ(next.from_cap, failed.from_cap);
    EXPECT_EQ(next.from_kv, failed.from_kv);
    EXPECT_TRUE(next.applied);
    EXPECT_EQ(r.resizes, r.resize_log.size() - 1);
  }
}

TEST(EngineArms, UnknownPolicyIsRejected) {
  const fixture f;
  engine_options o = f.options(arm_kind::pager);
  o.policy = "nope";
  EXPECT_THROW((void)f.run(o), wisp::logic_error);
}

// ------------------------------------------------------------------ scheduler

// Drives the scheduler the way the engine does, without a model: each plan runs its positions.
struct sched_sim {
  kv_block_pool pool;
  scheduler sched;
  std::vector<session> sessions;
  std::vector<std::int32_t> admitted;  // ids in admission order

  sched_sim(std::size_t blocks, std::int32_t block_tokens, std::int32_t max_running)
      : pool(blocks, 1), sched(pool, block_tokens, max_running) {}

  void add(std::int32_t prompt, std::int32_t gen) {
    session s;
    s.req.id = static_cast<std::int32_t>(sessions.size());
    s.req.prompt.assign(static_cast<std::size_t>(prompt), 1);
    s.req.max_new_tokens = gen;
    sessions.push_back(std::move(s));
  }
  void submit_all() {
    for (session& s : sessions) {
      (void)sched.submit(s);
    }
  }
  std::int32_t run(std::int32_t limit = 10000) {
    std::int32_t steps = 0;
    while (!sched.idle() && steps < limit) {
      batch_plan plan = sched.next();
      if (plan.sessions.empty()) {
        break;
      }
      for (session* s : plan.sessions) {
        if (plan.prefill && s->generated == 0) {
          admitted.push_back(s->req.id);
        }
        // Every position of the plan has a block: the KV it writes fits.
        EXPECT_GE(s->blocks.size() * 4, static_cast<std::size_t>(s->len()));
        s->kv_len = s->len();
        s->tokens.push_back(2);
        ++s->generated;
      }
      // Every block in use is in exactly one session's table.
      std::vector<std::int32_t> held;
      for (const session& s : sessions) {
        held.insert(held.end(), s.blocks.begin(), s.blocks.end());
      }
      std::sort(held.begin(), held.end());
      EXPECT_EQ(std::adjacent_find(held.begin(), held.end()), held.end());
      EXPECT_EQ(held.size(), pool.used());
      for (session* s : plan.sessions) {
        if (s->generated >= s->req.max_new_tokens) {
          sched.finish(*s, 0);
        }
      }
      ++steps;
    }
    return steps;
  }
};

TEST(EngineScheduler, AdmitsOnlyWhenKvBlocksFit) {
  sched_sim sim(10, 4, 8);
  for (int i = 0; i < 5; ++i) {
    sim.add(10, 6);  // admission needs blocks_for(11) = 3, whole context 4 blocks
  }
  sim.submit_all();
  batch_plan first = sim.sched.next();
  EXPECT_TRUE(first.prefill);
  EXPECT_EQ(first.sessions.size(), 3u);  // 3 x 3 = 9 of 10 blocks
  EXPECT_EQ(sim.sched.waiting(), 2u);
  EXPECT_EQ(sim.pool.used(), 9u);
}

TEST(EngineScheduler, NoSessionStarvesAndAdmissionIsFifo) {
  sched_sim sim(12, 4, 3);
  for (int i = 0; i < 12; ++i) {
    sim.add(3 + (i * 5) % 17, 1 + i % 9);
  }
  sim.submit_all();
  const std::int32_t steps = sim.run();
  EXPECT_LT(steps, 10000);
  for (const session& s : sim.sessions) {
    EXPECT_EQ(s.state, session_state::finished) << "session " << s.req.id;
    EXPECT_EQ(s.generated, s.req.max_new_tokens);
  }
  std::vector<std::int32_t> fifo(sim.sessions.size());
  std::iota(fifo.begin(), fifo.end(), 0);
  EXPECT_EQ(sim.admitted, fifo);
  EXPECT_EQ(sim.pool.used(), 0u);
}

TEST(EngineScheduler, PreemptsUnderKvPressureAndStillFinishes) {
  sched_sim sim(6, 4, 4);
  for (int i = 0; i < 4; ++i) {
    sim.add(4, 12);  // admitted at 2 blocks, grows to 4
  }
  sim.submit_all();
  (void)sim.run();
  EXPECT_GT(sim.sched.preemptions(), 0u);
  for (const session& s : sim.sessions) {
    EXPECT_EQ(s.state, session_state::finished);
  }
}

TEST(EngineScheduler, RejectsAContextThatCanNeverFit) {
  sched_sim sim(4, 4, 4);
  sim.add(10, 10);  // 20 tokens = 5 blocks > 4
  sim.add(4, 4);
  sim.submit_all();
  EXPECT_EQ(sim.sessions[0].state, session_state::rejected);
  EXPECT_THAT(sim.sessions[0].reject_reason,
              testing::HasSubstr("needs 5 KV blocks of 4 tokens but the pool holds only 4"));
  (void)sim.run();
  EXPECT_EQ(sim.sessions[1].state, session_state::finished);
}

TEST(EngineScheduler, KvPoolShrinkCompactsOrFailsUnchanged) {
  kv_block_pool pool(8, 2);
  std::vector<std::int32_t> got;
  for (int i = 0; i < 5; ++i) {
    got.push_back(*pool.allocate());
  }
  pool.release(got[1]);
  pool.release(got[2]);
  pool.block(4)[0] = 42.0f;
  EXPECT_FALSE(pool.resize(2, [](std::int32_t, std::int32_t) {}));  // 3 in use
  EXPECT_EQ(pool.capacity(), 8u);
  std::vector<std::pair<std::int32_t, std::int32_t>> moves;
  EXPECT_TRUE(pool.resize(3, [&](std::int32_t a, std::int32_t b) { moves.emplace_back(a, b); }));
  EXPECT_EQ(pool.capacity(), 3u);
  ASSERT_EQ(moves.size(), 2u);  // blocks 3 and 4 -> 1 and 2
  EXPECT_EQ(moves[1], std::make_pair(4, 2));
  EXPECT_EQ(pool.block(2)[0], 42.0f);
  EXPECT_TRUE(pool.resize(6, [](std::int32_t, std::int32_t) {}));
  EXPECT_EQ(pool.free_blocks(), 3u);
}

// ------------------------------------------------------------------ kernel concept

struct not_a_kernel {
  void operator()(int) {}
};
static_assert(!wisp::fused_moe_kernel<not_a_kernel>);
static_assert(!wisp::fused_moe_kernel<int>);

TEST(EngineKernel, OutputDoesNotDependOnSlotsAndSkipsHiddenExperts) {
  const model_config c = tiny();
  const model_weights w(c);
  const std::size_t eb = c.expert_bytes();
  const std::int32_t T = 3, K = 2;
  std::vector<float> hidden(static_cast<std::size_t>(T * c.hidden));
  for (std::size_t i = 0; i < hidden.size(); ++i) {
    hidden[i] = static_cast<float>(i % 7) * 0.1f - 0.3f;
  }
  const std::vector<std::int32_t> ids = {0, 5, 3, 5, 7, 1};
  const std::vector<float> gates = {0.6f, 0.4f, 0.5f, 0.5f, 0.9f, 0.1f};
  auto run = [&](const std::vector<std::int32_t>& map, std::int32_t slots) {
    std::vector<std::byte> rows(static_cast<std::size_t>(slots) * eb);
    for (std::int32_t e = 0; e < c.experts; ++e) {
      if (map[static_cast<std::size_t>(e)] >= 0) {
        std::memcpy(rows.data() + static_cast<std::size_t>(map[static_cast<std::size_t>(e)]) * eb,
                    w.master(0, e), eb);
      }
    }
    std::vector<float> out(hidden.size(), -1.0f);
    cpu_reference_moe k(c.hidden, c.intermediate);
    const wisp::fused_moe_args a{
        hidden,  ids,
        gates,   wisp::expert_tensor_view{rows.data(), static_cast<std::size_t>(slots), eb},
        map,     out,
        T,       K,
        c.hidden};
    wisp::check_fused_moe_args(a);
    k(a);
    return out;
  };
  std::vector<std::int32_t> identity(8);
  std::iota(identity.begin(), identity.end(), 0);
  const std::vector<std::int32_t> paged = {2, 1, -1, 4, -1, 0, -1, 3};  // 5 slots, permuted
  const auto a = run(identity, 8);
  const auto b = run(paged, 5);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  // Hiding expert 5 changes rows 0 and 1 (they route to it) but not row 2.
  std::vector<std::int32_t> hide5 = identity;
  hide5[5] = -1;
  const auto h = run(hide5, 8);
  const auto H = static_cast<std::size_t>(c.hidden);
  EXPECT_NE(0, std::memcmp(a.data(), h.data(), H * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(a.data() + 2 * H, h.data() + 2 * H, H * sizeof(float)));
}

TEST(EngineKernel, ArgumentShapesAreChecked) {
  std::vector<float> hidden(8), out(8), gates(3);
  std::vector<std::int32_t> ids(3), map(4, -1);
  const wisp::fused_moe_args bad{hidden, ids, gates, {}, map, out, 2, 2, 4};
  EXPECT_THROW(wisp::check_fused_moe_args(bad), wisp::logic_error);
}

TEST(EngineModel, Bf16RoundTripsAndRoundsToNearestEven) {
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.5f)), 1.5f);
  EXPECT_EQ(bf16_to_float(float_to_bf16(-2.0f)), -2.0f);
  EXPECT_EQ(float_to_bf16(1.0f + 1.0f / 256.0f), float_to_bf16(1.0f));  // tie to even
}

}  // namespace
