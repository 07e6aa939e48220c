// SPDX-License-Identifier: Apache-2.0
// `wisp sim FILE --policy lru,least-stale,... --capacity 16,83 --scope global|layer
//           [--json|--csv] [--expert-bytes B --bandwidth-gbps G --miss-latency-us U]`:
// replays a routing trace through eviction policies at several capacities (wisp/sim) and reports
// hits, misses, collision misses, bytes moved and the stall time of the serial bandwidth model.
//
// FILE is a .wtrace file, the literal `synthetic` (the built-in default synthetic trace: preset
// "default", 8,222 steps, seed 1), or a folder of ESFT expert_weights_<L>.txt files.
#include "commands.hpp"
#include "timeline_cmd.hpp"
#include "trace_source.hpp"

#include <wisp/core/error.hpp>
#include <wisp/sim/simulate.hpp>
#include <wisp/sim/trace_sim.hpp>
#include <wisp/trace/routing_trace.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace wisp::tool {
namespace {

struct sim_options {
  std::string file;
  std::vector<std::string> policies;
  std::vector<std::int64_t> capacities;
  std::string scope = "global";
  bool json = false;
  bool csv = false;
  std::uint64_t expert_bytes = 0;
  double bandwidth_gbps = 0.0;
  double miss_latency_us = 0.0;
};

// A usage error: wisp::logic_error with a plain message (no source location: the user typed it).
template <class... Parts>
[[noreturn]] void usage_error(const Parts&... parts) {
  std::ostringstream message;
  (message << ... << parts);
  throw wisp::logic_error(message.str());
}

// Command-line policy names and the library's names, in the order they are reported.
struct policy_name_pair {
  std::string_view cli;
  std::string_view library;
};
constexpr policy_name_pair policy_names[] = {
    {"lru", "lru"},
    {"fifo", "fifo"},
    {"lfu", "lfu"},
    {"lfru", "lfru"},
    {"fld", "fld"},
    {"least-stale", "least_stale"},
    {"decayed-frequency", "decayed_frequency"},
    {"predicted-next-use", "predicted_next_use"},
    {"belady", "belady"},
};

std::string valid_policy_list() {
  std::string out;
  for (const auto& p : policy_names) {
    out += out.empty() ? "" : ", ";
    out += p.cli;
  }
  return out;
}

std::string_view library_policy(std::string_view cli) {
  for (const auto& p : policy_names) {
    if (p.cli == cli) {
      return p.library;
    }
  }
  if (cli == "least_stale") {
    usage_error("unknown policy 'least_stale': did you mean 'least-stale'? (valid: ",
                valid_policy_list(), ")");
  }
  usage_error("unknown policy '", cli, "' (valid: ", valid_policy_list(), ")");
}

// ------------------------------------------------------------------------------------ progress

// A progress bar on stderr, drawn only when stderr is a terminal and only once the work has run
// for a second (short runs print nothing). `advance` is cheap: it looks at the clock once every
// 2^16 accesses.
class progress_bar {
 public:
  progress_bar(std::uint64_t total, bool enabled)
      : total_(total), enabled_(enabled), start_(clock::now()), last_draw_(start_) {}
  progress_bar(const progress_bar&) = delete;
  progress_bar& operator=(const progress_bar&) = delete;
  ~progress_bar() {
    if (drawn_) {
      std::fprintf(stderr, "\r%*s\r", 79, "");
      std::fflush(stderr);
    }
  }

  [[nodiscard]] bool enabled() const noexcept { return enabled_; }
  void set_label(std::string label) { label_ = std::move(label); }

  void advance() noexcept {
    if ((++done_ & 0xffffu) == 0) {
      maybe_draw();
    }
  }

 private:
  using clock = std::chrono::steady_clock;

  void maybe_draw() noexcept {
    const auto now = clock::now();
    if (now - start_ < std::chrono::seconds(1) ||
        now - last_draw_ < std::chrono::milliseconds(100)) {
      return;
    }
    last_draw_ = now;
    drawn_ = true;
    const double fraction =
        total_ == 0 ? 1.0 : std::min(1.0, static_cast<double>(done_) / static_cast<double>(total_));
    constexpr int width = 30;
    const int filled = static_cast<int>(fraction * width);
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double eta = fraction > 0 ? elapsed * (1.0 - fraction) / fraction : 0.0;
    std::fprintf(stderr, "\r[%.*s%*s] %5.1f%%  eta %4.0fs  %-24.24s", filled,
                 "##############################", width - filled, "", 100.0 * fraction, eta,
                 label_.c_str());
    std::fflush(stderr);
  }

