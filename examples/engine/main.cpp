// SPDX-License-Identifier: Apache-2.0
// wisp-engine: serve a small MoE transformer on the CPU under an emulated device budget, once per
// arm (full, static-offload, pager, pager+plan, pager+dynamic), and compare. See docs/engine.md.
#include "engine.hpp"

#include <wisp/alloc/units.hpp>
#include <wisp/trace/wtrace.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr const char* usage = R"(usage: wisp-engine [options]
  --arms A,B,...        arms to run (default: full,static-offload,pager,pager+plan,pager+dynamic)
  --budget BYTES        device budget for resident experts + KV (default 48MiB)
  --bandwidth GBPS      host->device GB/s of the emulated copy engine, 0 = unthrottled (default 25)
  --policy NAME         pager eviction policy: lru, least_stale, lfu, lfru, fifo (default lru)
  --cap N               pager arm: per-layer expert cap (default: largest that leaves the KV floor)
  --workload NAME       chat (default) or shift (long-context turns and tool-call bursts)
  --sessions N          requests to serve (default 16)
  --max-running N       sessions decoded together (default 4)
  --routing SRC [FILE]  synthetic (default: built-in synthetic trace), model (the router), or
                        trace FILE.wtrace (recorded routing)
  --layers N --experts N --top-k N --hidden N   model shape (default 8 x 64, top-6, 256)
  --burst N             pager+dynamic: forwards per controller burst (default 4)
  --decay G             pager+dynamic: controller's per-burst decay gamma in [0, 1] (default 0:
                        only the last burst counts)
  --json                print the comparison as JSON
)";

