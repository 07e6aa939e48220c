// SPDX-License-Identifier: Apache-2.0
// Exact reuse distances and miss curves against brute-force oracles (tests/reuse/oracle.hpp).
#include "reuse/oracle.hpp"

#include <wisp/reuse/histogram.hpp>
#include <wisp/reuse/reuse_distance.hpp>
#include <wisp/reuse/scoped_counter.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

namespace {

using wisp::cache_scope;
using wisp::miss_curve;
using wisp::reuse_distance_counter;
using wisp::reuse_histogram;
namespace oracle = wisp::testing;

struct stream_case {
  std::string name;
  std::uint32_t key_space;
  std::size_t distinct_hint;  // 0 = key space (never grows); small values force growth
  std::function<std::vector<std::uint32_t>()> make;
};

std::vector<std::uint32_t> uniform(std::uint32_t keys, std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng{seed};
  std::uniform_int_distribution<std::uint32_t> pick{0, keys - 1};
  std::vector<std::uint32_t> out(n);
  for (auto& k : out) {
    k = pick(rng);
  }
  return out;
}

// Phases with a small working set each, runs of one key repeated, and jumps.
std::vector<std::uint32_t> bursts(std::uint32_t keys, std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng{seed};
  std::vector<std::uint32_t> out;
  while (out.size() < n) {
    const auto base = static_cast<std::uint32_t>(rng() % keys);
    const auto width = static_cast<std::uint32_t>(1 + rng() % 12);
    const auto length = 1 + rng() % 200;
    for (std::uint64_t i = 0; i < length && out.size() < n; ++i) {
      const auto key = (base + static_cast<std::uint32_t>(rng() % width)) % keys;
      const auto repeat = rng() % 4 == 0 ? 1 + rng() % 5 : 1;
      for (std::uint64_t r = 0; r < repeat && out.size() < n; ++r) {
        out.push_back(key);
      }
    }
  }
  return out;
}

std::vector<stream_case> stream_cases() {
  return {
      {"single_key", 1, 0, [] { return std::vector<std::uint32_t>(3000, 0u); }},
      {"single_key_of_many", 500, 0, [] { return std::vector<std::uint32_t>(3000, 321u); }},
      {"all_distinct", 4000, 0,
       [] {
         std::vector<std::uint32_t> s(4000);
         for (std::uint32_t i = 0; i < 4000; ++i) {
           s[i] = (i * 2654435761u) % 4000;
         }
         return s;
       }},
      {"cyclic_200", 200, 0,
       [] {
         std::vector<std::uint32_t> s;
         for (int r = 0; r < 30; ++r) {
           for (std::uint32_t i = 0; i < 200; ++i) {
             s.push_back(i);
           }
         }
         return s;
       }},
      {"uniform_2", 2, 0, [] { return uniform(2, 5000, 1); }},
      {"uniform_64", 64, 0, [] { return uniform(64, 20000, 2); }},
      {"uniform_300", 300, 0, [] { return uniform(300, 20000, 3); }},
      {"uniform_1000_sparse", 1000, 0, [] { return uniform(1000, 1500, 4); }},
      {"bursts_100", 100, 0, [] { return bursts(100, 20000, 5); }},
      {"bursts_777", 777, 0, [] { return bursts(777, 20000, 6); }},
      {"zipf_500", 500, 0, [] { return oracle::zipf_stream(500, 0.9, 7).take(20000); }},
      // Slot array starts at its minimum and doubles: exercises compaction with growth.
      {"growth_uniform_700", 700, 1, [] { return uniform(700, 20000, 8); }},
      {"growth_bursts_5000", 5000, 1, [] { return bursts(5000, 20000, 9); }},
  };
}

// Readable parameter in test listings.
void PrintTo(const stream_case& c, std::ostream* out) {
  *out << c.name;
}

class ReuseStream : public ::testing::TestWithParam<stream_case> {};

TEST_P(ReuseStream, DistancesEqualExplicitLruStack) {
  const auto& param = GetParam();
  const auto stream = param.make();
  const auto expected = oracle::stack_distances(stream);
  reuse_distance_counter counter{param.key_space, param.distinct_hint};
  for (std::size_t i = 0; i < stream.size(); ++i) {
    ASSERT_EQ(counter.access(stream[i]), expected[i]) << "access " << i << " key " << stream[i];
  }
  EXPECT_EQ(counter.accesses(), stream.size());
  EXPECT_GE(counter.slot_capacity(), 2 * counter.distinct());
}

TEST_P(ReuseStream, MissCurveEqualsLruSimulationAtEveryCapacity) {
  const auto& param = GetParam();
  const auto stream = param.make();
  reuse_distance_counter counter{param.key_space, param.distinct_hint};
  reuse_histogram histogram{{cache_scope::stream, 1, param.key_space}};
  for (const auto key : stream) {
    histogram.record(counter.access(key));
  }
  const miss_curve curve{histogram};
  const auto distinct = static_cast<std::uint32_t>(counter.distinct());
  EXPECT_EQ(curve.accesses(), stream.size());
  EXPECT_EQ(curve.cold(), distinct);
  EXPECT_EQ(curve.misses(0), stream.size());
  EXPECT_LE(curve.max_capacity(), distinct);
  for (std::uint32_t c = 1; c <= distinct + 1; ++c) {
    ASSERT_EQ(curve.misses(c), oracle::lru_misses(stream, param.key_space, c)) << "capacity " << c;
  }
  // The smallest capacity reaching a hit ratio, against a scan of the oracle's curve.
  for (const double target : {0.1, 0.5, 0.8, 0.9, 0.99}) {
    std::optional<std::uint64_t> want;
    for (std::uint32_t c = 0; c <= distinct; ++c) {
      if (static_cast<double>(curve.misses(c)) <=
          (1.0 - target) * static_cast<double>(stream.size())) {
        want = c;
        break;
      }
    }
    EXPECT_EQ(curve.capacity_for_hit_ratio(target), want) << "target " << target;
  }
}

TEST_P(ReuseStream, ResetForgetsEverything) {
  const auto& param = GetParam();
  const auto stream = param.make();
  reuse_distance_counter counter{param.key_space, param.distinct_hint};
  for (const auto key : stream) {
    counter.access(key);
  }
  counter.reset();
  EXPECT_EQ(counter.distinct(), 0u);
  EXPECT_EQ(counter.accesses(), 0u);
  const auto expected = oracle::stack_distances(stream);
  for (std::size_t i = 0; i < stream.size(); ++i) {
    ASSERT_EQ(counter.access(stream[i]), expected[i]) << "access " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Streams, ReuseStream, ::testing::ValuesIn(stream_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(ReuseDistanceCounter, SmallExampleByHand) {
  reuse_distance_counter counter{8};
  const auto cold = reuse_distance_counter::cold;
  EXPECT_EQ(counter.access(3), cold);
  EXPECT_EQ(counter.access(5), cold);
  EXPECT_EQ(counter.access(3), 2u);
  EXPECT_EQ(counter.access(3), 1u);
  EXPECT_EQ(counter.access(7), cold);
  EXPECT_EQ(counter.access(5), 3u);
  EXPECT_EQ(counter.distinct(), 3u);
}

// Calls of 1..6 keys (some repeated within a call) from a skewed key distribution.
std::vector<std::vector<std::uint32_t>> random_calls(std::uint32_t keys, std::size_t n,
                                                     std::uint64_t seed) {
  oracle::zipf_stream pick{keys, 0.8, seed};
  std::mt19937_64 rng{seed};
  std::vector<std::vector<std::uint32_t>> calls(n);
  for (auto& call : calls) {
    call = pick.take(1 + rng() % 6);
  }
  return calls;
}

TEST(ReuseDistanceCounter, CallDistancesEqualExplicitStackBeforeEachCall) {
  for (const std::uint32_t keys : {1u, 7u, 64u, 500u}) {
    for (const std::size_t hint : {std::size_t{0}, std::size_t{1}}) {  // 1: slots grow, compact
      const auto calls = random_calls(keys, 6000, keys + hint);
      const auto expected = oracle::call_stack_distances(calls);
      reuse_distance_counter counter{keys, hint};
      std::vector<std::uint32_t> got;
      std::vector<std::uint32_t> out(8, 0);
      for (const auto& call : calls) {
        counter.access_call(call, out);
        got.insert(got.end(), out.begin(), out.begin() + static_cast<std::ptrdiff_t>(call.size()));
      }
      ASSERT_EQ(got, expected) << keys << " keys, hint " << hint;
      std::uint64_t accesses = 0;
      for (const auto& call : calls) {
        accesses += call.size();
      }
      EXPECT_EQ(counter.accesses(), accesses);
    }
  }
}

TEST(ReuseDistanceCounter, CallCurveEqualsProtectedLruAtEveryCapacityOfACall) {
  for (const std::uint32_t keys : {8u, 64u, 300u}) {
    const auto calls = random_calls(keys, 5000, 3 * keys);
    reuse_distance_counter counter{keys};
    reuse_histogram histogram{{cache_scope::stream, 1, keys}};
    std::vector<std::uint32_t> out(8);
    for (const auto& call : calls) {
      counter.access_call(call, out);
      for (std::size_t i = 0; i < call.size(); ++i) {
        histogram.record(out[i]);
      }
    }
    const miss_curve curve{histogram};
    for (std::uint32_t c = 6; c <= keys + 1; ++c) {  // every capacity that holds a call
      ASSERT_EQ(curve.misses(c), oracle::protected_lru_misses(calls, keys, c)) << "capacity " << c;
    }
  }
}

TEST(ReuseDistanceCounter, CallExampleByHandAndPeek) {
  reuse_distance_counter counter{8};
  const auto cold = reuse_distance_counter::cold;
  std::uint32_t d[3] = {};
  const std::uint32_t first[] = {3, 5};
  counter.access_call(first, d);
  EXPECT_EQ(d[0], cold);
  EXPECT_EQ(d[1], cold);
  // Stack before the next call: 5, 3. Per access, 3 would be at 2 and 5 then at 2 again; per
  // call both are looked up before either moves.
  const std::uint32_t second[] = {3, 5, 3};
  counter.access_call(second, d);
  EXPECT_EQ(d[0], 2u);
  EXPECT_EQ(d[1], 1u);
  EXPECT_EQ(d[2], 1u);                    // repeated within the call
  EXPECT_EQ(counter.distance_of(5), 2u);  // stack now 3, 5 (last access order)
  EXPECT_EQ(counter.distance_of(3), 1u);
  EXPECT_EQ(counter.distance_of(7), cold);
  EXPECT_EQ(counter.accesses(), 5u);  // distance_of records nothing
}

TEST(ReuseDistanceCounter, BadCallLeavesTheCounterUnchanged) {
  reuse_distance_counter counter{4};
  std::uint32_t d[2] = {};
  const std::uint32_t bad_key[] = {1, 4};
  EXPECT_THROW(counter.access_call(bad_key, d), wisp::logic_error);
  const std::uint32_t three[] = {1, 2, 3};
  EXPECT_THROW(counter.access_call(three, d), wisp::logic_error);  // no room for 3 distances
  EXPECT_EQ(counter.accesses(), 0u);
  EXPECT_EQ(counter.distinct(), 0u);
  EXPECT_THROW((void)counter.distance_of(4), wisp::logic_error);
}

TEST(ReuseDistanceCounter, RejectsBadKeysAndKeySpaces) {
  EXPECT_THROW(reuse_distance_counter{0}, wisp::logic_error);
  EXPECT_THROW(reuse_distance_counter{std::size_t{1} << 31}, wisp::logic_error);
  reuse_distance_counter counter{4};
  counter.access(1);
  EXPECT_THROW(counter.access(4), wisp::logic_error);
  EXPECT_EQ(counter.accesses(), 1u);  // unchanged
  EXPECT_EQ(counter.access(1), 1u);
}

TEST(ReuseDistanceCounter, MemoryDoesNotGrowWithStreamLength) {
  reuse_distance_counter counter{100};
  const auto before = counter.slot_capacity();
  const auto stream = uniform(100, 200000, 11);
  for (const auto key : stream) {
    counter.access(key);
  }
  EXPECT_EQ(counter.slot_capacity(), before);
}

TEST(MissCurve, EmptyAndColdOnly) {
  const miss_curve empty{reuse_histogram{{cache_scope::stream, 1, 4}}};
  EXPECT_EQ(empty.accesses(), 0u);
  EXPECT_EQ(empty.misses(3), 0u);
  EXPECT_EQ(empty.miss_ratio(3), 0.0);
  EXPECT_EQ(empty.capacity_for_hit_ratio(0.5), std::nullopt);

  reuse_histogram h{{cache_scope::stream, 1, 4}};
  h.record(reuse_distance_counter::cold);
  h.record(reuse_distance_counter::cold);
  const miss_curve cold_only{h};
  EXPECT_EQ(cold_only.max_capacity(), 0u);
  EXPECT_EQ(cold_only.misses(0), 2u);
  EXPECT_EQ(cold_only.misses(100), 2u);
  EXPECT_EQ(cold_only.miss_ratio(1), 1.0);
  EXPECT_EQ(cold_only.capacity_for_hit_ratio(0.1), std::nullopt);
}

TEST(ReuseHistogram, RejectsImpossibleDistances) {
  reuse_histogram h{{cache_scope::stream, 1, 4}};
  EXPECT_THROW(h.record(0), wisp::logic_error);
  EXPECT_THROW(h.record(5), wisp::logic_error);
  EXPECT_EQ(h.accesses(), 0u);
  EXPECT_THROW(reuse_histogram({cache_scope::per_layer, 0, 4}), wisp::logic_error);
  reuse_histogram unbounded;  // keys_per_partition 0: any distance
  unbounded.record(1000000);
  EXPECT_EQ(unbounded.max_distance(), 1000000u);
}

// Per-layer scope: each layer's own LRU; the curve sums the layers' oracle misses.
TEST(ScopedReuseCounter, PerLayerAndGlobalAgainstOracles) {
  constexpr std::uint32_t layers = 3;
  constexpr std::uint32_t experts = 16;
  std::mt19937_64 rng{12};
  std::vector<std::pair<std::uint32_t, std::uint32_t>> accesses;
  for (int step = 0; step < 3000; ++step) {
    for (std::uint32_t l = 0; l < layers; ++l) {
      for (int j = 0; j < 2; ++j) {
        accesses.emplace_back(l, static_cast<std::uint32_t>(rng() % (l == 0 ? 4 : experts)));
      }
    }
  }
  wisp::scoped_reuse_counter per_layer{cache_scope::per_layer, layers, experts};
  wisp::scoped_reuse_counter global{cache_scope::global, layers, experts};
  std::vector<std::vector<std::uint32_t>> layer_streams(layers);
  std::vector<std::uint32_t> global_stream;
  for (const auto& [l, e] : accesses) {
    per_layer.access(l, e);
    global.access(l, e);
    layer_streams[l].push_back(e);
    global_stream.push_back(l * experts + e);
  }
  const miss_curve layer_curve{per_layer.histogram()};
  const miss_curve global_curve{global.histogram()};
  EXPECT_EQ(per_layer.histogram().shape(),
            (wisp::histogram_shape{cache_scope::per_layer, layers, experts}));
  EXPECT_EQ(per_layer.distinct_per_cache(), experts);
  EXPECT_EQ(per_layer.distinct_total(), 4u + 2 * experts);
  EXPECT_EQ(global.distinct_per_cache(), 4u + 2 * experts);
  for (std::uint32_t c = 0; c <= experts + 1; ++c) {
    std::uint64_t want = 0;
    for (const auto& s : layer_streams) {
      want += oracle::lru_misses(s, experts, c);
    }
    EXPECT_EQ(layer_curve.misses(c), want) << "capacity " << c;
  }
  for (std::uint32_t c = 0; c <= layers * experts + 1; ++c) {
    EXPECT_EQ(global_curve.misses(c), oracle::lru_misses(global_stream, layers * experts, c))
        << "capacity " << c;
  }
  EXPECT_THROW(per_layer.access(layers, 0), wisp::logic_error);
  const std::uint32_t bad[] = {1, experts};
  EXPECT_THROW(global.access_call(0, bad), wisp::logic_error);
  EXPECT_EQ(global.histogram().accesses(), accesses.size());  // nothing recorded
  EXPECT_THROW(per_layer.access(0, experts), wisp::logic_error);
  EXPECT_THROW(wisp::scoped_reuse_counter(cache_scope::stream, 1, 1), wisp::logic_error);
}

// Calls of two experts per (step, layer): per layer and global, each scope's call curve against
// a protected LRU cache of that scope at every capacity that holds a call.
TEST(ScopedReuseCounter, CallsAgainstProtectedLruInBothScopes) {
  constexpr std::uint32_t layers = 3;
  constexpr std::uint32_t experts = 12;
  std::mt19937_64 rng{21};
  wisp::scoped_reuse_counter per_layer{cache_scope::per_layer, layers, experts};
  wisp::scoped_reuse_counter global{cache_scope::global, layers, experts};
  std::vector<std::vector<std::vector<std::uint32_t>>> layer_calls(layers);
  std::vector<std::vector<std::uint32_t>> global_calls;
  for (int step = 0; step < 2000; ++step) {
    for (std::uint32_t l = 0; l < layers; ++l) {
      const auto a = static_cast<std::uint32_t>(rng() % experts);
      const auto b = (a + 1 + static_cast<std::uint32_t>(rng() % (experts - 1))) % experts;
      const std::vector<std::uint32_t> call{a, b};
      per_layer.access_call(l, call);
      global.access_call(l, call);
      layer_calls[l].push_back(call);
      global_calls.push_back({l * experts + a, l * experts + b});
    }
  }
  const miss_curve layer_curve{per_layer.histogram()};
  const miss_curve global_curve{global.histogram()};
  for (std::uint32_t c = 2; c <= experts + 1; ++c) {
    std::uint64_t want = 0;
    for (const auto& calls : layer_calls) {
      want += oracle::protected_lru_misses(calls, experts, c);
    }
    ASSERT_EQ(layer_curve.misses(c), want) << "capacity " << c;
  }
  for (std::uint32_t c = 2; c <= layers * experts + 1; ++c) {
    ASSERT_EQ(global_curve.misses(c),
              oracle::protected_lru_misses(global_calls, layers * experts, c))
        << "capacity " << c;
  }
}

}  // namespace
