// SPDX-License-Identifier: Apache-2.0
#include "support/traces.hpp"
#include "trace_test_util.hpp"

#include <wisp/trace/esft.hpp>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

using wisp::import_esft;

std::string expect_format_error(const std::filesystem::path& dir, wisp::esft_config opt = {}) {
  try {
    (void)import_esft(dir, opt);
  } catch (const wisp::format_error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "unexpected exception type: " << e.what();
    return {};
  }
  ADD_FAILURE() << "no format_error";
  return {};
}

TEST(Esft, RealTraceHasTheDocumentedSize) {
  WISP_TEST_NEEDS_TRACE(std::filesystem::is_directory(wisp::test::esft_dir()));
  const auto t = import_esft(wisp::test::esft_dir()).trace;
  EXPECT_EQ(t.shape(), (wisp::moe_shape{26, 64, 6}));
  EXPECT_EQ(t.sequence_starts().size(), 127u);
  EXPECT_EQ(t.steps(), 8222u);
  EXPECT_EQ(t.access_count(), 1282632u);
  EXPECT_TRUE(t.has_weights());
  EXPECT_EQ(t.sequence_starts()[0], 0u);

  // The first 6 numbers of expert_weights_1.txt are step 0, layer 0; of expert_weights_26.txt
  // step 0, layer 25. Read independently with a plain stream.
  for (const int layer : {1, 2, 26}) {
    std::ifstream in(wisp::test::esft_dir() / ("expert_weights_" + std::to_string(layer) + ".txt"));
    for (std::int32_t j = 0; j < 6; ++j) {
      int id = -1;
      in >> id;
      EXPECT_EQ(t.expert(0, layer - 1, j), id) << "layer file " << layer << " rank " << j;
    }
  }
  // The second token of line 0 is step 1.
  std::ifstream in(wisp::test::esft_dir() / "expert_weights_1.txt");
  int skip = 0;
  for (int i = 0; i < 6; ++i) {
    in >> skip;
  }
  for (std::int32_t j = 0; j < 6; ++j) {
    int id = -1;
    in >> id;
    EXPECT_EQ(t.expert(1, 0, j), id);
  }
}

TEST(Esft, SmallHandWrittenFolder) {
  const wisp_test::temp_dir dir("esft_good");
  // 2 layers, top-2, 4 experts; line 1: 2 tokens, line 2: 1 token.
  dir.write("expert_weights_1.txt", "0\t1\t2\t3\t\t0.5\t0.25\t0.1\t0.2\n3\t0\t\t0.7\t0.1\n");
  dir.write("expert_weights_2.txt", "1\t2\t0\t3\t\t0.5\t0.25\t0.1\t0.2\r\n2\t1\t\t0.3\t0.4");
  dir.write("README.md", "ignored");
  const auto t = import_esft(dir.path(), {.experts = 4, .top_k = 2}).trace;
  EXPECT_EQ(t.shape(), (wisp::moe_shape{2, 4, 2}));
  ASSERT_EQ(t.steps(), 3u);
  EXPECT_EQ(std::vector<std::size_t>(t.sequence_starts().begin(), t.sequence_starts().end()),
            (std::vector<std::size_t>{0, 2}));
  // Canonical order: line, token, layer, ids as written.
  std::vector<std::int32_t> order;
  t.for_each_access([&](wisp::access a) { order.push_back(a.expert); });
  EXPECT_EQ(order, (std::vector<std::int32_t>{0, 1, 1, 2, 2, 3, 0, 3, 3, 0, 2, 1}));
  EXPECT_FLOAT_EQ(t.weight(1, 0, 1), 0.2f);
  EXPECT_FLOAT_EQ(t.weight(2, 1, 1), 0.4f);
}

// Two layers, top-2 over 4 experts. Line 1: 3 tokens in file 1, 2 in file 2; line 2: 1 token in
// both; line 3: 2 tokens in file 1, absent from file 2.
void write_incomplete_folder(const wisp_test::temp_dir& dir) {
  dir.write("expert_weights_1.txt",
            "0\t1\t2\t3\t1\t3\t\t.1\t.2\t.3\t.4\t.5\t.6\n"
            "3\t2\t\t.7\t.8\n"
            "2\t0\t0\t1\t\t.1\t.1\t.1\t.1\n");
  dir.write("expert_weights_2.txt",
            "1\t0\t3\t2\t\t.1\t.2\t.3\t.4\n"
            "0\t3\t\t.5\t.6\n");
}

TEST(Esft, LinesWithDifferentTokenCountsAreAnErrorByDefault) {
  const wisp_test::temp_dir dir("esft_incomplete_error");
  write_incomplete_folder(dir);
  const std::string what = expect_format_error(dir.path(), {.experts = 4, .top_k = 2});
  EXPECT_NE(what.find("expert_weights_2.txt has 2 lines but expert_weights_1.txt has 3"),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("on_incomplete"), std::string::npos) << what;
}