std::string fmt(double v, const char* f = "%.2f") {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace wisp_engine;
  try {
    model_config mc;
    engine_options opt;
    std::vector<arm_kind> arms = {arm_kind::full, arm_kind::static_offload, arm_kind::pager,
                                  arm_kind::pager_plan, arm_kind::pager_dynamic};
    std::string workload = "chat", routing = "synthetic", trace_file;
    std::int32_t sessions = 16;
    bool json = false;
    for (int i = 1; i < argc; ++i) {
      const std::string_view a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) {
          throw std::runtime_error(std::string("missing value after ") + std::string(a));
        }
        return argv[++i];
      };
      if (a == "--help" || a == "-h") {
        std::cout << usage;
        return 0;
      } else if (a == "--arms") {
        arms.clear();
        std::string list = value();
        std::size_t p = 0;
        while (p <= list.size()) {
          const std::size_t q = std::min(list.find(',', p), list.size());
          const auto arm = parse_arm(std::string_view(list).substr(p, q - p));
          if (!arm) {
            throw std::runtime_error("unknown arm '" + list.substr(p, q - p) + "'");
          }
          arms.push_back(*arm);
          p = q + 1;
        }
      } else if (a == "--budget") {
        opt.budget_bytes = wisp::alloc::parse_byte_size(value()).count();
      } else if (a == "--bandwidth") {
        opt.bandwidth = std::stod(value()) * 1e9;
      } else if (a == "--policy") {
        opt.policy = value();
      } else if (a == "--cap") {
        opt.cap = std::stoi(value());
      } else if (a == "--workload") {
        workload = value();
      } else if (a == "--sessions") {
        sessions = std::stoi(value());
      } else if (a == "--max-running") {
        opt.max_running = std::stoi(value());
      } else if (a == "--routing") {
        routing = value();
        if (routing == "trace") {
          trace_file = value();
        } else if (routing != "synthetic" && routing != "model") {
          throw std::runtime_error("unknown routing '" + routing + "' (synthetic, model, trace)");
        }
      } else if (a == "--layers") {
        mc.layers = std::stoi(value());
      } else if (a == "--experts") {
        mc.experts = std::stoi(value());
      } else if (a == "--top-k") {
        mc.top_k = std::stoi(value());
      } else if (a == "--hidden") {
        mc.hidden = std::stoi(value());
      } else if (a == "--burst") {
        opt.dynamic_burst = std::stoi(value());
        if (opt.dynamic_burst < 1) {
          throw std::runtime_error("--burst must be at least 1");
        }
      } else if (a == "--decay") {
        opt.controller.decay = std::stod(value());
        opt.controller.validate();
      } else if (a == "--json") {
        json = true;
      } else {
        std::cerr << "wisp-engine: unknown option '" << a << "'\n" << usage;
        return 2;
      }
    }
    mc.validate();
    const model_weights weights(mc);
    const std::vector<request> reqs = make_workload(workload, mc, sessions);
    wisp::trace::routing_trace trace =
        routing == "trace" ? wisp::trace::read_wtrace(trace_file) : default_trace(mc);
    if (routing == "trace") {
      const auto& s = trace.shape();
      if (s.layers < mc.layers || s.experts != mc.experts || s.top_k != mc.top_k) {
        throw std::runtime_error(
            "trace shape does not match the model (pass --layers/--experts/"
            "--top-k to match it)");
      }
    }
    opt.trace = &trace;
    opt.routing = routing == "model" ? routing_source::model : routing_source::trace;
    opt.progress = [](const std::string& line) { std::cerr << "  " << line << "\n"; };
    std::cerr << "wisp-engine: " << mc.layers << " MoE layers x " << mc.experts << " experts (top-"
              << mc.top_k << "), " << wisp::alloc::format_bytes(mc.all_expert_bytes())
              << " of experts, budget " << wisp::alloc::format_bytes(opt.budget_bytes)
              << ", copy engine "
              << (opt.bandwidth > 0 ? fmt(opt.bandwidth / 1e9) + " GB/s" : "unthrottled") << ", "
              << reqs.size() << " '" << workload << "' sessions, routing " << routing << ", policy "
              << opt.policy << "\n";

    std::vector<arm_result> results;
    for (const arm_kind arm : arms) {
      opt.arm = arm;
      std::cerr << "[" << arm_name(arm) << "]\n";
      results.push_back(run_arm(weights, opt, reqs));
      for (const std::string& r : results.back().rejected) {
        std::cerr << "  " << r << "\n";
      }
    }
    // Identical: every feasible arm produced the same tokens and logits bytes.
    bool identical = true;
    const arm_result* ref = nullptr;
    for (const arm_result& r : results) {
      if (!r.feasible) {
        continue;
      }
      if (ref == nullptr) {
        ref = &r;
      } else if (r.outputs != ref->outputs || r.logits_hashes != ref->logits_hashes) {
        identical = false;
      }
    }
    const arm_result* stat = nullptr;
    const arm_result* pag = nullptr;
    for (const arm_result& r : results) {
      if (r.feasible && r.name == "static-offload")
        stat = &r;
      if (r.feasible && r.name == "pager")
        pag = &r;
    }
    if (json) {
      std::cout << "{\"arms\":[";
      for (std::size_t i = 0; i < results.size(); ++i) {
        const arm_result& r = results[i];
        char digest[32];
        std::snprintf(digest, sizeof digest, "%016llx",
                      static_cast<unsigned long long>(r.output_digest));
        std::cout << (i ? "," : "") << "{\"name\":\"" << r.name
                  << "\",\"feasible\":" << (r.feasible ? "true" : "false");
        if (r.feasible) {
          std::cout << ",\"decode_tok_s\":" << r.decode_tok_s
                    << ",\"prefill_tok_s\":" << r.prefill_tok_s << ",\"ttft_s\":" << r.ttft_s
                    << ",\"tpot_s\":" << r.tpot_s << ",\"hit_rate\":" << r.hit_rate
                    << ",\"bytes_moved\":" << r.bytes_moved
                    << ",\"kv_preemptions\":" << r.preemptions << ",\"resizes\":" << r.resizes
                    << ",\"controller_moves\":" << r.controller_moves
                    << ",\"resize_failures\":" << r.resize_failures << ",\"cap\":" << r.cap
                    << ",\"kv_blocks\":" << r.kv_blocks << ",\"output_digest\":\"" << digest
                    << "\"";
        } else {
          std::cout << ",\"note\":\"" << r.note << "\"";
        }
        std::cout << "}";
      }
      std::cout << "],\"identical\":" << (identical ? "true" : "false") << "}\n";
      return identical ? 0 : 1;
    }
    std::printf("\n%-15s %9s %9s %8s %8s %6s %10s %6s %7s %12s  %s\n", "arm", "decode/s",
                "prefill/s", "TTFT s", "TPOT ms", "hit", "moved", "preempt", "resizes",
                "cap/KV blks", "digest");
    for (const arm_result& r : results) {
      if (!r.feasible) {
        std::printf("%-15s %s\n", r.name.c_str(), r.note.c_str());
        continue;
      }
      std::printf("%-15s %9.1f %9.1f %8.3f %8.2f %6.3f %10s %6llu %7llu %5d/%-6llu  %016llx\n",
                  r.name.c_str(), r.decode_tok_s, r.prefill_tok_s, r.ttft_s, r.tpot_s * 1e3,
                  r.hit_rate, wisp::alloc::format_bytes(r.bytes_moved).c_str(),
                  static_cast<unsigned long long>(r.preemptions),
                  static_cast<unsigned long long>(r.resizes), r.cap,
                  static_cast<unsigned long long>(r.kv_blocks),
                  static_cast<unsigned long long>(r.output_digest));
    }
    std::printf("\noutputs identical across arms: %s\n", identical ? "yes" : "NO");
    if (stat != nullptr && pag != nullptr && stat->decode_tok_s > 0) {
      std::printf("decode tokens/s, pager vs static-offload: %.2fx\n",
                  pag->decode_tok_s / stat->decode_tok_s);
    }
    return identical ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "wisp-engine: " << e.what() << "\n";
    return 1;
  }
}
