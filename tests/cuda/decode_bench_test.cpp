// SPDX-License-Identifier: Apache-2.0
// The host-side rules of the GPU decode benchmark (bench/cuda/decode_*.hpp, gemv_moe.hpp), each
// against an oracle: the models' shapes against the published sizes; the routing against the
// ESFT import and the synthetic router; every arm's decisions replayed on the ESFT trace against
// the host pager, llama_cpp_cache or a brute-force count, with an arena mirror checking that
// every routed expert is read from a row holding its bytes; the policy choice; the memory plan
// and its shrinking after a failed allocation against a brute-force search; the output checks;
// the GEMV kernel's arithmetic against wisp::reference_fused_moe; the profile and the JSON
// files parsed back.
#include "cuda/decode_arms.hpp"
#include "cuda/decode_model.hpp"
#include "cuda/decode_report.hpp"
#include "cuda/gemv_moe.hpp"
#include "support/expect_error.hpp"
#include "support/traces.hpp"

#include <wisp/cache/lfu.hpp>
#include <wisp/cache/lru.hpp>
#include <wisp/core/detail/json.hpp>
#include <wisp/kernel/reference_moe.hpp>
#include <wisp/pager/llama_cpp_cache.hpp>
#include <wisp/pager/pager.hpp>
#include <wisp/trace/jsonl.hpp>
#include <wisp/trace/synthetic.hpp>
#include <wisp/transfer/device_profile.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <list>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace {

namespace wb = wisp::bench;
using wisp::test::expect_error;

constexpr std::uint64_t gib = std::uint64_t{1} << 30;

// ---- models and routing ------------------------------------------------------------------------

TEST(DecodeModel, ShapesAreThePublishedOnes) {
  const wb::decode_model d = wb::decode_model_named("deepseek-v2-lite");
  EXPECT_EQ(d.shape, (wisp::moe_shape{26, 64, 6}));
  EXPECT_EQ(d.expert.hidden, 2048);
  EXPECT_EQ(d.expert.intermediate, 1408);
  EXPECT_EQ(d.expert_bytes(), std::size_t{33} << 19);             // 16.5 MiB
  EXPECT_EQ(d.model_bytes(), std::uint64_t{26 * 64 * 33} << 19);  // 26 x 64 x 16.5 MiB
  EXPECT_EQ(d.routing, "esft");
  const wb::decode_model q = wb::decode_model_named("qwen3-30b-a3b");
  EXPECT_EQ(q.shape, (wisp::moe_shape{48, 128, 8}));
  EXPECT_EQ(q.expert_bytes(), std::size_t{9} << 20);  // 9 MiB
  EXPECT_EQ(q.model_bytes(), std::uint64_t{54} * gib);
  expect_error([] { (void)wb::decode_model_named("mixtral-8x7b"); }, "mixtral-8x7b",
               "deepseek-v2-lite");
}

// gpt-oss-20b's config.json: 24 layers of 32 experts, top-4, hidden and expert width 2880; its
// MXFP4 experts are stored as bf16 here.
TEST(DecodeModel, GptOss20bIsItsPublishedShapeInBf16) {
  const wb::decode_model g = wb::decode_model_named("gpt-oss-20b");
  EXPECT_EQ(g.shape, (wisp::moe_shape{24, 32, 4}));
  EXPECT_EQ(g.expert.hidden, 2880);
  EXPECT_EQ(g.expert.intermediate, 2880);
  EXPECT_EQ(g.expert_bytes(), std::size_t{3} * 2880 * 2880 * 2);
  EXPECT_EQ(g.routing, "gptoss");
}

TEST(DecodeModel, WindowAndBudgetsAreChecked) {
  wb::decode_window w;
  EXPECT_NO_THROW(w.validate());
  EXPECT_EQ(w.first_device_token(), w.history - w.warmup);
  EXPECT_EQ(w.tokens(), w.history + w.timed + w.verify);
  w.warmup = w.history + 1;
  expect_error([&] { w.validate(); }, "warm-up");
  const wisp::moe_shape deepseek{26, 64, 6};
  EXPECT_EQ(wb::budget_capacity(deepseek, 0.25), 16);
  EXPECT_EQ(wb::budget_capacity(deepseek, 0.5), 32);
  EXPECT_EQ(wb::budget_capacity({48, 128, 8}, 0.25), 32);
  EXPECT_EQ(wb::budget_capacity({48, 128, 8}, 0.5), 64);
  EXPECT_EQ(wb::budget_capacity(deepseek, 0.01), 6);  // at least one token's call
  expect_error([&] { (void)wb::budget_capacity(deepseek, 1.5); }, "1.5");
}

TEST(DecodeRouting, DeepSeekIsTheEsftTraceInCanonicalOrder) {
  const std::optional<wisp::routing_trace> esft = wisp::test::esft_trace();
  WISP_TEST_NEEDS_TRACE(esft.has_value());
  const wb::decode_model m = wb::decode_model_named("deepseek-v2-lite");
  const wb::decode_routing r =
      wb::load_decode_routing(m, wisp::test::esft_dir().parent_path().parent_path(), 300);
  EXPECT_NE(r.source.find("ESFT"), std::string::npos);
  EXPECT_EQ(r.source.find("ABSENT"), std::string::npos);
  ASSERT_EQ(r.ids.size(), std::size_t{300} * 26 * 6);
  for (std::int32_t t = 0; t < 300; ++t) {
    for (std::int32_t l = 0; l < 26; ++l) {
      for (std::int32_t j = 0; j < 6; ++j) {
        ASSERT_EQ(r.ids_of(t, l)[static_cast<std::size_t>(j)],
                  esft->expert(static_cast<std::size_t>(t), l, j));
        ASSERT_EQ(r.weights[r.offset(t, l) + static_cast<std::size_t>(j)],
                  esft->weight(static_cast<std::size_t>(t), l, j));
      }
    }
  }
  expect_error(
      [&] {
        (void)wb::load_decode_routing(m, wisp::test::esft_dir().parent_path().parent_path(), 9000);
      },
      "9000", "8222");
}

// A token's position is its distance from the latest sequence start at or before it.
void expect_positions_restart_at_every_sequence(const wb::decode_routing& r,
                                                const wisp::routing_trace& t) {
  const auto starts = t.sequence_starts();
  ASSERT_EQ(r.positions.size(), static_cast<std::size_t>(r.tokens));
  std::size_t restarts = 0;
  for (std::int32_t tok = 0; tok < r.tokens; ++tok) {
    const auto s = static_cast<std::size_t>(tok);
    const auto start = *(std::upper_bound(starts.begin(), starts.end(), s) - 1);
    ASSERT_EQ(r.position_of(tok), s - start) << "token " << tok;
    restarts += r.position_of(tok) == 0 ? 1 : 0;
  }
  EXPECT_GE(restarts, 2u) << "the window should cross a sequence start";
}

TEST(DecodeRouting, EsftPositionsRestartAtEverySequence) {
  const std::optional<wisp::routing_trace> esft = wisp::test::esft_trace();
  WISP_TEST_NEEDS_TRACE(esft.has_value());
  const wb::decode_routing r = wb::load_decode_routing(wb::decode_model_named("deepseek-v2-lite"),
                                                       wisp::test::traces_dir(), 300);
  expect_positions_restart_at_every_sequence(r, *esft);
  // first_layers keeps them.
  EXPECT_EQ(wb::first_layers(r, 3).positions, r.positions);
}

