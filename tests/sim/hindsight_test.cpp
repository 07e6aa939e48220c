// SPDX-License-Identifier: Apache-2.0
// The hindsight references against brute force: every victim recomputed from the whole history
// by linear scans (both scopes, random streams with sequences and skipped passes); that
// simulate_hindsight builds each cache from its own accesses; Belady stays below both; errors.
#include "cache/reference.hpp"
#include "support/expect_error.hpp"

#include <wisp/cache/log_bins.hpp>
#include <wisp/cache/policies.hpp>
#include <wisp/cache/slot_cache.hpp>
#include <wisp/sim/hindsight.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string_view>
#include <vector>

namespace {

using namespace wisp;
using wisp::access;
using wisp::test::expect_error;

constexpr std::uint64_t none = std::numeric_limits<std::uint64_t>::max();

/// One cache's accesses, in order, and the sequence starts.
struct history {
  std::vector<std::uint32_t> steps;
  std::vector<cache_key> keys;
  std::vector<std::size_t> starts;

  // Distinct passes in [from, to) that use `key` (every key when key < 0).
  [[nodiscard]] std::size_t passes(cache_key key, std::uint64_t from, std::uint64_t to) const {
    std::set<std::uint32_t> p;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if ((key < 0 || keys[i] == key) && steps[i] >= from && steps[i] < to) {
        p.insert(steps[i]);
      }
    }
    return p.size();
  }
  // [from, to) of the sequence holding `step`.
  [[nodiscard]] std::pair<std::uint64_t, std::uint64_t> sequence(std::uint64_t step) const {
    std::uint64_t from = 0, to = none;
    for (const std::size_t s : starts) {
      if (s <= step) {
        from = s;
      } else {
        to = s;
        break;
      }
    }
    return {from, to};
  }
  // The last use of `key` before `t` (none if there is none), and its first use at or after t.
  [[nodiscard]] std::uint64_t last_before(cache_key key, std::uint64_t t) const {
    std::uint64_t out = none;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (keys[i] == key && steps[i] < t) {
        out = steps[i];
      }
    }
    return out;
  }
  [[nodiscard]] std::uint64_t first_from(cache_key key, std::uint64_t t) const {
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (keys[i] == key && steps[i] >= t) {
        return steps[i];
      }
    }
    return none;
  }
};

/// hindsight_reuse recomputed from its definition: features by scans of the whole history (the
/// bins of `half_octave_bin`, checked against their intervals in the cache tests).
class reuse_reference {
 public:
  reuse_reference(const history& h, key_layout layout) : h_(h), layout_(layout) {
    std::set<std::uint32_t> passes(h.steps.begin(), h.steps.end());
    for (const std::uint32_t t : passes) {
      for (cache_key k = 0; k < layout.size(); ++k) {
        const auto f = bucket(k, t);
        if (f) {
          const std::uint64_t next = h.first_from(k, t);
          sum_[*f] += next == none ? 256 : std::min<std::uint64_t>(next - t, 256);
          ++count_[*f];
        }
      }
    }
  }
  [[nodiscard]] std::optional<std::size_t> bucket(cache_key k, std::uint64_t t) const {
    const std::uint64_t last = h_.last_before(k, t);
    if (last == none) {
      return std::nullopt;
    }
    std::size_t age = 0;
    while ((std::uint64_t{1} << age) <= t - last) {
      ++age;
    }
    age = std::min<std::size_t>(age, 15);
    const std::size_t near = h_.passes(k, t >= 8 ? t - 8 : 0, t);
    const auto [from, to] = h_.sequence(t);
    const std::size_t passes = h_.passes(-1, from, to);
    const std::size_t popularity = passes == 0 ? 0 : h_.passes(k, from, to) * 256 / passes;
    return (age * 9 + near) * 18 + static_cast<std::size_t>(half_octave_bin(popularity));
  }
  [[nodiscard]] double score(cache_key k, const access_context& ctx) const {
    const bool global = layout_.scope == cache_scope::global;
    const std::int32_t layer = global ? k / layout_.experts : ctx.layer;
    const std::uint64_t t = ctx.step + (layer > ctx.layer ? 0u : 1u);
    const auto b = bucket(k, t);
    const double mean = b && count_.count(*b) != 0
                            ? static_cast<double>(sum_.at(*b)) / static_cast<double>(count_.at(*b))
                            : 256.0;
    if (!global) {
      return mean;
    }
    std::int32_t d = 1;  // layer executions until `layer` runs again
    for (std::int32_t l = (ctx.layer + 1) % layout_.layers; l != layer;
         l = (l + 1) % layout_.layers) {
      ++d;
    }
    return mean * layout_.layers + d;
  }

 private:
  const history& h_;
  key_layout layout_;
  std::map<std::size_t, std::uint64_t> sum_, count_;
};

enum class which { frequency, reuse };

