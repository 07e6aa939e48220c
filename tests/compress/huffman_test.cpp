// SPDX-License-Identifier: Apache-2.0
// Canonical Huffman: code lengths against a textbook Huffman cost, canonical codes against the
// prefix property, the decode table against bit-by-bit decoding, round trips over every
// distribution shape, and malformed encodings rejected.
#include "support.hpp"
#include "support/expect_error.hpp"

#include <wisp/compress/huffman.hpp>

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <queue>
#include <random>
#include <vector>

namespace {

using counts_t = std::array<std::uint64_t, 256>;

// Textbook Huffman: the cost sum(count * length) as the sum of all merged weights, and the depth
// of the shallowest optimal tree (ties merge the shallower subtree first).
std::pair<std::uint64_t, int> textbook(const counts_t& counts) {
  using node = std::pair<std::uint64_t, int>;  // weight, height
  std::priority_queue<node, std::vector<node>, std::greater<>> q;
  for (const std::uint64_t c : counts) {
    if (c != 0) {
      q.push({c, 0});
    }
  }
  std::uint64_t cost = 0;
  while (q.size() > 1) {
    const node a = q.top();
    q.pop();
    const node b = q.top();
    q.pop();
    cost += a.first + b.first;
    q.push({a.first + b.first, 1 + std::max(a.second, b.second)});
  }
  return {cost, q.top().second};
}

std::uint64_t cost_of(const counts_t& counts, const wisp::huffman_lengths& lengths) {
  std::uint64_t cost = 0;
  for (std::size_t s = 0; s < 256; ++s) {
    cost += counts[s] * lengths[s];
  }
  return cost;
}

// Kraft sum in units of 2^-11; a complete code sums to 2^11.
std::uint64_t kraft(const wisp::huffman_lengths& lengths) {
  std::uint64_t k = 0;
  for (const std::uint8_t l : lengths) {
    k += l == 0 ? 0 : std::uint64_t{1} << (wisp::huffman_max_bits - l);
  }
  return k;
}

counts_t random_counts(std::mt19937_64& rng, int symbols, double skew) {
  counts_t c{};
  std::vector<int> pick(256);
  std::iota(pick.begin(), pick.end(), 0);
  std::shuffle(pick.begin(), pick.end(), rng);
  for (int i = 0; i < symbols; ++i) {
    c[static_cast<std::size_t>(pick[static_cast<std::size_t>(i)])] =
        1 + static_cast<std::uint64_t>(std::pow(skew, -i) * 1e6 * (1 + rng() % 100) / 100);
  }
  return c;
}

TEST(Huffman, LengthsAreOptimalWhenNoLimitApplies) {
  std::mt19937_64 rng(1);
  int optimal_cases = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int symbols = 2 + static_cast<int>(rng() % 60);
    const counts_t c = random_counts(rng, symbols, 1.0 + static_cast<double>(rng() % 50) / 100);
    const auto lengths = wisp::detail::huffman_code_lengths(c);
    EXPECT_EQ(kraft(lengths), 2048u);
    const int deepest = *std::max_element(lengths.begin(), lengths.end());
    ASSERT_LE(deepest, wisp::huffman_max_bits);
    // Optimal whenever an optimal code fits in 11 bits; never better than optimal.
    const auto [best, depth] = textbook(c);
    EXPECT_GE(cost_of(c, lengths), best);
    if (depth <= wisp::huffman_max_bits) {
      EXPECT_EQ(cost_of(c, lengths), best) << "trial " << trial;
      ++optimal_cases;
    }
  }
  EXPECT_GT(optimal_cases, 100);
}

TEST(Huffman, LongTailsAreLimitedTo11BitsAndStayComplete) {
  counts_t c{};
  for (std::size_t s = 0; s < 40; ++s) {
    c[s] = std::uint64_t{1} << (40 - s);  // geometric: the textbook code is 39 bits deep
  }
  const auto lengths = wisp::detail::huffman_code_lengths(c);
  EXPECT_EQ(*std::max_element(lengths.begin(), lengths.end()), wisp::huffman_max_bits);
  EXPECT_EQ(kraft(lengths), 2048u);
  for (std::size_t s = 0; s < 40; ++s) {
    EXPECT_GT(lengths[s], 0) << s;
  }
}