  std::uint64_t total_;
  std::uint64_t done_ = 0;
  bool enabled_;
  bool drawn_ = false;
  clock::time_point start_;
  clock::time_point last_draw_;
  std::string label_;
};

// An access source over a trace that also advances the progress bar.
struct counted_source {
  const trace::routing_trace* trace;
  progress_bar* bar;
  template <class F>
  void operator()(F&& f) const {
    trace->for_each_access([&](const trace::access& a) {
      f(a);
      bar->advance();
    });
  }
};

// ------------------------------------------------------------------------------------ checks

std::vector<std::string> checked_policies(const std::vector<std::string>& requested) {
  std::vector<std::string> out;
  if (requested.empty()) {
    for (const auto& p : policy_names) {
      out.emplace_back(p.cli);
    }
    return out;
  }
  for (const auto& name : requested) {
    (void)library_policy(name);  // throws on an unknown name
    if (std::find(out.begin(), out.end(), name) == out.end()) {
      out.push_back(name);
    }
  }
  return out;
}

std::vector<std::int32_t> checked_capacities(const std::vector<std::int64_t>& requested,
                                             bool global, const trace::trace_shape& shape) {
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
  std::string policy;  // command-line name
  std::int32_t capacity = 0;
  sim::sim_result result;
};

double ratio(std::uint64_t a, std::uint64_t b) {
  return b == 0 ? 0.0 : static_cast<double>(a) / static_cast<double>(b);
}

std::string human_bytes(std::uint64_t bytes) {
  constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  std::size_t u = 0;
  while (v >= 1024.0 && u + 1 < std::size(units)) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

void print_json(const std::vector<row>& rows, const std::string& scope, std::int32_t layers) {
  nlohmann::ordered_json out;
  out["results"] = nlohmann::ordered_json::array();
  for (const row& r : rows) {
    const cache_stats& s = r.result.stats;
    out["results"].push_back({{"policy", r.policy},
                              {"scope", scope},
                              {"capacity", r.capacity},
                              {"accesses", s.accesses},
                              {"hits", s.hits},
                              {"misses", s.misses},
                              {"collision_misses", s.collision_misses},
                              {"bytes_moved", r.result.bytes_moved},
                              {"evictions", s.evictions},
                              {"total_slots", scope == "layer" ? r.capacity * layers : r.capacity},
                              {"miss_rate", ratio(s.misses, s.accesses)},
                              {"stall_s", r.result.stall_seconds}});
  }
  std::cout << out.dump() << '\n';
}

void print_csv(const std::vector<row>& rows, const std::string& scope, std::int32_t layers) {
  std::printf(
      "policy,scope,capacity,total_slots,accesses,hits,misses,miss_rate,collision_misses,"
      "evictions,bytes_moved,stall_s\n");
  for (const row& r : rows) {
    const cache_stats& s = r.result.stats;
    std::printf("%s,%s,%d,%d,%llu,%llu,%llu,%.9g,%llu,%llu,%llu,%.9g\n", r.policy.c_str(),
                scope.c_str(), r.capacity, scope == "layer" ? r.capacity * layers : r.capacity,
                static_cast<unsigned long long>(s.accesses),
                static_cast<unsigned long long>(s.hits), static_cast<unsigned long long>(s.misses),
                ratio(s.misses, s.accesses), static_cast<unsigned long long>(s.collision_misses),
                static_cast<unsigned long long>(s.evictions),
                static_cast<unsigned long long>(r.result.bytes_moved), r.result.stall_seconds);
  }
}

void print_table(const sim_options& opt, const trace::routing_trace& t,
                 const std::vector<row>& rows, const sim::bandwidth_model& bw) {
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
  const bool with_model = bw.seconds_per_miss() > 0.0 || bw.bytes_per_expert > 0;
  if (with_model) {
    std::printf(
        "bandwidth model: %s per expert, %.3g GB/s, %.3g us per miss -> %.3f ms stall per miss\n",
        human_bytes(bw.bytes_per_expert).c_str(), bw.gb_per_s, bw.miss_latency_us,
        1e3 * bw.seconds_per_miss());
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
    const auto bound = std::find_if(rows.begin(), rows.end(), [&](const row& o) {
      return o.policy == "belady" && o.capacity == r.capacity;
    });
    char versus[16] = "-";
    if (bound != rows.end() && bound->result.stats.misses > 0) {
      std::snprintf(versus, sizeof versus, "%.3f", ratio(s.misses, bound->result.stats.misses));
    }
    std::printf("%-18s %8d %7d %10llu %10llu %9.4f %10llu %9.4f %8s", r.policy.c_str(), r.capacity,
                global ? r.capacity : r.capacity * shape.layers,
                static_cast<unsigned long long>(s.hits), static_cast<unsigned long long>(s.misses),
                ratio(s.misses, s.accesses), static_cast<unsigned long long>(s.collision_misses),
                ratio(s.collision_misses, s.accesses), versus);
    if (with_model) {
      std::printf(" %12s %10.3f", human_bytes(r.result.bytes_moved).c_str(),
                  r.result.stall_seconds);
    }
    std::printf("\n");
  }
}

// ------------------------------------------------------------------------------------ run

void run(const sim_options& opt) {
  if (opt.scope != "global" && opt.scope != "layer") {
    usage_error("--scope must be global or layer, got '", opt.scope, "'");
  }
  const std::vector<std::string> policies = checked_policies(opt.policies);
  const trace::routing_trace t = load_trace(opt.file);
  const bool global = opt.scope == "global";
  const std::vector<std::int32_t> capacities =
      checked_capacities(opt.capacities, global, t.shape());

  const sim::bandwidth_model bw{opt.expert_bytes, opt.bandwidth_gbps, opt.miss_latency_us};
  sim::sim_config config;
  config.scope = global ? cache_scope::global : cache_scope::per_layer;
  config.bandwidth = bw;

  // Work = accesses visited: one pass per run, two for belady (it reads the future first).
  std::uint64_t total = 0;
  for (const auto& p : policies) {
    total += (p == "belady" ? 2u : 1u) * t.access_count() * capacities.size();
  }
  progress_bar bar(total, isatty(STDERR_FILENO) == 1);

  std::vector<row> rows;
  rows.reserve(policies.size() * capacities.size());
  for (const std::int32_t capacity : capacities) {
    config.capacity = capacity;
    for (const auto& p : policies) {
      const std::string_view name = library_policy(p);
      row r{p, capacity, {}};
      if (bar.enabled()) {
        bar.set_label(p + " @ " + std::to_string(capacity));
        r.result = sim::simulate_named(name, sim::shape_of(t), counted_source{&t, &bar}, config);
      } else {
        r.result = sim::simulate_named(name, t, config);
      }
      rows.push_back(std::move(r));
    }
  }

  if (opt.json) {
    print_json(rows, opt.scope, t.shape().layers);
  } else if (opt.csv) {
    print_csv(rows, opt.scope, t.shape().layers);
  } else {
    print_table(opt, t, rows, bw);
  }
}

}  // namespace

void add_sim_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "sim",
      "Replay a routing trace through eviction policies: hits, misses, collision misses, "
      "bytes moved and stall time");
  auto opt = std::make_shared<sim_options>();
  cmd->add_option("FILE", opt->file, trace_file_help)->required();
  cmd->add_option("--policy,--policies", opt->policies,
                  "comma-separated policies among " + valid_policy_list() + " (default: all)")
      ->delimiter(',');
  cmd->add_option("--capacity,--capacities", opt->capacities,
                  "comma-separated capacities: slots per layer (--scope layer) or in total "
                  "(--scope global); each in [top_k, experts] or [top_k, layers x experts]")
      ->delimiter(',')
      ->required();
  cmd->add_option("--scope", opt->scope,
                  "global: one cache over all (layer, expert) keys; layer: one cache per layer, "
                  "each with the given capacity")
      ->check(CLI::IsMember({"global", "layer"}))
      ->capture_default_str();
  auto* json = cmd->add_flag("--json", opt->json, "print one JSON object {\"results\": [...]}");
  auto* csv = cmd->add_flag("--csv", opt->csv, "print CSV: a header and one row per run");
  json->excludes(csv);
  cmd->add_option("--expert-bytes", opt->expert_bytes,
                  "bytes moved per miss (one expert's weights); default 0")
      ->capture_default_str();
  cmd->add_option("--bandwidth-gbps", opt->bandwidth_gbps,
                  "host-to-device bandwidth in GB/s (1e9 B/s) for the stall model; 0 = no "
                  "transfer time")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--miss-latency-us", opt->miss_latency_us,
                  "fixed stall per miss in microseconds (launch, sync)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->footer(
      "Every (step, layer) request is one call whose experts cannot evict each other. "
      "stall_s = misses x (miss-latency-us + expert-bytes / bandwidth): a serial model "
      "without prefetch or overlap.");
  auto timeline = add_timeline_options(*cmd);
  cmd->callback([opt, timeline] {
    if (!timeline_requested(*timeline)) {
      run(*opt);
      return;
    }
    timeline_common common{opt->file,
                           checked_policies(opt->policies),
                           {},
                           opt->capacities,
                           opt->scope,
                           opt->json,
                           opt->csv,
                           opt->expert_bytes,
                           opt->bandwidth_gbps,
                           opt->miss_latency_us};
    for (const std::string& p : common.cli_policies) {
      common.policies.emplace_back(library_policy(p));
    }
    run_timeline(*timeline, common);
  });
}

}  // namespace wisp::tool
