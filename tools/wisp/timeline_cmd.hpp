// SPDX-License-Identifier: Apache-2.0
// `wisp sim --timeline`: the timeline simulator's options and run (timeline_cmd.cpp). The
// options shared with the serial `wisp sim` (trace, policies, capacities, scope, output, link)
// stay in sim_cmd.cpp and reach the timeline through `timeline_common`.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace wisp::tool {

struct timeline_options;  // the --timeline flags

// What `wisp sim` parsed that the timeline uses too. Policies are library names.
struct timeline_common {
  std::string file;
  std::vector<std::string> policies;
  std::vector<std::int64_t> capacities;
  std::string scope;
  bool json = false;
  bool csv = false;
  std::uint64_t expert_bytes = 0;
  double bandwidth_gbps = 0.0;
  double latency_us = 0.0;
};

// Adds --timeline and its flags to the `sim` subcommand.
std::shared_ptr<timeline_options> add_timeline_options(CLI::App& sim);
// Whether --timeline was given.
bool timeline_requested(const timeline_options& options);
// Runs the timeline simulator and prints its table, CSV or JSON.
void run_timeline(const timeline_options& options, const timeline_common& common);

}  // namespace wisp::tool
