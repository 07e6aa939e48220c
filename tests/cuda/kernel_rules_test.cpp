// SPDX-License-Identifier: Apache-2.0
// The host-runnable logic of the CUDA kernels on real routing (the ESFT trace, or a synthetic
// stand-in without it), against the host library: reroute (+ remap) against reroute_table::apply
// and the pager's map; the fused-MoE block body (one thread, and 5 threads per group) against
// reference_fused_moe, bit for bit; the copy-list rule against host_expert_store.apply.
#include "host_thread_group.hpp"
#include "support/traces.hpp"

#include <wisp/cache/lru.hpp>
#include <wisp/cuda/copy_list.hpp>
#include <wisp/cuda/fused_moe_block.hpp>
#include <wisp/cuda/pager_step.hpp>
#include <wisp/cuda/reroute.hpp>
#include <wisp/kernel/bf16.hpp>
#include <wisp/kernel/reference_moe.hpp>
#include <wisp/pager/host_expert_store.hpp>
#include <wisp/pager/pager.hpp>
#include <wisp/pager/reroute_table.hpp>
#include <wisp/trace/esft.hpp>
#include <wisp/trace/routing_trace.hpp>
#include <wisp/trace/synthetic.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace {

using wisp::bf16;

// The real trace when present, else the synthetic stand-in of the same shape.
const wisp::routing_trace& routing() {
  static const wisp::routing_trace trace = [] {
    if (auto esft = wisp::test::esft_trace()) {
      return std::move(*esft);
    }
    return wisp::make_synthetic_trace(wisp::synthetic_preset("default"), 2000,
                                      wisp::default_synthetic_seed);
  }();
  return trace;
}

// Ids (and gate weights: the trace's, or drawn) of `tokens` consecutive steps of one layer.
struct batch {
  std::vector<std::int32_t> ids;
  std::vector<float> weights;
};
batch layer_batch(std::size_t step, std::int32_t tokens, std::int32_t layer, std::mt19937& rng) {
  const wisp::routing_trace& t = routing();
  std::uniform_real_distribution<float> draw(0.0f, 0.3f);
  batch b;
  for (std::size_t s = step; s < step + static_cast<std::size_t>(tokens); ++s) {
    for (std::int32_t j = 0; j < t.shape().top_k; ++j) {
      b.ids.push_back(t.expert(s, layer, j));
      b.weights.push_back(t.has_weights() ? t.weight(s, layer, j) : draw(rng));
    }
  }
  return b;
}

TEST(RerouteRule, EqualsRerouteTableAndThePagersMapOnRealRouting) {
  const wisp::routing_trace& t = routing();
  const std::int32_t experts = t.shape().experts;
  const std::int32_t k = t.shape().top_k;
  const std::int32_t adapters = 3;
  std::mt19937 rng(5);
  // Each adapter fine-tunes 10 random experts into rows [64, 94).
  wisp::reroute_table table(adapters, experts, experts + adapters * 10);
  for (std::int32_t a = 0; a < adapters; ++a) {
    for (std::int32_t i = 0; i < 10; ++i) {
      table.assign(a, static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(experts)),
                   experts + a * 10 + i);
    }
  }
  wisp::pager<wisp::lru> pager({.layers = 1, .experts = table.rows(), .top_k = k, .capacity = 48});
  const wisp::cuda::reroute_to_row to_row{table.table().data(), adapters, experts};
  const std::int32_t tokens = 4;
  for (std::size_t s = 0; s + tokens <= t.steps() && s < 1200; s += tokens) {
    const batch b = layer_batch(s, tokens, static_cast<std::int32_t>(s % 26), rng);
    std::vector<std::int32_t> adapter_ids;
    for (std::int32_t i = 0; i < tokens; ++i) {
      adapter_ids.push_back(static_cast<std::int32_t>(rng() % (adapters + 1)) - 1);
    }
    std::vector<std::int32_t> want(b.ids.size());
    table.apply(b.ids, tokens, k, adapter_ids, want);
    std::vector<std::int32_t> rows(b.ids.size(), -9);
    wisp::cuda::reroute_ids(to_row, b.ids.data(), b.ids.size(), k, adapter_ids.data(), rows.data(),
                            0, 1);
    ASSERT_EQ(rows, want) << "step " << s;
    // Fused with the remap through the map of the pager that pages those rows.
    const wisp::prepare_result r = pager.prepare(0, want, tokens, k);
    const wisp::cuda::reroute_to_slot to_slot{
        to_row, {r.expert_map.data(), static_cast<std::int32_t>(r.expert_map.size())}};
    std::vector<std::int32_t> slots(b.ids.size(), -9);
    wisp::cuda::reroute_ids(to_slot, b.ids.data(), b.ids.size(), k, adapter_ids.data(),
                            slots.data(), 0, 1);
    for (std::size_t i = 0; i < slots.size(); ++i) {
      ASSERT_EQ(slots[i], r.expert_map[static_cast<std::size_t>(want[i])]) << "step " << s;
    }
  }
  // Bad ids and adapters are flagged, never looked up.
  EXPECT_EQ(to_row(-1, experts), wisp::cuda::invalid_expert);
  EXPECT_EQ(to_row(adapters, 0), wisp::cuda::invalid_expert);
  EXPECT_EQ(to_row(-2, 0), wisp::cuda::invalid_expert);
  EXPECT_EQ(to_row(0, std::int64_t{-1}), wisp::cuda::invalid_expert);
}

