// SPDX-License-Identifier: Apache-2.0
// `wisp sim --ranks G`: the expert-parallel simulator's options and run (ranks_cmd.cpp). The
// options shared with the serial `wisp sim` (trace, policy, capacities, scope, output, link, jobs)
// stay in sim_cmd.cpp and reach this mode through `ranks_common`.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace wisp::tool {

struct ranks_options;  // the --ranks flags

// What `wisp sim` parsed that the expert-parallel mode uses too. Policies are as typed.
struct ranks_common {
  std::string file;
  std::vector<std::string> policies;
  std::vector<std::int64_t> capacities;
  std::string scope;
  bool json = false;
  bool csv = false;
  std::uint64_t expert_bytes = 0;
  double bandwidth_gbps = 0.0;
  double latency_us = 0.0;
  std::uint32_t jobs = 1;
};

// Adds --ranks and its flags to the `sim` subcommand.
std::shared_ptr<ranks_options> add_ranks_options(CLI::App& sim);
// Whether --ranks was given.
bool ranks_requested(const ranks_options& options);
// Runs every arm at every capacity and prints the table, CSV or JSON.
void run_ranks(const ranks_options& options, const ranks_common& common);

}  // namespace wisp::tool