TEST(Huffman, CanonicalCodesArePrefixFreeAndTheTableDecodesBitByBit) {
  std::mt19937_64 rng(2);
  for (int trial = 0; trial < 40; ++trial) {
    const counts_t c = random_counts(rng, 2 + static_cast<int>(rng() % 200), 1.3);
    const auto lengths = wisp::detail::huffman_code_lengths(c);
    const auto codes = wisp::detail::huffman_codes(lengths);
    // Prefix-free: no code is the start of another (codes are stored bit-reversed, LSB first).
    for (std::size_t a = 0; a < 256; ++a) {
      for (std::size_t b = 0; b < 256; ++b) {
        if (a != b && lengths[a] != 0 && lengths[b] != 0 && lengths[a] <= lengths[b]) {
          const unsigned mask = (1u << lengths[a]) - 1;
          ASSERT_NE(codes[b] & mask, codes[a]) << a << " is a prefix of " << b;
        }
      }
    }
    auto table = std::make_unique<wisp::huffman_table>();
    ASSERT_TRUE(wisp::detail::build_huffman_table(lengths, *table));
    // Every window: decode it code by code by searching the code list, compare with the entry.
    for (std::uint32_t w = 0; w < 2048; ++w) {
      std::vector<std::uint8_t> expected;
      unsigned used = 0;
      unsigned first_bits = 0;
      while (expected.size() < 6) {
        bool matched = false;
        for (std::size_t s = 0; s < 256 && !matched; ++s) {
          const unsigned l = lengths[s];
          if (l != 0 && used + l <= 11 && ((w >> used) & ((1u << l) - 1)) == codes[s]) {
            expected.push_back(static_cast<std::uint8_t>(s));
            first_bits = expected.size() == 1 ? l : first_bits;
            used += l;
            matched = true;
          }
        }
        if (!matched) {
          break;
        }
      }
      const std::uint64_t e = table->entry[w];
      ASSERT_EQ((e >> 48) & 0xF, expected.size()) << "window " << w;
      ASSERT_EQ((e >> 52) & 0xF, used);
      ASSERT_EQ((e >> 56) & 0xF, first_bits);
      for (std::size_t i = 0; i < expected.size(); ++i) {
        ASSERT_EQ((e >> (8 * i)) & 0xFF, expected[i]);
      }
    }
  }
}

TEST(Huffman, IncompleteOrOverlongCodesAreRejected) {
  auto table = std::make_unique<wisp::huffman_table>();
  wisp::huffman_lengths l{};
  EXPECT_FALSE(wisp::detail::build_huffman_table(l, *table));  // no symbol
  l[3] = 1;
  EXPECT_FALSE(wisp::detail::build_huffman_table(l, *table));  // one symbol, half the space
  l[4] = 2;
  EXPECT_FALSE(wisp::detail::build_huffman_table(l, *table));  // 3/4 of the space
  l[5] = 2;
  EXPECT_TRUE(wisp::detail::build_huffman_table(l, *table));
  l[6] = 2;
  EXPECT_FALSE(wisp::detail::build_huffman_table(l, *table));  // over-subscribed
  l = {};
  l[0] = 12;
  l[1] = 1;
  EXPECT_FALSE(wisp::detail::build_huffman_table(l, *table));  // longer than 11 bits
}

std::vector<std::uint8_t> round_trip(const std::vector<std::uint8_t>& symbols,
                                     wisp::huffman_coder coder) {
  std::vector<std::uint8_t> enc;
  coder.encode(symbols, enc);
  std::vector<std::uint8_t> back(symbols.size(), 0x5A);
  coder.decode(enc, back);
  return back;
}