TEST(DecodeRouting, GptOssIsItsDecodeTraceInFileOrder) {
  WISP_TEST_NEEDS_TRACE(std::filesystem::is_regular_file(wisp::test::gptoss_file()));
  wisp::jsonl_config c;
  c.group_key = "request";
  const wisp::routing_trace t = wisp::import_jsonl(wisp::test::gptoss_file(), c).trace;
  const wb::decode_routing r = wb::load_decode_routing(wb::decode_model_named("gpt-oss-20b"),
                                                       wisp::test::traces_dir(), 1200);
  EXPECT_NE(r.source.find("gpt-oss-20b decode trace"), std::string::npos) << r.source;
  ASSERT_EQ(r.shape, (wisp::moe_shape{24, 32, 4}));
  for (std::int32_t tok = 0; tok < 1200; ++tok) {
    for (std::int32_t l = 0; l < 24; ++l) {
      for (std::int32_t j = 0; j < 4; ++j) {
        ASSERT_EQ(r.ids_of(tok, l)[static_cast<std::size_t>(j)],
                  t.expert(static_cast<std::size_t>(tok), l, j));
      }
    }
  }
  expect_positions_restart_at_every_sequence(r, t);
}

TEST(DecodeRouting, WithoutItsTraceGptOssSaysItIsSynthetic) {
  const wb::decode_routing r =
      wb::load_decode_routing(wb::decode_model_named("gpt-oss-20b"), "/nonexistent", 50);
  EXPECT_NE(r.source.find("ABSENT"), std::string::npos) << r.source;
  EXPECT_EQ(r.shape, (wisp::moe_shape{24, 32, 4}));
}

TEST(DecodeRouting, WithoutTheEsftFolderDeepSeekSaysItIsSynthetic) {
  const wb::decode_routing r =
      wb::load_decode_routing(wb::decode_model_named("deepseek-v2-lite"), "/nonexistent", 50);
  EXPECT_NE(r.source.find("ESFT ABSENT"), std::string::npos) << r.source;
  EXPECT_EQ(r.shape, (wisp::moe_shape{26, 64, 6}));
}

// Qwen3-30B-A3B is routed by the synthetic router's preset of that name: the ESFT-calibrated
// dynamics at its shape, with default gate weights.
TEST(DecodeRouting, Qwen3IsTheSyntheticPresetAtItsShape) {
  const wb::decode_routing r =
      wb::load_decode_routing(wb::decode_model_named("qwen3-30b-a3b"), "/nonexistent", 400);
  const wisp::routing_trace t =
      wisp::make_synthetic_trace(wisp::synthetic_preset("qwen3-30b-a3b"), 400, 1);
  ASSERT_EQ(r.shape, (wisp::moe_shape{48, 128, 8}));
  for (std::int32_t s = 0; s < 400; ++s) {
    for (std::int32_t l = 0; l < 48; ++l) {
      float sum = 0;
      for (std::int32_t j = 0; j < 8; ++j) {
        ASSERT_EQ(r.ids_of(s, l)[static_cast<std::size_t>(j)],
                  t.expert(static_cast<std::size_t>(s), l, j));
        sum += r.weights[r.offset(s, l) + static_cast<std::size_t>(j)];
      }
      ASSERT_NEAR(sum, 1.0f, 1e-6f);
    }
  }
  EXPECT_NE(r.source.find("synthetic"), std::string::npos);
}

// Per-layer LRU over a routing, by a brute-force list per layer: {hits, accesses}.
std::pair<std::uint64_t, std::uint64_t> lru_counts(const wb::decode_routing& r,
                                                   std::int32_t capacity) {
  std::uint64_t hits = 0;
  std::uint64_t accesses = 0;
  std::vector<std::list<std::int32_t>> lists(static_cast<std::size_t>(r.shape.layers));
  for (std::int32_t t = 0; t < r.tokens; ++t) {
    for (std::int32_t l = 0; l < r.shape.layers; ++l) {
      std::list<std::int32_t>& lru = lists[static_cast<std::size_t>(l)];
      const auto ids = r.ids_of(t, l);
      for (const std::int32_t e : ids) {
        const auto it = std::find(lru.begin(), lru.end(), e);
        ++accesses;
        if (it != lru.end()) {
          ++hits;
          lru.erase(it);
        }
      }
      for (const std::int32_t e : ids) {  // the call's experts, most recent last
        lru.push_back(e);
      }
      while (static_cast<std::int32_t>(lru.size()) > capacity) {
        lru.pop_front();
      }
    }
  }
  return {hits, accesses};
}

double lru_hit_rate(const wb::decode_routing& r, std::int32_t capacity) {
  const auto [hits, accesses] = lru_counts(r, capacity);
  return static_cast<double>(hits) / static_cast<double>(accesses);
}

// The Qwen3 routing has the working-set locality it is meant to have: per-layer LRU at each budget
// hits well above a router without locality of the same shape, and in the range ESFT gives at the
// same fraction of its experts.
TEST(DecodeRouting, Qwen3RoutingHasTheLocalityOfTheCalibratedRouter) {
  const wb::decode_routing qwen =
      wb::load_decode_routing(wb::decode_model_named("qwen3-30b-a3b"), "/nonexistent", 600);
  auto flat = wisp::synthetic_preset("uniform");
  flat.layers = 48;
  flat.experts = 128;
  flat.top_k = 8;
  const wb::decode_routing uniform =
      wb::routing_from_trace(wisp::make_synthetic_trace(flat, 600, 1), 600, "uniform");
  for (const double fraction : {0.25, 0.5}) {
    const std::int32_t c = wb::budget_capacity(qwen.shape, fraction);
    const double q = lru_hit_rate(qwen, c);
    const double u = lru_hit_rate(uniform, c);
    EXPECT_GT(q, u + 0.1) << "fraction " << fraction << ": qwen3 " << q << ", uniform " << u;
    EXPECT_GT(q, 0.3) << fraction;
    EXPECT_LT(q, 0.95) << fraction;
  }
}

TEST(DecodeRouting, FirstLayersKeepsEachTokensFirstLayers) {
  const wb::decode_routing r =
      wb::load_decode_routing(wb::decode_model_named("tiny"), "/nonexistent", 20);
  const wb::decode_routing two = wb::first_layers(r, 2);
  ASSERT_EQ(two.shape, (wisp::moe_shape{2, 16, 2}));
  for (std::int32_t t = 0; t < 20; ++t) {
    for (std::int32_t l = 0; l < 2; ++l) {
      EXPECT_TRUE(std::ranges::equal(two.ids_of(t, l), r.ids_of(t, l)));
    }
  }
  expect_error([&] { (void)wb::first_layers(r, 5); }, "5 layers");
}

TEST(DecodeModel, ExpertValuesAreDeterministicBoundedAndDistinct) {
  const wisp::swiglu_shape s{2048, 1408};
  const float gate_scale = 3.0f / std::sqrt(2048.0f);
  const float down_scale = 3.0f / std::sqrt(1408.0f);
  double sum = 0;
  std::set<std::uint16_t> seen;
  for (std::uint64_t i = 0; i < 4096; ++i) {
    const float g = wisp::to_float(wb::master_value(s, 3, 7, i));
    const float d = wisp::to_float(wb::master_value(s, 3, 7, 2 * s.matrix_values() + i));
    EXPECT_EQ(wb::master_value(s, 3, 7, i).bits, wb::master_value(s, 3, 7, i).bits);
    EXPECT_LE(std::abs(g), gate_scale * 1.004f);
    EXPECT_LE(std::abs(d), down_scale * 1.004f);
    sum += g;
    seen.insert(wb::master_value(s, 3, 7, i).bits);
    const float h = wisp::to_float(wb::hidden_value(2, i));
    EXPECT_GE(h, -1.0f);
    EXPECT_LE(h, 1.0f);
  }
  EXPECT_LT(std::abs(sum / 4096), gate_scale * 0.1);
  EXPECT_GT(seen.size(), 1000u);
  std::int32_t differ = 0;
  for (std::uint64_t i = 0; i < 64; ++i) {
    differ += wb::master_value(s, 3, 7, i).bits != wb::master_value(s, 3, 8, i).bits ? 1 : 0;
    differ += wb::master_value(s, 3, 7, i).bits != wb::master_value(s, 4, 7, i).bits ? 1 : 0;
  }
  EXPECT_GT(differ, 100);
}

