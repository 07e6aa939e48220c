// SPDX-License-Identifier: Apache-2.0
// A two-layer toy MoE model captured in ONE CUDA graph, paging included (router, device pager
// step, copy kernel from pinned masters, reference fused MoE, per layer), replayed 100 times with
// new inputs (so new routing each time), against the host engine's computation of the same model
// (router rule, pager<lru>, host_expert_store, reference_fused_moe): routing, maps, hits and
// misses, and the output, bit for bit. Skipped without a GPU.
#include "device_array.cuh"
#include "device_guard.hpp"
#include "toy_router.hpp"

#include <wisp/cache/lru.hpp>
#include <wisp/cuda/device_pager.cuh>
#include <wisp/cuda/kernels.cuh>
#include <wisp/cuda/pinned_host_store.cuh>
#include <wisp/kernel/bf16.hpp>
#include <wisp/kernel/reference_moe.hpp>
#include <wisp/pager/host_expert_store.hpp>
#include <wisp/pager/pager.hpp>
#include <wisp/transfer/row_layout.hpp>

#include <cuda_runtime_api.h>

#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <vector>

namespace {

using wisp::bf16;
using wisp::cuda::testing::device_array;
using wisp::cuda::testing::download;

constexpr std::int32_t layers = 2;
constexpr std::int32_t experts = 32;
constexpr std::int32_t top_k = 4;
constexpr std::int32_t tokens = 2;
constexpr std::int32_t capacity = 8;  // >= tokens * top_k: a call always fits
constexpr std::int32_t hidden_size = 64;
constexpr wisp::swiglu_shape shape{.hidden = hidden_size, .intermediate = 32};
constexpr std::size_t hidden_values = static_cast<std::size_t>(tokens) * hidden_size;
constexpr std::size_t routed = static_cast<std::size_t>(tokens) * top_k;

// One thread per token: the router rule on the token's bf16 input.
__global__ void toy_router(const bf16* router, const bf16* hidden, std::int32_t* ids,
                           float* weights) {
  const auto t = static_cast<std::int32_t>(threadIdx.x);
  if (t >= tokens) {
    return;
  }
  float x[hidden_size];
  for (std::int32_t i = 0; i < hidden_size; ++i) {
    x[i] = wisp::to_float(hidden[t * hidden_size + i]);
  }
  wisp::cuda::testing::route_token(router, x, experts, hidden_size, top_k, ids + t * top_k,
                                   weights + t * top_k);
}

struct toy_weights {
  std::array<std::vector<bf16>, layers> router;                 // [E x H] per layer
  std::array<std::vector<std::byte>, layers> experts_of_layer;  // [E x row] per layer

  toy_weights() {
    std::mt19937 rng(17);
    std::uniform_real_distribution<float> w(-0.3f, 0.3f);
    for (std::int32_t l = 0; l < layers; ++l) {
      for (std::int32_t i = 0; i < experts * shape.hidden; ++i) {
        router[l].push_back(wisp::to_bf16(w(rng)));
      }
      experts_of_layer[l].resize(shape.row_bytes() * experts);
      for (std::size_t i = 0; i + 1 < experts_of_layer[l].size(); i += 2) {
        const bf16 v = wisp::to_bf16(w(rng));
        std::memcpy(experts_of_layer[l].data() + i, &v, sizeof v);
      }
    }
  }
};

// What one forward pass produced, per layer and at the end.
struct forward {
  std::array<std::vector<std::int32_t>, layers> ids;
  std::array<std::vector<float>, layers> weights;
  std::array<std::vector<std::int32_t>, layers> map;
  std::array<std::int32_t, layers> hits{};
  std::array<std::int32_t, layers> misses{};
  std::vector<bf16> out;
};

// The host engine: router rule, pager<lru>, host_expert_store and reference_fused_moe.
class host_engine {
 public:
  explicit host_engine(const toy_weights& w)
      : weights_(w),
        pager_({.layers = layers, .experts = experts, .top_k = top_k, .capacity = capacity}),
        moe_(shape) {
    for (std::int32_t l = 0; l < layers; ++l) {
      stores_.emplace_back(experts, capacity, shape.row_bytes());
      for (std::int32_t e = 0; e < experts; ++e) {
        std::memcpy(stores_.back().master(e).data(),
                    w.experts_of_layer[l].data() + e * shape.row_bytes(), shape.row_bytes());
      }
    }
  }

  forward run(const std::vector<bf16>& input) {
    forward f;
    std::vector<bf16> x = input;
    pager_.begin_step();
    for (std::int32_t l = 0; l < layers; ++l) {
      f.ids[l].resize(routed);
      f.weights[l].resize(routed);
      for (std::int32_t t = 0; t < tokens; ++t) {
        float xf[hidden_size];
        for (std::int32_t i = 0; i < shape.hidden; ++i) {
          xf[i] = wisp::to_float(x[static_cast<std::size_t>(t * shape.hidden + i)]);
        }
        wisp::cuda::testing::route_token(weights_.router[l].data(), xf, experts, shape.hidden,
                                         top_k, f.ids[l].data() + t * top_k,
                                         f.weights[l].data() + t * top_k);
      }
      const wisp::prepare_result r = pager_.prepare(l, f.ids[l], tokens, top_k);
      stores_[l].apply(r.copy_plan);
      f.map[l].assign(r.expert_map.begin(), r.expert_map.end());
      f.hits[l] = r.hits;
      f.misses[l] = r.misses;
      std::vector<bf16> out(hidden_values);
      const wisp::expert_tensor_view slots{stores_[l].slot(0).data(),
                                           static_cast<std::size_t>(capacity), shape.row_bytes()};
      moe_(wisp::basic_fused_moe_args<bf16>{x, f.ids[l], f.weights[l], slots, r.expert_map, out,
                                            tokens, top_k, shape.hidden});
      x = out;
    }
    f.out = x;
    return f;
  }

