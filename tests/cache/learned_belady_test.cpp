// SPDX-License-Identifier: Apache-2.0
// learned_belady against its brute-force reference (every victim recomputed from the whole
// history) on small random streams in both scopes, with windows and half-lives short enough that
// every path runs (labels by reuse and by expiry, halvings, co-activation, positions); that it
// learns the optimum where recency cannot; and its parameters' checks.
#include "cache/learned_belady_reference.hpp"
#include "cache/reference.hpp"
#include "support/expect_error.hpp"

#include <wisp/cache/learned_belady.hpp>
#include <wisp/cache/log_bins.hpp>
#include <wisp/cache/lru.hpp>
#include <wisp/cache/per_layer_cache.hpp>
#include <wisp/cache/slot_cache.hpp>

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <vector>

namespace {

using namespace wisp;
using wisp::test::learned_belady_reference;
using wisp::test::random_calls;

/// A cache over `capacity` slots whose victims come from the brute-force reference.
class reference_cache {
 public:
  reference_cache(key_layout layout, std::int32_t capacity, learned_belady_config config)
      : capacity_(capacity), ref_(layout, config) {}

  std::vector<access_result> call(const std::vector<cache_key>& keys, const access_context& ctx) {
    std::vector<access_result> out;
    access_context each = ctx;
    test::replay_reference_call(
        resident_, capacity_, keys,
        [&](const std::set<cache_key>& protect) { return ref_.victim(each, resident_, protect); },
        [&](cache_key key) {
          ref_.access(key, each);
          ++each.time;
        },
        out);
    return out;
  }

 private:
  std::int32_t capacity_;
  std::set<cache_key> resident_;
  learned_belady_reference ref_;
};

// Token positions: sequences of 3 to 12 passes.
std::vector<std::uint32_t> random_positions(std::mt19937_64& rng, std::uint32_t steps) {
  std::vector<std::uint32_t> positions;
  std::uint32_t p = 0, length = 0;
  for (std::uint32_t s = 0; s < steps; ++s) {
    if (p == length) {
      p = 0;
      length = 3 + static_cast<std::uint32_t>(rng() % 10);
    }
    positions.push_back(p++);
  }
  return positions;
}

const learned_belady_config short_memory{.window = 3, .threshold = 4, .count_half_life = 5};

TEST(LearnedBelady, GlobalScopeMatchesBruteForceReference) {
  struct shape {
    std::int32_t layers, experts, k, capacity;
  };
  const shape shapes[] = {{4, 6, 2, 5}, {5, 8, 3, 12}, {3, 10, 2, 20}, {6, 6, 3, 9}};
  std::mt19937_64 rng(2811);
  for (const learned_belady_config& config : {short_memory, learned_belady_config{}}) {
    for (const shape& sh : shapes) {
      const std::uint32_t steps = 40;
      const auto calls = random_calls(rng, sh.layers, sh.experts, sh.k, steps);
      const auto positions = random_positions(rng, steps);
      const key_layout layout{cache_scope::global, sh.layers, sh.experts};
      slot_cache<learned_belady> cache(layout, sh.capacity, learned_belady(config));
      reference_cache ref(layout, sh.capacity, config);
      std::vector<access_result> got(static_cast<std::size_t>(sh.k));
      std::uint64_t t = 0;
      std::uint64_t evictions = 0;
      for (const auto& call : calls) {
        const access_context ctx{call.step, call.layer, t, positions[call.step]};
        cache.access_call(call.keys, ctx, got);
        const std::vector<access_result> want = ref.call(call.keys, ctx);
        for (std::size_t i = 0; i < call.keys.size(); ++i) {
          ASSERT_EQ(got[i].hit, want[i].hit) << "time " << t + i;
          ASSERT_EQ(got[i].evicted, want[i].evicted)
              << "time " << t + i << " L=" << sh.layers << " E=" << sh.experts
              << " cap=" << sh.capacity << " window=" << config.window;
          evictions += got[i].evicted != no_key ? 1u : 0u;
        }
        t += call.keys.size();
      }
      EXPECT_GT(evictions, 20u);  // the comparison covered many decisions
    }
  }
}

TEST(LearnedBelady, PerLayerScopeMatchesBruteForceReference) {
  std::mt19937_64 rng(2812);
  const std::int32_t layers = 4, experts = 10, k = 3;
  const std::uint32_t steps = 60;
  for (const learned_belady_config& config : {short_memory, learned_belady_config{}}) {
    const auto calls = random_calls(rng, layers, experts, k, steps, /*per_layer_keys=*/true);
    const auto positions = random_positions(rng, steps);
    const std::vector<std::int32_t> capacities = {3, 4, 6, 8};
    per_layer_cache<learned_belady> caches(capacities, experts,
                                           [&](std::int32_t) { return learned_belady(config); });
    std::vector<reference_cache> refs;
    for (std::int32_t l = 0; l < layers; ++l) {
      refs.emplace_back(key_layout{cache_scope::per_layer, layers, experts},
                        capacities[static_cast<std::size_t>(l)], config);
    }
    std::vector<access_result> got(static_cast<std::size_t>(k));
    std::uint64_t t = 0;
    for (const auto& call : calls) {
      const access_context ctx{call.step, call.layer, t, positions[call.step]};
      caches.access_call(call.keys, ctx, got);
      const auto want = refs[static_cast<std::size_t>(call.layer)].call(call.keys, ctx);
      for (std::size_t i = 0; i < call.keys.size(); ++i) {
        ASSERT_EQ(got[i].hit, want[i].hit) << "time " << t + i;
        ASSERT_EQ(got[i].evicted, want[i].evicted) << "time " << t + i << " layer " << call.layer;
      }
      t += call.keys.size();
    }
  }
}

// Single accesses at irregular steps and layers, keys repeated within a call: orders the
// layer-sequential stream never produces.
TEST(LearnedBelady, IrregularAccessesMatchBruteForceReference) {
  std::mt19937_64 rng(2813);
  for (int rep = 0; rep < 6; ++rep) {
    const std::int32_t layers = 2 + static_cast<std::int32_t>(rng() % 4);
    const std::int32_t experts = 2 + static_cast<std::int32_t>(rng() % 6);
    const key_layout layout{cache_scope::global, layers, experts};
    const std::int32_t capacity = 1 + static_cast<std::int32_t>(rng() % layout.size());
    slot_cache<learned_belady> cache(layout, capacity, learned_belady(short_memory));
    reference_cache ref(layout, capacity, short_memory);
    std::uint32_t step = 0;
    std::int32_t layer = 0;
    std::vector<access_result> got(1);
    for (std::uint64_t t = 0; t < 600; ++t) {
      if (rng() % 3 == 0) {  // a new call, sometimes in a new pass
        step += rng() % 4 == 0 ? 1 + static_cast<std::uint32_t>(rng() % 3) : 0;
        layer = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(layers));
      }
      const auto key = static_cast<cache_key>(rng() % static_cast<std::uint64_t>(layout.size()));
      const access_context ctx{step, layer, t, static_cast<std::uint32_t>(rng() % 5)};
      // One key at a time, each its own call, or a continuation of the current (step, layer).
      cache.access_call(std::vector<cache_key>{key}, ctx, got);
      const auto want = ref.call({key}, ctx);
      ASSERT_EQ(got[0].hit, want[0].hit) << "time " << t;
      ASSERT_EQ(got[0].evicted, want[0].evicted) << "time " << t << " cap " << capacity;
    }
  }
}

