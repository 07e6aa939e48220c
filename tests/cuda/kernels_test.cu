// SPDX-License-Identifier: Apache-2.0
// GPU tests of the kernels that take routed ids (skipped without a GPU): the remap kernel
// against Thrust's remap_topk, the reroute kernel against reroute_table::apply and the pager's
// map, and the reference fused-MoE kernel against the host reference_fused_moe, bit for bit.
#include "device_array.cuh"
#include "device_guard.hpp"

#include <wisp/cache/lru.hpp>
#include <wisp/cuda/kernels.cuh>
#include <wisp/cuda/remap.hpp>
#include <wisp/cuda/reroute.hpp>
#include <wisp/kernel/bf16.hpp>
#include <wisp/kernel/reference_moe.hpp>
#include <wisp/pager/pager.hpp>
#include <wisp/pager/reroute_table.hpp>

#include <cuda_runtime_api.h>
#include <thrust/execution_policy.h>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace {

using wisp::bf16;
using wisp::cuda::testing::device_array;

template <class Id>
void check_remap_kernel(std::uint32_t seed) {
  std::mt19937 rng(seed);
  for (const std::int32_t experts : {1, 64, 160}) {
    std::vector<std::int32_t> map(static_cast<std::size_t>(experts), wisp::cuda::not_resident);
    std::int32_t slot = 0;
    for (std::int32_t& s : map) {
      s = rng() % 3 == 0 ? wisp::cuda::not_resident : slot++;
    }
    std::uniform_int_distribution<std::int64_t> id(-2, experts + 2);
    std::vector<Id> ids(100003);
    for (Id& v : ids) {
      v = static_cast<Id>(id(rng));
    }
    if constexpr (sizeof(Id) == 8) {
      ids[7] = Id{1} << 32;  // must not wrap to expert 0
    }
    const device_array<Id> d_ids(ids);
    const device_array<std::int32_t> d_map(map);
    device_array<std::int32_t> got(ids.size());
    device_array<std::int32_t> want(ids.size());
    wisp::cuda::launch_remap(d_ids.data(), ids.size(), d_map.data(), experts, got.data(), nullptr);
    (void)wisp::cuda::remap_topk(thrust::device, d_ids.data(), d_ids.data() + ids.size(),
                                 d_map.data(), experts, want.data());
    WISP_CUDA_TRY(cudaDeviceSynchronize());
    EXPECT_EQ(got.download(), want.download()) << "experts " << experts;
  }
}

TEST(RemapKernel, EqualsThrustRemapTopk) {
  WISP_SKIP_WITHOUT_GPU();
  check_remap_kernel<std::int32_t>(1);
  check_remap_kernel<std::int64_t>(2);
}

TEST(RerouteKernel, EqualsRerouteTableAndThePagersMap) {
  WISP_SKIP_WITHOUT_GPU();
  const std::int32_t experts = 64;
  const std::int32_t adapters = 4;
  const std::int32_t k = 6;
  const std::int32_t tokens = 37;
  std::mt19937 rng(3);
  wisp::reroute_table table(adapters, experts, experts + adapters * 8);
  for (std::int32_t a = 0; a < adapters; ++a) {
    for (std::int32_t i = 0; i < 8; ++i) {
      table.assign(a, static_cast<std::int32_t>(rng() % experts), experts + a * 8 + i);
    }
  }
  wisp::pager<wisp::lru> pager(
      {.layers = 1, .experts = table.rows(), .top_k = k, .capacity = table.rows()});
  const device_array<std::int32_t> d_table(
      std::vector<std::int32_t>(table.table().begin(), table.table().end()));
  for (int call = 0; call < 20; ++call) {
    std::vector<std::int32_t> ids;
    std::vector<std::int32_t> adapter_ids;
    for (std::int32_t t = 0; t < tokens; ++t) {
      adapter_ids.push_back(static_cast<std::int32_t>(rng() % (adapters + 1)) - 1);
      for (std::int32_t j = 0; j < k; ++j) {
        ids.push_back(static_cast<std::int32_t>(rng() % experts));
      }
    }
    std::vector<std::int32_t> rows(ids.size());
    table.apply(ids, tokens, k, adapter_ids, rows);
    const wisp::prepare_result r = pager.prepare(0, rows, tokens, k);
    std::vector<std::int32_t> slots(ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) {
      slots[i] = r.expert_map[static_cast<std::size_t>(rows[i])];
    }
    const device_array<std::int32_t> d_ids(ids);
    const device_array<std::int32_t> d_adapters(adapter_ids);
    const device_array<std::int32_t> d_map(
        std::vector<std::int32_t>(r.expert_map.begin(), r.expert_map.end()));
    device_array<std::int32_t> got_rows(ids.size());
    device_array<std::int32_t> got_slots(ids.size());
    const wisp::cuda::reroute_to_row to_row{d_table.data(), adapters, experts};
    wisp::cuda::launch_reroute(to_row, d_ids.data(), ids.size(), k, d_adapters.data(),
                               got_rows.data(), nullptr);
    wisp::cuda::launch_reroute(wisp::cuda::reroute_to_slot{to_row, {d_map.data(), table.rows()}},
                               d_ids.data(), ids.size(), k, d_adapters.data(), got_slots.data(),
                               nullptr);
    EXPECT_EQ(got_rows.download(), rows) << "call " << call;
    EXPECT_EQ(got_slots.download(), slots) << "call " << call;
  }
}

