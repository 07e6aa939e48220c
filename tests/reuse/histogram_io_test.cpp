// SPDX-License-Identifier: Apache-2.0
// Merging histograms of independent caches, and the versioned text format.
#include "reuse/oracle.hpp"

#include <wisp/reuse/histogram.hpp>
#include <wisp/reuse/histogram_io.hpp>
#include <wisp/reuse/reuse_distance.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

using wisp::cache_scope;
using wisp::histogram_shape;
using wisp::miss_curve;
using wisp::reuse_distance_counter;
using wisp::reuse_histogram;
namespace oracle = wisp::testing;

reuse_histogram profile(const std::vector<std::uint32_t>& stream, histogram_shape shape) {
  reuse_distance_counter counter{shape.keys_per_partition};
  reuse_histogram h{shape};
  for (const auto key : stream) {
    h.record(counter.access(key));
  }
  return h;
}

std::vector<std::uint32_t> random_stream(std::uint32_t keys, std::size_t n, std::uint64_t seed) {
  return oracle::zipf_stream(keys, 0.8, seed).take(n);
}

// Merge = the histogram of independent caches (e.g. two workers, each with its own LRU cache of
// capacity c, replaying different requests): its curve is the sum of the two caches' misses.
TEST(HistogramMerge, SumOfIndependentCaches) {
  const histogram_shape shape{cache_scope::stream, 1, 300};
  const auto a = random_stream(300, 8000, 1);
  const auto b = random_stream(300, 5000, 2);
  const reuse_histogram merged = wisp::merge(profile(a, shape), profile(b, shape));
  const miss_curve curve{merged};
  EXPECT_EQ(merged.accesses(), a.size() + b.size());
  for (std::uint32_t c = 0; c <= 301; ++c) {
    ASSERT_EQ(curve.misses(c), oracle::lru_misses(a, 300, c) + oracle::lru_misses(b, 300, c))
        << "capacity " << c;
  }
  // Commutative, and merging an empty histogram changes nothing.
  EXPECT_EQ(merged, wisp::merge(profile(b, shape), profile(a, shape)));
  EXPECT_EQ(wisp::merge(merged, reuse_histogram{shape}), merged);
}

// Not the histogram of one cache replaying a then b: b's first accesses are warm there.
TEST(HistogramMerge, IsNotConcatenation) {
  const histogram_shape shape{cache_scope::stream, 1, 4};
  const std::vector<std::uint32_t> a = {0, 1, 0};
  const std::vector<std::uint32_t> b = {1, 0};
  std::vector<std::uint32_t> both = a;
  both.insert(both.end(), b.begin(), b.end());
  const auto merged = wisp::merge(profile(a, shape), profile(b, shape));
  const auto concatenated = profile(both, shape);
  EXPECT_EQ(merged.cold(), 4u);
  EXPECT_EQ(concatenated.cold(), 2u);
  EXPECT_NE(merged, concatenated);
}

TEST(HistogramMerge, RejectsDifferentShapesAndStaysUnchanged) {
  reuse_histogram a = profile({0, 1, 0}, {cache_scope::global, 1, 8});
  const reuse_histogram copy = a;
  EXPECT_THROW(a.merge(profile({0, 0}, {cache_scope::global, 1, 16})), wisp::logic_error);
  EXPECT_THROW(a.merge(profile({0, 0}, {cache_scope::stream, 1, 8})), wisp::logic_error);
  EXPECT_THROW(a.merge(reuse_histogram{{cache_scope::per_layer, 2, 8}}), wisp::logic_error);
  EXPECT_EQ(a, copy);
}

TEST(HistogramText, RoundTrip) {
  const std::vector<reuse_histogram> cases = {
      reuse_histogram{{cache_scope::stream, 1, 0}},
      profile(random_stream(500, 20000, 3), {cache_scope::global, 1, 500}),
      profile(random_stream(64, 3000, 4), {cache_scope::stream, 1, 64}),
      [] {
        reuse_histogram h{{cache_scope::per_layer, 26, 64}};
        h.add(1, 5);
        h.add(64, std::uint64_t{1} << 40);
        h.add(reuse_distance_counter::cold, 1664);
        return h;
      }(),
  };
  for (const auto& h : cases) {
    const std::string text = wisp::to_text(h);
    const reuse_histogram back = wisp::parse_histogram(text);
    EXPECT_EQ(back, h) << text;
    EXPECT_EQ(back.shape(), h.shape());
    EXPECT_EQ(wisp::to_text(back), text);
    std::istringstream in{text};
    EXPECT_EQ(wisp::read_histogram(in), h);
  }
}

