// SPDX-License-Identifier: Apache-2.0
// llama_cpp_cache (the llama.cpp baseline) against a brute-force list LRU that follows the
// described rule literally: dedup, hits to the front in first-seen order, then each miss in
// ascending expert order takes the back of the list; a bypassed call uploads its misses to staging
// rows and leaves the list alone. Random streams in both scopes and every batch size around
// max_batch, the real ESFT trace in global scope, a hand-worked example, and bad input.
#include "support/expect_error.hpp"
#include "support/traces.hpp"

#include <wisp/pager/llama_cpp_cache.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <list>
#include <random>
#include <set>
#include <type_traits>
#include <utility>
#include <vector>

namespace wisp {
namespace {

using test::expect_error;

static_assert(std::is_trivially_copyable_v<llama_cpp_plan>);

/// The rule, on std::list: one list of (key, slot) per pool, the front most recently used.
class list_lru_oracle {
 public:
  explicit list_lru_oracle(const llama_cpp_cache_config& c) : c_(c) {
    const std::int32_t pools = c.scope == cache_scope::global ? 1 : c.layers;
    lists_.resize(static_cast<std::size_t>(pools));
    for (auto& list : lists_) {
      for (std::int32_t s = 0; s < c.capacity; ++s) {
        list.push_front({-1, s});  // slot 0 ends at the back: the first taken
      }
    }
  }

  struct result {
    std::vector<std::int32_t> map;  // the layer's slot map
    std::vector<copy_op> uploads;
    std::int32_t hits = 0;
    bool cached = true;
  };

  result plan(std::int32_t layer, const std::vector<std::int32_t>& ids, std::int32_t tokens) {
    std::vector<std::int32_t> distinct;
    for (const std::int32_t e : ids) {
      if (std::find(distinct.begin(), distinct.end(), e) == distinct.end()) {
        distinct.push_back(e);
      }
    }
    auto& list = lists_[c_.scope == cache_scope::global ? 0u : static_cast<std::size_t>(layer)];
    const std::int32_t key_base = layer * c_.experts;
    auto find = [&](std::int32_t e) {
      return std::find_if(list.begin(), list.end(),
                          [&](const auto& entry) { return entry.first == key_base + e; });
    };
    result r;
    std::vector<std::int32_t> missed;
    for (const std::int32_t e : distinct) {
      if (find(e) != list.end()) {
        ++r.hits;
      } else {
        missed.push_back(e);
      }
    }
    std::sort(missed.begin(), missed.end());
    r.cached = tokens <= c_.max_batch && static_cast<std::int32_t>(distinct.size()) <= c_.capacity;
    if (r.cached) {
      for (const std::int32_t e : distinct) {
        const auto it = find(e);
        if (it != list.end()) {
          list.splice(list.begin(), list, it);
        }
      }
      for (const std::int32_t e : missed) {
        const auto lru = std::prev(list.end());
        lru->first = key_base + e;
        r.uploads.push_back({e, lru->second});
        list.splice(list.begin(), list, lru);
      }
    } else {
      for (std::size_t i = 0; i < missed.size(); ++i) {
        r.uploads.push_back({missed[i], c_.capacity + static_cast<std::int32_t>(i)});
      }
    }
    r.map.assign(static_cast<std::size_t>(c_.experts), -1);
    for (const auto& [key, slot] : list) {
      if (key >= key_base && key < key_base + c_.experts) {
        r.map[static_cast<std::size_t>(key - key_base)] = slot;
      }
    }
    if (!r.cached) {
      for (const copy_op& up : r.uploads) {
        r.map[static_cast<std::size_t>(up.expert)] = up.slot;
      }
    }
    return r;
  }

