// SPDX-License-Identifier: Apache-2.0
// check_fused_moe_args: a well-formed argument block passes; each bad size is an error naming the
// sizes.
#include "support/expect_error.hpp"

#include <wisp/kernel/fused_moe.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace {

using wisp::check_fused_moe_args;
using wisp::fused_moe_args;
using wisp::test::expect_error;

struct buffers {
  // 2 tokens, top-3, hidden 4.
  std::vector<float> hidden = std::vector<float>(8);
  std::vector<std::int32_t> ids = std::vector<std::int32_t>(6);
  std::vector<float> weights = std::vector<float>(6);
  std::vector<std::int32_t> map = std::vector<std::int32_t>(4, -1);
  std::vector<float> out = std::vector<float>(8);

  [[nodiscard]] fused_moe_args args() {
    return {hidden, ids, weights, {}, map, out, 2, 3, 4};
  }
};

TEST(FusedMoeArgs, WellFormedBlockPasses) {
  buffers b;
  EXPECT_NO_THROW(check_fused_moe_args(b.args()));
  fused_moe_args empty = b.args();
  empty.tokens = 0;
  empty.hidden = empty.out = {};
  empty.topk_ids = {};
  empty.topk_weights = {};
  EXPECT_NO_THROW(check_fused_moe_args(empty));
}

TEST(FusedMoeArgs, EachBadSizeIsNamed) {
  buffers b;
  fused_moe_args a = b.args();
  a.tokens = -1;
  expect_error([&] { check_fused_moe_args(a); }, "fused_moe_args", "tokens must be >= 0, got -1");
  a = b.args();
  a.top_k = 0;
  expect_error([&] { check_fused_moe_args(a); }, "k must be >= 1, got 0");
  a = b.args();
  a.topk_ids = a.topk_ids.first(5);
  expect_error([&] { check_fused_moe_args(a); }, "topk_ids holds 5 ids but tokens * k = 2 * 3");
  a = b.args();
  a.topk_weights = a.topk_weights.first(5);
  expect_error([&] { check_fused_moe_args(a); }, "topk_weights holds 5 entries for 6 topk_ids");
  a = b.args();
  a.hidden_dim = 0;
  expect_error([&] { check_fused_moe_args(a); }, "hidden_dim must be >= 1, got 0");
  a = b.args();
  a.out = a.out.first(7);
  expect_error([&] { check_fused_moe_args(a); }, "hidden holds 8 and out 7 values",
               "tokens * hidden_dim = 8");
}

}  // namespace
