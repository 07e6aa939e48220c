// SPDX-License-Identifier: Apache-2.0
// The .wzbf record: lossless for every BF16 pattern, length, K and coder; chunks decodable on
// their own; every truncation and bit flip rejected with format_error; resealed corruption never
// crashes.
#include "support.hpp"
#include "support/expect_error.hpp"

#include <wisp/compress/compressed_bf16.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace {

using wisp::compressed_bf16;

std::vector<wisp::bf16> decompress(const compressed_bf16& z) {
  std::vector<wisp::bf16> out(z.elements(), wisp::bf16{0xDEAD});
  z.decompress(out, wisp::test::all_decoders());
  return out;
}

compressed_bf16 reparse(const compressed_bf16& z) {
  return compressed_bf16::parse({z.bytes().begin(), z.bytes().end()});
}

TEST(CompressedBf16, EveryPatternEveryCoderEveryK) {
  const std::vector<wisp::bf16> all = wisp::test::all_bf16_patterns(3);
  for (const wisp::any_coder& coder : wisp::test::all_coders()) {
    for (const std::uint32_t k : {1u, 2u, 3u, 7u, 8u, 64u, 65536u}) {
      const compressed_bf16 z = compressed_bf16::compress(all, coder, k);
      ASSERT_EQ(decompress(z), all) << coder.label() << " K " << k;
      ASSERT_EQ(decompress(reparse(z)), all) << coder.label() << " K " << k;
    }
  }
}

TEST(CompressedBf16, EveryLengthAndKRoundTrips) {
  const std::vector<wisp::bf16> source = wisp::test::gaussian_bf16(10007, 0.02f, 1);
  for (const wisp::any_coder& coder : wisp::test::all_coders()) {
    for (const std::size_t n :
         {0u, 1u, 2u, 3u, 5u, 7u, 15u, 17u, 31u, 33u, 63u, 65u, 129u, 4095u, 4097u, 10007u}) {
      const std::span<const wisp::bf16> in(source.data(), n);
      for (const std::uint32_t k : {1u, 2u, 3u, 7u, 8u, 13u, 64u, 1000u}) {
        const compressed_bf16 z = compressed_bf16::compress(in, coder, k);
        EXPECT_EQ(z.elements(), n);
        EXPECT_EQ(z.e_chunks(), k);
        const std::vector<wisp::bf16> back = decompress(reparse(z));
        ASSERT_TRUE(std::equal(in.begin(), in.end(), back.begin(), back.end()))
            << coder.label() << " n " << n << " K " << k;
      }
    }
  }
}

TEST(CompressedBf16, ShardsTileTheTensorInEqualParts) {
  for (const std::uint64_t n : {0ull, 1ull, 7ull, 64ull, 65ull, 1000ull}) {
    for (const std::uint32_t k : {1u, 2u, 3u, 8u, 64u, 2000u}) {
      const std::uint64_t shard = (n + k - 1) / k;
      std::uint64_t next = 0;
      for (std::uint32_t j = 0; j < k; ++j) {
        const auto [first, count] = wisp::e_chunk_range(n, k, j);
        EXPECT_EQ(first, std::min(n, next)) << n << " " << k << " " << j;
        EXPECT_EQ(count, std::min(shard, n - first));
        next = first + count;
      }
      EXPECT_EQ(next, n);
    }
  }
}

TEST(CompressedBf16, ChunksStoredApartDecodeOnTheirOwn) {
  const std::vector<wisp::bf16> w = wisp::test::gaussian_bf16(5003, 0.05f, 2);
  const wisp::coder_set decoders = wisp::test::all_decoders();
  for (const wisp::any_coder& coder : wisp::test::all_coders()) {
    const compressed_bf16 z = compressed_bf16::compress(w, coder, 7);
    // The SM chunk and each E-chunk copied into buffers of their own, decoded last to first.
    const std::vector<std::uint8_t> sm(z.chunk_bytes(z.sm_chunk()).begin(),
                                       z.chunk_bytes(z.sm_chunk()).end());
    std::vector<wisp::bf16> out(w.size());
    for (std::uint32_t j = z.e_chunks(); j-- > 0;) {
      const wisp::chunk_ref& r = z.e_chunk(j);
      const std::vector<std::uint8_t> stored(z.chunk_bytes(r).begin(), z.chunk_bytes(r).end());
      std::vector<std::uint8_t> ex(r.count);
      wisp::decode_e_chunk(r, stored, ex, decoders);
      wisp::recover_bf16(std::span(sm).subspan(r.first, r.count), ex,
                         std::span(out).subspan(r.first, r.count));
    }
    EXPECT_EQ(out, w) << coder.label();
    // decompress_chunk fills only its shard.
    std::vector<wisp::bf16> part(w.size());
    wisp::bf16_decode_scratch scratch;
    z.decompress_chunk(3, part, scratch, decoders);
    const wisp::chunk_ref& r = z.e_chunk(3);
    for (std::size_t i = 0; i < w.size(); ++i) {
      const bool inside = i >= r.first && i < r.first + r.count;
      ASSERT_EQ(part[i], inside ? w[i] : wisp::bf16{}) << i;
    }
  }
}

TEST(CompressedBf16, IncompressibleExponentsAreStoredRaw) {
  const std::vector<wisp::bf16> all = wisp::test::all_bf16_patterns(8);  // 8 bits of entropy
  const compressed_bf16 z = compressed_bf16::compress(all, wisp::huffman_coder{}, 4);
  for (std::uint32_t j = 0; j < 4; ++j) {
    EXPECT_EQ(z.e_chunk(j).coder, wisp::coder_id::raw);
  }
  EXPECT_EQ(z.bytes().size(), wisp::wzbf::header_bytes(4) + 2 * all.size());
}

