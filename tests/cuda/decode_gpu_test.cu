// SPDX-License-Identifier: Apache-2.0
// The device side of the GPU decode benchmark (bench/cuda): the GEMV fused-MoE kernel against its
// host arithmetic, bit for bit, reading device memory and mapped pinned memory; the cuBLAS kernel
// against wisp::reference_fused_moe within the tolerance; device_pager::load continuing a host
// run call by call; and the benchmark's smallest configuration (the tiny model, every arm, both
// budgets, two repetitions) end to end. Skipped without a GPU.
#include "cuda/cublas_moe.cuh"
#include "cuda/decode_run.cuh"
#include "cuda/gemv_moe.cuh"
#include "device_array.cuh"
#include "device_guard.hpp"
#include "support/expect_error.hpp"

#include <wisp/core/detail/json.hpp>
#include <wisp/cuda/device_pager.cuh>
#include <wisp/cuda/pager_step.hpp>
#include <wisp/cuda/pinned_host_store.cuh>
#include <wisp/kernel/reference_moe.hpp>
#include <wisp/trace/synthetic.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <random>
#include <vector>

namespace {

namespace wb = wisp::bench;
using wisp::cuda::testing::device_array;
using wisp::cuda::testing::download;

// A small MoE call: random experts, some positions hidden (experts 1 and 7 are not mapped).
struct moe_case {
  wisp::swiglu_shape shape{64, 40};
  std::int32_t experts = 6;
  std::int32_t tokens = 3;
  std::int32_t k = 3;
  std::vector<wisp::bf16> rows, hidden;
  std::vector<std::int32_t> ids;
  std::vector<std::int32_t> map{4, -1, 0, 5, 1, 2, 3, -1};
  std::vector<float> weights;

  moe_case() {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1, 1);
    rows.resize(static_cast<std::size_t>(experts) * shape.row_bytes() / sizeof(wisp::bf16));
    for (auto& v : rows) {
      v = wisp::to_bf16(0.3f * u(rng));
    }
    hidden.resize(static_cast<std::size_t>(tokens * shape.hidden));
    for (auto& v : hidden) {
      v = wisp::to_bf16(u(rng));
    }
    for (std::int32_t t = 0; t < tokens; ++t) {
      std::vector<std::int32_t> all(8);
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      for (std::int32_t j = 0; j < k; ++j) {
        ids.push_back(all[static_cast<std::size_t>(j)]);
        weights.push_back(0.5f + 0.5f * u(rng));
      }
    }
  }
  [[nodiscard]] wisp::basic_fused_moe_args<wisp::bf16> host_args(std::vector<wisp::bf16>& out) {
    out.assign(hidden.size(), wisp::bf16{});
    return {hidden,
            ids,
            weights,
            {reinterpret_cast<std::byte*>(rows.data()), static_cast<std::size_t>(experts),
             shape.row_bytes()},
            map,
            out,
            tokens,
            k,
            shape.hidden};
  }
};

// The device copies of a case's inputs.
struct device_case {
  device_array<wisp::bf16> rows, hidden, out;
  device_array<std::int32_t> ids, map;
  device_array<float> weights;
  explicit device_case(const moe_case& c)
      : rows(c.rows),
        hidden(c.hidden),
        out(c.hidden.size()),
        ids(c.ids),
        map(c.map),
        weights(c.weights) {}
  [[nodiscard]] wisp::basic_fused_moe_args<wisp::bf16> args(const moe_case& c,
                                                            wisp::expert_tensor_view view) const {
    return {hidden.span(), ids.span(), weights.span(), view, map.span(), out.span(),
            c.tokens,      c.k,        c.shape.hidden};
  }
};

