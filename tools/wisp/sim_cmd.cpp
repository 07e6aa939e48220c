// SPDX-License-Identifier: Apache-2.0
// `wisp sim FILE --policy lru,least_stale,... --capacity 16,83 --scope global|layer [--jobs N]
//           [--json|--csv] [--expert-bytes B --bandwidth-gbps G --miss-latency-us U]`:
// replays a routing trace through eviction policies at several capacities (wisp/sim), the
// (policy, capacity) runs spread over N threads, and reports hits, misses, collision misses,
// bytes moved and the stall time of the serial bandwidth model.
#include "cli.hpp"
#include "commands.hpp"
#include "progress.hpp"
#include "ranks_cmd.hpp"
#include "timeline_cmd.hpp"
#include "trace_source.hpp"

#include <wisp/alloc/units.hpp>
#include <wisp/cache/visit_policy.hpp>
#include <wisp/core/error.hpp>
#include <wisp/sim/hindsight.hpp>
#include <wisp/sim/simulate.hpp>
#include <wisp/sim/trace_sim.hpp>
#include <wisp/trace/routing_trace.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace wisp::tool {
namespace {

struct sim_options {
  std::string file;
  std::vector<std::string> policies;
  std::vector<std::int64_t> capacities;
  std::string scope = "global";
  std::uint32_t jobs = std::max(1u, std::thread::hardware_concurrency());
  bool json = false;
  bool csv = false;
  std::uint64_t expert_bytes = 0;
  double bandwidth_gbps = 0.0;
  double miss_latency_us = 0.0;
};

// The policies, by the library's names (builtin_policy_names), in the order they are reported.
// The one place where the command turns a name into a policy: anything else is refused. The
// hindsight references (hindsight_policy_names) are accepted where `hindsight` is allowed: by the
// plain replay, which builds them from the trace.
std::string valid_policy_list() {
  return comma_list(builtin_policy_names);
}

std::string_view policy_named(std::string_view name, bool hindsight) {
  const std::string_view known = builtin_policy_name(name);  // "least-stale" too
  if (!known.empty()) {
    return known;
  }
  for (const std::string_view reference : hindsight_policy_names) {
    if (name == reference) {
      if (!hindsight) {
        usage_error("--policy ", name,
                    " is a hindsight reference: it replays only in wisp sim without --timeline "
                    "or --ranks");
      }
      return reference;
    }
  }
  usage_error("unknown policy '", name, "' (valid: ", valid_policy_list(), "; and, as references, ",
              comma_list(hindsight_policy_names), ")");
}

// An access source over a trace that also advances the progress bar.
struct counted_source {
  const routing_trace* trace;
  progress_bar* bar;
  template <class F>
  void operator()(F&& f) const {
    trace->for_each_access([&](const access& a) {
      f(a);
      bar->advance();
    });
  }
};

// ------------------------------------------------------------------------------------ checks

std::vector<std::string_view> checked_policies(const std::vector<std::string>& requested,
                                               bool hindsight) {
  if (requested.empty()) {
    return {std::begin(builtin_policy_names), std::end(builtin_policy_names)};
  }
  std::vector<std::string_view> out;
  for (const auto& name : requested) {
    const std::string_view policy = policy_named(name, hindsight);
    if (std::find(out.begin(), out.end(), policy) == out.end()) {
      out.push_back(policy);
    }
  }
  return out;
}

std::vector<std::int32_t> checked_capacities(const std::vector<std::int64_t>& requested,
                                             bool global, const moe_shape& shape) {
  const std::int64_t low = shape.top_k;
  const std::int64_t high =
      global ? static_cast<std::int64_t>(shape.layers) * shape.experts : shape.experts;
  std::vector<std::int32_t> out;
  for (const std::int64_t c : requested) {
    if (c >= low && c <= high) {
      out.push_back(static_cast<std::int32_t>(c));
    } else if (global) {
      usage_error("--capacity ", c,
                  " is out of range for --scope global: the one cache needs at least top_k = ", low,
                  " slots (one layer's request) and at most layers x experts = ", shape.layers,
                  " x ", shape.experts, " = ", high);
    } else {
      usage_error("--capacity ", c,
                  " is out of range for --scope layer: each layer's cache needs at least top_k = ",
                  low, " slots and at most experts = ", high,
                  " (the capacity is per layer; use --scope global for a total)");
    }
  }
  return out;
}

// ------------------------------------------------------------------------------------ output

struct row {
  std::string_view policy;
  std::int32_t capacity = 0;
  sim_result result;
};

double ratio(std::uint64_t a, std::uint64_t b) {
  return b == 0 ? 0.0 : static_cast<double>(a) / static_cast<double>(b);
}

// misses / belady's misses at the same capacity, when belady ran and missed at all.
std::optional<double> versus_belady(const std::vector<row>& rows, const row& r) {
  for (const row& o : rows) {
    if (o.policy == "belady" && o.capacity == r.capacity && o.result.stats.misses > 0) {
      return ratio(r.result.stats.misses, o.result.stats.misses);
    }
  }
  return std::nullopt;
}

std::int64_t total_slots(const row& r, bool global, std::int32_t layers) {
  return global ? r.capacity : static_cast<std::int64_t>(r.capacity) * layers;
}

void print_json(const sim_options& opt, const routing_trace& t, const std::vector<row>& rows) {
  const bool global = opt.scope == "global";
  nlohmann::ordered_json out = trace_json(opt.file, t);
  out["scope"] = opt.scope;
  out["expert_bytes"] = opt.expert_bytes;
  out["bandwidth_gbps"] = opt.bandwidth_gbps;
  out["miss_latency_us"] = opt.miss_latency_us;
  out["results"] = nlohmann::ordered_json::array();
  for (const row& r : rows) {
    const cache_stats& s = r.result.stats;
    const auto x = versus_belady(rows, r);
    out["results"].push_back(
        {{"policy", r.policy},
         {"scope", opt.scope},
         {"capacity", r.capacity},
         {"total_slots", total_slots(r, global, t.shape().layers)},
         {"accesses", s.accesses},
         {"hits", s.hits},
         {"misses", s.misses},
         {"miss_rate", ratio(s.misses, s.accesses)},
         {"collision_misses", s.collision_misses},
         {"collision_rate", ratio(s.collision_misses, s.accesses)},
         {"evictions", s.evictions},
         {"x_belady", x ? nlohmann::ordered_json(*x) : nlohmann::ordered_json()},
         {"bytes_moved", r.result.bytes_moved},
         {"stall_s", r.result.stall_seconds}});
  }
  std::cout << out.dump() << '\n';
}

void print_csv(const sim_options& opt, const routing_trace& t, const std::vector<row>& rows) {
  const bool global = opt.scope == "global";
  std::printf(
      "policy,scope,capacity,total_slots,accesses,hits,misses,miss_rate,collision_misses,"
      "collision_rate,evictions,x_belady,bytes_moved,stall_s\n");
  for (const row& r : rows) {
    const cache_stats& s = r.result.stats;
    const auto x = versus_belady(rows, r);
    std::printf("%.*s,%s,%d,%lld,%llu,%llu,%llu,%.9g,%llu,%.9g,%llu,%s,%llu,%.9g\n",
                static_cast<int>(r.policy.size()), r.policy.data(), opt.scope.c_str(), r.capacity,
                static_cast<long long>(total_slots(r, global, t.shape().layers)),
                static_cast<unsigned long long>(s.accesses),
                static_cast<unsigned long long>(s.hits), static_cast<unsigned long long>(s.misses),
                ratio(s.misses, s.accesses), static_cast<unsigned long long>(s.collision_misses),
                ratio(s.collision_misses, s.accesses), static_cast<unsigned long long>(s.evictions),
                x ? std::to_string(*x).c_str() : "",
                static_cast<unsigned long long>(r.result.bytes_moved), r.result.stall_seconds);
  }
}

void print_table(const sim_options& opt, const routing_trace& t, const std::vector<row>& rows,
                 const sim_config& config) {
  const auto& shape = t.shape();
  const bool global = opt.scope == "global";
  std::printf("%s: %zu steps, %d layers x %d experts, top-%d, %zu accesses\n", opt.file.c_str(),
              t.steps(), shape.layers, shape.experts, shape.top_k, t.access_count());
  if (global) {
    std::printf("scope global: one cache over all %d (layer, expert) keys; capacity = its slots\n",
                shape.layers * shape.experts);
  } else {
    std::printf(
        "scope layer: one cache per layer (%d caches); capacity = slots in EACH layer, counts "
        "summed over layers\n",
        shape.layers);
  }
  const double seconds_per_miss = config.link.copy_seconds(config.expert_bytes);
  const bool with_model = seconds_per_miss > 0.0 || config.expert_bytes > 0;
  if (with_model) {
    std::printf(
        "bandwidth model: %s per expert, %.3g GB/s, %.3g us per miss -> %.3f ms stall per miss\n",
        format_bytes(config.expert_bytes).c_str(), opt.bandwidth_gbps, opt.miss_latency_us,
        1e3 * seconds_per_miss);
  }
  std::printf(
      "collision = a miss on an expert evicted earlier in the same step (forward pass); "
      "x_belady = misses / belady's misses\n\n");

  std::printf("%-18s %8s %7s %10s %10s %9s %10s %9s %8s", "policy", "capacity", "slots", "hits",
              "misses", "miss_rate", "collisions", "coll_rate", "x_belady");
  if (with_model) {
    std::printf(" %12s %10s", "moved", "stall_s");
  }
  std::printf("\n");
  std::int32_t previous = -1;
  for (const row& r : rows) {
    if (previous != -1 && r.capacity != previous) {
      std::printf("\n");
    }
    previous = r.capacity;
    const cache_stats& s = r.result.stats;
    char versus[16] = "-";
    if (const auto x = versus_belady(rows, r)) {
      std::snprintf(versus, sizeof versus, "%.3f", *x);
    }
    std::printf("%-12.*s %8d %7lld %10llu %10llu %9.4f %10llu %9.4f %8s",
                static_cast<int>(r.policy.size()), r.policy.data(), r.capacity,
                static_cast<long long>(total_slots(r, global, shape.layers)),
                static_cast<unsigned long long>(s.hits), static_cast<unsigned long long>(s.misses),
                ratio(s.misses, s.accesses), static_cast<unsigned long long>(s.collision_misses),
                ratio(s.collision_misses, s.accesses), versus);
    if (with_model) {
      std::printf(" %12s %10.3f", format_bytes(r.result.bytes_moved).c_str(),
                  r.result.stall_seconds);
    }
    std::printf("\n");
  }
}

// ------------------------------------------------------------------------------------ run

// Every (capacity, policy) run, in that order, on `jobs` threads; the first error is rethrown.
std::vector<row> run_grid(const routing_trace& t, const std::vector<std::string_view>& policies,
                          const std::vector<std::int32_t>& capacities, const sim_config& base,
                          std::uint32_t jobs, progress_bar& bar) {
  std::vector<row> rows;
  for (const std::int32_t capacity : capacities) {
    for (const auto policy : policies) {
      rows.push_back({policy, capacity, {}});
    }
  }
  std::atomic<std::size_t> next{0};
  std::vector<std::exception_ptr> errors(rows.size());
  auto work = [&] {
    for (std::size_t i = next++; i < rows.size(); i = next++) {
      try {
        sim_config config = base;
        config.capacity = rows[i].capacity;
        const std::string_view policy = rows[i].policy;
        const bool hindsight = is_hindsight_policy(policy);
        if (bar.enabled()) {
          const counted_source source{&t, &bar};
          rows[i].result = hindsight ? simulate_hindsight(policy, shape_of(t), source, config)
                                     : simulate_named(policy, shape_of(t), source, config);
        } else {
          rows[i].result =
              hindsight ? simulate_hindsight(policy, t, config) : simulate_named(policy, t, config);
        }
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

void run(const sim_options& opt) {
  const std::vector<std::string_view> policies = checked_policies(opt.policies, true);
  if (opt.bandwidth_gbps > 0 && opt.expert_bytes == 0) {
    warn(
        "--bandwidth-gbps without --expert-bytes: a miss moves 0 bytes, so no transfer stall is "
        "computed (stall_s counts --miss-latency-us only)");
  }
  const routing_trace t = load_trace_with_accesses(opt.file);
  const bool global = opt.scope == "global";
  const std::vector<std::int32_t> capacities =
      checked_capacities(opt.capacities, global, t.shape());

  sim_config config;
  config.scope = cache_scope_from_string(opt.scope);
  config.expert_bytes = opt.expert_bytes;
  config.link = link_model::from_gbps(opt.bandwidth_gbps, opt.miss_latency_us);
  // The trace's sequences give every run its token positions, whichever source replays it (the
  // progress bar's counts the accesses, the plain one does not).
  config.sequence_starts.assign(t.sequence_starts().begin(), t.sequence_starts().end());

  // Work = accesses visited: one pass per run, two for belady and the hindsight references (they
  // read the trace first).
  std::uint64_t total = 0;
  for (const auto p : policies) {
    total +=
        (p == "belady" || is_hindsight_policy(p) ? 2u : 1u) * t.access_count() * capacities.size();
  }
  progress_bar bar("sim " + opt.file, total, progress_wanted(opt.json || opt.csv));
  const std::vector<row> rows = run_grid(t, policies, capacities, config, opt.jobs, bar);

  if (opt.json) {
    print_json(opt, t, rows);
  } else if (opt.csv) {
    print_csv(opt, t, rows);
  } else {
    print_table(opt, t, rows, config);
  }
}

}  // namespace

void add_sim_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "sim",
      "Replay a routing trace through eviction policies: hits, misses, collision misses, "
      "bytes moved and stall time");
  auto opt = std::make_shared<sim_options>();
  cmd->add_option("FILE", opt->file, trace_source_help())->required();
  cmd->add_option("--policy,--policies", opt->policies,
                  "comma-separated policies among " + valid_policy_list() +
                      " (default: all); also the hindsight references " +
                      comma_list(hindsight_policy_names) +
                      ", which know the trace's statistics in advance (not with --timeline or "
                      "--ranks)")
      ->delimiter(',');
  cmd->add_option("--capacity,--capacities", opt->capacities,
                  "comma-separated capacities: slots per layer (--scope layer) or in total "
                  "(--scope global); each in [top_k, experts] or [top_k, layers x experts]")
      ->delimiter(',')
      ->check(whole_number(1))
      ->required();
  cmd->add_option("--scope", opt->scope,
                  "global: one cache over all (layer, expert) keys; layer: one cache per layer, "
                  "each with the given capacity")
      ->check(CLI::IsMember({"global", "layer"}))
      ->capture_default_str();
  cmd->add_option("--jobs", opt->jobs,
                  "threads running the (policy, capacity) replays; default: every core of this "
                  "machine. The results do not depend on it")
      ->check(whole_number(1, 1024));
  auto* json =
      cmd->add_flag("--json", opt->json, "print one JSON object {..., \"results\": [...]}");
  auto* csv = cmd->add_flag("--csv", opt->csv, "print CSV: a header and one row per run");
  json->excludes(csv);
  cmd->add_option("--expert-bytes", opt->expert_bytes,
                  "bytes moved per miss (one expert's weights); default 0")
      ->check(whole_number(0))
      ->capture_default_str();
  cmd->add_option("--bandwidth-gbps", opt->bandwidth_gbps,
                  "host-to-device bandwidth in GB/s (1e9 B/s) for the stall model; 0 = no "
                  "transfer time")
      ->check(number_above(0, false))
      ->capture_default_str();
  cmd->add_option("--miss-latency-us", opt->miss_latency_us,
                  "fixed stall per miss in microseconds (launch, sync)")
      ->check(number_above(0, false))
      ->capture_default_str();
  cmd->footer(
      "Every (step, layer) request is one call whose experts cannot evict each other. "
      "stall_s = misses x (miss-latency-us + expert-bytes / bandwidth): a serial model "
      "without prefetch or overlap.");
  auto timeline = add_timeline_options(*cmd);
  auto ranks = add_ranks_options(*cmd);
  cmd->callback([opt, timeline, ranks] {
    if (ranks_requested(*ranks)) {
      if (timeline_requested(*timeline)) {
        usage_error("--ranks and --timeline are separate simulators; give one of them");
      }
      run_ranks(*ranks, {opt->file, opt->policies, opt->capacities, opt->scope, opt->json, opt->csv,
                         opt->expert_bytes, opt->bandwidth_gbps, opt->miss_latency_us, opt->jobs});
      return;
    }
    if (!timeline_requested(*timeline)) {
      run(*opt);
      return;
    }
    timeline_common common{opt->file,           {},       opt->capacities,   opt->scope,
                           opt->json,           opt->csv, opt->expert_bytes, opt->bandwidth_gbps,
                           opt->miss_latency_us};
    for (const std::string_view p : checked_policies(opt->policies, false)) {
      common.policies.emplace_back(p);
    }
    run_timeline(*timeline, common);
  });
}

}  // namespace wisp::tool
