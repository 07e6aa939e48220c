// SPDX-License-Identifier: Apache-2.0
// `wisp tiers TRACE [--budget-experts 16] [--link-gbps 3.5,25] [--threads 4,8] [--decode-gbps
//                    2.28] [--e-chunks 8] [--tensors 3] [--tensor-elements N] [--exponent-ratio
//                    0.33] [--execute-us 50] [--tolerance 0] [--grid 0.05] [--pools FCSE]
//                    [--plan-only] [--json]`:
// plans the compression-aware pools F/C/S/E of one MoE layer (ZipMoE's Algorithm 4 on the trace's
// rank marginals) and replays the trace through them and through a plain full-tensor cache of the
// same memory (wisp/sim/tiered_sim.hpp), for every link speed x decode thread count.
#include "cli.hpp"
#include "commands.hpp"
#include "trace_source.hpp"

#include <wisp/sim/tiered_sim.hpp>
#include <wisp/tiered/tier_model.hpp>
#include <wisp/trace/routing_trace.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace wisp::tool {
namespace {

struct tiers_options {
  std::string trace;
  std::uint64_t budget_experts = 16;
  std::vector<double> link_gbps{3.5};
  std::vector<std::uint32_t> threads{8};
  double decode_gbps = 2.28;
  std::uint32_t e_chunks = 8;
  std::uint32_t tensors = 3;
  std::uint64_t tensor_elements = 2048 * 1408;
  double exponent_ratio = 0.33;
  double execute_us = 50.0;
  std::int32_t tolerance = 0;
  double grid = 0.05;
  std::string pools = "FCSE";
  bool plan_only = false;
  bool json = false;
};

std::array<bool, tier_count> parse_pools(const std::string& text) {
  constexpr std::string_view letters = "FCSE";
  std::array<bool, tier_count> on{};
  for (const char c : text) {
    const auto i = letters.find(c);
    if (i == std::string::npos) {
      usage_error("--pools ", text, ": '", std::string(1, c),
                  "' is not a pool (letters among F, C, S, E)");
    }
    on[i] = true;
  }
  if (text.empty()) {
    usage_error("--pools is empty: give letters among F, C, S, E");
  }
  return on;
}

std::string sizes_text(const tier_sizes& s) {
  char out[64];
  std::snprintf(out, sizeof out, "F%d C%d S%d E%d", s[0], s[1], s[2], s[3]);
  return out;
}

tiered_sim_config base_config(const tiers_options& opt) {
  tiered_sim_config base;
  base.tensors = opt.tensors;
  base.tensor_elements = opt.tensor_elements;
  base.exponent_ratio = opt.exponent_ratio;
  base.e_chunks = opt.e_chunks;
  base.decode_bytes_per_second = opt.decode_gbps * 1e9;
  base.execute_seconds = opt.execute_us * 1e-6;
  base.budget_bytes = opt.budget_experts * base.full_bytes();
  base.tolerance = opt.tolerance;
  base.grid_step = opt.grid;
  base.enabled = parse_pools(opt.pools);
  return base;
}

void print_header(const tiers_options& opt, const routing_trace& t) {
  std::printf(
      "%s: %zu steps, %d layers x %d experts, top-%d; budget %llu full experts per layer; "
      "expert = %u x %llu BF16 values, E-chunks %u at %.3g bytes/value, decode %.3g GB/s per "
      "thread, execution %.3g us\n\n",
      opt.trace.c_str(), t.steps(), t.shape().layers, t.shape().experts, t.shape().top_k,
      static_cast<unsigned long long>(opt.budget_experts), opt.tensors,
      static_cast<unsigned long long>(opt.tensor_elements), opt.e_chunks, opt.exponent_ratio,
      opt.decode_gbps, opt.execute_us);
  std::printf("%8s %4s %-18s %11s", "link", "L", "pools", "expected");
  if (!opt.plan_only) {
    std::printf(" %11s %11s %11s %9s %11s %11s %6s", "estimated", "scheduled", "plain", "speedup",
                "read_MB", "plain_MB", "TV");
  }
  std::printf("\n%8s %4s %-18s %11s", "GB/s", "", "", "ms/call");
  if (!opt.plan_only) {
    std::printf(" %11s %11s %11s %9s %11s %11s %6s", "ms/call", "ms/call", "ms/call", "x",
                "per call", "per call", "");
  }
  std::printf("\n");
}

// The replay's figures per call, and its 8 most frequent hit patterns beside the model's.
void add_replay(nlohmann::ordered_json& row, const tiered_sim_result& r) {
  const double calls = static_cast<double>(r.calls);
  row["calls"] = r.calls;
  row["estimated_ms_per_call"] = 1e3 * r.estimated_seconds / calls;
  row["scheduled_ms_per_call"] = 1e3 * r.measured_seconds / calls;
  row["plain_capacity"] = r.plain_capacity;
  row["plain_ms_per_call"] = 1e3 * r.plain_seconds / calls;
  row["speedup"] = r.plain_seconds / r.measured_seconds;
  row["bytes_read_per_call"] = static_cast<double>(r.bytes_read) / calls;
  row["plain_bytes_read_per_call"] = static_cast<double>(r.plain_bytes_read) / calls;
  row["pool_hits"] = {r.stats.pools[0].hits, r.stats.pools[1].hits, r.stats.pools[2].hits,
                      r.stats.pools[3].hits};
  row["misses"] = r.stats.misses;
  row["plain_hits"] = r.plain_hits;
  row["pattern_distance"] = r.pattern_distance();
  nlohmann::ordered_json patterns = nlohmann::ordered_json::array();
  std::vector<std::pair<std::uint64_t, std::array<std::int32_t, tier_count>>> top;
  for (const auto& [h, n] : r.patterns) {
    top.emplace_back(n, h);
  }
  std::sort(top.rbegin(), top.rend());
  for (std::size_t i = 0; i < top.size() && i < 8; ++i) {
    const auto m = r.model.find(top[i].second);
    patterns.push_back({{"h", top[i].second},
                        {"observed", static_cast<double>(top[i].first) / calls},
                        {"model", m == r.model.end() ? 0.0 : m->second}});
  }
  row["top_patterns"] = patterns;
}

void run(const tiers_options& opt) {
  const routing_trace t = load_trace_with_accesses(opt.trace);
  const tiered_sim_config base = base_config(opt);
  if (opt.budget_experts > static_cast<std::uint64_t>(t.shape().experts)) {
    usage_error("--budget-experts ", opt.budget_experts, " is more than the layer's ",
                t.shape().experts, " experts");
  }
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  if (!opt.json) {
    print_header(opt, t);
  }
  for (const double link : opt.link_gbps) {
    for (const std::uint32_t threads : opt.threads) {
      tiered_sim_config c = base;
      c.link = {.bytes_per_second = link * 1e9, .latency_seconds = 0.0};
      c.threads = threads;
      const tier_plan plan = plan_for_trace(t, c);
      c.capacity = plan.best.sizes;
      nlohmann::ordered_json row{{"link_gbps", link},
                                 {"threads", threads},
                                 {"pools",
                                  {{"F", c.capacity[0]},
                                   {"C", c.capacity[1]},
                                   {"S", c.capacity[2]},
                                   {"E", c.capacity[3]}}},
                                 {"bytes_used", plan.best.bytes_used},
                                 {"partitions_scored", plan.evaluated},
                                 {"expected_ms_per_call", 1e3 * plan.best.expected_seconds}};
      if (!opt.plan_only) {
        const tiered_sim_result r = simulate_tiered(t, c);
        add_replay(row, r);
        const double calls = static_cast<double>(r.calls);
        if (!opt.json) {
          std::printf("%8.3g %4u %-18s %11.4f %11.4f %11.4f %11.4f %9.3f %11.2f %11.2f %6.3f\n",
                      link, threads, sizes_text(c.capacity).c_str(),
                      1e3 * plan.best.expected_seconds, 1e3 * r.estimated_seconds / calls,
                      1e3 * r.measured_seconds / calls, 1e3 * r.plain_seconds / calls,
                      r.plain_seconds / r.measured_seconds,
                      static_cast<double>(r.bytes_read) / calls / 1e6,
                      static_cast<double>(r.plain_bytes_read) / calls / 1e6, r.pattern_distance());
        }
      } else if (!opt.json) {
        std::printf("%8.3g %4u %-18s %11.4f\n", link, threads, sizes_text(c.capacity).c_str(),
                    1e3 * plan.best.expected_seconds);
      }
      rows.push_back(row);
    }
  }
  if (opt.json) {
    nlohmann::ordered_json out = trace_json(opt.trace, t);
    out["budget_experts"] = opt.budget_experts;
    out["results"] = rows;
    std::cout << out.dump() << '\n';
    return;
  }
  if (!opt.plan_only) {
    std::printf(
        "\nexpected: the model's mean over hit patterns (Algorithm 4); estimated: Algorithm 3 on "
        "the replay's patterns; scheduled: Algorithm 1's schedule (event simulation); plain: a "
        "full-tensor cache of "
        "the same memory (raw reads, no decode); TV: distance between observed and model hit "
        "patterns\n");
  }
}

}  // namespace

