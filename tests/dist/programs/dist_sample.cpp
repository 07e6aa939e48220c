// SPDX-License-Identifier: Apache-2.0
// The program of the `dist` tests: built once against include/ and once against the single
// header alone (single_include/wisp/wisp.hpp); both builds must print the same lines.
//
// It replays a small synthetic routing trace through the core API (synthetic router, exact
// reuse-distance miss curve, pager<lru>) and checks the results against a brute-force LRU, so a
// broken amalgamation cannot print "the same wrong numbers" twice and pass. Exits 1 on mismatch.
#include <wisp/wisp.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <list>
#include <vector>

namespace {

int failures = 0;

void expect(bool ok, const char* what) {
  if (!ok) {
    std::printf("MISMATCH: %s\n", what);
    ++failures;
  }
}

// Misses of one LRU cache of `capacity` slots per layer, by direct simulation.
std::uint64_t brute_force_lru_misses(const wisp::routing_trace& trace, std::size_t capacity) {
  const auto& shape = trace.shape();
  std::vector<std::list<std::int32_t>> caches(static_cast<std::size_t>(shape.layers));
  std::uint64_t misses = 0;
  trace.for_each_access([&](const wisp::access& a) {
    auto& cache = caches[static_cast<std::size_t>(a.layer)];
    const auto it = std::find(cache.begin(), cache.end(), a.expert);
    if (it != cache.end()) {
      cache.erase(it);
    } else {
      ++misses;
      if (cache.size() == capacity) {
        cache.pop_back();
      }
    }
    cache.push_front(a.expert);
  });
  return misses;
}

// The pager's semantics by direct simulation: per-layer LRU where the experts of the current call
// are protected (a miss never evicts an expert of the same call), accessed in first-seen order.
std::uint64_t brute_force_pager_misses(const wisp::routing_trace& trace, std::size_t capacity) {
  const auto& shape = trace.shape();
  std::vector<std::list<std::int32_t>> caches(static_cast<std::size_t>(shape.layers));
  std::uint64_t misses = 0;
  for (std::size_t s = 0; s < trace.steps(); ++s) {
    for (std::int32_t l = 0; l < shape.layers; ++l) {
      auto& cache = caches[static_cast<std::size_t>(l)];  // front = most recently used
      std::vector<std::int32_t> call;
      for (std::int32_t j = 0; j < shape.top_k; ++j) {
        call.push_back(trace.expert(s, l, j));
      }
      for (const std::int32_t e : call) {
        const auto it = std::find(cache.begin(), cache.end(), e);
        if (it != cache.end()) {
          cache.erase(it);
        } else {
          ++misses;
          if (cache.size() == capacity) {
            auto victim = std::prev(cache.end());
            while (std::find(call.begin(), call.end(), *victim) != call.end()) {
              --victim;
            }
            cache.erase(victim);
          }
        }
        cache.push_front(e);
      }
    }
  }
  return misses;
}

}  // namespace

int main() {
  std::printf("wisp %s (WISP_VERSION %d)\n", WISP_VERSION_STRING, WISP_VERSION);

  wisp::synthetic_config cfg;
  cfg.layers = 4;
  cfg.experts = 16;
  cfg.top_k = 2;
  cfg.working_set = 3;
  cfg.topics = 3;
  const auto trace = wisp::make_synthetic_trace(cfg, 300, 42);
  std::printf("trace: %zu steps, %zu accesses\n", trace.steps(), trace.access_count());

  // Exact per-layer LRU miss curve from one pass of stack distances, one access at a time.
  const auto profile =
      wisp::profile_trace(trace, wisp::cache_scope::per_layer, wisp::reuse_granularity::access);
  const wisp::miss_curve curve{profile.histogram};
  std::printf("cold %llu, distinct per layer %zu\nmisses:",
              static_cast<unsigned long long>(curve.cold()), profile.distinct_per_cache);
  for (std::uint64_t c = 0; c <= 16; ++c) {
    std::printf(" %llu", static_cast<unsigned long long>(curve.misses(c)));
  }
  std::printf("\nmiss ratio at 4 slots: %.6f\n", curve.miss_ratio(4));
  expect(curve.misses(0) == trace.access_count(), "capacity 0 misses every access");
  for (std::size_t c = 1; c <= 16; ++c) {
    expect(curve.misses(c) == brute_force_lru_misses(trace, c), "miss curve == brute-force LRU");
  }

  // The pager, one token per call: per-layer LRU that protects the experts of the call, so never
  // more misses than plain LRU (the curve) and exactly those of the protected simulation.
  constexpr std::int32_t capacity = 6;
  wisp::pager<wisp::lru> pager({.layers = 4, .experts = 16, .top_k = 2, .capacity = capacity});
  std::uint64_t pager_misses = 0;
  for (std::size_t s = 0; s < trace.steps(); ++s) {
    pager.begin_step();
    for (std::int32_t l = 0; l < 4; ++l) {
      const std::vector<std::int32_t> ids{trace.expert(s, l, 0), trace.expert(s, l, 1)};
      const wisp::prepare_result r = pager.prepare(l, ids, 1, 2);
      pager_misses += static_cast<std::uint64_t>(r.misses);
      expect(r.hits + r.misses == static_cast<std::int32_t>(r.experts.size()), "hits + misses");
      for (const std::int32_t id : ids) {
        expect(r.expert_map[static_cast<std::size_t>(id)] >= 0, "requested expert is mapped");
      }
    }
  }
  std::printf("pager<lru> capacity %d: %llu misses\n", capacity,
              static_cast<unsigned long long>(pager_misses));
  expect(pager_misses <= curve.misses(capacity), "pager misses <= plain LRU misses");
  expect(pager_misses == brute_force_pager_misses(trace, capacity),
         "pager misses == brute-force protected LRU");

  // One multi-token call on a fresh layer state: the plan and the map it hands to the kernel.
  wisp::pager<wisp::lru> fresh({.layers = 1, .experts = 8, .top_k = 2, .capacity = 4});
  const std::vector<std::int32_t> batch{5, 1, 1, 7, 5, 7};  // [3 tokens x 2]
  const wisp::prepare_result r = fresh.prepare(0, batch, 3, 2);
  std::printf("plan:");
  for (const wisp::copy_op& op : r.copy_plan) {
    std::printf(" %d->%d", op.expert, op.slot);
  }
  std::printf("\nmap:");
  for (const std::int32_t slot : r.expert_map) {
    std::printf(" %d", slot);
  }
  std::printf("\n");
  expect(r.misses == 3 && r.hits == 0 && r.copy_plan.size() == 3, "3 distinct experts missed");
  expect(r.expert_map[0] == -1 && r.expert_map[5] >= 0, "map exposes exactly the call's experts");

  // Errors are wisp::logic_error with the offending values in the message.
  try {
    (void)fresh.prepare(0, batch, 2, 2);  // 6 ids but 2 x 2
    expect(false, "a bad shape throws");
  } catch (const wisp::logic_error&) {
    std::printf("bad shape rejected\n");
  }

  std::printf(failures == 0 ? "dist_sample: ok\n" : "dist_sample: %d mismatches\n", failures);
  return failures == 0 ? 0 : 1;
}
