// SPDX-License-Identifier: Apache-2.0
// `wisp sim FILE --timeline [--compute-us 50,200,...] [--compute-per-token-us C --tokens B]
//                [--prefetch none,top-k,percentile] [--overfetch 1,1.5] [--percentile 80]
//                [--prefetch-distance 1] [--miss-policy fetch|drop|substitute|hybrid
//                --always-fetch-top R] [--host-gbps G --host-threads N --host-thread-gflops F
//                --token-bytes B --value-rate R]`
// plus the serial sim's --policy, --capacity, --scope, --expert-bytes, --bandwidth-gbps,
// --miss-latency-us (per copy) and --json/--csv: the timeline simulator (wisp/sim/timeline_sim.hpp)
// on a link with demand copies first and prefetches in the gaps. One row per policy x capacity x
// compute time x prefetch setting.
#include "timeline_cmd.hpp"

#include "trace_source.hpp"

#include <wisp/core/error.hpp>
#include <wisp/pager/hybrid.hpp>
#include <wisp/pager/miss_policy.hpp>
#include <wisp/predict/prefetch.hpp>
#include <wisp/sim/timeline_sim.hpp>
#include <wisp/trace/routing_trace.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace wisp::tool {

struct timeline_options {
  bool enabled = false;
  std::vector<double> compute_us{0.0};
  double compute_per_token_us = 0.0;
  std::int32_t tokens = 1;
  std::vector<std::string> prefetch{"none"};
  std::vector<double> overfetch{1.0};
  double percentile = 80.0;
  std::int32_t percentile_limit = 64;
  std::int32_t distance = 1;
  std::string miss_policy = "fetch";
  std::int32_t always_fetch_top = 0;
  // hybrid: the host (defaults: the rtx-4090 profile's host, 64 GFLOP/s per thread)
  double host_gbps = 60.0;
  std::int32_t host_threads = 16;
  double host_thread_gflops = 64.0;
  std::uint64_t token_bytes = 0;
  double value_rate = 0.25;
};

namespace {

struct prefetch_setting {
  prefetch_config config;
  std::string label;  // "none", "top-k x1.5", "percentile 80"
};

std::vector<prefetch_setting> prefetch_settings(const timeline_options& opt) {
  std::vector<prefetch_setting> out;
  for (const std::string& rule : opt.prefetch) {
    prefetch_config base;
    base.percentile = opt.percentile;
    base.limit = opt.percentile_limit;
    base.distance = opt.distance;
    const std::optional<prefetch_rule> parsed = from_string<prefetch_rule>(rule);
    if (!parsed) {
      throw logic_error("--prefetch: unknown rule '" + rule + "' (valid: none, top-k, percentile)");
    }
    if (*parsed == prefetch_rule::none) {
      out.push_back({base, "none"});
    } else if (*parsed == prefetch_rule::top_k) {
      for (const double m : opt.overfetch) {
        prefetch_config c = base;
        c.rule = prefetch_rule::top_k;
        c.overfetch = m;
        char label[48];
        std::snprintf(label, sizeof label, "top-k x%g", m);
        out.push_back({c, label});
      }
    } else {
      prefetch_config c = base;
      c.rule = prefetch_rule::percentile;
      char label[48];
      std::snprintf(label, sizeof label, "percentile %g", opt.percentile);
      out.push_back({c, label});
    }
    out.back().config.validate();
  }
  return out;
}

struct timeline_row {
  std::string policy;  // command-line name
  std::int32_t capacity = 0;
  double compute_us = 0.0;
  std::string prefetch;
  timeline_result result;
};

double share(double part, double whole) {
  return whole > 0.0 ? part / whole : 0.0;
}

nlohmann::ordered_json row_json(const timeline_row& r, const timeline_common& common,
                                const timeline_options& opt) {
  const timeline_result& x = r.result;
  return {{"policy", r.policy},
          {"scope", common.scope},
          {"capacity", r.capacity},
          {"compute_us", r.compute_us},
          {"compute_per_token_us", opt.compute_per_token_us},
          {"tokens", opt.tokens},
          {"prefetch", r.prefetch},
          {"miss_policy", opt.miss_policy},
          {"accesses", x.stats.accesses},
          {"hits", x.stats.hits},
          {"misses", x.stats.misses},
          {"demand_copies", x.demand_copies},
          {"prefetches", x.prefetches_started},
          {"prefetches_useful", x.prefetches_useful},
          {"prefetches_cancelled", x.prefetches_cancelled},
          {"prefetch_precision", x.prefetch_precision},
          {"prefetch_recall", x.prefetch_recall},
          {"wasted_prefetch_bytes", x.wasted_prefetch_bytes},
          {"stall_s", x.stall_seconds},
          {"compute_s", x.compute_seconds},
          {"total_s", x.total_seconds},
          {"tpot_ms", 1e3 * x.tpot_seconds},
          {"link_busy_s", x.link_busy_seconds},
          {"host_experts", x.host_experts},
          {"host_busy_s", x.host_busy_seconds},
          {"dropped", x.rewrite.dropped},
          {"substituted", x.rewrite.substituted},
          {"dropped_weight_share", share(x.rewrite.dropped_weight, x.routed_weight)},
          {"substituted_weight_share", share(x.rewrite.substituted_weight, x.routed_weight)}};
}

}  // namespace

