// SPDX-License-Identifier: Apache-2.0
// virtual_expert_tensor on posix_vmm (2 MiB granules, committed memfd pages).
//
// BM_map_unmap_row/<row KiB>: map_rows(r, 1) + unmap_rows(r, 1) from a warm pool (pages reused),
//   cost per expert row.
// BM_grow/<row KiB>/<rows>/<added>: growing the resident range by `added` rows in place, against
//   the baseline in the same run: allocate a new committed buffer of rows + added rows
//   (mmap MAP_POPULATE, as cudaMalloc commits), copy the old rows, free the old buffer. Reported:
//   the in-place time with a cold pool (pages created: memfd + fallocate) as the benchmark time,
//   `warm_ms` with the pages already in the pool, `copy_ms` for the baseline, and the ratios
//   `copy_over_cold` and `copy_over_warm`. Expert sizes 1, 9 and 336 MiB (DeepSeek-V2-Lite-ish,
//   Mixtral-ish, and a very large expert), with row counts scaled down to this machine.
#include <wisp/vmm/page_pool.hpp>
#include <wisp/vmm/posix_vmm.hpp>
#include <wisp/vmm/virtual_expert_tensor.hpp>

#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace {

using clock_type = std::chrono::steady_clock;
constexpr std::size_t kib = 1024;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

void touch(std::byte* p, std::size_t bytes) {
  for (std::size_t i = 0; i < bytes; i += 4096) {
    p[i] = static_cast<std::byte>(i >> 12);
  }
}

void BM_map_unmap_row(benchmark::State& state) {
  const std::size_t stride = static_cast<std::size_t>(state.range(0)) * kib;
  const std::size_t rows = 8;
  wisp::page_pool<wisp::posix_vmm> pool(wisp::posix_vmm{});
  wisp::virtual_expert_tensor<wisp::posix_vmm> t(pool, {.max_rows = rows, .row_stride = stride});
  t.map_rows(0, rows);  // warm the pool with every page the rows can need
  t.unmap_rows(0, rows);
  std::size_t r = 0;
  for (auto _ : state) {
    t.map_rows(r, 1);
    benchmark::DoNotOptimize(t.row(r));
    t.unmap_rows(r, 1);
    r = (r + 3) % rows;  // misaligned rows: different boundary cases
  }
  state.counters["granules_per_row"] =
      static_cast<double>(t.granule_range(1).second - t.granule_range(1).first);
  state.counters["row_MiB"] = static_cast<double>(stride) / (1024.0 * 1024.0);
}
BENCHMARK(BM_map_unmap_row)
    ->Arg(1024)
    ->Arg(9 * 1024)
    ->Arg(336 * 1024)
    ->Unit(benchmark::kMicrosecond);

void BM_grow(benchmark::State& state) {
  const std::size_t stride = static_cast<std::size_t>(state.range(0)) * kib;
  const auto rows = static_cast<std::size_t>(state.range(1));
  const auto added = static_cast<std::size_t>(state.range(2));
  wisp::page_pool<wisp::posix_vmm> pool(wisp::posix_vmm{});
  wisp::virtual_expert_tensor<wisp::posix_vmm> t(pool,
                                                 {.max_rows = rows + added, .row_stride = stride});
  t.resize_resident(rows);
  touch(t.data(), rows * stride);
  const std::size_t old_bytes = rows * stride;
  const std::size_t new_bytes = (rows + added) * stride;
  double cold = 0;
  double warm = 0;
  double copy = 0;
  for (auto _ : state) {
    // In place, cold pool: the new pages are created (and zeroed by the kernel).
    state.PauseTiming();
    t.resize_resident(rows);
    pool.trim();
    state.ResumeTiming();
    auto t0 = clock_type::now();
    t.resize_resident(rows + added);
    cold += seconds_since(t0);
    state.PauseTiming();
    // In place, warm pool: the pages come from the free list.
    t.resize_resident(rows);
    t0 = clock_type::now();
    t.resize_resident(rows + added);
    warm += seconds_since(t0);
    // Baseline: new committed buffer, copy the resident rows, free the old one.
    void* old = ::mmap(nullptr, old_bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (old == MAP_FAILED) {
      state.SkipWithError("mmap failed");
      break;
    }
    std::memcpy(old, t.data(), old_bytes);
    t0 = clock_type::now();
    void* fresh = ::mmap(nullptr, new_bytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (fresh == MAP_FAILED) {
      state.SkipWithError("mmap failed");
      ::munmap(old, old_bytes);
      break;
    }
    std::memcpy(fresh, old, old_bytes);
    ::munmap(old, old_bytes);
    copy += seconds_since(t0);
    benchmark::DoNotOptimize(fresh);
    ::munmap(fresh, new_bytes);
    state.ResumeTiming();
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["cold_ms"] = cold / n * 1e3;
  state.counters["warm_ms"] = warm / n * 1e3;
  state.counters["copy_ms"] = copy / n * 1e3;
  state.counters["copy_over_cold"] = cold > 0 ? copy / cold : 0;
  state.counters["copy_over_warm"] = warm > 0 ? copy / warm : 0;
  state.counters["grown_MiB"] = static_cast<double>(added * stride) / (1024.0 * 1024.0);
}
// {row KiB, resident rows, added rows}
BENCHMARK(BM_grow)
    ->Args({1024, 64, 64})
    ->Args({9 * 1024, 16, 16})
    ->Args({336 * 1024, 2, 2})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);

}  // namespace