TEST(HistogramText, ExactTextOfASmallHistogram) {
  reuse_histogram h{{cache_scope::per_layer, 2, 4}};
  h.add(1, 3);
  h.add(4, 2);
  h.add(reuse_distance_counter::cold, 5);
  EXPECT_EQ(wisp::to_text(h),
            "wisp-reuse-histogram v1\nscope layer\npartitions 2\nkeys 4\ncold 5\nwarm 5\n"
            "distances 2\n1 3\n4 2\nend\n");
}

struct malformed_case {
  const char* name;
  std::string text;
  std::uint64_t offset;  // where the error must point
};

TEST(HistogramText, RejectsMalformedInputNamingTheOffset) {
  const std::string head = "wisp-reuse-histogram v1\nscope stream\npartitions 1\nkeys 8\n";
  // Offsets below are relative to h, where the "cold" line starts.
  const std::uint64_t h = head.size();
  ASSERT_EQ(h, 57u);
  const std::string good = head + "cold 2\nwarm 3\ndistances 2\n1 2\n5 1\nend\n";
  ASSERT_NO_THROW((void)wisp::parse_histogram(good));
  const std::vector<malformed_case> cases = {
      {"empty", "", 0},
      {"wrong magic", "wisp-trace v1\n", 0},
      {"future version", "wisp-reuse-histogram v2\n", 22},
      {"version not a number", "wisp-reuse-histogram vX\n", 22},
      {"unknown scope", "wisp-reuse-histogram v1\nscope disk\n", 24},
      {"zero partitions", "wisp-reuse-histogram v1\nscope layer\npartitions 0\nkeys 8\n", 36},
      {"several partitions in global scope",
       "wisp-reuse-histogram v1\nscope global\npartitions 3\nkeys 8\n", 37},
      {"misspelt field", head + "kold 2\n", h},
      {"negative count", head + "cold -2\n", h + 5},
      {"number overflows 64 bits", head + "cold 99999999999999999999\n", h + 5},
      {"trailing junk in a number", head + "cold 2x\n", h + 5},
      {"more distance lines than keys", head + "cold 2\nwarm 3\ndistances 9\n", h + 24},
      {"distance out of range", head + "cold 2\nwarm 3\ndistances 1\n9 3\n", h + 26},
      {"distance zero", head + "cold 2\nwarm 3\ndistances 1\n0 3\n", h + 26},
      {"decreasing distances", head + "cold 2\nwarm 3\ndistances 2\n5 2\n1 1\nend\n", h + 30},
      {"zero count", head + "cold 2\nwarm 3\ndistances 1\n1 0\n", h + 28},
      {"missing count", head + "cold 2\nwarm 3\ndistances 1\n1\n", h + 26},
      {"counts disagree with warm", head + "cold 2\nwarm 4\ndistances 2\n1 2\n5 1\nend\n", h + 7},
      {"truncated before end", head + "cold 2\nwarm 3\ndistances 2\n1 2\n5 1\n", h + 34},
      {"no final newline", head + "cold 2\nwarm 3\ndistances 2\n1 2\n5 1\nend", h + 37},
      {"wrong end marker", head + "cold 2\nwarm 3\ndistances 2\n1 2\n5 1\nfin\n", h + 34},
      {"trailing data", good + "1 1\n", good.size()},
      {"crlf line ends", "wisp-reuse-histogram v1\r\n", 22},
  };
  for (const auto& c : cases) {
    try {
      (void)wisp::parse_histogram(c.text);
      ADD_FAILURE() << c.name << ": accepted";
    } catch (const wisp::format_error& e) {
      EXPECT_EQ(e.offset(), c.offset) << c.name << ": " << e.what();
      EXPECT_NE(std::string{e.what()}.find("at byte " + std::to_string(c.offset)),
                std::string::npos)
          << c.name << ": " << e.what();
    }
  }
}

}  // namespace