// Experts in a device slot tensor placed by a pager, hidden states and routing.
template <class Activation>
void check_fused_moe_kernel(wisp::swiglu_shape shape, unsigned threads, std::uint32_t seed) {
  const std::int32_t experts = 24;
  const std::int32_t capacity = 12;
  const std::int32_t k = 4;
  const std::int32_t tokens = 3;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> w(-0.4f, 0.4f);
  const std::size_t row = shape.row_bytes();
  std::vector<std::byte> masters(row * experts);
  for (std::size_t i = 0; i + 1 < masters.size(); i += 2) {
    const bf16 v = wisp::to_bf16(w(rng));
    std::memcpy(masters.data() + i, &v, sizeof v);
  }
  wisp::pager<wisp::lru> pager({.layers = 1, .experts = experts, .top_k = k, .capacity = capacity});
  std::vector<std::byte> host_slots(row * capacity);
  device_array<std::byte> d_slots(row * capacity);
  const wisp::expert_tensor_view host_view{host_slots.data(), static_cast<std::size_t>(capacity),
                                           row};
  const wisp::expert_tensor_view device_view{d_slots.data(), static_cast<std::size_t>(capacity),
                                             row};
  wisp::reference_fused_moe host(shape);
  const wisp::cuda::reference_fused_moe device(shape, nullptr, threads);
  for (int call = 0; call < 12; ++call) {
    std::vector<std::int32_t> ids;
    std::vector<float> weights;
    for (std::int32_t i = 0; i < tokens * k; ++i) {
      ids.push_back(static_cast<std::int32_t>(rng() % experts));
      weights.push_back(w(rng) + 0.4f);
    }
    const wisp::prepare_result r = pager.prepare(0, ids, tokens, k);
    for (const wisp::copy_op& op : r.copy_plan) {
      std::memcpy(host_slots.data() + op.slot * row, masters.data() + op.expert * row, row);
    }
    d_slots.upload(host_slots);
    std::vector<Activation> hidden(static_cast<std::size_t>(tokens * shape.hidden));
    for (Activation& v : hidden) {
      v = wisp::activation_from_float<Activation>(w(rng) * 3);
    }
    std::vector<std::int32_t> map(r.expert_map.begin(), r.expert_map.end());
    if (call % 4 == 3) {
      map[static_cast<std::size_t>(ids[0])] = -1;  // a hidden expert (an expert split)
    }
    std::vector<Activation> want(hidden.size());
    host(wisp::basic_fused_moe_args<Activation>{hidden, ids, weights, host_view, map, want, tokens,
                                                k, shape.hidden});
    const device_array<Activation> d_hidden(hidden);
    const device_array<std::int32_t> d_ids(ids);
    const device_array<float> d_weights(weights);
    const device_array<std::int32_t> d_map(map);
    device_array<Activation> d_out(hidden.size());
    device(wisp::basic_fused_moe_args<Activation>{d_hidden.span(), d_ids.span(), d_weights.span(),
                                                  device_view, d_map.span(), d_out.span(), tokens,
                                                  k, shape.hidden});
    WISP_CUDA_TRY(cudaDeviceSynchronize());
    const std::vector<Activation> got = d_out.download();
    ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(Activation)), 0)
        << "hidden " << shape.hidden << " intermediate " << shape.intermediate << " threads "
        << threads << " call " << call;
  }
}

TEST(ReferenceFusedMoeKernel, EqualsTheHostReferenceBitForBit) {
  WISP_SKIP_WITHOUT_GPU();
  check_fused_moe_kernel<bf16>({.hidden = 64, .intermediate = 32}, 256, 1);
  check_fused_moe_kernel<bf16>({.hidden = 72, .intermediate = 40}, 64, 2);  // ragged strides
  check_fused_moe_kernel<float>({.hidden = 128, .intermediate = 96}, 128, 3);
}

}  // namespace