// ---- the memory plan
// -----------------------------------------------------------------------------

wb::memory_request request(std::uint64_t host, std::uint64_t device) {
  return {wb::decode_model_named("qwen3-30b-a3b"),
          {0.25, 0.5},
          host,
          16 * gib,
          device,
          2 * gib,
          256u << 20};
}

// The oracle: the most layers whose masters fit the host and whose budget arms fit the device;
// all-resident when that many layers' experts fit too.
struct brute_plan {
  std::int32_t layers = 0;
  bool all_resident = false;
};
brute_plan brute(const wb::memory_request& r) {
  const std::uint64_t row = r.model.expert_bytes();
  const auto usable = [](std::uint64_t a, std::uint64_t b) { return a > b ? a - b : 0; };
  const std::uint64_t device = usable(r.device_available, r.device_reserve);
  for (std::int32_t l = r.model.shape.layers; l >= 1; --l) {
    const auto layers = static_cast<std::uint64_t>(l);
    const std::uint64_t budget = std::max<std::uint64_t>(layers * 64, 128) * row + r.device_fixed;
    if (layers * r.model.layer_bytes() <= usable(r.host_available, r.host_reserve) &&
        budget <= device) {
      return {l, layers * 128 * row + r.device_fixed <= device};
    }
  }
  return {};
}

TEST(MemoryPlan, TakesEveryLayerAndAllResidentWhenTheyFit) {
  const wb::memory_plan p = wb::plan_memory(request(128 * gib, 80 * gib));
  EXPECT_EQ(p.layers, 48);
  EXPECT_TRUE(p.all_resident);
  EXPECT_EQ(p.arena_rows, 48u * 128);
  EXPECT_EQ(p.host_bytes, 54 * gib);
  EXPECT_TRUE(p.note.empty()) << p.note;
}

TEST(MemoryPlan, ShrinksToWhatFitsLikeABruteForceSearch) {
  for (const std::uint64_t host : {20 * gib, 40 * gib, 70 * gib, 128 * gib}) {
    for (const std::uint64_t device : {4 * gib, 10 * gib, 30 * gib, 40 * gib, 60 * gib, 80 * gib}) {
      const wb::memory_request r = request(host, device);
      const brute_plan want = brute(r);
      const wb::memory_plan p = wb::plan_memory(r);
      EXPECT_EQ(p.layers, want.layers)
          << host / gib << " GiB host, " << device / gib << " GiB device";
      EXPECT_EQ(p.all_resident, want.all_resident) << host / gib << " " << device / gib;
      EXPECT_LE(p.device_bytes, device - 2 * gib);
      EXPECT_LE(p.host_bytes, host - 16 * gib);
      EXPECT_EQ(p.note.empty(), p.layers == 48 && p.all_resident) << p.note;
    }
  }
}

TEST(MemoryPlan, SaysWhatDoesNotFitWithTheSizes) {
  expect_error<wisp::out_of_memory>([] { (void)wb::plan_memory(request(17 * gib, 80 * gib)); },
                                    "one layer", "17.00 GiB");
  expect_error<wisp::out_of_memory>([] { (void)wb::plan_memory(request(128 * gib, 2 * gib)); },
                                    "device memory");
}

TEST(MemoryPlan, AfterAFailedAllocationTheNextPlanIsSmaller) {
  const wb::memory_request r = request(128 * gib, 80 * gib);
  const wb::memory_plan first = wb::plan_memory(r);
  // Pinning failed at layer 30: at most 30 layers.
  const wb::memory_plan host =
      wb::plan_after_failure(r, first, 30, 80 * gib, "pinning layer 30 failed");
  EXPECT_EQ(host.layers, 30);
  EXPECT_NE(host.note.find("pinning layer 30 failed"), std::string::npos);
  // The arena failed although the device said it had room: ask for less, all-resident first.
  const wb::memory_plan device =
      wb::plan_after_failure(r, first, 48, 80 * gib, "cudaMalloc failed");
  EXPECT_EQ(device.layers, 48);
  EXPECT_FALSE(device.all_resident);
  EXPECT_LT(device.device_bytes, first.device_bytes);
  // Again and again: every plan is smaller, until nothing fits.
  wb::memory_plan p = device;
  std::int32_t steps = 0;
  try {
    while (true) {
      const wb::memory_plan next = wb::plan_after_failure(r, p, p.layers, 80 * gib, "again");
      ASSERT_TRUE(next.layers < p.layers || next.arena_rows < p.arena_rows);
      p = next;
      ++steps;
    }
  } catch (const wisp::out_of_memory&) {
  }
  EXPECT_GT(steps, 10);
  EXPECT_EQ(p.arena_rows, 128u);  // the least any plan asks: one layer's experts
}

// ---- the arms --------------------------------------------------------------------------------

class EsftArms : public ::testing::TestWithParam<double> {
 protected:
  static void SetUpTestSuite() {
    if (std::filesystem::is_directory(wisp::test::esft_dir())) {
      routing_ = std::make_unique<wb::decode_routing>(
          wb::load_decode_routing(wb::decode_model_named("deepseek-v2-lite"), esft_root(), tokens));
    }
  }
  static void TearDownTestSuite() { routing_.reset(); }
  void SetUp() override { WISP_TEST_NEEDS_TRACE(routing_ != nullptr); }
  static std::filesystem::path esft_root() {
    return wisp::test::esft_dir().parent_path().parent_path();
  }
  [[nodiscard]] std::int32_t capacity() const {
    return wb::budget_capacity(routing_->shape, GetParam());
  }
  [[nodiscard]] std::int64_t budget_rows() const {
    return static_cast<std::int64_t>(capacity()) * routing_->shape.layers;
  }
  // Replays the rule with the mirror check on every call; the rows it uses stay in its budget.
  template <class Rule>
  wb::call_totals checked_replay(Rule& rule, std::int64_t rows) const {
    wb::arena_mirror mirror = wb::preloaded(rule, rows, routing_->shape);
    return wb::replay(rule, mirror, *routing_, 0, tokens, true);
  }
  // Replays wisp-graph's host mirror of the device step (`rule`), with the mirror check on every
  // call, against `host(layer, ids)`, the host side's decision for the same call (a layer_call;
  // layer 0 starts a token): every map, copy list, hit count and view must be equal.
  template <class Host>
  void expect_graph_rule_equals(wb::device_step_rule& rule, Host host) const {
    const wisp::moe_shape s = routing_->shape;
    wb::arena_mirror mirror(rule.arena_rows(), s);
    for (std::int32_t t = 0; t < tokens; ++t) {
      for (std::int32_t l = 0; l < s.layers; ++l) {
        const auto ids = routing_->ids_of(t, l);
        const wb::layer_call c = rule.call(l, ids);
        mirror.apply(l, c);
        ASSERT_EQ(mirror.check(l, c, ids), "") << "token " << t;
        const wb::layer_call p = host(l, ids);
        ASSERT_TRUE(std::ranges::equal(c.map, p.map)) << "token " << t << " layer " << l;
        ASSERT_TRUE(std::ranges::equal(c.copies, p.copies)) << "token " << t << " layer " << l;
        ASSERT_EQ(c.hits, p.hits) << "token " << t << " layer " << l;
        ASSERT_EQ(c.first_row, p.first_row) << "token " << t << " layer " << l;
      }
    }
  }
  static constexpr std::int32_t tokens = 1000;
  static std::unique_ptr<wb::decode_routing> routing_;
};
std::unique_ptr<wb::decode_routing> EsftArms::routing_;

INSTANTIATE_TEST_SUITE_P(Budgets, EsftArms, ::testing::Values(0.25, 0.5),
                         [](const auto& info) { return info.param == 0.25 ? "quarter" : "half"; });