TEST(Esft, SkipKeepsTheTokensEveryFileHolds) {
  const wisp_test::temp_dir dir("esft_incomplete_skip");
  write_incomplete_folder(dir);
  const auto [t, report] = import_esft(
      dir.path(), {.experts = 4, .top_k = 2, .on_incomplete = wisp::incomplete_tokens::skip});
  EXPECT_TRUE(t.complete());
  ASSERT_EQ(t.steps(), 3u);  // line 1 tokens 0 and 1, line 2 token 0; line 3 held by one file only
  std::vector<std::int32_t> order;
  t.for_each_access([&](wisp::access a) { order.push_back(a.expert); });
  EXPECT_EQ(order, (std::vector<std::int32_t>{0, 1, 1, 0, 2, 3, 3, 2, 3, 2, 0, 3}));
  EXPECT_EQ(std::vector<std::size_t>(t.sequence_starts().begin(), t.sequence_starts().end()),
            (std::vector<std::size_t>{0, 2}));
  wisp::import_report want;
  want.incomplete_tokens = 3;  // line 1 token 2, line 3 tokens 0 and 1
  want.missing_records = 3;    // file 2 lacks those three
  want.dropped_tokens = 3;
  want.dropped_records = 3;  // the three records file 1 has for them
  want.incomplete_sequences = 2;
  EXPECT_EQ(report, want);
}

TEST(Esft, KeepImportsEveryTokenWithTheLayersPresent) {
  const wisp_test::temp_dir dir("esft_incomplete_keep");
  write_incomplete_folder(dir);
  const auto [t, report] = import_esft(
      dir.path(), {.experts = 4, .top_k = 2, .on_incomplete = wisp::incomplete_tokens::keep});
  ASSERT_EQ(t.steps(), 6u);
  EXPECT_EQ(t.missing_rows(), 3u);
  EXPECT_FALSE(t.has_layer(2, 1));
  EXPECT_TRUE(t.has_layer(2, 0));
  EXPECT_EQ(t.expert(2, 0, 1), 3);
  EXPECT_FLOAT_EQ(t.weight(2, 0, 1), 0.6f);
  EXPECT_FALSE(t.has_layer(4, 1));
  EXPECT_EQ(t.expert(5, 0, 0), 0);
  EXPECT_EQ(std::vector<std::size_t>(t.sequence_starts().begin(), t.sequence_starts().end()),
            (std::vector<std::size_t>{0, 3, 4}));
  wisp::import_report want;
  want.incomplete_tokens = 3;
  want.missing_records = 3;
  want.partial_tokens = 3;
  want.incomplete_sequences = 2;
  EXPECT_EQ(report, want);
}

// One layer of `tokens` tokens of top-`k` routing over `experts` experts (pseudo-random, distinct
// ids per token), written as one ESFT line.
std::string esft_line(std::size_t tokens, std::size_t k, std::size_t experts, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string ids;
  std::string weights;
  std::vector<std::size_t> pool(experts);
  for (std::size_t t = 0; t < tokens; ++t) {
    std::iota(pool.begin(), pool.end(), std::size_t{0});
    for (std::size_t j = 0; j < k; ++j) {
      std::swap(pool[j], pool[j + rng() % (experts - j)]);
      ids += (ids.empty() ? "" : "\t");
      ids += std::to_string(pool[j]);
      weights += (weights.empty() ? "0.1" : "\t0.1");
    }
  }
  return ids + "\t\t" + weights + "\n";
}

TEST(Esft, ATopKBelowTheDataIsDetected) {
  const wisp_test::temp_dir dir("esft_topk");
  dir.write("expert_weights_1.txt", esft_line(400, 2, 16, 1));
  dir.write("expert_weights_2.txt", esft_line(400, 2, 16, 2));
  const std::string what = expect_format_error(dir.path(), {.experts = 16, .top_k = 1});
  EXPECT_NE(what.find("top_k 1 does not fit the data"), std::string::npos) << what;
  EXPECT_NE(what.find("top-2 routing"), std::string::npos) << what;
  EXPECT_EQ(import_esft(dir.path(), {.experts = 16, .top_k = 2}).trace.steps(), 400u);
  // Real top-1 data read as top-1: groups of two repeat ids, nothing to report.
  dir.write("expert_weights_1.txt", esft_line(400, 1, 16, 3));
  dir.write("expert_weights_2.txt", esft_line(400, 1, 16, 4));
  EXPECT_EQ(import_esft(dir.path(), {.experts = 16, .top_k = 1}).trace.steps(), 400u);
  // A top-k above the data's repeats ids within a group.
  dir.write("expert_weights_1.txt", esft_line(400, 2, 16, 5));
  dir.write("expert_weights_2.txt", esft_line(400, 2, 16, 6));
  EXPECT_NE(expect_format_error(dir.path(), {.experts = 16, .top_k = 4}).find("appears twice"),
            std::string::npos);
}

