// SPDX-License-Identifier: Apache-2.0
// Simulator throughput: wisp::simulate for every built-in policy, both scopes, at a
// realistic capacity (16 slots per layer, or the same 416 slots in one global cache), replaying
// the ESFT trace (26 layers x 64 experts, top-6, 1,282,632 accesses). When shared/traces is absent
// it falls back to the built-in synthetic trace (preset "default", 8,222 steps, seed 1) and the
// label says so.
//
// Baseline in the same binary: a straightforward LRU simulation as a competent engineer would
// write it (per cache a std::list of keys, most recent first, and an std::unordered_map from key to
// list iterator; a hit splices to the front, a miss on a full cache pops the back). It counts
// hits and misses only; wisp's simulate also groups calls, protects each call's experts, and keeps
// per-layer statistics and collision misses. Both produce the same miss counts on this trace
// (checked at start-up: a mismatch skips the baseline with an error).
//
// A second baseline for lfru: vLLM's own victim search, a scan of every resident key per miss
// (`lfru_scan` below, a wisp policy with the same scores and tie-break). wisp's lfru walks its
// frequency classes instead and picks the same victims (checked at start-up).
//
// Quote `accesses_per_s` per policy and scope, and the ratios
//   sim/lru/<scope>  /  baseline/list_map_lru/<scope>
//   sim/lfru/<scope> /  baseline/lfru_scan/<scope>
// from one run. sim/*/trace replays straight from the compact routing_trace (what `wisp sim`
// does); the other wisp rows replay a pre-expanded vector of accesses, as the baseline does.
// Belady's figure includes its first pass over the stream (collecting the future).
#include "support/bench_trace.hpp"

#include <wisp/cache/lfu.hpp>
#include <wisp/sim/simulate.hpp>
#include <wisp/sim/trace_sim.hpp>
#include <wisp/trace/routing_trace.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <list>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

constexpr std::int32_t layer_capacity = 16;  // slots per layer (per-layer scope)

struct replay {
  wisp::routing_trace trace{{1, 1, 1}};
  std::vector<wisp::access> accesses;
  wisp::moe_shape shape;
  std::string source;  // "ESFT" or the fallback notice
};

const replay& trace_replay() {
  static const replay r = [] {
    replay out;
    auto loaded = wisp::bench::load_bench_trace();
    out.trace = std::move(loaded.trace);
    out.source = std::move(loaded.source);
    out.shape = wisp::shape_of(out.trace);
    out.accesses.reserve(out.trace.access_count());
    out.trace.for_each_access([&](const wisp::access& a) {
      out.accesses.push_back({a.step, a.layer, a.expert});
    });
    return out;
  }();
  return r;
}

wisp::sim_config config_for(wisp::cache_scope scope, const replay& r) {
  wisp::sim_config config;
  config.scope = scope;
  config.capacity =
      scope == wisp::cache_scope::global ? layer_capacity * r.shape.layers : layer_capacity;
  return config;
}

std::string label(const replay& r, wisp::cache_scope scope, const wisp::sim_result& result) {
  const auto config = config_for(scope, r);
  const double miss_rate =
      result.stats.accesses == 0
          ? 0.0
          : static_cast<double>(result.stats.misses) / static_cast<double>(result.stats.accesses);
  return r.source + (scope == wisp::cache_scope::global ? ", global " : ", per-layer ") +
         std::to_string(config.capacity) + " slots, miss rate " + std::to_string(miss_rate);
}