std::set<std::int32_t> distinct_of(std::span<const std::int32_t> ids) {
  return {ids.begin(), ids.end()};
}

TEST_P(EsftArms, WispEqualsThePagerCallByCall) {
  const wisp::moe_shape s = routing_->shape;
  for (const std::string_view policy : {std::string_view("lru"), std::string_view("lfu_history"),
                                        std::string_view("learned_belady")}) {
    wb::visit_wisp_policy(policy, [&]<class P>(std::type_identity<P>) {
      wb::pager_rule<P> rule(s, capacity());
      wisp::pager<P> pager(
          {.layers = s.layers, .experts = s.experts, .top_k = s.top_k, .capacity = capacity()});
      wb::arena_mirror mirror(rule.arena_rows(), s);
      ASSERT_LE(rule.arena_rows(), budget_rows());
      for (std::int32_t t = 0; t < tokens; ++t) {
        rule.begin_token(routing_->position_of(t));
        pager.begin_step();
        for (std::int32_t l = 0; l < s.layers; ++l) {
          const auto ids = routing_->ids_of(t, l);
          const wb::layer_call c = rule.call(l, ids);
          mirror.apply(l, c);
          ASSERT_EQ(mirror.check(l, c, ids), "") << policy << " token " << t;
          const std::uint32_t position = routing_->position_of(t);
          const wisp::prepare_result p =
              pager.prepare(l, ids, 1, s.top_k, std::span<const std::uint32_t>(&position, 1));
          ASSERT_TRUE(std::ranges::equal(c.map, p.expert_map)) << policy << " token " << t;
          ASSERT_TRUE(std::ranges::equal(c.copies, p.copy_plan)) << policy << " token " << t;
          ASSERT_EQ(c.first_row, static_cast<std::int64_t>(l) * capacity());
          ASSERT_EQ(c.hits + c.misses, static_cast<std::int32_t>(distinct_of(ids).size()));
        }
      }
    });
  }
}

TEST_P(EsftArms, WispGraphsHostMirrorEqualsPagerLru) {
  const wisp::moe_shape s = routing_->shape;
  wb::device_step_rule rule(s, capacity());
  wisp::pager<wisp::lru> pager(
      {.layers = s.layers, .experts = s.experts, .top_k = s.top_k, .capacity = capacity()});
  expect_graph_rule_equals(rule, [&](std::int32_t l, std::span<const std::int32_t> ids) {
    if (l == 0) {
      pager.begin_step();
    }
    const wisp::prepare_result p = pager.prepare(l, ids, 1, s.top_k);
    wb::layer_call c;
    c.map = p.expert_map;
    c.copies = p.copy_plan;
    c.first_row = static_cast<std::int64_t>(l) * capacity();
    c.hits = p.hits;
    return c;
  });
}

// Where the wisp arm picks lfu_history (ESFT at both budgets), wisp-graph's device step runs
// lfu_history too, and decides exactly as the host pager: same maps, copies, hits, call by call.
TEST_P(EsftArms, WispGraphUnderLfuHistoryEqualsPagerLfuHistory) {
  const wisp::moe_shape s = routing_->shape;
  const wb::graph_policy graph = wb::graph_policy_for(wisp::lfu_history::name);
  ASSERT_EQ(graph.policy, wisp::cuda::step_policy::lfu_history);
  ASSERT_EQ(graph.note, "");
  wb::device_step_rule rule(s, capacity(), graph.policy);
  wb::pager_rule<wisp::lfu_history> host(s, capacity());
  wb::arena_mirror host_mirror(host.arena_rows(), s);
  expect_graph_rule_equals(rule, [&](std::int32_t l, std::span<const std::int32_t> ids) {
    if (l == 0) {
      host.begin_token(0);
    }
    const wb::layer_call p = host.call(l, ids);
    host_mirror.apply(l, p);
    return p;
  });
}

TEST(GraphPolicy, EachHostPolicyMapsToTheDeviceStepOrSaysItFallsBack) {
  EXPECT_EQ(wb::graph_policy_for("lru").policy, wisp::cuda::step_policy::lru);
  EXPECT_EQ(wb::graph_policy_for("least_stale").policy, wisp::cuda::step_policy::lru);
  EXPECT_EQ(wb::graph_policy_for("least_stale").note, "");
  EXPECT_EQ(wb::graph_policy_for("lfu_history").policy, wisp::cuda::step_policy::lfu_history);
  for (const std::string_view other : {"lfru", "lfu", "fifo"}) {
    const wb::graph_policy g = wb::graph_policy_for(other);
    EXPECT_EQ(g.policy, wisp::cuda::step_policy::lru) << other;
    EXPECT_NE(g.note.find(std::string(other)), std::string::npos) << g.note;
    EXPECT_NE(g.note.find("lru instead"), std::string::npos) << g.note;
  }
  for (const wb::decode_arm a : wb::decode_arms) {
    EXPECT_EQ(wb::arm_named(wb::arm_name(a)), a);
  }
  expect_error([] { (void)wb::arm_named("wisp_graph"); }, "unknown arm 'wisp_graph'", "wisp-graph");
}

TEST_P(EsftArms, LlamaCppCacheEqualsTheCacheCallByCall) {
  const wisp::moe_shape s = routing_->shape;
  wb::llama_rule rule(s, capacity());
  wisp::llama_cpp_cache cache({.layers = s.layers,
                               .experts = s.experts,
                               .top_k = s.top_k,
                               .capacity = capacity() * s.layers});
  wb::arena_mirror mirror(rule.arena_rows(), s);
  ASSERT_EQ(rule.arena_rows(), budget_rows());
  std::uint64_t runs = 0;
  for (std::int32_t t = 0; t < tokens; ++t) {
    for (std::int32_t l = 0; l < s.layers; ++l) {
      const auto ids = routing_->ids_of(t, l);
      const wb::layer_call c = rule.call(l, ids);
      mirror.apply(l, c);
      ASSERT_EQ(mirror.check(l, c, ids), "") << "token " << t;
      const wisp::llama_cpp_plan p = cache.plan(l, ids, 1);
      ASSERT_TRUE(std::ranges::equal(c.copies, p.uploads)) << "token " << t;
      ASSERT_TRUE(std::ranges::equal(c.map, p.expert_map)) << "token " << t;
      ASSERT_EQ(c.hits, p.hits);
      // Misses go in ascending expert order (llama.cpp's rule).
      ASSERT_TRUE(std::ranges::is_sorted(c.copies, {}, &wisp::copy_op::expert));
      runs += static_cast<std::uint64_t>(p.upload_runs);
    }
  }
  EXPECT_EQ(rule.upload_runs(), runs);
}

