// SPDX-License-Identifier: Apache-2.0
// replica_chooser against a brute-force version of its rule written from the documentation (maps
// keyed by (rank, expert), every replica scored from scratch), on random placements, residency
// and batches and on the real ESFT routing; plus the rule's intent on small cases, determinism,
// and bad input refused with nothing changed.
#include "support/expect_error.hpp"
#include "support/traces.hpp"

#include <wisp/parallel/placement.hpp>
#include <wisp/parallel/replica_choice.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <utility>
#include <vector>

namespace wisp {
namespace {

using test::expect_error;

// The rule of replica_choice.hpp, naively. Costs are summed in the documented order (token
// seconds x pairs, then expert seconds, then the copy; the mean term as added x (1 / ranks)) so
// that equal costs tie exactly as in the chooser.
class oracle {
 public:
  oracle(const expert_placement& p, dispatch_costs c) : p_(p), c_(std::move(c)) {
    total_.assign(static_cast<std::size_t>(p.ranks()), 0);
  }
  void set_resident(std::int32_t rank, std::int32_t layer, std::int32_t expert, bool on) {
    if (on) {
      resident_.insert({rank, layer, expert});
    } else {
      resident_.erase({rank, layer, expert});
    }
  }
  void begin_call(std::int32_t layer) {
    layer_ = layer;
    seconds_.assign(static_cast<std::size_t>(p_.ranks()), 0.0);
    pairs_.assign(static_cast<std::size_t>(p_.ranks()), 0);
    peak_ = 0.0;
    active_.clear();
  }
  // Adds `pairs` pairs of `expert` to the rank the rule picks; returns it.
  std::int32_t pick(std::int32_t expert, std::int32_t pairs) {
    std::int32_t best = -1;
    double best_cost = 0.0;
    for (const replica& rep : p_.replicas(layer_, expert)) {
      const double add = added(rep.rank, expert, pairs);
      const auto r = static_cast<std::size_t>(rep.rank);
      const double cost = std::max(seconds_[r] + add, peak_) + add * (1.0 / p_.ranks());
      bool better = best < 0 || cost < best_cost;
      if (!better && cost == best_cost) {
        const auto b = static_cast<std::size_t>(best);
        better = pairs_[r] != pairs_[b] ? pairs_[r] < pairs_[b] : total_[r] < total_[b];
      }
      if (better) {
        best = rep.rank;
        best_cost = cost;
      }
    }
    const auto b = static_cast<std::size_t>(best);
    seconds_[b] += added(best, expert, pairs);
    peak_ = std::max(peak_, seconds_[b]);
    active_.insert({best, expert});
    pairs_[b] += pairs;
    total_[b] += static_cast<std::uint64_t>(pairs);
    return best;
  }
  std::vector<std::int32_t> row(const std::vector<std::int32_t>& ids) {
    std::vector<std::int32_t> out;
    for (const std::int32_t e : ids) {
      out.push_back(pick(e, 1));
    }
    return out;
  }
  std::vector<std::int32_t> call(std::int32_t layer, const std::vector<std::int32_t>& ids) {
    begin_call(layer);
    std::vector<std::int32_t> order;  // distinct, first seen
    std::map<std::int32_t, std::int32_t> count;
    for (const std::int32_t e : ids) {
      if (count[e]++ == 0) {
        order.push_back(e);
      }
    }
    std::vector<std::int32_t> cold;
    for (const std::int32_t e : order) {
      bool anywhere = false;
      for (const replica& rep : p_.replicas(layer, e)) {
        anywhere = anywhere || resident_.count({rep.rank, layer, rep.local}) > 0;
      }
      if (!anywhere) {
        cold.push_back(e);
      }
    }
    // One replica (no choice) first, in first-seen order; then fewest replicas, most tokens.
    std::stable_sort(cold.begin(), cold.end(), [&](std::int32_t a, std::int32_t b) {
      const auto na = p_.replicas(layer, a).size();
      const auto nb = p_.replicas(layer, b).size();
      if (na != nb) {
        return na < nb;
      }
      if (na == 1) {
        return false;
      }
      return count[a] != count[b] ? count[a] > count[b] : a < b;
    });
    std::map<std::int32_t, std::int32_t> placed;
    for (const std::int32_t e : cold) {
      placed[e] = pick(e, count[e]);
    }
    std::vector<std::int32_t> out;
    for (const std::int32_t e : ids) {
      out.push_back(placed.count(e) > 0 ? placed[e] : pick(e, 1));
    }
    return out;
  }
  [[nodiscard]] const std::vector<double>& seconds() const { return seconds_; }

