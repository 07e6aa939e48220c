// SPDX-License-Identifier: Apache-2.0
// decayed_frequency and predicted_next_use against brute-force references of their rules (every
// victim recomputed from the whole access history), and slot_cache::prefetch.
#include "cache/reference.hpp"
#include "support/expect_error.hpp"

#include <wisp/cache/decayed_frequency.hpp>
#include <wisp/cache/predicted_next_use.hpp>
#include <wisp/cache/slot_cache.hpp>
#include <wisp/predict/coactivation.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

namespace {

using namespace wisp;
using wisp::test::expect_error;
using wisp::test::random_calls;

/// Brute force: every access of every key is remembered; each victim is recomputed from them.
class history_reference {
 public:
  enum class rule { decayed_frequency, predicted_next_use };

  history_reference(rule r, key_layout layout, std::int32_t capacity, double half_life,
                    const coactivation_predictor* predictor = nullptr,
                    const routing_pass* pass = nullptr, std::int32_t lookahead = 4)
      : rule_(r),
        layout_(layout),
        capacity_(capacity),
        half_life_(half_life),
        predictor_(predictor),
        pass_(pass),
        lookahead_(lookahead) {}

  cache_key access_call(const std::vector<cache_key>& keys, const access_context& ctx,
                        std::vector<access_result>& out) {
    test::replay_reference_call(
        resident_, capacity_, keys,
        [&](const std::set<cache_key>& protect) { return victim(ctx, protect); },
        [&](cache_key key) {
          history_[key].push_back(ctx.step);
          last_[key] = ++tick_;
          steps_.insert(ctx.step);
        },
        out);
    return no_key;
  }

 private:
  [[nodiscard]] double decayed(const std::vector<std::uint32_t>& steps, std::uint32_t now) const {
    double sum = 0;
    for (const std::uint32_t s : steps) {
      sum += std::exp2(-(static_cast<double>(now) - s) / half_life_);
    }
    return sum;
  }
  [[nodiscard]] double distance(cache_key key, const access_context& ctx) const {
    const std::int32_t layers = layout_.layers;
    const std::int32_t key_layer = layout_.layer_of(key, ctx.layer);
    const std::int32_t d = ((key_layer - ctx.layer - 1) % layers + layers) % layers + 1;
    double p;
    const std::int32_t observed = pass_ != nullptr ? pass_->observed() : 0;
    if (predictor_ != nullptr && layout_.scope == cache_scope::global && key_layer > ctx.layer &&
        key_layer >= observed && key_layer - observed < lookahead_) {
      std::vector<float> scores(static_cast<std::size_t>(layout_.experts));
      predictor_->score(*pass_, key_layer, scores);
      p = scores[static_cast<std::size_t>(key % layout_.experts)];
    } else {
      const std::vector<std::uint32_t> seen(steps_.begin(), steps_.end());
      p = decayed(history_.at(key), ctx.step) / decayed(seen, ctx.step);
    }
    return p <= 0 ? std::numeric_limits<double>::infinity() : d + layers * (1.0 / p - 1.0);
  }
  [[nodiscard]] cache_key victim(const access_context& ctx, const std::set<cache_key>& protect) {
    cache_key best = no_key;
    for (const cache_key k : resident_) {
      if (protect.count(k) != 0) {
        continue;
      }
      if (best == no_key) {
        best = k;
        continue;
      }
      bool better;
      if (rule_ == rule::decayed_frequency) {
        const double a = decayed(history_.at(k), ctx.step);
        const double b = decayed(history_.at(best), ctx.step);
        better = a < b || (a == b && last_.at(k) < last_.at(best));
      } else {
        const double a = distance(k, ctx);
        const double b = distance(best, ctx);
        better = a > b || (a == b && last_.at(k) < last_.at(best));
      }
      best = better ? k : best;
    }
    return best;
  }

