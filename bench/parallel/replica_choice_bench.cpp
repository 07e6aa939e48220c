// SPDX-License-Identifier: Apache-2.0
// Replica choice at dispatch, per (token, layer) call: 8 ranks, top-8 of 128 experts, 48 layers
// (Qwen3-30B-A3B's shape), every expert with 1 or 2 replicas (160 physical per layer, 25%
// redundant), a third of the replicas resident; deterministic seed. The baseline in the same
// binary is vLLM's EPLB replica choice (pair position mod replica count: a table lookup per pair,
// blind to residency and load) over the same placement and ids.
//
// - BM_choose_row: replica_chooser::choose_row, one token's 8 ids per call, a new layer call every
//   16 tokens (a decode batch).
// - BM_choose_call: replica_chooser::choose, a whole call of 16 tokens; reported per token.
// - BM_vllm_modulo: the baseline, per token.
// Quote the ratios BM_choose_row / BM_vllm_modulo and BM_choose_call / BM_vllm_modulo from one
// run (--benchmark_repetitions, interleaved).
#include <wisp/parallel/placement.hpp>
#include <wisp/parallel/replica_choice.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace {

constexpr std::int32_t ranks = 8;
constexpr std::int32_t experts = 128;
constexpr std::int32_t top_k = 8;
constexpr std::int32_t layers = 48;
constexpr std::int32_t batch = 16;
constexpr std::int32_t calls = 4096;  // distinct (layer, batch) calls cycled through

// Moves top_k random distinct experts to the front (a partial Fisher-Yates).
void partial_shuffle(std::vector<std::int32_t>& all, std::mt19937& rng) {
  for (std::int32_t i = 0; i < top_k; ++i) {
    const auto j = i + static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(experts - i));
    std::swap(all[static_cast<std::size_t>(i)], all[static_cast<std::size_t>(j)]);
  }
}

struct fixture {
  wisp::expert_placement placement;
  std::vector<std::int32_t> ids;  // calls x batch x top_k
  wisp::replica_chooser chooser;

  static wisp::expert_placement make_placement() {
    std::vector<std::vector<std::int32_t>> ranks_of(static_cast<std::size_t>(layers) * experts);
    for (std::int32_t l = 0; l < layers; ++l) {
      for (std::int32_t e = 0; e < experts; ++e) {
        auto& holders = ranks_of[static_cast<std::size_t>(l) * experts + e];
        holders.push_back(e % ranks);  // one replica each, evenly
        if (e < 32) {  // 32 more per layer, 4 per rank, each on another rank than the first
          holders.push_back((e % ranks + 1 + (e / ranks + l) % (ranks - 1)) % ranks);
        }
        std::sort(holders.begin(), holders.end());
      }
    }
    return wisp::expert_placement::from_replica_ranks(layers, experts, ranks, 20, ranks_of);
  }

  explicit fixture(std::mt19937 rng = std::mt19937(20261127))
      : placement(make_placement()),
        chooser(placement, {std::vector<double>(ranks, 356e-6), 5.16e-6, 17.5e-9}) {
    for (std::int32_t l = 0; l < layers; ++l) {
      for (std::int32_t r = 0; r < ranks; ++r) {
        for (std::int32_t i = 0; i < placement.local_experts(); ++i) {
          if (placement.logical_of(r, l, i) >= 0 && rng() % 3 == 0) {
            chooser.set_resident(r, l, i, true);
          }
        }
      }
    }
    std::vector<std::int32_t> all(experts);
    for (std::int32_t e = 0; e < experts; ++e) {
      all[static_cast<std::size_t>(e)] = e;
    }
    for (std::int32_t t = 0; t < calls * batch; ++t) {  // top-8 distinct ids per token
      partial_shuffle(all, rng);
      ids.insert(ids.end(), all.begin(), all.begin() + top_k);
    }
  }
};

fixture& shared() {
  static fixture f;
  return f;
}

void BM_choose_row(benchmark::State& state) {
  fixture& f = shared();
  std::int32_t out[top_k];
  std::size_t token = 0;
  for (auto _ : state) {
    const std::size_t call = token / batch;
    if (token % batch == 0) {
      f.chooser.begin_call(static_cast<std::int32_t>(call % layers));
    }
    f.chooser.choose_row(std::span<const std::int32_t>(f.ids.data() + token * top_k, top_k),
                         std::span<std::int32_t>(out, top_k));
    benchmark::DoNotOptimize(out);
    token = (token + 1) % (static_cast<std::size_t>(calls) * batch);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["ns_per_token_layer"] =
      benchmark::Counter(static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_choose_row);

void BM_choose_call(benchmark::State& state) {
  fixture& f = shared();
  std::vector<std::int32_t> out(static_cast<std::size_t>(batch) * top_k);
  std::size_t call = 0;
  for (auto _ : state) {
    f.chooser.choose(static_cast<std::int32_t>(call % layers),
                     std::span<const std::int32_t>(f.ids.data() + call * batch * top_k,
                                                   static_cast<std::size_t>(batch) * top_k),
                     batch, top_k, out);
    benchmark::DoNotOptimize(out.data());
    call = (call + 1) % calls;
  }
  state.SetItemsProcessed(state.iterations() * batch);
  state.counters["ns_per_token_layer"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * batch,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_choose_call);

void BM_vllm_modulo(benchmark::State& state) {
  fixture& f = shared();
  // vLLM's logical_to_physical_map [layers][experts][max replicas] and replica counts, as ranks.
  std::vector<std::int32_t> table(static_cast<std::size_t>(layers) * experts * 2, -1);
  std::vector<std::int32_t> count(static_cast<std::size_t>(layers) * experts, 0);
  for (std::int32_t l = 0; l < layers; ++l) {
    for (std::int32_t e = 0; e < experts; ++e) {
      const auto reps = f.placement.replicas(l, e);
      const std::size_t i = static_cast<std::size_t>(l) * experts + e;
      count[i] = static_cast<std::int32_t>(reps.size());
      for (std::size_t j = 0; j < reps.size(); ++j) {
        table[i * 2 + j] = reps[j].rank;
      }
    }
  }
  std::int32_t out[top_k];
  std::size_t token = 0;
  for (auto _ : state) {
    const auto layer = static_cast<std::size_t>((token / batch) % layers);
    const std::int32_t* row = f.ids.data() + token * top_k;
    const std::size_t position = (token % batch) * top_k;  // flat position in the call
    for (std::int32_t j = 0; j < top_k; ++j) {
      const std::size_t i = layer * experts + static_cast<std::size_t>(row[j]);
      out[j] = table[i * 2 +
                     (position + static_cast<std::size_t>(j)) % static_cast<std::size_t>(count[i])];
    }
    benchmark::DoNotOptimize(out);
    token = (token + 1) % (static_cast<std::size_t>(calls) * batch);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["ns_per_token_layer"] =
      benchmark::Counter(static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_vllm_modulo);

}  // namespace
