// SPDX-License-Identifier: Apache-2.0
// `wisp evaluate [--model NAME|FILE.json] [--budget 12GiB] [--rounds 400]
//                [--recompute 2e-4,2e-3] [--seed 1] [--json]`: the trace-driven comparison of
// expert/KV split policies (wisp/sim/split_evaluation.hpp) on five agentic workloads, printed as
// the Markdown tables of docs/allocator.md or as one JSON object.
#include "cli.hpp"
#include "commands.hpp"
#include "model_source.hpp"
#include "progress.hpp"

#include <wisp/alloc/kv_workload.hpp>
#include <wisp/alloc/model_spec.hpp>
#include <wisp/alloc/units.hpp>
#include <wisp/sim/split_evaluation.hpp>
#include <wisp/trace/synthetic.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <iostream>
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
  bool json = false;
};

// One phase of a workload: the KV session mix and the routing locality that goes with it.
eval_phase phase(const model_spec& m, double tool_fraction, std::uint32_t rounds) {
  eval_phase p;
  p.kv.sessions = 16;
  p.kv.concurrency = 2;  // context and turn shapes: agentic_config's defaults
  p.kv.tool_call_fraction = tool_fraction;
  p.experts = synthetic_for(m);
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

struct workload_def {
  const char* name;
  std::vector<eval_phase> phases;
};

std::vector<workload_def> workloads(const model_spec& m, std::uint32_t r) {
  return {
      {"long-context", {phase(m, 0.1, r)}},
      {"mixed", {phase(m, 0.5, r)}},
      {"tool-burst", {phase(m, 0.9, r)}},
      {"shift long->tool", {phase(m, 0.1, r / 2), phase(m, 0.9, r / 2)}},
      {"shift tool->long", {phase(m, 0.9, r / 2), phase(m, 0.1, r / 2)}},
  };
}

eval_params params_for(byte_size budget, double recompute) {
  eval_params p;
  p.budget = budget;
  p.costs.recompute_seconds_per_token = recompute;
  p.dual.headroom_blocks = 64;
  p.dual.dead_zone = 2;
  return p;
}

// One table: every workload's arms at one recompute cost.
struct table {
  double recompute = 0;
  std::vector<std::pair<std::string, eval_result>> results;
};

void print_markdown(const model_spec& m, byte_size budget, const evaluate_options& o,
                    const table& t) {
  const eval_params p = params_for(budget, t.recompute);
  std::printf(
      "\n%s at %s, %u rounds per workload, bandwidth %.0f GB/s, recompute %.0f us/token\n\n",
      m.name.c_str(), format_bytes(budget.count()).c_str(), o.rounds,
      p.costs.bandwidth_bytes_per_second / 1e9, p.costs.recompute_seconds_per_token * 1e6);
  std::printf(
      "| workload | arm | cap (start->end, min..max) | moves | warm expert misses | warm KV "
      "misses | warm latency (s) | x oracle |\n|---|---|---|---|---|---|---|---|\n");
  for (const auto& [name, result] : t.results) {
    const double oracle = result.arm("oracle").seconds;
    for (const auto& a : result.arms) {
      std::printf("| %s | %s%s | %d->%d, %d..%d | %u | %llu | %llu | %.2f | %.3f |\n", name.c_str(),
                  a.name.c_str(), a.admissible ? "" : " (below floor)", a.cap_start, a.cap_end,
                  a.cap_min, a.cap_max, a.moves,
                  static_cast<unsigned long long>(a.expert_warm_misses),
                  static_cast<unsigned long long>(a.kv_warm_misses), a.seconds, a.seconds / oracle);
    }
  }
  std::fflush(stdout);
}

void print_json(const model_spec& m, byte_size budget, const evaluate_options& o,
                const std::vector<table>& tables) {
  nlohmann::ordered_json out;
  out["model"] = m.name;
  out["budget_bytes"] = budget.count();
  out["rounds"] = o.rounds;
  out["seed"] = o.seed;
  out["bandwidth_gbps"] = cost_params{}.bandwidth_bytes_per_second / 1e9;
  out["tables"] = nlohmann::ordered_json::array();
  for (const table& t : tables) {
    nlohmann::ordered_json j;
    j["recompute_s_per_token"] = t.recompute;
    j["workloads"] = nlohmann::ordered_json::array();
    for (const auto& [name, result] : t.results) {
      const double oracle = result.arm("oracle").seconds;
      nlohmann::ordered_json arms = nlohmann::ordered_json::array();
      for (const auto& a : result.arms) {
        arms.push_back({{"arm", a.name},
                        {"admissible", a.admissible},
                        {"cap_start", a.cap_start},
                        {"cap_end", a.cap_end},
                        {"cap_min", a.cap_min},
                        {"cap_max", a.cap_max},
                        {"moves", a.moves},
                        {"expert_warm_misses", a.expert_warm_misses},
                        {"kv_warm_misses", a.kv_warm_misses},
                        {"seconds", a.seconds},
                        {"x_oracle", a.seconds / oracle}});
      }
      j["workloads"].push_back({{"workload", name}, {"arms", std::move(arms)}});
    }
    out["tables"].push_back(std::move(j));
  }
  std::cout << out.dump() << '\n';
}

void run(const evaluate_options& o) {
  const model_spec m = load_model(o.model);
  const byte_size budget = parse_byte_size(o.budget);
  const auto defs = workloads(m, o.rounds);
  progress_bar bar("evaluate " + m.name, (o.recompute.size() * defs.size()) << 16,
                   progress_wanted(o.json));
  std::vector<table> tables;
  for (const double recompute : o.recompute) {
    table t{recompute, {}};
    const eval_params p = params_for(budget, recompute);
    for (const auto& d : defs) {
      const auto w = make_eval_workload(d.name, m, d.phases, o.seed);
      t.results.emplace_back(d.name, evaluate(m, w, p));
      bar.advance(1u << 16);  // one unit of work per workload, drawn at once
    }
    if (!o.json) {
      print_markdown(m, budget, o, t);
    }
    tables.push_back(std::move(t));
  }
  if (o.json) {
    print_json(m, budget, o, tables);
  }
}

}  // namespace

void add_evaluate_command(CLI::App& app) {
  auto options = std::make_shared<evaluate_options>();
  auto* cmd = app.add_subcommand(
      "evaluate",
      "Compare expert/KV split policies (MV-WSA configurator and online controller, dual resize, "
      "50-50, Flux-prop, oracle) on agentic workloads: Markdown tables, or JSON");
  cmd->add_option("--model", options->model, model_source_help())->capture_default_str();
  cmd->add_option("--budget", options->budget, "device budget, e.g. 12GiB")->capture_default_str();
  cmd->add_option("--rounds", options->rounds, "serving rounds per workload")
      ->check(whole_number(2, 1000000))
      ->capture_default_str();
  cmd->add_option("--recompute", options->recompute,
                  "seconds to recompute one KV token; one table per value (default 2e-4,2e-3)")
      ->delimiter(',')
      ->check(number_above(0, true));
  cmd->add_option("--seed", options->seed, "workload seed")
      ->check(whole_number(0))
      ->capture_default_str();
  cmd->add_flag("--json", options->json, "print one JSON object instead of the tables");
  cmd->callback([options] { run(*options); });
}

}  // namespace wisp::tool
