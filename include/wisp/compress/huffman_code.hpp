// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The code of `huffman_coder`: canonical, length-limited Huffman code lengths over the 256
/// exponent symbols, their canonical codes, and the decode table a decoder (host or device) looks
/// windows of the stream up in; `huffman_table_cache`, the table of the last code a decoder saw,
/// which a caller keeps per decoding thread so a tensor whose E-chunks share a code builds its
/// table once.
/// @code
/// wisp::huffman_table_cache tables;                       // one per decoding thread
/// auto t = tables.get(lengths);                           // built once per distinct code
/// @endcode
#pragma once

#include <wisp/core/config.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace wisp {

/// Longest code, and the width of the decode table's index (2^11 entries of 8 bytes: 16 KiB).
inline constexpr int huffman_max_bits = 11;

/// @brief The decode table of one code: entry `i` is what the 11-bit window `i` (next bits of the
/// stream, least significant first) decodes to. Trivially copyable: a kernel takes it by pointer
/// (global or shared memory).
///
/// Entry layout: bits 0..47 up to six symbols (symbol j in bits 8j..8j+7), bits 48..51 their
/// count, bits 52..55 the bits they take, bits 56..59 the bits of the first symbol alone.
struct huffman_table {
  std::uint64_t entry[std::size_t{1} << huffman_max_bits];
};

/// Code lengths of a canonical code, one per symbol (0 = the symbol has no code).
using huffman_lengths = std::array<std::uint8_t, 256>;

