// SPDX-License-Identifier: Apache-2.0
// `wisp plan --model NAME|FILE.json --budget BYTES|24GiB [--trace FILE]
//            [--concurrency C --context N] [--bandwidth GBps] [--recompute SECONDS_PER_TOKEN]
//            [--sweep-cap 8,16,32] [--json]`:
// splits a device budget between expert slots and KV blocks (wisp/alloc, MV-WSA's offline
// configurator) and prints the chosen split, the engine knobs and a sweep of caps.
//
// The expert miss curve is the per-layer, call-granular curve (what the pager will miss) of
// --trace, or, without one, of a synthetic trace of the model's shape (8,222 steps, seed 1). The
// KV stream is the working set of the admission floor (C sessions x N tokens) read every decode
// round: a step curve, so past the floor extra KV blocks buy nothing and the choice is the
// smallest cap reaching the lowest predicted latency.
#include "cli.hpp"
#include "commands.hpp"
#include "model_source.hpp"
#include "trace_source.hpp"

#include <wisp/alloc/configurator.hpp>
#include <wisp/alloc/cost_model.hpp>
#include <wisp/alloc/model_spec.hpp>
#include <wisp/alloc/split.hpp>
#include <wisp/alloc/units.hpp>
#include <wisp/reuse/histogram.hpp>
#include <wisp/reuse/trace_profile.hpp>
#include <wisp/trace/routing_trace.hpp>
#include <wisp/trace/synthetic.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace wisp::tool {
namespace {

struct plan_options {
  std::string model;
  std::string budget;
  std::string trace;
  std::optional<std::uint64_t> concurrency;
  std::optional<std::uint64_t> context;
  double bandwidth_gbps = 25.0;
  double recompute = 2e-4;
  std::vector<std::int64_t> sweep_caps;
  bool json = false;
};

routing_trace plan_trace(const std::string& file, const model_spec& m) {
  if (file.empty()) {
    return make_synthetic_trace(synthetic_for(m), default_synthetic_steps, default_synthetic_seed);
  }
  routing_trace t = load_trace_with_accesses(file);
  const auto& s = t.shape();
  if (s != m.shape()) {
    usage_error("--trace ", file, " has shape ", s, " but model ", m.name, " has ", m.layers,
                " MoE layers x ", m.experts, " experts, top-", m.top_k);
  }
  return t;
}

// "yes", or why not: "floor" (fits, but the KV pool is below the admission floor), "budget".
const char* feasibility(const sweep_point& p) {
  return p.feasible ? "yes" : (p.fits ? "floor" : "budget");
}

// What `run` computed, for the writers.
struct plan_report {
  const plan_options& opt;
  const model_spec& m;
  byte_size budget;
  admission_floor floor;
  std::string source;  // the expert stream's
  std::size_t steps = 0;
  const miss_curve& expert_curve;
  const configuration& conf;
  const std::vector<sweep_point>& points;
};

// The caps to sweep: --sweep-cap's, each in [top_k, experts], or every cap in that range.
std::vector<std::int32_t> sweep_caps(const plan_options& opt, const model_spec& m) {
  std::vector<std::int32_t> caps;
  for (const std::int64_t c : opt.sweep_caps) {
    if (c < m.top_k || c > m.experts) {
      usage_error("--sweep-cap ", c, " is outside [top_k, experts] = [", m.top_k, ", ", m.experts,
                  "] for ", m.name, " (the cap is expert slots per MoE layer)");
    }
    caps.push_back(static_cast<std::int32_t>(c));
  }
  if (caps.empty()) {
    for (std::int32_t c = m.top_k; c <= m.experts; ++c) {
      caps.push_back(c);
    }
  }
  return caps;
}

void write_plan_json(const plan_report& r) {
  const model_spec& m = r.m;
  const split& c = r.conf.choice;
  nlohmann::ordered_json out;
  out["model"] = m.name;
  out["layers"] = m.layers;
  out["experts"] = m.experts;
  out["top_k"] = m.top_k;
  out["budget_bytes"] = r.budget.count();
  out["expert_slot_bytes"] = m.expert_bytes.count();
  out["cap_unit_bytes"] = m.cap_unit_bytes().count();
  out["kv_bytes_per_token"] = m.kv_bytes_per_token.count();
  out["block_tokens"] = m.block_tokens;
  out["kv_block_bytes"] = m.kv_block_bytes().count();
  out["floor"] = {{"concurrency", r.floor.concurrency},
                  {"context", r.floor.context},
                  {"blocks", r.floor.blocks(m.block_tokens)}};
  out["feasible_caps"] = {m.top_k, r.conf.max_feasible_cap};
  out["expert_stream"] = {{"source", r.source}, {"steps", r.steps}, {"granularity", "call"}};
  out["bandwidth_gbps"] = r.opt.bandwidth_gbps;
  out["recompute_s_per_token"] = r.opt.recompute;
  out["choice"] = {{"expert_cap", c.expert_cap},
                   {"kv_blocks", c.kv_blocks},
                   {"kv_tokens", c.kv_tokens},
                   {"expert_bytes", c.expert_bytes.count()},
                   {"kv_bytes", c.kv_bytes.count()},
                   {"slack_bytes", c.slack.count()},
                   {"predicted_latency_s", r.conf.predicted_seconds}};
  out["knobs"] = {{"per_layer_expert_cap", r.conf.knobs.per_layer_expert_cap},
                  {"kv_cache_bytes", r.conf.knobs.kv_cache_bytes.count()}};
  out["sweep"] = nlohmann::ordered_json::array();
  for (const auto& p : r.points) {
    out["sweep"].push_back(
        {{"expert_cap", p.expert_cap},
         {"kv_blocks", p.s.kv_blocks},
         {"kv_tokens", p.s.kv_tokens},
         {"miss_rate", r.expert_curve.miss_ratio(p.expert_cap)},
         {"fits", p.fits},
         {"feasible", p.feasible},
         {"predicted_s", p.fits ? nlohmann::ordered_json(p.seconds) : nlohmann::ordered_json()}});
  }
  std::cout << out.dump() << '\n';
}

void write_plan_text(const plan_report& r) {
  const model_spec& m = r.m;
  const split& c = r.conf.choice;
  const configuration& conf = r.conf;
  const admission_floor& floor = r.floor;
  std::printf(
      "model %s: %d MoE layers x %d experts, top-%d; one expert %s (a cap unit, one slot "
      "in every layer: %s); KV %s per token, %u-token blocks (%s)\n",
      m.name.c_str(), m.layers, m.experts, m.top_k, format_bytes(m.expert_bytes.count()).c_str(),
      format_bytes(m.cap_unit_bytes().count()).c_str(),
      format_bytes(m.kv_bytes_per_token.count()).c_str(), m.block_tokens,
      format_bytes(m.kv_block_bytes().count()).c_str());
  std::printf(
      "budget %s; admission floor %llu sessions x %llu tokens = %llu blocks; feasible caps "
      "[%d, %d]\n",
      format_bytes_and_gib(r.budget.count()).c_str(),
      static_cast<unsigned long long>(floor.concurrency),
      static_cast<unsigned long long>(floor.context),
      static_cast<unsigned long long>(floor.blocks(m.block_tokens)), m.top_k,
      conf.max_feasible_cap);
  std::printf(
      "expert stream: %s, %zu steps, misses per call; bandwidth %.3g GB/s, recompute %.3g "
      "s/token\n\n",
      r.source.c_str(), r.steps, r.opt.bandwidth_gbps, r.opt.recompute);
  std::printf(
      "choice: expert cap %d per layer (%s), KV %llu blocks = %llu tokens (%s), slack %llu "
      "B; predicted latency %.6g s\n",
      c.expert_cap, format_bytes(c.expert_bytes.count()).c_str(),
      static_cast<unsigned long long>(c.kv_blocks), static_cast<unsigned long long>(c.kv_tokens),
      format_bytes(c.kv_bytes.count()).c_str(), static_cast<unsigned long long>(c.slack.count()),
      conf.predicted_seconds);
  std::printf("engine knobs: per-layer expert cap %d, KV cache bytes %s\n\n",
              conf.knobs.per_layer_expert_cap,
              format_bytes_and_gib(conf.knobs.kv_cache_bytes.count()).c_str());
  std::printf("%8s %12s %12s %10s %9s %14s\n", "cap", "kv_blocks", "kv_tokens", "miss_rate",
              "feasible", "predicted_s");
  for (const auto& p : r.points) {
    char predicted[32] = "-";  // a cap that does not fit has no prediction
    if (p.fits) {
      std::snprintf(predicted, sizeof predicted, "%.6g", p.seconds);
    }
    std::printf("%8d %12llu %12llu %10.4f %9s %14s\n", p.expert_cap,
                static_cast<unsigned long long>(p.s.kv_blocks),
                static_cast<unsigned long long>(p.s.kv_tokens),
                r.expert_curve.miss_ratio(p.expert_cap), feasibility(p), predicted);
  }
}

void run(const plan_options& opt) {
  const model_spec m = load_model(opt.model);
  const byte_size budget = parse_byte_size(opt.budget);
  if (opt.concurrency.has_value() != opt.context.has_value()) {
    usage_error(
        "--concurrency and --context go together (the admission floor is C sessions x N "
        "tokens)");
  }
  const admission_floor floor{opt.concurrency.value_or(0), opt.context.value_or(0)};
  const std::vector<std::int32_t> caps = sweep_caps(opt, m);
  // Feasibility first: an infeasible request fails before any trace work.
  require_feasible(m, budget, floor);

  const routing_trace t = plan_trace(opt.trace, m);
  const miss_curve expert_curve{profile_trace(t, cache_scope::per_layer).histogram};
  const std::uint64_t rounds =
      std::max<std::uint64_t>(1, t.steps() / std::max<std::uint64_t>(1, floor.concurrency));
  const cost_params params{opt.bandwidth_gbps * 1e9, opt.recompute};
  const cost_model<> cost{m, expert_curve,
                          working_set_kv_curve(floor.blocks(m.block_tokens), rounds), params};
  const configuration conf = configure(cost, budget, floor);
  const auto points = sweep(cost, budget, floor, caps);
  if (floor.tokens() == 0) {
    warn(
        "no admission floor given (--concurrency, --context): nothing keeps KV memory for "
        "serving, and the choice leaves the KV cache ",
        conf.choice.kv_tokens,
        " tokens; give the sessions you must serve at once and their length");
  }
  const plan_report report{
      .opt = opt,
      .m = m,
      .budget = budget,
      .floor = floor,
      .source = opt.trace.empty() ? "synthetic trace of the model's shape" : opt.trace,
      .steps = t.steps(),
      .expert_curve = expert_curve,
      .conf = conf,
      .points = points};
  if (opt.json) {
    write_plan_json(report);
  } else {
    write_plan_text(report);
  }
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "plan",
      "Split a device budget between expert slots and KV blocks (MV-WSA configurator): the "
      "minimum predicted-latency split that meets the KV admission floor");
  auto opt = std::make_shared<plan_options>();
  cmd->add_option("--model", opt->model, model_source_help())->required();
  cmd->add_option("--budget", opt->budget,
                  "pageable device budget shared by experts and KV: bytes or a size such as "
                  "24GiB, 1.5GiB, 80GB")
      ->required();
  cmd->add_option("--trace", opt->trace,
                  "routing trace for the expert miss curve: " + trace_source_help() +
                      " (default: a synthetic trace of the model's shape)");
  cmd->add_option("--concurrency", opt->concurrency, "sessions served at once (admission floor)")
      ->check(whole_number(1));
  cmd->add_option("--context", opt->context, "tokens per session (admission floor)")
      ->check(whole_number(1));
  cmd->add_option("--bandwidth", opt->bandwidth_gbps,
                  "host-to-device bandwidth for expert pages, GB/s (1e9 B/s)")
      ->check(number_above(0, true))
      ->capture_default_str();
  cmd->add_option("--recompute", opt->recompute,
                  "prefill recompute time of one token of a missed KV block, seconds")
      ->check(number_above(0, false))
      ->capture_default_str();
  cmd->add_option("--sweep-cap", opt->sweep_caps,
                  "comma-separated caps to report (default: every cap in [top_k, experts])")
      ->delimiter(',')
      ->check(whole_number(1));
  cmd->add_flag("--json", opt->json, "print one JSON object");
  cmd->footer(
      "predicted latency = expert misses x expert bytes / bandwidth + KV block misses x "
      "block_tokens x recompute (WiSP Eq. 4). An infeasible budget exits 1 with the smallest "
      "budget that works.");
  cmd->callback([opt] { run(*opt); });
}

}  // namespace wisp::tool