TEST_P(EsftArms, StaticHotPinsTheHistorysHottestAndStagesTheRest) {
  const wisp::moe_shape s = routing_->shape;
  const std::vector<std::uint64_t> counts = wb::expert_counts(*routing_, 0, tokens / 2);
  wb::static_hot_rule rule(s, capacity(), s.top_k, counts);
  ASSERT_LE(rule.arena_rows(), budget_rows());
  // Brute force: per layer, the hot set is the capacity - k most counted (ties: lower id).
  for (std::int32_t l = 0; l < s.layers; ++l) {
    std::vector<std::pair<std::int64_t, std::int32_t>> ranked;  // (-count, expert)
    std::vector<std::uint64_t> count(static_cast<std::size_t>(s.experts), 0);
    for (std::int32_t t = 0; t < tokens / 2; ++t) {
      for (const std::int32_t e : routing_->ids_of(t, l)) {
        ++count[static_cast<std::size_t>(e)];
      }
    }
    for (std::int32_t e = 0; e < s.experts; ++e) {
      ranked.emplace_back(-static_cast<std::int64_t>(count[static_cast<std::size_t>(e)]), e);
    }
    std::sort(ranked.begin(), ranked.end());
    for (std::int32_t i = 0; i < s.experts; ++i) {
      EXPECT_EQ(rule.hot(l, ranked[static_cast<std::size_t>(i)].second), i < capacity() - s.top_k)
          << "layer " << l << " rank " << i;
    }
  }
  wb::arena_mirror mirror = wb::preloaded(rule, rule.arena_rows(), s);
  std::uint64_t hits = 0;
  std::uint64_t brute_hits = 0;
  for (std::int32_t t = 0; t < tokens; ++t) {
    for (std::int32_t l = 0; l < s.layers; ++l) {
      const auto ids = routing_->ids_of(t, l);
      const wb::layer_call c = rule.call(l, ids);
      mirror.apply(l, c);
      ASSERT_EQ(mirror.check(l, c, ids), "") << "token " << t;
      hits += static_cast<std::uint64_t>(c.hits);
      for (const std::int32_t e : distinct_of(ids)) {
        brute_hits += rule.hot(l, e) ? 1u : 0u;
      }
      ASSERT_EQ(c.misses, static_cast<std::int32_t>(c.copies.size()));
    }
  }
  EXPECT_EQ(hits, brute_hits);
  EXPECT_GT(hits, 0u);
}

TEST_P(EsftArms, OnDemandCopiesEveryRoutedExpertEveryCall) {
  const wisp::moe_shape s = routing_->shape;
  wb::on_demand_rule rule(s, s.top_k);
  const wb::call_totals totals = checked_replay(rule, rule.arena_rows());
  EXPECT_EQ(totals.hits, 0u);
  EXPECT_EQ(totals.misses, static_cast<std::uint64_t>(tokens) * s.layers * s.top_k);
  EXPECT_EQ(totals.link_rows, totals.misses);
}

TEST_P(EsftArms, LayerOffloadKeepsWholeLayersAndReadsTheRestOverTheLink) {
  const wisp::moe_shape s = routing_->shape;
  wb::offload_rule rule(s, capacity());
  const std::int32_t resident = static_cast<std::int32_t>(budget_rows() / s.experts);
  EXPECT_EQ(rule.resident_layers(), resident);
  EXPECT_LE(rule.arena_rows(), budget_rows());
  const wb::call_totals totals = checked_replay(rule, rule.arena_rows());
  const auto calls = static_cast<std::uint64_t>(tokens) * static_cast<std::uint64_t>(s.top_k);
  EXPECT_EQ(totals.hits, calls * static_cast<std::uint64_t>(resident));
  EXPECT_EQ(totals.misses, calls * static_cast<std::uint64_t>(s.layers - resident));
  EXPECT_EQ(totals.link_rows, totals.misses);
}

TEST_P(EsftArms, CpuMoeLayersComputesTheFirstLayersOnTheHost) {
  const wisp::moe_shape s = routing_->shape;
  wb::cpu_moe_layers_rule rule(s, capacity());
  const std::int32_t resident = static_cast<std::int32_t>(budget_rows() / s.experts);
  EXPECT_EQ(rule.host_layers(), s.layers - resident);
  EXPECT_LE(rule.arena_rows(), budget_rows());
  const wb::call_totals totals = checked_replay(rule, rule.arena_rows());
  const auto calls = static_cast<std::uint64_t>(tokens) * static_cast<std::uint64_t>(s.top_k);
  EXPECT_EQ(totals.hits, calls * static_cast<std::uint64_t>(resident));
  EXPECT_EQ(totals.host_experts, calls * static_cast<std::uint64_t>(s.layers - resident));
  EXPECT_EQ(totals.misses, totals.host_experts);
  EXPECT_EQ(totals.link_rows, 0u);
  // The host's layers are the first ones, whole.
  const wb::layer_call first = rule.call(0, routing_->ids_of(0, 0));
  EXPECT_EQ(distinct_of(first.host), distinct_of(routing_->ids_of(0, 0)));
  EXPECT_TRUE(std::ranges::all_of(first.map, [](std::int32_t r) { return r < 0; }));
  EXPECT_TRUE(rule.call(s.layers - 1, routing_->ids_of(0, s.layers - 1)).host.empty());
}

TEST_P(EsftArms, CpuExpertsKeepsTheHistorysHottestAndComputesTheRestOnTheHost) {
  const wisp::moe_shape s = routing_->shape;
  const std::vector<std::uint64_t> counts = wb::expert_counts(*routing_, 0, tokens / 2);
  wb::cpu_experts_rule rule(s, capacity(), counts);
  ASSERT_LE(rule.arena_rows(), budget_rows());
  // Brute force: per layer, the resident set is the `capacity` most counted (ties: lower id).
  std::vector<std::set<std::int32_t>> hot(static_cast<std::size_t>(s.layers));
  for (std::int32_t l = 0; l < s.layers; ++l) {
    std::vector<std::pair<std::int64_t, std::int32_t>> ranked;  // (-count, expert)
    for (std::int32_t e = 0; e < s.experts; ++e) {
      ranked.emplace_back(
          -static_cast<std::int64_t>(counts[static_cast<std::size_t>(l * s.experts + e)]), e);
    }
    std::sort(ranked.begin(), ranked.end());
    for (std::int32_t i = 0; i < capacity(); ++i) {
      hot[static_cast<std::size_t>(l)].insert(ranked[static_cast<std::size_t>(i)].second);
    }
  }
  wb::arena_mirror mirror = wb::preloaded(rule, rule.arena_rows(), s);
  wb::call_totals totals;
  for (std::int32_t t = 0; t < tokens; ++t) {
    for (std::int32_t l = 0; l < s.layers; ++l) {
      const auto ids = routing_->ids_of(t, l);
      const wb::layer_call c = rule.call(l, ids);
      mirror.apply(l, c);
      ASSERT_EQ(mirror.check(l, c, ids), "") << "token " << t;
      ASSERT_TRUE(c.copies.empty());
      std::set<std::int32_t> want_host;
      for (const std::int32_t e : distinct_of(ids)) {
        if (!hot[static_cast<std::size_t>(l)].contains(e)) {
          want_host.insert(e);
        }
      }
      ASSERT_EQ(distinct_of(c.host), want_host) << "token " << t << " layer " << l;
      totals += c;
    }
  }
  EXPECT_EQ(totals.link_rows, 0u);
  EXPECT_EQ(totals.misses, totals.host_experts);
  EXPECT_GT(totals.hits, 0u);
  EXPECT_GT(totals.host_experts, 0u);
}

// pager+hybrid against `pager_rule` under the same policy, call by call: with `every_miss_copied`
// the calls must be equal (every miss copied), else every miss must go to the host and the cache
// stay empty.
template <class P>
void expect_hybrid(const wb::decode_routing& r, std::int32_t capacity, std::int32_t tokens,
                   const wisp::hybrid_cost_model& cost, bool every_miss_copied) {
  const wisp::moe_shape s = r.shape;
  wb::hybrid_pager_rule<P> rule(s, capacity, cost);
  wb::pager_rule<P> pager(s, capacity);
  wb::arena_mirror mirror(rule.arena_rows(), s);
  for (std::int32_t t = 0; t < tokens; ++t) {
    rule.begin_token(r.position_of(t));
    pager.begin_token(r.position_of(t));
    for (std::int32_t l = 0; l < s.layers; ++l) {
      const auto ids = r.ids_of(t, l);
      const wb::layer_call c = rule.call(l, ids);
      mirror.apply(l, c);
      ASSERT_EQ(mirror.check(l, c, ids), "") << P::name << " token " << t;
      ASSERT_EQ(c.hits + c.misses, static_cast<std::int32_t>(distinct_of(ids).size()));
      ASSERT_EQ(c.link_rows, static_cast<std::int32_t>(c.copies.size()));
      if (every_miss_copied) {
        const wb::layer_call p = pager.call(l, ids);
        ASSERT_TRUE(c.host.empty()) << P::name << " token " << t << " layer " << l;
        ASSERT_TRUE(std::ranges::equal(c.map, p.map)) << P::name << " token " << t;
        ASSERT_TRUE(std::ranges::equal(c.copies, p.copies)) << P::name << " token " << t;
        ASSERT_EQ(c.hits, p.hits);
      } else {
        ASSERT_EQ(c.hits, 0);
        ASSERT_TRUE(c.copies.empty());
        ASSERT_EQ(distinct_of(c.host), distinct_of(ids));
      }
    }
  }
}