TEST(GemvKernel, EqualsItsHostArithmeticBitForBitOnDeviceAndPinnedRows) {
  WISP_SKIP_WITHOUT_GPU();
  moe_case c;
  std::vector<wisp::bf16> want;
  wb::gemv_moe_host(c.shape)(c.host_args(want));
  const device_case d(c);
  wb::gemv_fused_moe kernel(c.shape, c.tokens, c.k, nullptr);
  kernel(d.args(c, {reinterpret_cast<std::byte*>(d.rows.data()),
                    static_cast<std::size_t>(c.experts), c.shape.row_bytes()}));
  WISP_CUDA_TRY(cudaDeviceSynchronize());
  EXPECT_TRUE(wb::compare_outputs(want, d.out.download()).equal())
      << wb::compare_outputs(want, d.out.download()).describe(1, c.shape.hidden);
  // The same rows read from mapped pinned memory (what layer-offload's kernels do).
  wisp::cuda::pinned_host_store pinned(c.experts, wisp::expert_row_layout({c.shape.row_bytes()}));
  std::memcpy(pinned.row(0).data(), c.rows.data(), c.rows.size() * sizeof(wisp::bf16));
  kernel(d.args(c, pinned.device_view()));
  WISP_CUDA_TRY(cudaDeviceSynchronize());
  EXPECT_TRUE(wb::compare_outputs(want, d.out.download()).equal());
  // Misaligned rows are refused before anything runs.
  wisp::test::expect_error(
      [&] {
        kernel(d.args(c, {reinterpret_cast<std::byte*>(d.rows.data()) + 2,
                          static_cast<std::size_t>(c.experts) - 1, c.shape.row_bytes()}));
      },
      "16-byte aligned");
}

TEST(CublasKernel, IsCloseToTheReferenceAndSkipsHiddenPositions) {
  WISP_SKIP_WITHOUT_GPU();
  moe_case c;
  std::vector<wisp::bf16> want;
  wisp::reference_fused_moe(c.shape)(c.host_args(want));
  const device_case d(c);
  wb::cublas_fused_moe kernel(c.shape, c.tokens, c.k, nullptr);
  kernel(d.args(c, {reinterpret_cast<std::byte*>(d.rows.data()),
                    static_cast<std::size_t>(c.experts), c.shape.row_bytes()}));
  WISP_CUDA_TRY(cudaDeviceSynchronize());
  const wb::closeness close = wb::compare_close(want, d.out.download());
  EXPECT_TRUE(close.within(wb::kernel_tolerance)) << close.describe(wb::kernel_tolerance);
}

TEST(DevicePagerLoad, ContinuesAHostRunCallByCall) {
  WISP_SKIP_WITHOUT_GPU();
  const wb::decode_routing r =
      wb::load_decode_routing(wb::decode_model_named("tiny"), "/nonexistent", 150);
  const wisp::cuda::pager_state_config config{.layers = 4, .experts = 16, .capacity = 6};
  wisp::cuda::host_pager_state host(config);
  for (std::int32_t t = 0; t < 100; ++t) {
    for (std::int32_t l = 0; l < 4; ++l) {
      ASSERT_EQ(host.step(l, r.ids_of(t, l)), wisp::cuda::pager_step_status::ok);
    }
  }
  wisp::cuda::device_pager device(config);
  device.load(host);
  device_array<std::int32_t> ids(std::vector<std::int32_t>(2, 0));
  for (std::int32_t t = 100; t < 150; ++t) {
    for (std::int32_t l = 0; l < 4; ++l) {
      ids.upload(std::vector<std::int32_t>(r.ids_of(t, l).begin(), r.ids_of(t, l).end()));
      ASSERT_EQ(host.step(l, r.ids_of(t, l)), wisp::cuda::pager_step_status::ok);
      device.step(l, ids.data(), 2, nullptr);
      WISP_CUDA_TRY(cudaDeviceSynchronize());
      ASSERT_EQ(download(device.map(l), 16),
                std::vector<std::int32_t>(host.map(l).begin(), host.map(l).end()))
          << "token " << t << " layer " << l;
      const wisp::cuda::pager_layer_info info = device.read_info(l, nullptr);
      ASSERT_EQ(info.total_hits, host.info(l).total_hits);
      ASSERT_EQ(info.copies, host.info(l).copies);
      const auto copies = download(device.copies(l), static_cast<std::size_t>(info.copies));
      ASSERT_TRUE(std::ranges::equal(copies, host.copies(l)));
    }
  }
  wisp::cuda::host_pager_state other({.layers = 4, .experts = 16, .capacity = 5});
  wisp::test::expect_error([&] { device.load(other); }, "(5 slots)");
  wisp::cuda::host_pager_state uneven(
      {.layers = 4, .experts = 16, .capacity = 6, .layer_capacities = {6, 6, 5, 6}});
  wisp::test::expect_error([&] { device.load(uneven); }, "layer 2 has 5 slots");
}