TEST(CompressedBf16, GaussianWeightsReachTheEntropyBound) {
  const std::vector<wisp::bf16> w = wisp::test::gaussian_bf16(1 << 18, 0.02f, 3);
  const wisp::exponent_counts h = wisp::exponent_histogram(w);
  const compressed_bf16 z = compressed_bf16::compress(w, wisp::huffman_coder{}, 8);
  const double ratio = static_cast<double>(z.bytes().size()) / (2.0 * w.size());
  EXPECT_GE(ratio, wisp::entropy_bound_ratio(h));
  EXPECT_LE(ratio, wisp::entropy_bound_ratio(h) + 0.01);  // see Huffman.SizeIsWithinGallagers...
}

TEST(CompressedBf16, BadArgumentsAndMissingCoders) {
  const std::vector<wisp::bf16> w = wisp::test::gaussian_bf16(2000, 0.02f, 4);
  wisp::test::expect_error([&] { (void)compressed_bf16::compress(w, wisp::raw_coder{}, 0); },
                           "E-chunks 0");
  wisp::test::expect_error([&] { (void)compressed_bf16::compress(w, wisp::raw_coder{}, 65537); },
                           "E-chunks 65537");
  const compressed_bf16 z = compressed_bf16::compress(w, wisp::huffman_coder{}, 2);
  std::vector<wisp::bf16> out(1999);
  wisp::test::expect_error([&] { z.decompress(out, wisp::core_coders()); }, "output of 1999");
  out.resize(2000);
  wisp::coder_set raw_only;
  raw_only.add(wisp::raw_coder{});
  wisp::test::expect_error<wisp::format_error>([&] { z.decompress(out, raw_only); },
                                               "coder 1 (huffman) is not available", "raw");
  wisp::test::expect_error([&] { (void)wisp::core_coders().by_label("brotli"); },
                           "no exponent coder called 'brotli'", "raw, huffman");
}

// The record's CRCs recomputed after an edit (the layout of docs/formats.md).
void reseal(std::vector<std::uint8_t>& b) {
  auto u32 = [&](std::size_t at) { return wisp::detail::load_le(b.data() + at, 4); };
  auto u64 = [&](std::size_t at) { return wisp::detail::load_le(b.data() + at, 8); };
  auto put32 = [&](std::size_t at, std::uint32_t v) {
    wisp::detail::store_le(b.data() + at, v, 4);
  };
  const std::uint32_t k = u32(24);
  if (k < 1 || k > wisp::wzbf::max_e_chunks || b.size() < wisp::wzbf::header_bytes(k)) {
    return;
  }
  for (std::uint32_t c = 0; c <= k; ++c) {
    const std::size_t at = 32 + 24 * std::size_t{c};
    const std::uint64_t off = u64(at);
    const std::uint64_t len = u64(at + 8);
    if (off <= b.size() && len <= b.size() - off) {
      put32(at + 16, wisp::detail::crc32(std::span(b).subspan(off, len)));
    }
  }
  const std::size_t h = wisp::wzbf::header_bytes(k);
  put32(h - 4, wisp::detail::crc32(std::span(b).first(h - 4)));
}

TEST(CompressedBf16, FuzzTruncationsAndBitFlips) {
  const wisp::coder_set decoders = wisp::test::all_decoders();
  const std::vector<wisp::bf16> w = wisp::test::gaussian_bf16(3001, 0.02f, 5);
  for (const wisp::any_coder& coder : wisp::test::all_coders()) {
    const compressed_bf16 z = compressed_bf16::compress(w, coder, 3);
    const std::vector<std::uint8_t> good(z.bytes().begin(), z.bytes().end());
    for (std::size_t len = 0; len < good.size(); len += (len < 400 ? 1 : 37)) {
      EXPECT_THROW(
          (void)compressed_bf16::parse({good.begin(), good.begin() + static_cast<long>(len)}),
          wisp::format_error)
          << coder.label() << " truncated to " << len;
    }
    std::mt19937_64 rng(6);
    for (int trial = 0; trial < 1000; ++trial) {
      std::vector<std::uint8_t> b = good;
      const int flips = 1 + static_cast<int>(rng() % 3);
      for (int f = 0; f < flips; ++f) {
        const std::uint64_t bit = rng() % (b.size() * 8);
        b[bit / 8] ^= static_cast<std::uint8_t>(1u << (bit % 8));
      }
      if (b == good) {
        continue;
      }
      EXPECT_THROW((void)compressed_bf16::parse(std::move(b)), wisp::format_error)
          << coder.label() << " trial " << trial;
    }
    // Flips with the CRCs made valid again reach the structural checks and the decoders.
    for (int trial = 0; trial < 1000; ++trial) {
      std::vector<std::uint8_t> b = good;
      const std::uint64_t bit = rng() % (b.size() * 8);
      b[bit / 8] ^= static_cast<std::uint8_t>(1u << (bit % 8));
      reseal(b);
      try {
        const compressed_bf16 bad = compressed_bf16::parse(std::move(b));
        std::vector<wisp::bf16> out(bad.elements());
        bad.decompress(out, decoders);
      } catch (const wisp::format_error&) {
      }
    }
  }
}

}  // namespace
