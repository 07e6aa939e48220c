// SPDX-License-Identifier: Apache-2.0
// Fault injection: for every n, the n-th fallible backend call (create, map or set_access) of a
// public operation fails. The operation must then leave a full snapshot unchanged (mapped rows,
// refcounts, pages, contents, pool stats, live handles and mappings in the backend); once n
// exceeds the calls the operation makes, it completes.
#include "vmm/fault_vmm.hpp"
#include "vmm/support.hpp"

#include <wisp/core/ids.hpp>
#include <wisp/vmm/adapter_layout.hpp>
#include <wisp/vmm/page_pool.hpp>
#include <wisp/vmm/virtual_expert_tensor.hpp>

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace wisp {
namespace {

using test::page;

using test::layout;
using test::pool_t;
using test::tensor;

// A fresh world for each n: a pool with free pages, and a tensor with some rows mapped (shared
// boundary granules) and filled.
struct world {
  pool_t pool{test::fault_vmm{page}, {.limit = 64, .prereserve = 2}};
  tensor t{pool, {.max_rows = 24, .row_stride = page + page / 2}};
  world() {
    t.map_rows(0, 4);
    t.map_rows(8, 1);
    for (const std::size_t r : {0, 1, 2, 3, 8}) {
      test::fill_row(t.row(r), t.row_stride(), r, 5);
    }
    t.unmap_rows(0, 1);  // granule 0 back to the free list, granule 1 still shared
  }
};

// Runs `op` with the n-th fallible call failing, for n = 1, 2, ... until it completes.
// `snap` captures the full state; `make` builds a fresh world each time.
template <class World, class Snap, class Op>
void every_fault(const char* name, Snap snap, Op op) {
  std::int64_t n = 1;
  for (;; ++n) {
    ASSERT_LT(n, 1000) << name << ": never completed";
    auto w = std::make_unique<World>();
    auto& vm = w->pool.backend();
    const auto before = snap(*w);
    vm.fail_at(n);
    bool threw = false;
    try {
      op(*w);
    } catch (const test::injected_error&) {
      threw = true;
    } catch (const out_of_memory&) {
      threw = true;
    }
    if (!threw) {
      EXPECT_GT(vm.counters().fail_at, 0) << name << ": the fault at call " << n << " was lost";
      break;
    }
    EXPECT_EQ(vm.counters().fail_at, 0) << name << ": threw without the injected fault";
    vm.fail_at(0);
    const auto after = snap(*w);
    EXPECT_TRUE(after == before) << name << ": state changed by the failure at call " << n;
    EXPECT_EQ(vm.counters().live_handles, static_cast<std::int64_t>(w->pool.stats().owned()))
        << name << ": handle leaked at call " << n;
  }
  EXPECT_GT(n, 2) << name << ": too few fallible calls to be a useful test";
}

TEST(fault_injection, map_rows_is_all_or_nothing_for_every_failing_call) {
  every_fault<world>(
      "map_rows", [](world& w) { return test::take(w.t); }, [](world& w) { w.t.map_rows(2, 10); });
}

TEST(fault_injection, resize_resident_growth_is_all_or_nothing_for_every_failing_call) {
  every_fault<world>(
      "resize_resident", [](world& w) { return test::take(w.t); },
      [](world& w) { w.t.resize_resident(20); });
}

TEST(fault_injection, pool_reserve_is_all_or_nothing_for_every_failing_call) {
  every_fault<world>(
      "reserve", [](world& w) { return test::take(w.t); }, [](world& w) { w.pool.reserve(9); });
}

struct adapter_world {
  pool_t pool{test::fault_vmm{page}, {.limit = 128, .prereserve = 1}};
  layout l{
      pool,
      {.base_experts = 8, .adapters = 3, .max_adapter_experts = 4, .row_stride = 2 * page / 3}};
  adapter_world() {
    l.load_base();
    const std::vector<expert_id> a0 = {expert_id{5}, expert_id{1}};
    l.load_adapter(0, a0);
    for (std::size_t r = 0; r < l.tensor().max_rows(); ++r) {
      if (l.tensor().is_mapped(r)) {
        test::fill_row(l.tensor().row(r), l.tensor().row_stride(), r, 11);
      }
    }
  }
};

struct adapter_snapshot {
  test::snapshot tensor;
  std::vector<std::vector<std::int32_t>> experts;
  std::vector<bool> loaded;
  friend bool operator==(const adapter_snapshot&, const adapter_snapshot&) = default;
};

adapter_snapshot take_layout(const adapter_world& w) {
  adapter_snapshot s{test::take(w.l.tensor()), {}, {}};
  for (std::int32_t a = 0; a < w.l.shape().adapters; ++a) {
    const auto e = w.l.adapter_experts(a);
    s.experts.emplace_back(e.begin(), e.end());
    s.loaded.push_back(w.l.adapter_loaded(a));
  }
  return s;
}

TEST(fault_injection, load_adapter_is_all_or_nothing_for_every_failing_call) {
  every_fault<adapter_world>("load_adapter", take_layout, [](adapter_world& w) {
    // Adapter 1's rows [12, 16) start inside a granule of adapter 0's (unmapped) padding.
    const std::vector<expert_id> a1 = {expert_id{0}, expert_id{7}, expert_id{3}, expert_id{2}};
    w.l.load_adapter(1, a1);
  });
}

// The base unloaded while adapter 0 stays: reloading it shares the granule between base row 7
// and adapter 0's first row.
struct unloaded_base_world : adapter_world {
  unloaded_base_world() { l.unload_base(); }
};

TEST(fault_injection, reloading_base_after_unload_is_all_or_nothing_for_every_failing_call) {
  every_fault<unloaded_base_world>("load_base", take_layout,
                                   [](adapter_world& w) { w.l.load_base(); });
}

}  // namespace
}  // namespace wisp
