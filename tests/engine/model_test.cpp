// SPDX-License-Identifier: Apache-2.0
// The example engine's model and scheduler: admission, fairness, preemption and rejection; the KV
// pool's compaction; the fused-MoE kernel concept and its two-stage form; bf16 rounding.
#include "support.hpp"

#include <wisp/kernel/fused_moe.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

namespace {

using namespace engine_test;

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

// The two-stage form (per-position outputs, then one ordered combine) gives the fused kernel's
// bytes whatever the split of the experts into launches.
TEST(EngineKernel, TwoStagesMatchTheFusedKernelForEverySplit) {
  const model_config c = tiny();
  const model_weights w(c);
  const std::size_t eb = c.expert_bytes();
  const std::int32_t T = 4, K = 2, H = c.hidden;
  std::vector<float> hidden(static_cast<std::size_t>(T * H));
  for (std::size_t i = 0; i < hidden.size(); ++i) {
    hidden[i] = static_cast<float>((i * 37) % 11) * 0.07f - 0.35f;
  }
  const std::vector<std::int32_t> ids = {0, 5, 3, 5, 7, 1, 2, 6};
  const std::vector<float> gates = {0.6f, 0.4f, 0.5f, 0.5f, 0.9f, 0.1f, 0.3f, 0.7f};
  std::vector<std::byte> rows(static_cast<std::size_t>(c.experts) * eb);
  for (std::int32_t e = 0; e < c.experts; ++e) {
    std::memcpy(rows.data() + static_cast<std::size_t>(e) * eb, w.master(0, e), eb);
  }
  const wisp::expert_tensor_view view{rows.data(), static_cast<std::size_t>(c.experts), eb};
  std::vector<std::int32_t> identity(static_cast<std::size_t>(c.experts));
  std::iota(identity.begin(), identity.end(), 0);
  std::vector<float> fused(hidden.size()), out(hidden.size()), positions(ids.size() * H);
  cpu_reference_moe k(c.hidden, c.intermediate);
  k(wisp::fused_moe_args{hidden, ids, gates, view, identity, fused, T, K, H});
  // Every split of the 8 experts into two launches (bit e of `mask`: the first launch).
  for (std::uint32_t mask = 0; mask < 256; mask += 37) {
    std::int64_t written = 0;
    for (const bool first : {true, false}) {
      std::vector<std::int32_t> map(identity.size(), -1);
      for (std::int32_t e = 0; e < c.experts; ++e) {
        if (((mask >> e) & 1u) == (first ? 1u : 0u)) {
          map[static_cast<std::size_t>(e)] = e;
        }
      }
      written += k.expert_outputs(wisp::fused_moe_args{hidden, ids, gates, view, map, out, T, K, H},
                                  positions);
    }
    EXPECT_EQ(written, T * K);
    k.combine(gates, positions, out, T, K);
    EXPECT_EQ(0, std::memcmp(fused.data(), out.data(), out.size() * sizeof(float))) << mask;
  }
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
