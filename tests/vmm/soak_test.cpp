// SPDX-License-Identifier: Apache-2.0
// Randomised soak: 100k operations (map, unmap, resize, adapter load/unload, base load/unload,
// trim, with a pool limit and occasional injected faults) on a tensor and an adapter layout that
// share one pool of page-size granules. After every step an independent model (the set of mapped
// rows, per-row contents stamps, per-granule reference counts computed from scratch) is compared
// with the objects, the pool and the backend's live resources.
#include "vmm/fault_vmm.hpp"
#include "vmm/support.hpp"

#include <wisp/core/ids.hpp>
#include <wisp/vmm/adapter_layout.hpp>
#include <wisp/vmm/page_pool.hpp>
#include <wisp/vmm/virtual_expert_tensor.hpp>

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace wisp {
namespace {

using test::page;

using test::layout;
using test::pool_t;
using test::tensor;

// Model of one tensor: mapped rows and the stamp written into each when it was mapped.
struct tensor_model {
  std::vector<std::uint8_t> mapped;
  std::vector<std::uint64_t> stamp;
  explicit tensor_model(std::size_t rows) : mapped(rows, 0), stamp(rows, 0) {}
};

// Stamps the first and last 8 bytes of every row newly mapped in [first, first + n).
void stamp_new(const tensor& t, tensor_model& m, const std::vector<std::uint8_t>& was,
               std::size_t first, std::size_t n, std::uint64_t& clock) {
  for (std::size_t r = first; r < first + n; ++r) {
    if (was[r] == 0) {
      m.mapped[r] = 1;
      m.stamp[r] = ++clock;
      std::memcpy(t.row(r), &m.stamp[r], 8);
      std::memcpy(t.row(r) + t.row_stride() - 8, &m.stamp[r], 8);
    }
  }
}

void check(const tensor& t, const tensor_model& m, std::size_t step) {
  const auto refs = test::oracle_refcounts(m.mapped, t.row_stride(), t.granularity(), t.granules());
  std::size_t backed = 0;
  for (std::size_t g = 0; g < t.granules(); ++g) {
    ASSERT_EQ(t.granule_refcount(g), refs[g]) << "step " << step << " granule " << g;
    backed += refs[g] != 0 ? 1 : 0;
  }
  ASSERT_EQ(t.mapped_granules(), backed) << "step " << step;
  std::size_t rows = 0;
  for (std::size_t r = 0; r < m.mapped.size(); ++r) {
    ASSERT_EQ(t.is_mapped(r), m.mapped[r] != 0) << "step " << step << " row " << r;
    if (m.mapped[r] == 0) {
      continue;
    }
    ++rows;
    std::uint64_t head = 0;
    std::uint64_t tail = 0;
    std::memcpy(&head, t.row(r), 8);
    std::memcpy(&tail, t.row(r) + t.row_stride() - 8, 8);
    ASSERT_EQ(head, m.stamp[r]) << "step " << step << " row " << r;
    ASSERT_EQ(tail, m.stamp[r]) << "step " << step << " row " << r;
  }
  ASSERT_EQ(t.mapped_rows(), rows) << "step " << step;
}

TEST(soak, hundred_thousand_random_operations_match_the_oracle) {
  constexpr std::size_t steps = 100'000;
  constexpr std::int32_t m = 16;
  constexpr std::int32_t n = 6;
  constexpr std::int32_t emax = 5;
  pool_t pool(test::fault_vmm{page}, {.limit = 150, .prereserve = 8});
  auto& vm = pool.backend();
  const auto& c = vm.counters();
  tensor t(pool, {.max_rows = 48, .row_stride = 9 * page / 4 + 24});
  layout l(
      pool,
      {.base_experts = m, .adapters = n, .max_adapter_experts = emax, .row_stride = 5 * page / 7});
  const tensor& lt = l.tensor();
  tensor_model tm(t.max_rows());
  tensor_model lm(lt.max_rows());
  std::size_t resident = 0;
  std::uint64_t clock = 0;
  std::mt19937_64 rng(20260716);
  std::size_t failures = 0;
  std::size_t injected = 0;
  for (std::size_t step = 0; step < steps; ++step) {
    const bool inject = rng() % 16 == 0;
    if (inject) {
      vm.fail_at(static_cast<std::int64_t>(1 + rng() % 4));
    }
    const std::uint64_t op = rng() % 100;
    try {
      if (op < 25) {  // map_rows
        const std::size_t first = rng() % t.max_rows();
        const std::size_t cnt = rng() % std::min<std::size_t>(8, t.max_rows() - first + 1);
        const auto was = tm.mapped;
        t.map_rows(first, cnt);
        stamp_new(t, tm, was, first, cnt, clock);
      } else if (op < 48) {  // unmap_rows
        const std::size_t first = rng() % t.max_rows();
        const std::size_t cnt = rng() % std::min<std::size_t>(10, t.max_rows() - first + 1);
        t.unmap_rows(first, cnt);
        std::fill_n(tm.mapped.begin() + static_cast<std::ptrdiff_t>(first), cnt, 0);
      } else if (op < 63) {  // resize_resident
        const std::size_t target = rng() % (t.max_rows() + 1);
        const auto was = tm.mapped;
        t.resize_resident(target);
        if (target > resident) {
          stamp_new(t, tm, was, resident, target - resident, clock);
        } else {
          std::fill(tm.mapped.begin() + static_cast<std::ptrdiff_t>(target),
                    tm.mapped.begin() + static_cast<std::ptrdiff_t>(resident), 0);
        }
        resident = target;
      } else if (op < 88) {  // adapter load / unload
        const auto a = static_cast<std::int32_t>(rng() % n);
        if (l.adapter_loaded(a)) {
          const auto cnt = l.adapter_experts(a).size();
          l.unload_adapter(a);
          std::fill_n(lm.mapped.begin() + static_cast<std::ptrdiff_t>(l.offset(a)), cnt, 0);
        } else {
          std::vector<expert_id> tuned;
          const std::size_t want = rng() % (emax + 1);
          while (tuned.size() < want) {
            const expert_id e{static_cast<std::int32_t>(rng() % m)};
            if (std::find(tuned.begin(), tuned.end(), e) == tuned.end()) {
              tuned.push_back(e);
            }
          }
          const auto was = lm.mapped;
          l.load_adapter(a, tuned);
          stamp_new(lt, lm, was, l.offset(a), tuned.size(), clock);
        }
      } else if (op < 96) {  // base load / unload
        if (lm.mapped[0] != 0) {
          l.unload_base();
          std::fill_n(lm.mapped.begin(), m, 0);
        } else {
          const auto was = lm.mapped;
          l.load_base();
          stamp_new(lt, lm, was, 0, m, clock);
        }
      } else {  // trim
        (void)pool.trim(rng() % 8);
      }
    } catch (const out_of_memory&) {
      ++failures;
    } catch (const test::injected_error&) {
      ++failures;
    }
    if (inject) {
      injected += c.fail_at == 0 ? 1 : 0;
      vm.fail_at(0);
    }
    check(t, tm, step);
    check(lt, lm, step);
    if (testing::Test::HasFatalFailure()) {
      return;
    }
    const auto s = pool.stats();
    ASSERT_EQ(s.mapped, t.mapped_granules() + lt.mapped_granules()) << "step " << step;
    ASSERT_EQ(c.live_handles, static_cast<std::int64_t>(s.owned())) << "step " << step;
    ASSERT_EQ(c.mapped_granules, static_cast<std::int64_t>(s.mapped)) << "step " << step;
    ASSERT_LE(s.owned(), s.limit);
    ASSERT_GE(s.peak, s.mapped);
  }
  // The run must have exercised the failure paths, not only the happy one.
  EXPECT_GT(failures, steps / 100);
  EXPECT_GT(injected, steps / 100);
  RecordProperty("failures", static_cast<int>(failures));
  RecordProperty("injected", static_cast<int>(injected));
}

}  // namespace
}  // namespace wisp
