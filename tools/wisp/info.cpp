// SPDX-License-Identifier: Apache-2.0
// `wisp info`: what this build of wisp contains.
#include "commands.hpp"

#include <wisp/wisp.hpp>

#include <cstdio>

namespace wisp::tool {

void add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Print the version and the components of this build");
  cmd->callback([] {
    std::printf("wisp %s (header-only C++20, built with %s, C++ %ld)\n", WISP_VERSION_STRING,
#if defined(__clang__)
                "clang " __clang_version__,
#elif defined(__GNUC__)
                "GCC " __VERSION__,
#else
                "an unknown compiler",
#endif
                static_cast<long>(__cplusplus));
  });
}

}  // namespace wisp::tool
