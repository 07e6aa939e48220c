// SPDX-License-Identifier: Apache-2.0
// The routing trace a command reads, spelled the same way in every subcommand: a .wtrace file, an
// ESFT expert_weights folder, or `synthetic` / `synthetic:PRESET` (the built-in synthetic router,
// 8,222 steps, seed 1). Shared by `wisp trace stats`, `wisp reuse`, `wisp sim` and `wisp plan`.
#pragma once

#include "cli.hpp"

#include <wisp/trace/esft.hpp>
#include <wisp/trace/routing_trace.hpp>
#include <wisp/trace/synthetic.hpp>
#include <wisp/trace/wtrace.hpp>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

namespace wisp::tool {

/// The synthetic presets, comma-separated (the same list `wisp trace synth --preset` takes).
inline std::string synthetic_presets_text() {
  return comma_list(synthetic_preset_names());
}

/// Help text of a trace argument.
inline std::string trace_source_help() {
  return "a .wtrace file, an ESFT expert_weights folder, or 'synthetic' / 'synthetic:PRESET' (the "
         "built-in synthetic router, " +
         std::to_string(default_synthetic_steps) + " steps, seed " +
         std::to_string(default_synthetic_seed) + "; presets: " + synthetic_presets_text() + ")";
}

/// Reads a .wtrace file or imports an ESFT folder. @throws wisp::error on a bad file.
inline routing_trace read_trace_file(const std::string& file) {
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) {
    return import_esft(file).trace;
  }
  return read_wtrace(std::filesystem::path{file});
}

/// `synthetic[:PRESET]`, or what read_trace_file reads.
inline routing_trace load_trace(const std::string& source) {
  constexpr std::string_view synthetic = "synthetic";
  if (source == synthetic || source.starts_with("synthetic:")) {
    const std::string preset =
        source == synthetic ? std::string{"default"} : source.substr(synthetic.size() + 1);
    return make_synthetic_trace(synthetic_preset(preset), default_synthetic_steps,
                                default_synthetic_seed);
  }
  return read_trace_file(source);
}

/// The JSON object every command's machine output starts with: the trace it read.
inline nlohmann::ordered_json trace_json(const std::string& source, const routing_trace& t) {
  nlohmann::ordered_json out;
  out["file"] = source;
  out["steps"] = t.steps();
  out["layers"] = t.shape().layers;
  out["experts"] = t.shape().experts;
  out["top_k"] = t.shape().top_k;
  out["accesses"] = t.access_count();
  return out;
}

/// @brief A trace a command replays: refused when it holds no access (there is nothing to
/// measure, and every ratio would be 0 / 0).
inline routing_trace load_trace_with_accesses(const std::string& source) {
  routing_trace t = load_trace(source);
  if (t.access_count() == 0) {
    usage_error(source, " holds no accesses (", t.steps(),
                " steps): this command needs a trace with at least one routed token");
  }
  return t;
}

}  // namespace wisp::tool