// One declarative table: the timeline's options, in `--help`'s order (long, but a list of
// options reads best whole).
std::shared_ptr<timeline_options> add_timeline_options(CLI::App& sim) {
  auto opt = std::make_shared<timeline_options>();
  auto* group = sim.add_option_group(
      "timeline", "--timeline: link and compute queues, demand copies first, prefetch in the gaps");
  group->add_flag("--timeline", opt->enabled,
                  "run the timeline simulator instead of the serial stall model");
  group
      ->add_option("--compute-us", opt->compute_us,
                   "comma-separated per-layer compute times (fixed part), microseconds")
      ->delimiter(',')
      ->check(CLI::NonNegativeNumber);
  group
      ->add_option("--compute-per-token-us", opt->compute_per_token_us,
                   "per-layer compute per token, microseconds")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  group
      ->add_option("--tokens", opt->tokens,
                   "tokens each layer computes per pass (scales compute only; the routing stays "
                   "the trace's)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  group
      ->add_option("--prefetch", opt->prefetch,
                   "comma-separated prefetch rules among none, top-k, percentile")
      ->delimiter(',');
  group
      ->add_option("--overfetch", opt->overfetch,
                   "comma-separated top-k overfetch factors (k x m experts)")
      ->delimiter(',')
      ->check(CLI::NonNegativeNumber);
  group
      ->add_option("--percentile", opt->percentile,
                   "percentile rule: prefetch experts scored above this percentile")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  group
      ->add_option("--percentile-limit", opt->percentile_limit,
                   "percentile rule: at most this many experts per layer")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  group
      ->add_option("--prefetch-distance", opt->distance,
                   "prefetch the layer this many layers after the one just routed")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  group
      ->add_option("--miss-policy", opt->miss_policy,
                   "fetch (exact), hybrid (exact: copy each miss or compute it on the host, "
                   "whichever the cost model prefers), or the APPROXIMATE drop / substitute that "
                   "change outputs")
      ->check(CLI::IsMember({"fetch", "drop", "substitute", "hybrid"}))
      ->capture_default_str();
  group
      ->add_option("--host-gbps", opt->host_gbps,
                   "hybrid: host memory bandwidth, GB/s (a host expert reads its weights once)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  group->add_option("--host-threads", opt->host_threads, "hybrid: host threads computing experts")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  group
      ->add_option("--host-thread-gflops", opt->host_thread_gflops,
                   "hybrid: FLOP rate of one host thread, GFLOP/s (BF16 weights: two FLOPs per "
                   "weight per token)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  group
      ->add_option("--token-bytes", opt->token_bytes,
                   "hybrid: bytes of one token's hidden state; a call with host work moves them "
                   "to the host and the outputs back, each a copy on the link")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  group
      ->add_option("--value-rate", opt->value_rate,
                   "hybrid: rate of the reuse value estimator's moving averages, in (0, 1]")
      ->check(CLI::Range(1e-9, 1.0))
      ->capture_default_str();
  group
      ->add_option("--always-fetch-top", opt->always_fetch_top,
                   "drop/substitute: each token's R highest-weight experts are always fetched")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  return opt;
}

bool timeline_requested(const timeline_options& options) {
  return options.enabled;
}

namespace {

// The run's config (scope, link, compute, miss policy) less what the sweep varies.
timeline_config make_timeline_config(const timeline_options& opt, const timeline_common& common) {
  timeline_config config;
  config.scope = cache_scope_from_string(common.scope);
  config.link = link_model{common.bandwidth_gbps * 1e9, common.latency_us * 1e-6};
  config.expert_bytes = common.expert_bytes;
  config.compute_per_token_seconds = opt.compute_per_token_us * 1e-6;
  config.tokens = opt.tokens;
  const std::optional<miss_policy> miss = from_string<miss_policy>(opt.miss_policy);
  if (!miss) {
    throw logic_error("--miss-policy: unknown policy '" + opt.miss_policy +
                      "' (valid: fetch, drop, substitute, hybrid)");
  }
  config.miss = miss_options{*miss, opt.always_fetch_top};
  if (config.miss.policy == miss_policy::hybrid) {
    const double transfer =
        config.link.copy_seconds(static_cast<std::uint64_t>(opt.tokens) * opt.token_bytes);
    config.hybrid = bf16_hybrid_costs(
        config.link.copy_seconds(common.expert_bytes), static_cast<double>(common.expert_bytes),
        {.memory_bytes_per_second = opt.host_gbps * 1e9,
         .flops_per_second = opt.host_threads * opt.host_thread_gflops * 1e9},
        2 * transfer);
    config.hybrid_value_rate = opt.value_rate;
  }
  return config;
}

void write_timeline_csv(const std::vector<timeline_row>& rows, const timeline_common& common,
                        const timeline_options& opt) {
  bool header = true;
  for (const timeline_row& r : rows) {
    const nlohmann::ordered_json j = row_json(r, common, opt);
    std::string line;
    if (header) {
      for (const auto& [key, value] : j.items()) {
        line += (line.empty() ? "" : ",") + key;
      }
      std::printf("%s\n", line.c_str());
      line.clear();
      header = false;
    }
    for (const auto& [key, value] : j.items()) {
      if (!line.empty()) {
        line += ',';
      }
      line += value.is_string() ? value.get<std::string>() : value.dump();
    }
    std::printf("%s\n", line.c_str());
  }
}

void write_timeline_table(const std::vector<timeline_row>& rows, const routing_trace& t,
                          const timeline_config& config, const timeline_options& opt,
                          const timeline_common& common) {
  const auto& shape = t.shape();
  std::printf("%s: %zu steps, %d layers x %d experts, top-%d; scope %s\n", common.file.c_str(),
              t.steps(), shape.layers, shape.experts, shape.top_k, common.scope.c_str());
  std::printf(
      "link %.3g GB/s + %.3g us per copy, %llu B per expert -> %.3f ms per copy; compute per "
      "layer = compute_us + %.3g us x %d tokens\n\n",
      common.bandwidth_gbps, common.latency_us,
      static_cast<unsigned long long>(common.expert_bytes),
      1e3 * config.link.copy_seconds(common.expert_bytes), opt.compute_per_token_us, opt.tokens);
  if (config.miss.policy == miss_policy::hybrid) {
    std::printf(
        "hybrid: host %.3g GB/s, %d threads x %.3g GFLOP/s; a host expert costs %.3f ms + %.4f ms "
        "per position (roofline), %.3f ms of transfers per call with host work\n\n",
        opt.host_gbps, opt.host_threads, opt.host_thread_gflops, 1e3 * config.hybrid.expert_seconds,
        1e3 * config.hybrid.position_seconds, 1e3 * config.hybrid.call_seconds);
  }
  std::printf("%-18s %5s %9s %-16s %10s %9s %10s %8s %8s %10s %9s %9s\n", "policy", "cap",
              "compute", "prefetch", "misses", "prefetch", "useful", "prec", "recall", "host",
              "stall_s", "tpot_ms");
  for (const timeline_row& r : rows) {
    const timeline_result& x = r.result;
    std::printf("%-18s %5d %9.1f %-16s %10llu %9llu %10llu %8.4f %8.4f %10llu %9.3f %9.3f\n",
                r.policy.c_str(), r.capacity, r.compute_us, r.prefetch.c_str(),
                static_cast<unsigned long long>(x.stats.misses),
                static_cast<unsigned long long>(x.prefetches_started),
                static_cast<unsigned long long>(x.prefetches_useful), x.prefetch_precision,
                x.prefetch_recall, static_cast<unsigned long long>(x.host_experts), x.stall_seconds,
                1e3 * x.tpot_seconds);
  }
}

}  // namespace

void run_timeline(const timeline_options& opt, const timeline_common& common) {
  if (common.bandwidth_gbps <= 0.0) {
    throw logic_error("--timeline needs a link: give --bandwidth-gbps > 0 (and --expert-bytes)");
  }
  const std::vector<prefetch_setting> settings = prefetch_settings(opt);
  const routing_trace t = load_trace(common.file);
  timeline_config config = make_timeline_config(opt, common);
  const bool approximate =
      config.miss.policy == miss_policy::drop || config.miss.policy == miss_policy::substitute;
  if (approximate && !common.json && !common.csv) {
    std::printf(
        "NOTE: --miss-policy %s is APPROXIMATE: it changes the model's outputs (see the "
        "dropped / substituted gate-weight shares)\n",
        opt.miss_policy.c_str());
  }

  std::vector<timeline_row> rows;
  for (const std::int64_t capacity : common.capacities) {
    config.capacity = static_cast<std::int32_t>(capacity);
    for (const double compute : opt.compute_us) {
      config.compute_seconds = compute * 1e-6;
      for (std::size_t p = 0; p < common.policies.size(); ++p) {
        for (const prefetch_setting& setting : settings) {
          if (common.policies[p] == "belady" && setting.config.rule != prefetch_rule::none) {
            continue;  // belady replays its own future: demand paging only
          }
          config.prefetch = setting.config;
          rows.push_back({common.policies[p], config.capacity, compute, setting.label,
                          simulate_timeline_named(common.policies[p], t, config)});
        }
      }
    }
  }

  if (common.json) {
    nlohmann::ordered_json out;
    out["results"] = nlohmann::ordered_json::array();
    for (const timeline_row& r : rows) {
      out["results"].push_back(row_json(r, common, opt));
    }
    std::cout << out.dump() << '\n';
    return;
  }
  if (common.csv) {
    write_timeline_csv(rows, common, opt);
  } else {
    write_timeline_table(rows, t, config, opt, common);
  }
}

}  // namespace wisp::tool
