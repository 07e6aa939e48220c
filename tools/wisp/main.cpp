// SPDX-License-Identifier: Apache-2.0
// The `wisp` command: every subcommand registers itself from its own file (see commands.hpp).
#include "commands.hpp"

#include <wisp/wisp.hpp>

#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <regex>
#include <string>

namespace {

// The library's messages end in " [expects COND at FILE:LINE]" or " [FILE:LINE]" for the
// developers who read them in a debugger; a user of the command needs the rest.
std::string for_users(const std::string& what) {
  static const std::regex location{R"( \[(expects .* at )?[^ \]]+:[0-9]+\]$)"};
  return std::regex_replace(what, location, "");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"wisp: Mixture-of-Experts memory-management tools", "wisp"};
  app.set_version_flag("--version", WISP_VERSION_STRING);
  app.require_subcommand(1);
  wisp::tool::add_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const wisp::error& e) {
    std::fprintf(stderr, "wisp: %s\n", for_users(e.what()).c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wisp: unexpected error: %s\n", for_users(e.what()).c_str());
    return 2;
  }
  return 0;
}
