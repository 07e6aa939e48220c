// SPDX-License-Identifier: Apache-2.0
// reuse_probability against a brute-force reference of its rule: every access is remembered with
// its pass and token position, and each victim's score is recomputed from that whole history.
#include "cache/reference.hpp"
#include "support/expect_error.hpp"

#include <wisp/cache/reuse_probability.hpp>
#include <wisp/cache/slot_cache.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

namespace {

using namespace wisp;
using wisp::test::expect_error;
using wisp::test::random_calls;

class reuse_reference {
 public:
  reuse_reference(reuse_probability_config config, std::int32_t capacity)
      : config_(config), capacity_(capacity) {}

  void access_call(const std::vector<cache_key>& keys, const access_context& ctx,
                   std::vector<access_result>& out) {
    position_of_[ctx.step] = ctx.position;
    test::replay_reference_call(
        resident_, capacity_, keys,
        [&](const std::set<cache_key>& protect) { return victim(ctx, protect); },
        [&](cache_key key) {
          steps_[key].insert(ctx.step);
          last_[key] = ++tick_;
        },
        out);
  }

 private:
  // P(next use < a + horizon | next use >= a) from the key's reuse distances (capped).
  [[nodiscard]] double own(cache_key key, std::uint32_t now) const {
    const std::set<std::uint32_t>& steps = steps_.at(key);
    const std::int64_t a = static_cast<std::int64_t>(now) - *steps.rbegin() + 1;
    if (a > config_.max_distance) {
      return 0.0;
    }
    std::uint64_t within = 0, all = 0;
    for (auto it = std::next(steps.begin()); it != steps.end(); ++it) {
      const std::int64_t d = std::min<std::int64_t>(*it - *std::prev(it), config_.max_distance + 1);
      if (d >= a) {
        ++all;
        within += d < a + config_.horizon && d <= config_.max_distance ? 1u : 0u;
      }
    }
    return all == 0 ? 0.0 : static_cast<double>(within) / static_cast<double>(all);
  }
  // 1 - prod over the next horizon positions (< positions) seen before of (1 - used / passes).
  [[nodiscard]] double profile(cache_key key, std::uint32_t position) const {
    double none = 1.0;
    for (std::int64_t u = position + 1;
         u <= static_cast<std::int64_t>(position) + config_.horizon && u < config_.positions; ++u) {
      std::uint32_t passes = 0, used = 0;
      for (const auto& [step, p] : position_of_) {
        if (p == u) {
          ++passes;
          used += steps_.count(key) != 0 && steps_.at(key).count(step) != 0 ? 1u : 0u;
        }
      }
      if (passes > 0) {
        none *= 1.0 - static_cast<double>(used) / static_cast<double>(passes);
      }
    }
    return 1.0 - none;
  }
  [[nodiscard]] cache_key victim(const access_context& ctx, const std::set<cache_key>& protect) {
    cache_key best = no_key;
    double best_score = 0.0;
    for (const cache_key k : resident_) {
      if (protect.count(k) != 0) {
        continue;
      }
      const double w = config_.position_weight;
      const double s = (1.0 - w) * own(k, ctx.step) + w * profile(k, ctx.position);
      if (best == no_key || s < best_score || (s == best_score && last_.at(k) < last_.at(best))) {
        best = k;
        best_score = s;
      }
    }
    return best;
  }