TEST(Huffman, RoundTripsEveryShapeLengthAndBlock) {
  std::mt19937_64 rng(3);
  const std::vector<std::uint32_t> blocks = {1, 2, 7, 31, 32, 33, 100, 4096};
  for (std::size_t n : {0u, 1u, 2u, 3u, 31u, 32u, 33u, 63u, 64u, 65u, 1000u, 4097u, 30000u}) {
    for (int shape = 0; shape < 5; ++shape) {
      std::vector<std::uint8_t> s(n);
      for (std::uint8_t& x : s) {
        switch (shape) {
          case 0:
            x = 120;
            break;  // one symbol
          case 1:
            x = static_cast<std::uint8_t>(rng() % 2 == 0 ? 3 : 250);
            break;  // two
          case 2:
            x = static_cast<std::uint8_t>(rng());
            break;  // uniform 8 bits
          case 3:
            x = static_cast<std::uint8_t>(118 + std::countr_zero(rng() | (1ull << 40)));
            break;
          default:
            x = static_cast<std::uint8_t>(rng() % 100 == 0 ? rng() % 256 : 120 + rng() % 6);
        }
      }
      for (const std::uint32_t block : blocks) {
        ASSERT_EQ(round_trip(s, {.block = block}), s)
            << "n " << n << " shape " << shape << " block " << block;
      }
    }
  }
}

TEST(Huffman, SizeIsWithinGallagersBoundOfTheEntropy) {
  // Huffman's redundancy is below p_max + 0.086 bits per symbol (Gallager 1978); block offsets
  // add 4 bytes per sub-stream, the header 7 bytes and the code lengths.
  const std::vector<wisp::bf16> w = wisp::test::gaussian_bf16(1 << 18, 0.02f, 4);
  std::vector<std::uint8_t> sm(w.size()), ex(w.size());
  wisp::split_bf16(w, sm, ex);
  const wisp::exponent_counts h = wisp::exponent_histogram(w);
  const double p_max = static_cast<double>(*std::max_element(h.begin(), h.end())) / w.size();
  std::vector<std::uint8_t> enc;
  wisp::huffman_coder{}.encode(ex, enc);
  const double overhead =
      7 + (enc[2] - enc[1] + 2) / 2 + 4.0 * std::ceil(static_cast<double>(w.size()) / 4096.0);
  const double bits = (static_cast<double>(enc.size()) - overhead) * 8 / w.size();
  EXPECT_GE(bits, wisp::entropy_bits(h));
  EXPECT_LE(bits, wisp::entropy_bits(h) + p_max + 0.086);
}

std::vector<std::uint8_t> sample_encoding(std::size_t n, std::uint32_t block) {
  std::mt19937_64 rng(9);
  std::vector<std::uint8_t> s(n);
  for (std::uint8_t& x : s) {
    x = static_cast<std::uint8_t>(118 + std::countr_zero(rng() | (1ull << 12)));
  }
  std::vector<std::uint8_t> enc;
  wisp::huffman_coder{.block = block}.encode(s, enc);
  return enc;
}

TEST(Huffman, MalformedEncodingsThrowFormatError) {
  const std::size_t n = 3000;
  const std::vector<std::uint8_t> good = sample_encoding(n, 256);
  std::vector<std::uint8_t> out(n);
  auto rejects = [&](std::vector<std::uint8_t> bad, std::size_t symbols) {
    std::vector<std::uint8_t> o(symbols);
    EXPECT_THROW(wisp::huffman_coder{}.decode(bad, o), wisp::format_error);
  };
  rejects({}, n);
  rejects({2}, n);         // unknown mode
  rejects({0, 7, 7}, n);   // single-symbol chunk of 3 bytes
  rejects({1}, 1);         // truncated header
  rejects(good, n + 300);  // more sub-streams than offsets
  for (std::size_t cut = 0; cut < good.size(); ++cut) {
    rejects(std::vector<std::uint8_t>(good.begin(), good.begin() + static_cast<long>(cut)), n);
  }
  std::vector<std::uint8_t> longer = good;
  longer.push_back(0);
  rejects(longer, n);
  std::vector<std::uint8_t> zero_block = good;
  const std::size_t block_at = 3 + (std::size_t{good[2]} - good[1] + 2) / 2;
  std::fill_n(zero_block.begin() + static_cast<long>(block_at), 4, 0);
  rejects(zero_block, n);
  EXPECT_NO_THROW(wisp::huffman_coder{}.decode(good, out));
}