// Two hot keys come back every 8 passes between cold keys that come back only after 120: LRU
// (4 slots) evicts the hot keys before they return and misses every access; Belady keeps them.
// learned_belady learns from the optimum's labels that the hot keys are kept and the cold ones
// are not, and ends within 10% of Belady's misses.
TEST(LearnedBelady, LearnsWhatRecencyCannot) {
  std::vector<cache_key> stream;
  std::int32_t cold = 0;
  for (int round = 0; round < 400; ++round) {
    stream.push_back(round % 2);  // hot: 0, 1
    for (int j = 0; j < 3; ++j) {
      stream.push_back(2 + cold);
      cold = (cold + 1) % 60;
    }
  }
  const key_layout layout{cache_scope::per_layer, 1, 62};
  auto misses = [&](auto cache) {
    std::uint64_t m = 0;
    for (std::size_t t = 0; t < stream.size(); ++t) {
      const access_context ctx{static_cast<std::uint32_t>(t), 0, t};
      cache.begin_call(ctx);
      m += cache.access(stream[t], ctx).hit ? 0 : 1;
    }
    return m;
  };
  const std::uint64_t lru_misses = misses(slot_cache<lru>(layout, 4));
  const std::uint64_t best = misses(slot_cache<belady>(layout, 4, belady(stream)));
  const std::uint64_t learned = misses(slot_cache<learned_belady>(layout, 4));
  EXPECT_EQ(lru_misses, stream.size());
  EXPECT_LT(best, stream.size() * 8 / 10);
  EXPECT_LE(learned, best + best / 10) << "lru " << lru_misses << " belady " << best;
}

TEST(LearnedBelady, ClassesAndBinsFollowTheirDefinitions) {
  const learned_belady policy;
  // Distances up to 4, then two bins per power of two; the last bin is beyond the window (64).
  const std::pair<std::int64_t, std::int32_t> bins[] = {
      {0, 0},   {1, 1},   {4, 4},   {5, 5},   {6, 5},    {7, 6},  {8, 6},
      {9, 7},   {12, 7},  {13, 8},  {16, 8},  {17, 9},   {24, 9}, {25, 10},
      {48, 11}, {49, 12}, {64, 12}, {65, 13}, {1000, 13}};
  for (const auto& [distance, bin] : bins) {
    EXPECT_EQ(policy.bin_of(distance), bin) << "distance " << distance;
  }
}

TEST(HalfOctaveBin, MatchesItsIntervals) {
  // n up to 4 is its own bin; n - 1 in [2^e, 1.5 x 2^e) is bin 2e + 1, in [1.5 x 2^e, 2^(e+1))
  // bin 2e + 2: walked here interval by interval, up to 2^40.
  for (std::uint64_t n = 0; n <= 4; ++n) {
    EXPECT_EQ(half_octave_bin(n), static_cast<std::int32_t>(n));
  }
  for (std::int32_t e = 2; e < 40; ++e) {
    const std::uint64_t low = std::uint64_t{1} << e, mid = low + low / 2, high = 2 * low;
    for (const std::uint64_t x : {low, low + 1, mid - 1}) {
      EXPECT_EQ(half_octave_bin(x + 1), 2 * e + 1) << "n " << x + 1;
    }
    for (const std::uint64_t x : {mid, mid + 1, high - 1}) {
      EXPECT_EQ(half_octave_bin(x + 1), 2 * e + 2) << "n " << x + 1;
    }
  }
  static_assert(half_octave_bin(4) == 4 && half_octave_bin(6) == 5);
}

TEST(LearnedBelady, RejectsBadParametersNamingThem) {
  test::expect_error([] { learned_belady(learned_belady_config{.window = 0}); }, "window", "0");
  test::expect_error([] { learned_belady(learned_belady_config{.window = 257}); }, "window", "257");
  test::expect_error([] { learned_belady(learned_belady_config{.threshold = 0}); }, "threshold");
  test::expect_error([] { learned_belady(learned_belady_config{.count_half_life = 0}); },
                     "count_half_life");
}

}  // namespace
