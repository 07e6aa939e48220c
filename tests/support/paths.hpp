// SPDX-License-Identifier: Apache-2.0
// Where the tests find their data. Only tests/support/paths.cpp names the checkout's folders, so
// every other test object is the same whatever folder wisp is built in, and a compiler cache
// reuses it from one checkout to the next.
#pragma once

#include <filesystem>

namespace wisp::test {

/// The root of the checkout the tests were configured from.
std::filesystem::path source_dir();

/// The real traces' folder: the one WISP_TEST_TRACES_DIR names at run time, else the one the
/// build was configured with (WISP_TRACES_DIR, by default ../shared/traces beside the checkout).
std::filesystem::path traces_dir();

}  // namespace wisp::test
