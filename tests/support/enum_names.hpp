// SPDX-License-Identifier: Apache-2.0
// expect_names: an enum's documented names checked both ways (to_string and from_string<E>), and
// that its table lists no value the documentation leaves out.
#pragma once

#include <wisp/core/enum_names.hpp>

#include <gtest/gtest.h>

#include <initializer_list>
#include <string_view>
#include <utility>

namespace wisp::test {

template <class E>
void expect_names(std::initializer_list<std::pair<E, std::string_view>> documented) {
  for (const auto& [value, name] : documented) {
    EXPECT_EQ(to_string(value), name);
    EXPECT_EQ(from_string<E>(name), value) << name;
  }
  EXPECT_EQ(enum_names<E>::values.size(), documented.size())
      << "the names table lists values the documented list lacks";
}

}  // namespace wisp::test
