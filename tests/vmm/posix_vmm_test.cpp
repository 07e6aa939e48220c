// SPDX-License-Identifier: Apache-2.0
// posix_vmm: the backend on its own (reserve, create, partial map, access, unmap keeps the
// reservation, errors) and page_pool over it (reuse, limit, prereserve, trim, undo).
#include "support/expect_error.hpp"
#include "vmm/fault_vmm.hpp"

#include <wisp/vmm/page_pool.hpp>
#include <wisp/vmm/posix_vmm.hpp>
#include <wisp/vmm/vmm_backend.hpp>

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace wisp {
namespace {

using test::page;

static_assert(vmm_backend<posix_vmm>);
static_assert(vmm_backend<test::fault_vmm>);
static_assert(!vmm_backend<int>);

TEST(posix_vmm, granule_must_be_a_multiple_of_the_page_size) {
  EXPECT_EQ(posix_vmm{}.granularity(), std::size_t{2} << 20);
  EXPECT_THROW(posix_vmm(posix_vmm_options{.granule = 0}), logic_error);
  EXPECT_THROW(posix_vmm(posix_vmm_options{.granule = page + 512}), logic_error);
  test::expect_error([] { (void)posix_vmm(posix_vmm_options{.granule = 3000}); },
                     "3000 B is not a non-zero multiple of the page size");
  EXPECT_EQ(posix_vmm(posix_vmm_options{.granule = 3 * page}).granularity(), 3 * page);
}

TEST(posix_vmm, maps_parts_of_a_handle_and_unmapping_keeps_the_reservation) {
  posix_vmm vm(posix_vmm_options{.granule = 2 * page});
  const std::size_t g = vm.granularity();
  std::byte* va = vm.reserve(6);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(va) % g, 0u);
  const auto h = vm.create(3);
  EXPECT_GE(h.fd, 0);
  EXPECT_EQ(h.granules, 3u);
  vm.map(va, h, 0, 3);  // granules 0..2 of the handle at 0..2
  vm.set_access(va, 3);
  for (std::size_t i = 0; i < 3 * g; ++i) {
    va[i] = static_cast<std::byte>(i % 251);
  }
  vm.map(va + 4 * g, h, 1, 1);  // the handle's granule 1 again, at granule 4: an alias
  vm.set_access(va + 4 * g, 1);
  EXPECT_EQ(std::memcmp(va + 4 * g, va + g, g), 0);
  va[4 * g + 5] = std::byte{0x5A};
  EXPECT_EQ(va[g + 5], std::byte{0x5A});
  vm.unmap(va, 3);
  vm.unmap(va + 4 * g, 1);
  // The range is still reserved: mapping again at the same address works, and the memory
  // (still held by the handle) kept its bytes.
  vm.map(va + g, h, 0, 2);
  vm.set_access(va + g, 2);
  EXPECT_EQ(va[g + 7], static_cast<std::byte>(7));
  EXPECT_EQ(va[2 * g + 5], std::byte{0x5A});
  vm.unmap(va + g, 2);
  vm.release(h);
  vm.free(va, 6);
}

TEST(posix_vmm, rejects_bad_calls_and_names_errno_text) {
  posix_vmm vm(posix_vmm_options{.granule = page});
  EXPECT_THROW((void)vm.reserve(0), logic_error);
  EXPECT_THROW((void)vm.create(0), logic_error);
  std::byte* va = vm.reserve(4);
  const auto h = vm.create(2);
  EXPECT_THROW(vm.map(va, h, 1, 2), logic_error);  // past the handle's end
  EXPECT_THROW(vm.map(va + 1, h, 0, 1), logic_error);
  test::expect_error<out_of_memory>(
      [&] { (void)vm.reserve((std::size_t{1} << 62) / page); },  // 4 EiB of address space
      std::strerror(ENOMEM));
  try {
    vm.map(va, posix_vmm::handle{-1, 1}, 0, 1);
    FAIL() << "mapped a closed descriptor";
  } catch (const os_error& e) {
    EXPECT_EQ(e.code(), EBADF);
    EXPECT_NE(std::string(e.what()).find(std::strerror(EBADF)), std::string::npos) << e.what();
  }
  vm.release(h);
  vm.free(va, 4);
}

TEST(page_pool, reuses_pages_and_counts_them) {
  page_pool<test::fault_vmm> pool(test::fault_vmm{page}, {.limit = 8, .prereserve = 3});
  const auto& c = pool.backend().counters();
  EXPECT_EQ(pool.stats(), (page_pool_stats{0, 3, 0, 8}));
  EXPECT_EQ(c.live_handles, 3);
  std::vector<posix_vmm::handle> pages(5);
  const auto r = pool.acquire(pages);
  EXPECT_EQ(r.from_free, 3u);
  EXPECT_EQ(pool.stats(), (page_pool_stats{5, 0, 5, 8}));
  EXPECT_EQ(c.live_handles, 5);
  for (const auto& p : pages) {
    pool.release(p);
  }
  EXPECT_EQ(pool.stats(), (page_pool_stats{0, 5, 5, 8}));
  const auto again = pool.acquire(std::span(pages).first(2));
  EXPECT_EQ(again.from_free, 2u);
  EXPECT_EQ(pages[0], pages[0]);
  EXPECT_EQ(c.live_handles, 5);  // no new handle
  pool.release(pages[0]);
  pool.release(pages[1]);
  EXPECT_EQ(pool.trim(1), 4u);
  EXPECT_EQ(pool.stats(), (page_pool_stats{0, 1, 5, 8}));
  EXPECT_EQ(c.live_handles, 1);
}

TEST(page_pool, limit_and_backend_failures_leave_the_pool_unchanged) {
  page_pool<test::fault_vmm> pool(test::fault_vmm{page}, {.limit = 6, .prereserve = 2});
  auto& vm = pool.backend();
  std::vector<posix_vmm::handle> pages(7);
  const auto before = pool.stats();
  test::expect_error<out_of_memory>([&] { (void)pool.acquire(pages); }, "limit of 6 pages");
  EXPECT_EQ(pool.stats(), before);
  for (std::int64_t n = 1; n <= 4; ++n) {
    vm.fail_at(n);
    EXPECT_THROW((void)pool.acquire(std::span(pages).first(6)), out_of_memory) << n;
    EXPECT_EQ(pool.stats(), before) << n;
    EXPECT_EQ(vm.counters().live_handles, 2) << n;
    vm.fail_at(n);
    EXPECT_THROW(pool.reserve(6), out_of_memory) << n;
    EXPECT_EQ(pool.stats(), before) << n;
    EXPECT_EQ(vm.counters().live_handles, 2) << n;
  }
  vm.fail_at(0);
  const auto r = pool.acquire(std::span(pages).first(6));
  EXPECT_EQ(pool.stats(), (page_pool_stats{6, 0, 6, 6}));
  pool.undo(std::span(pages).first(6), r);
  EXPECT_EQ(pool.stats(), before);
  EXPECT_EQ(vm.counters().live_handles, 2);
  EXPECT_THROW(page_pool<test::fault_vmm>(test::fault_vmm{page}, {.limit = 1, .prereserve = 2}),
               logic_error);
}

}  // namespace
}  // namespace wisp
