// SPDX-License-Identifier: Apache-2.0
// `wisp evaluate [--model NAME] [--budget 12GiB] [--rounds 400] [--recompute 2e-4,2e-3]
//                [--seed 1]`: the trace-driven comparison of expert/KV split policies
// (wisp/alloc/evaluation.hpp) on five agentic workloads, printed as the Markdown tables of
// docs/allocator.md.
#include "commands.hpp"

#include <wisp/alloc/evaluation.hpp>
#include <wisp/alloc/kv_workload.hpp>
#include <wisp/alloc/model_spec.hpp>
#include <wisp/alloc/units.hpp>
#include <wisp/trace/synthetic.hpp>

#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace wisp::tool {
namespace {

struct evaluate_options {
  std::string model = "olmoe-1b-7b";
  std::string budget = "12GiB";
  std::uint32_t rounds = 400;
  std::vector<double> recompute = {2e-4, 2e-3};
  std::uint64_t seed = 1;
};

// One phase of a workload: the KV session mix and the routing locality that goes with it.
alloc::eval_phase phase(const alloc::model_spec& m, double tool_fraction, std::uint32_t rounds) {
  alloc::eval_phase p;
  p.kv.sessions = 16;
  p.kv.concurrency = 2;  // context and turn shapes: agentic_config's defaults
  p.kv.tool_call_fraction = tool_fraction;
  p.experts = trace::synthetic_preset(m.name);
  if (tool_fraction > 0.5) {  // tool-call bursts revisit a small expert set
    p.experts.locality = 0.7;
    p.experts.coactivation = 0.1;
    p.experts.drift_rate = 0.02;
  } else {  // long documents spread routing: less locality, more drift
    p.experts.locality = 0.25;
    p.experts.drift_rate = 0.2;
  }
  p.rounds = rounds;
  return p;
}

void print_table(const alloc::model_spec& m, byte_size budget, const evaluate_options& o,
                 double recompute) {
  struct workload_def {
    const char* name;
    std::vector<alloc::eval_phase> phases;
  };
  const std::uint32_t r = o.rounds;
  const std::vector<workload_def> defs = {
      {"long-context", {phase(m, 0.1, r)}},
      {"mixed", {phase(m, 0.5, r)}},
      {"tool-burst", {phase(m, 0.9, r)}},
      {"shift long->tool", {phase(m, 0.1, r / 2), phase(m, 0.9, r / 2)}},
      {"shift tool->long", {phase(m, 0.9, r / 2), phase(m, 0.1, r / 2)}},
  };
  alloc::eval_params p;
  p.budget = budget;
  p.costs.recompute_seconds_per_token = recompute;
  p.dual.headroom_blocks = 64;
  p.dual.dead_zone = 2;
  std::printf(
      "\n%s at %s, %u rounds per workload, bandwidth %.0f GB/s, recompute %.0f us/token\n\n",
      m.name.c_str(), alloc::format_bytes(budget.count()).c_str(), r,
      p.costs.bandwidth_bytes_per_second / 1e9, p.costs.recompute_seconds_per_token * 1e6);
  std::printf(
      "| workload | arm | cap (start->end, min..max) | moves | warm expert misses | warm KV "
      "misses | warm latency (s) | x oracle |\n|---|---|---|---|---|---|---|---|\n");
  for (const auto& d : defs) {
    const auto w = alloc::make_eval_workload(d.name, m, d.phases, o.seed);
    const auto result = alloc::evaluate(m, w, p);
    const double oracle = result.arm("oracle").seconds;
    for (const auto& a : result.arms) {
      std::printf("| %s | %s%s | %u->%u, %u..%u | %u | %llu | %llu | %.2f | %.3f |\n", d.name,
                  a.name.c_str(), a.admissible ? "" : " (below floor)", a.cap_start, a.cap_end,
                  a.cap_min, a.cap_max, a.moves,
                  static_cast<unsigned long long>(a.expert_warm_misses),
                  static_cast<unsigned long long>(a.kv_warm_misses), a.seconds, a.seconds / oracle);
    }
  }
  std::fflush(stdout);
}

}  // namespace

void add_evaluate_command(CLI::App& app) {
  auto options = std::make_shared<evaluate_options>();
  auto* cmd = app.add_subcommand(
      "evaluate",
      "Compare expert/KV split policies (MV-WSA configurator and online controller, dual resize, "
      "50-50, Flux-prop, oracle) on agentic workloads, as Markdown tables");
  cmd->add_option("--model", options->model, "model preset")->capture_default_str();
  cmd->add_option("--budget", options->budget, "device budget, e.g. 12GiB")->capture_default_str();
  cmd->add_option("--rounds", options->rounds, "serving rounds per workload")
      ->check(CLI::Range(2u, 1000000u))
      ->capture_default_str();
  cmd->add_option("--recompute", options->recompute,
                  "seconds to recompute one KV token; one table per value")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seed", options->seed, "workload seed")->capture_default_str();
  cmd->callback([options] {
    const alloc::model_spec m = alloc::model_preset(options->model);
    const byte_size budget = alloc::parse_byte_size(options->budget);
    for (const double recompute : options->recompute) {
      print_table(m, budget, *options, recompute);
    }
  });
}

}  // namespace wisp::tool