void set_rate(benchmark::State& state, std::size_t per_iteration) {
  state.counters["accesses_per_s"] = benchmark::Counter(
      static_cast<double>(per_iteration) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}

// wisp::simulate_named over the pre-expanded access vector.
void wisp_simulate(benchmark::State& state, std::string_view policy, wisp::cache_scope scope) {
  const replay& r = trace_replay();
  const auto config = config_for(scope, r);
  wisp::sim_result result;
  for (auto _ : state) {
    result = wisp::simulate_named(policy, r.shape, r.accesses, config);
    benchmark::DoNotOptimize(result.stats.misses);
  }
  state.SetLabel(label(r, scope, result));
  set_rate(state, r.accesses.size());
}

// The same straight from the routing_trace (the `wisp sim` path).
void wisp_simulate_trace(benchmark::State& state, std::string_view policy,
                         wisp::cache_scope scope) {
  const replay& r = trace_replay();
  const auto config = config_for(scope, r);
  wisp::sim_result result;
  for (auto _ : state) {
    result = wisp::simulate_named(policy, r.trace, config);
    benchmark::DoNotOptimize(result.stats.misses);
  }
  state.SetLabel(label(r, scope, result));
  set_rate(state, r.accesses.size());
}

// ------------------------------------------------------------------------------------ baseline

/// One LRU cache: list of keys (front = most recent) + key -> list position. A miss on a full
/// cache evicts the least recently used key that the current call does not request (the same
/// intra-call protection as wisp's simulate: a call's experts never evict each other).
class list_map_lru {
 public:
  explicit list_map_lru(std::size_t capacity) : capacity_(capacity) { where_.reserve(capacity); }

  /// Returns true on a hit. `call` holds every key of the current call (at most top_k).
  bool access(std::int32_t key, std::span<const std::int32_t> call) {
    if (const auto it = where_.find(key); it != where_.end()) {
      order_.splice(order_.begin(), order_, it->second);
      return true;
    }
    if (order_.size() == capacity_) {
      auto victim = std::prev(order_.end());
      while (std::find(call.begin(), call.end(), *victim) != call.end()) {
        --victim;  // capacity >= call size, so an unrequested key exists
      }
      where_.erase(*victim);
      order_.erase(victim);
    }
    order_.push_front(key);
    where_.emplace(key, order_.begin());
    return false;
  }

 private:
  std::size_t capacity_;
  std::list<std::int32_t> order_;
  std::unordered_map<std::int32_t, std::list<std::int32_t>::iterator> where_;
};

struct baseline_counts {
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
};

/// Groups consecutive accesses of one (step, layer) into a call and replays it through the
/// layer's cache (per-layer scope) or the one cache (global scope, key = layer * E + expert).
baseline_counts baseline_lru(const replay& r, wisp::cache_scope scope) {
  const auto config = config_for(scope, r);
  const bool global = scope == wisp::cache_scope::global;
  std::vector<list_map_lru> caches(global ? 1 : static_cast<std::size_t>(r.shape.layers),
                                   list_map_lru(static_cast<std::size_t>(config.capacity)));
  baseline_counts counts;
  std::vector<std::int32_t> call;
  const std::size_t n = r.accesses.size();
  for (std::size_t begin = 0; begin < n;) {
    const wisp::access& first = r.accesses[begin];
    std::size_t end = begin;
    call.clear();
    while (end < n && r.accesses[end].step == first.step && r.accesses[end].layer == first.layer) {
      const wisp::access& a = r.accesses[end++];
      call.push_back(global ? a.layer * r.shape.experts + a.expert : a.expert);
    }
    list_map_lru& cache = caches[global ? 0 : static_cast<std::size_t>(first.layer)];
    for (const std::int32_t key : call) {
      const bool hit = cache.access(key, call);
      counts.hits += hit ? 1u : 0u;
      counts.misses += hit ? 0u : 1u;
    }
    begin = end;
  }
  return counts;
}

void baseline_simulate(benchmark::State& state, wisp::cache_scope scope) {
  const replay& r = trace_replay();
  const auto reference = wisp::simulate<wisp::lru>(r.shape, r.accesses, config_for(scope, r));
  const baseline_counts check = baseline_lru(r, scope);
  if (check.misses != reference.stats.misses) {
    state.SkipWithError(("baseline LRU has " + std::to_string(check.misses) +
                         " misses but wisp's lru has " + std::to_string(reference.stats.misses))
                            .c_str());
    return;
  }
  for (auto _ : state) {
    const baseline_counts counts = baseline_lru(r, scope);
    benchmark::DoNotOptimize(counts.misses);
  }
  state.SetLabel(label(r, scope, reference) + " (same misses as wisp lru)");
  set_rate(state, r.accesses.size());
}

/// vLLM's LFRU victim search as it is written there: score every resident key, keep the lowest
/// (`freq / (clock - last + 1)`, ties to the older `last`). O(resident) per miss.
class lfru_scan {
 public:
  static constexpr std::string_view name = "lfru_scan";
  void reset(const wisp::key_layout& layout) {
    const auto n = static_cast<std::size_t>(layout.size());
    freq_.assign(n, 0);
    last_.assign(n, 0);
    index_.assign(n, -1);
    resident_.clear();
    resident_.reserve(n);
    clock_ = 0;
  }
  void on_insert(wisp::cache_key key, const wisp::access_context&) noexcept {
    const auto k = static_cast<std::size_t>(key);
    freq_[k] = 1;
    last_[k] = ++clock_;
    index_[k] = static_cast<std::int32_t>(resident_.size());
    resident_.push_back(key);
  }
  void on_hit(wisp::cache_key key, const wisp::access_context&) noexcept {
    const auto k = static_cast<std::size_t>(key);
    ++freq_[k];
    last_[k] = ++clock_;
  }
  void on_erase(wisp::cache_key key) noexcept {
    const auto k = static_cast<std::size_t>(key);
    const wisp::cache_key moved = resident_.back();
    resident_[static_cast<std::size_t>(index_[k])] = moved;
    index_[static_cast<std::size_t>(moved)] = index_[k];
    resident_.pop_back();
    index_[k] = -1;
  }
  [[nodiscard]] wisp::cache_key victim(const wisp::access_context&,
                                       wisp::protected_keys is_protected) const noexcept {
    wisp::cache_key best = wisp::no_key;
    for (const wisp::cache_key key : resident_) {
      if (!is_protected(key) && (best == wisp::no_key || before(key, best))) {
        best = key;
      }
    }
    return best;
  }

 private:
  [[nodiscard]] bool before(wisp::cache_key a, wisp::cache_key b) const noexcept {
    const auto ia = static_cast<std::size_t>(a);
    const auto ib = static_cast<std::size_t>(b);
    const auto lhs = wisp::detail::multiply(freq_[ia], clock_ - last_[ib] + 1);
    const auto rhs = wisp::detail::multiply(freq_[ib], clock_ - last_[ia] + 1);
    return lhs < rhs || (lhs == rhs && last_[ia] < last_[ib]);
  }
  std::vector<std::uint64_t> freq_;
  std::vector<std::uint64_t> last_;
  std::vector<std::int32_t> index_;
  std::vector<wisp::cache_key> resident_;
  std::uint64_t clock_ = 0;
};
static_assert(wisp::eviction_policy<lfru_scan>);

void baseline_lfru_scan(benchmark::State& state, wisp::cache_scope scope) {
  const replay& r = trace_replay();
  const auto config = config_for(scope, r);
  const auto reference = wisp::simulate<wisp::lfru>(r.shape, r.accesses, config);
  wisp::sim_result result = wisp::simulate<lfru_scan>(r.shape, r.accesses, config);
  if (result.stats != reference.stats) {
    state.SkipWithError(("the scan has " + std::to_string(result.stats.misses) +
                         " misses but wisp's lfru has " + std::to_string(reference.stats.misses))
                            .c_str());
    return;
  }
  for (auto _ : state) {
    result = wisp::simulate<lfru_scan>(r.shape, r.accesses, config);
    benchmark::DoNotOptimize(result.stats.misses);
  }
  state.SetLabel(label(r, scope, reference) + " (same victims as wisp lfru)");
  set_rate(state, r.accesses.size());
}

// ------------------------------------------------------------------------------------ registry

[[maybe_unused]] const bool registered = [] {
  constexpr std::pair<wisp::cache_scope, std::string_view> scopes[] = {
      {wisp::cache_scope::per_layer, "layer"}, {wisp::cache_scope::global, "global"}};
  for (const auto& [scope, scope_name] : scopes) {
    benchmark::RegisterBenchmark(
        ("baseline/list_map_lru/" + std::string(scope_name)).c_str(),
        [scope = scope](benchmark::State& state) { baseline_simulate(state, scope); })
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(
        ("baseline/lfru_scan/" + std::string(scope_name)).c_str(),
        [scope = scope](benchmark::State& state) { baseline_lfru_scan(state, scope); })
        ->Unit(benchmark::kMillisecond);
    for (const std::string_view policy : wisp::builtin_policy_names) {
      benchmark::RegisterBenchmark(
          ("sim/" + std::string(policy) + "/" + std::string(scope_name)).c_str(),
          [policy, scope = scope](benchmark::State& state) { wisp_simulate(state, policy, scope); })
          ->Unit(benchmark::kMillisecond);
    }
    benchmark::RegisterBenchmark(
        ("sim/lru/" + std::string(scope_name) + "/trace").c_str(),
        [scope = scope](benchmark::State& state) { wisp_simulate_trace(state, "lru", scope); })
        ->Unit(benchmark::kMillisecond);
  }
  return true;
}();

}  // namespace
