// SPDX-License-Identifier: Apache-2.0
#include "trace_test_util.hpp"

#include <wisp/core/detail/crc32.hpp>
#include <wisp/trace/synthetic.hpp>
#include <wisp/trace/wtrace.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <sstream>
#include <streambuf>
#include <string>
#include <vector>

namespace {

using wisp::read_wtrace;
using wisp::routing_trace;
using wisp::write_wtrace;

std::span<const std::uint8_t> bytes_of(std::string_view s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

std::string to_bytes(const routing_trace& t) {
  std::ostringstream out(std::ios::binary);
  write_wtrace(t, out);
  return std::move(out).str();
}

routing_trace from_bytes(const std::string& bytes) {
  std::istringstream in(bytes, std::ios::binary);
  return read_wtrace(in);
}

void put_u32(std::string& b, std::size_t off, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) {
    b[off + static_cast<std::size_t>(i)] = static_cast<char>(v >> (8 * i));
  }
}
void put_u64(std::string& b, std::size_t off, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    b[off + static_cast<std::size_t>(i)] = static_cast<char>(v >> (8 * i));
  }
}

// Recomputes both checksums so a deliberately inconsistent file reaches the semantic checks.
void reseal(std::string& b) {
  put_u32(b, 56, wisp::detail::crc32(bytes_of(std::string_view(b).substr(0, 56))));
  const std::size_t payload = b.size() - 64 - 4;
  put_u32(b, b.size() - 4, wisp::detail::crc32(bytes_of(std::string_view(b).substr(64, payload))));
}

// Expects a format_error whose message contains `needle` and returns its offset.
std::uint64_t expect_format_error(const std::string& bytes, const std::string& needle) {
  try {
    (void)from_bytes(bytes);
  } catch (const wisp::format_error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    return e.offset();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "unexpected exception type: " << e.what();
    return 0;
  }
  ADD_FAILURE() << "no exception, expected: " << needle;
  return 0;
}

TEST(Crc32, KnownVectors) {
  using wisp::detail::crc32;
  EXPECT_EQ(crc32(bytes_of("123456789")), 0xCBF43926u);
  EXPECT_EQ(crc32(bytes_of("")), 0x00000000u);
  EXPECT_EQ(crc32(bytes_of("a")), 0xE8B7BE43u);
  EXPECT_EQ(crc32(bytes_of("The quick brown fox jumps over the lazy dog")), 0x414FA339u);
  // Incremental equals one-shot.
  const auto part = wisp::detail::crc32_update(0, bytes_of("12345"));
  EXPECT_EQ(wisp::detail::crc32_update(part, bytes_of("6789")), 0xCBF43926u);
  static_assert(wisp::detail::crc32_table[1] == 0x77073096u);
}

TEST(Wtrace, HeaderLayoutIsLittleEndian) {
  routing_trace t({3, 300, 2});
  t.begin_sequence();
  const std::int32_t ids[] = {1, 258, 3, 4, 5, 6};
  t.append_step(ids);
  const std::string b = to_bytes(t);
  ASSERT_EQ(b.size(), 64u + 8u + 6u * 2u + 4u);
  EXPECT_EQ(b.substr(0, 4), "WTRC");
  EXPECT_EQ(static_cast<std::uint8_t>(b[8]), 1u);    // version
  EXPECT_EQ(static_cast<std::uint8_t>(b[16]), 3u);   // layers
  EXPECT_EQ(static_cast<std::uint8_t>(b[20]), 44u);  // experts 300 = 0x012C
  EXPECT_EQ(static_cast<std::uint8_t>(b[21]), 1u);
  EXPECT_EQ(static_cast<std::uint8_t>(b[28]), 2u);      // id width
  EXPECT_EQ(static_cast<std::uint8_t>(b[32]), 1u);      // steps
  EXPECT_EQ(static_cast<std::uint8_t>(b[40]), 1u);      // sequences
  EXPECT_EQ(static_cast<std::uint8_t>(b[48]), 20u);     // payload bytes
  EXPECT_EQ(static_cast<std::uint8_t>(b[72 + 2]), 2u);  // id 258 = 0x0102, little-endian
  EXPECT_EQ(static_cast<std::uint8_t>(b[72 + 3]), 1u);
}

struct round_trip_case {
  wisp::moe_shape shape;
  std::size_t steps;
  bool weights;
};

void PrintTo(const round_trip_case& c, std::ostream* os) {
  *os << c.shape << " x " << c.steps << (c.weights ? " with weights" : "");
}

class WtraceRoundTrip : public ::testing::TestWithParam<round_trip_case> {};

