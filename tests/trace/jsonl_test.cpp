// SPDX-License-Identifier: Apache-2.0
#include "support/enum_names.hpp"

#include <wisp/core/detail/json.hpp>
#include <wisp/trace/jsonl.hpp>

#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using wisp::import_jsonl;
using wisp::jsonl_config;

wisp::routing_trace import_text(const std::string& text, const jsonl_config& opt = {}) {
  std::istringstream in(text);
  return import_jsonl(in, opt).trace;
}

std::string expect_format_error(const std::string& text, const jsonl_config& opt = {}) {
  try {
    (void)import_text(text, opt);
  } catch (const wisp::format_error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "unexpected exception type: " << e.what();
    return {};
  }
  ADD_FAILURE() << "no format_error for:\n" << text;
  return {};
}

std::vector<std::int32_t> ids_of(const wisp::routing_trace& t) {
  std::vector<std::int32_t> out;
  t.for_each_access([&](wisp::access a) { out.push_back(a.expert); });
  return out;
}

TEST(Json, ParsesTheSubset) {
  using wisp::detail::json_parser;
  const auto v =
      json_parser(R"( {"a": [1, -2.5e1, 0], "b": "x\"\u00e9\ud83d\ude00", "c": true, "d": null,)"
                  R"( "e": {"f": []}} )",
                  0)
          .parse_document();
  ASSERT_NE(v.find("a"), nullptr);
  EXPECT_EQ(v.find("a")->items.size(), 3u);
  EXPECT_EQ(v.find("a")->items[1].number, -25.0);
  EXPECT_EQ(v.find("b")->text, "x\"\xC3\xA9\xF0\x9F\x98\x80");
  EXPECT_TRUE(v.find("c")->boolean);
  EXPECT_EQ(v.find("d")->type, wisp::detail::json_value::kind::null);
  for (const char* bad :
       {"", "{", "[1,]", "{\"a\":1,}", "01", "1.", "-", "\"\\x\"", "tru", "{\"a\":1 \"b\":2}",
        "{\"a\":1,\"a\":2}", "[1] 2", "\"\t\"", "1e", "\"\\ud800\"", "{1:2}", "nul"}) {
    EXPECT_THROW((void)json_parser(bad, 0).parse_document(), wisp::format_error) << bad;
  }
  std::string deep(100, '[');
  EXPECT_THROW((void)json_parser(deep, 0).parse_document(), wisp::format_error);
}

TEST(Jsonl, SortsIntoGroupTokenLayerOrder) {
  // Group "b" appears first, so it is sequence 0; tokens ascend; layers ascend.
  const std::string text =
      R"({"layer":1,"experts":[3,2],"token_idx":0,"problem_id":"b","extra":{"x":[1]}})"
      "\n"
      R"({"layer":0,"experts":[1,0],"token_idx":0,"problem_id":"b"})"
      "\n\n"
      R"({"layer":0,"experts":[5,4],"token_idx":7,"problem_id":7})"
      "\n"
      R"({"layer":1,"experts":[7,6],"token_idx":7,"problem_id":7})"
      "\n"
      R"({"layer":1,"experts":[2,1],"token_idx":3,"problem_id":"b"})"
      "\n"
      R"({"layer":0,"experts":[0,2],"token_idx":3,"problem_id":"b"})"
      "\n";
  jsonl_config opt;
  opt.group_key = "problem_id";
  const auto t = import_text(text, opt);
  EXPECT_EQ(t.shape(), (wisp::moe_shape{2, 8, 2}));
  ASSERT_EQ(t.steps(), 3u);
  EXPECT_FALSE(t.has_weights());
  EXPECT_EQ(std::vector<std::size_t>(t.sequence_starts().begin(), t.sequence_starts().end()),
            (std::vector<std::size_t>{0, 2}));
  EXPECT_EQ(ids_of(t), (std::vector<std::int32_t>{1, 0, 3, 2, 0, 2, 2, 1, 5, 4, 7, 6}));
  // Without grouping the whole file is one sequence, tokens sorted 0, 3, 7.
  const auto flat = import_text(text);
  EXPECT_EQ(flat.sequence_starts().size(), 1u);
  EXPECT_EQ(ids_of(flat), (std::vector<std::int32_t>{1, 0, 3, 2, 0, 2, 2, 1, 5, 4, 7, 6}));
}

