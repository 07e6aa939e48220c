// SPDX-License-Identifier: Apache-2.0
// `wisp reuse FILE [--scope global|layer] [--granularity call|access] [--capacities 8,16,...]
//                  [--json|--csv]`: the exact LRU miss curve of a routing trace, from one pass of
// stack distances (wisp/reuse). Per call (the default) it is the miss count of the pager and of
// `wisp sim --policy lru`; per access, the textbook LRU curve.
#include "cli.hpp"
#include "commands.hpp"
#include "trace_source.hpp"

#include <wisp/reuse/histogram.hpp>
#include <wisp/reuse/scoped_counter.hpp>
#include <wisp/reuse/trace_profile.hpp>
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
namespace {

struct reuse_options {
  std::string file;
  std::string scope = "global";
  std::string granularity = "call";
  std::vector<std::uint64_t> capacities;
  bool json = false;
  bool csv = false;
};

constexpr double hit_ratio_targets[] = {0.5, 0.8, 0.9, 0.95, 0.99};

// 1, 2, 4, ... below `distinct`, then `distinct` itself.
std::vector<std::uint64_t> default_capacities(std::uint64_t distinct) {
  std::vector<std::uint64_t> out;
  for (std::uint64_t c = 1; c < distinct; c *= 2) {
    out.push_back(c);
  }
  out.push_back(distinct == 0 ? 1 : distinct);
  return out;
}

void print_human(const reuse_options& opt, const routing_trace& t, const reuse_profile& profile,
                 const miss_curve& curve, const std::vector<std::uint64_t>& capacities) {
  const auto& shape = t.shape();
  const bool global = profile.histogram.shape().scope == cache_scope::global;
  std::printf("%s: %zu steps, %d layers x %d experts, top-%d, %llu accesses\n", opt.file.c_str(),
              t.steps(), shape.layers, shape.experts, shape.top_k,
              static_cast<unsigned long long>(curve.accesses()));
  if (global) {
    std::printf(
        "scope global: one LRU cache over all %d (layer, expert) keys; capacity = slots "
        "in that cache\n",
        shape.layers * shape.experts);
  } else {
    std::printf(
        "scope layer: one LRU cache per layer (%d caches); capacity = slots in EACH "
        "layer, misses summed over layers\n",
        shape.layers);
  }
  if (opt.granularity == "call") {
    std::printf(
        "granularity call: a layer's %d experts are one request that never evicts its own "
        "experts (the pager, wisp sim --policy lru); exact from capacity %d up\n",
        shape.top_k, shape.top_k);
  } else {
    std::printf(
        "granularity access: every expert access on its own (textbook LRU), which may evict an "
        "expert the same request asks for next\n");
  }
  const double accesses = static_cast<double>(curve.accesses());
  std::printf(
      "distinct keys per cache %zu; cold (compulsory) misses %llu = %.3f%% of accesses, "
      "the floor no capacity removes\n",
      profile.distinct_per_cache, static_cast<unsigned long long>(curve.cold()),
      100.0 * static_cast<double>(curve.cold()) / accesses);
  std::printf("only cold misses remain from capacity %llu on (the largest stack distance)\n\n",
              static_cast<unsigned long long>(curve.max_capacity()));
  std::printf("capacity needed per cache for a hit ratio of:\n");
  for (const double target : hit_ratio_targets) {
    if (const auto c = curve.capacity_for_hit_ratio(target)) {
      std::printf(
          "  %4.0f%%  %6llu slots (%.1f%% of the cache's keys)\n", 100 * target,
          static_cast<unsigned long long>(*c),
          100.0 * static_cast<double>(*c) / static_cast<double>(profile.distinct_per_cache));
    } else {
      std::printf("  %4.0f%%  unreachable (cold misses cap the hit ratio at %.2f%%)\n",
                  100 * target, 100.0 * curve.hit_ratio(curve.max_capacity()));
    }
  }
  std::printf("\n%10s %12s %11s %10s\n", "capacity", "misses", "miss_ratio", "hit_ratio");
  for (const auto c : capacities) {
    std::printf("%10llu %12llu %11.4f %10.4f\n", static_cast<unsigned long long>(c),
                static_cast<unsigned long long>(curve.misses(c)), curve.miss_ratio(c),
                curve.hit_ratio(c));
  }
}

void print_json(const reuse_options& opt, const routing_trace& t, const reuse_profile& profile,
                const miss_curve& curve, const std::vector<std::uint64_t>& capacities) {
  nlohmann::ordered_json out = trace_json(opt.file, t);
  out["scope"] = opt.scope;
  out["granularity"] = opt.granularity;
  out["cold_misses"] = curve.cold();
  out["distinct"] = profile.distinct_per_cache;
  out["max_capacity"] = curve.max_capacity();
  auto& needed = out["capacity_for_hit_ratio"] = nlohmann::ordered_json::array();
  for (const double target : hit_ratio_targets) {
    const auto c = curve.capacity_for_hit_ratio(target);
    needed.push_back({{"hit_ratio", target},
                      {"capacity", c ? nlohmann::ordered_json(*c) : nlohmann::ordered_json()}});
  }
  out["miss_curve"] = nlohmann::ordered_json::array();
  for (const auto c : capacities) {
    out["miss_curve"].push_back({{"capacity", c},
                                 {"misses", curve.misses(c)},
                                 {"miss_ratio", curve.miss_ratio(c)},
                                 {"hit_ratio", curve.hit_ratio(c)}});
  }
  std::cout << out.dump() << '\n';
}

void run(const reuse_options& opt) {
  const auto scope = cache_scope_from_string(opt.scope);
  const auto granularity = *from_string<reuse_granularity>(opt.granularity);
  const routing_trace t = load_trace_with_accesses(opt.file);
  const reuse_profile profile = profile_trace(t, scope, granularity);
  const miss_curve curve{profile.histogram};
  const std::vector<std::uint64_t> capacities =
      opt.capacities.empty() ? default_capacities(profile.distinct_per_cache) : opt.capacities;
  if (opt.json) {
    print_json(opt, t, profile, curve, capacities);
  } else if (opt.csv) {
    std::printf("capacity,misses,miss_ratio,hit_ratio\n");
    for (const auto c : capacities) {
      std::printf("%llu,%llu,%.9g,%.9g\n", static_cast<unsigned long long>(c),
                  static_cast<unsigned long long>(curve.misses(c)), curve.miss_ratio(c),
                  curve.hit_ratio(c));
    }
  } else {
    print_human(opt, t, profile, curve, capacities);
  }
}

}  // namespace