// The benchmark's smallest configuration: the tiny model (4 layers x 16 experts, top-2), every
// arm at both budgets, two repetitions; every arm must run, and its outputs equal the reference
// (the host arms': within host_swiglu_tolerance of it).
TEST(DecodeBench, SmallestConfigurationRunsEveryArmEndToEnd) {
  WISP_SKIP_WITHOUT_GPU();
  wb::decode_options o;
  o.window = {64, 2, 4, 2};
  o.repetitions = 2;
  o.host_reserve = 0;
  o.device_reserve = 0;
  o.pin_threads = 2;
  o.traces_dir = "/nonexistent";
  o.device = "test";
  std::vector<std::string> log;
  wb::model_bench bench(wb::decode_model_named("tiny"), o,
                        [&log](const std::string& line) { log.push_back(line); });
  EXPECT_EQ(bench.plan().layers, 4);
  EXPECT_TRUE(bench.plan().all_resident);
  for (const double fraction : o.budgets) {
    std::int32_t progress = 0;
    const wb::config_report r =
        bench.run_budget(fraction, std::chrono::steady_clock::time_point::max(),
                         [&progress](const wb::config_report&) { ++progress; });
    EXPECT_EQ(progress, 2);
    for (const wb::kernel_report& k : r.kernels) {
      EXPECT_TRUE(k.ok) << k.name << ": " << k.check << k.error;
    }
    ASSERT_EQ(r.arms.size(), wb::decode_arms.size());
    ASSERT_EQ(r.cublas_arms.size(), 2u);
    for (const auto* list : {&r.arms, &r.cublas_arms}) {
      for (const wb::arm_report& a : *list) {
        const std::string name(wb::arm_name(a.arm));
        EXPECT_EQ(a.error, "") << name;
        EXPECT_EQ(a.skipped, "") << name;
        EXPECT_TRUE(a.output_ok) << name << ": " << a.output_check;
        EXPECT_EQ(a.tok_s.size(), 2u) << name;
        EXPECT_GT(a.decode_tok_s().min, 0) << name;
      }
    }
    const auto arm = [&r](wb::decode_arm a) { return r.arms[static_cast<std::size_t>(a)]; };
    EXPECT_EQ(arm(wb::decode_arm::all_resident).totals.hit_rate(), 1.0);
    EXPECT_EQ(arm(wb::decode_arm::on_demand).totals.hit_rate(), 0.0);
    EXPECT_GT(arm(wb::decode_arm::wisp_graph).totals.hits, 0u);
    EXPECT_GT(arm(wb::decode_arm::cpu_experts).totals.host_experts, 0u);
    EXPECT_GT(arm(wb::decode_arm::cpu_moe_layers).totals.host_experts, 0u);
    EXPECT_EQ(arm(wb::decode_arm::cpu_experts).totals.link_rows, 0u);
    EXPECT_GT(r.host.threads, 0);
    EXPECT_GT(r.host.gbps(), 0);
    const wisp::detail::json_value doc =
        wisp::detail::json_parser(wb::to_json(r), 0).parse_document();
    EXPECT_EQ(doc.find("arms")->find("wisp-graph")->find("output_equal")->boolean, true);
  }
  o.max_layers = 2;  // a run shrunk to fewer layers
  wb::model_bench two(wb::decode_model_named("tiny"), o, [](const std::string&) {});
  EXPECT_EQ(two.plan().layers, 2);
  const wb::config_report r = two.run_budget(0.5, std::chrono::steady_clock::time_point::max(),
                                             [](const wb::config_report&) {});
  for (const wb::arm_report& a : r.arms) {
    EXPECT_TRUE(a.output_ok) << wb::arm_name(a.arm) << ": " << a.output_check << a.error;
  }
}

}  // namespace
