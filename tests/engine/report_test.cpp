// SPDX-License-Identifier: Apache-2.0
// The example engine's reporting (medians, the identical rule, the strongest baseline, the JSON
// shape) and its command line (every flag, and errors that name the bad value).
#include "../../examples/engine/report.hpp"

#include "../../examples/engine/cli.hpp"
#include "support.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace engine_test;

TEST(EngineReport, FiguresAreMedianMinMaxOfTheRuns) {
  const figure odd = make_figure({3, 1, 2});
  EXPECT_EQ(odd.median, 2);
  EXPECT_EQ(odd.min, 1);
  EXPECT_EQ(odd.max, 3);
  EXPECT_EQ(odd.runs, (std::vector<double>{3, 1, 2}));  // in run order
  const figure even = make_figure({4, 1, 3, 2});
  EXPECT_EQ(even.median, 2.5);
  EXPECT_EQ(make_figure({}).runs.size(), 0u);
}

arm_runs fake(arm_kind kind, std::vector<double> decode, std::vector<std::int32_t> out = {1},
              bool feasible = true, bool upper_bound = false) {
  arm_runs a;
  a.spec = {kind, is_pager(kind) ? "lru" : "", upper_bound};
  for (const double d : decode) {
    arm_result r;
    r.name = std::string(arm_name(kind));
    r.policy = a.spec.policy;
    r.feasible = feasible;
    r.decode_tok_s = d;
    r.prefill_tok_s = 2 * d;
    r.outputs = {out};
    r.logits_hashes = {7};
    a.runs.push_back(r);
  }
  return a;
}

TEST(EngineReport, IdenticalNeedsTwoFeasibleArmsOneOfThemUnpaged) {
  EXPECT_FALSE(compare({fake(arm_kind::pager, {1, 2})}).identical.has_value());
  EXPECT_FALSE(compare({fake(arm_kind::pager, {1}), fake(arm_kind::pager_plan, {1})})
                   .identical.has_value());  // no unpaged arm
  EXPECT_FALSE(compare({fake(arm_kind::full, {1}, {1}, false), fake(arm_kind::pager, {1})})
                   .identical.has_value());  // full infeasible
  EXPECT_EQ(compare({fake(arm_kind::static_hot, {1}), fake(arm_kind::pager, {1})}).identical, true);
  EXPECT_EQ(compare({fake(arm_kind::on_demand, {1}), fake(arm_kind::pager, {1}, {2})}).identical,
            false);
  // A repetition that differs from the others is caught too.
  arm_runs flaky = fake(arm_kind::pager, {1, 1});
  flaky.runs[1].logits_hashes = {8};
  EXPECT_EQ(compare({fake(arm_kind::full, {1}), flaky}).identical, false);
}

TEST(EngineReport, TheStrongestBaselineIsTheFastestUnpagedArmAtTheBudget) {
  const comparison c =
      compare({fake(arm_kind::full, {50}, {1}, true, true),  // the upper bound
               fake(arm_kind::layer_offload, {9, 11, 10}), fake(arm_kind::static_hot, {12, 13, 8}),
               fake(arm_kind::on_demand, {1}, {1}, false), fake(arm_kind::pager, {24, 22, 20})});
  ASSERT_NE(c.baseline, nullptr);
  EXPECT_EQ(c.baseline->spec.kind, arm_kind::static_hot);  // median 12 > 10
  ASSERT_NE(c.best_pager, nullptr);
  const figure r = ratio(*c.best_pager, *c.baseline, [](auto& x) { return x.decode_tok_s; });
  EXPECT_EQ(r.runs, (std::vector<double>{2, 22.0 / 13, 2.5}));  // per repetition
  EXPECT_EQ(r.median, 2);
  std::ostringstream os;
  write_json(os, c);
  const std::string j = os.str();
  EXPECT_THAT(j, testing::HasSubstr("\"strongest_baseline\":\"static-hot\""));
  EXPECT_THAT(j, testing::HasSubstr("\"identical\":true"));
  EXPECT_THAT(j, testing::HasSubstr(
                     "\"decode_tok_s\":{\"median\":22,\"min\":20,\"max\":24,\"runs\":[24,22,20]}"));
  EXPECT_THAT(j, testing::HasSubstr("\"upper_bound\":true"));
  EXPECT_THAT(j, testing::HasSubstr("\"best_pager_policy\":\"lru\""));
}

TEST(EngineReport, NoBaselineMeansNullInTheJson) {
  std::ostringstream os;
  write_json(os, compare({fake(arm_kind::pager, {1})}));
  EXPECT_THAT(os.str(), testing::HasSubstr("\"identical\":null,\"strongest_baseline\":null"));
}

