// SPDX-License-Identifier: Apache-2.0
// pager::prefetch (never evicts the pending call's experts, maps stay truthful) and the miss
// policies (rewrite_misses against a brute-force per-token rule, prepare_with_misses).
#include "support/expect_error.hpp"

#include <wisp/cache/policies.hpp>
#include <wisp/pager/miss_policy.hpp>
#include <wisp/pager/pager.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <vector>

namespace {

using namespace wisp;
using wisp::test::expect_error;

// Every map entry that shows a slot shows the slot its expert really has.
template <class P>
void expect_maps_truthful(const pager<P>& p) {
  for (std::int32_t l = 0; l < p.layers(); ++l) {
    const auto map = p.expert_map(l);
    for (std::int32_t e = 0; e < p.experts(); ++e) {
      if (map[static_cast<std::size_t>(e)] >= 0) {
        ASSERT_EQ(p.slot_of(l, e), map[static_cast<std::size_t>(e)])
            << "layer " << l << " expert " << e;
      }
    }
  }
}

template <class P>
void random_prefetch_run(cache_scope scope, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::int32_t layers = 4, experts = 10, k = 3;
  pager_config cfg{.layers = layers,
                   .experts = experts,
                   .top_k = k,
                   .capacity = scope == cache_scope::global ? 8 : 5,
                   .scope = scope};
  pager<P> p(cfg);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(2 * k));
  for (int step = 0; step < 60; ++step) {
    p.begin_step();
    for (std::int32_t l = 0; l < layers; ++l) {
      for (std::int32_t& id : ids) {
        id = static_cast<std::int32_t>(rng() % 4) + l;  // a few experts per layer: some reuse
      }
      std::set<std::int32_t> distinct(ids.begin(), ids.end());
      if (static_cast<std::int32_t>(distinct.size()) > p.capacity(l)) {
        continue;
      }
      const prepare_result r = p.prepare(l, ids, 2, k);
      std::vector<std::int32_t> pending(r.experts.begin(), r.experts.end());
      std::vector<std::int32_t> pending_slots;
      for (const std::int32_t e : pending) {
        pending_slots.push_back(p.slot_of(l, e));
      }
      const std::int32_t target = static_cast<std::int32_t>(rng() % layers);
      std::vector<std::int32_t> candidates(rng() % 7);
      for (std::int32_t& c : candidates) {
        c = static_cast<std::int32_t>(rng() % experts);
      }
      std::vector<std::pair<std::int32_t, std::int32_t>> truthful;  // (layer, expert) shown right
      for (std::int32_t m = 0; m < layers; ++m) {
        for (std::int32_t e = 0; e < experts; ++e) {
          const std::int32_t shown = p.expert_map(m)[static_cast<std::size_t>(e)];
          if (shown >= 0 && p.slot_of(m, e) == shown) {
            truthful.emplace_back(m, e);
          }
        }
      }
      const prefetch_result f = p.prefetch(target, candidates);
      // The pending call's experts kept their slots.
      for (std::size_t i = 0; i < pending.size(); ++i) {
        ASSERT_EQ(p.slot_of(l, pending[i]), pending_slots[i]);
      }
      // The plan: distinct slots now holding their candidates, and every candidate accounted.
      std::set<std::int32_t> slots, planned;
      for (const copy_op& op : f.copy_plan) {
        ASSERT_TRUE(slots.insert(op.slot).second);
        ASSERT_EQ(p.slot_of(target, op.expert), op.slot);
        planned.insert(op.expert);
      }
      const std::set<std::int32_t> wanted(candidates.begin(), candidates.end());
      ASSERT_EQ(static_cast<std::size_t>(f.resident + f.dropped) + planned.size(), wanted.size());
      // A prefetch hides what it evicts: no map entry that was right before is wrong after.
      for (const auto& [m, e] : truthful) {
        const std::int32_t shown = p.expert_map(m)[static_cast<std::size_t>(e)];
        ASSERT_TRUE(shown == -1 || shown == p.slot_of(m, e)) << "layer " << m << " expert " << e;
      }
      if (scope == cache_scope::per_layer) {  // (in global scope a prepare may leave stale maps)
        expect_maps_truthful(p);
      }
      EXPECT_EQ(p.pending_layer(), l);
    }
  }
}