// SwiGLU bf16 masters of small experts, and a pager that places them in slots.
struct moe_setup {
  wisp::swiglu_shape shape{.hidden = 32, .intermediate = 16};
  std::int32_t capacity = 32;
  wisp::host_expert_store store;

  moe_setup() : store(routing().shape().experts, capacity, shape.row_bytes()) {
    std::mt19937 rng(2);
    std::uniform_real_distribution<float> w(-0.4f, 0.4f);
    for (std::int32_t e = 0; e < store.experts(); ++e) {
      std::span<std::byte> row = store.master(e);
      for (std::size_t i = 0; i + 1 < row.size(); i += 2) {
        const bf16 v = wisp::to_bf16(w(rng));
        std::memcpy(row.data() + i, &v, sizeof v);
      }
    }
  }
  [[nodiscard]] wisp::expert_tensor_view slots() {
    return {store.slot(0).data(), static_cast<std::size_t>(store.slots()), shape.row_bytes()};
  }
};

TEST(FusedMoeBlock, EqualsReferenceFusedMoeBitForBitOnRealRouting) {
  moe_setup m;
  const wisp::moe_shape ts = routing().shape();
  wisp::pager<wisp::lru> pager(
      {.layers = ts.layers, .experts = ts.experts, .top_k = ts.top_k, .capacity = m.capacity});
  wisp::reference_fused_moe reference(m.shape);
  std::vector<float> scratch(wisp::cuda::fused_moe_scratch_floats(m.shape));
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> x(-1.0f, 1.0f);
  const std::int32_t tokens = 3;
  std::size_t checked = 0;
  for (std::size_t s = 0; s + tokens <= routing().steps() && s < 600; s += tokens) {
    const auto layer =
        static_cast<std::int32_t>((s / tokens) % static_cast<std::size_t>(ts.layers));
    const batch b = layer_batch(s, tokens, layer, rng);
    const wisp::prepare_result r = pager.prepare(layer, b.ids, tokens, ts.top_k);
    m.store.apply(r.copy_plan);
    std::vector<bf16> hidden(static_cast<std::size_t>(tokens * m.shape.hidden));
    for (bf16& v : hidden) {
      v = wisp::to_bf16(x(rng));
    }
    std::vector<bf16> want(hidden.size());
    std::vector<bf16> got(hidden.size(), bf16{0xffff});
    const wisp::basic_fused_moe_args<bf16> want_args{
        hidden, b.ids, b.weights, m.slots(), r.expert_map, want, tokens, ts.top_k, m.shape.hidden};
    reference(want_args);
    wisp::basic_fused_moe_args<bf16> got_args = want_args;
    got_args.out = got;
    const auto p = wisp::cuda::make_fused_moe_params(got_args, m.shape);
    for (std::int32_t t = 0; t < tokens; ++t) {
      wisp::cuda::fused_moe_token(wisp::cuda::serial_group{}, p, t, scratch.data());
    }
    ASSERT_EQ(got, want) << "step " << s;
    if (s % 60 == 0) {  // and with 5 ranks per group, as a block runs it
      std::fill(got.begin(), got.end(), bf16{0xffff});
      wisp::cuda::testing::run_on_threads(5, [&](const auto& g) {
        for (std::int32_t t = 0; t < tokens; ++t) {
          wisp::cuda::fused_moe_token(g, p, t, scratch.data());
          g.sync();
        }
      });
      ASSERT_EQ(got, want) << "step " << s << ", 5 threads";
      ++checked;
    }
  }
  EXPECT_GT(checked, 5u);
}

