// SPDX-License-Identifier: Apache-2.0
// The internal ordered structures of the frequency policies against brute force: `key_heap`
// (decayed_frequency, predicted_next_use, reuse_probability, belady; as a heap and scanned) and
// `frequency_classes` (lfu, lfu_history, lfru), on random operations with random protection.
#include <wisp/cache/detail/frequency_classes.hpp>
#include <wisp/cache/detail/key_heap.hpp>
#include <wisp/cache/eviction_policy.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <tuple>
#include <vector>

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

// Random sets, erases, rescorings and protections; after each, the smallest unprotected key, the
// whole order and every key's last priority (kept after an erase) against brute force. Both
// orders must give the same answers.
template <class Keys>
void check_key_heap_against_brute_force() {
  constexpr std::int32_t keys = 40;
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    Keys heap;
    heap.reset(keys);
    std::map<cache_key, heap_priority> entries;
    std::vector<heap_priority> given(keys);  // every key's last priority, {0, 0} before any
    protect_set protect(keys);
    for (int op = 0; op < 2000; ++op) {
      const auto key = static_cast<cache_key>(rng() % keys);
      // Few distinct priorities, so that ties (broken by the smaller key) are common.
      const heap_priority prio{rng() % 4, rng() % 3};
      switch (rng() % 6) {
        case 0:
        case 1:
          heap.set(key, prio);
          entries[key] = prio;
          given[static_cast<std::size_t>(key)] = prio;
          break;
        case 2:
          heap.erase(key);
          entries.erase(key);
          break;
        case 3: {  // every key rescored at once, as the decaying policies do
          const std::uint64_t salt = rng();
          const auto rescore = [salt](cache_key k) {
            return heap_priority{(salt >> (k % 32)) % 4, static_cast<std::uint64_t>(k) % 3};
          };
          heap.rebuild(rescore);
          for (auto& [k, p] : entries) {
            p = rescore(k);
            given[static_cast<std::size_t>(k)] = p;
          }
          break;
        }
        case 4: {  // every key of the key space changed, in the heap or not (decayed_frequency)
          const std::uint64_t shift = 1 + rng() % 3;
          const auto change = [shift](heap_priority p) {
            return heap_priority{(p.major + shift) % 4, p.minor};
          };
          heap.rescore_all(change);
          for (heap_priority& p : given) {
            p = change(p);
          }
          for (auto& [k, p] : entries) {
            p = given[static_cast<std::size_t>(k)];
          }
          break;
        }
        default:
          protect.clear();
          for (std::uint64_t p = rng() % 12; p > 0; --p) {
            protect.insert(static_cast<cache_key>(rng() % keys));
          }
      }
      ASSERT_EQ(heap.size(), entries.size());
      ASSERT_EQ(heap.contains(key), entries.contains(key));
      for (cache_key k = 0; k < keys; ++k) {
        ASSERT_EQ(heap.priority(k), given[static_cast<std::size_t>(k)])
            << "key " << k << " trial " << trial << " op " << op;
      }
      const std::optional<cache_key> expected = brute_min(entries, protect);
      ASSERT_EQ(heap.min_unprotected(protect.view()), expected.value_or(no_key))
          << "trial " << trial << " op " << op;
      if (Keys::order == detail::key_order::heap && !entries.empty()) {  // the top: the smallest
        ASSERT_EQ(heap.keys()[0], *brute_min(entries, protect_set(keys)));
      }
      // The whole order: protecting the smallest keys one by one must name every key in turn
      // (a key below a larger unprotected ancestor would be skipped).
      protect_set smaller(keys);
      for (std::size_t rank = 0; rank < entries.size(); ++rank) {
        const cache_key next = heap.min_unprotected(smaller.view());
        ASSERT_EQ(next, *brute_min(entries, smaller)) << "trial " << trial << " op " << op;
        smaller.insert(next);
      }
    }
  }
}

TEST(KeyHeap, MinUnprotectedMatchesBruteForceUnderRandomOperations) {
  check_key_heap_against_brute_force<detail::key_heap>();
}

// The unordered keys of reuse_probability's per-layer caches.
TEST(KeyHeap, ScannedMinUnprotectedMatchesBruteForceUnderRandomOperations) {
  check_key_heap_against_brute_force<detail::scanned_keys>();
}

// frequency_classes used as lfu and lfu_history use it: the victim is the first unprotected key
// of the lowest count, the least recently moved first. With `whole_history`, a count survives
// the key's erasure and the key comes back at it plus one (lfu_history); otherwise at 1 (lfu).
void check_against_brute_force_lfu(bool whole_history) {
  constexpr std::int32_t keys = 30;
  std::mt19937_64 rng(11);
  detail::frequency_classes classes;
  classes.reset(keys);
  std::map<cache_key, std::pair<std::uint64_t, std::uint64_t>> resident;  // key -> (count, tick)
  std::vector<std::uint64_t> history(keys, 0);
  std::uint64_t tick = 0;
  protect_set protect(keys);
  for (int op = 0; op < 20000; ++op) {
    const auto key = static_cast<cache_key>(rng() % keys);
    const auto k = static_cast<std::size_t>(key);
    if (rng() % 5 == 0) {
      classes.erase(key);
      resident.erase(key);
    } else if (const auto it = resident.find(key); it != resident.end()) {
      ++history[k];
      it->second = {it->second.first + 1, ++tick};
      classes.promote(key);
    } else {
      const std::uint64_t count = whole_history ? ++history[k] : 1;
      resident[key] = {count, ++tick};
      classes.insert(key, count);
    }
    if (resident.contains(key)) {
      ASSERT_EQ(classes.count_of(key), resident.at(key).first) << "op " << op;
    }
    protect.clear();
    for (std::uint64_t p = rng() % 8; p > 0; --p) {
      protect.insert(static_cast<cache_key>(rng() % keys));
    }
    std::optional<cache_key> expected;
    for (const auto& [r, rank] : resident) {
      if (!protect.contains(r) && (!expected || rank < resident.at(*expected))) {
        expected = r;
      }
    }
    ASSERT_EQ(classes.lowest_unprotected(protect.view()), expected.value_or(no_key)) << "op " << op;
  }
}

TEST(FrequencyClasses, LowestUnprotectedMatchesBruteForceLfu) {
  check_against_brute_force_lfu(false);
}

TEST(FrequencyClasses, LowestUnprotectedMatchesBruteForceLfuHistory) {
  check_against_brute_force_lfu(true);
}

}  // namespace