void add_reuse_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "reuse", "Exact LRU miss curve of a routing trace, every capacity from one pass");
  auto opt = std::make_shared<reuse_options>();
  cmd->add_option("FILE", opt->file, trace_source_help())->required();
  cmd->add_option("--scope", opt->scope,
                  "global: one cache over all (layer, expert) keys; layer: one cache per layer, "
                  "each with the given capacity")
      ->check(CLI::IsMember({"global", "layer"}))
      ->capture_default_str();
  cmd->add_option("--granularity", opt->granularity,
                  "call: a layer's top-k experts are one request that cannot evict its own "
                  "experts, as the pager and wisp sim serve it; access: every expert access on "
                  "its own (textbook LRU)")
      ->check(CLI::IsMember({"call", "access"}))
      ->capture_default_str();
  cmd->add_option("--capacities", opt->capacities,
                  "comma-separated capacities (slots per cache); default 1,2,4,... up to the "
                  "distinct keys per cache")
      ->delimiter(',')
      ->check(whole_number(0));
  auto* json = cmd->add_flag("--json", opt->json, "print one JSON object");
  auto* csv = cmd->add_flag("--csv", opt->csv, "print CSV: capacity,misses,miss_ratio,hit_ratio");
  json->excludes(csv);
  cmd->callback([opt] { run(*opt); });
}

}  // namespace wisp::tool
