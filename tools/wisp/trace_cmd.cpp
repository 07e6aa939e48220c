// SPDX-License-Identifier: Apache-2.0
// PLACEHOLDER: replaced by the implementation of `wisp trace`.
#include "commands.hpp"

namespace wisp::tool {
void add_trace_command(CLI::App& app) { (void)app; }
}  // namespace wisp::tool
