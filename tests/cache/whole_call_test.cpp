// SPDX-License-Identifier: Apache-2.0
// Whole-call policies (`call_eviction_policy`): slot_cache<lru> takes each bulk call through
// lru::on_call; the oracle is the same lru driven one access at a time (a wrapper without
// on_call), compared result by result and state by state. A policy whose on_call names bad
// victims is reported with the cache unchanged.
#include "cache/broken_policy.hpp"
#include "cache/reference.hpp"
#include "support/expect_error.hpp"

#include <wisp/cache/policies.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using namespace wisp;
using wisp::test::bad_victim;
using wisp::test::corrupt_on_call;
using wisp::test::snapshot;

/// `lru` without `on_call`: the cache drives it one access at a time.
class per_access_lru {
 public:
  static constexpr std::string_view name = "per_access_lru";
  void reset(const key_layout& layout) { lru_.reset(layout); }
  void on_insert(cache_key key, const access_context& ctx) noexcept { lru_.on_insert(key, ctx); }
  void on_hit(cache_key key, const access_context& ctx) noexcept { lru_.on_hit(key, ctx); }
  void on_erase(cache_key key) noexcept { lru_.on_erase(key); }
  cache_key victim(const access_context& ctx, protected_keys is_protected) const noexcept {
    return lru_.victim(ctx, is_protected);
  }

 private:
  lru lru_;
};

static_assert(call_eviction_policy<lru>);
static_assert(!call_eviction_policy<per_access_lru>);
static_assert(!call_eviction_policy<fifo>);
static_assert(!call_eviction_policy<lfu>);
static_assert(!call_eviction_policy<lfu_history>);
static_assert(!call_eviction_policy<lfru>);
static_assert(!call_eviction_policy<least_stale>);
static_assert(!call_eviction_policy<fld>);
static_assert(!call_eviction_policy<belady>);

struct on_call_may_throw : per_access_lru {
  void on_call(const call_events&) {}  // not noexcept: not a whole-call policy
};
static_assert(!call_eviction_policy<on_call_may_throw>);

// A user's whole-call policy has its victims checked by the cache in every build; wisp's `lru`,
// whose `on_call` this file proves against the per-access events, only in debug builds.
static_assert(wisp::detail::checks_call_victims<corrupt_on_call<bad_victim::missing>>);
#ifdef NDEBUG
static_assert(!wisp::detail::checks_call_victims<lru>);
#else
static_assert(wisp::detail::checks_call_victims<lru>);
#endif

/// Random keys for one call: mostly from a hot set, sometimes repeated.
std::vector<cache_key> random_call(std::mt19937& rng, std::int32_t key_space, std::int32_t size,
                                   bool allow_repeats) {
  std::vector<cache_key> keys;
  const std::int32_t hot = std::max(1, key_space / 3);
  while (static_cast<std::int32_t>(keys.size()) < size) {
    const auto k = static_cast<cache_key>(rng() % 4 == 0 ? rng() % key_space : rng() % hot);
    if (allow_repeats || std::find(keys.begin(), keys.end(), k) == keys.end()) {
      keys.push_back(k);
    }
  }
  return keys;
}

void expect_same_run(key_layout layout, std::int32_t capacity, std::uint32_t seed, int ops) {
  slot_cache<lru> fast(layout, capacity);
  slot_cache<per_access_lru> oracle(layout, capacity);
  std::mt19937 rng(seed);
  const std::int32_t n = layout.size();
  std::uint32_t step = 0;
  std::uint64_t time = 0;
  for (int op = 0; op < ops; ++op) {
    const std::int32_t cap = fast.capacity();
    const auto ctx = access_context{step, static_cast<std::int32_t>(rng() % layout.layers), time};
    const unsigned kind = rng() % 20;
    if (kind < 12) {  // access_call, with or without repeats
      const bool repeats = kind < 3;
      const auto size = static_cast<std::int32_t>(1 + rng() % static_cast<unsigned>(cap));
      const std::vector<cache_key> keys = random_call(rng, n, size, repeats);
      std::vector<access_result> got(keys.size()), want(keys.size());
      ASSERT_EQ(fast.access_call(keys, ctx, got), oracle.access_call(keys, ctx, want));
      ASSERT_EQ(got, want) << "op " << op;
      time += keys.size();
    } else if (kind < 16) {  // access_distinct (the pager's call)
      const auto size = static_cast<std::int32_t>(1 + rng() % static_cast<unsigned>(cap));
      const std::vector<cache_key> keys = random_call(rng, n, size, rng() % 2 == 0);
      std::vector<std::pair<cache_key, access_result>> got, want;
      fast.access_distinct(keys, ctx,
                           [&](cache_key k, const access_result& r) { got.emplace_back(k, r); });
      oracle.access_distinct(keys, ctx,
                             [&](cache_key k, const access_result& r) { want.emplace_back(k, r); });
      ASSERT_EQ(got, want) << "op " << op;
      time += got.size();
    } else if (kind < 17) {  // a single access continues or starts a call
      const auto key = static_cast<cache_key>(rng() % n);
      std::optional<access_result> want;
      try {
        want = oracle.access(key, ctx);
      } catch (const logic_error&) {  // every resident key is protected
      }
      if (want) {
        ASSERT_EQ(fast.access(key, ctx), *want) << "op " << op;
      } else {
        ASSERT_THROW(fast.access(key, ctx), logic_error) << "op " << op;
      }
      ++time;
    } else if (kind < 18) {
      const auto key = static_cast<cache_key>(rng() % n);
      ASSERT_EQ(fast.invalidate(key), oracle.invalidate(key));
    } else if (kind < 19) {  // resize (shrinks may be refused for protected keys)
      const auto to = static_cast<std::int32_t>(1 + rng() % static_cast<unsigned>(n));
      std::optional<resize_report> want;
      try {
        want = oracle.resize(to, ctx);
      } catch (const logic_error&) {  // refused: too many protected keys
      }
      if (want) {
        const resize_report got = fast.resize(to, ctx);
        ASSERT_EQ(got.evicted, want->evicted) << "op " << op;
        ASSERT_EQ(got.moves, want->moves) << "op " << op;
      } else {
        ASSERT_THROW((void)fast.resize(to, ctx), logic_error) << "op " << op;
      }
    } else {
      ++step;
    }
    ASSERT_EQ(snapshot(fast), snapshot(oracle)) << "op " << op;
    ASSERT_TRUE(fast.invariants_hold());
  }
}

