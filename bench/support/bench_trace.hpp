// SPDX-License-Identifier: Apache-2.0
// The trace the benchmarks replay: the real ESFT trace beside the checkout, or, when it is
// absent, the synthetic default trace, with a label that says which one was used.
#pragma once

#include <wisp/trace/esft.hpp>
#include <wisp/trace/routing_trace.hpp>
#include <wisp/trace/synthetic.hpp>

#include <filesystem>
#include <string>

namespace wisp::bench {

struct bench_trace {
  routing_trace trace{{1, 1, 1}};
  std::string source;  // "ESFT" or the fallback notice, for benchmark labels
};

// Loads the trace once per call; benchmarks keep the result in a function-local static.
inline bench_trace load_bench_trace() {
  const auto dir =
      std::filesystem::path{WISP_BENCH_TRACES_DIR} / "raw" / "esft_deepseek_v2_lite_intent";
  if (std::filesystem::is_directory(dir)) {
    return {import_esft(dir).trace, "ESFT"};
  }
  return {make_synthetic_trace(synthetic_preset("default"), default_synthetic_steps,
                               default_synthetic_seed),
          "ESFT ABSENT: synthetic default trace (" + std::to_string(default_synthetic_steps) +
              " steps, seed " + std::to_string(default_synthetic_seed) + ")"};
}

}  // namespace wisp::bench