TEST_P(EsftArms, PagerHybridCopiesEveryMissWhenTheLinkIsFreeAndComputesItWhenTheHostIs) {
  for (const std::string_view policy :
       {std::string_view("lru"), std::string_view("learned_belady")}) {
    wb::visit_wisp_policy(policy, [&]<class P>(std::type_identity<P>) {
      // Copies cost nothing, the host a second: every miss is copied, as the pager copies it.
      expect_hybrid<P>(
          *routing_, capacity(), tokens,
          {.copy_seconds = 0, .expert_seconds = 1, .position_seconds = 0, .call_seconds = 0}, true);
      // The host costs nothing, a copy a second: every miss is computed by the host.
      expect_hybrid<P>(
          *routing_, capacity(), tokens / 10,
          {.copy_seconds = 1, .expert_seconds = 0, .position_seconds = 0, .call_seconds = 0},
          false);
    });
  }
}

TEST_P(EsftArms, PagerHybridAtTheH200sRatesBothCopiesAndComputes) {
  const wisp::moe_shape s = routing_->shape;
  // An expert row (17.3 MB) at 55 GB/s over the link, at 61 GB/s on the host's 16 threads.
  const wisp::hybrid_cost_model cost{.copy_seconds = 320e-6,
                                     .expert_seconds = 280e-6,
                                     .position_seconds = 30e-6,
                                     .call_seconds = 20e-6};
  wb::hybrid_pager_rule<wisp::lru> rule(s, capacity(), cost);
  const wb::call_totals totals = checked_replay(rule, rule.arena_rows());
  EXPECT_GT(totals.link_rows, 0u);
  EXPECT_GT(totals.host_experts, 0u);
  EXPECT_GT(totals.hits, 0u);
  EXPECT_EQ(totals.misses, totals.link_rows + totals.host_experts);
}

TEST_P(EsftArms, PagerHybridFollowsTheHostTheDriverTimes) {
  const wisp::moe_shape s = routing_->shape;
  // Costed as if the host took 10 ms an expert: every miss is copied...
  wb::hybrid_pager_rule<wisp::lru> rule(
      s, capacity(),
      {.copy_seconds = 320e-6, .expert_seconds = 10e-3, .position_seconds = 0, .call_seconds = 0});
  wb::arena_mirror mirror(rule.arena_rows(), s);
  EXPECT_EQ(wb::replay(rule, mirror, *routing_, 0, 100, true).host_experts, 0u);
  // ...until the host's calls are timed at 100 us an expert.
  for (int i = 0; i < 200; ++i) {
    rule.observe_host(2, 2, 200e-6);
  }
  EXPECT_NEAR(rule.cost().expert_seconds, 100e-6, 1e-9);
  EXPECT_GT(wb::replay(rule, mirror, *routing_, 100, 200, true).host_experts, 0u);
}

TEST_P(EsftArms, AllResidentHitsEverything) {
  const wisp::moe_shape s = routing_->shape;
  wb::all_resident_rule rule(s);
  const wb::call_totals totals = checked_replay(rule, rule.arena_rows());
  EXPECT_EQ(totals.misses, 0u);
  EXPECT_EQ(totals.link_rows, 0u);
  EXPECT_EQ(totals.hits, static_cast<std::uint64_t>(tokens) * s.layers * s.top_k);
}

TEST_P(EsftArms, ThePolicyChoiceHasTheFewestMisses) {
  const wb::policy_choice choice = wb::choose_wisp_policy(*routing_, capacity(), tokens);
  const auto best = *std::min_element(choice.misses.begin(), choice.misses.end());
  for (std::size_t i = 0; i < wb::wisp_policy_names.size(); ++i) {
    if (wb::wisp_policy_names[i] == choice.name) {
      EXPECT_EQ(choice.misses[i], best);
    }
  }
  // lru's count against a brute-force LRU list per layer.
  const auto [hits, accesses] = lru_counts(*routing_, capacity());
  EXPECT_EQ(wb::wisp_policy_names[0], "lru");
  EXPECT_EQ(choice.misses[0], accesses - hits);
}

// The wisp arm chooses among every online built-in: all of builtin_policy_names but belady.
TEST(PolicyChoice, CandidatesAreEveryOnlineBuiltin) {
  std::vector<std::string_view> want;
  for (const std::string_view name : wisp::builtin_policy_names) {
    if (name != "belady") {
      want.push_back(name);
    }
  }
  EXPECT_TRUE(std::ranges::equal(wb::wisp_policy_names, want));
  EXPECT_NE(std::ranges::find(wb::wisp_policy_names, "learned_belady"),
            wb::wisp_policy_names.end());
  expect_error([] { (void)wb::visit_wisp_policy("belady", [](auto) { return 0; }); }, "online");
  expect_error([] { (void)wb::visit_wisp_policy("nope", [](auto) { return 0; }); }, "nope");
}

// A mirror catches an arm that reads a row holding another expert.
TEST(ArenaMirror, CatchesAWrongRowAndCopiesOnlyWhatDiffers) {
  const wisp::moe_shape s{2, 8, 2};
  wb::arena_mirror m(6, s);
  std::vector<std::int32_t> map(8, -1);
  map[3] = 1;
  map[5] = 2;
  const std::vector<wisp::copy_op> copies{{3, 1}};
  const wb::layer_call c{map, copies, 2, 3, false, 0, 1, 1};
  m.apply(1, c);
  const std::vector<std::int32_t> ids{3, 5};
  EXPECT_NE(m.check(1, c, ids).find("expert 5 is read from arena row 4, which holds nothing"),
            std::string::npos)
      << m.check(1, c, ids);
  m.load({4, 1, 5});
  EXPECT_EQ(m.check(1, c, ids), "");
  EXPECT_NE(m.check(0, c, ids).find("holds expert 3 of layer 1"), std::string::npos);
  const std::vector<std::int32_t> hidden{3, 6};
  EXPECT_NE(m.check(1, c, hidden).find("not visible"), std::string::npos);
  expect_error([&] { m.apply(1, {map, copies, 4, 3, false, 0, 0, 0}); }, "outside the arena");
  // The host's experts: hidden from the kernel, routed by the call, each computed once.
  const std::vector<std::int32_t> host_six{6};
  const std::vector<std::int32_t> routed{3, 5, 6};
  EXPECT_EQ(m.check(1, {map, copies, 2, 3, false, 0, 1, 1, host_six}, routed), "");
  EXPECT_NE(m.check(1, c, routed).find("expert 6 is not visible"), std::string::npos);
  const std::vector<std::int32_t> host_five{5};
  EXPECT_NE(m.check(1, {map, copies, 2, 3, false, 0, 1, 1, host_five}, routed)
                .find("computed by the host and visible to the kernel"),
            std::string::npos);
  EXPECT_NE(m.check(1, {map, copies, 2, 3, false, 0, 1, 1, host_six}, ids)
                .find("the host computes expert 6, which the call does not route"),
            std::string::npos);
  // copies_to: exactly the rows whose content differs and that the target fills.
  wb::arena_mirror target(6, s);
  target.load({0, 0, 1});
  target.load({3, 1, 3});  // already there
  target.load({4, 0, 7});
  const auto plans = m.copies_to(target);
  ASSERT_EQ(plans.size(), 2u);
  EXPECT_EQ(plans[0], (std::vector<wisp::copy_op>{{1, 0}, {7, 4}}));
  EXPECT_TRUE(plans[1].empty());
  m.take_from(target);
  EXPECT_EQ(m.key(4), 7);
  EXPECT_EQ(m.key(3), 8 + 3);
  EXPECT_TRUE(m.copies_to(target)[0].empty());
}

