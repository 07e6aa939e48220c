// SPDX-License-Identifier: Apache-2.0
// The trace a command reads: a .wtrace file, an ESFT expert_weights folder, or the built-in
// synthetic default. Shared by `wisp reuse`, `wisp sim` and `wisp plan`.
#pragma once

#include <wisp/trace/esft.hpp>
#include <wisp/trace/routing_trace.hpp>
#include <wisp/trace/synthetic.hpp>
#include <wisp/trace/wtrace.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>

namespace wisp::tool {

// Help text of a FILE argument that load_trace accepts.
inline constexpr const char* trace_file_help =
    "a .wtrace file, 'synthetic' (built-in default synthetic trace, 8222 steps, seed 1), or an "
    "ESFT expert_weights folder";

// Reads a .wtrace file or imports an ESFT folder. @throws wisp::format_error on a bad file.
inline trace::routing_trace read_trace_file(const std::string& file) {
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) {
    return trace::import_esft(file).trace;
  }
  return trace::read_wtrace(std::filesystem::path{file});
}

// `synthetic`, or what read_trace_file reads.
inline trace::routing_trace load_trace(const std::string& file) {
  if (file == "synthetic") {
    return trace::make_synthetic_trace(trace::synthetic_preset("default"),
                                       trace::default_synthetic_steps,
                                       trace::default_synthetic_seed);
  }
  return read_trace_file(file);
}

}  // namespace wisp::tool
