// SPDX-License-Identifier: Apache-2.0
#include "support/paths.hpp"

#include <cstdlib>

namespace wisp::test {

std::filesystem::path source_dir() {
  return WISP_TEST_SOURCE_DIR;
}

std::filesystem::path traces_dir() {
  const char* overridden = std::getenv("WISP_TEST_TRACES_DIR");
  return overridden != nullptr ? std::filesystem::path{overridden}
                               : std::filesystem::path{WISP_TEST_TRACES_DIR};
}

}  // namespace wisp::test
