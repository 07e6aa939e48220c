// SPDX-License-Identifier: Apache-2.0
// `wisp info`: what this build of wisp contains: version, compiler, the header-only core's areas,
// the eviction policies, the model and synthetic presets, the file formats, and what the tool
// does not include.
#include "cli.hpp"
#include "commands.hpp"
#include "trace_source.hpp"

#include <wisp/alloc/model_spec.hpp>
#include <wisp/sim/simulate.hpp>
#include <wisp/trace/wtrace.hpp>
#include <wisp/version.hpp>

#include <cstdio>

namespace wisp::tool {

void add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Print the version and the components of this build");
  cmd->callback([] {
    std::printf("wisp %s (header-only C++20, built with %s, C++ %ld)\n\n", WISP_VERSION_STRING,
#if defined(__clang__)
                "clang " __clang_version__,
#elif defined(__GNUC__)
                "GCC " __VERSION__,
#else
                "an unknown compiler",
#endif
                static_cast<long>(__cplusplus));
    std::printf(
        "core areas (include/wisp/, all in this tool):\n"
        "  core      errors, strong ids, byte sizes\n"
        "  trace     routing traces, .wtrace, ESFT and JSONL importers, synthetic router\n"
        "  reuse     exact stack distances per call or per access, miss curves, decay, SHARDS\n"
        "  cache     slot caches and eviction policies\n"
        "  pager     expert map and copy plan for a fused-MoE kernel, token groups, rerouting\n"
        "  vmm       virtual-memory expert tensor (posix_vmm here)\n"
        "  alloc     expert/KV split: model specs, configurator, online controller, dual resize\n"
        "  sim       trace-driven replay of policies, scopes, capacities, bandwidth\n"
        "  transfer  modelled copy link and copy/compute timeline\n"
        "  kernel    the fused_moe_kernel concept\n"
        "not in this tool: wisp::cuda (cuda/include/wisp/cuda/, the device side; build with "
        "WISP_ENABLE_CUDA=ON)\n\n");
    std::printf("eviction policies: %s\n", comma_list(builtin_policy_names).c_str());
    std::printf("model presets: %s\n", model_preset_names().c_str());
    std::printf("synthetic presets: %s\n", synthetic_presets_text().c_str());
    std::printf(".wtrace format version %u; imports: ESFT expert_weights folders, JSONL logs\n",
                static_cast<unsigned>(wtrace::version));
  });
}

}  // namespace wisp::tool