 private:
  double added(std::int32_t rank, std::int32_t expert, std::int32_t pairs) const {
    double s = c_.token_seconds * pairs;
    if (active_.count({rank, expert}) == 0) {
      std::int32_t local = p_.expert_map(rank, layer_)[static_cast<std::size_t>(expert)];
      s += c_.expert_seconds + (resident_.count({rank, layer_, local}) > 0
                                    ? 0.0
                                    : c_.copy_seconds[static_cast<std::size_t>(rank)]);
    }
    return s;
  }

  const expert_placement& p_;
  dispatch_costs c_;
  std::set<std::tuple<std::int32_t, std::int32_t, std::int32_t>> resident_;  // rank, layer, local
  std::set<std::pair<std::int32_t, std::int32_t>> active_;                   // rank, expert
  std::vector<double> seconds_;
  std::vector<std::int32_t> pairs_;
  std::vector<std::uint64_t> total_;
  double peak_ = 0.0;
  std::int32_t layer_ = 0;
};

// A random placement: every expert on 1..3 ranks.
expert_placement random_placement(std::mt19937& rng, std::int32_t layers, std::int32_t experts,
                                  std::int32_t ranks) {
  std::vector<std::vector<std::int32_t>> ranks_of(static_cast<std::size_t>(layers) * experts);
  for (auto& holders : ranks_of) {
    std::vector<std::int32_t> all(static_cast<std::size_t>(ranks));
    for (std::int32_t r = 0; r < ranks; ++r) {
      all[static_cast<std::size_t>(r)] = r;
    }
    std::shuffle(all.begin(), all.end(), rng);
    const auto n = 1 + rng() % static_cast<std::uint32_t>(std::min(ranks, 3));
    holders.assign(all.begin(), all.begin() + n);
    std::sort(holders.begin(), holders.end());
  }
  return expert_placement::from_replica_ranks(layers, experts, ranks, experts, ranks_of);
}

dispatch_costs costs_for(std::int32_t ranks, std::mt19937& rng) {
  dispatch_costs c;
  for (std::int32_t r = 0; r < ranks; ++r) {
    c.copy_seconds.push_back(100e-6 + static_cast<double>(rng() % 3) * 100e-6);
  }
  c.expert_seconds = 5e-6;
  c.token_seconds = 20e-9;
  return c;
}

void randomise_residency(std::mt19937& rng, const expert_placement& p, replica_chooser& fast,
                         oracle& slow) {
  for (std::int32_t l = 0; l < p.layers(); ++l) {
    for (std::int32_t r = 0; r < p.ranks(); ++r) {
      for (std::int32_t i = 0; i < p.local_experts(); ++i) {
        if (p.logical_of(r, l, i) >= 0) {
          const bool on = rng() % 3 == 0;
          fast.set_resident(r, l, i, on);
          slow.set_resident(r, l, i, on);
        }
      }
    }
  }
}

TEST(replica_choice, rows_match_the_brute_force_rule) {
  std::mt19937 rng(11);
  for (int round = 0; round < 60; ++round) {
    const auto ranks = static_cast<std::int32_t>(1 + rng() % 8);
    const expert_placement p = random_placement(rng, 2, 16, ranks);
    const dispatch_costs c = costs_for(ranks, rng);
    replica_chooser fast(p, c);
    oracle slow(p, c);
    for (int call = 0; call < 20; ++call) {
      randomise_residency(rng, p, fast, slow);
      const auto layer = static_cast<std::int32_t>(rng() % 2);
      fast.begin_call(layer);
      slow.begin_call(layer);
      for (int token = 0; token < 16; ++token) {
        std::vector<std::int32_t> ids(8);
        for (auto& e : ids) {
          e = static_cast<std::int32_t>(rng() % 16);
        }
        std::vector<std::int32_t> got(8);
        fast.choose_row(std::span<const std::int32_t>(ids), std::span<std::int32_t>(got));
        ASSERT_EQ(got, slow.row(ids)) << "round " << round << ", call " << call;
      }
      const auto s = fast.call_seconds();
      ASSERT_EQ(std::vector<double>(s.begin(), s.end()), slow.seconds());
    }
  }
}

TEST(replica_choice, whole_calls_match_the_brute_force_rule) {
  std::mt19937 rng(12);
  for (int round = 0; round < 60; ++round) {
    const auto ranks = static_cast<std::int32_t>(1 + rng() % 8);
    const expert_placement p = random_placement(rng, 3, 24, ranks);
    const dispatch_costs c = costs_for(ranks, rng);
    replica_chooser fast(p, c);
    oracle slow(p, c);
    for (int call = 0; call < 20; ++call) {
      randomise_residency(rng, p, fast, slow);
      const auto layer = static_cast<std::int32_t>(rng() % 3);
      const auto tokens = static_cast<std::int32_t>(rng() % 20);
      std::vector<std::int64_t> ids(static_cast<std::size_t>(tokens) * 6);
      std::vector<std::int32_t> ids32;
      for (auto& e : ids) {
        e = static_cast<std::int64_t>(rng() % 24);
        ids32.push_back(static_cast<std::int32_t>(e));
      }
      std::vector<std::int32_t> got(ids.size());
      fast.choose(layer, std::span<const std::int64_t>(ids), tokens, 6, got);
      ASSERT_EQ(got, slow.call(layer, ids32)) << "round " << round << ", call " << call;
      const auto s = fast.call_seconds();
      ASSERT_EQ(std::vector<double>(s.begin(), s.end()), slow.seconds());
    }
  }
}

// Calls of up to 1,600 pairs: the chooser lists the pairs left after the cold experts in blocks
// of 256, so these cross block boundaries (and the residency is toggled between calls, also to the
// value it already has).
TEST(replica_choice, long_whole_calls_match_the_brute_force_rule) {
  std::mt19937 rng(14);
  for (int round = 0; round < 12; ++round) {
    const auto ranks = static_cast<std::int32_t>(2 + rng() % 7);
    const expert_placement p = random_placement(rng, 2, 64, ranks);
    const dispatch_costs c = costs_for(ranks, rng);
    replica_chooser fast(p, c);
    oracle slow(p, c);
    for (int call = 0; call < 6; ++call) {
      randomise_residency(rng, p, fast, slow);
      const auto layer = static_cast<std::int32_t>(rng() % 2);
      const auto tokens = static_cast<std::int32_t>(1 + rng() % 200);
      std::vector<std::int32_t> ids(static_cast<std::size_t>(tokens) * 8);
      for (auto& e : ids) {
        e = static_cast<std::int32_t>(rng() % 64);
      }
      std::vector<std::int32_t> got(ids.size());
      fast.choose(layer, std::span<const std::int32_t>(ids), tokens, 8, got);
      ASSERT_EQ(got, slow.call(layer, ids)) << "round " << round << ", call " << call;
      const auto s = fast.call_seconds();
      ASSERT_EQ(std::vector<double>(s.begin(), s.end()), slow.seconds());
    }
  }
}

TEST(replica_choice, whole_calls_match_the_brute_force_rule_on_esft) {
  const auto trace = test::esft_trace();
  WISP_TEST_NEEDS_TRACE(trace.has_value());
  std::mt19937 rng(13);
  const auto& shape = trace->shape();
  const expert_placement p = random_placement(rng, shape.layers, shape.experts, 8);
  const dispatch_costs c = costs_for(8, rng);
  replica_chooser fast(p, c);
  oracle slow(p, c);
  std::vector<std::int32_t> ids;
  for (std::size_t first = 0; first + 16 <= 16 * 40; first += 16) {  // 40 batches of 16 tokens
    randomise_residency(rng, p, fast, slow);
    for (std::int32_t l = 0; l < shape.layers; ++l) {
      ids.clear();
      for (std::size_t s = first; s < first + 16; ++s) {
        for (std::int32_t j = 0; j < shape.top_k; ++j) {
          ids.push_back(trace->expert(s, l, j));
        }
      }
      std::vector<std::int32_t> got(ids.size());
      fast.choose(l, std::span<const std::int32_t>(ids), 16, shape.top_k, got);
      ASSERT_EQ(got, slow.call(l, ids)) << "tokens from " << first << ", layer " << l;
    }
  }
}

// Two ranks, expert 0 on both, experts 1 and 2 on rank 0, expert 3 on rank 1.
expert_placement two_ranks() {
  const std::vector<std::vector<std::int32_t>> ranks_of = {{0, 1}, {0}, {0}, {1}};
  return expert_placement::from_replica_ranks(1, 4, 2, 3, ranks_of);
}

TEST(replica_choice, prefers_a_resident_replica_and_sends_a_copy_to_the_idle_rank) {
  const expert_placement p = two_ranks();
  replica_chooser chooser(p, {{300e-6, 300e-6}, 5e-6, 20e-9});
  chooser.set_resident(1, 0, p.expert_map(1, 0)[0], true);  // expert 0 resident on rank 1 only
  std::vector<std::int32_t> ranks(1);
  chooser.begin_call(0);
  chooser.choose_row(std::span<const std::int32_t>(std::vector<std::int32_t>{0}), ranks);
  EXPECT_EQ(ranks[0], 1);  // the resident replica, though rank 0 is just as idle
  // Rank 1 now busy copying expert 3; expert 0 stays on rank 1 (resident, active): no new copy.
  chooser.choose_row(std::span<const std::int32_t>(std::vector<std::int32_t>{3}), ranks);
  EXPECT_EQ(ranks[0], 1);
  chooser.choose_row(std::span<const std::int32_t>(std::vector<std::int32_t>{0}), ranks);
  EXPECT_EQ(ranks[0], 1);
  // Nothing resident: a whole call sends expert 0's copy to the rank without other copies.
  replica_chooser cold(p, {{300e-6, 300e-6}, 5e-6, 20e-9});
  const std::vector<std::int32_t> ids = {1, 0, 2, 0};  // experts 1 and 2 copy on rank 0
  std::vector<std::int32_t> targets(4);
  cold.choose(0, std::span<const std::int32_t>(ids), 2, 2, targets);
  EXPECT_EQ(targets, (std::vector<std::int32_t>{0, 1, 0, 1}));
  EXPECT_EQ(cold.call_pairs()[0], 2);
  EXPECT_EQ(cold.call_pairs()[1], 2);
}

TEST(replica_choice, one_replica_leaves_no_choice_and_the_same_state_gives_the_same_targets) {
  const expert_placement linear = expert_placement::linear(2, 16, 4);
  std::mt19937 rng(5);
  replica_chooser a(linear, costs_for(4, rng));
  std::vector<std::int32_t> ids(64);
  for (auto& e : ids) {
    e = static_cast<std::int32_t>(rng() % 16);
  }
  std::vector<std::int32_t> targets(64);
  a.choose(1, std::span<const std::int32_t>(ids), 8, 8, targets);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(targets[i], ids[i] / 4);
  }
  const expert_placement p = random_placement(rng, 2, 16, 4);
  const dispatch_costs c = costs_for(4, rng);
  replica_chooser x(p, c);
  replica_chooser y(p, c);
  for (int call = 0; call < 10; ++call) {
    for (auto& e : ids) {
      e = static_cast<std::int32_t>(rng() % 16);
    }
    std::vector<std::int32_t> tx(64);
    std::vector<std::int32_t> ty(64);
    x.choose(call % 2, std::span<const std::int32_t>(ids), 8, 8, tx);
    y.choose(call % 2, std::span<const std::int32_t>(ids), 8, 8, ty);
    EXPECT_EQ(tx, ty);
  }
}

TEST(replica_choice, bad_input_is_refused_and_changes_nothing) {
  const expert_placement p = two_ranks();
  expect_error([&] { replica_chooser c(p, {{1e-3}, 0, 0}); }, "copy_seconds has 1 entries for 2");
  expect_error([&] { replica_chooser c(p, {{1e-3, -1.0}, 0, 0}); }, "copy_seconds[1]", "got -1");
  replica_chooser c(p, {{1e-3, 1e-3}, 1e-6, 1e-9});
  std::vector<std::int32_t> out(2);
  expect_error(
      [&] { c.choose_row(std::span<const std::int32_t>(std::vector<std::int32_t>{0}), out); },
      "no call started");
  expect_error([&] { c.begin_call(1); }, "layer 1 is outside [0, layers = 1)");
  c.begin_call(0);
  const std::vector<std::int32_t> bad = {0, 4};
  expect_error([&] { c.choose_row(std::span<const std::int32_t>(bad), out); },
               "id 4 at position 1 is outside [0, experts = 4)");
  EXPECT_EQ(c.call_pairs()[0] + c.call_pairs()[1], 0);  // the good id was not placed either
  expect_error([&] { c.choose(0, std::span<const std::int32_t>(bad), 1, 2, out); }, "topk_ids[1]",
               "= 4 is outside");
  expect_error([&] { c.choose(0, std::span<const std::int32_t>(bad), 2, 2, out); },
               "holds 2 ids but tokens * k = 2 * 2 = 4");
  const std::vector<std::int64_t> negative = {1, 2, -3, 0};
  std::vector<std::int32_t> four(4);
  expect_error([&] { c.choose(0, std::span<const std::int64_t>(negative), 2, 2, four); },
               "topk_ids[2]", "= -3 is outside");
  EXPECT_EQ(c.call_pairs()[0] + c.call_pairs()[1], 0);
  expect_error([&] { c.set_resident(2, 0, 0, true); }, "rank 2 is outside [0, ranks = 2)");
  expect_error([&] { c.set_resident(0, 0, 3, true); }, "local id 3 is outside");
  EXPECT_EQ(c.total_pairs()[0] + c.total_pairs()[1], 0u);
}

}  // namespace
}  // namespace wisp
