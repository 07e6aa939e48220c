// SPDX-License-Identifier: Apache-2.0
// virtual_expert_tensor on posix_vmm: contents survive unrelated mapping traffic, boundary
// granules are shared and reference-counted, resize keeps resident rows byte-identical at a fixed
// base address, no memory is wasted, moves and errors.
#include "support/expect_error.hpp"
#include "vmm/fault_vmm.hpp"
#include "vmm/support.hpp"

#include <wisp/vmm/page_pool.hpp>
#include <wisp/vmm/posix_vmm.hpp>
#include <wisp/vmm/virtual_expert_tensor.hpp>

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace wisp {
namespace {

using test::page;

using test::pool_t;
using test::tensor;

static_assert(std::is_trivially_copyable_v<expert_tensor_view>);
static_assert(!std::is_copy_constructible_v<tensor>);
static_assert(std::is_nothrow_move_constructible_v<tensor>);

// Checks the tensor's refcounts and page counts against the oracle.
void expect_consistent(const tensor& t) {
  std::vector<std::uint8_t> mapped;
  for (std::size_t r = 0; r < t.max_rows(); ++r) {
    mapped.push_back(t.is_mapped(r) ? 1 : 0);
  }
  const auto refs = test::oracle_refcounts(mapped, t.row_stride(), t.granularity(), t.granules());
  std::size_t backed = 0;
  for (std::size_t g = 0; g < t.granules(); ++g) {
    ASSERT_EQ(t.granule_refcount(g), refs[g]) << "granule " << g;
    backed += refs[g] != 0 ? 1 : 0;
  }
  EXPECT_EQ(t.mapped_granules(), backed);  // exactly the granules mapped rows touch: no waste
  EXPECT_EQ(t.pool().backend().counters().mapped_granules, static_cast<std::int64_t>(backed));
}

TEST(virtual_expert_tensor, rows_read_back_after_unrelated_rows_are_mapped_and_unmapped) {
  pool_t pool(test::fault_vmm{page});
  const std::size_t stride = 3 * page / 2 + 40;  // misaligned: boundary granules are shared
  tensor t(pool, {.max_rows = 40, .row_stride = stride});
  EXPECT_EQ(t.granules(), (40 * stride + page - 1) / page);
  EXPECT_EQ(t.reserved_bytes(), t.granules() * page);
  std::byte* const base = t.data();
  t.map_rows(10, 3);
  for (std::size_t r = 10; r < 13; ++r) {
    test::fill_row(t.row(r), stride, r, 1);
  }
  t.map_rows(0, 9);  // row 9 stays unmapped; 8 and 10 do not touch the same granule
  t.map_rows(14, 20);
  t.unmap_rows(0, 5);
  t.unmap_rows(20, 10);
  t.map_rows(2, 2);
  t.unmap_rows(13, 27);  // includes row 13 (never mapped) and 14..39
  for (std::size_t r = 10; r < 13; ++r) {
    EXPECT_TRUE(test::row_holds(t.row(r), stride, r, 1)) << "row " << r;
  }
  EXPECT_EQ(t.data(), base);
  expect_consistent(t);
}

TEST(virtual_expert_tensor, boundary_granules_survive_unmapping_a_neighbour) {
  pool_t pool(test::fault_vmm{page});
  tensor t(pool, {.max_rows = 4, .row_stride = page + page / 2});  // 1.5 granules per row
  // row 0: granules [0, 2); row 1: [1, 3); row 2: [3, 5); row 3: [4, 6)
  EXPECT_EQ(t.granule_range(1), (std::pair<std::size_t, std::size_t>{1, 3}));
  EXPECT_EQ(t.map_rows(0, 2), 2u);
  EXPECT_EQ(t.granule_refcount(1), 2u);
  EXPECT_EQ(t.mapped_granules(), 3u);  // 2 rows x 1.5 granules = 3 granules, nothing wasted
  test::fill_row(t.row(1), t.row_stride(), 1, 7);
  const auto shared = t.page(1);
  EXPECT_EQ(t.unmap_rows(0, 1), 1u);
  EXPECT_EQ(t.granule_refcount(0), 0u);
  EXPECT_EQ(t.granule_refcount(1), 1u);
  EXPECT_EQ(t.page(1), shared);  // the shared granule kept its page
  EXPECT_TRUE(test::row_holds(t.row(1), t.row_stride(), 1, 7));
  EXPECT_EQ(pool.stats().mapped, 2u);
  EXPECT_EQ(t.map_rows(0, 2), 1u);  // row 1 already mapped: only row 0 is new
  EXPECT_TRUE(test::row_holds(t.row(1), t.row_stride(), 1, 7));
  expect_consistent(t);
  EXPECT_EQ(t.unmap_rows(0, 4), 2u);
  EXPECT_EQ(t.mapped_granules(), 0u);
  EXPECT_EQ(pool.stats().mapped, 0u);
  EXPECT_EQ(pool.stats().free, 3u);
}

TEST(virtual_expert_tensor, resize_cycles_keep_resident_rows_byte_identical_in_place) {
  pool_t pool(test::fault_vmm{page});
  const std::size_t stride = 5 * page / 3;
  tensor t(pool, {.max_rows = 64, .row_stride = stride});
  std::byte* const base = t.data();
  const std::size_t sizes[] = {8, 20, 3, 64, 0, 17, 16, 40, 1, 33};
  std::size_t resident = 0;
  std::vector<std::uint32_t> stamp(64, 0);
  std::uint32_t next = 1;
  for (const std::size_t n : sizes) {
    t.resize_resident(n);
    EXPECT_EQ(t.data(), base);
    EXPECT_EQ(t.resident_rows(), n);
    for (std::size_t r = 0; r < std::min(n, resident); ++r) {
      ASSERT_TRUE(test::row_holds(t.row(r), stride, r, stamp[r])) << "row " << r << " at " << n;
    }
    for (std::size_t r = resident; r < n; ++r) {  // load the newly resident rows
      stamp[r] = next++;
      test::fill_row(t.row(r), stride, r, stamp[r]);
    }
    for (std::size_t r = 0; r < 64; ++r) {
      EXPECT_EQ(t.is_mapped(r), r < n);
    }
    expect_consistent(t);
    resident = n;
  }
  EXPECT_EQ(pool.stats().peak, t.granule_range(63).second);  // the whole tensor at n = 64
}

TEST(virtual_expert_tensor, row_strides_below_at_and_above_the_granule) {
  for (const std::size_t stride :
       {std::size_t{64}, page / 3, page, page + 1, 3 * page, 2 * page - 8}) {
    pool_t pool(test::fault_vmm{page});
    tensor t(pool, {.max_rows = 50, .row_stride = stride});
    t.map_rows(7, 13);
    t.map_rows(30, 1);
    t.map_rows(49, 1);  // the last row: its granule range ends at granules()
    EXPECT_EQ(t.granule_range(49).second, t.granules()) << stride;
    expect_consistent(t);
    for (std::size_t r : {std::size_t{7}, std::size_t{19}, std::size_t{30}, std::size_t{49}}) {
      test::fill_row(t.row(r), stride, r, 3);
    }
    t.unmap_rows(8, 11);
    for (std::size_t r : {std::size_t{7}, std::size_t{19}, std::size_t{30}, std::size_t{49}}) {
      EXPECT_TRUE(test::row_holds(t.row(r), stride, r, 3)) << stride << " row " << r;
    }
    t.unmap_rows(19, 1);
    EXPECT_TRUE(test::row_holds(t.row(7), stride, 7, 3)) << stride;
    expect_consistent(t);
  }
}

TEST(virtual_expert_tensor, running_out_changes_nothing) {
  pool_t pool(test::fault_vmm{page}, {.limit = 5});
  tensor t(pool, {.max_rows = 10, .row_stride = page});
  t.map_rows(0, 3);
  test::fill_row(t.row(1), page, 1, 9);
  const auto before = test::take(t);
  // Needs 4 new pages, 2 left.
  test::expect_error<out_of_memory>([&] { t.map_rows(2, 5); }, "limit of 5 pages");
  EXPECT_EQ(test::take(t), before);
  EXPECT_THROW(t.resize_resident(8), out_of_memory);
  EXPECT_EQ(test::take(t), before);
  EXPECT_EQ(t.map_rows(3, 2), 2u);  // exactly what fits
}

TEST(virtual_expert_tensor, errors_name_the_values) {
  pool_t pool(test::fault_vmm{page});
  EXPECT_THROW(tensor(pool, {.max_rows = 0, .row_stride = 8}), logic_error);
  EXPECT_THROW(tensor(pool, {.max_rows = 8, .row_stride = 0}), logic_error);
  EXPECT_THROW(tensor(pool, {.max_rows = SIZE_MAX / 2, .row_stride = 4}), logic_error);
  tensor t(pool, {.max_rows = 8, .row_stride = 100});
  test::expect_error([&] { t.map_rows(6, 3); }, "rows [6, 9) leave [0, max_rows = 8)");
  EXPECT_THROW(t.resize_resident(9), logic_error);
  t.map_rows(0, 2);
  EXPECT_THROW(t.unmap_rows(1, 8), logic_error);  // checked before anything is unmapped
  EXPECT_EQ(t.mapped_rows(), 2u);
  t.unmap_rows(0, 2);
  EXPECT_THROW((void)t.is_mapped(8), logic_error);
  EXPECT_THROW((void)t.granule_refcount(t.granules()), logic_error);
  EXPECT_EQ(t.mapped_rows(), 0u);
}

TEST(virtual_expert_tensor, moves_keep_the_address_and_release_everything) {
  pool_t pool(test::fault_vmm{page});
  const auto& c = pool.backend().counters();
  {
    tensor a(pool, {.max_rows = 16, .row_stride = 3000});
    a.map_rows(0, 10);
    test::fill_row(a.row(4), 3000, 4, 2);
    std::byte* base = a.data();
    tensor b(std::move(a));
    EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): documented state
    EXPECT_EQ(b.data(), base);
    EXPECT_TRUE(test::row_holds(b.row(4), 3000, 4, 2));
    const auto v = b.view();
    EXPECT_EQ(v.row(4), base + 4 * 3000);
    EXPECT_EQ(v.rows, 16u);
    tensor d(pool, {.max_rows = 4, .row_stride = page});
    d.map_rows(0, 4);
    EXPECT_EQ(c.live_reservations, 2);
    d = std::move(b);  // d's own rows are unmapped and its reservation freed
    EXPECT_EQ(c.live_reservations, 1);
    EXPECT_EQ(d.data(), base);
    EXPECT_EQ(d.mapped_rows(), 10u);
  }
  EXPECT_EQ(c.live_reservations, 0);
  EXPECT_EQ(c.mapped_granules, 0);
  EXPECT_EQ(pool.stats().mapped, 0u);
  EXPECT_EQ(c.live_handles, static_cast<std::int64_t>(pool.stats().free));
  pool.trim();
  EXPECT_EQ(c.live_handles, 0);
}

}  // namespace
}  // namespace wisp
