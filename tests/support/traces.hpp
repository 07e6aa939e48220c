// SPDX-License-Identifier: Apache-2.0
// The real routing traces the tests read (../shared/traces, never committed), and the one rule for
// when they are absent: a test skips, unless WISP_REQUIRE_TRACES is set (CI sets it in .ci/run,
// where the traces are always present), and then it fails.
#pragma once

#include "support/paths.hpp"

#include <wisp/trace/esft.hpp>
#include <wisp/trace/routing_trace.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace wisp::test {

/// The ESFT folder (DeepSeek-V2-Lite, 26 layers x 64 experts, top-6), under the traces folder
/// the build was configured with, or the one WISP_TEST_TRACES_DIR names at run time.
inline std::filesystem::path esft_dir() {
  return traces_dir() / "raw" / "esft_deepseek_v2_lite_intent";
}

/// The gpt-oss-20b decode routing (24 layers x 32 experts, top-4; JSONL grouped by "request").
inline std::filesystem::path gptoss_file() {
  return traces_dir() / "raw" / "gptoss20b_mmlu_pro_decode" / "routing.jsonl";
}

/// True when WISP_REQUIRE_TRACES is set to anything but "" or "0".
inline bool traces_required() {
  const char* value = std::getenv("WISP_REQUIRE_TRACES");
  return value != nullptr && std::string_view{value} != "" && std::string_view{value} != "0";
}

/// Why a test could not run, for the skip or failure message.
inline std::string missing_trace_message() {
  return "ESFT trace not found at " + esft_dir().string();
}

/// The imported ESFT trace, or `std::nullopt` when its folder is absent.
inline std::optional<routing_trace> esft_trace() {
  if (!std::filesystem::is_directory(esft_dir())) {
    return std::nullopt;
  }
  return import_esft(esft_dir()).trace;
}

}  // namespace wisp::test

/// In a test body or SetUp: unless `present`, skips the test, or fails it when traces are
/// required (WISP_REQUIRE_TRACES).
#define WISP_TEST_NEEDS_TRACE(present)                                                      \
  do {                                                                                      \
    if (!(present)) {                                                                       \
      if (::wisp::test::traces_required()) {                                                \
        FAIL() << ::wisp::test::missing_trace_message() << " (WISP_REQUIRE_TRACES is set)"; \
      }                                                                                     \
      GTEST_SKIP() << ::wisp::test::missing_trace_message();                                \
    }                                                                                       \
  } while (false)
