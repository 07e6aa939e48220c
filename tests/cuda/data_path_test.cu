// SPDX-License-Identifier: Apache-2.0
// GPU tests of the data path (skipped without a GPU): pinned_host_store's rows and mapped
// pointer, copy_engine against host_expert_store on random plans (batched, per run, pitched,
// captured), its event ordering both ways, device_expert_map's buffers, and device_pager's step
// (under both policies) and copy kernels against the same step run on the host.
#include "device_array.cuh"
#include "device_guard.hpp"

#include <wisp/cache/lru.hpp>
#include <wisp/cuda/copy_engine.cuh>
#include <wisp/cuda/device_expert_map.cuh>
#include <wisp/cuda/device_pager.cuh>
#include <wisp/cuda/pager_step.hpp>
#include <wisp/cuda/pinned_host_store.cuh>
#include <wisp/pager/host_expert_store.hpp>
#include <wisp/pager/pager.hpp>
#include <wisp/trace/synthetic.hpp>
#include <wisp/transfer/copy_engine.hpp>
#include <wisp/transfer/row_layout.hpp>

#include <cuda_runtime_api.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <vector>

namespace {

using wisp::cuda::testing::device_array;
using wisp::cuda::testing::download;

// A stream that is destroyed at the end of the test.
struct stream {
  cudaStream_t s = nullptr;
  stream() { WISP_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~stream() { (void)cudaStreamDestroy(s); }
};

// Writes recognisable bytes into every row of a pinned store.
void fill(const wisp::cuda::pinned_host_store& store, std::uint32_t seed) {
  for (std::int32_t e = 0; e < store.experts(); ++e) {
    const std::span<std::byte> row = store.row(e);
    for (std::size_t i = 0; i < row.size(); ++i) {
      row[i] =
          static_cast<std::byte>((seed * 131u + static_cast<std::uint32_t>(e) * 37u + i) & 0xffu);
    }
  }
}

__global__ void read_rows(wisp::expert_tensor_view rows, std::size_t row_bytes, std::byte* out) {
  for (std::size_t r = blockIdx.x; r < rows.rows; r += gridDim.x) {
    for (std::size_t i = threadIdx.x; i < row_bytes; i += blockDim.x) {
      out[r * row_bytes + i] = rows.row(r)[i];
    }
  }
}

TEST(PinnedHostStore, RowsAreAddressedLikeHostExpertStoreAndMappedForKernels) {
  WISP_SKIP_WITHOUT_GPU();
  const wisp::expert_row_layout layout({100, 30}, 16);
  wisp::cuda::pinned_host_store store(9, layout);
  EXPECT_FALSE(store.registered());
  for (std::int32_t e = 0; e < 9; ++e) {
    EXPECT_EQ(store.row(e).data(), store.host_view().base + layout.row_offset(e));
    EXPECT_EQ(store.tensor(e, 1).data(), store.row(e).data() + layout.offset(1));
  }
  fill(store, 1);
  device_array<std::byte> out(9 * layout.row_bytes());
  read_rows<<<4, 128>>>(store.device_view(), layout.row_bytes(), out.data());
  WISP_CUDA_TRY(cudaDeviceSynchronize());
  const std::vector<std::byte> got = out.download();
  EXPECT_TRUE(std::equal(got.begin(), got.end(), store.row(0).data()));
  // A registered caller buffer: same rows, unregistered (not freed) at the end.
  std::vector<std::byte> buffer(9 * layout.row_bytes() + 5);
  {
    wisp::cuda::pinned_host_store registered(buffer, 9, layout);
    EXPECT_TRUE(registered.registered());
    EXPECT_EQ(registered.row(3).data(), buffer.data() + 3 * layout.row_bytes());
  }
  EXPECT_THROW((void)store.row(9), wisp::logic_error);
  std::vector<std::byte> small(10);
  EXPECT_THROW(wisp::cuda::pinned_host_store(small, 9, layout), wisp::logic_error);
}

// Slots on the device, masters pinned, and the host oracle of both.
struct copy_fixture {
  std::int32_t experts = 40;
  std::int32_t slots = 16;
  std::size_t row;
  std::size_t slot_stride;
  wisp::cuda::pinned_host_store masters;
  device_array<std::byte> device_slots;
  wisp::host_expert_store oracle;

