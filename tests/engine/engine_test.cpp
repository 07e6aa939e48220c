// SPDX-License-Identifier: Apache-2.0
// The example engine's arms (examples/engine): output preservation across arms, caps, policies,
// static-hot splits, routing sources, a shrink-then-grow resize cycle, failed resizes and the
// online controller. Tiny shapes so that the suite runs in seconds in Debug.
#include "support.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace engine_test;

constexpr arm_kind every_arm_but_full[] = {
    arm_kind::layer_offload,   arm_kind::on_demand,   arm_kind::static_hot,
    arm_kind::llama_cpp_cache, arm_kind::cpu_experts, arm_kind::cpu_moe_layers,
    arm_kind::pager,           arm_kind::pager_plan,  arm_kind::pager_dynamic,
    arm_kind::pager_prefetch,  arm_kind::pager_zip,   arm_kind::tiered,
    arm_kind::pager_hybrid};

// The reference is `full` at a budget where everything fits; the other arms run at a budget with
// room for k + 2 experts per layer beside the KV floor, so every caching arm evicts. Under the
// host's CPU time and under a GPU profile (where the host experts' arms decide differently).
TEST(EngineArms, EveryArmProducesTheSameTokensAndLogits) {
  for (const routing_source src : {routing_source::trace, routing_source::model}) {
    for (const bool gpu : {false, true}) {
      SCOPED_TRACE(gpu ? "rtx-4090" : "host");
      const fixture f;
      engine_options o = f.options(arm_kind::full, src);
      if (gpu) {
        o.device = wisp::device_profile_preset("rtx-4090");
      }
      const arm_result ref = f.run(o);
      ASSERT_TRUE(ref.feasible);
      for (const auto& out : ref.outputs) {
        EXPECT_FALSE(out.empty());
      }
      o.budget_bytes = f.budget_for_rows(f.cfg.top_k + 2, o.max_running);
      EXPECT_FALSE(f.run(o).feasible);  // not every expert fits
      for (const arm_kind arm : every_arm_but_full) {
        SCOPED_TRACE(std::string(arm_name(arm)));
        o.arm = arm;
        const arm_result r = f.run(o);
        expect_same(ref, r);
        EXPECT_LT(r.hit_rate, 1.0);
        // More than every expert once: evicted or streamed experts were fetched again (or
        // computed by the host instead).
        EXPECT_GT(r.bytes_moved + r.host_experts * f.cfg.expert_bytes(), f.cfg.all_expert_bytes());
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
        if (cap == f.cfg.top_k) {  // the smallest cache: evicted experts are fetched again
          EXPECT_GT(r.bytes_moved, f.cfg.all_expert_bytes());
        }
        EXPECT_EQ(r.expert_copies > 0, cap < f.cfg.experts);  // all resident after the warm-up
        // Belady on the same calls: never more copies, and fewer than LRU when LRU evicts.
        ASSERT_GE(r.belady_copies, 0);
        EXPECT_LE(static_cast<std::uint64_t>(r.belady_copies), r.expert_copies);
        if (policy == "lru" && cap == f.cfg.top_k + 1) {
          EXPECT_LT(static_cast<std::uint64_t>(r.belady_copies), r.expert_copies);
        }
      }
    }
  }
}

// Every pinned count of static-hot at a small cap: from all staging rows to k staging rows
// (calls whose misses need several launches), and the cap chosen from the warm-up.
TEST(EngineArms, StaticHotPreservesOutputForEverySplit) {
  const fixture f;
  const arm_result ref = f.run(f.options(arm_kind::full));
  for (const std::int32_t cap : {f.cfg.top_k, f.cfg.top_k + 2, f.cfg.experts}) {
    for (std::int32_t hot = -1; hot <= cap - f.cfg.top_k; ++hot) {
      engine_options o = f.options(arm_kind::static_hot);
      o.cap = cap;
      o.hot = hot;
      SCOPED_TRACE("cap " + std::to_string(cap) + " hot " + std::to_string(hot));
      const arm_result r = f.run(o);
      expect_same(ref, r);
      EXPECT_EQ(r.cap, cap);
    }
  }
  engine_options o = f.options(arm_kind::static_hot);
  o.cap = f.cfg.top_k + 1;
  o.hot = 2;  // leaves k - 1 staging rows
  EXPECT_THROW((void)f.run(o), wisp::logic_error);
}