/// A brute-force cache following the reference's victims; compares every access with `cache`.
template <class Cache>
void expect_same_victims(which w, const history& h, key_layout layout, std::int32_t capacity,
                         Cache& cache, const std::vector<test::stream_call>& calls,
                         std::uint64_t& misses) {
  const reuse_reference reuse(h, layout);
  std::set<cache_key> resident;
  std::map<cache_key, std::uint64_t> last;
  std::uint64_t tick = 0;
  std::vector<access_result> want, got;
  for (const test::stream_call& call : calls) {
    const access_context ctx{call.step, call.layer, 0, 0};
    test::replay_reference_call(
        resident, capacity, call.keys,
        [&](const std::set<cache_key>& protect) {
          cache_key best = no_key;
          double best_score = 0;
          for (const cache_key k : resident) {
            if (protect.count(k) != 0) {
              continue;
            }
            // Larger is evicted first: fewer uses in the sequence, or a later expected use.
            const auto [from, to] = h.sequence(call.step);
            const double s = w == which::frequency ? -static_cast<double>(h.passes(k, from, to))
                                                   : reuse.score(k, ctx);
            if (best == no_key || s > best_score || (s == best_score && last[k] < last[best])) {
              best = k;
              best_score = s;
            }
          }
          return best;
        },
        [&](cache_key k) { last[k] = ++tick; }, want);
    got.assign(call.keys.size(), access_result{});
    cache.access_call(call.keys, ctx, got);
    for (std::size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got[i].hit, want[i].hit) << "step " << call.step << " layer " << call.layer;
      ASSERT_EQ(got[i].evicted, want[i].evicted) << "step " << call.step << " layer " << call.layer;
      misses += want[i].hit ? 0u : 1u;
    }
  }
}

// Random calls whose passes skip some steps (every third step is gone), in sequences.
std::vector<test::stream_call> sparse_calls(std::mt19937_64& rng, std::int32_t layers,
                                            std::int32_t experts, std::int32_t k,
                                            std::uint32_t steps, bool per_layer_keys) {
  auto calls = test::random_calls(rng, layers, experts, k, steps, per_layer_keys);
  for (auto& c : calls) {
    c.step += c.step / 2;
  }
  return calls;
}

history history_of(const std::vector<test::stream_call>& calls, std::int32_t layer,
                   std::vector<std::size_t> starts) {
  history h;
  h.starts = std::move(starts);
  for (const auto& c : calls) {
    if (layer < 0 || c.layer == layer) {
      for (const cache_key key : c.keys) {
        h.steps.push_back(c.step);
        h.keys.push_back(key);
      }
    }
  }
  return h;
}

template <class P>
P make(const history& h) {
  return P(h.steps, h.keys, h.starts);
}

template <class P>
void expect_matches_reference(which w) {
  struct shape {
    std::int32_t layers, experts, k, capacity;
    std::uint32_t steps;
  };
  const shape shapes[] = {{3, 6, 2, 5, 60}, {4, 8, 3, 11, 50}, {2, 5, 1, 3, 300}};
  const std::vector<std::size_t> starts = {7, 20, 21, 44, 70, 200};
  std::mt19937_64 rng(2812);
  for (const shape& sh : shapes) {
    SCOPED_TRACE(testing::Message() << sh.layers << " x " << sh.experts << " top-" << sh.k);
    {  // global scope: one cache over every layer
      const auto calls = sparse_calls(rng, sh.layers, sh.experts, sh.k, sh.steps, false);
      const history h = history_of(calls, -1, starts);
      const key_layout layout{cache_scope::global, sh.layers, sh.experts};
      slot_cache<P> cache(layout, sh.capacity, make<P>(h));
      std::uint64_t misses = 0;
      expect_same_victims(w, h, layout, sh.capacity, cache, calls, misses);
      EXPECT_GT(cache.stats().evictions, 0u);
    }
    {  // per-layer scope: each layer's cache from its own accesses
      const auto calls = sparse_calls(rng, sh.layers, sh.experts, sh.k, sh.steps, true);
      const std::int32_t capacity = std::min(sh.capacity, sh.experts - 1);
      for (std::int32_t l = 0; l < sh.layers; ++l) {
        const history h = history_of(calls, l, starts);
        std::vector<test::stream_call> mine;
        for (const auto& c : calls) {
          if (c.layer == l) {
            mine.push_back(c);
          }
        }
        const key_layout layout{cache_scope::per_layer, sh.layers, sh.experts};
        slot_cache<P> cache(layout, capacity, make<P>(h));
        std::uint64_t misses = 0;
        expect_same_victims(w, h, layout, capacity, cache, mine, misses);
      }
    }
  }
}

TEST(HindsightFrequency, EveryVictimMatchesBruteForce) {
  expect_matches_reference<hindsight_frequency>(which::frequency);
}

TEST(HindsightReuse, EveryVictimMatchesBruteForce) {
  expect_matches_reference<hindsight_reuse>(which::reuse);
}

