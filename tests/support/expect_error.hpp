// SPDX-License-Identifier: Apache-2.0
// expect_error: the tests' one way to check that a call throws and that its message names the
// offending values.
#pragma once

#include <wisp/core/error.hpp>

#include <gtest/gtest.h>

#include <string_view>

namespace wisp::test {

/// Runs `f` and expects it to throw `Error` (a `wisp::logic_error` unless said) whose message
/// contains `part` and every one of `more`; any other outcome fails the test, naming the part.
template <class Error = logic_error, class F, class... More>
void expect_error(F&& f, std::string_view part, const More&... more) {
  const std::string_view parts[] = {part, std::string_view(more)...};
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << part << "'";
  } catch (const Error& e) {
    const std::string_view what = e.what();
    for (const std::string_view p : parts) {
      EXPECT_NE(what.find(p), std::string_view::npos) << "'" << p << "' not in: " << what;
    }
  }
}

}  // namespace wisp::test
