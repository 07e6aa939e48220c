// SPDX-License-Identifier: Apache-2.0
// Subcommands of the `wisp` tool. Each lives in its own .cpp and is registered here; a
// subcommand's callback runs inside CLI11's parse, so wisp::error propagates to main.
#pragma once

#include <CLI/CLI.hpp>

namespace wisp::tool {

void add_info_command(CLI::App& app);      // info.cpp
void add_trace_command(CLI::App& app);     // trace_cmd.cpp: wisp trace import|stats|synth
void add_reuse_command(CLI::App& app);     // reuse_cmd.cpp: wisp reuse
void add_sim_command(CLI::App& app);       // sim_cmd.cpp: wisp sim
void add_plan_command(CLI::App& app);      // plan_cmd.cpp: wisp plan
void add_evaluate_command(CLI::App& app);  // evaluate_cmd.cpp: wisp evaluate
void add_predict_command(CLI::App& app);   // predict_cmd.cpp: wisp predict
void add_compress_command(CLI::App& app);  // compress_cmd.cpp: wisp compress
void add_tiers_command(CLI::App& app);     // tiers_cmd.cpp: wisp tiers

inline void add_commands(CLI::App& app) {
  add_info_command(app);
  add_trace_command(app);
  add_reuse_command(app);
  add_sim_command(app);
  add_plan_command(app);
  add_evaluate_command(app);
  add_predict_command(app);
  add_compress_command(app);
  add_tiers_command(app);
}

}  // namespace wisp::tool