TEST(WholeCallLru, EqualsPerAccessLruPerLayer) {
  for (std::int32_t cap : {1, 2, 8, 32, 64}) {
    expect_same_run(key_layout{cache_scope::per_layer, 1, 64}, cap,
                    11u + static_cast<std::uint32_t>(cap), 20000);
  }
}

TEST(WholeCallLru, EqualsPerAccessLruGlobal) {
  for (std::int32_t cap : {3, 40, 160}) {
    expect_same_run(key_layout{cache_scope::global, 6, 32}, cap,
                    97u + static_cast<std::uint32_t>(cap), 20000);
  }
}

// ---------------------------------------------------------------- a policy breaking on_call

template <bad_victim Mode>
void expect_reported_and_unchanged() {
  slot_cache<corrupt_on_call<Mode>> cache(16, 4);
  std::array<access_result, 4> out{};
  cache.access_call(std::array<cache_key, 4>{0, 1, 2, 3}, {0, 0, 0}, out);  // full
  const auto before = snapshot(cache);
  // 3 hit 0 and 1 stay; 4, 5 miss and need two victims (2, 3).
  EXPECT_THROW(cache.access_call(std::array<cache_key, 4>{0, 1, 4, 5}, {1, 0, 4}, out),
               logic_error);
  EXPECT_EQ(snapshot(cache), before);
  EXPECT_TRUE(cache.invariants_hold());
  // The same through the unchecked call with a caller's scratch (the pager's path).
  std::vector<std::int32_t> scratch(3 * 16, -1);
  const auto ignore_note = [](std::size_t, cache_key, std::int32_t) {};
  const auto ignore_miss = [](cache_key, std::int32_t) {};
  EXPECT_THROW(cache.access_call_unchecked(std::array<cache_key, 4>{0, 1, 4, 5}, {2, 0, 8},
                                           ignore_note, ignore_miss, {}, scratch),
               logic_error);
  EXPECT_EQ(snapshot(cache), before);
  EXPECT_TRUE(cache.invariants_hold());
}

TEST(WholeCallPolicy, BadVictimsAreReportedAndTheCacheIsUnchanged) {
  expect_reported_and_unchanged<bad_victim::repeated>();
  expect_reported_and_unchanged<bad_victim::protected_key>();
  expect_reported_and_unchanged<bad_victim::not_resident>();
  expect_reported_and_unchanged<bad_victim::out_of_range>();
  expect_reported_and_unchanged<bad_victim::missing>();
}

TEST(WholeCallPolicy, AFailedCallEvictsNothing) {
  slot_cache<corrupt_on_call<bad_victim::repeated>> cache(16, 4);
  std::array<access_result, 4> out{};
  cache.access_call(std::array<cache_key, 4>{0, 1, 2, 3}, {0, 0, 0}, out);
  // The first victim (2) is taken, the second (2 again) is refused: the call is undone.
  EXPECT_THROW(cache.access_call(std::array<cache_key, 4>{0, 1, 4, 5}, {1, 0, 4}, out),
               logic_error);
  // Key 2 was not evicted: dropped and missed again in the same pass, it is no collision.
  ASSERT_TRUE(cache.invalidate(2));
  EXPECT_FALSE(cache.access(2, {1, 0, 8}).collision);
  EXPECT_EQ(cache.stats().collision_misses, 0u);
  EXPECT_EQ(cache.stats().evictions, 0u);
}

TEST(WholeCallPolicy, MessageNamesThePolicyAndTheVictim) {
  slot_cache<corrupt_on_call<bad_victim::out_of_range>> cache(16, 2);
  std::array<access_result, 2> out{};
  cache.access_call(std::array<cache_key, 2>{0, 1}, {0, 0, 0}, out);
  wisp::test::expect_error(
      [&] {
        cache.access_call(std::array<cache_key, 2>{2, 3}, {1, 0, 2}, out);
      },
      "corrupt_on_call", "victim 16");
}

}  // namespace
