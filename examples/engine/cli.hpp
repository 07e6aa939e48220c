// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The command line of `wisp-engine`: parsed and validated here, run in main.cpp.
#pragma once

#include "engine.hpp"
#include "index.hpp"
#include "report.hpp"

#include <wisp/alloc/units.hpp>
#include <wisp/core/error.hpp>
#include <wisp/trace/import.hpp>
#include <wisp/transfer/device_profile.hpp>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace wisp_engine {

inline constexpr const char* usage = R"(usage: wisp-engine [options]
  --device NAME|FILE|host
                        the modelled GPU: a preset (rtx-4090, default; l4, a100-pcie, h100-pcie),
                        a device profile file (JSON, see docs/transfer.md), or host (compute
                        charged by this machine's CPU time: the engine's original timing)
  --arms A,B,...        arms (default: full,layer-offload,on-demand,static-hot,llama.cpp-cache,
                        cpu-experts,cpu-moe-layers,pager,pager+plan,pager+dynamic,
                        pager+prefetch,pager+zip,tiered,pager+hybrid); full also runs at the smallest budget where it fits
                        when it does not fit the budget (the upper bound)
  --policies P,Q,...    eviction policies of the pager arm, one arm each (default: lru,fifo,lfu,
                        lfu_history,lfru,fld,least_stale,decayed_frequency,predicted_next_use,
                        reuse_probability,learned_belady; least-stale is accepted too)
  --policy NAME         policy of pager+plan, pager+dynamic, pager+prefetch, pager+zip and
                        pager+hybrid (default lru)
  --host-compute HOW    cpu-experts, cpu-moe-layers and pager+hybrid: host experts charged by the profile's host
                        roofline (roofline, default) or by this machine's CPU time (measured)
  --host-thread-gflops G
                        the profile's host: GFLOP/s of one thread (default 64)
  --value-rate R        pager+hybrid: rate of the reuse value estimator in (0, 1] (default 0.25)
  --prefetch RULE       pager+prefetch: top-k (default: k x tokens x overfetch of the predictor's
                        best) or percentile (those above --percentile, at most k x tokens)
  --overfetch M         pager+prefetch, top-k: the multiplier (default 1)
  --percentile P        pager+prefetch, percentile: the score percentile to exceed (default 80)
  --decode-gbps R       pager+zip and tiered: the device's decode rate, GB/s of BF16 written, per
                        decode thread (default 100)
  --decode-threads L    tiered: decode threads (default 1, the pager+zip decode queue)
  --tiers F,C,S,E       tiered: experts per pool per layer (default: planned on the warm-up)
  --budget BYTES        device budget for resident experts + KV (default 148MiB: a third of each
                        layer's experts beside the chat workload's KV floor)
  --bandwidth GBPS      host->device link, GB/s (default: the profile's h2d_gbps; 25 for host)
  --latency-us US       latency of one copy, microseconds (default: the profile's; 10 for host)
  --cap N               caching arms: per-layer expert rows (default: the largest that leaves the
                        KV floor; tiered, llama.cpp-cache, cpu-experts and
                        cpu-moe-layers take the same bytes)
  --hot N               static-hot: pinned experts per layer (default: chosen on the warm-up)
  --workload NAME       chat (default; stationary routing) or shift (routing domains change)
  --sessions N          evaluated sessions (default 16; with a trace: every sequence after the
                        warm-up); 20% more are served first as the warm-up
  --max-running N       sessions decoded together (default 4)
  --routing SRC [FILE]  synthetic (default: the workload's synthetic trace), model (the
                        router), or trace FILE (.wtrace, .jsonl, or an ESFT folder; the model's
                        layers, experts and top-k follow the trace)
  --on-incomplete P     trace routing: tokens lacking a layer are an error (default) or
                        skipped (left out, and counted)
  --layers N --experts N --top-k N --hidden N --intermediate N
                        model shape (default 8 x 64, top-6, hidden 256, expert FFN 576: one
                        miss's copy is ~5x one token's MoE on the rtx-4090 profile, as for
                        Qwen3-30B-A3B)
  --burst N             pager+dynamic: forwards per controller burst (default 4)
  --decay G             pager+dynamic: controller's per-burst decay in [0, 1] (default 0)
  --repeat N            runs of every arm, interleaved; figures are median [min-max] (default 5)
  --json                print the comparison as JSON
)";

/// Every pager eviction policy, as the default `--policies`.
[[nodiscard]] inline std::vector<std::string> all_policies() {
  const std::vector<std::string_view> names = policy_names();
  return {names.begin(), names.end()};
}

/// @brief Everything the command line sets.
struct cli_options {
  engine_options base;
  model_config model;
  std::vector<arm_kind> arms = {
      arm_kind::full,           arm_kind::layer_offload,   arm_kind::on_demand,
      arm_kind::static_hot,     arm_kind::llama_cpp_cache, arm_kind::cpu_experts,
      arm_kind::cpu_moe_layers, arm_kind::pager,           arm_kind::pager_plan,
      arm_kind::pager_dynamic,  arm_kind::pager_prefetch,  arm_kind::pager_zip,
      arm_kind::tiered,         arm_kind::pager_hybrid};
  std::string device = "rtx-4090";  ///< `--device`: a preset, a file, or "host"
  std::vector<std::string> policies = all_policies();
  std::string workload = "chat";
  std::string routing = "synthetic";
  std::string trace_file;
  /// `--routing trace`: tokens of the trace that lack a layer are refused or left out.
  wisp::incomplete_tokens on_incomplete = wisp::incomplete_tokens::error;
  std::int32_t sessions = 0;  ///< 0: the default (16, or every sequence of a trace)
  std::int32_t repeat = 5;
  bool json = false;
  bool help = false;
  /// Shape flags given explicitly (a trace's shape must agree with them).
  std::optional<std::int32_t> layers, experts, top_k;

  /// The arms to run, in order: pager once per policy; full's upper bound right after full.
  [[nodiscard]] std::vector<arm_spec> specs(bool full_fits) const {
    std::vector<arm_spec> out;
    for (const arm_kind a : arms) {
      if (a == arm_kind::pager) {
        for (const std::string& p : policies) {
          out.push_back({a, p, false});
        }
        continue;
      }
      out.push_back({a, is_pager(a) ? base.policy : std::string(), false});
      if (a == arm_kind::full && !full_fits) {
        out.push_back({a, "", true});
      }
    }
    return out;
  }
};

namespace detail {
inline std::int32_t to_int(std::string_view flag, std::string_view v, std::int32_t lo) {
  std::int32_t x = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  WISP_EXPECTS(ec == std::errc{} && p == v.data() + v.size() && x >= lo, flag, ": '", v,
               "' is not an integer >= ", lo);
  return x;
}
inline double to_double(std::string_view flag, std::string_view v, double lo) {
  std::size_t used = 0;
  double x = -1;
  try {
    x = std::stod(std::string(v), &used);
  } catch (const std::exception&) {
    used = 0;
  }
  WISP_EXPECTS(used == v.size() && std::isfinite(x) && x >= lo, flag, ": '", v,
               "' is not a number >= ", lo);
  return x;
}
inline std::vector<std::string> split_list(std::string_view list) {
  std::vector<std::string> out;
  std::size_t p = 0;
  while (p <= list.size()) {
    const std::size_t q = std::min(list.find(',', p), list.size());
    out.emplace_back(list.substr(p, q - p));
    p = q + 1;
  }
  return out;
}

// The flags of `parse_cli`, one group each: they read their value through `value()` and return
// whether they knew the flag.

// What the arms run: the arms, their policies, prefetch and the decode, tier and host settings.
template <class Value>
bool parse_arm_flag(cli_options& o, std::string_view a, Value&& value) {
  if (a == "--arms") {
    o.arms.clear();
    for (const std::string& s : split_list(value())) {
      const auto arm = parse_arm(s);
      WISP_EXPECTS(arm.has_value(), "--arms: unknown arm '", s, "' (valid: ", arm_list(), ")");
      o.arms.push_back(*arm);
    }
  } else if (a == "--policies") {
    o.policies.clear();
    for (const std::string& s : split_list(value())) {
      const auto p = canonical_policy(s);
      WISP_EXPECTS(p.has_value(), "--policies: unknown policy '", s, "' (valid: ", policy_list(),
                   ")");
      o.policies.push_back(*p);
    }
  } else if (a == "--policy") {
    const std::string_view s = value();
    const auto p = canonical_policy(s);
    WISP_EXPECTS(p.has_value(), "--policy: unknown policy '", s, "' (valid: ", policy_list(), ")");
    o.base.policy = *p;
  } else if (a == "--prefetch") {
    const std::string_view s = value();
    const auto rule = wisp::from_string<wisp::prefetch_rule>(s);
    WISP_EXPECTS(rule && *rule != wisp::prefetch_rule::none, "--prefetch: unknown rule '", s,
                 "' (valid: top-k, percentile)");
    o.base.prefetch.rule = *rule;
  } else if (a == "--overfetch") {
    o.base.prefetch.overfetch = to_double(a, value(), 0);
  } else if (a == "--percentile") {
    o.base.prefetch.percentile = to_double(a, value(), 0);
    WISP_EXPECTS(o.base.prefetch.percentile <= 100, "--percentile: ", o.base.prefetch.percentile,
                 " is over 100");
  } else if (a == "--decode-gbps") {
    o.base.decode_bytes_per_second = to_double(a, value(), 1e-9) * 1e9;
  } else if (a == "--tiers") {
    const std::vector<std::string> parts = split_list(value());
    WISP_EXPECTS(parts.size() == 4, "--tiers: need four sizes F,C,S,E, got ", parts.size());
    o.base.tiers.emplace();
    for (std::size_t p = 0; p < 4; ++p) {
      (*o.base.tiers)[p] = to_int(a, parts[p], 0);
    }
  } else if (a == "--decode-threads") {
    o.base.decode_threads = static_cast<std::uint32_t>(to_int(a, value(), 1));
  } else if (a == "--host-compute") {
    const std::string_view s = value();
    WISP_EXPECTS(s == "roofline" || s == "measured", "--host-compute: unknown '", s,
                 "' (valid: roofline, measured)");
    o.base.host_measured = s == "measured";
  } else if (a == "--host-thread-gflops") {
    o.base.host_thread_flops = to_double(a, value(), 1e-9) * 1e9;
  } else if (a == "--value-rate") {
    o.base.value_rate = to_double(a, value(), 1e-9);
    WISP_EXPECTS(o.base.value_rate <= 1, "--value-rate: ", o.base.value_rate, " is not in (0, 1]");
  } else if (a == "--cap") {
    o.base.cap = to_int(a, value(), 1);
  } else if (a == "--hot") {
    o.base.hot = to_int(a, value(), 0);
  } else if (a == "--burst") {
    o.base.dynamic_burst = to_int(a, value(), 1);
  } else if (a == "--decay") {
    o.base.controller.decay = to_double(a, value(), 0);
    o.base.controller.validate();
  } else {
    return false;
  }
  return true;
}

// What is served: the model's shape, its routing and the workload.
template <class Value>
bool parse_model_flag(cli_options& o, std::string_view a, Value&& value) {
  if (a == "--workload") {
    o.workload = std::string(value());
    WISP_EXPECTS(o.workload == "chat" || o.workload == "shift", "--workload: unknown '", o.workload,
                 "' (valid: chat, shift)");
  } else if (a == "--sessions") {
    o.sessions = to_int(a, value(), 1);
  } else if (a == "--max-running") {
    o.base.max_running = to_int(a, value(), 1);
  } else if (a == "--routing") {
    o.routing = std::string(value());
    if (o.routing == "trace") {
      o.trace_file = std::string(value());
    }
    WISP_EXPECTS(o.routing == "synthetic" || o.routing == "model" || o.routing == "trace",
                 "--routing: unknown '", o.routing, "' (valid: synthetic, model, trace FILE)");
  } else if (a == "--on-incomplete") {
    const std::string_view s = value();
    const auto p = wisp::from_string<wisp::incomplete_tokens>(s);
    WISP_EXPECTS(p.has_value() && *p != wisp::incomplete_tokens::keep, "--on-incomplete: '", s,
                 "' (valid: error, skip)");
    o.on_incomplete = *p;
  } else if (a == "--layers") {
    o.layers = o.model.layers = to_int(a, value(), 1);
  } else if (a == "--experts") {
    o.experts = o.model.experts = to_int(a, value(), 1);
  } else if (a == "--top-k") {
    o.top_k = o.model.top_k = to_int(a, value(), 1);
  } else if (a == "--hidden") {
    o.model.hidden = to_int(a, value(), 2);
  } else if (a == "--intermediate") {
    o.model.intermediate = to_int(a, value(), 1);
  } else {
    return false;
  }
  return true;
}

// The device and its link: a profile (preset or file) whose link `--bandwidth` and
// `--latency-us` override, or the host's defaults (25 GB/s, 10 us).
inline void set_device(cli_options& o, std::optional<double> bandwidth,
                       std::optional<double> latency) {
  if (o.device != "host") {
    // A preset or a file (a bad one is refused naming the member and value): its link unless
    // --bandwidth / --latency-us say otherwise, and the profile then shows the link charged.
    wisp::device_profile p = wisp::device_profile_named(o.device);
    p.h2d_gbps = bandwidth.value_or(p.h2d_gbps);
    p.copy_latency_us = latency.value_or(p.copy_latency_us);
    p.validate();
    o.base.link = p.link();
    o.base.device = std::move(p);
  } else {
    o.base.link.bytes_per_second = bandwidth.value_or(25) * 1e9;
    o.base.link.latency_seconds = latency.value_or(10) * 1e-6;
  }
  o.base.link.validate();
}
}  // namespace detail

/// @brief Parses `args` (without the program name).
/// @throws wisp::logic_error naming the flag and value on any bad input.
[[nodiscard]] inline cli_options parse_cli(std::span<const std::string_view> args) {
  using detail::to_double;
  cli_options o;
  o.base.budget_bytes = 148ull << 20;
  std::optional<double> bandwidth, latency;  // link flags override the profile's
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    auto value = [&]() -> std::string_view {
      WISP_EXPECTS(i + 1 < args.size(), "missing value after ", a);
      return args[++i];
    };
    if (a == "--help" || a == "-h") {
      o.help = true;
    } else if (a == "--budget") {
      o.base.budget_bytes = wisp::parse_byte_size(std::string(value())).count();
    } else if (a == "--bandwidth") {
      bandwidth = to_double(a, value(), 1e-9);
    } else if (a == "--latency-us") {
      latency = to_double(a, value(), 0);
    } else if (a == "--device") {
      o.device = std::string(value());
    } else if (a == "--repeat") {
      o.repeat = detail::to_int(a, value(), 1);
    } else if (a == "--json") {
      o.json = true;
    } else if (!detail::parse_arm_flag(o, a, value) && !detail::parse_model_flag(o, a, value)) {
      WISP_FAIL(wisp::logic_error, "unknown option '", a, "' (see --help)");
    }
  }
  detail::set_device(o, bandwidth, latency);
  o.base.routing = o.routing == "model" ? routing_source::model : routing_source::trace;
  return o;
}

}  // namespace wisp_engine
