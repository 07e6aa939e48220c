// SPDX-License-Identifier: Apache-2.0
#include <wisp/core/error.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <type_traits>

namespace {

using ::testing::HasSubstr;

static_assert(std::is_base_of_v<std::runtime_error, wisp::error>);
static_assert(std::is_base_of_v<wisp::error, wisp::logic_error>);
static_assert(std::is_base_of_v<wisp::error, wisp::out_of_memory>);
static_assert(std::is_base_of_v<wisp::error, wisp::format_error>);
static_assert(std::is_base_of_v<wisp::error, wisp::infeasible_error>);

int check_capacity(int capacity, int k) {
  WISP_EXPECTS(capacity >= k, "capacity ", capacity, " is below top-k ", k);
  return capacity;
}

TEST(Expects, PassesThroughWhenTheConditionHolds) {
  EXPECT_EQ(check_capacity(8, 6), 8);
}

TEST(Expects, MessageNamesValuesConditionAndLocation) {
  try {
    check_capacity(3, 6);
    FAIL() << "no exception";
  } catch (const wisp::logic_error& e) {
    const std::string what = e.what();
    EXPECT_THAT(what, HasSubstr("capacity 3 is below top-k 6"));
    EXPECT_THAT(what, HasSubstr("expects capacity >= k"));
    EXPECT_THAT(what, HasSubstr("error_test.cpp:"));
  }
}

TEST(Expects, EvaluatesTheMessageOnlyOnFailure) {
  int evaluations = 0;
  const auto counted = [&] { return ++evaluations; };
  WISP_EXPECTS(true, "never ", counted());
  EXPECT_EQ(evaluations, 0);
  EXPECT_THROW(WISP_EXPECTS(false, "once ", counted()), wisp::logic_error);
  EXPECT_EQ(evaluations, 1);
}

TEST(Fail, ThrowsTheRequestedType) {
  EXPECT_THROW(WISP_FAIL(wisp::out_of_memory, "pool of ", 4, " granules is exhausted"),
               wisp::out_of_memory);
  EXPECT_THROW(WISP_FAIL(wisp::infeasible_error, "budget too small"), wisp::infeasible_error);
  try {
    WISP_FAIL(wisp::out_of_memory, "pool of ", 4, " granules is exhausted");
  } catch (const wisp::error& e) {
    EXPECT_THAT(e.what(), HasSubstr("pool of 4 granules is exhausted ["));
  }
}

TEST(FormatError, CarriesTheOffset) {
  const wisp::format_error at(42, "bad checksum");
  EXPECT_EQ(at.offset(), 42u);
  EXPECT_STREQ(at.what(), "at byte 42: bad checksum");
  const wisp::format_error nowhere("line 3: expected 6 ids");
  EXPECT_EQ(nowhere.offset(), wisp::format_error::no_offset);
  EXPECT_STREQ(nowhere.what(), "line 3: expected 6 ids");
}

TEST(FormatError, InFilePutsTheFileFirstAndKeepsTheOffset) {
  const wisp::format_error at(42, "bad checksum");
  EXPECT_EQ(at.problem(), "bad checksum");
  const wisp::format_error located = at.in_file("trace.wtrace");
  EXPECT_STREQ(located.what(), "trace.wtrace: at byte 42: bad checksum");
  EXPECT_EQ(located.offset(), 42u);
  EXPECT_STREQ(wisp::format_error("no header").in_file("m.json").what(), "m.json: no header");
}

}  // namespace
