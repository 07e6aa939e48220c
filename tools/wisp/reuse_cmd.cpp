// SPDX-License-Identifier: Apache-2.0
// PLACEHOLDER: replaced by the implementation of `wisp reuse`.
#include "commands.hpp"

namespace wisp::tool {
void add_reuse_command(CLI::App& app) { (void)app; }
}  // namespace wisp::tool