 private:
  const toy_weights& weights_;
  wisp::pager<wisp::lru> pager_;
  std::vector<wisp::host_expert_store> stores_;
  wisp::reference_fused_moe moe_;
};

TEST(GraphCapture, TwoLayerToyModelWithTheDevicePagerReplaysLikeTheHostEngine) {
  WISP_SKIP_WITHOUT_GPU();
  const toy_weights w;
  host_engine host(w);

  // Device side: weights, pinned masters, slots, activations, routing, the pager.
  cudaStream_t s = nullptr;
  WISP_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const wisp::expert_row_layout layout({shape.row_bytes()}, 16);
  std::vector<std::unique_ptr<device_array<bf16>>> router;
  std::vector<std::unique_ptr<wisp::cuda::pinned_host_store>> masters;
  std::vector<std::unique_ptr<device_array<std::byte>>> slots;
  std::vector<std::unique_ptr<device_array<std::int32_t>>> ids;
  std::vector<std::unique_ptr<device_array<float>>> gates;
  std::vector<std::unique_ptr<device_array<bf16>>> hidden;  // layer inputs, then the output
  for (std::int32_t l = 0; l < layers; ++l) {
    router.push_back(std::make_unique<device_array<bf16>>(w.router[l]));
    masters.push_back(std::make_unique<wisp::cuda::pinned_host_store>(experts, layout));
    for (std::int32_t e = 0; e < experts; ++e) {
      std::memcpy(masters.back()->row(e).data(),
                  w.experts_of_layer[l].data() + e * shape.row_bytes(), shape.row_bytes());
    }
    slots.push_back(std::make_unique<device_array<std::byte>>(capacity * layout.row_bytes()));
    ids.push_back(std::make_unique<device_array<std::int32_t>>(routed));
    gates.push_back(std::make_unique<device_array<float>>(routed));
  }
  for (std::int32_t l = 0; l <= layers; ++l) {
    hidden.push_back(std::make_unique<device_array<bf16>>(hidden_values));
  }
  wisp::cuda::device_pager pager({.layers = layers, .experts = experts, .capacity = capacity});
  const wisp::cuda::reference_fused_moe moe(shape, s);

  // One graph: every layer's router, step, copy kernel and fused MoE.
  cudaGraph_t graph = nullptr;
  WISP_CUDA_TRY(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (std::int32_t l = 0; l < layers; ++l) {
    const wisp::expert_tensor_view slot_view{slots[l]->data(), static_cast<std::size_t>(capacity),
                                             layout.row_bytes()};
    toy_router<<<1, 32, 0, s>>>(router[l]->data(), hidden[l]->data(), ids[l]->data(),
                                gates[l]->data());
    pager.step(l, ids[l]->data(), static_cast<std::int32_t>(routed), s);
    pager.copy(l, masters[l]->device_view(), slot_view, shape.row_bytes(), s);
    moe(wisp::basic_fused_moe_args<bf16>{hidden[l]->span(), ids[l]->span(), gates[l]->span(),
                                         slot_view,
                                         std::span<const std::int32_t>(pager.map(l), experts),
                                         hidden[l + 1]->span(), tokens, top_k, shape.hidden});
  }
  WISP_CUDA_TRY(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec = nullptr;
  WISP_CUDA_TRY(cudaGraphInstantiate(&exec, graph, 0));

  std::mt19937 rng(23);
  std::uniform_real_distribution<float> x(-2.0f, 2.0f);
  std::int32_t total_misses = 0;
  for (int replay = 0; replay < 100; ++replay) {
    std::vector<bf16> input(hidden_values);
    for (bf16& v : input) {
      v = wisp::to_bf16(x(rng));
    }
    hidden[0]->upload(input);
    WISP_CUDA_TRY(cudaGraphLaunch(exec, s));
    WISP_CUDA_TRY(cudaStreamSynchronize(s));
    const forward want = host.run(input);
    for (std::int32_t l = 0; l < layers; ++l) {
      ASSERT_EQ(ids[l]->download(), want.ids[l]) << "replay " << replay << " layer " << l;
      const std::vector<float> g = gates[l]->download();
      ASSERT_EQ(std::memcmp(g.data(), want.weights[l].data(), g.size() * sizeof(float)), 0)
          << "replay " << replay << " layer " << l;
      ASSERT_EQ(download(pager.map(l), experts), want.map[l]) << "replay " << replay;
      const wisp::cuda::pager_layer_info info = pager.read_info(l, s);
      ASSERT_EQ(info.status, wisp::cuda::pager_step_status::ok);
      ASSERT_EQ(info.hits, want.hits[l]) << "replay " << replay << " layer " << l;
      ASSERT_EQ(info.copies, want.misses[l]) << "replay " << replay << " layer " << l;
      total_misses += info.copies;
    }
    const std::vector<bf16> out = hidden[layers]->download();
    ASSERT_EQ(out, want.out) << "replay " << replay;
  }
  EXPECT_GT(total_misses, 100) << "the replays barely paged: the test would not see a stale slot";
  (void)cudaGraphExecDestroy(exec);
  (void)cudaGraphDestroy(graph);
  (void)cudaStreamDestroy(s);
}

}  // namespace
