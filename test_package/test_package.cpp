// SPDX-License-Identifier: Apache-2.0
// Conan test_package: uses the packaged core (synthetic trace -> reuse-distance miss curve, and a
// pager prepare) and checks the results; exits 1 on any mismatch.
#include <wisp/wisp.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <list>
#include <vector>

namespace {

int failures = 0;

void expect(bool ok, const char* what) {
  if (!ok) {
    std::printf("test_package: MISMATCH: %s\n", what);
    ++failures;
  }
}

// Global-scope LRU misses at `capacity`, by direct simulation over (layer, expert) keys.
std::uint64_t lru_misses(const wisp::routing_trace& trace, std::size_t capacity) {
  std::list<std::int64_t> cache;  // front = most recently used
  std::uint64_t misses = 0;
  const std::int64_t experts = trace.shape().experts;
  trace.for_each_access([&](const wisp::access& a) {
    const std::int64_t key = a.layer * experts + a.expert;
    const auto it = std::find(cache.begin(), cache.end(), key);
    if (it != cache.end()) {
      cache.erase(it);
    } else {
      ++misses;
      if (cache.size() == capacity) {
        cache.pop_back();
      }
    }
    cache.push_front(key);
  });
  return misses;
}

}  // namespace

int main() {
  wisp::synthetic_config cfg;
  cfg.layers = 2;
  cfg.experts = 8;
  cfg.top_k = 2;
  cfg.working_set = 2;
  const auto trace = wisp::make_synthetic_trace(cfg, 100, 1);

  const auto profile =
      wisp::profile_trace(trace, wisp::cache_scope::global, wisp::reuse_granularity::access);
  const wisp::miss_curve curve{profile.histogram};
  expect(curve.misses(0) == trace.access_count(), "capacity 0 misses everything");
  for (std::size_t c = 1; c <= 16; ++c) {
    expect(curve.misses(c) == lru_misses(trace, c), "miss curve == simulated LRU");
  }

  wisp::pager<wisp::lru> pager({.layers = 1, .experts = 8, .top_k = 2, .capacity = 3});
  const std::vector<std::int32_t> first{4, 6, 6, 1};  // [2 tokens x 2]: experts 4, 6, 1
  const wisp::prepare_result r1 = pager.prepare(0, first, 2, 2);
  expect(r1.misses == 3 && r1.hits == 0 && r1.copy_plan.size() == 3, "first call: 3 misses");
  expect(r1.expert_map[4] >= 0 && r1.expert_map[6] >= 0 && r1.expert_map[1] >= 0 &&
             r1.expert_map[0] == -1,
         "first call: map holds exactly the call's experts");
  const std::int32_t slot_of_4 = r1.expert_map[4];  // r1's views end at the next prepare
  const std::vector<std::int32_t> second{6, 2};     // 6 resident; 2 evicts the LRU expert (4)
  const wisp::prepare_result r2 = pager.prepare(0, second, 1, 2);
  expect(r2.hits == 1 && r2.misses == 1, "second call: 1 hit, 1 miss");
  expect(
      r2.copy_plan.size() == 1 && r2.copy_plan[0].expert == 2 && r2.copy_plan[0].slot == slot_of_4,
      "second call: expert 2 replaces the least recently used expert 4");

  std::printf("test_package: wisp %s, %zu accesses, LRU misses at 4 slots: %llu, pager ok: %s\n",
              WISP_VERSION_STRING, trace.access_count(),
              static_cast<unsigned long long>(curve.misses(4)), failures == 0 ? "yes" : "no");
  return failures == 0 ? 0 : 1;
}