cli_options parse(std::vector<std::string_view> args) {
  return parse_cli(args);
}

// The help's default `--policies` is the parser's: every pager policy, in order.
TEST(EngineCli, HelpListsEveryDefaultPolicy) {
  std::string listed(usage);
  const std::string_view head = "eviction policies of the pager arm, one arm each (default: ";
  const std::size_t from = listed.find(head);
  ASSERT_NE(from, std::string::npos);
  listed = listed.substr(from + head.size());
  listed = listed.substr(0, listed.find(';'));
  std::erase_if(listed, [](char c) { return c == ' ' || c == '\n'; });
  std::string expected;
  for (const std::string& p : all_policies()) {
    expected += (expected.empty() ? "" : ",") + p;
  }
  EXPECT_EQ(listed, expected);
}

TEST(EngineCli, ParsesEveryFlag) {
  const cli_options o = parse({"--arms",
                               "full,pager",
                               "--policies",
                               "least-stale,lfu",
                               "--policy",
                               "least-stale",
                               "--budget",
                               "96MiB",
                               "--bandwidth",
                               "5",
                               "--latency-us",
                               "2.5",
                               "--cap",
                               "20",
                               "--hot",
                               "10",
                               "--workload",
                               "shift",
                               "--sessions",
                               "8",
                               "--max-running",
                               "2",
                               "--routing",
                               "trace",
                               "t.wtrace",
                               "--layers",
                               "3",
                               "--experts",
                               "16",
                               "--top-k",
                               "4",
                               "--hidden",
                               "64",
                               "--intermediate",
                               "32",
                               "--burst",
                               "3",
                               "--decay",
                               "0.5",
                               "--repeat",
                               "2",
                               "--on-incomplete",
                               "skip",
                               "--prefetch",
                               "percentile",
                               "--overfetch",
                               "1.5",
                               "--percentile",
                               "90",
                               "--decode-gbps",
                               "40",
                               "--decode-threads",
                               "8",
                               "--tiers",
                               "1,2,0,3",
                               "--device",
                               "l4",
                               "--host-compute",
                               "measured",
                               "--host-thread-gflops",
                               "32",
                               "--value-rate",
                               "0.5",
                               "--json"});
  EXPECT_EQ(o.arms, (std::vector<arm_kind>{arm_kind::full, arm_kind::pager}));
  EXPECT_EQ(o.policies, (std::vector<std::string>{"least_stale", "lfu"}));
  EXPECT_EQ(o.base.policy, "least_stale");
  EXPECT_EQ(o.base.budget_bytes, 96ull << 20);
  EXPECT_EQ(o.base.link.bytes_per_second, 5e9);
  EXPECT_DOUBLE_EQ(o.base.link.latency_seconds, 2.5e-6);
  EXPECT_EQ(o.base.cap, 20);
  EXPECT_EQ(o.base.hot, 10);
  EXPECT_EQ(o.workload, "shift");
  EXPECT_EQ(o.sessions, 8);
  EXPECT_EQ(o.base.max_running, 2);
  EXPECT_EQ(o.routing, "trace");
  EXPECT_EQ(o.trace_file, "t.wtrace");
  EXPECT_EQ(o.base.routing, routing_source::trace);
  EXPECT_EQ(*o.layers, 3);
  EXPECT_EQ(o.model.experts, 16);
  EXPECT_EQ(o.model.top_k, 4);
  EXPECT_EQ(o.model.hidden, 64);
  EXPECT_EQ(o.model.intermediate, 32);
  EXPECT_EQ(o.base.dynamic_burst, 3);
  EXPECT_EQ(o.base.controller.decay, 0.5);
  EXPECT_EQ(o.repeat, 2);
  EXPECT_EQ(o.on_incomplete, wisp::incomplete_tokens::skip);
  EXPECT_EQ(o.base.prefetch.rule, wisp::prefetch_rule::percentile);
  EXPECT_EQ(o.base.prefetch.overfetch, 1.5);
  EXPECT_EQ(o.base.prefetch.percentile, 90);
  EXPECT_EQ(o.base.decode_bytes_per_second, 40e9);
  EXPECT_EQ(o.base.decode_threads, 8u);
  EXPECT_EQ(o.base.tiers, (std::array<std::int32_t, 4>{1, 2, 0, 3}));
  EXPECT_TRUE(o.json);
  ASSERT_TRUE(o.base.device.has_value());
  EXPECT_EQ(o.base.device->name, "l4");
  EXPECT_EQ(o.base.device->h2d_gbps, 5);  // --bandwidth overrides the profile's link
  EXPECT_EQ(o.base.device->copy_latency_us, 2.5);
  EXPECT_EQ(o.base.device->device_memory_gbps, 300);
  EXPECT_TRUE(o.base.host_measured);
  EXPECT_EQ(o.base.host_thread_flops, 32e9);
  EXPECT_EQ(o.base.value_rate, 0.5);
  EXPECT_EQ(parse({"--routing", "model"}).base.routing, routing_source::model);
  // The default: the consumer preset and its link, 148 MiB; host: the CPU-timed engine.
  const cli_options d = parse({});
  ASSERT_TRUE(d.base.device.has_value());
  EXPECT_EQ(d.base.device->name, "rtx-4090");
  EXPECT_EQ(d.base.link.bytes_per_second, 25e9);
  EXPECT_EQ(d.base.budget_bytes, 148ull << 20);
  EXPECT_EQ(d.arms.size(), std::size(arm_names));
  const cli_options h = parse({"--device", "host"});
  EXPECT_FALSE(h.base.device.has_value());
  EXPECT_EQ(h.base.link.bytes_per_second, 25e9);
  EXPECT_DOUBLE_EQ(h.base.link.latency_seconds, 10e-6);
  // Pager once per policy; full's upper bound after full when full does not fit.
  const auto specs = o.specs(false);
  ASSERT_EQ(specs.size(), 4u);
  EXPECT_TRUE(specs[1].upper_bound);
  EXPECT_EQ(specs[2].policy, "least_stale");
  EXPECT_EQ(specs[3].policy, "lfu");
  EXPECT_EQ(o.specs(true).size(), 3u);
}