TEST(EngineArms, LeastStaleIsAcceptedInBothSpellings) {
  const fixture f;
  engine_options o = f.options(arm_kind::pager);
  o.cap = f.cfg.top_k + 1;
  o.policy = "least-stale";
  const arm_result dash = f.run(o);
  o.policy = "least_stale";
  const arm_result under = f.run(o);
  expect_same(dash, under);
  EXPECT_EQ(dash.policy, "least_stale");
  EXPECT_EQ(dash.bytes_moved, under.bytes_moved);
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

// A resize whose last layer fails (its tensor cannot grow: wisp::out_of_memory inside
// resize_layer_rows) restores every layer: the failing one stays as it was, the ones before it are
// shrunk back, and the engine checks each layer's pager cap and tensor rows against the split in
// force after every attempt.
TEST(EngineArms, AResizeThatFailsPartWayRestoresEveryLayer) {
  const fixture f;
  const arm_result ref = f.run(f.options(arm_kind::full));
  engine_options o = f.options(arm_kind::pager);
  o.cap = f.cfg.experts;
  o.forced_resizes = {{2, 3}, {5, f.cfg.experts}};  // shrink, then a grow that fails
  int faults = 0;
  o.layer_fault = [&](std::int32_t layer, std::size_t rows) {
    return layer == f.cfg.layers - 1 && rows == static_cast<std::size_t>(f.cfg.experts) &&
           faults++ == 0;
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
  for (const arm_kind arm : {arm_kind::full, arm_kind::static_hot}) {
    o.arm = arm;
    o.budget_bytes = 1 << 20;
    EXPECT_THROW((void)f.run(o), wisp::logic_error);  // not a pager arm
  }
}

TEST(EngineArms, KvPreemptionRecomputesToTheSameOutput) {
  const fixture f;
  const arm_result ref = f.run(f.options(arm_kind::full));
  engine_options o = f.options(arm_kind::pager);
  o.cap = f.cfg.top_k;  // an explicit cap: the KV pool gets the rest, below the floor
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
  o.budget_bytes = full_fit_budget(f.cfg, f.wl, o.max_running);
  EXPECT_TRUE(f.run(o).feasible);  // the upper bound's budget is exactly enough
  o.budget_bytes -= 1;
  EXPECT_FALSE(f.run(o).feasible);
  o.arm = arm_kind::pager;
  EXPECT_TRUE(f.run(o).feasible);
}

TEST(EngineArms, DynamicResizesOnAShiftingWorkloadAndKeepsOutput) {
  fixture f;
  f.wl = synthetic_workload("shift", f.cfg, 8);
  for (request& r : f.wl.evaluated) {  // shorter, for Debug
    r.prompt.resize(std::min<std::size_t>(r.prompt.size(), 24));
    r.max_new_tokens = std::min(r.max_new_tokens, 4);
  }
  const arm_result ref = f.run(f.options(arm_kind::full));
  engine_options o = f.options(arm_kind::pager_dynamic);
  o.controller.dead_zone = 1;  // 8 experts: a one-cap move is worth making
  // Room for the floor plus a few caps' worth of bytes: the law has something to trade.
  o.budget_bytes = f.budget_for_rows(f.cfg.top_k + 3, o.max_running);
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
  EXPECT_EQ(dyn.cap, dyn.resize_log.back().cap_after);
  o.arm = arm_kind::pager_plan;
  expect_same(ref, f.run(o));
}

// A lever that fails: the failed attempt is rolled back (shrink undone) and the previous split
// stands, in the engine and in the controller (the next attempt starts from it); output is kept.
TEST(EngineArms, FailedDynamicResizeStepKeepsThePreviousSplit) {
  fixture f;
  f.wl = synthetic_workload("shift", f.cfg, 8);
  for (request& r : f.wl.evaluated) {
    r.prompt.resize(std::min<std::size_t>(r.prompt.size(), 24));
    r.max_new_tokens = std::min(r.max_new_tokens, 4);
  }
  const arm_result ref = f.run(f.options(arm_kind::full));
  for (const int fail_at : {1, 2}) {  // the first step (nothing done) or the second (undo)
    SCOPED_TRACE("failing lever call " + std::to_string(fail_at));
    engine_options o = f.options(arm_kind::pager_dynamic);
    o.controller.dead_zone = 1;
    o.budget_bytes = f.budget_for_rows(f.cfg.top_k + 3, o.max_running);
    int calls = 0;
    std::vector<std::pair<wisp::pool, std::uint64_t>> pulls;
    o.lever_fault = [&](wisp::pool which, std::uint64_t to) {
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
      EXPECT_EQ(pulls[2].second, pulls[0].first == wisp::pool::kv
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

// ------------------------------------------------ token positions reach the pager's policy

// Every access a `logging_lru` saw, as (expert, token position), across every copy of it.
std::vector<std::pair<wisp::cache_key, std::uint32_t>> logged_accesses;

// `wisp::lru` that logs the position of each access it is handed.
class logging_lru {
 public:
  static constexpr std::string_view name = "logging_lru";
  void reset(const wisp::key_layout& layout) { lru_.reset(layout); }
  void on_insert(wisp::cache_key key, const wisp::access_context& ctx) {
    logged_accesses.emplace_back(key, ctx.position);
    lru_.on_insert(key, ctx);
  }
  void on_hit(wisp::cache_key key, const wisp::access_context& ctx) {
    logged_accesses.emplace_back(key, ctx.position);
    lru_.on_hit(key, ctx);
  }
  void on_erase(wisp::cache_key key) { lru_.on_erase(key); }
  [[nodiscard]] wisp::cache_key victim(const wisp::access_context& ctx,
                                       wisp::protected_keys is_protected) const {
    return lru_.victim(ctx, is_protected);
  }

 private:
  wisp::lru lru_;
};

// Forwards every call to `inner` and checks, per layer call, that the policy saw each expert it
// was handed at the position of the first row routed to it (the pager's rule for a batch). Keeps
// every row position the loop gave, warm-up and serving apart.
class position_checking_arm final : public residency {
 public:
  position_checking_arm(residency& inner, std::int32_t k, bool every_expert)
      : inner_(inner), k_(static_cast<std::size_t>(k)), every_expert_(every_expert) {}

  memory_plan setup(const arm_context& ctx) override { return inner_.setup(ctx); }
  void begin_forward(std::span<const std::uint32_t> row_positions, bool warm) override {
    auto& all = warm ? warm_positions : served_positions;
    all.insert(all.end(), row_positions.begin(), row_positions.end());
    rows_ = row_positions;
    inner_.begin_forward(row_positions, warm);
  }
  std::span<const row_copy> ahead(std::int32_t layer, const link_window& window) override {
    return inner_.ahead(layer, window);
  }
  std::span<const moe_launch> layer(std::int32_t layer, std::span<const std::int32_t> ids,
                                    std::int32_t tokens) override {
    std::map<wisp::cache_key, std::uint32_t> first;  // expert -> its first row's position
    for (std::size_t i = 0; i < ids.size(); ++i) {
      first.emplace(ids[i], rows_[i / k_]);  // keeps the first
    }
    const std::size_t before = logged_accesses.size();
    const std::span<const moe_launch> launches = inner_.layer(layer, ids, tokens);
    std::map<wisp::cache_key, std::uint32_t> seen;
    for (std::size_t i = before; i < logged_accesses.size(); ++i) {
      EXPECT_TRUE(seen.insert(logged_accesses[i]).second) << "expert accessed twice in a call";
    }
    if (every_expert_) {
      EXPECT_EQ(seen, first) << "layer " << layer << ", " << tokens << " rows";
    } else {  // some experts were computed by the host, not prepared
      for (const auto& [expert, position] : seen) {
        const auto it = first.find(expert);
        EXPECT_TRUE(it != first.end() && it->second == position)
            << "layer " << layer << ", expert " << expert << " at position " << position;
      }
    }
    widest = std::max(widest, first.size());
    return launches;
  }
  [[nodiscard]] bool host_sync(std::int32_t layer) const override {
    return inner_.host_sync(layer);
  }
  void between_forwards(barrier_context& ctx) override { inner_.between_forwards(ctx); }
  void finish(arm_result& result) override { inner_.finish(result); }

  std::vector<std::uint32_t> warm_positions, served_positions;
  std::size_t widest = 0;  // most distinct experts of one call

 private:
  residency& inner_;
  std::size_t k_;
  bool every_expert_;
  std::span<const std::uint32_t> rows_;
};

// The positions each session computes once (no preemption): [0, prompt + generated - 1), sorted.
std::vector<std::uint32_t> positions_of(const std::vector<request>& requests) {
  std::vector<std::uint32_t> out;
  for (const request& r : requests) {
    const std::size_t n = r.prompt.size() + static_cast<std::size_t>(r.max_new_tokens) - 1;
    for (std::uint32_t p = 0; p < n; ++p) {
      out.push_back(p);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The loop hands each forward's row positions to the arm (warm-up replay and serving), and the
// pager arms pass them on: each expert of a call is accessed at the position of the first row
// routed to it, in a call that fits the cap and in the launches of a split (prefill) call.
TEST(EngineArms, PagerArmsHandThePolicyEachExpertAtItsFirstRowsPosition) {
  const fixture f;
  for (const arm_kind kind : {arm_kind::pager, arm_kind::pager_hybrid}) {
    SCOPED_TRACE(std::string(arm_name(kind)));
    engine_options o = f.options(kind);
    o.cap = f.cfg.top_k + 2;  // prefills have more distinct experts: they are split
    const warmup_log warm = record_warmup(f.weights, f.wl, o);
    std::unique_ptr<residency> inner;
    if (kind == arm_kind::pager) {
      inner = std::make_unique<pager_residency<logging_lru>>();
    } else {
      inner = std::make_unique<hybrid_pager_residency<logging_lru>>();
    }
    position_checking_arm arm(*inner, f.cfg.top_k, kind == arm_kind::pager);
    device dev(f.weights, o.link, charges_of(o));
    const arm_context ctx{f.cfg,
                          o,
                          alloc_spec(f.cfg),
                          wisp::byte_size{o.budget_bytes},
                          workload_floor(f.wl.evaluated, o.max_running),
                          f.wl.evaluated,
                          warm,
                          dev};
    const memory_plan m = arm.setup(ctx);
    serving_loop loop(f.weights, o, dev, arm, &f.wl.trace);
    logged_accesses.clear();
    loop.replay(warm);
    arm_result res;
    loop.serve(f.wl.evaluated, m.kv_blocks, res);
    EXPECT_EQ(res.preemptions, 0u);
    EXPECT_GT(arm.widest, static_cast<std::size_t>(o.cap));
    EXPECT_FALSE(logged_accesses.empty());
    std::sort(arm.warm_positions.begin(), arm.warm_positions.end());
    std::sort(arm.served_positions.begin(), arm.served_positions.end());
    EXPECT_EQ(arm.warm_positions, positions_of(f.wl.warmup));
    EXPECT_EQ(arm.served_positions, positions_of(f.wl.evaluated));
  }
}

TEST(EngineArms, UnknownPolicyIsRejected) {
  const fixture f;
  engine_options o = f.options(arm_kind::pager);
  o.policy = "nope";
  EXPECT_THROW((void)f.run(o), wisp::logic_error);
}

}  // namespace