TEST(Jsonl, WeightsAndExplicitShape) {
  const std::string text = R"({"layer":0,"experts":[1,0],"token_idx":0,"weights":[0.5,0.25]})"
                           "\n"
                           R"({"layer":0,"experts":[2,3],"token_idx":1,"weights":[1,0]})";
  jsonl_config opt;
  opt.experts = 16;
  const auto t = import_text(text, opt);
  EXPECT_EQ(t.shape(), (wisp::moe_shape{1, 16, 2}));
  EXPECT_TRUE(t.has_weights());
  EXPECT_EQ(t.weight(0, 0, 1), 0.25f);
  EXPECT_EQ(t.sequence_starts().size(), 1u);
}

// Three layers; token 1 of group a lacks layer 1; token 0 of group b lacks layers 0 and 2.
const std::string incomplete_log = R"({"layer":0,"experts":[1,2],"token_idx":0,"g":"a"})"
                                   "\n"
                                   R"({"layer":1,"experts":[3,4],"token_idx":0,"g":"a"})"
                                   "\n"
                                   R"({"layer":2,"experts":[5,6],"token_idx":0,"g":"a"})"
                                   "\n"
                                   R"({"layer":0,"experts":[1,3],"token_idx":1,"g":"a"})"
                                   "\n"
                                   R"({"layer":2,"experts":[6,7],"token_idx":1,"g":"a"})"
                                   "\n"
                                   R"({"layer":1,"experts":[0,1],"token_idx":0,"g":"b"})"
                                   "\n"
                                   R"({"layer":0,"experts":[2,0],"token_idx":1,"g":"b"})"
                                   "\n"
                                   R"({"layer":1,"experts":[2,3],"token_idx":1,"g":"b"})"
                                   "\n"
                                   R"({"layer":2,"experts":[4,5],"token_idx":1,"g":"b"})"
                                   "\n";

wisp::imported_trace import_incomplete(wisp::incomplete_tokens policy) {
  jsonl_config opt;
  opt.group_key = "g";
  opt.on_incomplete = policy;
  std::istringstream in(incomplete_log);
  return import_jsonl(in, opt);
}

TEST(Jsonl, IncompleteTokensAreAnErrorByDefault) {
  jsonl_config opt;
  opt.group_key = "g";
  const std::string what = expect_format_error(incomplete_log, opt);
  EXPECT_NE(what.find("line 4: token 1 has no record for layer 1"), std::string::npos) << what;
}

TEST(Jsonl, SkipDropsIncompleteTokensAndCountsThem) {
  const auto [t, report] = import_incomplete(wisp::incomplete_tokens::skip);
  EXPECT_TRUE(t.complete());
  ASSERT_EQ(t.steps(), 2u);  // a/0 and b/1
  EXPECT_EQ(ids_of(t), (std::vector<std::int32_t>{1, 2, 3, 4, 5, 6, 2, 0, 2, 3, 4, 5}));
  EXPECT_EQ(std::vector<std::size_t>(t.sequence_starts().begin(), t.sequence_starts().end()),
            (std::vector<std::size_t>{0, 1}));
  wisp::import_report want;
  want.incomplete_tokens = 2;
  want.missing_records = 3;
  want.dropped_tokens = 2;
  want.dropped_records = 3;  // the 2 + 1 records those tokens had
  want.incomplete_sequences = 2;
  EXPECT_EQ(report, want);
}

TEST(Jsonl, KeepImportsTheLayersPresent) {
  const auto [t, report] = import_incomplete(wisp::incomplete_tokens::keep);
  ASSERT_EQ(t.steps(), 4u);
  EXPECT_EQ(t.missing_rows(), 3u);
  EXPECT_FALSE(t.has_layer(1, 1));
  EXPECT_FALSE(t.has_layer(2, 0));
  EXPECT_TRUE(t.has_layer(2, 1));
  EXPECT_FALSE(t.has_layer(2, 2));
  EXPECT_EQ(ids_of(t),
            (std::vector<std::int32_t>{1, 2, 3, 4, 5, 6, 1, 3, 6, 7, 0, 1, 2, 0, 2, 3, 4, 5}));
  wisp::import_report want;
  want.incomplete_tokens = 2;
  want.missing_records = 3;
  want.partial_tokens = 2;
  want.incomplete_sequences = 2;
  EXPECT_EQ(report, want);
  // A repeated layer is corruption, not a gap: an error whatever the policy.
  jsonl_config opt;
  opt.on_incomplete = wisp::incomplete_tokens::keep;
  const std::string what = expect_format_error(
      "{\"layer\":0,\"experts\":[1],\"token_idx\":0}\n{\"layer\":0,\"experts\":[2],\"token_idx\":"
      "0}",
      opt);
  EXPECT_NE(what.find("repeats line 1"), std::string::npos) << what;
}

