// SPDX-License-Identifier: Apache-2.0
// `wisp sim FILE --ranks G --capacity TOTAL --expert-bytes B --bandwidth-gbps L [--batch 16]
//           [--local-experts P] [--hidden H] [--a2a-gbps 153] [--a2a-latency-us 10]
//           [--hbm-gbps 3350] [--tflops 989] [--expert-params N] [--policy decayed_frequency]`
// plus the serial sim's --miss-latency-us (per copy), --jobs and --json/--csv: the
// expert-parallel simulator (wisp/sim/ep_sim.hpp) over G ranks, each with its own link and
// slots, for the arms ep-lru, eplb-lru, wisp and ep-POLICY at every total capacity.
#include "ranks_cmd.hpp"

#include "cli.hpp"
#include "trace_source.hpp"

#include <wisp/alloc/units.hpp>
#include <wisp/cache/visit_policy.hpp>
#include <wisp/core/error.hpp>
#include <wisp/sim/ep_sim.hpp>
#include <wisp/trace/routing_trace.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace wisp::tool {

struct ranks_options {
  std::int32_t ranks = 0;
  std::int32_t batch = 16;
  std::int32_t local_experts = 0;
  std::int32_t hidden = 0;
  double a2a_gbps = 153.0;
  double a2a_latency_us = 10.0;
  double hbm_gbps = 3350.0;
  double tflops = 989.0;
  std::uint64_t expert_params = 0;
};