TEST(PagerPrefetch, NeverEvictsThePendingCallAndKeepsMapsTruthful) {
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    random_prefetch_run<lru>(cache_scope::global, seed);
    random_prefetch_run<lru>(cache_scope::per_layer, seed);
    random_prefetch_run<least_stale>(cache_scope::global, seed);
    random_prefetch_run<decayed_frequency>(cache_scope::per_layer, seed);
  }
}

TEST(PagerPrefetch, LoadsCandidatesAsCurrentAndReportsWhatItSkipped) {
  pager<least_stale> p(
      {.layers = 2, .experts = 8, .top_k = 2, .capacity = 4, .scope = cache_scope::global});
  const std::vector<std::int32_t> a{0, 1}, b{2, 3};
  p.prepare(0, a, 1, 2);
  p.prepare(1, b, 1, 2);  // pending: layer 1 {2, 3}; the pool is full
  p.begin_step();
  const std::vector<std::int32_t> candidates{5, 5, 2, 6, 7};
  const prefetch_result f = p.prefetch(0, candidates);
  // 5 and 2 take layer 0's stale experts 0 and 1 (in candidate order); no slot is left for 6 and
  // 7 outside the pending call ({2, 3} of layer 1) and this prefetch's own loads.
  ASSERT_EQ(f.copy_plan.size(), 2u);
  EXPECT_EQ(f.copy_plan[0].expert, 5);
  EXPECT_EQ(f.copy_plan[1].expert, 2);
  EXPECT_EQ(f.resident, 0);
  EXPECT_EQ(f.dropped, 2);
  EXPECT_EQ(p.stats().prefetches, 2u);
  EXPECT_EQ(p.slot_of(1, 2) >= 0 && p.slot_of(1, 3) >= 0, true);
  EXPECT_EQ(p.expert_map(0)[0], -1);  // evicted: hidden from layer 0's map
  EXPECT_TRUE(p.cache(0).policy().is_current(5, p.step()));
  // The map shows only the next call's experts; a prefetched one is then a hit.
  EXPECT_EQ(p.expert_map(0)[5], -1);
  const std::vector<std::int32_t> next{5, 2};
  EXPECT_EQ(p.prepare(0, next, 1, 2).hits, 2);
  expect_error([&] { p.prefetch(2, candidates); }, "layer 2");
  expect_error([&] { p.prefetch(0, std::vector<std::int32_t>{1, 8}); }, "candidate 1 = 8");
}

// ------------------------------------------------------------------ miss policies

// The documented rule, per token, by brute force over sorted ranks.
void reference_rewrite(std::vector<std::int32_t>& ids, std::vector<float>& w, std::int32_t k,
                       const miss_options& o, const std::vector<bool>& resident,
                       const std::vector<float>& scores, std::int32_t experts) {
  for (std::size_t t = 0; t * k < ids.size(); ++t) {
    std::vector<std::size_t> order(static_cast<std::size_t>(k));
    std::iota(order.begin(), order.end(), t * k);
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return w[a] > w[b]; });
    std::vector<bool> keep(static_cast<std::size_t>(k));
    for (std::size_t r = 0; r < order.size(); ++r) {
      keep[order[r] - t * k] = r < static_cast<std::size_t>(o.always_fetch_top) ||
                               resident[static_cast<std::size_t>(ids[order[r]])];
    }
    if (std::none_of(keep.begin(), keep.end(), [](bool x) { return x; })) {
      keep[order[0] - t * k] = true;
    }
    const std::size_t first =
        t * k + static_cast<std::size_t>(std::find(keep.begin(), keep.end(), true) - keep.begin());
    double total = 0, lost = 0;
    for (std::size_t j = t * k; j < t * k + k; ++j) {
      total += w[j];
      if (keep[j - t * k]) {
        continue;
      }
      std::int32_t best = -1;
      if (o.policy == miss_policy::substitute) {
        const std::vector<std::int32_t> now(ids.begin() + static_cast<std::ptrdiff_t>(t * k),
                                            ids.begin() + static_cast<std::ptrdiff_t>(t * k + k));
        for (std::int32_t e = 0; e < experts; ++e) {
          if (resident[static_cast<std::size_t>(e)] &&
              std::find(now.begin(), now.end(), e) == now.end() &&
              (best < 0 || scores[t * experts + e] > scores[t * experts + best])) {
            best = e;
          }
        }
      }
      if (best >= 0) {
        ids[j] = best;
      } else {
        lost += w[j];
        w[j] = 0;
        ids[j] = ids[first];
      }
    }
    if (lost > 0 && total > lost) {
      for (std::size_t j = t * k; j < t * k + k; ++j) {
        w[j] *= static_cast<float>(total / (total - lost));
      }
    }
  }
}

