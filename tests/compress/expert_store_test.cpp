// SPDX-License-Identifier: Apache-2.0
// The compressed expert store against the pager's plain host store: the same masters, the same
// copy plans from a real pager, byte-identical slots for every F/C mix, decoding on the caller
// (the default executor) or on thread pools of 1 to 3 threads.
#include "support.hpp"
#include "support/enum_names.hpp"
#include "support/expect_error.hpp"

#include <wisp/cache/lru.hpp>
#include <wisp/compress/expert_store.hpp>
#include <wisp/core/executor.hpp>
#include <wisp/pager/host_expert_store.hpp>
#include <wisp/pager/pager.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using wisp::compressed_expert_store;
using wisp::expert_state;

constexpr std::int32_t experts = 12;
constexpr std::int32_t slots = 4;
const std::vector<std::uint64_t> tensors = {3001, 777, 1};  // odd sizes, one of a single element

std::vector<wisp::bf16> master(std::int32_t e) {
  std::uint64_t n = 0;
  for (const std::uint64_t t : tensors) {
    n += t;
  }
  return wisp::test::gaussian_bf16(n, 0.01f * static_cast<float>(1 + e), 100 + e);
}

TEST(ExpertStore, ServesPagerPlansExactlyLikeThePlainStore) {
  for (const std::uint32_t threads : {0u, 1u, 2u, 3u}) {
    // 0: decode on the calling thread (the default); else on a pool of that many threads.
    const auto pool = threads == 0 ? nullptr : std::make_unique<wisp::thread_pool>(threads);
    for (const wisp::any_coder& coder : wisp::test::all_coders()) {
      compressed_expert_store store(
          {.experts = experts, .tensor_elements = tensors, .e_chunks = 5}, coder,
          wisp::test::all_decoders(),
          pool ? wisp::any_executor(pool->executor()) : wisp::any_executor());
      const std::size_t n = store.elements_per_expert();
      wisp::host_expert_store plain(experts, slots, 2 * n);  // the oracle: memcpy of masters
      for (std::int32_t e = 0; e < experts; ++e) {
        const std::vector<wisp::bf16> m = master(e);
        store.set_expert(e, m, e % 3 == 0 ? expert_state::full : expert_state::compressed);
        std::memcpy(plain.master(e).data(), m.data(), 2 * n);
      }
      wisp::pager<wisp::lru> pager(
          {.layers = 1, .experts = experts, .top_k = 2, .capacity = slots});
      std::vector<wisp::bf16> slot_buffer(slots * n);
      std::mt19937_64 rng(threads);
      for (int step = 0; step < 30; ++step) {
        std::vector<std::int32_t> ids;
        while (ids.size() < 2) {
          const auto id = static_cast<std::int32_t>(rng() % experts);
          if (ids.empty() || ids[0] != id) {
            ids.push_back(id);
          }
        }
        const wisp::prepare_result r = pager.prepare(0, std::span<const std::int32_t>(ids), 1, 2);
        const wisp::fetch_stats s = store.apply(r.copy_plan, slot_buffer);
        plain.apply(r.copy_plan);
        ASSERT_EQ(std::memcmp(slot_buffer.data(), plain.slot(0).data(), 2 * n * slots), 0)
            << coder.label() << " threads " << threads << " step " << step;
        std::uint64_t link = 0;
        std::int32_t full = 0;
        for (const wisp::copy_op& op : r.copy_plan) {
          link += store.link_bytes(op.expert);
          full += store.state(op.expert) == expert_state::full ? 1 : 0;
        }
        EXPECT_EQ(s.link_bytes, link);
        EXPECT_EQ(s.raw_bytes, 2 * n * r.copy_plan.size());
        EXPECT_EQ(s.full_copies, full);
        EXPECT_EQ(s.decoded + s.full_copies, static_cast<std::int32_t>(r.copy_plan.size()));
        EXPECT_GE(s.decode_seconds, 0.0);
      }
    }
  }
}