  reuse_probability_config config_;
  std::int32_t capacity_;
  std::set<cache_key> resident_;
  std::map<cache_key, std::set<std::uint32_t>> steps_;  // passes that used the key
  std::map<std::uint32_t, std::uint32_t> position_of_;  // every pass seen, with its position
  std::map<cache_key, std::uint64_t> last_;
  std::uint64_t tick_ = 0;
};

// Random calls with sequences of random lengths; every hit and victim must agree.
void expect_matches(const reuse_probability_config& config, cache_scope scope, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::int32_t layers = 3, experts = 10, k = 2;
  const bool global = scope == cache_scope::global;
  const key_layout layout = global ? key_layout{cache_scope::global, layers, experts}
                                   : key_layout{cache_scope::per_layer, layers, experts};
  const auto calls = random_calls(rng, layers, experts, k, 120, !global);
  std::vector<std::uint32_t> position(121);
  for (std::size_t s = 1; s < position.size(); ++s) {
    position[s] = rng() % 9 == 0 ? 0 : position[s - 1] + 1;  // a new sequence about every 9
  }
  for (const std::int32_t capacity : {3, 5, 8}) {
    slot_cache<reuse_probability> cache(layout, capacity, reuse_probability(config));
    reuse_reference ref(config, capacity);
    std::vector<access_result> out(static_cast<std::size_t>(k)), expected;
    std::uint64_t t = 0;
    for (const auto& call : calls) {
      if (!global && call.layer != 1) {
        continue;  // one layer's cache in per-layer scope
      }
      const access_context ctx{call.step, call.layer, t, position[call.step]};
      cache.access_call(call.keys, ctx, out);
      ref.access_call(call.keys, ctx, expected);
      for (std::size_t i = 0; i < call.keys.size(); ++i) {
        ASSERT_EQ(out[i].hit, expected[i].hit) << "step " << call.step << " cap " << capacity;
        ASSERT_EQ(out[i].evicted, expected[i].evicted)
            << "step " << call.step << " cap " << capacity;
      }
      t += call.keys.size();
    }
    ASSERT_TRUE(cache.invariants_hold());
  }
}

TEST(ReuseProbability, MatchesItsReferenceInBothScopes) {
  const reuse_probability_config configs[] = {
      {},
      {.horizon = 3, .max_distance = 4, .positions = 6, .position_weight = 0.5},
      {.horizon = 2, .max_distance = 8, .positions = 0, .position_weight = 0.25},
      {.horizon = 5, .max_distance = 2, .positions = 12, .position_weight = 1.0},
      {.horizon = 1, .max_distance = 3, .positions = 4, .position_weight = 0.0},
  };
  for (const reuse_probability_config& config : configs) {
    for (const cache_scope scope : {cache_scope::global, cache_scope::per_layer}) {
      for (std::uint64_t seed = 1; seed <= 2; ++seed) {
        expect_matches(config, scope, seed);
      }
    }
  }
}

// Token positions that change within a pass (a batch with one position per row), victims asked at
// another position than the access that follows (a pass then counted inside their horizon),
// random protection: every victim must be the scan of the resident keys by the public `score`,
// ties to the least recently used. This checks when the policy's heap is rescored against the
// rule it caches.
TEST(ReuseProbability, VictimIsTheLeastScoreWhenPositionsChangeWithinAPass) {
  const reuse_probability_config config{
      .horizon = 3, .max_distance = 6, .positions = 8, .position_weight = 0.9};
  const std::int32_t keys = 12;
  for (std::uint64_t seed = 1; seed <= 16; ++seed) {
    std::mt19937_64 rng(seed);
    reuse_probability policy(config);
    policy.reset(key_layout{cache_scope::per_layer, 1, keys});
    std::uint32_t step = 0;
    const auto next = [&](std::uint64_t i) {
      step += rng() % 2 == 0 ? 1u : 0u;
      return access_context{step, 0, i, static_cast<std::uint32_t>(rng() % 4)};
    };
    const auto ask = [&](access_context ctx) {
      ctx.position = rng() % 2 == 0 ? ctx.position : static_cast<std::uint32_t>(rng() % 4);
      return ctx;
    };
    const auto rank = [&](cache_key k, const access_context& ctx) { return policy.score(k, ctx); };
    const test::hook_run run = test::drive_hooks(policy, keys, 5, rng, 4000, next, ask, rank);
    ASSERT_EQ(run.mismatch, -1) << "seed " << seed << ": victim " << run.got << ", expected "
                                << run.expected;
    EXPECT_GT(run.victims, 1000u);
  }
}

TEST(ReuseProbability, RejectsBadParameters) {
  expect_error([] { reuse_probability({.horizon = 0}); }, "horizon must be in [1, 4096], got 0");
  expect_error([] { reuse_probability({.max_distance = 0}); }, "max_distance", "got 0");
  expect_error([] { reuse_probability({.positions = -1}); }, "positions", "got -1");
  expect_error([] { reuse_probability({.position_weight = 1.5}); }, "position_weight", "got 1.5");
}

}  // namespace