TEST(FusedMoeBlock, SkipsPositionsOutsideTheMapInsteadOfReadingThem) {
  moe_setup m;
  std::vector<std::int32_t> map(static_cast<std::size_t>(m.store.experts()), -1);
  map[3] = 0;
  m.store.apply(std::vector<wisp::copy_op>{{3, 0}});
  const std::vector<bf16> hidden(static_cast<std::size_t>(m.shape.hidden), wisp::to_bf16(0.5f));
  const std::vector<std::int64_t> ids{3, 64, -1, 3};  // two positions outside the map
  const std::vector<float> weights{0.25f, 9.0f, 9.0f, 0.5f};
  std::vector<bf16> got(hidden.size());
  std::vector<bf16> want(hidden.size());
  const auto p = wisp::cuda::make_fused_moe_params(
      wisp::basic_fused_moe_args<bf16, std::int64_t>{hidden, ids, weights, m.slots(), map, got, 1,
                                                     4, m.shape.hidden},
      m.shape);
  std::vector<float> scratch(wisp::cuda::fused_moe_scratch_floats(m.shape));
  wisp::cuda::fused_moe_token(wisp::cuda::serial_group{}, p, 0, scratch.data());
  // The reference rejects such ids; the same call without them is the expected output.
  const std::vector<std::int64_t> valid{3, 3};
  const std::vector<float> valid_weights{0.25f, 0.5f};
  wisp::reference_fused_moe reference(m.shape);
  reference(wisp::basic_fused_moe_args<bf16, std::int64_t>{hidden, valid, valid_weights, m.slots(),
                                                           map, want, 1, 2, m.shape.hidden});
  EXPECT_EQ(got, want);
}

TEST(CopyListRule, CopiesWhatHostExpertStoreApplies) {
  const wisp::moe_shape ts = routing().shape();
  // 40- and 403-byte rows take the byte path, 48- and 400-byte rows the 16-byte path (400 bytes:
  // a row of several tiles when the groups have few lanes).
  for (const std::size_t row_bytes : {40u, 48u, 400u, 403u}) {
    const std::int32_t capacity = 8;
    wisp::cuda::host_pager_state device(
        {.layers = ts.layers, .experts = ts.experts, .capacity = capacity});
    std::vector<wisp::host_expert_store> want;
    std::vector<wisp::host_expert_store> got;
    for (std::int32_t l = 0; l < ts.layers; ++l) {
      want.emplace_back(ts.experts, capacity, row_bytes);
      want.back().fill_pattern(static_cast<std::uint32_t>(l));
      got.emplace_back(ts.experts, capacity, row_bytes);
      got.back().fill_pattern(static_cast<std::uint32_t>(l));
    }
    for (std::size_t s = 0; s < 300; ++s) {
      for (std::int32_t l = 0; l < ts.layers; ++l) {
        std::vector<std::int32_t> ids;
        for (std::int32_t j = 0; j < ts.top_k; ++j) {
          ids.push_back(routing().expert(s, l, j));
        }
        (void)device.step(l, std::span<const std::int32_t>(ids));
        const std::span<const wisp::copy_op> list = device.copies(l);
        auto& g = got[static_cast<std::size_t>(l)];
        const wisp::expert_tensor_view masters{g.master(0).data(),
                                               static_cast<std::size_t>(ts.experts), row_bytes};
        const wisp::expert_tensor_view slots{g.slot(0).data(), static_cast<std::size_t>(capacity),
                                             row_bytes};
        // Any split of the work copies the same bytes.
        const std::size_t groups = 1 + s % 7;
        const std::size_t lanes = 1 + s % 3;
        for (std::size_t g = 0; g < groups; ++g) {
          for (std::size_t lane = 0; lane < lanes; ++lane) {
            wisp::cuda::copy_listed_rows(list.data(), static_cast<std::int32_t>(list.size()),
                                         masters, slots, row_bytes, g, groups, lane, lanes);
          }
        }
        want[static_cast<std::size_t>(l)].apply(list);
        for (const std::int32_t e : device.shown(l)) {
          ASSERT_TRUE(g.slot_holds(device.map(l)[static_cast<std::size_t>(e)], e));
        }
      }
    }
    for (std::int32_t l = 0; l < ts.layers; ++l) {
      for (std::int32_t slot = 0; slot < capacity; ++slot) {
        const auto a = got[static_cast<std::size_t>(l)].slot(slot);
        const auto b = want[static_cast<std::size_t>(l)].slot(slot);
        ASSERT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end()))
            << "row bytes " << row_bytes << " layer " << l << " slot " << slot;
      }
    }
  }
}

