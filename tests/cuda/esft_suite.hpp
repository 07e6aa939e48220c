// SPDX-License-Identifier: Apache-2.0
// `esft_suite`: the base of a test suite parameterised by a capacity that replays the real ESFT
// trace: it loads the trace once per suite and skips each test without it (fails under
// WISP_REQUIRE_TRACES=1). Tests read it as `*trace_`.
#pragma once

#include "support/traces.hpp"

#include <wisp/trace/routing_trace.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <utility>

namespace wisp::cuda::testing {

class esft_suite : public ::testing::TestWithParam<std::int32_t> {
 protected:
  static void SetUpTestSuite() {
    if (auto esft = wisp::test::esft_trace()) {
      trace_ = std::make_unique<wisp::routing_trace>(std::move(*esft));
    }
  }
  static void TearDownTestSuite() { trace_.reset(); }
  void SetUp() override { WISP_TEST_NEEDS_TRACE(trace_ != nullptr); }
  static inline std::unique_ptr<wisp::routing_trace> trace_;
};

}  // namespace wisp::cuda::testing