TEST(DistinctIds, KeepFirstSeenOrderAndRefuseBadIds) {
  wb::distinct_ids d(8);
  const std::vector<std::int32_t> ids{5, 1, 5, 7, 1};
  EXPECT_TRUE(std::ranges::equal(d(ids), std::vector<std::int32_t>{5, 1, 7}));
  const std::vector<std::int32_t> bad{2, 8};
  expect_error([&] { (void)d(bad); }, "8");
}

// ---- outputs, kernels, reports ---------------------------------------------------------------

TEST(OutputCheck, EqualOnlyWhenEveryBitIsAndTheReferenceSaysSomething) {
  std::vector<wisp::bf16> want(2 * 3 * 4);
  for (std::size_t i = 0; i < want.size(); ++i) {
    want[i] = wisp::to_bf16(0.25f * static_cast<float>(i) - 1.0f);
  }
  std::vector<wisp::bf16> got = want;
  EXPECT_TRUE(wb::compare_outputs(want, got).equal());
  got[1 * 12 + 2 * 4 + 3].bits ^= 1;  // token 1, layer 2, output 3
  const wb::output_check c = wb::compare_outputs(want, got);
  EXPECT_FALSE(c.equal());
  EXPECT_EQ(c.mismatches, 1u);
  EXPECT_NE(c.describe(3, 4).find("token 1 layer 2 output 3"), std::string::npos)
      << c.describe(3, 4);
  const std::vector<wisp::bf16> zeros(24);
  EXPECT_FALSE(wb::compare_outputs(zeros, zeros).equal());
  EXPECT_NE(wb::compare_outputs(zeros, zeros).describe(3, 4).find("degenerate"), std::string::npos);
  expect_error([&] { (void)wb::compare_outputs(want, std::span(zeros).subspan(0, 3)); },
               "3 outputs");
  const wb::closeness close = wb::compare_close(want, got);
  EXPECT_TRUE(close.within(wb::kernel_tolerance));
  got[0] = wisp::to_bf16(100.0f);
  EXPECT_FALSE(wb::compare_close(want, got).within(wb::kernel_tolerance));
}

TEST(Summary, MedianMinMax) {
  const wb::summary odd = wb::summarize({3, 1, 2});
  EXPECT_EQ(odd.median, 2);
  EXPECT_EQ(odd.min, 1);
  EXPECT_EQ(odd.max, 3);
  EXPECT_EQ(wb::summarize({4, 1, 2, 3}).median, 2.5);
  EXPECT_EQ(wb::summarize({}).count, 0u);
}

// Inputs of a small MoE call: random experts in rows, some positions hidden.
struct moe_case {
  wisp::swiglu_shape shape{64, 40};
  std::int32_t experts = 6;
  std::int32_t tokens = 3;
  std::int32_t k = 3;
  std::vector<wisp::bf16> rows, hidden;
  std::vector<std::int32_t> ids, map;
  std::vector<float> weights;

  explicit moe_case(std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1, 1);
    rows.resize(static_cast<std::size_t>(experts) * shape.row_bytes() / 2);
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
    map = {4, -1, 0, 5, 1, 2, 3, -1};  // experts 1 and 7 hidden
  }
  [[nodiscard]] wisp::basic_fused_moe_args<wisp::bf16> args(std::vector<wisp::bf16>& out) {
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

TEST(GemvArithmetic, EveryValueIsSummedOnceAndTheResultIsTheReferences) {
  // With power-of-two weights and inputs every sum is exact: the lanes cover each value once.
  std::vector<wisp::bf16> w(1408);
  std::vector<float> x(1408);
  double exact = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    w[i] = wisp::to_bf16(std::ldexp(1.0f, static_cast<int>(i % 7) - 3));
    x[i] = i % 3 == 0 ? 1.0f : 0.5f;
    exact += static_cast<double>(wisp::to_float(w[i])) * x[i];
  }
  EXPECT_EQ(static_cast<double>(wb::gemv_dot(w.data(), x.data(), 1408)), exact);
  for (const std::uint32_t seed : {1u, 2u, 3u}) {
    moe_case c(seed);
    std::vector<wisp::bf16> got;
    std::vector<wisp::bf16> want;
    wb::gemv_moe_host(c.shape)(c.args(got));
    wisp::reference_fused_moe(c.shape)(c.args(want));
    const wb::closeness close = wb::compare_close(want, got);
    EXPECT_TRUE(close.within(1e-2)) << close.describe(1e-2);
    EXPECT_GT(close.max_abs_want, 0.01);
  }
  moe_case c(4);
  c.shape.hidden = 60;  // not a multiple of 8
  std::vector<wisp::bf16> out;
  c.hidden.resize(static_cast<std::size_t>(c.tokens * 60));
  expect_error([&] { wb::gemv_moe_host(c.shape)(c.args(out)); }, "multiples of 8");
}

TEST(DeviceProfile, MeasuredProfileParsesBackAndNamesItsSources) {
  wb::profile_measurements m;
  m.device = "NVIDIA H100 80GB HBM3";
  m.smi_name = "NVIDIA H100 80GB HBM3";
  m.commit = "abc1234";
  m.command = "wisp_cuda_gpu_bench --write-profile p.json";
  m.h2d_gbps = 53.1;
  m.copy_latency_us = 8.25;
  m.device_memory_gbps = 2990.5;
  m.launch_us = 1.03;
  m.moe_gbps = 1800.25;
  m.moe_source = "DeepSeek-V2-Lite's shape";
  m.peak_bf16_tflops = 790.5;
  m.peak_source = "cuBLAS";
  m.host_memory_gbps = 60.5;
  m.host_threads = 16;
  const wisp::device_profile p = wb::measured_profile(m);
  EXPECT_EQ(p.name, "nvidia-h100-80gb-hbm3");
  for (const char* part : {"abc1234", "--write-profile", "nvidia-smi: NVIDIA H100 80GB HBM3",
                           "DeepSeek-V2-Lite", "cuBLAS", "16 threads"}) {
    EXPECT_NE(p.source.find(part), std::string::npos) << part;
  }
  const wisp::device_profile back = wisp::parse_device_profile(wisp::to_json(p));
  EXPECT_EQ(back, p);
  EXPECT_EQ(back.moe_gbps, 1800.25);
  m.launch_us = 0;
  expect_error([&] { (void)wb::measured_profile(m); }, "launch_us");
  EXPECT_EQ(wb::datasheet_bf16_tflops("NVIDIA H100 80GB HBM3")->first, 989.0);
  EXPECT_EQ(wb::datasheet_bf16_tflops("NVIDIA H100 PCIe")->first, 756.0);
  EXPECT_EQ(wb::datasheet_bf16_tflops("NVIDIA H200")->first, 989.0);
  EXPECT_FALSE(wb::datasheet_bf16_tflops("Some GPU").has_value());
}

wisp::detail::json_value parse(const std::string& text) {
  return wisp::detail::json_parser(text, 0).parse_document();
}