TEST(Hindsight, SimulateBuildsEachCacheFromItsOwnAccesses) {
  const std::int32_t layers = 4, experts = 7, k = 2;
  std::mt19937_64 rng(91);
  const auto calls = test::random_calls(rng, layers, experts, k, 70, true);
  std::vector<access> stream;
  for (const auto& c : calls) {
    for (const cache_key e : c.keys) {
      stream.push_back({c.step, c.layer, e});
    }
  }
  const std::vector<std::size_t> starts = {10, 33, 50};
  for (const std::string_view name : hindsight_policy_names) {
    const which w = name == "hindsight_frequency" ? which::frequency : which::reuse;
    for (const cache_scope scope : {cache_scope::global, cache_scope::per_layer}) {
      const std::int32_t capacity = scope == cache_scope::global ? 9 : 4;
      const sim_config config{.scope = scope, .capacity = capacity, .sequence_starts = starts};
      const sim_result r = simulate_hindsight(name, {layers, experts}, stream, config);
      EXPECT_EQ(r.policy, name);
      // The brute force, cache by cache, in the simulator's keys.
      std::uint64_t misses = 0;
      for (std::int32_t l = scope == cache_scope::global ? -1 : 0;
           l < (scope == cache_scope::global ? 0 : layers); ++l) {
        std::vector<test::stream_call> mine;
        for (auto c : calls) {
          if (l >= 0 && c.layer != l) {
            continue;
          }
          if (scope == cache_scope::global) {
            for (cache_key& key : c.keys) {
              key += c.layer * experts;
            }
          }
          mine.push_back(c);
        }
        const history h = history_of(mine, -1, starts);
        const key_layout layout{scope, layers, experts};
        const auto run = [&]<class P>(P policy) {
          slot_cache<P> cache(layout, capacity, std::move(policy));
          expect_same_victims(w, h, layout, capacity, cache, mine, misses);
        };
        if (w == which::frequency) {
          run(make<hindsight_frequency>(h));
        } else {
          run(make<hindsight_reuse>(h));
        }
      }
      EXPECT_EQ(r.stats.misses, misses) << name << " " << to_string(scope);
      EXPECT_GT(r.stats.evictions, 0u);
      // Belady stays the bound.
      EXPECT_LE(simulate<belady>({layers, experts}, stream, config).stats.misses, r.stats.misses);
    }
  }
}

TEST(Hindsight, EmptyHistoryFallsBackToRecency) {
  // No history: every count is 0 and every bucket empty, so frequency is LRU, and reuse is LRU
  // within each expected layer distance: fld's order in global scope.
  std::mt19937_64 rng(5);
  const auto calls = test::random_calls(rng, 3, 6, 2, 40);
  const key_layout layout{cache_scope::global, 3, 6};
  slot_cache<hindsight_frequency> frequency(layout, 5);
  slot_cache<hindsight_reuse> reuse(layout, 5);
  slot_cache<lru> recency(layout, 5);
  slot_cache<fld> distance(layout, 5);
  std::vector<access_result> a, b, c, d;
  for (const auto& call : calls) {
    const access_context ctx{call.step, call.layer, 0, 0};
    for (auto* out : {&a, &b, &c, &d}) {
      out->assign(call.keys.size(), access_result{});
    }
    frequency.access_call(call.keys, ctx, a);
    reuse.access_call(call.keys, ctx, b);
    recency.access_call(call.keys, ctx, c);
    distance.access_call(call.keys, ctx, d);
    for (std::size_t i = 0; i < c.size(); ++i) {
      ASSERT_EQ(a[i].evicted, c[i].evicted);
      ASSERT_EQ(b[i].evicted, d[i].evicted);
    }
  }
  EXPECT_GT(recency.stats().evictions, 0u);
}

TEST(Hindsight, RejectsBadHistoriesNamingTheValues) {
  const std::vector<std::uint32_t> steps = {0, 2, 1};
  const std::vector<cache_key> keys = {1, 2, 3};
  expect_error([&] { hindsight_frequency(steps, keys); }, "steps must not decrease",
               "position 2 has step 1 after 2");
  expect_error([&] { hindsight_reuse(std::vector<std::uint32_t>{0}, keys); }, "1 steps for 3 keys");
  expect_error(
      [&] {
        hindsight_reuse(std::vector<std::uint32_t>{0, 1}, std::vector<cache_key>{0, -4});
      },
      "key -4 at position 1 is negative");
  expect_error(
      [&] {
        hindsight_frequency(std::vector<std::uint32_t>{0}, std::vector<cache_key>{0},
                            std::vector<std::size_t>{5, 5});
      },
      "sequence starts must increase", "start 1 is 5 after 5");
  expect_error(
      [&] {
        slot_cache<hindsight_reuse> cache(
            key_layout{cache_scope::per_layer, 2, 4}, 2,
            hindsight_reuse(std::vector<std::uint32_t>{0}, std::vector<cache_key>{9}));
      },
      "holds key 9", "key space is 4");
  expect_error(
      [] {
        (void)simulate_hindsight("hindsight_magic", {1, 2}, std::vector<access>{},
                                 sim_config{.capacity = 1});
      },
      "unknown policy 'hindsight_magic'", "hindsight_frequency, hindsight_reuse");
}

}  // namespace
