// SPDX-License-Identifier: Apache-2.0
// moe_shape: validation, and the one conversion each way between it and the configuration types
// that restate a model's dimensions (pager_config, model_spec, key_layout).
#include <wisp/wisp.hpp>

#include <gtest/gtest.h>

#include <sstream>
#include <type_traits>

namespace {

using wisp::moe_shape;

TEST(MoeShape, ValidateNamesTheBadField) {
  EXPECT_NO_THROW((moe_shape{26, 64, 6}.validate()));
  EXPECT_NO_THROW((moe_shape{1, moe_shape::max_experts, 1}.validate()));
  const auto message = [](moe_shape s) {
    try {
      s.validate();
    } catch (const wisp::logic_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({0, 64, 6}).find("layers > 0, got 0"), std::string::npos);
  EXPECT_NE(message({26, 65537, 6}).find("got 65537"), std::string::npos);
  EXPECT_NE(message({26, 64, 65}).find("top_k <= experts (64), got 65"), std::string::npos);
  EXPECT_NE(message({26, 64, 0}).find("got 0"), std::string::npos);
  EXPECT_EQ((moe_shape{26, 64, 6}.ids_per_step()), 156u);
  std::ostringstream out;
  out << moe_shape{26, 64, 6};
  EXPECT_EQ(out.str(), "26 layers x 64 experts, top-6");
}

TEST(MoeShape, PagerConfigRoundTrips) {
  const moe_shape s{26, 64, 6};
  const wisp::pager_config c = wisp::pager_config::for_shape(s, 21);
  EXPECT_EQ(c.shape(), s);
  EXPECT_EQ(c.capacity, 21);
  EXPECT_EQ(c.scope, wisp::cache_scope::per_layer);
  const auto g = wisp::pager_config::for_shape(s, 546, wisp::cache_scope::global);
  EXPECT_EQ(g.scope, wisp::cache_scope::global);
  // The config builds a pager of that shape.
  wisp::pager<wisp::lru> p(c);
  EXPECT_EQ(p.layers(), 26);
  EXPECT_EQ(p.capacity(0), 21);
}

TEST(MoeShape, KeyLayoutIsWrittenInShapeOrder) {
  const moe_shape s{4, 8, 2};
  constexpr wisp::key_layout global{wisp::cache_scope::global, 4, 8};
  EXPECT_EQ(global.size(), s.layers * s.experts);
  EXPECT_EQ(global.key_of(3, 7), 31);
  constexpr wisp::key_layout per_layer{wisp::cache_scope::per_layer, 4, 8};
  EXPECT_EQ(per_layer.size(), s.experts);
}

}  // namespace