TEST(Jsonl, FileErrorsSayWhy) {
  try {
    (void)import_jsonl(std::filesystem::path("/nonexistent/routing.jsonl"));
    ADD_FAILURE() << "no error";
  } catch (const wisp::error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open /nonexistent/routing.jsonl: No such file"),
              std::string::npos)
        << e.what();
  }
}

struct bad_case {
  const char* name;
  const char* text;
  const char* needle;
};

void PrintTo(const bad_case& c, std::ostream* os) {
  *os << c.name;
}

class JsonlMalformed : public ::testing::TestWithParam<bad_case> {};

TEST_P(JsonlMalformed, NamesTheLine) {
  jsonl_config opt;
  opt.group_key = "g";
  const std::string what = expect_format_error(GetParam().text, opt);
  EXPECT_NE(what.find(GetParam().needle), std::string::npos) << what;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, JsonlMalformed,
    ::testing::Values(
        bad_case{"empty", "\n  \n", "no records"},
        bad_case{"bad_json", "{\"layer\":0,\"experts\":[1],\"token_idx\":0,\"g\":1}\n{\"layer\":",
                 "line 2: unexpected end"},
        bad_case{"not_object", "[1,2]", "line 1: record is not a JSON object"},
        bad_case{"missing_layer", R"({"experts":[1],"token_idx":0,"g":1})",
                 "missing field \"layer\""},
        bad_case{"missing_token", R"({"layer":0,"experts":[1],"g":1})", "token_idx"},
        bad_case{"missing_group", R"({"layer":0,"experts":[1],"token_idx":0})", "missing group"},
        bad_case{"fractional_layer", R"({"layer":0.5,"experts":[1],"token_idx":0,"g":1})",
                 "not an integer"},
        bad_case{"k_mismatch",
                 "{\"layer\":0,\"experts\":[1,2],\"token_idx\":0,\"g\":1}\n"
                 "{\"layer\":0,\"experts\":[1],\"token_idx\":1,\"g\":1}",
                 "line 2: 1 experts but earlier records have 2"},
        bad_case{"duplicate_id", R"({"layer":0,"experts":[3,3],"token_idx":0,"g":1})",
                 "line 1: expert 3 appears twice"},
        bad_case{"negative_id", R"({"layer":0,"experts":[-3,3],"token_idx":0,"g":1})",
                 "out of range"},
        bad_case{"weights_some",
                 "{\"layer\":0,\"experts\":[1],\"token_idx\":0,\"g\":1,\"weights\":[1]}\n"
                 "{\"layer\":0,\"experts\":[1],\"token_idx\":1,\"g\":1}",
                 "line 2: has no weights"},
        bad_case{"weights_count",
                 R"({"layer":0,"experts":[1,2],"token_idx":0,"g":1,"weights":[1]})",
                 "array of 2 numbers"},
        bad_case{"missing_layer_for_token",
                 "{\"layer\":0,\"experts\":[1],\"token_idx\":0,\"g\":1}\n"
                 "{\"layer\":1,\"experts\":[1],\"token_idx\":0,\"g\":1}\n"
                 "{\"layer\":0,\"experts\":[1],\"token_idx\":1,\"g\":1}",
                 "line 3: token 1 has no record for layer 1"},
        bad_case{"repeated_layer",
                 "{\"layer\":0,\"experts\":[1],\"token_idx\":0,\"g\":1}\n"
                 "{\"layer\":0,\"experts\":[2],\"token_idx\":0,\"g\":1}",
                 "line 2: layer 0 of token 0 repeats line 1"},
        bad_case{"gap_layer",
                 "{\"layer\":0,\"experts\":[1],\"token_idx\":0,\"g\":1}\n"
                 "{\"layer\":2,\"experts\":[2],\"token_idx\":0,\"g\":1}",
                 "line 1: token 0 has no record for layer 1"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(IncompleteTokens, NamesAsTheCommandLineSpellsThem) {
  wisp::test::expect_names<wisp::incomplete_tokens>({{wisp::incomplete_tokens::error, "error"},
                                                     {wisp::incomplete_tokens::skip, "skip"},
                                                     {wisp::incomplete_tokens::keep, "keep"}});
  EXPECT_EQ(wisp::from_string<wisp::incomplete_tokens>("drop"), std::nullopt);
}

}  // namespace
