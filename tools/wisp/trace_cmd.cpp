// SPDX-License-Identifier: Apache-2.0
// `wisp trace import|stats|synth`: convert routing logs to .wtrace, summarise a trace, generate a
// synthetic one. Library errors (wisp::error) propagate to main, which prints them.
#include "cli.hpp"
#include "commands.hpp"
#include "progress.hpp"
#include "trace_source.hpp"

#include <wisp/trace/esft.hpp>
#include <wisp/trace/jsonl.hpp>
#include <wisp/trace/routing_trace.hpp>
#include <wisp/trace/synthetic.hpp>
#include <wisp/trace/wtrace.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace wisp::tool {
namespace {

struct layer_stats {
  double top10_share = 0;         // share of accesses going to the top 10% experts (ceil)
  double normalized_entropy = 0;  // entropy of the expert distribution / log(experts)
  double mean_working_set = 0;    // distinct experts per window, averaged over windows
};

struct trace_stats {
  std::vector<layer_stats> layers;
  std::size_t windows = 0;
};

trace_stats compute_stats(const routing_trace& t, std::size_t window) {
  const auto L = static_cast<std::size_t>(t.shape().layers);
  const auto E = static_cast<std::size_t>(t.shape().experts);
  std::vector<std::uint64_t> counts(L * E, 0);
  std::vector<std::uint32_t> last_window(L * E, ~std::uint32_t{0});
  std::vector<std::uint64_t> distinct_sum(L, 0);
  // Full windows only, unless the trace is shorter than one window (then the whole trace).
  const std::size_t windows = t.steps() < window ? (t.steps() > 0 ? 1 : 0) : t.steps() / window;
  const std::size_t covered = t.steps() < window ? t.steps() : windows * window;
  t.for_each_access([&](access a) {
    const std::size_t i =
        static_cast<std::size_t>(a.layer) * E + static_cast<std::size_t>(a.expert);
    ++counts[i];
    if (a.step < covered) {
      const auto w = static_cast<std::uint32_t>(a.step / window);
      if (last_window[i] != w) {
        last_window[i] = w;
        ++distinct_sum[static_cast<std::size_t>(a.layer)];
      }
    }
  });
  trace_stats out;
  out.windows = windows;
  out.layers.resize(L);
  const std::size_t top = (E + 9) / 10;
  std::vector<std::uint64_t> sorted(E);
  for (std::size_t l = 0; l < L; ++l) {
    std::copy_n(counts.begin() + static_cast<std::ptrdiff_t>(l * E), E, sorted.begin());
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    std::uint64_t total = 0;
    std::uint64_t top_sum = 0;
    for (std::size_t e = 0; e < E; ++e) {
      total += sorted[e];
      if (e < top) {
        top_sum += sorted[e];
      }
    }
    auto& s = out.layers[l];
    if (total > 0) {
      s.top10_share = static_cast<double>(top_sum) / static_cast<double>(total);
      double h = 0;
      for (const std::uint64_t c : sorted) {
        if (c > 0) {
          const double p = static_cast<double>(c) / static_cast<double>(total);
          h -= p * std::log(p);
        }
      }
      s.normalized_entropy = E > 1 ? h / std::log(static_cast<double>(E)) : 0.0;
    }
    s.mean_working_set =
        windows > 0 ? static_cast<double>(distinct_sum[l]) / static_cast<double>(windows) : 0.0;
  }
  return out;
}

double mean_of(const std::vector<layer_stats>& v, double layer_stats::*field) {
  double sum = 0;
  for (const auto& s : v) {
    sum += s.*field;
  }
  return v.empty() ? 0.0 : sum / static_cast<double>(v.size());
}

void print_stats(const routing_trace& t, const std::string& file, std::size_t window, bool json) {
  const trace_stats st = compute_stats(t, window);
  const auto& shape = t.shape();
  if (json) {
    nlohmann::ordered_json j = trace_json(file, t);
    j["sequences"] = t.sequence_starts().size();
    j["missing_rows"] = t.missing_rows();
    j["has_weights"] = t.has_weights();
    j["window"] = window;
    j["windows"] = st.windows;
    j["mean_top10_share"] = mean_of(st.layers, &layer_stats::top10_share);
    j["mean_normalized_entropy"] = mean_of(st.layers, &layer_stats::normalized_entropy);
    j["mean_working_set"] = mean_of(st.layers, &layer_stats::mean_working_set);
    auto& per_layer = j["per_layer"] = nlohmann::ordered_json::array();
    for (std::size_t l = 0; l < st.layers.size(); ++l) {
      per_layer.push_back({{"layer", l},
                           {"top10_share", st.layers[l].top10_share},
                           {"normalized_entropy", st.layers[l].normalized_entropy},
                           {"mean_working_set", st.layers[l].mean_working_set}});
    }
    std::cout << j.dump(2) << '\n';
    return;
  }
  std::printf("%s\n", file.c_str());
  std::printf("  shape      %d layers x %d experts, top-%d\n", shape.layers, shape.experts,
              shape.top_k);
  std::printf(
      "  steps      %zu\n  sequences  %zu\n  accesses   %zu\n  missing    %zu (step, layer) "
      "rows of partial steps\n  weights    %s\n",
      t.steps(), t.sequence_starts().size(), t.access_count(), t.missing_rows(),
      t.has_weights() ? "yes" : "no");
  std::printf("  window     %zu steps (%zu windows)\n\n", window, st.windows);
  std::printf("  layer  top10%%-share  norm-entropy  working-set/window\n");
  for (std::size_t l = 0; l < st.layers.size(); ++l) {
    std::printf("  %5zu  %12.4f  %12.4f  %18.2f\n", l, st.layers[l].top10_share,
                st.layers[l].normalized_entropy, st.layers[l].mean_working_set);
  }
  std::printf("  %5s  %12.4f  %12.4f  %18.2f\n", "mean",
              mean_of(st.layers, &layer_stats::top10_share),
              mean_of(st.layers, &layer_stats::normalized_entropy),
              mean_of(st.layers, &layer_stats::mean_working_set));
}

}  // namespace

