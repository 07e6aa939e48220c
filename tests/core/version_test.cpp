// SPDX-License-Identifier: Apache-2.0
#include <wisp/version.hpp>

#include <gtest/gtest.h>

#include <string>

TEST(Version, StringMatchesTheNumbers) {
  const std::string expected = std::to_string(WISP_VERSION_MAJOR) + "." +
                               std::to_string(WISP_VERSION_MINOR) + "." +
                               std::to_string(WISP_VERSION_PATCH);
  EXPECT_EQ(WISP_VERSION_STRING, expected);
  EXPECT_EQ(WISP_VERSION,
            WISP_VERSION_MAJOR * 10000 + WISP_VERSION_MINOR * 100 + WISP_VERSION_PATCH);
}