TEST(Huffman, RandomCorruptionNeverCrashes) {
  // Without the container's CRCs a flipped data bit can decode to other symbols; what must hold
  // is that decoding either throws format_error or fills exactly the output, never more.
  const std::size_t n = 2000;
  const std::vector<std::uint8_t> good = sample_encoding(n, 128);
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<std::uint8_t> b = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      b[rng() % b.size()] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
    }
    std::vector<std::uint8_t> out(n + 64, 0xEE);
    try {
      wisp::huffman_coder{}.decode(b, std::span(out).first(n));
    } catch (const wisp::format_error&) {
    }
    for (std::size_t i = n; i < out.size(); ++i) {
      ASSERT_EQ(out[i], 0xEE) << "wrote past the output, trial " << trial;
    }
  }
}

}  // namespace

namespace {

TEST(Huffman, TableCacheBuildsOneTablePerCodeAndDecodesAlike) {
  const std::vector<wisp::bf16> w = wisp::test::gaussian_bf16(50000, 0.02f, 13);
  const wisp::compressed_bf16 z = wisp::compressed_bf16::compress(w, wisp::huffman_coder{}, 5);
  wisp::huffman_table_cache tables;
  const wisp::huffman_table* first = nullptr;
  for (std::uint32_t j = 0; j < z.e_chunks(); ++j) {
    const wisp::chunk_ref& r = z.e_chunk(j);
    const wisp::huffman_chunk with_cache(z.chunk_bytes(r), r.count, tables);
    const wisp::huffman_chunk alone(z.chunk_bytes(r), r.count);
    // The chunks share their code: the cache hands out one table for all of them.
    first = j == 0 ? &with_cache.table() : first;
    EXPECT_EQ(&with_cache.table(), first) << j;
    EXPECT_NE(&alone.table(), first);
    std::vector<std::uint8_t> a(r.count), b(r.count);
    with_cache.decode(a);
    alone.decode(b);
    EXPECT_EQ(a, b) << j;
    EXPECT_EQ(0, std::memcmp(&with_cache.table(), &alone.table(), sizeof(wisp::huffman_table)));
  }
  // Another code replaces the cached table; a table handed out earlier stays valid.
  const std::shared_ptr<const wisp::huffman_table> kept = tables.get([] {
    wisp::huffman_lengths l{};
    l[0] = 1;
    l[1] = 1;
    return l;
  }());
  ASSERT_NE(kept, nullptr);
  EXPECT_NE(kept.get(), first);
  EXPECT_EQ(tables.get(wisp::huffman_lengths{}), nullptr);  // not a code: no table
  wisp::huffman_lengths two{};
  two[0] = 1;
  two[1] = 1;
  EXPECT_EQ(tables.get(two), kept);  // still cached after the refused lookup
}

TEST(Huffman, FittedCodeIsSharedByEveryChunkOfATensor) {
  const std::vector<wisp::bf16> w = wisp::test::gaussian_bf16(50000, 0.02f, 12);
  const wisp::compressed_bf16 z = wisp::compressed_bf16::compress(w, wisp::huffman_coder{}, 5);
  // The code lengths follow the 3-byte mode/first/last prefix; every chunk has the same ones.
  const auto header_of = [&](std::uint32_t j) {
    const std::span<const std::uint8_t> b = z.chunk_bytes(z.e_chunk(j));
    return std::vector<std::uint8_t>(b.begin(), b.begin() + 3 + (b[2] - b[1] + 2) / 2);
  };
  for (std::uint32_t j = 1; j < 5; ++j) {
    EXPECT_EQ(header_of(j), header_of(0)) << j;
  }
  // A fitted code must cover what it encodes.
  const std::vector<std::uint8_t> some = {1, 2, 2, 3};
  const std::vector<std::uint8_t> other = {1, 9};
  std::vector<std::uint8_t> sink;
  wisp::test::expect_error([&] { wisp::huffman_coder{}.fitted(some).encode(other, sink); },
                           "symbol 9 has no code");
}

}  // namespace