// A profile file with a bad member is refused naming the member and its value, before anything
// runs; a good one is loaded whole.
TEST(EngineCli, ProfileFilesAreValidated) {
  const std::string good =
      R"({"name": "lab-gpu", "device_memory_gbps": 900, "peak_bf16_tflops": 100, "h2d_gbps": 20,
          "copy_latency_us": 8, "launch_us": 3, "host_memory_gbps": 50, "host_threads": 8})";
  const std::filesystem::path dir = std::filesystem::temp_directory_path();
  const auto write = [&](const std::string& name, const std::string& text) {
    const std::filesystem::path p = dir / name;
    std::ofstream(p) << text;
    return p.string();
  };
  const std::string file = write("wisp_engine_profile_good.json", good);
  const cli_options o = parse({"--device", file});
  ASSERT_TRUE(o.base.device.has_value());
  EXPECT_EQ(o.base.device->name, "lab-gpu");
  EXPECT_EQ(o.base.link.bytes_per_second, 20e9);
  EXPECT_DOUBLE_EQ(o.base.link.latency_seconds, 8e-6);
  const std::vector<std::pair<std::string, std::vector<std::string>>> bad = {
      {R"({"name": "x", "device_memory_gbps": 900, "peak_bf16_tflops": 100, "h2d_gbps": 0,
           "copy_latency_us": 8, "launch_us": 3, "host_memory_gbps": 50, "host_threads": 8})",
       {"\"h2d_gbps\"", "got 0"}},
      {R"({"name": "x", "device_memory_gbps": -5, "peak_bf16_tflops": 100, "h2d_gbps": 20,
           "copy_latency_us": 8, "launch_us": 3, "host_memory_gbps": 50, "host_threads": 8})",
       {"\"device_memory_gbps\"", "got -5"}},
      {R"({"name": "x", "device_memory_gbps": 900, "peak_bf16_tflops": "fast", "h2d_gbps": 20,
           "copy_latency_us": 8, "launch_us": 3, "host_memory_gbps": 50, "host_threads": 8})",
       {"\"peak_bf16_tflops\"", "got \"fast\""}},
      {R"({"name": "x", "device_memory_gbps": 900, "peak_bf16_tflops": 100, "h2d_gbps": 20,
           "copy_latency_us": 8, "launch_us": 3, "host_memory_gbps": 50})",
       {"\"host_threads\"", "missing"}},
      {R"({"name": "x", "device_memory_gbps": 900, "peak_bf16_tflops": 100, "h2d_gbps": 20,
           "copy_latency_us": 8, "launch_us": 3, "host_memory_gbps": 50, "host_threads": 8,
           "pcie_gen": 4})",
       {"\"pcie_gen\"", "not a device profile member"}},
  };
  for (std::size_t i = 0; i < bad.size(); ++i) {
    const std::string path =
        write("wisp_engine_profile_bad_" + std::to_string(i) + ".json", bad[i].first);
    try {
      (void)parse({"--device", path});
      ADD_FAILURE() << "accepted " << bad[i].first;
    } catch (const wisp::error& e) {
      for (const std::string& part : bad[i].second) {
        EXPECT_THAT(e.what(), testing::HasSubstr(part));
      }
      EXPECT_THAT(e.what(), testing::HasSubstr(path));
    }
    std::filesystem::remove(path);
  }
  std::filesystem::remove(file);
}