namespace {

constexpr ep_arm arm_order[] = {ep_arm::ep_lru, ep_arm::eplb_lru, ep_arm::wisp, ep_arm::ep_policy};

struct run_row {
  std::int32_t capacity = 0;
  ep_arm arm = ep_arm::ep_lru;
  ep_arm_result result;
};

// The step-time constants, from the options (see docs/expert_parallel.md for the defaults).
ep_cost_model cost_model(const ranks_options& opt, const ranks_common& common) {
  return ep_cost_model::from_hardware(
      link_model{common.bandwidth_gbps * 1e9, common.latency_us * 1e-6}, common.expert_bytes,
      opt.expert_params, opt.hbm_gbps * 1e9, opt.tflops * 1e12, opt.hidden, opt.a2a_gbps * 1e9,
      opt.a2a_latency_us * 1e-6);
}

std::string checked_policy(const std::vector<std::string>& requested) {
  if (requested.empty()) {
    return "decayed_frequency";
  }
  if (requested.size() > 1) {
    usage_error("--ranks takes one --policy (the ranks' cache in the wisp arm), got ",
                comma_list(requested));
  }
  const std::string_view known = builtin_policy_name(requested.front());
  if (known.empty() || known == "belady" || known == "predicted_next_use") {
    usage_error("--policy '", requested.front(),
                "' cannot run on the ranks (valid: every built-in policy but belady and "
                "predicted_next_use, which need a future or a predictor per rank)");
  }
  return std::string(known);
}

std::vector<std::int32_t> checked_capacities(const std::vector<std::int64_t>& requested,
                                             const routing_trace& t, std::int32_t ranks) {
  const std::int64_t low = std::int64_t{ranks} * t.shape().top_k;
  const std::int64_t high = std::int64_t{t.shape().layers} * t.shape().experts;
  std::vector<std::int32_t> out;
  for (const std::int64_t c : requested) {
    if (c < low || c > high) {
      usage_error("--capacity ", c, " is out of range for --ranks ", ranks,
                  ": the total slots over all ranks must leave every rank at least top_k = ",
                  t.shape().top_k, " slots (>= ", low, ") and hold at most every expert (",
                  t.shape().layers, " x ", t.shape().experts, " = ", high, ")");
    }
    out.push_back(static_cast<std::int32_t>(c));
  }
  return out;
}

// Every (capacity, arm) run on `jobs` threads, capacity-major; the first error is rethrown.
std::vector<run_row> run_all(const routing_trace& t, ep_sim_config base,
                             const std::vector<std::int32_t>& capacities, std::uint32_t jobs) {
  std::vector<run_row> rows;
  for (const std::int32_t c : capacities) {
    for (const ep_arm arm : arm_order) {
      rows.push_back({c, arm, {}});
    }
  }
  std::atomic<std::size_t> next{0};
  std::vector<std::exception_ptr> errors(rows.size());
  auto work = [&] {
    for (std::size_t i = next++; i < rows.size(); i = next++) {
      try {
        ep_sim_config config = base;
        config.total_slots = rows[i].capacity;
        rows[i].result = simulate_ep(t, config, rows[i].arm);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> threads;
  for (std::size_t j = 1; j < std::min<std::size_t>(jobs, rows.size()); ++j) {
    threads.emplace_back(work);
  }
  work();
  for (auto& thread : threads) {
    thread.join();
  }
  for (const auto& e : errors) {
    if (e) {
      std::rethrow_exception(e);
    }
  }
  return rows;
}

const ep_arm_result* find_arm(const std::vector<run_row>& rows, std::int32_t capacity, ep_arm arm) {
  for (const run_row& r : rows) {
    if (r.capacity == capacity && r.arm == arm) {
      return &r.result;
    }
  }
  return nullptr;
}

// This arm's step over another arm's at the same capacity (0 when that one took no time).
double versus(const std::vector<run_row>& rows, const run_row& r, ep_arm other) {
  const ep_arm_result* o = find_arm(rows, r.capacity, other);
  return o == nullptr || o->slowest_rank_step_s <= 0
             ? 0.0
             : r.result.slowest_rank_step_s / o->slowest_rank_step_s;
}

template <class F>
nlohmann::ordered_json per_rank(const ep_arm_result& a, F field) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const ep_rank_result& r : a.ranks) {
    out.push_back(field(r));
  }
  return out;
}

std::uint64_t total_misses(const ep_arm_result& a) {
  std::uint64_t n = 0;
  for (const ep_rank_result& r : a.ranks) {
    n += r.misses;
  }
  return n;
}

void print_json(const ranks_options& opt, const ranks_common& common, const routing_trace& t,
                const ep_sim_config& config, const std::vector<run_row>& rows) {
  nlohmann::ordered_json out = trace_json(common.file, t);
  out["ranks"] = opt.ranks;
  out["batch"] = opt.batch;
  out["policy"] = config.policy;
  out["local_experts"] = config.local_experts_for(t.shape().experts);
  const ep_cost_model& m = config.costs;
  out["model"] = {{"link_gbps", common.bandwidth_gbps},
                  {"link_latency_us", common.latency_us},
                  {"expert_bytes", m.expert_bytes},
                  {"copy_us", m.link.copy_seconds(m.expert_bytes) * 1e6},
                  {"hbm_gbps", opt.hbm_gbps},
                  {"expert_us", m.expert_seconds * 1e6},
                  {"tflops", opt.tflops},
                  {"token_us", m.token_seconds * 1e6},
                  {"hidden", m.hidden},
                  {"activation_bytes", m.activation_bytes},
                  {"a2a_gbps", opt.a2a_gbps},
                  {"a2a_latency_us", opt.a2a_latency_us}};
  out["arms"] = nlohmann::ordered_json::array();
  for (const run_row& r : rows) {
    const ep_arm_result& a = r.result;
    out["arms"].push_back(
        {{"name", a.name},
         {"policy", a.policy},
         {"total_slots", r.capacity},
         {"local_experts", a.local_experts},
         {"physical_experts", a.physical_experts},
         {"steps", a.steps},
         {"tokens", a.tokens},
         {"slowest_rank_step_s", a.slowest_rank_step_s},
         {"x_ep_lru", versus(rows, r, ep_arm::ep_lru)},
         {"x_eplb_lru", versus(rows, r, ep_arm::eplb_lru)},
         {"load_imbalance", a.load_imbalance},
         {"layer_load_imbalance", a.layer_load_imbalance},
         {"slots", per_rank(a, [](const ep_rank_result& x) { return x.slots; })},
         {"misses", per_rank(a, [](const ep_rank_result& x) { return x.misses; })},
         {"hits", per_rank(a, [](const ep_rank_result& x) { return x.hits; })},
         {"link_bytes", per_rank(a, [](const ep_rank_result& x) { return x.link_bytes; })},
         {"token_load", per_rank(a, [](const ep_rank_result& x) { return x.pairs; })},
         {"tokens_received",
          per_rank(a, [](const ep_rank_result& x) { return x.tokens_received; })},
         {"busy_s", per_rank(a, [](const ep_rank_result& x) { return x.busy_seconds; })}});
  }
  std::cout << out.dump() << '\n';
}

void print_csv(const std::vector<run_row>& rows) {
  std::printf(
      "arm,policy,total_slots,local_experts,steps,slowest_rank_step_s,x_ep_lru,x_eplb_lru,"
      "load_imbalance,layer_load_imbalance,rank,slots,misses,hits,link_bytes,token_load,"
      "tokens_received,busy_s\n");
  for (const run_row& r : rows) {
    const ep_arm_result& a = r.result;
    for (std::size_t i = 0; i < a.ranks.size(); ++i) {
      const ep_rank_result& x = a.ranks[i];
      std::printf(
          "%s,%s,%d,%d,%llu,%.9g,%.6g,%.6g,%.6g,%.6g,%zu,%d,%llu,%llu,%llu,%llu,%llu,%.9g\n",
          a.name.c_str(), a.policy.c_str(), r.capacity, a.local_experts,
          static_cast<unsigned long long>(a.steps), a.slowest_rank_step_s,
          versus(rows, r, ep_arm::ep_lru), versus(rows, r, ep_arm::eplb_lru), a.load_imbalance,
          a.layer_load_imbalance, i, x.slots, static_cast<unsigned long long>(x.misses),
          static_cast<unsigned long long>(x.hits), static_cast<unsigned long long>(x.link_bytes),
          static_cast<unsigned long long>(x.pairs),
          static_cast<unsigned long long>(x.tokens_received), x.busy_seconds);
    }
  }
}

void print_table(const ranks_options& opt, const ranks_common& common, const routing_trace& t,
                 const ep_sim_config& config, const std::vector<run_row>& rows) {
  const auto& shape = t.shape();
  const ep_cost_model& m = config.costs;
  std::printf("%s: %zu tokens, %d layers x %d experts, top-%d; %d ranks, batch %d (%llu steps)\n",
              common.file.c_str(), t.steps(), shape.layers, shape.experts, shape.top_k, opt.ranks,
              opt.batch,
              rows.empty() ? 0ULL : static_cast<unsigned long long>(rows.front().result.steps));
  std::printf(
      "model (per rank): copy %s over %.3g GB/s + %.3g us = %.1f us; expert compute %.2f us "
      "(HBM %.4g GB/s), %.1f ns per (token, expert) (%.4g TFLOPS); all-to-all %.4g GB/s + %.3g "
      "us, %d x %d B per token\n",
      format_bytes(m.expert_bytes).c_str(), common.bandwidth_gbps, common.latency_us,
      m.link.copy_seconds(m.expert_bytes) * 1e6, m.expert_seconds * 1e6, opt.hbm_gbps,
      m.token_seconds * 1e9, opt.tflops, opt.a2a_gbps, opt.a2a_latency_us, m.hidden,
      m.activation_bytes);
  std::printf(
      "step = sum over layers of the slowest rank's copies + compute + all-to-all; load_imb = "
      "max / mean (token, expert) pairs per rank (layer_imb: per layer, averaged)\n");
  std::int32_t previous = -1;
  for (const run_row& r : rows) {
    const ep_arm_result& a = r.result;
    if (r.capacity != previous) {
      previous = r.capacity;
      std::printf(
          "\ntotal slots %d (%.1f%% of %d experts), rows per rank per layer: %d (ep), %d "
          "(planned)\n",
          r.capacity, 100.0 * r.capacity / (shape.layers * shape.experts),
          shape.layers * shape.experts, (shape.experts + opt.ranks - 1) / opt.ranks,
          config.local_experts_for(shape.experts));
      std::printf("%-22s %-18s %9s %9s %7s %9s %9s %11s %10s %10s\n", "arm", "policy", "step_ms",
                  "x_ep_lru", "x_eplb", "load_imb", "layer_imb", "misses", "max_rank", "moved");
    }
    std::uint64_t most = 0;
    for (const ep_rank_result& x : a.ranks) {
      most = std::max(most, x.misses);
    }
    std::uint64_t moved = 0;
    for (const ep_rank_result& x : a.ranks) {
      moved += x.link_bytes;
    }
    std::printf("%-22s %-18s %9.3f %9.3f %7.3f %9.3f %9.3f %11llu %10llu %10s\n", a.name.c_str(),
                a.policy.c_str(), a.slowest_rank_step_s * 1e3, versus(rows, r, ep_arm::ep_lru),
                versus(rows, r, ep_arm::eplb_lru), a.load_imbalance, a.layer_load_imbalance,
                static_cast<unsigned long long>(total_misses(a)),
                static_cast<unsigned long long>(most), format_bytes(moved).c_str());
  }
}

}  // namespace

std::shared_ptr<ranks_options> add_ranks_options(CLI::App& sim) {
  auto opt = std::make_shared<ranks_options>();
  auto* group = sim.add_option_group(
      "ranks",
      "--ranks: expert parallelism over G ranks, each paging its own experts over its own link; "
      "--capacity is then the total slots over all ranks (docs/expert_parallel.md)");
  group
      ->add_option("--ranks", opt->ranks,
                   "simulate expert parallelism over this many ranks (arms ep-lru, eplb-lru, "
                   "wisp and ep-POLICY, the same total slots each)")
      ->check(whole_number(1, 1024));
  group->add_option("--batch", opt->batch, "concurrent sequences per serving step")
      ->check(whole_number(1, 65536))
      ->capture_default_str();
  group
      ->add_option("--local-experts", opt->local_experts,
                   "rows (physical experts) per rank per layer of eplb-lru and wisp; 0: ceil(E / "
                   "G) plus a quarter, about 25% redundant experts")
      ->check(whole_number(0, 65536))
      ->capture_default_str();
  group
      ->add_option("--hidden", opt->hidden,
                   "hidden size: values a token sends to each rank it is dispatched to (0: no "
                   "all-to-all payload, its latency only)")
      ->check(whole_number(0, 1u << 20))
      ->capture_default_str();
  group
      ->add_option("--a2a-gbps", opt->a2a_gbps,
                   "all-to-all bandwidth per rank, GB/s (DeepEP's intranode dispatch on 8 GPUs)")
      ->check(number_above(0, true))
      ->capture_default_str();
  group
      ->add_option("--a2a-latency-us", opt->a2a_latency_us,
                   "fixed cost of each dispatch and each combine, microseconds")
      ->check(number_above(0, false))
      ->capture_default_str();
  group
      ->add_option("--hbm-gbps", opt->hbm_gbps,
                   "device memory bandwidth, GB/s: an active expert's compute reads its bytes "
                   "once (H100 SXM)")
      ->check(number_above(0, true))
      ->capture_default_str();
  group
      ->add_option("--tflops", opt->tflops,
                   "dense compute, TFLOPS: a (token, expert) pair costs 2 x expert params "
                   "(H100 SXM, bf16)")
      ->check(number_above(0, true))
      ->capture_default_str();
  group
      ->add_option("--expert-params", opt->expert_params,
                   "parameters of one expert (0: expert-bytes / 2, bf16)")
      ->check(whole_number(0))
      ->capture_default_str();
  return opt;
}

bool ranks_requested(const ranks_options& options) {
  return options.ranks > 0;
}

void run_ranks(const ranks_options& opt, const ranks_common& common) {
  if (common.scope != "global") {
    usage_error("--ranks pages one pool of slots per rank over all its layers; --scope ",
                common.scope, " is not available with it");
  }
  if (common.expert_bytes == 0 || common.bandwidth_gbps <= 0.0) {
    usage_error(
        "--ranks needs the copy of an expert: give --expert-bytes > 0 and "
        "--bandwidth-gbps > 0 (each rank's link), got ",
        common.expert_bytes, " and ", common.bandwidth_gbps);
  }
  ep_sim_config config;
  config.ranks = opt.ranks;
  config.batch = opt.batch;
  config.local_experts = opt.local_experts;
  config.policy = checked_policy(common.policies);
  config.costs = cost_model(opt, common);
  const routing_trace t = load_trace_with_accesses(common.file);
  const std::vector<std::int32_t> capacities = checked_capacities(common.capacities, t, opt.ranks);
  const std::int32_t local = config.local_experts_for(t.shape().experts);
  if (std::int64_t{local} * opt.ranks < t.shape().experts) {
    usage_error("--local-experts ", local, " x --ranks ", opt.ranks, " rows cannot hold the ",
                t.shape().experts, " experts of a layer");
  }
  const std::vector<run_row> rows = run_all(t, config, capacities, common.jobs);
  if (common.json) {
    print_json(opt, common, t, config, rows);
  } else if (common.csv) {
    print_csv(rows);
  } else {
    print_table(opt, common, t, config, rows);
  }
}

}  // namespace wisp::tool