  rule rule_;
  key_layout layout_;
  std::int32_t capacity_;
  double half_life_;
  const coactivation_predictor* predictor_;
  const routing_pass* pass_;
  std::int32_t lookahead_;
  std::set<cache_key> resident_;
  std::map<cache_key, std::vector<std::uint32_t>> history_;
  std::map<cache_key, std::uint64_t> last_;
  std::set<std::uint32_t> steps_;
  std::uint64_t tick_ = 0;
};

// Replays random calls through policy and reference; every hit and victim must agree. With a
// predictor, every layer's routing is observed before its call and each pass learned after it.
template <class Policy>
void expect_matches(history_reference::rule rule, Policy prototype, double half_life,
                    cache_scope scope, std::uint64_t seed, bool with_predictor) {
  std::mt19937_64 rng(seed);
  const std::int32_t layers = 4, experts = 8, k = 2;
  // Every count is a sum of powers of two spanning at most 50 bits: exact in a double.
  const std::uint32_t steps = half_life < 1.0 ? 25 : 40;
  const bool global = scope == cache_scope::global;
  const key_layout layout = global ? key_layout{cache_scope::global, layers, experts}
                                   : key_layout{cache_scope::per_layer, layers, experts};
  const auto calls = random_calls(rng, layers, experts, k, steps, !global);
  const moe_shape shape{layers, experts, k};
  coactivation_predictor predictor(shape);
  routing_pass pass(shape);
  if (with_predictor) {
    if constexpr (std::is_same_v<Policy, predicted_next_use>) {
      prototype.attach(predictor, pass);
    }
  }
  for (const std::int32_t capacity : {3, 5, 9}) {
    const std::int32_t cap = global ? capacity : std::min(capacity, experts);
    slot_cache<Policy> cache(layout, cap, prototype);
    history_reference ref(rule, layout, cap, half_life, with_predictor ? &predictor : nullptr,
                          &pass);
    std::vector<access_result> out(static_cast<std::size_t>(k)), expected;
    std::uint64_t t = 0;
    for (const auto& call : calls) {
      if (!global && call.layer != 1) {
        continue;  // one layer's cache in per-layer scope
      }
      if (call.layer == 0) {
        pass.clear();
      }
      std::vector<std::int32_t> ids;
      for (const cache_key key : call.keys) {
        ids.push_back(global ? key % experts : key);
      }
      if (global) {
        pass.observe(call.layer, ids);
      }
      const access_context ctx{call.step, call.layer, t};
      cache.access_call(call.keys, ctx, out);
      ref.access_call(call.keys, ctx, expected);
      for (std::size_t i = 0; i < call.keys.size(); ++i) {
        ASSERT_EQ(out[i].hit, expected[i].hit) << "step " << call.step << " cap " << cap;
        ASSERT_EQ(out[i].evicted, expected[i].evicted) << "step " << call.step << " cap " << cap;
      }
      t += call.keys.size();
      if (global && call.layer == layers - 1 && with_predictor) {
        predictor.learn(pass);
      }
    }
    ASSERT_TRUE(cache.invariants_hold());
  }
}

TEST(DecayedFrequency, MatchesItsReferenceInBothScopes) {
  for (const double h : {1.0, 0.5}) {
    for (const cache_scope scope : {cache_scope::global, cache_scope::per_layer}) {
      for (std::uint64_t seed = 1; seed <= 3; ++seed) {
        expect_matches(history_reference::rule::decayed_frequency, decayed_frequency(h), h, scope,
                       seed, false);
      }
    }
  }
  expect_error([] { decayed_frequency(0.0); }, "half_life must be finite and > 0");
}

TEST(DecayedFrequency, KeepsCountsFiniteOverLongRuns) {
  // 600 half-lives: the scaled counts are rescaled (and the heap rebuilt) along the way.
  slot_cache<decayed_frequency> cache(4, 2, decayed_frequency(1.0));
  for (std::uint32_t s = 0; s < 600; ++s) {
    cache.access(static_cast<cache_key>(s % 3), {s, 0, s});
  }
  EXPECT_TRUE(cache.invariants_hold());
  EXPECT_NEAR(cache.policy().count(2, 599), 8.0 / 7.0, 1e-12);  // sum of 2^-3n
  // Key 2 was last used at 599 and key 1 at 598: key 0 (597) and key 1 compete for eviction.
  EXPECT_EQ(cache.access(3, {600, 0, 600}).evicted, 1);
}

TEST(PredictedNextUse, MatchesItsReferenceWithAndWithoutAPredictor) {
  for (const double h : {1.0, 0.5}) {
    for (std::uint64_t seed = 4; seed <= 6; ++seed) {
      expect_matches(history_reference::rule::predicted_next_use, predicted_next_use(h), h,
                     cache_scope::global, seed, false);
      expect_matches(history_reference::rule::predicted_next_use, predicted_next_use(h), h,
                     cache_scope::global, seed, true);
      expect_matches(history_reference::rule::predicted_next_use, predicted_next_use(h), h,
                     cache_scope::per_layer, seed, false);
    }
  }
}

// The hooks driven directly, in global scope: accesses of any layer in any order (a layer called
// again, a prefetch of another layer), random protection. Every victim must be the scan of the
// resident keys by the public `distance` (the farthest, ties to the least recently used). This
// checks when the policy's per-layer heaps and their kept tops are refreshed.
TEST(PredictedNextUse, VictimIsTheFarthestKeyWhateverTheOrderOfAccesses) {
  const std::int32_t layers = 3, experts = 5;
  const key_layout layout{cache_scope::global, layers, experts};
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    std::mt19937_64 rng(seed);
    predicted_next_use policy(2.0);
    policy.reset(layout);
    std::uint32_t step = 0;
    std::int32_t layer = 0;
    const auto next = [&](std::uint64_t i) {
      if (rng() % 3 == 0) {  // the next layer (and pass), or the same one again
        layer = (layer + 1) % layers;
        step += layer == 0 ? 1u : 0u;
      }
      return access_context{step, layer, i};
    };
    const auto ask = [](const access_context& ctx) { return ctx; };
    const auto rank = [&](cache_key k, const access_context& ctx) {
      return -policy.distance(k, ctx.layer);  // the farthest first
    };
    const test::hook_run run =
        test::drive_hooks(policy, layout.size(), 6, rng, 3000, next, ask, rank);
    ASSERT_EQ(run.mismatch, -1) << "seed " << seed << ": victim " << run.got << ", expected "
                                << run.expected;
    EXPECT_GT(run.victims, 500u);
  }
}