TEST(Esft, RealTraceRefusesEveryTopKButSix) {
  WISP_TEST_NEEDS_TRACE(std::filesystem::is_directory(wisp::test::esft_dir()));
  for (const std::int32_t k : {1, 2, 3}) {
    const std::string what = expect_format_error(wisp::test::esft_dir(), {.top_k = k});
    EXPECT_NE(what.find("top-6 routing"), std::string::npos) << "top_k " << k << ": " << what;
  }
  for (const std::int32_t k : {4, 5, 7, 12}) {  // not a multiple of 6 ids per line, or repeats
    EXPECT_FALSE(expect_format_error(wisp::test::esft_dir(), {.top_k = k}).empty()) << k;
  }
}

struct malformed_case {
  const char* name;
  const char* layer1;
  const char* layer2;  // nullptr: no second file
  const char* needle;
};

void PrintTo(const malformed_case& c, std::ostream* os) {
  *os << c.name;
}

class EsftMalformed : public ::testing::TestWithParam<malformed_case> {};

TEST_P(EsftMalformed, IsAFormatErrorNamingFileAndLine) {
  const auto& c = GetParam();
  const wisp_test::temp_dir dir(c.name);
  dir.write("expert_weights_1.txt", c.layer1);
  if (c.layer2 != nullptr) {
    dir.write("expert_weights_2.txt", c.layer2);
  }
  const std::string what = expect_format_error(dir.path(), {.experts = 64, .top_k = 2});
  EXPECT_NE(what.find(c.needle), std::string::npos) << what;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, EsftMalformed,
    ::testing::Values(
        malformed_case{"no_double_tab", "1\t2\t0.5\t0.5\n", nullptr,
                       "expert_weights_1.txt line 1: missing the double tab"},
        malformed_case{"wrong_weight_count", "1\t2\t\t0.5\n", nullptr,
                       "line 1: 1 weights for 2 ids"},
        malformed_case{"not_multiple_of_k", "1\t2\t3\t\t0.5\t0.5\t0.5\n", nullptr,
                       "not a multiple of top_k"},
        malformed_case{"ids_only_line", "1\t2\n1\t64\t\t0.5\t0.5\n", nullptr, "line 1: missing"},
        malformed_case{"id_64_line2", "1\t2\t\t0.1\t0.2\n1\t64\t\t0.5\t0.5\n", nullptr,
                       "line 2: expert id 64 out of range"},
        malformed_case{"duplicate", "5\t5\t\t0.1\t0.2\n", nullptr, "expert 5 appears twice"},
        malformed_case{"negative", "-1\t5\t\t0.1\t0.2\n", nullptr, "out of range"},
        malformed_case{"garbage_id", "x\t5\t\t0.1\t0.2\n", nullptr, "bad expert id 'x'"},
        malformed_case{"garbage_weight", "1\t5\t\t0.1\tnan\n", nullptr, "bad weight"},
        malformed_case{"stray_tab", "1\t5\t\t0.1\t\t0.2\n", nullptr, "empty field"},
        malformed_case{"empty_line", "1\t5\t\t0.1\t0.2\n\n1\t5\t\t0.1\t0.2\n", nullptr,
                       "line 2: empty line"},
        malformed_case{"line_counts", "1\t5\t\t0.1\t0.2\n1\t5\t\t0.1\t0.2\n", "1\t5\t\t0.1\t0.2\n",
                       "has 1 lines but expert_weights_1.txt has 2"},
        malformed_case{"token_counts", "1\t5\t\t0.1\t0.2\n", "1\t5\t2\t3\t\t0.1\t0.2\t0.1\t0.2\n",
                       "expert_weights_2.txt line 1: 2 tokens"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Esft, FolderProblems) {
  const wisp_test::temp_dir dir("esft_gaps");
  EXPECT_NE(expect_format_error(dir.path()).find("no expert_weights"), std::string::npos);
  dir.write("expert_weights_1.txt", "1\t5\t3\t4\t2\t0\t\t.1\t.1\t.1\t.1\t.1\t.1\n");
  dir.write("expert_weights_3.txt", "1\t5\t3\t4\t2\t0\t\t.1\t.1\t.1\t.1\t.1\t.1\n");
  EXPECT_NE(expect_format_error(dir.path()).find("expert_weights_2.txt is missing"),
            std::string::npos);
  try {
    (void)import_esft(dir.path() / "nope");
    ADD_FAILURE() << "no error";
  } catch (const wisp::error& e) {
    EXPECT_NE(std::string(e.what()).find("nope: No such file or directory"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)import_esft(dir.path(), {.experts = 4, .top_k = 6}), wisp::logic_error);
}

}  // namespace
