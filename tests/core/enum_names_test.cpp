// SPDX-License-Identifier: Apache-2.0
// to_string / from_string read one table: both directions agree for every value, names are
// exact (case and all), a value the table lacks prints as "unknown", and the list for error
// messages holds every name in order.
#include "support/enum_names.hpp"

#include <wisp/core/enum_names.hpp>
#include <wisp/core/model.hpp>

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace test_enums {
enum class color : std::uint8_t { red, green, blue };
}  // namespace test_enums

template <>
struct wisp::enum_names<test_enums::color> {
  static constexpr std::array<wisp::enum_name<test_enums::color>, 3> values{
      {{test_enums::color::red, "red"},
       {test_enums::color::green, "green"},
       {test_enums::color::blue, "blue"}}};
};

namespace {

using test_enums::color;

static_assert(wisp::named_enum<color>);
static_assert(!wisp::named_enum<int>);
static_assert(wisp::to_string(color::green) == "green");
static_assert(wisp::from_string<color>("blue") == color::blue);

TEST(EnumNames, BothDirectionsReadTheSameTable) {
  for (const auto& n : wisp::enum_names<color>::values) {
    EXPECT_EQ(wisp::to_string(n.value), n.name);
    EXPECT_EQ(wisp::from_string<color>(n.name), n.value);
  }
  EXPECT_EQ(wisp::from_string<color>("Red"), std::nullopt);
  EXPECT_EQ(wisp::from_string<color>(""), std::nullopt);
  EXPECT_EQ(wisp::from_string<color>("red "), std::nullopt);
  EXPECT_EQ(wisp::to_string(static_cast<color>(7)), "unknown");
  EXPECT_EQ(wisp::enum_name_list<color>(), "red, green, blue");
}

TEST(EnumNames, AttentionKindsAsModelFilesSpellThem) {
  wisp::test::expect_names<wisp::attention_kind>(
      {{wisp::attention_kind::gqa, "gqa"}, {wisp::attention_kind::mla, "mla"}});
  EXPECT_EQ(wisp::from_string<wisp::attention_kind>("mha"), std::nullopt);
}

}  // namespace
