// SPDX-License-Identifier: Apache-2.0
// The internal ordered structures of the frequency policies against brute force: `key_heap`
// (lfu_history, decayed_frequency, belady) and `frequency_classes` (lfu, lfru), on random
// operations with random protection.
#include <wisp/cache/detail/frequency_classes.hpp>
#include <wisp/cache/detail/key_heap.hpp>
#include <wisp/cache/eviction_policy.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <tuple>

namespace {

using namespace wisp;
using detail::heap_priority;

// The brute-force answer: the smallest (priority, key) among unprotected entries.
std::optional<cache_key> brute_min(const std::map<cache_key, heap_priority>& entries,
                                   const protect_set& protect) {
  std::optional<cache_key> best;
  for (const auto& [key, prio] : entries) {
    if (protect.contains(key)) {
      continue;
    }
    if (!best || std::tie(prio, key) < std::tie(entries.at(*best), *best)) {
      best = key;
    }
  }
  return best;
}

TEST(KeyHeap, MinUnprotectedMatchesBruteForceUnderRandomOperations) {
  constexpr std::int32_t keys = 40;
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    detail::key_heap heap;
    heap.reset(keys);
    std::map<cache_key, heap_priority> entries;
    protect_set protect(keys);
    for (int op = 0; op < 2000; ++op) {
      const auto key = static_cast<cache_key>(rng() % keys);
      // Few distinct priorities, so that ties (broken by the smaller key) are common.
      const heap_priority prio{rng() % 4, rng() % 3};
      switch (rng() % 4) {
        case 0:
        case 1:
          heap.set(key, prio);
          entries[key] = prio;
          break;
        case 2:
          heap.erase(key);
          entries.erase(key);
          break;
        default:
          protect.clear();
          for (std::uint64_t p = rng() % 12; p > 0; --p) {
            protect.insert(static_cast<cache_key>(rng() % keys));
          }
      }
      ASSERT_EQ(heap.size(), entries.size());
      ASSERT_EQ(heap.contains(key), entries.contains(key));
      const std::optional<cache_key> expected = brute_min(entries, protect);
      ASSERT_EQ(heap.min_unprotected(protect.view()), expected.value_or(no_key))
          << "trial " << trial << " op " << op;
    }
  }
}

// frequency_classes used as lfu uses it: the victim is the first unprotected key of the lowest
// count, the least recently moved first.
TEST(FrequencyClasses, FirstUnprotectedMatchesBruteForceLfu) {
  constexpr std::int32_t keys = 30;
  std::mt19937_64 rng(11);
  detail::frequency_classes classes;
  classes.reset(keys);
  std::map<cache_key, std::pair<std::uint64_t, std::uint64_t>> resident;  // key -> (count, tick)
  std::uint64_t tick = 0;
  protect_set protect(keys);
  for (int op = 0; op < 20000; ++op) {
    const auto key = static_cast<cache_key>(rng() % keys);
    if (rng() % 5 == 0) {
      classes.erase(key);
      resident.erase(key);
    } else if (const auto it = resident.find(key); it != resident.end()) {
      it->second = {it->second.first + 1, ++tick};
      classes.promote(key);
    } else {
      resident[key] = {1, ++tick};
      classes.insert(key);
    }
    if (resident.contains(key)) {
      ASSERT_EQ(classes.count_of(key), resident.at(key).first) << "op " << op;
    }
    protect.clear();
    for (std::uint64_t p = rng() % 8; p > 0; --p) {
      protect.insert(static_cast<cache_key>(rng() % keys));
    }
    std::optional<cache_key> expected;
    for (const auto& [k, rank] : resident) {
      if (!protect.contains(k) && (!expected || rank < resident.at(*expected))) {
        expected = k;
      }
    }
    cache_key got = no_key;
    for (auto c = classes.first(); c != classes.end() && got == no_key; c = classes.next(c)) {
      got = classes.first_unprotected(c, protect.view());
    }
    ASSERT_EQ(got, expected.value_or(no_key)) << "op " << op;
  }
}

}  // namespace