TEST(CopyListRule, EqualsRowByRowMemcpyAndSkipsBadEntries) {
  // The textbook copy: memcpy of each valid entry's row; the rest of every slot row (and its
  // stride padding) untouched. Rows of 0 to 4099 bytes (byte and 16-byte paths, rows of one and
  // of many tiles, partial tiles), splits from one lane to 64 groups of 256, and lists with
  // entries outside either tensor.
  std::mt19937 rng(3);
  for (const std::size_t row_bytes : {0u, 1u, 15u, 16u, 48u, 1000u, 4112u, 4099u}) {
    for (const auto& [groups, lanes] :
         std::vector<std::pair<std::size_t, std::size_t>>{{1, 1}, {3, 5}, {7, 32}, {64, 256}}) {
      constexpr std::size_t expert_rows = 10;
      constexpr std::size_t slot_rows = 6;
      const std::size_t stride = (row_bytes + 16 + 15) / 16 * 16;  // padding past each row
      std::vector<std::byte> master_bytes(expert_rows * stride);
      for (std::byte& b : master_bytes) {
        b = static_cast<std::byte>(rng());
      }
      std::vector<std::byte> slot_bytes(slot_rows * stride);
      for (std::byte& b : slot_bytes) {
        b = static_cast<std::byte>(rng());
      }
      // Distinct slots (a step never lists one twice), and three bad entries.
      std::vector<wisp::copy_op> list = {{3, 5}, {-1, 0}, {9, 1}, {10, 2}, {0, 4}, {2, 6}, {7, 3}};
      std::vector<std::byte> want = slot_bytes;
      for (const wisp::copy_op& op : list) {
        if (op.expert >= 0 && op.expert < static_cast<std::int32_t>(expert_rows) && op.slot >= 0 &&
            op.slot < static_cast<std::int32_t>(slot_rows)) {
          std::memcpy(want.data() + static_cast<std::size_t>(op.slot) * stride,
                      master_bytes.data() + static_cast<std::size_t>(op.expert) * stride,
                      row_bytes);
        }
      }
      const wisp::expert_tensor_view masters{master_bytes.data(), expert_rows, stride};
      const wisp::expert_tensor_view slots{slot_bytes.data(), slot_rows, stride};
      for (std::size_t g = 0; g < groups; ++g) {
        for (std::size_t lane = 0; lane < lanes; ++lane) {
          wisp::cuda::copy_listed_rows(list.data(), static_cast<std::int32_t>(list.size()), masters,
                                       slots, row_bytes, g, groups, lane, lanes);
        }
      }
      ASSERT_EQ(slot_bytes, want) << "row bytes " << row_bytes << ", " << groups << " groups of "
                                  << lanes << " lanes";
      // A count of 0 or less copies nothing.
      for (const std::int32_t count : {0, -3}) {
        wisp::cuda::copy_listed_rows(list.data(), count, masters, {want.data(), slot_rows, stride},
                                     row_bytes, 0, 1, 0, 1);
      }
      ASSERT_EQ(slot_bytes, want);
    }
  }
}

TEST(CopyListRule, GroupsCoverEveryTileUpToTheResidentOnes) {
  using wisp::cuda::copy_groups;
  constexpr std::size_t tile = 256 * wisp::cuda::copy_unroll * 16;  // bytes per tile
  EXPECT_EQ(copy_groups(0, 0, 256, 1000), 1u);
  EXPECT_EQ(copy_groups(4, 0, 256, 1000), 1u);
  EXPECT_EQ(copy_groups(1, 1, 256, 1000), 1u);
  EXPECT_EQ(copy_groups(1, tile, 256, 1000), 1u);
  EXPECT_EQ(copy_groups(3, tile + 1, 256, 1000), 6u);
  EXPECT_EQ(copy_groups(32, 17 * tile, 256, 1056), 544u);
  EXPECT_EQ(copy_groups(32, 18 * tile, 256, 528), 528u);
  EXPECT_EQ(copy_groups(32, 18 * tile, 256, 0), 1u);
}

}  // namespace
