// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Honest reporting: every arm run `repeat` times, interleaved (repetition `r` runs every
/// arm once, so background load hits all arms alike); every timed figure reported as median,
/// min and max over the runs; ratios of each pager arm against the strongest baseline (the
/// fastest arm that wisp does not place, at the same budget), computed per repetition.
///
/// `identical` is true when every feasible run of every arm produced the same tokens and logits,
/// false when one differs, and unknown (null) unless at least two arms are feasible and one of
/// them does not page (so a paged output is compared with an unpaged one).
#pragma once

#include "engine.hpp"
#include "index.hpp"

#include <wisp/alloc/units.hpp>
#include <wisp/core/detail/json.hpp>

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace wisp_engine {

/// An arm to run: its kind, policy (pager arms), and whether it is `full`'s upper bound.
struct arm_spec {
  arm_kind kind = arm_kind::full;
  std::string policy;
  bool upper_bound = false;
};

/// Every run of one arm.
struct arm_runs {
  arm_spec spec;
  std::vector<arm_result> runs;
  [[nodiscard]] bool feasible() const { return !runs.empty() && runs.front().feasible; }
  [[nodiscard]] std::string label() const {
    std::string s = runs.front().name;
    if (!spec.policy.empty() && spec.kind == arm_kind::pager) {
      s += " " + spec.policy;
    }
    return spec.upper_bound ? s + " (bound)" : s;
  }
};

/// Median, min, max of a figure over the runs (the median of an even count is the mean of the two
/// middle values).
struct figure {
  double median = 0, min = 0, max = 0;
  std::vector<double> runs;
};
[[nodiscard]] inline figure make_figure(std::vector<double> runs) {
  figure f;
  f.runs = runs;
  if (runs.empty()) {
    return f;
  }
  std::sort(runs.begin(), runs.end());
  const std::size_t n = runs.size();
  f.median = n % 2 == 1 ? runs[n / 2] : (runs[n / 2 - 1] + runs[n / 2]) / 2;
  f.min = runs.front();
  f.max = runs.back();
  return f;
}
template <class F>
[[nodiscard]] figure figure_of(const arm_runs& a, F value) {
  std::vector<double> v;
  for (const arm_result& r : a.runs) {
    v.push_back(value(r));
  }
  return make_figure(std::move(v));
}

/// @brief Runs every arm of `specs` `repeat` times, interleaved. `full`'s upper bound runs at
/// `full_fit_budget`; the others at `base.budget_bytes`.
[[nodiscard]] inline std::vector<arm_runs> run_interleaved(
    const model_weights& w, const engine_options& base, const workload& wl,
    const warmup_log& warmup, const std::vector<arm_spec>& specs, std::int32_t repeat) {
  WISP_EXPECTS(repeat >= 1, "--repeat must be at least 1, got ", repeat);
  std::vector<arm_runs> out;
  for (const arm_spec& s : specs) {
    out.push_back({s, {}});
  }
  for (std::int32_t r = 0; r < repeat; ++r) {
    for (arm_runs& a : out) {
      engine_options o = base;
      o.arm = a.spec.kind;
      o.policy = a.spec.policy.empty() ? base.policy : a.spec.policy;
      if (a.spec.upper_bound) {
        o.budget_bytes = full_fit_budget(w.cfg, wl, base.max_running);
      }
      a.runs.push_back(run_arm(w, o, wl, warmup));
      a.runs.back().upper_bound = a.spec.upper_bound;
      if (base.progress) {
        base.progress("run " + std::to_string(r + 1) + "/" + std::to_string(repeat) + " " +
                      a.label() + ": " + wisp::format_bytes(a.runs.back().bytes_moved) + " moved");
      }
    }
  }
  return out;
}

/// @brief The modelled device a comparison ran on, and the ratio that puts it in wisp's regime:
/// one miss's copy against the device time of one token's MoE (its `k` experts read from device
/// memory), for the engine's model and, on the same profile, for Qwen3-30B-A3B (9 MiB BF16
/// experts: hidden 2048, expert FFN 768; top-8).
struct device_summary {
  std::optional<wisp::device_profile> profile;  ///< nullopt: `--device host`
  wisp::link_model link;
  bool host_measured = false;
  double host_thread_flops = 0;
  double miss_copy_s = 0, token_moe_s = 0;  ///< the engine's model
  double ref_copy_s = 0, ref_moe_s = 0;     ///< Qwen3-30B-A3B
  static constexpr std::uint64_t ref_expert_bytes = 3ull * 2048 * 768 * 2;
  static constexpr std::int32_t ref_top_k = 8, ref_hidden = 2048;

  [[nodiscard]] std::string name() const { return profile ? profile->name : "host"; }
};

/// The summary of the device `o` describes for model `c` (the ratios need a profile).
[[nodiscard]] inline device_summary summarize_device(const engine_options& o,
                                                     const model_config& c) {
  device_summary d{o.device, o.link, o.host_measured, o.host_thread_flops};
  const auto moe = [&](const wisp::device_profile& p, double bytes, std::int32_t k,
                       std::int32_t hidden) {
    return p.moe_seconds(k * bytes + 2.0 * hidden * k, k * bytes);  // as forward.hpp's moe_work
  };
  d.miss_copy_s = o.link.copy_seconds(c.expert_bytes());
  d.ref_copy_s = o.link.copy_seconds(device_summary::ref_expert_bytes);
  if (o.device) {
    d.token_moe_s = moe(*o.device, real(c.expert_bytes()), c.top_k, c.hidden);
    d.ref_moe_s = moe(*o.device, real(device_summary::ref_expert_bytes), device_summary::ref_top_k,
                      device_summary::ref_hidden);
  }
  return d;
}

/// One line (no newline) naming the device and the ratio, for the report's header.
[[nodiscard]] inline std::string device_line(const device_summary& d) {
  char b[640];
  if (!d.profile) {
    std::snprintf(b, sizeof b,
                  "device: host (compute charged by this machine's thread CPU time), link %g GB/s "
                  "+ %g us per copy",
                  d.link.bytes_per_second / 1e9, d.link.latency_seconds * 1e6);
    return b;
  }
  const wisp::device_profile& p = *d.profile;
  std::snprintf(b, sizeof b,
                "device: %s (modelled: %g GB/s, %g BF16 TFLOP/s, launch %g us; link %g GB/s + %g "
                "us per copy; host %g GB/s, %d threads x %g GFLOP/s%s); one miss's copy %.1f us "
                "vs one token's MoE %.1f us = %.2fx (Qwen3-30B-A3B on it: %.0f us vs %.0f us = "
                "%.2fx)",
                p.name.c_str(), p.moe_gbps > 0 ? p.moe_gbps : p.device_memory_gbps,
                p.peak_bf16_tflops, p.launch_us, p.h2d_gbps, p.copy_latency_us, p.host_memory_gbps,
                p.host_threads, d.host_thread_flops / 1e9,
                d.host_measured ? ", host experts measured" : "", d.miss_copy_s * 1e6,
                d.token_moe_s * 1e6, d.miss_copy_s / d.token_moe_s, d.ref_copy_s * 1e6,
                d.ref_moe_s * 1e6, d.ref_copy_s / d.ref_moe_s);
  return b;
}

/// The comparison the engine prints.
struct comparison {
  std::optional<device_summary> device;  ///< the modelled device (set by the caller)
  std::vector<arm_runs> arms;
  std::optional<bool> identical;               ///< nullopt: could not check
  const arm_runs* baseline = nullptr;          ///< strongest baseline by median decode tok/s
  const arm_runs* prefill_baseline = nullptr;  ///< by median prefill tok/s
  const arm_runs* best_pager = nullptr;        ///< best pager arm by median decode tok/s
};

[[nodiscard]] inline comparison compare(std::vector<arm_runs> arms) {
  comparison c;
  c.arms = std::move(arms);
  const arm_result* ref = nullptr;
  std::size_t feasible = 0;
  bool unpaged = false, same = true;
  for (const arm_runs& a : c.arms) {
    if (!a.feasible()) {
      continue;
    }
    ++feasible;
    unpaged = unpaged || !is_wisp_arm(a.spec.kind);
    for (const arm_result& r : a.runs) {
      if (ref == nullptr) {
        ref = &r;
      } else if (r.outputs != ref->outputs || r.logits_hashes != ref->logits_hashes) {
        same = false;
      }
    }
  }
  if (feasible >= 2 && unpaged) {
    c.identical = same;
  }
  auto decode = [](const arm_runs& a) {
    return figure_of(a, [](auto& r) { return r.decode_tok_s; });
  };
  auto prefill = [](const arm_runs& a) {
    return figure_of(a, [](auto& r) { return r.prefill_tok_s; });
  };
  for (const arm_runs& a : c.arms) {
    if (!a.feasible() || a.spec.upper_bound) {
      continue;
    }
    auto better = [&](const arm_runs* best, auto fig) {
      return best == nullptr || fig(a).median > fig(*best).median;
    };
    if (is_wisp_arm(a.spec.kind)) {
      if (a.spec.kind == arm_kind::pager && better(c.best_pager, decode)) {
        c.best_pager = &a;
      }
    } else {
      if (better(c.baseline, decode)) {
        c.baseline = &a;
      }
      if (better(c.prefill_baseline, prefill)) {
        c.prefill_baseline = &a;
      }
    }
  }
  return c;
}

/// Per-repetition ratio `value(a) / value(b)`, as a figure.
template <class F>
[[nodiscard]] figure ratio(const arm_runs& a, const arm_runs& b, F value) {
  std::vector<double> v;
  for (std::size_t i = 0; i < a.runs.size() && i < b.runs.size(); ++i) {
    const double d = value(b.runs[i]);
    v.push_back(d > 0 ? value(a.runs[i]) / d : 0);
  }
  return make_figure(std::move(v));
}

namespace detail {
inline std::string num(double v) {
  char b[40];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}
inline std::string json(const figure& f) {
  std::string s = "{\"median\":" + num(f.median) + ",\"min\":" + num(f.min) +
                  ",\"max\":" + num(f.max) + ",\"runs\":[";
  for (std::size_t i = 0; i < f.runs.size(); ++i) {
    if (i != 0) {
      s += ',';
    }
    s += num(f.runs[i]);
  }
  s += "]}";
  return s;
}
inline std::string name_of(const arm_runs* a) {
  return a == nullptr ? "null" : wisp::detail::json_quote(a->runs.front().name);
}
inline std::string json(const device_summary& d) {
  if (!d.profile) {
    return "{\"name\":\"host\",\"h2d_gbps\":" + num(d.link.bytes_per_second / 1e9) +
           ",\"copy_latency_us\":" + num(d.link.latency_seconds * 1e6) + "}";
  }
  const wisp::device_profile& p = *d.profile;
  std::string s =
      "{\"name\":" + wisp::detail::json_quote(p.name) +
      ",\"source\":" + wisp::detail::json_quote(p.source) +
      ",\"device_memory_gbps\":" + num(p.device_memory_gbps) +
      ",\"peak_bf16_tflops\":" + num(p.peak_bf16_tflops) + ",\"h2d_gbps\":" + num(p.h2d_gbps) +
      ",\"copy_latency_us\":" + num(p.copy_latency_us) + ",\"launch_us\":" + num(p.launch_us) +
      ",\"host_memory_gbps\":" + num(p.host_memory_gbps) +
      ",\"host_threads\":" + std::to_string(p.host_threads);
  if (p.moe_gbps > 0) {
    s += ",\"moe_gbps\":" + num(p.moe_gbps);
  }
  s += ",\"host_thread_gflops\":" + num(d.host_thread_flops / 1e9) +
       ",\"host_compute\":" + (d.host_measured ? "\"measured\"" : "\"roofline\"") +
       ",\"miss_copy_s\":" + num(d.miss_copy_s) + ",\"token_moe_s\":" + num(d.token_moe_s) +
       ",\"miss_to_moe\":" + num(d.miss_copy_s / d.token_moe_s) +
       ",\"reference\":{\"model\":\"Qwen3-30B-A3B\",\"expert_bytes\":" +
       std::to_string(device_summary::ref_expert_bytes) +
       ",\"top_k\":" + std::to_string(device_summary::ref_top_k) +
       ",\"miss_copy_s\":" + num(d.ref_copy_s) + ",\"token_moe_s\":" + num(d.ref_moe_s) +
       ",\"miss_to_moe\":" + num(d.ref_copy_s / d.ref_moe_s) + "}}";
  return s;
}
}  // namespace detail

/// @brief Writes the comparison as one JSON object (see docs/engine.md for the fields).
inline void write_json(std::ostream& os, const comparison& c) {
  using detail::json;
  using detail::num;
  os << "{\"arms\":[";
  for (std::size_t i = 0; i < c.arms.size(); ++i) {
    const arm_runs& a = c.arms[i];
    const arm_result& r = a.runs.front();
    os << (i ? "," : "") << "{\"name\":" << wisp::detail::json_quote(r.name);
    if (!a.spec.policy.empty() && is_pager(a.spec.kind)) {
      os << ",\"policy\":" << wisp::detail::json_quote(r.policy);
    }
    os << ",\"upper_bound\":" << (a.spec.upper_bound ? "true" : "false")
       << ",\"budget_bytes\":" << r.budget << ",\"feasible\":" << (r.feasible ? "true" : "false")
       << ",\"note\":" << wisp::detail::json_quote(r.note);
    if (r.feasible) {
      char digest[32];
      std::snprintf(digest, sizeof digest, "%016" PRIx64, r.output_digest);
      os << ",\"decode_tok_s\":" << json(figure_of(a, [](auto& x) { return x.decode_tok_s; }))
         << ",\"prefill_tok_s\":" << json(figure_of(a, [](auto& x) { return x.prefill_tok_s; }))
         << ",\"ttft_s\":" << json(figure_of(a, [](auto& x) { return x.ttft_s; }))
         << ",\"tpot_s\":" << json(figure_of(a, [](auto& x) { return x.tpot_s; }))
         << ",\"stall_s\":" << json(figure_of(a, [](auto& x) { return x.stall_seconds; }))
         << ",\"hit_rate\":" << num(r.hit_rate) << ",\"bytes_moved\":" << r.bytes_moved
         << ",\"raw_bytes\":" << r.raw_bytes << ",\"expert_copies\":" << r.expert_copies
         << ",\"expert_accesses\":" << r.expert_accesses;
      if (r.belady_copies >= 0) {
        os << ",\"belady_copies\":" << r.belady_copies;
      }
      if (a.spec.kind == arm_kind::pager_prefetch) {
        os << ",\"prefetch_copies\":" << r.prefetch_copies
           << ",\"prefetch_useful\":" << r.prefetch_useful;
      }
      if (a.spec.kind == arm_kind::pager_zip || a.spec.kind == arm_kind::tiered) {
        os << ",\"decode_gbps\":" << num(r.decode_rate / 1e9)
           << ",\"decode_s\":" << num(r.decode_seconds) << ",\"host_decode_s\":"
           << json(figure_of(a, [](auto& x) { return x.host_decode_seconds; }))
           << ",\"host_decoded_bytes\":" << r.host_decoded_bytes;
      }
      if (computes_on_host(a.spec.kind)) {
        os << ",\"host_experts\":" << r.host_experts << ",\"host_positions\":" << r.host_positions
           << ",\"host_compute_s\":" << json(figure_of(a, [](auto& x) { return x.host_seconds; }));
      }
      if (a.spec.kind == arm_kind::llama_cpp_cache) {
        os << ",\"upload_runs\":" << r.upload_runs << ",\"bypassed_calls\":" << r.bypassed_calls;
      }
      if (a.spec.kind == arm_kind::tiered) {
        os << ",\"tier_sizes\":[" << r.tier_sizes[0] << "," << r.tier_sizes[1] << ","
           << r.tier_sizes[2] << "," << r.tier_sizes[3] << "],\"tier_hits\":[" << r.tier_hits[0]
           << "," << r.tier_hits[1] << "," << r.tier_hits[2] << "," << r.tier_hits[3] << ","
           << r.tier_hits[4] << "]";
      }
      os << ",\"decode_tokens\":" << r.decode_tokens << ",\"prefill_tokens\":" << r.prefill_tokens
         << ",\"preemptions\":" << r.preemptions << ",\"resizes\":" << r.resizes
         << ",\"controller_moves\":" << r.controller_moves
         << ",\"resize_failures\":" << r.resize_failures << ",\"rows\":" << r.cap
         << ",\"kv_blocks\":" << r.kv_blocks << ",\"output_digest\":\"" << digest << "\"";
      if (is_wisp_arm(a.spec.kind) && c.baseline != nullptr) {
        os << ",\"decode_vs_baseline\":"
           << json(ratio(a, *c.baseline, [](auto& x) { return x.decode_tok_s; }));
      }
      if (is_wisp_arm(a.spec.kind) && c.prefill_baseline != nullptr) {
        os << ",\"prefill_vs_baseline\":"
           << json(ratio(a, *c.prefill_baseline, [](auto& x) { return x.prefill_tok_s; }));
      }
    }
    os << "}";
  }
  os << "]";
  if (c.device) {
    os << ",\"device\":" << detail::json(*c.device);
  }
  os << ",\"identical\":" << (c.identical ? (*c.identical ? "true" : "false") : "null")
     << ",\"strongest_baseline\":" << detail::name_of(c.baseline)
     << ",\"strongest_prefill_baseline\":" << detail::name_of(c.prefill_baseline)
     << ",\"best_pager_policy\":"
     << (c.best_pager == nullptr ? "null" : wisp::detail::json_quote(c.best_pager->spec.policy))
     << "}\n";
}

namespace detail {
// `f` as "median [min-max]", each printed with `fmt` after scaling by `scale`.
inline std::string format_figure(const figure& f, const char* fmt, double scale) {
  char b[96], lo[32], hi[32];
  std::snprintf(b, sizeof b, fmt, f.median * scale);
  std::snprintf(lo, sizeof lo, fmt, f.min * scale);
  std::snprintf(hi, sizeof hi, fmt, f.max * scale);
  return std::string(b) + " [" + lo + "-" + hi + "]";
}

// The lines below the table that only some arms have: Belady's copies, decode, tiers, host
// compute, merged uploads and prefetches.
inline void write_arm_notes(std::FILE* out, const arm_runs& a) {
  const arm_result& r = a.runs.front();
  if (r.feasible && r.belady_copies >= 0) {
    std::fprintf(out,
                 "%s: %" PRIu64
                 " expert copies; Belady's offline optimum on the same calls: %" PRId64 "\n",
                 a.label().c_str(), r.expert_copies, r.belady_copies);
  }
  if (r.feasible && a.spec.kind == arm_kind::pager_zip) {
    const figure host = figure_of(a, [](auto& x) { return x.host_decode_seconds; });
    std::fprintf(out,
                 "%s: %s over the link for %" PRIu64
                 " experts (%.1f%% of their raw bytes); decode "
                 "modelled %.1f ms at %g GB/s, measured on the host %.1f ms (%.2f GB/s)\n",
                 a.label().c_str(), wisp::format_bytes(r.bytes_moved).c_str(), r.expert_copies,
                 100.0 * real(r.bytes_moved) / real(r.raw_bytes), r.decode_seconds * 1e3,
                 r.decode_rate / 1e9, host.median * 1e3,
                 host.median > 0 ? real(r.host_decoded_bytes) / host.median / 1e9 : 0.0);
  }
  if (r.feasible && a.spec.kind == arm_kind::tiered) {
    const auto& h = r.tier_hits;
    std::fprintf(out,
                 "%s: %s; experts found in F/C/S/E/nowhere %" PRIu64 "/%" PRIu64 "/%" PRIu64
                 "/%" PRIu64 "/%" PRIu64
                 ", %s over "
                 "the link, decode modelled %.1f ms\n",
                 a.label().c_str(), r.note.c_str(), h[0], h[1], h[2], h[3], h[4],
                 wisp::format_bytes(r.bytes_moved).c_str(), r.decode_seconds * 1e3);
  }
  if (r.feasible && computes_on_host(a.spec.kind)) {
    const figure host = figure_of(a, [](auto& x) { return x.host_seconds; });
    std::fprintf(out,
                 "%s: the host computed %" PRIu64 " experts (%" PRIu64
                 " positions) in %.1f ms [%.1f-%.1f]; "
                 "%" PRIu64 " copied\n",
                 a.label().c_str(), r.host_experts, r.host_positions, host.median * 1e3,
                 host.min * 1e3, host.max * 1e3, r.expert_copies);
  }
  if (r.feasible && a.spec.kind == arm_kind::llama_cpp_cache) {
    std::fprintf(out,
                 "%s: %" PRIu64 " experts uploaded in %" PRIu64 " merged copies, %" PRIu64
                 " calls bypassed\n",
                 a.label().c_str(), r.expert_copies, r.upload_runs, r.bypassed_calls);
  }
  if (r.feasible && a.spec.kind == arm_kind::pager_prefetch) {
    std::fprintf(
        out, "%s: %" PRIu64 " expert copies on demand, %" PRIu64 " prefetched (%" PRIu64 " used)\n",
        a.label().c_str(), r.expert_copies, r.prefetch_copies, r.prefetch_useful);
  }
}
}  // namespace detail

/// @brief Writes the comparison as a table and the ratio lines.
inline void write_table(std::FILE* out, const comparison& c) {
  if (c.device) {
    std::fprintf(out, "%s\n", device_line(*c.device).c_str());
  }
  const auto fig = detail::format_figure;
  std::fprintf(out, "\n%-26s %-22s %-22s %-22s %-22s %6s %10s %7s %11s %s\n", "arm",
               "decode tok/s [min-max]", "prefill tok/s", "TTFT s", "TPOT ms", "hit", "moved",
               "preempt", "rows/KV", "digest");
  for (const arm_runs& a : c.arms) {
    const arm_result& r = a.runs.front();
    if (!r.feasible) {
      std::fprintf(out, "%-26s %s\n", a.label().c_str(), r.note.c_str());
      continue;
    }
    std::fprintf(out,
                 "%-26s %-22s %-22s %-22s %-22s %6.3f %10s %7" PRIu64 " %5d/%-5" PRIu64
                 " %016" PRIx64 "\n",
                 a.label().c_str(),
                 fig(figure_of(a, [](auto& x) { return x.decode_tok_s; }), "%.1f", 1).c_str(),
                 fig(figure_of(a, [](auto& x) { return x.prefill_tok_s; }), "%.1f", 1).c_str(),
                 fig(figure_of(a, [](auto& x) { return x.ttft_s; }), "%.3f", 1).c_str(),
                 fig(figure_of(a, [](auto& x) { return x.tpot_s; }), "%.2f", 1e3).c_str(),
                 r.hit_rate, wisp::format_bytes(r.bytes_moved).c_str(), r.preemptions, r.cap,
                 r.kv_blocks, r.output_digest);
  }
  std::fprintf(out, "\noutputs identical across arms: %s\n",
               !c.identical   ? "could not check (needs two feasible arms, one of them unpaged)"
               : *c.identical ? "yes"
                              : "NO");
  auto ratios = [&](const arm_runs* base, const char* what, auto value) {
    if (base == nullptr) {
      return;
    }
    std::fprintf(out, "%s tok/s vs the strongest baseline, %s (median [min-max] per repetition):\n",
                 what, base->label().c_str());
    for (const arm_runs& a : c.arms) {
      if (a.feasible() && is_wisp_arm(a.spec.kind)) {
        std::fprintf(out, "  %-26s %s\n", a.label().c_str(),
                     fig(ratio(a, *base, value), "%.2fx", 1).c_str());
      }
    }
  };
  ratios(c.baseline, "decode", [](auto& x) { return x.decode_tok_s; });
  ratios(c.prefill_baseline, "prefill", [](auto& x) { return x.prefill_tok_s; });
  for (const arm_runs& a : c.arms) {
    detail::write_arm_notes(out, a);
  }
}

}  // namespace wisp_engine