  copy_fixture(std::size_t row_bytes, std::size_t stride)
      : row(row_bytes),
        slot_stride(stride),
        masters(experts, wisp::expert_row_layout({row_bytes}, 1)),
        device_slots(stride * 16),
        oracle(experts, 16, row_bytes) {
    fill(masters, 7);
    device_slots.upload(std::vector<std::byte>(stride * 16));  // zero, as the oracle's slots
    for (std::int32_t e = 0; e < experts; ++e) {
      std::memcpy(oracle.master(e).data(), masters.row(e).data(), row);
    }
  }
  [[nodiscard]] wisp::copy_layout layout() {
    return {masters.host_view(),
            {device_slots.data(), static_cast<std::size_t>(slots), slot_stride},
            row};
  }
  // Every slot row on the device equals the oracle's.
  ::testing::AssertionResult slots_match() {
    const std::vector<std::byte> got = device_slots.download();
    for (std::int32_t s = 0; s < slots; ++s) {
      const std::span<const std::byte> want = oracle.slot(s);
      if (!std::equal(want.begin(), want.end(), got.begin() + s * slot_stride)) {
        return ::testing::AssertionFailure() << "slot " << s << " differs";
      }
    }
    return ::testing::AssertionSuccess();
  }
};

// Plans of a pager over random calls: runs of consecutive slots are common after a cold start.
std::vector<std::vector<wisp::copy_op>> pager_plans(std::int32_t experts, std::int32_t slots,
                                                    int calls) {
  wisp::pager<wisp::lru> pager({.layers = 1, .experts = experts, .top_k = 1, .capacity = slots});
  std::mt19937 rng(11);
  std::vector<std::vector<wisp::copy_op>> plans;
  for (int c = 0; c < calls; ++c) {
    std::vector<std::int32_t> ids;
    const std::int32_t first = static_cast<std::int32_t>(rng() % experts);
    for (std::int32_t i = 0; i < 1 + static_cast<std::int32_t>(rng() % slots); ++i) {
      ids.push_back(rng() % 2 == 0 ? (first + i) % experts
                                   : static_cast<std::int32_t>(rng() % experts));
    }
    const wisp::prepare_result r = pager.prepare(0, ids, static_cast<std::int32_t>(ids.size()), 1);
    plans.emplace_back(r.copy_plan.begin(), r.copy_plan.end());
  }
  return plans;
}

TEST(CopyEngine, EqualsHostExpertStoreBatchedPerRunAndPitched) {
  WISP_SKIP_WITHOUT_GPU();
  stream compute;
  const auto plans = pager_plans(40, 16, 60);
  for (const bool batch : {true, false}) {
    for (const std::size_t stride : {std::size_t{96}, std::size_t{128}}) {  // contiguous, pitched
      copy_fixture f(96, stride);
      wisp::cuda::copy_engine engine(compute.s, {.batch = batch});
      for (std::size_t i = 0; i < plans.size(); ++i) {
        const auto landed = engine.copy(f.layout(), plans[i], engine.consumer_event());
        f.oracle.apply(plans[i]);
        engine.wait(landed);
        if (i % 10 == 9) {
          WISP_CUDA_TRY(cudaStreamSynchronize(compute.s));
          ASSERT_TRUE(f.slots_match())
              << "batch " << batch << " stride " << stride << " plan " << i;
        }
      }
      engine.synchronize();
      EXPECT_TRUE(f.slots_match());
      const wisp::cuda::cuda_copy_stats& st = engine.stats();
      EXPECT_EQ(st.plans, plans.size());
      if (batch && CUDART_VERSION >= 13000) {
        EXPECT_GT(st.batches, 0u) << "cudaMemcpyBatchAsync was never used";
      } else {
        EXPECT_EQ(st.batches, 0u);
      }
    }
  }
}

// Spins for about `cycles` clock cycles, then copies `bytes` of `from` to `to`.
__global__ void slow_read(const std::byte* from, std::byte* to, std::size_t bytes,
                          long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
  for (std::size_t i = threadIdx.x; i < bytes; i += blockDim.x) {
    to[i] = from[i];
  }
}

TEST(CopyEngine, CopiesWaitForEarlierReadersAndKernelsWaitForCopies) {
  WISP_SKIP_WITHOUT_GPU();
  stream compute;
  copy_fixture f(256, 256);
  wisp::cuda::copy_engine engine(compute.s);
  device_array<std::byte> seen(256);
  // Expert 3 into slot 5, and a kernel on compute reads slot 5 only after the copy landed.
  engine.wait(engine.copy(f.layout(), std::vector<wisp::copy_op>{{3, 5}}));
  const std::byte* slot5 = f.device_slots.data() + 5 * 256;
  slow_read<<<1, 128, 0, compute.s>>>(slot5, seen.data(), 256, 0);
  // A slow reader of slot 5, then expert 9 into slot 5 after it: the reader still sees expert 3.
  device_array<std::byte> seen_before(256);
  slow_read<<<1, 128, 0, compute.s>>>(slot5, seen_before.data(), 256, 20'000'000);
  engine.wait(engine.copy(f.layout(), std::vector<wisp::copy_op>{{9, 5}}, engine.consumer_event()));
  device_array<std::byte> seen_after(256);
  slow_read<<<1, 128, 0, compute.s>>>(slot5, seen_after.data(), 256, 0);
  WISP_CUDA_TRY(cudaStreamSynchronize(compute.s));
  const auto expert = [&](std::int32_t e) {
    return std::vector<std::byte>(f.masters.row(e).begin(), f.masters.row(e).end());
  };
  EXPECT_EQ(seen.download(), expert(3));
  EXPECT_EQ(seen_before.download(), expert(3));
  EXPECT_EQ(seen_after.download(), expert(9));
}

TEST(CopyEngine, CapturedPlansRunPerRunInTheGraphAndJoinTheCapture) {
  WISP_SKIP_WITHOUT_GPU();
  stream compute;
  copy_fixture f(96, 96);
  wisp::cuda::copy_engine engine(compute.s);
  const std::vector<wisp::copy_op> plan{{1, 0}, {2, 1}, {3, 2}, {20, 9}, {7, 4}};
  const std::vector<wisp::copy_op> later{{30, 12}, {31, 13}, {5, 15}};  // given no `after`
  cudaGraph_t graph = nullptr;
  WISP_CUDA_TRY(cudaStreamBeginCapture(compute.s, cudaStreamCaptureModeThreadLocal));
  engine.wait(engine.copy(f.layout(), plan, engine.consumer_event()));
  engine.wait(engine.copy(f.layout(), later));
  WISP_CUDA_TRY(cudaStreamEndCapture(compute.s, &graph));
  EXPECT_EQ(engine.stats().batches, 0u);
  EXPECT_EQ(engine.stats().per_run_plans, 2u);
  cudaGraphExec_t exec = nullptr;
  WISP_CUDA_TRY(cudaGraphInstantiate(&exec, graph, 0));
  WISP_CUDA_TRY(cudaGraphLaunch(exec, compute.s));
  WISP_CUDA_TRY(cudaStreamSynchronize(compute.s));
  f.oracle.apply(plan);
  f.oracle.apply(later);
  EXPECT_TRUE(f.slots_match());
  (void)cudaGraphExecDestroy(exec);
  (void)cudaGraphDestroy(graph);
}

__global__ void read_map(const std::int32_t* map, std::int32_t n, std::int32_t* out) {
  for (std::int32_t i = static_cast<std::int32_t>(threadIdx.x); i < n; i += blockDim.x) {
    out[i] = map[i];
  }
}

TEST(DeviceExpertMap, KernelsReadEachUploadAtFixedAddresses) {
  WISP_SKIP_WITHOUT_GPU();
  stream compute;
  stream copy;
  for (const std::int32_t buffers : {1, 2}) {
    wisp::cuda::device_expert_map maps(3, 50, buffers);
    std::vector<const std::int32_t*> addresses;
    for (std::int32_t b = 0; b < buffers; ++b) {
      addresses.push_back(maps.buffer(1, b));
    }
    std::vector<std::vector<std::int32_t>> uploaded;
    std::vector<std::unique_ptr<device_array<std::int32_t>>> seen;
    for (int call = 0; call < 7; ++call) {
      std::vector<std::int32_t> map(50, -1);
      for (int i = 0; i < 5; ++i) {
        map[static_cast<std::size_t>((call * 7 + i * 3) % 50)] = i;
      }
      const std::int32_t* at = maps.upload(1, map, copy.s);
      EXPECT_NE(std::find(addresses.begin(), addresses.end(), at), addresses.end());
      EXPECT_EQ(maps.acquire(1, compute.s), at);
      seen.push_back(std::make_unique<device_array<std::int32_t>>(50));
      read_map<<<1, 64, 0, compute.s>>>(at, 50, seen.back()->data());
      maps.release(1, compute.s);
      uploaded.push_back(map);
    }
    WISP_CUDA_TRY(cudaStreamSynchronize(compute.s));
    for (std::size_t i = 0; i < uploaded.size(); ++i) {
      EXPECT_EQ(seen[i]->download(), uploaded[i]) << buffers << " buffers, call " << i;
    }
    EXPECT_EQ(download(maps.buffer(0, 0), 50), std::vector<std::int32_t>(50, -1));
  }
}

TEST(DeviceExpertMap, UploadsAreRefusedDuringCaptureAndBadArgumentsNamed) {
  WISP_SKIP_WITHOUT_GPU();
  stream s;
  wisp::cuda::device_expert_map maps(2, 8);
  const std::vector<std::int32_t> map(8, 0);
  EXPECT_THROW((void)maps.upload(2, map, s.s), wisp::logic_error);
  EXPECT_THROW((void)maps.upload(0, std::vector<std::int32_t>(7, 0), s.s), wisp::logic_error);
  cudaGraph_t graph = nullptr;
  WISP_CUDA_TRY(cudaStreamBeginCapture(s.s, cudaStreamCaptureModeThreadLocal));
  EXPECT_THROW((void)maps.upload(0, map, s.s), wisp::logic_error);
  WISP_CUDA_TRY(cudaStreamEndCapture(s.s, &graph));
  (void)cudaGraphDestroy(graph);
  EXPECT_THROW(wisp::cuda::device_expert_map(1, 8, 3), wisp::logic_error);
}

// Every call's ids of a trace, canonical order ([steps x layers x k]).
std::vector<std::int32_t> all_ids(const wisp::routing_trace& t) {
  std::vector<std::int32_t> ids;
  for (std::size_t s = 0; s < t.steps(); ++s) {
    for (std::int32_t l = 0; l < t.shape().layers; ++l) {
      for (std::int32_t j = 0; j < t.shape().top_k; ++j) {
        ids.push_back(t.expert(s, l, j));
      }
    }
  }
  return ids;
}

// Steps every call of `t` (in batches of `tokens` tokens, a bad id now and then) on the device,
// in the form `kernel` picks, and with the block step on the host; the maps, copy lists and
// counters (and, under lfu_history, the call counts) must agree after each. With `load`, the
// device starts from the host's state after the first half of the calls (`device_pager::load`).
void check_device_steps(const wisp::routing_trace& t, std::int32_t capacity, std::int32_t tokens,
                        wisp::cuda::step_kernel kernel = wisp::cuda::step_kernel::automatic,
                        wisp::cuda::step_policy policy = wisp::cuda::step_policy::lru,
                        bool load = false) {
  const wisp::moe_shape shape = t.shape();
  const wisp::cuda::pager_state_config config{
      .layers = shape.layers, .experts = shape.experts, .capacity = capacity, .policy = policy};
  wisp::cuda::device_pager device(config);
  wisp::cuda::host_pager_state host(config);
  stream s;
  std::mt19937 rng(5);
  std::vector<std::int32_t> ids = all_ids(t);
  const auto k = static_cast<std::size_t>(shape.top_k);
  const std::size_t loaded_at = load ? t.steps() / 2 : 0;
  for (std::size_t step = 0; step + static_cast<std::size_t>(tokens) <= t.steps();
       step += static_cast<std::size_t>(tokens)) {
    if (load && step == loaded_at) {
      device.load(host);
    }
    for (std::int32_t l = 0; l < shape.layers; ++l) {
      std::vector<std::int32_t> call;
      for (std::size_t token = step; token < step + static_cast<std::size_t>(tokens); ++token) {
        const std::size_t at =
            (token * static_cast<std::size_t>(shape.layers) + static_cast<std::size_t>(l)) * k;
        call.insert(call.end(), ids.begin() + at, ids.begin() + at + k);
      }
      if (rng() % 97 == 0) {
        call[rng() % call.size()] = shape.experts + 1;
      }
      (void)host.step(l, std::span<const std::int32_t>(call));
      if (step < loaded_at) {
        continue;  // the host alone, until the device loads its state
      }
      const device_array<std::int32_t> d_call(call);
      device.step(l, d_call.data(), static_cast<std::int32_t>(call.size()), s.s, kernel);
      const wisp::cuda::pager_layer_info got = device.read_info(l, s.s);
      const wisp::cuda::pager_layer_info& want = host.info(l);
      ASSERT_EQ(got.status, want.status) << "step " << step << " layer " << l;
      ASSERT_EQ(got.hits, want.hits);
      ASSERT_EQ(got.copies, want.copies);
      ASSERT_EQ(got.shown, want.shown);
      ASSERT_EQ(got.resident, want.resident);
      ASSERT_EQ(got.total_misses, want.total_misses);
      const std::vector<std::int32_t> map = download(device.map(l), host.map(l).size());
      ASSERT_TRUE(std::equal(map.begin(), map.end(), host.map(l).begin())) << "step " << step;
      const std::vector<wisp::copy_op> copies =
          download(device.copies(l), static_cast<std::size_t>(got.copies));
      ASSERT_TRUE(
          std::equal(copies.begin(), copies.end(), host.copies(l).begin(), host.copies(l).end()))
          << "step " << step << " layer " << l;
      if (policy == wisp::cuda::step_policy::lfu_history) {
        const std::vector<std::uint64_t> counts =
            download(device.state().count + static_cast<std::size_t>(l) * shape.experts,
                     static_cast<std::size_t>(shape.experts));
        ASSERT_TRUE(
            std::equal(counts.begin(), counts.end(), host.counts(l).begin(), host.counts(l).end()))
            << "step " << step << " layer " << l;
      }
    }
  }
}

TEST(DevicePager, StepsEqualTheSameStepRunOnTheHost) {
  WISP_SKIP_WITHOUT_GPU();
  const auto esft_like = wisp::make_synthetic_trace(wisp::synthetic_preset("default"), 120,
                                                    wisp::default_synthetic_seed);
  using wisp::cuda::step_kernel;
  check_device_steps(esft_like, 8, 1);                      // the warp step
  check_device_steps(esft_like, 8, 1, step_kernel::block);  // the block step on the same calls
  check_device_steps(esft_like, 16, 4);  // some calls over the capacity; warp and block alternate
  check_device_steps(esft_like, 16, 4, step_kernel::block);
  auto qwen = wisp::synthetic_preset("qwen3-30b-a3b");
  qwen.layers = 3;
  const auto wide = wisp::make_synthetic_trace(qwen, 200, 3);
  check_device_steps(wide, 32, 1);
  check_device_steps(wide, 32, 4, step_kernel::warp);  // 32 ids: a full warp
  check_device_steps(wide, 128, 24);  // 192 ids per call: several rounds of the block's scans
  // The warp step serves at most 32 ids on at most 32 slots: a forced one beyond is refused.
  wisp::cuda::device_pager wide_layers({.layers = 1, .experts = 64, .capacity = 40});
  const device_array<std::int32_t> one(std::vector<std::int32_t>{3});
  stream s;
  EXPECT_THROW(wide_layers.step(0, one.data(), 1, s.s, step_kernel::warp), wisp::logic_error);
  wide_layers.step(0, one.data(), 1, s.s);  // automatic: the block step
  EXPECT_EQ(wide_layers.read_info(0, s.s).calls, 1u);
}

// The lfu_history step on the device equals the host step (itself checked against
// pager<lfu_history> in pager_step_lfu_test.cpp), in both forms, on ESFT-shaped routing.
TEST(DevicePager, LfuHistoryStepEqualsTheHostStep) {
  WISP_SKIP_WITHOUT_GPU();
  using wisp::cuda::step_kernel;
  using wisp::cuda::step_policy;
  const auto esft_like = wisp::make_synthetic_trace(wisp::synthetic_preset("default"), 160,
                                                    wisp::default_synthetic_seed);
  check_device_steps(esft_like, 8, 1, step_kernel::warp, step_policy::lfu_history);
  check_device_steps(esft_like, 16, 1, step_kernel::block, step_policy::lfu_history);
  check_device_steps(esft_like, 16, 4, step_kernel::automatic, step_policy::lfu_history);
  check_device_steps(esft_like, 32, 1, step_kernel::automatic, step_policy::lfu_history, true);
  auto qwen = wisp::synthetic_preset("qwen3-30b-a3b");
  qwen.layers = 3;
  const auto wide = wisp::make_synthetic_trace(qwen, 200, 3);
  check_device_steps(wide, 32, 4, step_kernel::warp, step_policy::lfu_history);
  check_device_steps(wide, 48, 8, step_kernel::automatic, step_policy::lfu_history);
  // A state of another policy is refused.
  wisp::cuda::device_pager lru({.layers = 1, .experts = 8, .capacity = 2});
  const wisp::cuda::host_pager_state by_count(
      {.layers = 1, .experts = 8, .capacity = 2, .policy = step_policy::lfu_history});
  EXPECT_THROW(lru.load(by_count), wisp::logic_error);
}

TEST(DevicePager, CopyKernelFillsTheSlotsFromPinnedMasters) {
  WISP_SKIP_WITHOUT_GPU();
  const auto t = wisp::make_synthetic_trace(wisp::synthetic_preset("default"), 150,
                                            wisp::default_synthetic_seed);
  const std::int32_t layers = 3;
  const std::int32_t experts = t.shape().experts;
  const std::int32_t capacity = 8;
  // Bytes and 16-byte chunks, rows within one tile of the kernel (256 threads x 8 chunks) and of
  // several, the last one partial.
  for (const std::size_t row :
       {std::size_t{200}, std::size_t{256}, std::size_t{70001}, std::size_t{98320}}) {
    wisp::cuda::device_pager device({.layers = layers, .experts = experts, .capacity = capacity});
    wisp::cuda::host_pager_state host({.layers = layers, .experts = experts, .capacity = capacity});
    std::vector<std::unique_ptr<wisp::cuda::pinned_host_store>> masters;
    std::vector<std::unique_ptr<device_array<std::byte>>> slots;
    for (std::int32_t l = 0; l < layers; ++l) {
      masters.push_back(std::make_unique<wisp::cuda::pinned_host_store>(
          experts, wisp::expert_row_layout({row}, 16)));
      fill(*masters.back(), static_cast<std::uint32_t>(l));
      slots.push_back(std::make_unique<device_array<std::byte>>(
          capacity * masters.back()->layout().row_bytes()));
    }
    stream s;
    for (std::size_t step = 0; step < t.steps(); ++step) {
      for (std::int32_t l = 0; l < layers; ++l) {
        std::vector<std::int32_t> call;
        for (std::int32_t j = 0; j < t.shape().top_k; ++j) {
          call.push_back(t.expert(step, l, j));
        }
        const device_array<std::int32_t> d_call(call);
        const std::size_t stride = masters[l]->layout().row_bytes();
        device.step(l, d_call.data(), static_cast<std::int32_t>(call.size()), s.s);
        device.copy(l, masters[l]->device_view(),
                    {slots[l]->data(), static_cast<std::size_t>(capacity), stride}, row, s.s);
        WISP_CUDA_TRY(cudaStreamSynchronize(s.s));
        (void)host.step(l, std::span<const std::int32_t>(call));
        const std::vector<std::byte> got = slots[l]->download();
        for (const std::int32_t e : host.shown(l)) {
          const std::int32_t slot = host.map(l)[static_cast<std::size_t>(e)];
          ASSERT_TRUE(std::equal(got.begin() + slot * stride, got.begin() + slot * stride + row,
                                 masters[l]->row(e).begin()))
              << "row " << row << " step " << step << " layer " << l << " expert " << e;
        }
      }
    }
  }
}

}  // namespace