TEST(ExpertStore, StatesAndSizes) {
  wisp::thread_pool pool(1);
  compressed_expert_store store({.experts = 3, .tensor_elements = {40000, 30000}},
                                wisp::huffman_coder{}, wisp::core_coders(), pool.executor());
  const std::vector<wisp::bf16> m = wisp::test::gaussian_bf16(70000, 0.02f, 1);
  store.set_expert(1, m);
  EXPECT_EQ(store.state(1), expert_state::compressed);
  const std::uint64_t c = store.link_bytes(1);
  EXPECT_EQ(c, store.tensor(1, 0).payload_bytes() + store.tensor(1, 1).payload_bytes());
  EXPECT_LT(c, store.raw_bytes_per_expert() * 3 / 4);  // ~2.6 exponent bits: about 2/3
  const std::uint64_t host = store.host_bytes();
  store.set_state(1, expert_state::full);
  EXPECT_EQ(store.link_bytes(1), store.raw_bytes_per_expert());
  EXPECT_EQ(store.host_bytes(), host + store.raw_bytes_per_expert());
  std::vector<wisp::bf16> out(70000);
  store.decode(1, out);
  EXPECT_EQ(out, m);
  store.set_state(1, expert_state::compressed);
  EXPECT_EQ(store.link_bytes(1), c);
  EXPECT_EQ(store.host_bytes(), host);
}

TEST(ExpertStore, BadArgumentsChangeNothing) {
  wisp::thread_pool pool(2);
  compressed_expert_store store({.experts = 2, .tensor_elements = {100}}, wisp::huffman_coder{},
                                wisp::core_coders(), pool.executor());
  std::vector<wisp::bf16> slot_buffer(300, wisp::bf16{7});
  const std::vector<wisp::copy_op> bad_slot = {{0, 0}, {1, 3}};
  wisp::test::expect_error([&] { (void)store.apply(bad_slot, slot_buffer); }, "slot 3", "[0, 3)");
  EXPECT_EQ(slot_buffer, std::vector<wisp::bf16>(300, wisp::bf16{7}));
  const std::vector<wisp::copy_op> bad_expert = {{2, 0}};
  wisp::test::expect_error([&] { (void)store.apply(bad_expert, slot_buffer); }, "expert 2");
  std::vector<wisp::bf16> ragged(150);
  wisp::test::expect_error([&] { (void)store.apply({}, ragged); }, "150 values");
  wisp::test::expect_error([&] { store.set_expert(0, ragged); }, "150 values");
  wisp::test::expect_error(
      [] { compressed_expert_store({.experts = 0, .tensor_elements = {1}}, wisp::raw_coder{}); },
      "experts 0");
}

TEST(ExpertStore, DecoderErrorsReachTheCaller) {
  // Records written with Huffman, decoders without it: every decode task fails.
  wisp::coder_set raw_only;
  raw_only.add(wisp::raw_coder{});
  wisp::thread_pool pool(2);
  compressed_expert_store store({.experts = 2, .tensor_elements = {50000}}, wisp::huffman_coder{},
                                raw_only, pool.executor());
  store.set_expert(1, wisp::test::gaussian_bf16(50000, 0.02f, 2));
  std::vector<wisp::bf16> slot_buffer(50000);
  const std::vector<wisp::copy_op> plan = {{1, 0}};
  wisp::test::expect_error<wisp::format_error>([&] { (void)store.apply(plan, slot_buffer); },
                                               "huffman", "not available");
  // The pool still works afterwards.
  store.set_expert(0, std::vector<wisp::bf16>(50000, wisp::bf16{3}), expert_state::full);
  const std::vector<wisp::copy_op> full = {{0, 0}};
  EXPECT_EQ(store.apply(full, slot_buffer).full_copies, 1);
  EXPECT_EQ(slot_buffer, std::vector<wisp::bf16>(50000, wisp::bf16{3}));
}

TEST(CompressNames, CoderIdsAndExpertStates) {
  wisp::test::expect_names<wisp::coder_id>({{wisp::coder_id::raw, "raw"},
                                            {wisp::coder_id::huffman, "huffman"},
                                            {wisp::coder_id::zstd, "zstd"},
                                            {wisp::coder_id::lz4, "lz4"}});
  EXPECT_EQ(wisp::to_string(static_cast<wisp::coder_id>(200)), "unknown");  // a byte from a file
  EXPECT_EQ(wisp::from_string<wisp::coder_id>("lz4hc"), std::nullopt);      // a label, not an id
  wisp::test::expect_names<expert_state>(
      {{expert_state::compressed, "compressed"}, {expert_state::full, "full"}});
  // A coder's static name is the format it writes; its label adds its settings.
  EXPECT_EQ(wisp::huffman_coder::name, wisp::to_string(wisp::huffman_coder{}.id()));
  EXPECT_EQ(wisp::raw_coder::name, wisp::to_string(wisp::raw_coder{}.id()));
  EXPECT_EQ(wisp::huffman_coder{}.label(), "huffman");
  EXPECT_EQ(wisp::huffman_coder{.block = 7}.label(), "huffman-b7");
}

}  // namespace