TEST(PredictedNextUse, EqualsDecayedFrequencyInPerLayerScope) {
  std::mt19937_64 rng(17);
  const auto calls = random_calls(rng, 1, 16, 3, 200, true);
  slot_cache<decayed_frequency> a(key_layout{cache_scope::per_layer, 1, 16}, 6,
                                  decayed_frequency(8));
  slot_cache<predicted_next_use> b(key_layout{cache_scope::per_layer, 1, 16}, 6,
                                   predicted_next_use(8));
  std::vector<access_result> ra(3), rb(3);
  std::uint64_t t = 0;
  for (const auto& call : calls) {
    a.access_call(call.keys, {call.step, 0, t}, ra);
    b.access_call(call.keys, {call.step, 0, t}, rb);
    ASSERT_EQ(ra, rb);
    t += 3;
  }
}

TEST(SlotCachePrefetch, LoadsOutsideTheCallAndNeverEvictsAKeptKey) {
  slot_cache<lru> cache(8, 3);
  std::vector<access_result> out(2);
  cache.access_call(std::vector<cache_key>{1, 2}, {0, 0, 0}, out);
  cache.access_call(std::vector<cache_key>{3}, {0, 0, 2}, out);
  protect_set keep(8);
  keep.insert(1);
  // Full: the victim is the least recent key not kept (2), and no access is counted.
  const access_result r = cache.prefetch(5, {0, 0, 3}, keep.view());
  EXPECT_FALSE(r.hit);
  EXPECT_EQ(r.evicted, 2);
  EXPECT_EQ(cache.key_in_slot(r.slot), 5);
  EXPECT_EQ(cache.stats().accesses, 3u);
  EXPECT_EQ(cache.stats().prefetches, 1u);
  EXPECT_EQ(cache.stats().evictions, 1u);
  EXPECT_TRUE(cache.is_protected(3));  // the current call is untouched
  EXPECT_TRUE(cache.prefetch(5, {0, 0, 3}, keep.view()).hit);
  // Everything kept: nothing happens.
  keep.insert(3);
  keep.insert(5);
  const auto before = wisp::test::snapshot(cache);
  EXPECT_EQ(cache.prefetch(6, {0, 0, 3}, keep.view()).slot, -1);
  EXPECT_EQ(wisp::test::snapshot(cache), before);
  // An expert evicted by a prefetch and requested in the same step is a collision miss.
  keep.clear();
  keep.insert(1);
  keep.insert(5);
  EXPECT_EQ(cache.prefetch(7, {0, 0, 3}, keep.view()).evicted, 3);
  EXPECT_TRUE(cache.access(3, {0, 0, 4}).collision);
  expect_error([&] { cache.prefetch(8, {0, 0, 0}, keep.view()); }, "key 8");
  // Belady takes only its future: the failed prefetch leaves the cache as it was.
  slot_cache<belady> future(4, 2, belady(std::vector<cache_key>{0, 1}));
  expect_error([&] { future.prefetch(3, {0, 0, 0}, {}); }, "belady");
  EXPECT_FALSE(future.contains(3));
  EXPECT_TRUE(future.invariants_hold());
}

}  // namespace