// The default model is in the regime the engine is for: on the consumer profile one miss's copy
// is about 5x one token's MoE, as for Qwen3-30B-A3B on the same card; the JSON carries both.
TEST(EngineReport, TheDeviceAndItsRatioAreReported) {
  const cli_options o = parse({});
  const device_summary d = summarize_device(o.base, o.model);
  const double ratio = d.miss_copy_s / d.token_moe_s;
  const double qwen = d.ref_copy_s / d.ref_moe_s;
  EXPECT_NEAR(ratio, qwen, 0.1);
  EXPECT_GT(ratio, 4.5);
  EXPECT_LT(ratio, 5.5);
  // Qwen3-30B-A3B on an RTX 4090: a 9 MiB expert crosses PCIe 4.0 in ~0.38 ms, the layer's 8
  // experts are read in ~0.075 ms (plus a launch).
  EXPECT_NEAR(d.ref_copy_s, 10e-6 + 9437184 / 25e9, 1e-12);
  EXPECT_NEAR(d.ref_moe_s, 4e-6 + (8 * 9437184.0 + 2 * 2048 * 8) / 1008e9, 1e-12);
  comparison c = compare({fake(arm_kind::static_hot, {1}), fake(arm_kind::pager, {1})});
  c.device = d;
  std::ostringstream os;
  write_json(os, c);
  EXPECT_THAT(os.str(), testing::HasSubstr("\"device\":{\"name\":\"rtx-4090\""));
  EXPECT_THAT(os.str(), testing::HasSubstr("\"miss_to_moe\":" + detail::num(ratio)));
  EXPECT_THAT(os.str(), testing::HasSubstr("\"reference\":{\"model\":\"Qwen3-30B-A3B\""));
  c.device = summarize_device(parse({"--device", "host"}).base, o.model);
  std::ostringstream host;
  write_json(host, c);
  EXPECT_THAT(host.str(), testing::HasSubstr("\"device\":{\"name\":\"host\",\"h2d_gbps\":25"));
}

TEST(EngineCli, BadInputNamesTheFlagAndTheValue) {
  const std::vector<std::pair<std::vector<std::string_view>, std::string>> bad = {
      {{"--arms", "full,static-offload"}, "unknown arm 'static-offload'"},
      {{"--policies", "lru,mru"}, "unknown policy 'mru'"},
      {{"--policy", "belady"}, "unknown policy 'belady'"},
      {{"--sessions", "0"}, "--sessions: '0' is not an integer >= 1"},
      {{"--repeat", "two"}, "--repeat: 'two' is not an integer"},
      {{"--bandwidth", "0"}, "--bandwidth: '0' is not a number"},
      {{"--latency-us", "-1"}, "--latency-us: '-1'"},
      {{"--workload", "batch"}, "unknown 'batch'"},
      {{"--routing", "file"}, "unknown 'file'"},
      {{"--routing", "trace"}, "missing value after --routing"},
      {{"--decay", "2"}, "decay"},
      {{"--budget", "lots"}, "lots"},
      {{"--on-incomplete", "keep"}, "--on-incomplete: 'keep' (valid: error, skip)"},
      {{"--prefetch", "all"}, "--prefetch: unknown rule 'all'"},
      {{"--overfetch", "-1"}, "--overfetch: '-1'"},
      {{"--percentile", "101"}, "--percentile: 101 is over 100"},
      {{"--decode-gbps", "0"}, "--decode-gbps: '0'"},
      {{"--decode-threads", "0"}, "--decode-threads: '0'"},
      {{"--tiers", "1,2,3"}, "--tiers: need four sizes F,C,S,E, got 3"},
      {{"--tiers", "1,-2,3,4"}, "--tiers: '-2'"},
      {{"--frobnicate"}, "unknown option '--frobnicate'"},
      {{"--device", "gtx-280"}, "unknown device profile 'gtx-280'"},
      {{"--host-compute", "guess"}, "--host-compute: unknown 'guess'"},
      {{"--host-thread-gflops", "0"}, "--host-thread-gflops: '0'"},
      {{"--value-rate", "2"}, "--value-rate: 2 is not in (0, 1]"},
      {{"--arms", "cpu"}, "pager+hybrid"},  // the valid arms are listed
  };
  for (const auto& [args, message] : bad) {
    try {
      (void)parse(args);
      ADD_FAILURE() << "accepted " << args[0];
    } catch (const wisp::error& e) {
      EXPECT_THAT(e.what(), testing::HasSubstr(message));
    }
  }
}

}  // namespace
