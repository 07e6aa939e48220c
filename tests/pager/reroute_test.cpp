// SPDX-License-Identifier: Apache-2.0
// reroute_table (ExpertWeave §4.1/§4.3): assignment rules, batched rerouting against an oracle
// built from an independent map, in-place use, errors leaving everything unchanged, and paging
// the rerouted rows.
#include "support/expect_error.hpp"

#include <wisp/cache/lru.hpp>
#include <wisp/pager/host_expert_store.hpp>
#include <wisp/pager/pager.hpp>
#include <wisp/pager/reroute_table.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace wisp {
namespace {

using test::expect_error;

TEST(reroute_table, starts_as_identity_and_follows_assignments) {
  reroute_table t(2, 64, 64 + 16);
  EXPECT_EQ(t.row(-1, 13), 13);
  EXPECT_EQ(t.row(1, 13), 13);
  t.assign(1, 13, 72);
  EXPECT_EQ(t.row(1, 13), 72);
  EXPECT_EQ(t.row(0, 13), 13);
  EXPECT_EQ(t.row(-1, 13), 13);
  EXPECT_EQ(t.table()[64 + 13], 72);
  t.assign(1, 13, 13);  // back to base releases row 72
  t.assign(0, 5, 72);
  EXPECT_EQ(t.row(0, 5), 72);
}

TEST(reroute_table, assignment_errors_name_the_values_and_change_nothing) {
  reroute_table t(2, 8, 12);
  t.assign(0, 3, 9);
  expect_error([&] { t.assign(2, 0, 8); }, "adapter 2 is outside [0, adapters = 2)");
  expect_error([&] { t.assign(0, 8, 8); }, "expert 8 is outside [0, experts = 8)");
  expect_error([&] { t.assign(0, 0, 12); }, "row 12 is outside [0, rows = 12)");
  expect_error([&] { t.assign(0, 0, 5); }, "row 5 is base expert 5's row");
  expect_error([&] { t.assign(1, 4, 9); }, "row 9 already holds adapter 0's expert 3");
  expect_error([&] { (void)t.row(-2, 0); }, "adapter -2");
  EXPECT_EQ(t.row(0, 3), 9);
  EXPECT_EQ(t.row(1, 4), 4);
  EXPECT_EQ(t.row(0, 0), 0);
  EXPECT_THROW(reroute_table(1, 8, 7), logic_error);
  EXPECT_THROW(reroute_table(-1, 8, 8), logic_error);
}

TEST(reroute_table, batched_rerouting_matches_an_oracle) {
  std::mt19937 rng(42);
  constexpr std::int32_t adapters = 3;
  constexpr std::int32_t experts = 16;
  constexpr std::int32_t emax = 5;
  reroute_table t(adapters, experts, experts + adapters * emax);
  std::map<std::pair<std::int32_t, std::int32_t>, std::int32_t> oracle;  // (adapter, expert)
  for (std::int32_t a = 0; a < adapters; ++a) {  // ExpertWeave layout: Δ_a = E + a * Emax
    for (std::int32_t d = 0; d < emax - a; ++d) {
      const std::int32_t e = static_cast<std::int32_t>(rng() % experts);
      if (oracle.count({a, e}) == 0) {
        const std::int32_t row = experts + a * emax + d;
        t.assign(a, e, row);
        oracle[{a, e}] = row;
      }
    }
  }
  for (std::int32_t trial = 0; trial < 100; ++trial) {
    const std::int32_t tokens = static_cast<std::int32_t>(rng() % 9);
    const std::int32_t k = 1 + static_cast<std::int32_t>(rng() % 6);
    std::vector<std::int64_t> ids;
    std::vector<std::int32_t> aid;
    for (std::int32_t i = 0; i < tokens; ++i) {
      aid.push_back(static_cast<std::int32_t>(rng() % (adapters + 1)) - 1);
      for (std::int32_t j = 0; j < k; ++j) {
        ids.push_back(static_cast<std::int64_t>(rng() % experts));
      }
    }
    std::vector<std::int64_t> out(ids.size(), -7);
    t.apply(ids, tokens, k, aid, out);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const std::int32_t a = aid[i / static_cast<std::size_t>(k)];
      const auto e = static_cast<std::int32_t>(ids[i]);
      const auto it = oracle.find({a, e});
      EXPECT_EQ(out[i], a < 0 || it == oracle.end() ? e : it->second);
    }
    // In place gives the same answer.
    std::vector<std::int64_t> in_place = ids;
    t.apply(in_place, tokens, k, aid, in_place);
    EXPECT_EQ(in_place, out);
  }
}

TEST(reroute_table, apply_validates_everything_before_writing) {
  reroute_table t(1, 8, 10);
  t.assign(0, 2, 8);
  const std::vector<std::int32_t> ids = {2, 3, 2, 9};
  std::vector<std::int32_t> out(4, -7);
  const std::vector<std::int32_t> aid = {0, 0};
  EXPECT_THROW(t.apply(ids, 2, 2, aid, out), logic_error);  // id 9 >= experts
  EXPECT_EQ(out, std::vector<std::int32_t>(4, -7));
  const std::vector<std::int32_t> good = {2, 3, 2, 1};
  const std::vector<std::int32_t> bad_aid = {0, 1};
  expect_error([&] { t.apply(good, 2, 2, bad_aid, out); },
               "adapter_ids[1] = 1 is outside [-1, adapters = 1)");
  EXPECT_EQ(out, std::vector<std::int32_t>(4, -7));
  const std::vector<std::int32_t> short_aid = {0};
  EXPECT_THROW(t.apply(good, 2, 2, short_aid, out), logic_error);
  std::vector<std::int32_t> short_out(3);
  EXPECT_THROW(t.apply(good, 2, 2, aid, short_out), logic_error);
  EXPECT_THROW(t.apply(good, 3, 2, std::vector<std::int32_t>{0, 0, 0}, out), logic_error);
  t.apply(good, 2, 2, aid, out);
  EXPECT_EQ(out, (std::vector<std::int32_t>{8, 3, 8, 1}));
}

// Rerouted rows page like experts: a pager over table.rows() serves base and adapter versions
// from the same slot buffer, each slot holding its own row's bytes.
TEST(reroute_table, rerouted_ids_page_through_one_expert_tensor) {
  reroute_table t(2, 8, 8 + 4);
  t.assign(0, 1, 8);
  t.assign(1, 1, 10);
  pager<lru> p({.layers = 1, .experts = t.rows(), .top_k = 2, .capacity = 6});
  host_expert_store store(t.rows(), 6, 16);
  store.fill_pattern(4);
  const std::vector<std::int32_t> ids = {1, 2, 1, 2, 1, 3};  // all tokens pick expert 1
  const std::vector<std::int32_t> aid = {-1, 0, 1};
  std::vector<std::int32_t> rerouted(ids.size());
  t.apply(ids, 3, 2, aid, rerouted);
  EXPECT_EQ(rerouted, (std::vector<std::int32_t>{1, 2, 8, 2, 10, 3}));
  const prepare_result r = p.prepare(0, rerouted, 3, 2);
  store.apply(r.copy_plan);
  for (const std::int32_t row : {1, 2, 3, 8, 10}) {
    EXPECT_TRUE(store.slot_holds(r.expert_map[static_cast<std::size_t>(row)], row));
  }
  EXPECT_EQ(r.misses, 5);
}

}  // namespace
}  // namespace wisp