 private:
  llama_cpp_cache_config c_;
  std::vector<std::list<std::pair<std::int32_t, std::int32_t>>> lists_;
};

std::int32_t merged_runs(const std::vector<copy_op>& uploads) {
  std::int32_t runs = 0;
  for (std::size_t i = 0; i < uploads.size(); ++i) {
    runs += i == 0 || uploads[i].expert != uploads[i - 1].expert + 1 ||
                    uploads[i].slot != uploads[i - 1].slot + 1
                ? 1
                : 0;
  }
  return runs;
}

void expect_same(const llama_cpp_plan& got, const list_lru_oracle::result& want, std::size_t call) {
  ASSERT_EQ(std::vector<std::int32_t>(got.expert_map.begin(), got.expert_map.end()), want.map)
      << "call " << call;
  ASSERT_EQ(std::vector<copy_op>(got.uploads.begin(), got.uploads.end()), want.uploads)
      << "call " << call;
  ASSERT_EQ(got.hits, want.hits) << "call " << call;
  ASSERT_EQ(got.misses, static_cast<std::int32_t>(want.uploads.size())) << "call " << call;
  ASSERT_EQ(got.upload_runs, merged_runs(want.uploads)) << "call " << call;
  ASSERT_EQ(got.cached, want.cached) << "call " << call;
}

TEST(llama_cpp_cache, a_hand_worked_call_sequence) {
  // One pool of 3 slots over 1 layer x 8 experts, k = 2. Free slots are taken 0, 1, 2.
  llama_cpp_cache c({.layers = 1, .experts = 8, .top_k = 2, .capacity = 3});
  const std::vector<std::int32_t> a = {5, 2};
  auto p = c.plan(0, std::span<const std::int32_t>(a), 1);
  // Misses in ascending order: 2 -> slot 0, 5 -> slot 1; merged? experts 2, 5 are not
  // consecutive: two uploads.
  EXPECT_EQ(std::vector<copy_op>(p.uploads.begin(), p.uploads.end()),
            (std::vector<copy_op>{{2, 0}, {5, 1}}));
  EXPECT_EQ(p.upload_runs, 2);
  const std::vector<std::int32_t> b = {6, 5};  // 5 hits (touched first), 6 takes slot 2
  p = c.plan(0, std::span<const std::int32_t>(b), 1);
  EXPECT_EQ(p.hits, 1);
  EXPECT_EQ(std::vector<copy_op>(p.uploads.begin(), p.uploads.end()),
            (std::vector<copy_op>{{6, 2}}));
  // LRU order now: 2 (slot 0), 5 (slot 1), 6 (slot 2). {3, 4} evicts 2 then 5: slots 0, 1 in
  // ascending expert order, consecutive experts into consecutive slots: one merged upload.
  const std::vector<std::int32_t> d = {4, 3};
  p = c.plan(0, std::span<const std::int32_t>(d), 1);
  EXPECT_EQ(std::vector<copy_op>(p.uploads.begin(), p.uploads.end()),
            (std::vector<copy_op>{{3, 0}, {4, 1}}));
  EXPECT_EQ(p.upload_runs, 1);
  EXPECT_EQ(c.slot_of(0, 2), -1);
  EXPECT_EQ(c.slot_of(0, 5), -1);
  EXPECT_EQ(c.slot_of(0, 6), 2);
  EXPECT_EQ(p.expert_map[6], 2);  // the slot map shows every resident expert of the layer
  EXPECT_EQ(c.stats().misses, 5u);
  EXPECT_EQ(c.stats().hits, 1u);
}

TEST(llama_cpp_cache, a_large_ubatch_reads_the_cache_without_changing_it) {
  llama_cpp_cache c({.layers = 1, .experts = 8, .top_k = 1, .capacity = 2, .max_batch = 2});
  const std::vector<std::int32_t> warm = {1, 2};
  c.plan(0, std::span<const std::int32_t>(warm), 2);
  const std::vector<std::int32_t> prefill = {7, 2, 6};  // 3 tokens > max_batch
  const auto p = c.plan(0, std::span<const std::int32_t>(prefill), 3);
  EXPECT_FALSE(p.cached);
  EXPECT_EQ(p.hits, 1);
  EXPECT_EQ(std::vector<copy_op>(p.uploads.begin(), p.uploads.end()),
            (std::vector<copy_op>{{6, 2}, {7, 3}}));  // staging rows after the 2 slots
  EXPECT_EQ(p.expert_map[7], 3);
  EXPECT_EQ(c.slot_of(0, 7), -1);  // staged, not resident
  EXPECT_EQ(c.slot_of(0, 1), 0);   // nothing evicted
  EXPECT_EQ(c.slot_of(0, 2), 1);
  const std::vector<std::int32_t> next = {1};
  const auto q = c.plan(0, std::span<const std::int32_t>(next), 1);
  EXPECT_EQ(q.expert_map[7], -1);  // the staging rows are gone at the next call
  EXPECT_EQ(c.stats().bypassed_calls, 1u);
}

TEST(llama_cpp_cache, matches_the_list_lru_on_random_streams_in_both_scopes) {
  std::mt19937 rng(20261127);
  for (const cache_scope scope : {cache_scope::global, cache_scope::per_layer}) {
    for (const std::int32_t capacity : {4, 6, 9, 16}) {
      const llama_cpp_cache_config config{.layers = 3,
                                          .experts = 16,
                                          .top_k = 4,
                                          .capacity = capacity,
                                          .scope = scope,
                                          .max_batch = 3};
      llama_cpp_cache fast(config);
      list_lru_oracle slow(config);
      std::uniform_int_distribution<std::int32_t> skewed(0, 15);
      for (std::size_t call = 0; call < 3000; ++call) {
        const auto layer = static_cast<std::int32_t>(rng() % 3);
        const auto tokens = static_cast<std::int32_t>(rng() % 5);  // 0..4, around max_batch
        std::vector<std::int32_t> ids;
        for (std::int32_t t = 0; t < tokens; ++t) {
          std::set<std::int32_t> row;
          while (row.size() < 4u) {
            const std::int32_t e = skewed(rng);
            row.insert(rng() % 2 == 0 ? e / 2 : e);  // skew towards low ids: reuse
          }
          std::vector<std::int32_t> shuffled(row.begin(), row.end());
          std::shuffle(shuffled.begin(), shuffled.end(), rng);
          ids.insert(ids.end(), shuffled.begin(), shuffled.end());
        }
        const auto got = fast.plan(layer, std::span<const std::int32_t>(ids), tokens);
        expect_same(got, slow.plan(layer, ids, tokens), call);
        if (HasFatalFailure()) {
          return;
        }
      }
    }
  }
}

TEST(llama_cpp_cache, matches_the_list_lru_on_the_real_trace_in_global_scope) {
  const auto trace = test::esft_trace();
  WISP_TEST_NEEDS_TRACE(trace.has_value());
  for (const std::int32_t capacity : {83, 416}) {  // 1/20 and 1/4 of the 1,664 keys
    const llama_cpp_cache_config config{.layers = trace->shape().layers,
                                        .experts = trace->shape().experts,
                                        .top_k = trace->shape().top_k,
                                        .capacity = capacity};
    llama_cpp_cache fast(config);
    list_lru_oracle slow(config);
    std::size_t call = 0;
    bool failed = false;
    trace->for_each_call([&](std::size_t, std::int32_t layer, std::span<const std::int32_t> ids) {
      if (failed || call++ >= 20000) {  // the list oracle is O(capacity) per lookup
        return;
      }
      const std::vector<std::int32_t> row(ids.begin(), ids.end());
      expect_same(fast.plan(layer, ids, 1), slow.plan(layer, row, 1), call);
      failed = HasFatalFailure();
    });
    ASSERT_FALSE(failed);
    EXPECT_EQ(fast.stats().calls, 20000u);
  }
}

TEST(llama_cpp_cache, int64_ids_plan_the_same_as_int32) {
  llama_cpp_cache narrow({.layers = 2, .experts = 8, .top_k = 2, .capacity = 5});
  llama_cpp_cache wide({.layers = 2, .experts = 8, .top_k = 2, .capacity = 5});
  std::mt19937 rng(7);
  for (int call = 0; call < 500; ++call) {
    const std::vector<std::int32_t> a = {static_cast<std::int32_t>(rng() % 8),
                                         static_cast<std::int32_t>(rng() % 8)};
    const std::vector<std::int64_t> b(a.begin(), a.end());
    const auto layer = static_cast<std::int32_t>(call % 2);
    const auto p = narrow.plan(layer, std::span<const std::int32_t>(a), 1);
    const auto q = wide.plan(layer, std::span<const std::int64_t>(b), 1);
    ASSERT_EQ(std::vector<copy_op>(p.uploads.begin(), p.uploads.end()),
              std::vector<copy_op>(q.uploads.begin(), q.uploads.end()));
  }
}

TEST(llama_cpp_cache, bad_input_names_the_values_and_changes_nothing) {
  expect_error([] { llama_cpp_cache c({.layers = 0, .experts = 8, .top_k = 2, .capacity = 4}); },
               "layers must be >= 1, got 0");
  expect_error([] { llama_cpp_cache c({.layers = 2, .experts = 8, .top_k = 2, .capacity = 17}); },
               "capacity 17", "layers * experts = 16");
  expect_error(
      [] {
        llama_cpp_cache c({.layers = 2,
                           .experts = 8,
                           .top_k = 2,
                           .capacity = 9,
                           .scope = cache_scope::per_layer});
      },
      "capacity 9", "experts = 8");
  expect_error([] { llama_cpp_cache c({.layers = 2, .experts = 8, .top_k = 4, .capacity = 3}); },
               "capacity 3", "top_k = 4");
  expect_error(
      [] {
        llama_cpp_cache c({.layers = 1, .experts = 8, .top_k = 1, .capacity = 2, .max_batch = 0});
      },
      "max_batch must be >= 1, got 0");

  llama_cpp_cache c({.layers = 2, .experts = 8, .top_k = 2, .capacity = 4});
  const std::vector<std::int32_t> ok = {1, 2};
  c.plan(0, std::span<const std::int32_t>(ok), 1);
  const std::vector<std::int32_t> bad = {3, 8};
  expect_error([&] { c.plan(0, std::span<const std::int32_t>(bad), 1); }, "topk_ids[1]", "= 8",
               "experts = 8");
  expect_error([&] { c.plan(2, std::span<const std::int32_t>(ok), 1); }, "layer 2", "layers = 2");
  expect_error([&] { c.plan(0, std::span<const std::int32_t>(ok), 2); }, "holds 2 ids",
               "tokens * k = 2 * 2 = 4");
  expect_error([&] { (void)c.slot_of(0, 9); }, "expert 9");
  EXPECT_EQ(c.stats().calls, 1u);  // the failed calls changed nothing
  EXPECT_EQ(c.slot_of(0, 1), 0);
  EXPECT_EQ(c.slot_of(0, 2), 1);
  EXPECT_EQ(c.slot_of(0, 3), -1);
}

}  // namespace
}  // namespace wisp
