// SPDX-License-Identifier: Apache-2.0
// wisp-engine: serve a small MoE transformer on the CPU under a modelled device budget and link,
// once per arm and repetition (interleaved), and compare every arm with the strongest baseline.
// See docs/engine.md.
#include "cli.hpp"
#include "engine.hpp"
#include "report.hpp"

#include <wisp/alloc/units.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

int main(int argc, char** argv) {
  using namespace wisp_engine;
  try {
    const std::vector<std::string_view> args(argv + 1, argv + argc);
    cli_options o = parse_cli(args);
    if (o.help) {
      std::cout << usage;
      return 0;
    }
    workload wl;
    if (o.routing == "trace") {
      wisp::imported_trace imported = read_routing_trace(o.trace_file, o.on_incomplete);
      if (imported.report.dropped_tokens > 0) {
        std::cerr << "wisp-engine: " << imported.report.dropped_tokens
                  << " tokens lacking a layer were left out (--on-incomplete skip), "
                  << imported.report.incomplete_sequences << " sequences affected\n";
      }
      wisp::routing_trace trace = std::move(imported.trace);
      const auto& s = trace.shape();
      WISP_EXPECTS((!o.layers || *o.layers == s.layers) &&
                       (!o.experts || *o.experts == s.experts) && (!o.top_k || *o.top_k == s.top_k),
                   "--layers/--experts/--top-k disagree with the trace's ", s.layers, " layers x ",
                   s.experts, " experts (top-", s.top_k, "); leave them out");
      o.model.layers = s.layers;
      o.model.experts = s.experts;
      o.model.top_k = s.top_k;
      o.model.validate();
      wl = trace_workload(std::move(trace), o.model, o.sessions);
    } else {
      o.model.validate();
      wl = synthetic_workload(o.workload, o.model, o.sessions > 0 ? o.sessions : 16);
    }
    const model_weights weights(o.model);
    if (std::find_if(o.arms.begin(), o.arms.end(), [](arm_kind a) {
          return a == arm_kind::pager_zip || a == arm_kind::tiered;
        }) != o.arms.end()) {
      o.base.zip = std::make_shared<const zip_masters>(weights);
      std::cerr << "wisp-engine: experts compressed to " << o.base.zip->ratio() * 100
                << "% of their bytes (Huffman exponents) for pager+zip and tiered\n";
    }
    o.base.progress = [](const std::string& line) { std::cerr << "  " << line << "\n"; };
    const device_summary device = summarize_device(o.base, o.model);
    std::cerr << "wisp-engine: " << o.model.layers << " MoE layers x " << o.model.experts
              << " experts (top-" << o.model.top_k << ", "
              << wisp::format_bytes(o.model.expert_bytes()) << " each), "
              << wisp::format_bytes(o.model.all_expert_bytes()) << " of experts, budget "
              << wisp::format_bytes(o.base.budget_bytes) << "; '" << wl.name
              << "': " << wl.warmup.size() << " warm-up + " << wl.evaluated.size()
              << " evaluated sessions, routing " << o.routing << ", " << o.repeat
              << " interleaved runs per arm\n  " << device_line(device) << "\n";
    const warmup_log warmup = record_warmup(weights, wl, o.base);
    const bool full_fits = o.base.budget_bytes >= full_fit_budget(o.model, wl, o.base.max_running);
    comparison c =
        compare(run_interleaved(weights, o.base, wl, warmup, o.specs(full_fits), o.repeat));
    c.device = device;
    for (const arm_runs& a : c.arms) {
      for (const std::string& r : a.runs.front().rejected) {
        std::cerr << "  " << a.label() << ": " << r << "\n";
      }
    }
    if (o.json) {
      write_json(std::cout, c);
    } else {
      write_table(stdout, c);
    }
    return c.identical == false ? 1 : 0;
  } catch (const std::exception& e) {
    std::cerr << "wisp-engine: " << e.what() << "\n";
    return 2;
  }
}