// One declarative table: the subcommands of `wisp trace` and their options, in `--help`'s order
// (long, but a list of options reads best whole).
void add_trace_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("trace", "Import, summarise and synthesise routing traces");
  cmd->require_subcommand(1);

  // wisp trace import --format esft|jsonl INPUT -o OUT.wtrace [options]
  struct import_args {
    std::string format;
    std::string input;
    std::string output;
    std::string group_key;
    std::int32_t experts = 0;  // 0: the format's default
    std::int32_t top_k = 0;
    std::string on_incomplete = "error";
  };
  auto ia = std::make_shared<import_args>();
  auto* imp = cmd->add_subcommand("import", "Convert an ESFT folder or a JSONL log to .wtrace");
  imp->add_option("--format", ia->format, "Input format")
      ->required()
      ->check(CLI::IsMember({"esft", "jsonl"}));
  imp->add_option("input", ia->input, "ESFT folder or JSONL file")->required();
  imp->add_option("-o,--output", ia->output, "Output .wtrace file")->required();
  auto* group_key =
      imp->add_option("--group-key", ia->group_key,
                      "JSONL only: field grouping records into sequences (e.g. problem_id)");
  auto* experts = imp->add_option("--experts", ia->experts,
                                  "Experts per layer (ESFT default 64; JSONL default: max id + 1)")
                      ->check(whole_number(1, moe_shape::max_experts));
  auto* top_k = imp->add_option("--top-k", ia->top_k,
                                "ESFT only: ids per token (default 6); checked against the data")
                    ->check(whole_number(1, moe_shape::max_experts));
  imp->add_option("--on-incomplete", ia->on_incomplete,
                  "a token lacking some layers (JSONL), or an ESFT line whose layer files "
                  "disagree on its token count: error, skip (drop those tokens) or keep (keep "
                  "them with the layers present)")
      ->check(CLI::IsMember({"error", "skip", "keep"}))
      ->capture_default_str();
  imp->callback([ia, group_key, top_k, experts] {
    const bool esft = ia->format == "esft";
    if (esft && group_key->count() > 0) {
      usage_error("--group-key applies to --format jsonl only");
    }
    if (!esft && top_k->count() > 0) {
      usage_error("--top-k applies to --format esft only (JSONL records carry their ids)");
    }
    refuse_overwriting(ia->input, ia->output);
    const auto policy = *from_string<incomplete_tokens>(ia->on_incomplete);
    progress_bar bar("importing " + std::filesystem::path(ia->input).filename().string(), 0,
                     progress_wanted(false));
    auto report_progress = [&bar](std::uint64_t done, std::uint64_t total) {
      bar.set_total(total);
      bar.set(done);
    };
    imported_trace imported = [&] {
      if (esft) {
        esft_config opt;
        opt.experts = experts->count() > 0 ? ia->experts : opt.experts;
        opt.top_k = top_k->count() > 0 ? ia->top_k : opt.top_k;
        opt.on_incomplete = policy;
        opt.progress = report_progress;
        return import_esft(ia->input, opt);
      }
      jsonl_config opt;
      opt.group_key = ia->group_key;
      opt.experts = ia->experts;
      opt.on_incomplete = policy;
      opt.progress = report_progress;
      return import_jsonl(std::filesystem::path(ia->input), opt);
    }();
    const routing_trace& t = imported.trace;
    write_wtrace(t, std::filesystem::path(ia->output));
    std::printf(
        "wrote %s: %d layers x %d experts, top-%d; %zu steps, %zu sequences, %zu accesses\n",
        ia->output.c_str(), t.shape().layers, t.shape().experts, t.shape().top_k, t.steps(),
        t.sequence_starts().size(), t.access_count());
    const import_report& r = imported.report;
    if (r.incomplete_tokens > 0) {
      const std::string action =
          policy == incomplete_tokens::skip
              ? "dropped " + std::to_string(r.dropped_tokens) + " tokens (" +
                    std::to_string(r.dropped_records) + " records)"
              : "kept " + std::to_string(r.partial_tokens) + " tokens with the layers present";
      std::printf("incomplete: %zu tokens in %zu sequences lacked %zu (token, layer) records; %s\n",
                  r.incomplete_tokens, r.incomplete_sequences, r.missing_records, action.c_str());
    }
  });

  // wisp trace stats FILE [--json] [--window N]
  struct stats_args {
    std::string file;
    bool json = false;
    std::size_t window = 16;
  };
  auto sa = std::make_shared<stats_args>();
  auto* stats = cmd->add_subcommand("stats", "Summarise a routing trace");
  stats->add_option("FILE", sa->file, trace_source_help())->required();
  stats->add_flag("--json", sa->json, "Print JSON instead of a table");
  stats->add_option("--window", sa->window, "Window length in steps for working-set sizes")
      ->check(whole_number(1))
      ->capture_default_str();
  stats->callback([sa] {
    const routing_trace t = load_trace(sa->file);
    print_stats(t, sa->file, sa->window, sa->json);
  });

  // wisp trace synth [--preset NAME] [--steps N] [--seed S] -o OUT.wtrace
  struct synth_args {
    std::string preset = "default";
    std::size_t steps = default_synthetic_steps;
    std::uint64_t seed = default_synthetic_seed;
    std::string output;
  };
  auto ya = std::make_shared<synth_args>();
  auto* synth = cmd->add_subcommand("synth", "Generate a synthetic routing trace");
  synth->add_option("--preset", ya->preset, "Preset: " + synthetic_presets_text())
      ->capture_default_str();
  synth->add_option("--steps", ya->steps, "Number of steps (tokens)")
      ->check(whole_number(0, routing_trace::max_steps))
      ->capture_default_str();
  synth->add_option("--seed", ya->seed, "Random seed")
      ->check(whole_number(0))
      ->capture_default_str();
  synth->add_option("-o,--output", ya->output, "Output .wtrace file")->required();
  synth->callback([ya] {
    const routing_trace t = make_synthetic_trace(synthetic_preset(ya->preset), ya->steps, ya->seed);
    write_wtrace(t, std::filesystem::path(ya->output));
    std::printf(
        "wrote %s: preset %s, seed %llu; %d layers x %d experts, top-%d; %zu steps, "
        "%zu sequences\n",
        ya->output.c_str(), ya->preset.c_str(), static_cast<unsigned long long>(ya->seed),
        t.shape().layers, t.shape().experts, t.shape().top_k, t.steps(),
        t.sequence_starts().size());
  });
}

}  // namespace wisp::tool
