// SPDX-License-Identifier: Apache-2.0
// pager::prepare() per layer at batch 1, top-8 of 128 experts, capacity 32, 8 layers, on a
// Zipf-skewed id stream with locality (deterministic seed). The baseline, in the same binary and
// run, is bench/pager/vllm_reference.py: vLLM's CachedWeightProvider.prepare() bookkeeping in
// Python (no torch) on the same stream; BM_vllm_reference reports its ns/call, this binary's own
// ns/call for pager<lru> measured right after, and their ratio.
#include <wisp/cache/policies.hpp>
#include <wisp/pager/pager.hpp>

#include <benchmark/benchmark.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace {

// Must match vllm_reference.py.
constexpr std::int32_t experts = 128;
constexpr std::int32_t top_k = 8;
constexpr std::int32_t capacity = 32;
constexpr std::int32_t layers = 8;
constexpr std::int32_t steps = 2048;
constexpr double zipf_s = 1.0;
constexpr double reuse = 0.5;
constexpr std::uint64_t seed = 20260716;

struct splitmix64 {
  std::uint64_t state;
  std::uint64_t next() {
    state += 0x9E3779B97F4A7C15ull;
    std::uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
};

/// `layers * steps` calls; call c is layer `c % layers`, ids `[c * k, (c + 1) * k)`.
const std::vector<std::int32_t>& stream() {
  static const std::vector<std::int32_t> ids = [] {
    splitmix64 rng{seed};
    std::array<double, experts> cdf{};
    double total = 0;
    for (std::int32_t r = 0; r < experts; ++r) {
      total += 1.0 / std::pow(r + 1, zipf_s);
    }
    double acc = 0;
    for (std::int32_t r = 0; r < experts; ++r) {
      acc += 1.0 / std::pow(r + 1, zipf_s);
      cdf[static_cast<std::size_t>(r)] = acc / total;
    }
    auto zipf_rank = [&] {
      const double u = rng.uniform();
      std::int32_t lo = 0;
      std::int32_t hi = experts - 1;
      while (lo < hi) {
        const std::int32_t mid = (lo + hi) / 2;
        if (cdf[static_cast<std::size_t>(mid)] > u) {
          hi = mid;
        } else {
          lo = mid + 1;
        }
      }
      return lo;
    };
    auto perm = [](std::int32_t layer, std::int32_t rank) {
      return (rank * (2 * layer + 1) * 37 + 11 * layer) % experts;
    };
    std::vector<std::array<std::int32_t, top_k>> prev(layers);
    for (std::int32_t l = 0; l < layers; ++l) {
      for (std::int32_t r = 0; r < top_k; ++r) {
        prev[static_cast<std::size_t>(l)][static_cast<std::size_t>(r)] = perm(l, r);
      }
    }
    std::vector<std::int32_t> out;
    out.reserve(static_cast<std::size_t>(layers) * steps * top_k);
    for (std::int32_t s = 0; s < steps; ++s) {
      for (std::int32_t l = 0; l < layers; ++l) {
        std::array<std::int32_t, top_k> row{};
        for (std::int32_t j = 0; j < top_k; ++j) {
          const bool keep = rng.uniform() < reuse;
          std::int32_t e = keep ? prev[static_cast<std::size_t>(l)][static_cast<std::size_t>(j)]
                                : perm(l, zipf_rank());
          auto in_row = [&](std::int32_t x) {
            for (std::int32_t i = 0; i < j; ++i) {
              if (row[static_cast<std::size_t>(i)] == x) {
                return true;
              }
            }
            return false;
          };
          while (in_row(e)) {
            e = perm(l, zipf_rank());
          }
          row[static_cast<std::size_t>(j)] = e;
        }
        prev[static_cast<std::size_t>(l)] = row;
        out.insert(out.end(), row.begin(), row.end());
      }
    }
    return out;
  }();
  return ids;
}

template <class Policy>
wisp::pager<Policy> make_pager() {
  return wisp::pager<Policy>(wisp::pager_config{
      .layers = layers, .experts = experts, .top_k = top_k, .capacity = capacity});
}

/// Prepares call `cursor` of the stream (`ids`, `total` calls), starting a step at layer 0, and
/// advances `cursor` cyclically.
template <class Policy>
void prepare_next(wisp::pager<Policy>& pager, const std::vector<std::int32_t>& ids,
                  std::size_t total, std::size_t& cursor) {
  const auto layer = static_cast<std::int32_t>(cursor % layers);
  if (layer == 0) {
    pager.begin_step();
  }
  const wisp::prepare_result r = pager.prepare(
      layer, std::span<const std::int32_t>(ids.data() + cursor * top_k, top_k), 1, top_k);
  benchmark::DoNotOptimize(r.expert_map.data());
  cursor = cursor + 1 == total ? 0 : cursor + 1;
}

/// Runs `calls` prepares of the stream (cyclically from `cursor`).
template <class Policy>
void run_calls(wisp::pager<Policy>& pager, std::size_t& cursor, std::size_t calls) {
  const std::vector<std::int32_t>& ids = stream();
  for (std::size_t i = 0; i < calls; ++i) {
    prepare_next(pager, ids, ids.size() / top_k, cursor);
  }
}

template <class Policy>
void BM_prepare(benchmark::State& state) {
  wisp::pager<Policy> pager = make_pager<Policy>();
  std::size_t cursor = 0;
  run_calls(pager, cursor, stream().size() / top_k);  // warm-up pass
  pager.begin_step();
  const std::vector<std::int32_t>& ids = stream();  // looked up once, outside the timed loop
  const std::size_t total = ids.size() / top_k;
  const wisp::cache_stats before = pager.stats();
  for (auto _ : state) {
    prepare_next(pager, ids, total, cursor);
  }
  const wisp::cache_stats after = pager.stats();
  state.counters["hit_rate"] =
      static_cast<double>(after.hits - before.hits) /
      static_cast<double>(std::max<std::uint64_t>(after.accesses - before.accesses, 1));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_prepare<wisp::lru>)->Name("BM_prepare/lru");
BENCHMARK(BM_prepare<wisp::least_stale>)->Name("BM_prepare/least_stale");
BENCHMARK(BM_prepare<wisp::fifo>)->Name("BM_prepare/fifo");
BENCHMARK(BM_prepare<wisp::lfu>)->Name("BM_prepare/lfu");
BENCHMARK(BM_prepare<wisp::lfru>)->Name("BM_prepare/lfru");
BENCHMARK(BM_prepare<wisp::fld>)->Name("BM_prepare/fld");

/// The same calls straight into one slot_cache<Policy> per layer through access_call (rows are
/// already distinct): no pager, map or plan, but access_call's own checks and one access_result
/// per key, which prepare() does not build. Not a lower bound of prepare(): a user calling the
/// cache directly pays this.
template <class Policy>
void BM_slot_cache_access_call(benchmark::State& state) {
  std::vector<wisp::slot_cache<Policy>> caches;
  for (std::int32_t l = 0; l < layers; ++l) {
    caches.emplace_back(wisp::key_layout{wisp::cache_scope::per_layer, layers, experts}, capacity);
  }
  const std::vector<std::int32_t>& ids = stream();
  const std::size_t total = ids.size() / top_k;
  std::array<wisp::access_result, top_k> out{};
  std::size_t cursor = 0;
  std::uint32_t step = 0;
  std::uint64_t time = 0;
  for (auto _ : state) {
    const auto layer = static_cast<std::int32_t>(cursor % layers);
    step += layer == 0 ? 1u : 0u;
    benchmark::DoNotOptimize(caches[static_cast<std::size_t>(layer)].access_call(
        std::span<const std::int32_t>(ids.data() + cursor * top_k, top_k),
        wisp::access_context{step, layer, time}, out));
    time += top_k;
    cursor = cursor + 1 == total ? 0 : cursor + 1;
  }
}
BENCHMARK(BM_slot_cache_access_call<wisp::lru>)->Name("BM_slot_cache_access_call/lru");
BENCHMARK(BM_slot_cache_access_call<wisp::least_stale>)
    ->Name("BM_slot_cache_access_call/least_stale");

/// ns per prepare of pager<lru> over `passes` passes of the stream (best pass), after a warm-up.
double wisp_lru_ns_per_call(int passes) {
  wisp::pager<wisp::lru> pager = make_pager<wisp::lru>();
  const std::size_t calls = stream().size() / top_k;
  std::size_t cursor = 0;
  run_calls(pager, cursor, calls);
  double best = 1e300;
  for (int p = 0; p < passes; ++p) {
    const auto start = std::chrono::steady_clock::now();
    run_calls(pager, cursor, calls);
    const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
    best = std::min(best, took.count() / static_cast<double>(calls));
  }
  return best;
}

std::string reference_script() {
  if (const char* path = std::getenv("WISP_VLLM_REFERENCE")) {
    return path;
  }
  return (std::filesystem::path(__FILE__).parent_path() / "vllm_reference.py").string();
}

void BM_vllm_reference(benchmark::State& state) {
  if (std::system("python3 --version > /dev/null 2>&1") != 0) {
    state.SkipWithError("python3 is not on PATH: no Python baseline");
    return;
  }
  const std::string script = reference_script();
  if (!std::filesystem::exists(script)) {
    state.SkipWithError(("baseline script not found: " + script).c_str());
    return;
  }
  double py_ns = 0;
  double py_hit_rate = 0;
  for (auto _ : state) {
    const std::string command = "python3 \"" + script + "\"";
    FILE* pipe = popen(command.c_str(), "r");
    if (pipe == nullptr) {
      state.SkipWithError("popen failed");
      return;
    }
    std::array<char, 256> line{};
    const bool got = std::fgets(line.data(), static_cast<int>(line.size()), pipe) != nullptr;
    const int status = pclose(pipe);
    if (!got || status != 0 ||
        std::sscanf(line.data(), "ns_per_call=%lf hit_rate=%lf", &py_ns, &py_hit_rate) != 2) {
      state.SkipWithError("the Python baseline failed or printed an unexpected line");
      return;
    }
  }
  const double wisp_ns = wisp_lru_ns_per_call(3);
  state.counters["py_ns_per_call"] = py_ns;
  state.counters["py_hit_rate"] = py_hit_rate;
  state.counters["wisp_lru_ns_per_call"] = wisp_ns;
  state.counters["speedup"] = py_ns / wisp_ns;
}
BENCHMARK(BM_vllm_reference)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