TEST(Reports, TheDecodeFileHoldsWhatTheIssueNames) {
  wb::config_report r;
  r.model = "deepseek-v2-lite";
  r.budget_fraction = 0.25;
  r.device = "NVIDIA H100 80GB HBM3";
  r.shape = wb::decode_model_named("deepseek-v2-lite");
  r.memory.layers = 26;
  r.capacity = 16;
  r.routing = "ESFT \"intent\"\n";
  r.wisp_policy = "lfru";
  r.wisp_graph_policy = "lru";
  r.wisp_graph_policy_note = "the device step has no lfru: wisp-graph runs lru instead";
  for (const wb::decode_arm a : wb::decode_arms) {
    wb::arm_report ar;
    ar.arm = a;
    ar.tok_s = {10, 30, 20};
    ar.timed_tokens = 16;
    ar.layers = 26;
    ar.row_bytes = 100;
    ar.totals.hits = 3;
    ar.totals.misses = 1;
    ar.totals.link_rows = 4;
    r.arms.push_back(ar);
  }
  r.link = {17301504, 55.45, 48.8};
  const wisp::detail::json_value doc = parse(wb::to_json(r));
  EXPECT_EQ(doc.find("model")->text, "deepseek-v2-lite");
  const wisp::detail::json_value* link = doc.find("link");
  ASSERT_NE(link, nullptr);
  EXPECT_EQ(link->find("row_bytes")->number, 17301504);
  EXPECT_EQ(link->find("dma_h2d_gbps")->number, 55.45);
  EXPECT_EQ(link->find("uva_copy_kernel_gbps")->number, 48.8);
  EXPECT_NE(wb::to_table(r).find("DMA 55.45 GB/s, UVA copy kernel 48.80 GB/s"), std::string::npos)
      << wb::to_table(r);
  EXPECT_EQ(doc.find("budget_fraction")->number, 0.25);
  EXPECT_EQ(doc.find("device")->text, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(doc.find("routing")->text, "ESFT \"intent\"\n");
  EXPECT_EQ(doc.find("wisp_graph_policy")->text, "lru");
  EXPECT_EQ(doc.find("wisp_graph_policy_note")->text, r.wisp_graph_policy_note);
  const wisp::detail::json_value* arms = doc.find("arms");
  ASSERT_NE(arms, nullptr);
  for (const char* name :
       {"layer-offload", "on-demand", "static-hot", "llama.cpp-cache", "cpu-moe-layers",
        "cpu-experts", "wisp", "pager+hybrid", "wisp-graph", "all-resident"}) {
    const wisp::detail::json_value* a = arms->find(name);
    ASSERT_NE(a, nullptr) << name;
    const wisp::detail::json_value* tok = a->find("decode_tok_s");
    ASSERT_NE(tok, nullptr);
    EXPECT_EQ(tok->find("median")->number, 20);
    EXPECT_EQ(tok->find("min")->number, 10);
    EXPECT_EQ(tok->find("max")->number, 30);
    EXPECT_EQ(a->find("hit_rate")->number, 0.75);
    EXPECT_EQ(a->find("link_bytes")->number, 400);
  }
  EXPECT_NE(wb::to_table(r).find("llama.cpp-cache"), std::string::npos);
  EXPECT_NE(wb::to_table(r).find("wisp-graph's device step lru (the device step has no lfru"),
            std::string::npos)
      << wb::to_table(r);
}

TEST(Reports, EachArmsCeilingIsItsLongestResourceAtTheMeasuredRates) {
  wb::config_report r;
  r.shape = wb::decode_model_named("deepseek-v2-lite");
  r.link = {1000000, 50.0, 40.0, 5.0};  // 50 GB/s
  r.host.threads = 16;
  r.host.experts_per_call = 6;
  r.host.row_bytes = 1000000;
  r.host.call_us = wb::summarize({60.0});  // 6 MB in 60 us: 100 GB/s
  const auto arm = [](wb::decode_arm a, double tok_s, std::uint64_t link_rows,
                      std::uint64_t host_experts) {
    wb::arm_report x;
    x.arm = a;
    x.tok_s = {tok_s};
    x.timed_tokens = 16;
    x.layers = 26;
    x.row_bytes = 1000000;
    x.totals.link_rows = link_rows;
    x.totals.host_experts = host_experts;
    return x;
  };
  r.arms.push_back(arm(wb::decode_arm::all_resident, 100, 0, 0));  // 10 ms per token
  // 1 GB per token over the link: 20 ms; 100 MB per token on the host: 1 ms.
  r.arms.push_back(arm(wb::decode_arm::pager_hybrid, 40, 16 * 1000, 16 * 100));
  r.arms.back().totals.host_seconds = 16 * 0.002;  // the host's own clock: 2 ms per token
  // 4 GB per token on the host: 40 ms.
  r.arms.push_back(arm(wb::decode_arm::cpu_experts, 20, 0, 16 * 4000));
  const wb::arm_ceiling device = wb::ceiling_of(r, r.arms[0]);
  EXPECT_DOUBLE_EQ(device.tok_s, 100);
  EXPECT_EQ(device.bound(), "device");
  const wb::arm_ceiling hybrid = wb::ceiling_of(r, r.arms[1]);
  EXPECT_DOUBLE_EQ(hybrid.link_s, 0.02);
  EXPECT_DOUBLE_EQ(hybrid.host_s, 0.001);
  EXPECT_DOUBLE_EQ(hybrid.device_s, 0.01);
  EXPECT_DOUBLE_EQ(hybrid.tok_s, 50);
  EXPECT_EQ(hybrid.bound(), "link");
  const wb::arm_ceiling host = wb::ceiling_of(r, r.arms[2]);
  EXPECT_DOUBLE_EQ(host.tok_s, 25);
  EXPECT_EQ(host.bound(), "host");
  const wisp::detail::json_value doc = parse(wb::to_json(r));
  const wisp::detail::json_value* h = doc.find("arms")->find("pager+hybrid");
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->find("host_experts")->number, 1600);
  EXPECT_EQ(h->find("host_experts_per_token")->number, 100);
  EXPECT_DOUBLE_EQ(h->find("host_compute_s_per_token")->number, 0.002);
  EXPECT_DOUBLE_EQ(h->find("host_us_per_expert")->number, 20);
  EXPECT_DOUBLE_EQ(h->find("ceiling")->find("tok_s")->number, 50);
  EXPECT_DOUBLE_EQ(h->find("ceiling")->find("fraction_reached")->number, 0.8);
  EXPECT_EQ(h->find("ceiling")->find("bound_by")->text, "link");
  EXPECT_DOUBLE_EQ(doc.find("host_kernel")->find("expert_read_gbps")->number, 100);
  EXPECT_NE(wb::to_table(r).find("50.00 (link, 80.00%)"), std::string::npos) << wb::to_table(r);
  // Without the all-resident arm's time, no ceiling is claimed.
  r.arms.erase(r.arms.begin());
  EXPECT_EQ(wb::ceiling_of(r, r.arms[0]).tok_s, 0);
}

TEST(Reports, TheDeviceStepFileHoldsEveryForm) {
  wb::device_step_report r;
  r.device = "NVIDIA H100 80GB HBM3";
  r.shape = {48, 128, 8};
  for (const char* name :
       {"automatic", "warp", "block", "empty_node", "router_only", "router_then_step",
        "fused_router_step", "launched", "host_round_trip", "warp_lfu_history"}) {
    r.forms.emplace_back(name, wb::summarize({1.5, 1.0, 2.5}));
  }
  r.forms[5].second = wb::summarize({3.0});  // router_then_step
  const wisp::detail::json_value doc = parse(wb::to_json(r));
  const wisp::detail::json_value* step = doc.find("device_step_us");
  ASSERT_NE(step, nullptr);
  for (const char* name : {"block", "warp", "automatic", "warp_lfu_history", "empty_node"}) {
    ASSERT_NE(step->find(name), nullptr) << name;
    EXPECT_EQ(step->find(name)->find("median")->number, 1.5);
  }
  EXPECT_EQ(doc.find("levers_us")->find("step_in_its_own_node")->number, 1.5);
  EXPECT_EQ(doc.find("levers_us")->find("step_fused_into_the_router")->number, 0.0);
  EXPECT_EQ(doc.find("under_target")->find("warp")->type, wisp::detail::json_value::kind::boolean);
}

}  // namespace