TEST(MissPolicy, RewriteMatchesTheBruteForceRule) {
  std::mt19937 rng(31);
  const std::int32_t experts = 12, k = 4, tokens = 5;
  for (int round = 0; round < 400; ++round) {
    std::vector<std::int32_t> ids;
    std::vector<float> w;
    for (std::int32_t t = 0; t < tokens; ++t) {
      std::vector<std::int32_t> all(static_cast<std::size_t>(experts));
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      for (std::int32_t j = 0; j < k; ++j) {
        ids.push_back(all[static_cast<std::size_t>(j)]);
        w.push_back(static_cast<float>(1 + rng() % 5) / 8.0f);  // ties happen
      }
    }
    std::vector<bool> resident(static_cast<std::size_t>(experts));
    for (std::size_t e = 0; e < resident.size(); ++e) {
      resident[e] = rng() % 3 == 0;
    }
    std::vector<float> scores(static_cast<std::size_t>(tokens * experts));
    for (float& s : scores) {
      s = static_cast<float>(rng() % 100);
    }
    const miss_options o{static_cast<miss_policy>(rng() % 3), static_cast<std::int32_t>(rng() % 3)};
    std::vector<std::int32_t> got_ids = ids, want_ids = ids;
    std::vector<float> got_w = w, want_w = w;
    const miss_rewrite r = rewrite_misses(
        std::span<std::int32_t>(got_ids), std::span<float>(got_w), tokens, k, experts, o,
        [&](std::int32_t e) { return bool(resident[static_cast<std::size_t>(e)]); }, scores);
    if (o.policy != miss_policy::fetch) {
      reference_rewrite(want_ids, want_w, k, o, resident, scores, experts);
    }
    ASSERT_EQ(got_ids, want_ids) << "policy " << to_string(o.policy);
    for (std::size_t i = 0; i < w.size(); ++i) {
      ASSERT_NEAR(got_w[i], want_w[i], 1e-6);
    }
    // Every row keeps its weight sum unless something was substituted; dropped mass is reported.
    double dropped = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      dropped += got_w[i] == 0.0f && w[i] != 0.0f ? w[i] : 0.0;
    }
    ASSERT_NEAR(r.dropped_weight, dropped, 1e-6);
  }
}

TEST(MissPolicy, PrepareWithDropFetchesOnlyWhatItKeeps) {
  pager<lru> p({.layers = 1, .experts = 8, .top_k = 2, .capacity = 4});
  std::vector<std::int32_t> warm{0, 1};
  p.prepare(0, warm, 1, 2);
  std::vector<std::int32_t> ids{0, 5, 6, 1};  // token 0: {0 resident, 5}; token 1: {6, 1 resident}
  std::vector<float> w{0.6f, 0.2f, 0.3f, 0.1f};
  const miss_prepare_result r =
      prepare_with_misses(p, 0, std::span<std::int32_t>(ids), std::span<float>(w), 2, 2,
                          {.policy = miss_policy::drop, .always_fetch_top = 1});
  // Token 0 drops 5 (rank 1, missing); token 1 keeps 6 (its top rank) and 1 (resident).
  EXPECT_EQ(ids, (std::vector<std::int32_t>{0, 0, 6, 1}));
  EXPECT_FLOAT_EQ(w[0], 0.8f);
  EXPECT_FLOAT_EQ(w[1], 0.0f);
  EXPECT_EQ(r.rewrite.dropped, 1);
  EXPECT_EQ(r.rewrite.fetched, 1);
  EXPECT_FLOAT_EQ(static_cast<float>(r.rewrite.dropped_weight), 0.2f);
  ASSERT_EQ(r.prepared.copy_plan.size(), 1u);
  EXPECT_EQ(r.prepared.copy_plan[0].expert, 6);
  EXPECT_EQ(r.prepared.expert_map[5], -1);
  std::vector<float> short_w{1.0f};
  expect_error(
      [&] {
        prepare_with_misses(p, 0, std::span<std::int32_t>(ids), std::span<float>(short_w), 2, 2,
                            {});
      },
      "1 weights for 4 ids");
  expect_error(
      [&] {
        prepare_with_misses(p, 0, std::span<std::int32_t>(ids), std::span<float>(w), 2, 2,
                            {.policy = miss_policy::substitute});
      },
      "substitute needs");
}

}  // namespace