void add_tiers_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "tiers",
      "Plan the compression-aware pools F/C/S/E (ZipMoE) for a trace and replay it against a "
      "plain full-tensor cache of the same memory");
  auto opt = std::make_shared<tiers_options>();
  cmd->add_option("trace", opt->trace, "routing trace: " + trace_source_help())->required();
  cmd->add_option("--budget-experts", opt->budget_experts,
                  "memory of each layer's pools, in full experts")
      ->check(whole_number(1))
      ->capture_default_str();
  cmd->add_option("--link-gbps", opt->link_gbps,
                  "comma-separated read rates of the store holding the masters, GB/s (default 3.5)")
      ->delimiter(',')
      ->check(number_above(0, true));
  cmd->add_option("--threads", opt->threads, "comma-separated decode thread counts L (default 8)")
      ->delimiter(',')
      ->check(whole_number(1, 1024));
  cmd->add_option("--decode-gbps", opt->decode_gbps,
                  "one thread's decode rate, GB/s of BF16 written")
      ->check(number_above(0, true))
      ->capture_default_str();
  cmd->add_option("--e-chunks", opt->e_chunks, "K: E-chunks per tensor")
      ->check(whole_number(1, 65536))
      ->capture_default_str();
  cmd->add_option("--tensors", opt->tensors, "n: tensors per expert")
      ->check(whole_number(1, 1024))
      ->capture_default_str();
  cmd->add_option("--tensor-elements", opt->tensor_elements, "BF16 values per tensor")
      ->check(whole_number(1))
      ->capture_default_str();
  cmd->add_option("--exponent-ratio", opt->exponent_ratio,
                  "compressed exponent bytes per value (0.33: Huffman on trained weights)")
      ->check(CLI::Range(0.001, 1.0))
      ->capture_default_str();
  cmd->add_option("--execute-us", opt->execute_us, "one expert's execution, microseconds")
      ->check(number_above(0, false))
      ->capture_default_str();
  cmd->add_option("--tolerance", opt->tolerance, "delta: margin added to every pool threshold")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--grid", opt->grid, "planner grid step of the budget shares, in (0, 1]")
      ->check(CLI::Range(0.01, 1.0))
      ->capture_default_str();
  cmd->add_option("--pools", opt->pools, "pools the planner may use, letters among F, C, S, E")
      ->capture_default_str();
  cmd->add_flag("--plan-only", opt->plan_only, "print the plans, do not replay the trace");
  cmd->add_flag("--json", opt->json, "print one JSON object");
  cmd->callback([opt] { run(*opt); });
}

}  // namespace wisp::tool
