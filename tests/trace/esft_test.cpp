// SPDX-License-Identifier: Apache-2.0
#include "trace_test_util.hpp"

#include <wisp/trace/esft.hpp>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace {

using wisp::trace::import_esft;

const std::filesystem::path esft_dir =
    std::filesystem::path(WISP_TEST_TRACES_DIR) / "raw" / "esft_deepseek_v2_lite_intent";

std::string expect_format_error(const std::filesystem::path& dir,
                                wisp::trace::esft_options opt = {}) {
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
  if (!std::filesystem::is_directory(esft_dir)) {
    GTEST_SKIP() << "ESFT trace not found at " << esft_dir;
  }
  const auto t = import_esft(esft_dir);
  EXPECT_EQ(t.shape(), (wisp::trace::trace_shape{26, 64, 6}));
  EXPECT_EQ(t.sequence_starts().size(), 127u);
  EXPECT_EQ(t.steps(), 8222u);
  EXPECT_EQ(t.access_count(), 1282632u);
  EXPECT_TRUE(t.has_weights());
  EXPECT_EQ(t.sequence_starts()[0], 0u);

  // The first 6 numbers of expert_weights_1.txt are step 0, layer 0; of expert_weights_26.txt
  // step 0, layer 25. Read independently with a plain stream.
  for (const int layer : {1, 2, 26}) {
    std::ifstream in(esft_dir / ("expert_weights_" + std::to_string(layer) + ".txt"));
    for (std::int32_t j = 0; j < 6; ++j) {
      int id = -1;
      in >> id;
      EXPECT_EQ(t.expert(0, layer - 1, j), id) << "layer file " << layer << " rank " << j;
    }
  }
  // The second token of line 0 is step 1.
  std::ifstream in(esft_dir / "expert_weights_1.txt");
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
  const auto t = import_esft(dir.path(), {.experts = 4, .top_k = 2});
  EXPECT_EQ(t.shape(), (wisp::trace::trace_shape{2, 4, 2}));
  ASSERT_EQ(t.steps(), 3u);
  EXPECT_EQ(std::vector<std::size_t>(t.sequence_starts().begin(), t.sequence_starts().end()),
            (std::vector<std::size_t>{0, 2}));
  // Canonical order: line, token, layer, ids as written.
  std::vector<std::int32_t> order;
  t.for_each_access([&](wisp::trace::access a) { order.push_back(a.expert); });
  EXPECT_EQ(order, (std::vector<std::int32_t>{0, 1, 1, 2, 2, 3, 0, 3, 3, 0, 2, 1}));
  EXPECT_FLOAT_EQ(t.weight(1, 0, 1), 0.2f);
  EXPECT_FLOAT_EQ(t.weight(2, 1, 1), 0.4f);
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
  EXPECT_THROW((void)import_esft(dir.path() / "nope"), wisp::error);
  EXPECT_THROW((void)import_esft(dir.path(), {.experts = 4, .top_k = 6}), wisp::logic_error);
}

}  // namespace
