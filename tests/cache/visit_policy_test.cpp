// SPDX-License-Identifier: Apache-2.0
// Choosing a built-in policy by name: every listed name visits the type whose own `P::name` it is
// (checked against the type, not against the list), `-` reads as `_`, and anything else is
// refused before the visitor runs, with every known name in the message.
#include "support/expect_error.hpp"

#include <wisp/cache/visit_policy.hpp>

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <string_view>
#include <type_traits>

namespace {

using namespace wisp;

// The name the visited type gives itself.
std::string_view visited_name(std::string_view name) {
  return visit_policy(name, []<class P>(std::type_identity<P>) {
    static_assert(eviction_policy<P>);
    return policy_name<P>();
  });
}

TEST(VisitPolicy, EveryListedNameVisitsTheTypeOfThatName) {
  std::set<std::string_view> seen;
  for (const std::string_view name : builtin_policy_names) {
    EXPECT_EQ(visited_name(name), name);
    EXPECT_EQ(builtin_policy_name(name), name);
    EXPECT_TRUE(seen.insert(name).second) << name << " is listed twice";
  }
  // The ten policies of the cache area, each reachable.
  const std::set<std::string_view> expected = {lru::name,
                                               fifo::name,
                                               lfu::name,
                                               lfu_history::name,
                                               lfru::name,
                                               fld::name,
                                               least_stale::name,
                                               decayed_frequency::name,
                                               predicted_next_use::name,
                                               reuse_probability::name,
                                               learned_belady::name,
                                               belady::name};
  EXPECT_EQ(seen, expected);
}

TEST(VisitPolicy, HyphensReadAsUnderscores) {
  EXPECT_EQ(visited_name("least-stale"), "least_stale");
  EXPECT_EQ(visited_name("lfu-history"), "lfu_history");
  EXPECT_EQ(builtin_policy_name("predicted-next-use"), "predicted_next_use");
  static_assert(builtin_policy_name("least-stale") == "least_stale");
}

TEST(VisitPolicy, UnknownNamesAreRefusedBeforeVisiting) {
  for (const std::string_view bad : {"mru", "LRU", "", "lru ", "least__stale", "least-stale-"}) {
    EXPECT_TRUE(builtin_policy_name(bad).empty()) << bad;
    bool called = false;
    test::expect_error(
        [&] { visit_policy(bad, [&]<class P>(std::type_identity<P>) { called = true; }); },
        "unknown policy '" + std::string(bad) +
            "' (known: lru, fifo, lfu, lfu_history, lfru, fld, "
            "least_stale, decayed_frequency, predicted_next_use, reuse_probability, "
            "learned_belady, "
            "belady)");
    EXPECT_FALSE(called) << bad;
  }
}

TEST(VisitPolicy, ReturnsWhatTheVisitorReturns) {
  // A void visitor, and one returning a type-dependent value of one common type.
  int calls = 0;
  visit_policy("fifo", [&]<class P>(std::type_identity<P>) { ++calls; });
  EXPECT_EQ(calls, 1);
  const bool whole_call =
      visit_policy("lru", []<class P>(std::type_identity<P>) { return call_eviction_policy<P>; });
  EXPECT_TRUE(whole_call);
}

}  // namespace
