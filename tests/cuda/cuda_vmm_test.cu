// SPDX-License-Identifier: Apache-2.0
// cuda_vmm (nvcc only): the backend alone, and page_pool + virtual_expert_tensor + a kernel over
// device memory. The binary links cudart only (cuMem* come through
// cudaGetDriverEntryPointByVersion), so it starts without a driver; GPU tests skip there.
#include "device_guard.hpp"

#include <wisp/core/error.hpp>
#include <wisp/cuda/cuda_vmm.cuh>
#include <wisp/cuda/runtime.cuh>
#include <wisp/vmm/page_pool.hpp>
#include <wisp/vmm/virtual_expert_tensor.hpp>
#include <wisp/vmm/vmm_backend.hpp>

#include <cuda_runtime_api.h>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace {

using wisp::cuda::cuda_vmm;

static_assert(wisp::vmm_backend<cuda_vmm>);

__global__ void stamp_rows(wisp::expert_tensor_view v, std::size_t first, std::size_t n) {
  const std::size_t r = first + blockIdx.x;
  if (r < first + n) {
    for (std::size_t i = threadIdx.x; i < v.row_stride; i += blockDim.x) {
      v.row(r)[i] = static_cast<std::byte>((r * 131u + i) & 0xFFu);
    }
  }
}

bool row_is_stamped(const std::vector<std::byte>& host, std::size_t r, std::size_t stride) {
  for (std::size_t i = 0; i < stride; ++i) {
    if (host[i] != static_cast<std::byte>((r * 131u + i) & 0xFFu)) {
      return false;
    }
  }
  return true;
}

TEST(cuda_vmm, without_a_device_the_constructor_throws_instead_of_crashing) {
  if (wisp::cuda::device_count() != 0) {
    EXPECT_THROW(cuda_vmm({.device = 1 << 20}), wisp::logic_error);
    return;
  }
  EXPECT_THROW(cuda_vmm{}, wisp::cuda_error);
}

TEST(cuda_vmm, reserve_create_map_access_unmap_release) {
  WISP_SKIP_WITHOUT_GPU();
  cuda_vmm vm;
  const std::size_t g = vm.granularity();
  ASSERT_GT(g, 0u);
  EXPECT_GE(vm.access().size(), 1u);
  std::byte* va = vm.reserve(4);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(va) % g, 0u);
  const auto h = vm.create(1);
  vm.map(va + g, h, 0, 1);
  vm.set_access(va + g, 1);
  ASSERT_EQ(cudaMemset(va + g, 0x5A, g), cudaSuccess);
  std::vector<unsigned char> back(g);
  ASSERT_EQ(cudaMemcpy(back.data(), va + g, g, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back.front(), 0x5A);
  EXPECT_EQ(back.back(), 0x5A);
  EXPECT_THROW(vm.map(va, h, 1, 1), wisp::logic_error);
  vm.unmap(va + g, 1);
  vm.release(h);
  vm.free(va, 4);
}

TEST(cuda_vmm, huge_create_is_out_of_memory) {
  WISP_SKIP_WITHOUT_GPU();
  cuda_vmm vm;
  const std::size_t granules = (std::size_t{1} << 44) / vm.granularity();  // 16 TiB
  EXPECT_THROW((void)vm.create(granules), wisp::out_of_memory);
}

TEST(cuda_vmm, tensor_grows_in_place_and_keeps_rows_written_by_a_kernel) {
  WISP_SKIP_WITHOUT_GPU();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  {
    wisp::page_pool<cuda_vmm> pool(cuda_vmm({.device = 0, .stream = stream}), {.limit = 40});
    const std::size_t g = pool.granularity();
    const std::size_t stride = g + g / 2;  // 1.5 granules: boundary granules are shared
    wisp::virtual_expert_tensor<cuda_vmm> w(pool, {.max_rows = 32, .row_stride = stride});
    std::byte* const base = w.data();
    w.resize_resident(5);
    stamp_rows<<<5, 256, 0, stream>>>(w.view(), 0, 5);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    w.resize_resident(20);  // grow in place
    EXPECT_EQ(w.data(), base);
    w.unmap_rows(0, 1);  // row 1 keeps the granule it shares with row 0
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    std::vector<std::byte> host(stride);
    for (std::size_t r = 1; r < 5; ++r) {
      ASSERT_EQ(cudaMemcpy(host.data(), w.row(r), stride, cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_TRUE(row_is_stamped(host, r, stride)) << "row " << r;
    }
    EXPECT_EQ(w.granule_refcount(1), 1u);
    const auto before = pool.stats();
    EXPECT_THROW(w.resize_resident(32), wisp::out_of_memory);  // 18 more granules: 47 > limit 40
    EXPECT_EQ(pool.stats(), before);
    EXPECT_EQ(w.resident_rows(), 20u);
    w.resize_resident(0);
    EXPECT_EQ(pool.stats().mapped, w.mapped_granules());
  }
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

}  // namespace