TEST_P(WtraceRoundTrip, ReadsBackEqual) {
  const auto& c = GetParam();
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    const routing_trace t = wisp_test::random_trace(c.shape, c.steps, c.weights, seed);
    const routing_trace back = from_bytes(to_bytes(t));
    EXPECT_EQ(back, t);
    EXPECT_EQ(back.has_weights(), c.weights && c.steps > 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Traces, WtraceRoundTrip,
                         ::testing::Values(round_trip_case{{26, 64, 6}, 200, false},
                                           round_trip_case{{26, 64, 6}, 200, true},
                                           round_trip_case{{1, 1, 1}, 1, false},
                                           round_trip_case{{2, 8, 8}, 0, false},
                                           round_trip_case{{4, 257, 3}, 50, true},
                                           round_trip_case{{3, 65536, 4}, 20, false}),
                         [](const auto& info) {
                           return "L" + std::to_string(info.param.shape.layers) + "_E" +
                                  std::to_string(info.param.shape.experts) + "_K" +
                                  std::to_string(info.param.shape.top_k) + "_S" +
                                  std::to_string(info.param.steps) +
                                  (info.param.weights ? "_weights" : "_ids");
                         });

TEST(Wtrace, PartialStepsRoundTrip) {
  for (const bool weights : {false, true}) {
    for (const wisp::moe_shape shape :
         {wisp::moe_shape{2, 8, 2}, wisp::moe_shape{26, 64, 6}, wisp::moe_shape{9, 300, 3}}) {
      const routing_trace t = wisp_test::random_partial_trace(shape, 40, weights, 7);
      ASSERT_FALSE(t.complete());
      const std::string b = to_bytes(t);
      const routing_trace back = from_bytes(b);
      EXPECT_EQ(back, t);
      EXPECT_EQ(static_cast<std::uint8_t>(b[12]), weights ? 3u : 2u);  // flags: partial (+ weights)
      // Header, sequence starts, the row bitmap, then only the rows held.
      const std::size_t rows = t.steps() * static_cast<std::size_t>(shape.layers);
      EXPECT_EQ(b.size(), 64 + 8 * t.sequence_starts().size() + (rows + 7) / 8 +
                              t.access_count() * (t.id_bytes() + (weights ? 4 : 0)) + 4);
    }
  }
  // A complete trace keeps the version-1 layout it always had: no flag, no bitmap.
  const routing_trace complete = wisp_test::random_trace({2, 8, 2}, 5, false, 1);
  EXPECT_EQ(static_cast<std::uint8_t>(to_bytes(complete)[12]), 0u);
}

TEST(Wtrace, RejectsInconsistentRowBitmaps) {
  // 2 layers x 3 steps, step 1 lacks layer 0: bitmap bits 0b111011 in one byte at 64 + 8.
  routing_trace t({2, 8, 2});
  const std::int32_t ids[] = {0, 1, 2, 3};
  const std::uint8_t second_only[] = {0, 1};
  t.begin_sequence();
  t.append_step(ids);
  t.append_partial_step(ids, second_only);
  t.append_step(ids);
  const std::string good = to_bytes(t);
  const std::size_t mask = 64 + 8;
  ASSERT_EQ(static_cast<std::uint8_t>(good[mask]), 0b111011u);
  {
    std::string b = good;
    b[mask] = static_cast<char>(0b1111011);  // a bit past the last row
    reseal(b);
    EXPECT_EQ(expect_format_error(b, "past the last row"), mask);
  }
  {
    std::string b = good;
    b[mask] = static_cast<char>(0b110011);  // step 1 holds no layer; payload still says 5 rows
    reseal(b);
    expect_format_error(b, "row bitmap");
  }
  {
    std::string b = good;
    b[mask] = static_cast<char>(0b111111);  // every row held, but the payload has 5
    reseal(b);
    expect_format_error(b, "partial flag set but every step holds every layer");
  }
  {
    std::string b = good;
    put_u64(b, 48, 8 + 1 + 5 * 2 + 3);  // starts, bitmap, 5 rows of 2 one-byte ids, then 3 bytes
    reseal(b);
    EXPECT_EQ(expect_format_error(b, "payload size"), 48u);
  }
}

TEST(Wtrace, FileRoundTripAndErrorsNameThePath) {
  const wisp_test::temp_dir dir("wtrace");
  const routing_trace t = wisp::make_synthetic_trace(wisp::synthetic_preset("default"), 100, 5);
  write_wtrace(t, dir.path() / "a.wtrace");
  EXPECT_EQ(read_wtrace(dir.path() / "a.wtrace"), t);
  dir.write("bad.wtrace", "not a trace");
  try {
    (void)read_wtrace(dir.path() / "bad.wtrace");
    ADD_FAILURE() << "expected a format_error";
  } catch (const wisp::format_error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.wtrace"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("magic"), std::string::npos) << e.what();
    EXPECT_EQ(e.offset(), 0u);
  }
  try {
    (void)read_wtrace(dir.path() / "missing.wtrace");
    ADD_FAILURE() << "expected an error";
  } catch (const wisp::error& e) {  // the operating system's reason
    EXPECT_NE(std::string(e.what()).find("missing.wtrace: No such file or directory"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)read_wtrace(dir.path()), wisp::error);  // a folder
}

TEST(Wtrace, AFileHoldsOneTraceAndNothingAfterIt) {
  const wisp_test::temp_dir dir("wtrace_trailing");
  const routing_trace t = wisp_test::random_trace({2, 16, 3}, 10, true, 1);
  const std::string bytes = to_bytes(t);
  dir.write("extra.wtrace", bytes + "junk");
  try {
    (void)read_wtrace(dir.path() / "extra.wtrace");
    ADD_FAILURE() << "trailing bytes accepted";
  } catch (const wisp::format_error& e) {
    EXPECT_EQ(e.offset(), bytes.size());
    EXPECT_NE(std::string(e.what()).find("4 unexpected bytes after the trace"), std::string::npos)
        << e.what();
  }
  dir.write("two.wtrace", bytes + bytes);  // a stream may hold several; a file holds one
  EXPECT_THROW((void)read_wtrace(dir.path() / "two.wtrace"), wisp::format_error);
}

TEST(Wtrace, ConsumesExactlyItsBytes) {
  const routing_trace a = wisp_test::random_trace({2, 16, 3}, 10, true, 1);
  const routing_trace b = wisp_test::random_trace({5, 300, 1}, 7, false, 2);
  std::stringstream s(std::ios::in | std::ios::out | std::ios::binary);
  write_wtrace(a, s);
  write_wtrace(b, s);
  EXPECT_EQ(read_wtrace(s), a);
  EXPECT_EQ(read_wtrace(s), b);
}

// A stream that cannot seek: the reader must fall back to bounded chunked reads.
class unseekable_buf : public std::streambuf {
 public:
  explicit unseekable_buf(std::string data) : data_(std::move(data)) {
    setg(data_.data(), data_.data(), data_.data() + data_.size());
  }

 private:
  std::string data_;
};

TEST(Wtrace, ReadsFromUnseekableStreams) {
  const routing_trace t = wisp_test::random_trace({3, 20, 4}, 30, true, 9);
  unseekable_buf buf(to_bytes(t));
  std::istream in(&buf);
  EXPECT_EQ(read_wtrace(in), t);
  // Truncated, unseekable: a format_error, not a hang or a huge allocation.
  std::string cut = to_bytes(t);
  cut.resize(cut.size() - 10);
  unseekable_buf cut_buf(cut);
  std::istream cut_in(&cut_buf);
  EXPECT_THROW((void)read_wtrace(cut_in), wisp::format_error);
}

TEST(Wtrace, RejectsSpecificCorruptions) {
  const routing_trace t = wisp_test::random_trace({2, 8, 3}, 4, true, 3);
  const std::string good = to_bytes(t);
  {
    std::string b = good;
    b[0] = 'X';
    EXPECT_EQ(expect_format_error(b, "magic"), 0u);
  }
  {
    std::string b = good;
    b[30] ^= 1;  // inside the header, checksum not updated
    EXPECT_EQ(expect_format_error(b, "header checksum"), 56u);
  }
  {
    std::string b = good;
    put_u32(b, 8, 2);
    reseal(b);
    EXPECT_EQ(expect_format_error(b, "version 2"), 8u);
  }
  {
    std::string b = good;
    put_u32(b, 12, 6);
    reseal(b);
    EXPECT_EQ(expect_format_error(b, "flag"), 12u);
  }
  {
    std::string b = good;
    put_u32(b, 24, 9);  // top_k > experts
    reseal(b);
    EXPECT_EQ(expect_format_error(b, "top_k"), 24u);
  }
  {
    std::string b = good;
    put_u32(b, 28, 2);  // id width inconsistent with experts = 8
    reseal(b);
    EXPECT_EQ(expect_format_error(b, "id width"), 28u);
  }
  {
    std::string b = good;
    b[b.size() - 20] ^= 0x40;  // payload byte, checksum not updated
    EXPECT_EQ(expect_format_error(b, "payload checksum"), good.size() - 4);
  }
  {
    // 2^40 steps announced by a tiny file: must fail on sizes, never allocate.
    std::string b = good;
    put_u64(b, 32, std::uint64_t{1} << 31);
    put_u64(b, 48, (std::uint64_t{1} << 31) * 6 * 5 + 8);
    reseal(b);
    expect_format_error(b, "truncated");
  }
  {
    std::string b = good;
    put_u64(b, 32, ~std::uint64_t{0});  // more steps than the maximum
    reseal(b);
    EXPECT_EQ(expect_format_error(b, "step count"), 32u);
  }
  {
    std::string b = good;
    put_u64(b, 48, 12345);  // payload size inconsistent with counts
    reseal(b);
    EXPECT_EQ(expect_format_error(b, "payload size"), 48u);
  }
  {
    std::string b = good;
    const std::size_t first_id = 64 + 8;  // one sequence start
    b[first_id + 1] = 8;                  // id 8 >= experts 8
    reseal(b);
    EXPECT_EQ(expect_format_error(b, "expert id 8"), first_id + 1);
  }
  {
    std::string b = good;
    const std::size_t first_id = 64 + 8;
    b[first_id + 1] = b[first_id];  // duplicate in row (step 0, layer 0)
    reseal(b);
    EXPECT_EQ(expect_format_error(b, "twice"), first_id + 1);
  }
  {
    std::string b = good;
    put_u64(b, 64, 4);  // sequence start == steps
    reseal(b);
    EXPECT_EQ(expect_format_error(b, "sequence start"), 64u);
  }
  {
    std::string b = good;
    const std::size_t first_weight = 64 + 8 + 4 * 6;
    put_u32(b, first_weight, 0x7FC00000u);  // NaN
    reseal(b);
    EXPECT_EQ(expect_format_error(b, "not finite"), first_weight);
  }
}

// Every truncation and many random bit flips: a format_error every time, nothing else. Complete
// traces and traces with partial steps (whose row bitmap is read too).
TEST(Wtrace, FuzzTruncationsAndBitFlips) {
  for (const int kind : {0, 1, 2, 3}) {
    const bool weights = (kind & 1) != 0;
    const routing_trace t = (kind & 2) != 0
                                ? wisp_test::random_partial_trace({3, 10, 2}, 6, weights, 4)
                                : wisp_test::random_trace({3, 10, 2}, 6, weights, 4);
    ASSERT_EQ((kind & 2) != 0, !t.complete());
    const std::string good = to_bytes(t);
    for (std::size_t len = 0; len < good.size(); ++len) {
      const std::string cut = good.substr(0, len);
      try {
        (void)from_bytes(cut);
        ADD_FAILURE() << "truncation to " << len << " bytes was accepted";
      } catch (const wisp::format_error&) {
      } catch (...) {
        ADD_FAILURE() << "truncation to " << len << " threw something else than format_error";
      }
    }
    wisp::detail::xoshiro256ss rng(98 + static_cast<std::uint64_t>(kind));
    for (int trial = 0; trial < 3000; ++trial) {
      std::string b = good;
      const int flips = 1 + static_cast<int>(rng.below(3));
      for (int f = 0; f < flips; ++f) {
        const auto bit = rng.below(b.size() * 8);
        b[bit / 8] = static_cast<char>(b[bit / 8] ^ (1 << (bit % 8)));
      }
      if (b == good) {
        continue;
      }
      try {
        (void)from_bytes(b);
        ADD_FAILURE() << "corrupted file accepted (trial " << trial << ")";
      } catch (const wisp::format_error&) {
      } catch (...) {
        ADD_FAILURE() << "bit flip threw something else than format_error (trial " << trial << ")";
      }
    }
    // Flips that keep the checksums valid reach the semantic checks; still only format_error.
    for (int trial = 0; trial < 3000; ++trial) {
      std::string b = good;
      const auto bit = rng.below((b.size() - 4) * 8);
      b[bit / 8] = static_cast<char>(b[bit / 8] ^ (1 << (bit % 8)));
      if (bit / 8 >= 56 && bit / 8 < 60) {
        continue;  // the header checksum itself
      }
      reseal(b);
      try {
        const routing_trace back = from_bytes(b);
        EXPECT_EQ(back.shape().layers, t.shape().layers);  // some flips are valid traces
      } catch (const wisp::format_error&) {
      } catch (...) {
        ADD_FAILURE() << "resealed bit flip threw something else than format_error";
      }
    }
  }
}

}  // namespace
