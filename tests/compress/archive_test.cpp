// SPDX-License-Identifier: Apache-2.0
// The safetensors header reader and the .wzar archive: exact restoration of checkpoints and raw
// BF16 files, every malformed header named, every truncation and bit flip rejected.
#include "support.hpp"
#include "support/expect_error.hpp"

#include <wisp/compress/archive.hpp>
#include <wisp/compress/safetensors.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace {

std::vector<std::uint8_t> le_bytes(const std::vector<wisp::bf16>& v) {
  std::vector<std::uint8_t> out;
  for (const wisp::bf16 x : v) {
    out.push_back(static_cast<std::uint8_t>(x.bits));
    out.push_back(static_cast<std::uint8_t>(x.bits >> 8));
  }
  return out;
}

// A safetensors file written by hand: header (padded with spaces), then `data`.
std::vector<std::uint8_t> safetensors_file(const std::string& json,
                                           const std::vector<std::uint8_t>& data) {
  std::string header = json;
  header.append((8 - header.size() % 8) % 8, ' ');
  // One buffer of the final size: appending to an 8-byte vector makes g++ 12 at -O3 report a
  // false -Warray-bounds in the inlined memmove.
  std::vector<std::uint8_t> out(8 + header.size() + data.size());
  for (int i = 0; i < 8; ++i) {
    out[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(header.size() >> (8 * i));
  }
  std::copy(header.begin(), header.end(), out.begin() + 8);
  std::copy(data.begin(), data.end(), out.begin() + 8 + static_cast<std::ptrdiff_t>(header.size()));
  return out;
}

// Two BF16 matrices, an FP32 vector, a 4-byte gap and a BF16 scalar, in a shuffled key order.
std::vector<std::uint8_t> sample_checkpoint() {
  std::vector<std::uint8_t> data = le_bytes(wisp::test::gaussian_bf16(64 * 33, 0.02f, 1));
  const std::vector<std::uint8_t> second = le_bytes(wisp::test::gaussian_bf16(7 * 5, 0.1f, 2));
  data.insert(data.end(), second.begin(), second.end());  // [4224, 4294)
  for (int i = 0; i < 3 * 4 + 4; ++i) {                   // F32[3] + gap of 4
    data.push_back(static_cast<std::uint8_t>(i * 37));
  }
  data.push_back(0x80);
  data.push_back(0x3F);  // BF16 scalar 1.0
  const std::string json =
      R"({"b.weight":{"dtype":"BF16","shape":[7,5],"data_offsets":[4224,4294]},)"
      R"("__metadata__":{"format":"pt"},)"
      R"("a.weight":{"dtype":"BF16","shape":[64,33],"data_offsets":[0,4224]},)"
      R"("scale":{"dtype":"BF16","shape":[],"data_offsets":[4310,4312]},)"
      R"("norm":{"dtype":"F32","shape":[3],"data_offsets":[4294,4306]}})";
  return safetensors_file(json, data);
}

TEST(Safetensors, HeaderListsTensorsInFileOrder) {
  const std::vector<std::uint8_t> file = sample_checkpoint();
  const wisp::safetensors_header h = wisp::parse_safetensors_header(file);
  ASSERT_EQ(h.tensors.size(), 4u);
  EXPECT_EQ(h.tensors[0].name, "a.weight");
  EXPECT_EQ(h.tensors[0].shape, (std::vector<std::uint64_t>{64, 33}));
  EXPECT_EQ(h.tensors[0].begin, h.data_begin);
  EXPECT_EQ(h.tensors[1].name, "b.weight");
  EXPECT_EQ(h.tensors[2].name, "norm");
  EXPECT_EQ(h.tensors[2].dtype, "F32");
  EXPECT_EQ(h.tensors[3].name, "scale");
  EXPECT_EQ(h.tensors[3].elements(), 1u);
  EXPECT_EQ(h.tensors[3].end, file.size());
}

TEST(Safetensors, MalformedHeadersNameTheProblem) {
  const std::vector<std::uint8_t> data(16, 0);
  auto bad = [&](const std::string& json, const char* part) {
    wisp::test::expect_error<wisp::format_error>(
        [&] { (void)wisp::parse_safetensors_header(safetensors_file(json, data)); }, part);
  };
  bad(R"([1])", "not a JSON object");
  bad(R"({"x":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}})", "unknown dtype 'Q4'");
  bad(R"({"x":{"dtype":"BF16","shape":[3],"data_offsets":[0,4]}})", "need 6");
  bad(R"({"x":{"dtype":"BF16","shape":[2],"data_offsets":[0,40]}})", "not inside the 16");
  bad(R"({"x":{"dtype":"BF16","shape":[-2],"data_offsets":[0,4]}})", "non-negative integer");
  bad(R"({"x":{"dtype":"BF16","shape":[2],"data_offsets":[0]}})", "data_offsets");
  bad(R"({"x":{"dtype":"BF16","shape":[2],"data_offsets":[0,4],"extra":1}})", "exactly");
  bad(R"({"x":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
      R"("y":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
      "overlap");
  bad(R"({"__metadata__":{"a":1}})", "object of strings");
  bad(R"({"x":{"dtype":"BF16")", "");  // truncated JSON: the JSON parser's message
  wisp::test::expect_error<wisp::format_error>(
      [] {
        (void)wisp::parse_safetensors_header(
            std::vector<std::uint8_t>{0xFF, 0xFF, 0, 0, 0, 0, 0, 0, '{', '}'});
      },
      "exceeds the file");
}

std::vector<std::uint8_t> pack(const std::vector<std::uint8_t>& file, const wisp::any_coder& c,
                               bool safetensors) {
  return wisp::compress_file(file, c, 3, safetensors).serialize();
}

TEST(Archive, CheckpointsAndRawFilesRestoreExactly) {
  const std::vector<std::uint8_t> checkpoint = sample_checkpoint();
  const wisp::coder_set decoders = wisp::test::all_decoders();
  for (const wisp::any_coder& coder : wisp::test::all_coders()) {
    const wisp::bf16_archive a =
        wisp::bf16_archive::parse(pack(checkpoint, coder, /*safetensors=*/true));
    EXPECT_EQ(a.restore(decoders), checkpoint) << coder.label();
    ASSERT_EQ(a.segments().size(), 6u);  // header, a, b, norm, gap, scale
    EXPECT_EQ(a.segments()[0].name, "__header__");
    EXPECT_TRUE(a.segments()[1].tensor.has_value());
    EXPECT_FALSE(a.segments()[3].tensor.has_value());  // F32 kept raw
    EXPECT_EQ(a.segments()[4].name, "__gap__");
    for (const std::size_t n : {0u, 1u, 3u, 4097u}) {
      const std::vector<std::uint8_t> raw = le_bytes(wisp::test::gaussian_bf16(n, 0.02f, n));
      EXPECT_EQ(wisp::bf16_archive::parse(pack(raw, coder, false)).restore(decoders), raw);
    }
  }
  const std::vector<std::uint8_t> odd(5, 1);
  wisp::test::expect_error<wisp::format_error>(
      [&] { (void)pack(odd, wisp::huffman_coder{}, false); }, "even size", "5 bytes");
}

TEST(Archive, FuzzTruncationsAndBitFlips) {
  const std::vector<std::uint8_t> good = pack(sample_checkpoint(), wisp::huffman_coder{}, true);
  for (std::size_t len = 0; len < good.size(); len += len < 600 ? 1 : 13) {
    EXPECT_THROW((void)wisp::bf16_archive::parse(std::span(good).first(len)), wisp::format_error)
        << len;
  }
  std::mt19937_64 rng(4);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<std::uint8_t> b = good;
    for (int f = 0; f < 1 + static_cast<int>(rng() % 3); ++f) {
      const std::uint64_t bit = rng() % (b.size() * 8);
      b[bit / 8] ^= static_cast<std::uint8_t>(1u << (bit % 8));
    }
    if (b != good) {
      EXPECT_THROW((void)wisp::bf16_archive::parse(b), wisp::format_error) << trial;
    }
  }
}

}  // namespace