namespace detail {

inline constexpr std::uint32_t huffman_window_mask = (1u << huffman_max_bits) - 1;

/// Optimal code lengths for `counts`, limited to `huffman_max_bits` by halving the counts of a
/// too-deep code until it fits (deterministic; only long-tailed histograms ever need it). Ties
/// merge the shallower subtree first, which gives the shallowest of the optimal codes, so counts
/// are only flattened when no optimal code fits. Needs at least two symbols with non-zero counts.
/// O(256 log 256) per round.
[[nodiscard]] inline huffman_lengths huffman_code_lengths(std::array<std::uint64_t, 256> counts) {
  for (;;) {
    // Nodes 0..255 are leaves; internal nodes follow. Merge the two lightest, ties by node index.
    std::vector<std::uint64_t> weight;
    std::vector<int> height;
    std::vector<int> parent;
    std::vector<int> live;
    for (int s = 0; s < 256; ++s) {
      weight.push_back(counts[static_cast<std::size_t>(s)]);
      height.push_back(0);
      parent.push_back(-1);
      if (counts[static_cast<std::size_t>(s)] != 0) {
        live.push_back(s);
      }
    }
    auto lighter = [&](int a, int b) {  // min-heap order on (weight, height, node)
      const auto ua = static_cast<std::size_t>(a);
      const auto ub = static_cast<std::size_t>(b);
      if (weight[ua] != weight[ub]) {
        return weight[ua] > weight[ub];
      }
      return height[ua] != height[ub] ? height[ua] > height[ub] : a > b;
    };
    std::make_heap(live.begin(), live.end(), lighter);
    while (live.size() > 1) {
      std::pop_heap(live.begin(), live.end(), lighter);
      const int a = live.back();
      live.pop_back();
      std::pop_heap(live.begin(), live.end(), lighter);
      const int b = live.back();
      live.pop_back();
      const int node = static_cast<int>(weight.size());
      weight.push_back(weight[static_cast<std::size_t>(a)] + weight[static_cast<std::size_t>(b)]);
      height.push_back(
          1 + std::max(height[static_cast<std::size_t>(a)], height[static_cast<std::size_t>(b)]));
      parent.push_back(-1);
      parent[static_cast<std::size_t>(a)] = node;
      parent[static_cast<std::size_t>(b)] = node;
      live.push_back(node);
      std::push_heap(live.begin(), live.end(), lighter);
    }
    huffman_lengths lengths{};
    int deepest = 0;
    for (std::size_t s = 0; s < 256; ++s) {
      if (counts[s] == 0) {
        continue;
      }
      int depth = 0;
      for (int n = static_cast<int>(s); parent[static_cast<std::size_t>(n)] != -1;
           n = parent[static_cast<std::size_t>(n)]) {
        ++depth;
      }
      lengths[s] = static_cast<std::uint8_t>(depth);
      deepest = std::max(deepest, depth);
    }
    if (deepest <= huffman_max_bits) {
      return lengths;
    }
    for (std::uint64_t& c : counts) {
      c = c == 0 ? 0 : (c + 1) / 2;  // flatter counts, shallower tree; never drops a symbol
    }
  }
}

/// Canonical codes (bit-reversed, ready to be written least significant bit first): codes are
/// assigned in order of (length, symbol). `lengths` must describe a complete code.
[[nodiscard]] inline std::array<std::uint16_t, 256> huffman_codes(const huffman_lengths& lengths) {
  std::array<int, huffman_max_bits + 2> per_length{};
  for (const std::uint8_t l : lengths) {
    ++per_length[l];
  }
  per_length[0] = 0;
  std::array<std::uint32_t, huffman_max_bits + 2> next{};
  std::uint32_t code = 0;
  for (int l = 1; l <= huffman_max_bits; ++l) {
    code = (code + static_cast<std::uint32_t>(per_length[static_cast<std::size_t>(l - 1)])) << 1;
    next[static_cast<std::size_t>(l)] = code;
  }
  std::array<std::uint16_t, 256> codes{};
  for (std::size_t s = 0; s < 256; ++s) {
    const int l = lengths[s];
    if (l == 0) {
      continue;
    }
    const std::uint32_t c = next[static_cast<std::size_t>(l)]++;
    std::uint32_t reversed = 0;
    for (int b = 0; b < l; ++b) {
      reversed |= ((c >> b) & 1u) << (l - 1 - b);
    }
    codes[s] = static_cast<std::uint16_t>(reversed);
  }
  return codes;
}

/// Builds the decode table of `lengths`, or returns false if they are not a complete code of at
/// least two symbols with lengths in 1..huffman_max_bits. O(2^11).
[[nodiscard]] inline bool build_huffman_table(const huffman_lengths& lengths, huffman_table& t) {
  std::uint64_t kraft = 0;  // in units of 2^-max_bits
  int used = 0;
  for (const std::uint8_t l : lengths) {
    if (l > huffman_max_bits) {
      return false;
    }
    if (l != 0) {
      kraft += std::uint64_t{1} << (huffman_max_bits - l);
      ++used;
    }
  }
  if (used < 2 || kraft != (std::uint64_t{1} << huffman_max_bits)) {
    return false;
  }
  // Single-symbol table first: every window whose low `l` bits are a code decodes to its symbol.
  const std::array<std::uint16_t, 256> codes = huffman_codes(lengths);
  std::array<std::uint16_t, std::size_t{1} << huffman_max_bits> single{};  // symbol | length << 8
  for (std::size_t s = 0; s < 256; ++s) {
    const int l = lengths[s];
    if (l == 0) {
      continue;
    }
    for (std::uint32_t high = 0; high < (1u << (huffman_max_bits - l)); ++high) {
      single[(high << l) | codes[s]] =
          static_cast<std::uint16_t>(s | (static_cast<unsigned>(l) << 8));
    }
  }
  // Multi-symbol entries by dynamic programming over windows in increasing order: window w starts
  // with the code of single[w] (l bits); what follows is the decoding of the window w >> l (< w,
  // done already) cut to the codes that end within the 11 - l bits that are really there.
  // cumulative[w] holds, per symbol of entry w, the bits up to its end (4 bits each).
  std::array<std::uint32_t, std::size_t{1} << huffman_max_bits> cumulative{};
  for (std::uint32_t w = 0; w <= huffman_window_mask; ++w) {
    const std::uint32_t symbol = single[w] & 0xFFu;
    const std::uint32_t l = single[w] >> 8;
    std::uint64_t symbols = symbol;
    std::uint32_t count = 1;
    std::uint32_t cum = l;
    if (w == 0) {  // all-zero window: the all-zero code again and again
      for (; count < 6 && (count + 1) * l <= huffman_max_bits; ++count) {
        symbols |= static_cast<std::uint64_t>(symbol) << (8 * count);
        cum |= ((count + 1) * l) << (4 * count);
      }
    } else {
      const std::uint32_t rest = w >> l;
      const std::uint64_t rest_entry = t.entry[rest];
      const std::uint32_t rest_count = static_cast<std::uint32_t>(rest_entry >> 48) & 0xFu;
      std::uint32_t take = 0;
      while (take < rest_count && take < 5 &&
             ((cumulative[rest] >> (4 * take)) & 0xFu) <= huffman_max_bits - l) {
        ++take;
      }
      symbols |= (rest_entry & ((std::uint64_t{1} << (8 * take)) - 1)) << 8;
      // Every kept cumulative count grows by l; none exceeds 11, so no nibble carries.
      cum |= ((cumulative[rest] & ((1u << (4 * take)) - 1)) +
              l * (0x11111u & ((1u << (4 * take)) - 1)))
             << 4;
      count += take;
    }
    cumulative[w] = cum;
    const std::uint64_t bits = (cum >> (4 * (count - 1))) & 0xFu;
    t.entry[w] = symbols | (std::uint64_t{count} << 48) | (bits << 52) | (std::uint64_t{l} << 56);
  }
  return true;
}

}  // namespace detail

/// @brief The decode table of the last code a decoder saw. The E-chunks of one tensor share their
/// code (`huffman_coder::fitted`), so a decoder that passes one cache to every chunk it decodes
/// builds one table per tensor instead of one per chunk. Owned by the caller, one per decoding
/// thread (`bf16_decode_scratch` holds one). Not thread-safe; a table handed out stays valid
/// after the cache has moved on to another code (shared ownership).
class huffman_table_cache {
 public:
  /// The decode table of `lengths`: the cached one when `lengths` is the last code seen (O(256)),
  /// else a new one (O(2^11), 16 KiB), which then replaces it; nullptr (cache unchanged) if
  /// `lengths` is not a complete code of at least two symbols with lengths in 1..11.
  /// @throws std::bad_alloc.
  [[nodiscard]] std::shared_ptr<const huffman_table> get(const huffman_lengths& lengths) {
    if (table_ != nullptr && lengths == lengths_) {
      return table_;
    }
    auto table = std::make_shared<huffman_table>();
    if (!detail::build_huffman_table(lengths, *table)) {
      return nullptr;
    }
    lengths_ = lengths;
    table_ = std::move(table);
    return table_;
  }

 private:
  huffman_lengths lengths_{};
  std::shared_ptr<const huffman_table> table_;
};

}  // namespace wisp
