// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `huffman_coder`: canonical, length-limited Huffman over the 256 exponent symbols, with a
/// table-driven decoder that is `WISP_HOST_DEVICE`, so the same code decodes on the CPU and in a
/// CUDA kernel.
///
/// Encoded layout (all integers little-endian; the symbol count comes from the container):
/// - 0 symbols: nothing.
/// - one distinct symbol: `00 <symbol>` (2 bytes).
/// - otherwise: `01`, the first and the last symbol with a code `f <= l` (u8 each), then
///   `ceil(c / 2)` bytes of 4-bit code lengths of the `c = l - f + 1` symbols from `f` (symbol
///   `f + 2i` in the low nibble of byte i, a last odd high nibble 0; 0 = no code, at most
///   `huffman_max_bits`; the code must be complete), the u32 sub-stream size `B` (symbols), `S =
///   ceil(n / B)` u32 end offsets of the sub-streams relative to the data, then the data. Exponents
///   of real weights span about 30 values, so the lengths take ~15 bytes. Sub-stream j holds
///   symbols `[jB, min(n, (j+1)B))` as canonical codes written least-significant bit first; each
///   ends on a byte boundary with zero padding bits.
///
/// Independent sub-streams are what makes decoding parallel: the host decodes four of them in
/// lockstep (four independent dependency chains), a GPU gives each its own thread. Each table
/// lookup decodes up to six symbols at once (the whole 11-bit window), which at ~2.6 bits per
/// exponent is 3-4 symbols per lookup.
/// @code
/// wisp::huffman_coder h;
/// std::vector<std::uint8_t> enc;
/// h.encode(exponents, enc);
/// std::vector<std::uint8_t> back(exponents.size());
/// h.decode(enc, back);                                  // == exponents
/// @endcode
#pragma once

#include <wisp/compress/exponent_coder.hpp>
#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace wisp {

/// Longest code, and the width of the decode table's index (2^11 entries of 8 bytes: 16 KiB).
inline constexpr int huffman_max_bits = 11;
/// Default symbols per sub-stream: 4 bytes of offset per 4096 symbols (0.008 bits per symbol).
inline constexpr std::uint32_t huffman_default_block = 4096;

/// @brief The decode table of one code: entry `i` is what the 11-bit window `i` (next bits of the
/// stream, least significant first) decodes to. Trivially copyable: a kernel takes it by pointer
/// (global or shared memory).
///
/// Entry layout: bits 0..47 up to six symbols (symbol j in bits 8j..8j+7), bits 48..51 their
/// count, bits 52..55 the bits they take, bits 56..59 the bits of the first symbol alone.
struct huffman_table {
  std::uint64_t entry[std::size_t{1} << huffman_max_bits];
};

namespace detail {

inline constexpr std::uint32_t huffman_window_mask = (1u << huffman_max_bits) - 1;
inline constexpr std::uint32_t huffman_max_block = std::uint32_t{1} << 24;

/// Code lengths of a complete, canonical code, one per symbol (0 = absent).
using huffman_lengths = std::array<std::uint8_t, 256>;

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

/// @brief Decoding state of one sub-stream: the next unread byte, a bit buffer, where the
/// symbols go. All member functions are `WISP_HOST_DEVICE` and never touch memory outside
/// `data[0, limit)` and `[out, out_end)`, whatever the bytes.
struct huffman_lane {
  const std::uint8_t* data;  ///< the chunk's data (all sub-streams)
  std::size_t limit;         ///< readable bytes of `data`; loads past it read zeros
  std::size_t begin;         ///< offset of this sub-stream
  std::size_t next;          ///< offset of the next byte to load into `buffer`
  std::uint64_t buffer;      ///< unread bits, least significant first
  unsigned bits;             ///< valid bits in `buffer`
  std::uint8_t* out;         ///< next symbol goes here
  std::uint8_t* out_end;     ///< end of this sub-stream's symbols

  /// Tops the buffer up to at least 56 bits. `Checked = false` is for callers that know the
  /// 8 bytes at `next` lie before `limit`.
  template <bool Checked = true>
  WISP_HOST_DEVICE void refill() noexcept {
    std::uint64_t word = 0;
    if (!Checked || next + 8 <= limit) {
      word = load_le64(data + next);
    } else {
      for (std::size_t i = 0; i < 8 && next + i < limit; ++i) {
        word |= static_cast<std::uint64_t>(data[next + i]) << (8 * i);
      }
    }
    // Bytes beyond the `take` consumed ones land above `bits` and are loaded again next time
    // (OR-ing the same bits twice changes nothing).
    buffer |= word << bits;
    const unsigned take = (63 - bits) >> 3;
    next += take;
    bits += take * 8;
  }

  /// Decodes four table windows (4 to 24 symbols, 7 input bytes at most); needs at least 32
  /// bytes of room in `out`.
  template <bool Checked = true>
  WISP_HOST_DEVICE void step4(const huffman_table& t) noexcept {
    refill<Checked>();
    for (int k = 0; k < 4; ++k) {
      const std::uint64_t e = t.entry[buffer & huffman_window_mask];
      store_le64(out, e);  // symbols past the count are overwritten by the next window
      const unsigned used = static_cast<unsigned>(e >> 52) & 0xFu;
      out += (e >> 48) & 0xFu;
      buffer >>= used;
      bits -= used;
    }
  }

  /// Decodes the symbols left, one at a time.
  WISP_HOST_DEVICE void finish(const huffman_table& t) noexcept {
    while (out < out_end) {
      if (bits < huffman_max_bits) {
        refill();
      }
      const std::uint64_t e = t.entry[buffer & huffman_window_mask];
      const unsigned used = static_cast<unsigned>(e >> 56) & 0xFu;
      *out++ = static_cast<std::uint8_t>(e);
      buffer >>= used;
      bits -= used;
    }
  }

  /// Decodes everything: four windows at a time while there is room, then one symbol at a time.
  WISP_HOST_DEVICE void run(const huffman_table& t) noexcept {
    huffman_lane l = *this;  // a local copy the compiler keeps in registers (stores to `out`
    while (l.out_end - l.out >= 32) {  // could otherwise alias the members)
      l.step4(t);
    }
    l.finish(t);
    *this = l;
  }

  /// Little-endian 8-byte load and store at any alignment: one memory access on little-endian
  /// hosts, bytes assembled one by one elsewhere (big-endian hosts, device code).
#if defined(__CUDA_ARCH__)
  static constexpr bool native_le64 = false;
#else
  static constexpr bool native_le64 = std::endian::native == std::endian::little;
#endif
  [[nodiscard]] WISP_HOST_DEVICE static std::uint64_t load_le64(const std::uint8_t* p) noexcept {
    std::uint64_t v = 0;
    if constexpr (native_le64) {
      std::memcpy(&v, p, 8);
    } else {
      for (int i = 0; i < 8; ++i) {
        v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
      }
    }
    return v;
  }
  WISP_HOST_DEVICE static void store_le64(std::uint8_t* p, std::uint64_t v) noexcept {
    if constexpr (native_le64) {
      std::memcpy(p, &v, 8);
    } else {
      for (int i = 0; i < 8; ++i) {
        p[i] = static_cast<std::uint8_t>(v >> (8 * i));
      }
    }
  }

  /// True if the sub-stream, `size` bytes long, decoded to exactly its symbols with zero padding.
  [[nodiscard]] WISP_HOST_DEVICE bool ended_cleanly(std::size_t size) const noexcept {
    const std::uint64_t loaded_bits = static_cast<std::uint64_t>(next - begin) * 8;
    if (loaded_bits < bits) {
      return false;
    }
    const std::uint64_t consumed = loaded_bits - bits;
    const std::uint64_t padding = (8 - consumed % 8) % 8;
    return (consumed + padding) / 8 == size && (buffer & ((std::uint64_t{1} << padding) - 1)) == 0;
  }
};

[[nodiscard]] inline std::uint32_t load_u32(const std::uint8_t* p) noexcept {
  return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
         static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
}

inline void append_u32(std::vector<std::uint8_t>& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) {
    out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  }
}

}  // namespace detail

/// @brief A parsed Huffman E-chunk: its decode table, sub-stream bounds and data, ready to decode
/// all or some of its sub-streams (on the host here; a kernel can take `table()` and the offsets).
/// Construction validates everything that decoding relies on. It views the encoded bytes: keep
/// them alive while it is used. Thread safety: const calls may run concurrently.
class huffman_chunk {
 public:
  /// Parses `encoded`, the encoding of `symbols` symbols. O(2^11 + sub-streams).
  /// @throws wisp::format_error naming the problem and its byte offset within `encoded`.
  huffman_chunk(std::span<const std::uint8_t> encoded, std::size_t symbols) : symbols_(symbols) {
    if (symbols == 0) {
      expect(encoded.empty(), 0, "an empty Huffman E-chunk must have no bytes");
      return;
    }
    expect(!encoded.empty(), 0, "Huffman E-chunk is empty");
    if (encoded[0] == 0) {
      expect(encoded.size() == 2, 0, "single-symbol Huffman E-chunk must be 2 bytes");
      single_ = encoded[1];
      return;
    }
    expect(encoded[0] == 1, 0, "unknown Huffman E-chunk mode " + std::to_string(encoded[0]));
    expect(encoded.size() >= 3, 0, "truncated Huffman header");
    const std::size_t first = encoded[1];
    expect(first <= encoded[2], 1,
           "Huffman code lengths from symbol " + std::to_string(first) + " to " +
               std::to_string(encoded[2]) + " are out of order");
    const std::size_t count = std::size_t{encoded[2]} + 1 - first;
    const std::size_t lengths_bytes = (count + 1) / 2;
    const std::size_t block_at = 3 + lengths_bytes;
    expect(encoded.size() >= block_at + 4, 0, "truncated Huffman header");
    detail::huffman_lengths lengths{};
    for (std::size_t i = 0; i < count; ++i) {
      const std::uint8_t packed = encoded[3 + i / 2];
      lengths[first + i] = static_cast<std::uint8_t>(i % 2 == 0 ? packed & 0x0Fu : packed >> 4);
    }
    expect(count % 2 == 0 || (encoded[block_at - 1] >> 4) == 0, block_at - 1,
           "unused nibble of the Huffman code lengths is not zero");
    table_ = cached_table(lengths);
    expect(table_ != nullptr, 3,
           "Huffman code lengths do not form a complete code of 2+ symbols up to 11 bits");
    block_ = detail::load_u32(encoded.data() + block_at);
    expect(block_ >= 1 && block_ <= detail::huffman_max_block, block_at,
           "Huffman sub-stream size " + std::to_string(block_) + " is outside [1, 2^24]");
    const std::size_t streams = (symbols + block_ - 1) / block_;
    const std::size_t offsets_at = block_at + 4;
    expect((encoded.size() - offsets_at) / 4 >= streams, offsets_at,
           "truncated Huffman sub-stream offsets");
    data_ = encoded.subspan(offsets_at + 4 * streams);
    ends_.resize(streams);
    std::uint32_t previous = 0;
    for (std::size_t j = 0; j < streams; ++j) {
      ends_[j] = detail::load_u32(encoded.data() + offsets_at + 4 * j);
      expect(ends_[j] >= previous && ends_[j] <= data_.size(), offsets_at + 4 * j,
             "Huffman sub-stream end " + std::to_string(ends_[j]) + " is out of order or past " +
                 "the data (" + std::to_string(data_.size()) + " bytes)");
      previous = ends_[j];
    }
    expect(previous == data_.size(), offsets_at + 4 * (streams - 1),
           "Huffman data has " + std::to_string(data_.size() - previous) + " trailing bytes");
  }

  /// Sub-streams (0 for an empty or single-symbol chunk).
  [[nodiscard]] std::size_t substreams() const noexcept { return ends_.size(); }
  /// Symbols per sub-stream (the last may hold fewer).
  [[nodiscard]] std::uint32_t block() const noexcept { return block_; }
  /// The decode table (valid when `substreams() > 0`).
  [[nodiscard]] const huffman_table& table() const noexcept { return *table_; }

  /// Decodes every symbol into `out` (exactly `symbols` long), four sub-streams in lockstep.
  /// O(symbols). @throws wisp::logic_error on a wrong `out` size, wisp::format_error if a
  /// sub-stream is not exactly the encoding of its symbols.
  void decode(std::span<std::uint8_t> out) const {
    WISP_EXPECTS(out.size() == symbols_, "huffman_chunk::decode: ", out.size(),
                 " output bytes for ", symbols_, " symbols");
    decode_groups(out, [](std::size_t, std::size_t) {});
  }

  /// Decodes into `out` like `decode`, calling `consume(first, count)` after each group of up to
  /// four sub-streams, while those symbols are still in L1: the container recovers BF16 values
  /// there instead of streaming all exponents out and back.
  template <class Consume>
  void decode_groups(std::span<std::uint8_t> out, Consume&& consume) const {
    WISP_EXPECTS(out.size() == symbols_, "huffman_chunk::decode_groups: ", out.size(),
                 " output bytes for ", symbols_, " symbols");
    if (ends_.empty()) {
      if (!out.empty()) {  // an empty span may have a null data()
        std::memset(out.data(), single_, out.size());
      }
      consume(std::size_t{0}, out.size());
      return;
    }
    constexpr std::size_t lanes = 4;
    std::size_t j = 0;
    for (; j + lanes <= ends_.size(); j += lanes) {
      // Four named lanes (not an array) so that all four states stay in registers.
      detail::huffman_lane a = make_lane(j, out);
      detail::huffman_lane b = make_lane(j + 1, out);
      detail::huffman_lane c = make_lane(j + 2, out);
      detail::huffman_lane d = make_lane(j + 3, out);
      // Rounds of steps that no lane can overrun: a step writes at most 24 symbols and reads at
      // most 7 bytes, so the checks leave the inner loop (lanes advance at different rates).
      auto safe_steps = [&](const detail::huffman_lane& l) -> std::size_t {
        const auto room = static_cast<std::size_t>(l.out_end - l.out);
        const std::size_t by_out = room < 32 ? 0 : (room - 32) / 24 + 1;
        const std::size_t by_in = l.next + 15 > l.limit ? 0 : (l.limit - l.next - 15) / 7 + 1;
        return std::min(by_out, by_in);
      };
      for (;;) {
        const std::size_t steps =
            std::min({safe_steps(a), safe_steps(b), safe_steps(c), safe_steps(d)});
        if (steps == 0) {
          break;
        }
        for (std::size_t k = 0; k < steps; ++k) {
          a.step4<false>(*table_);
          b.step4<false>(*table_);
          c.step4<false>(*table_);
          d.step4<false>(*table_);
        }
      }
      a.run(*table_);
      b.run(*table_);
      c.run(*table_);
      d.run(*table_);
      check_end(a, j);
      check_end(b, j + 1);
      check_end(c, j + 2);
      check_end(d, j + 3);
      consume(j * block_, std::min<std::size_t>(symbols_, (j + lanes) * block_) - j * block_);
    }
    for (; j < ends_.size(); ++j) {
      detail::huffman_lane lane = make_lane(j, out);
      lane.run(*table_);
      check_end(lane, j);
      consume(j * block_, std::min<std::size_t>(symbols_, (j + 1) * block_) - j * block_);
    }
  }

 private:
  // The decode table of `lengths`, or nullptr if they are not a valid code. The table of the
  // last code seen on this thread is kept: the E-chunks of one tensor share their code
  // (`huffman_coder::fitted`), so a tensor builds its table once, not once per chunk.
  static std::shared_ptr<const huffman_table> cached_table(const detail::huffman_lengths& lengths) {
    thread_local detail::huffman_lengths last_lengths{};
    thread_local std::shared_ptr<const huffman_table> last_table;
    if (last_table != nullptr && lengths == last_lengths) {
      return last_table;
    }
    auto table = std::make_shared<huffman_table>();
    if (!detail::build_huffman_table(lengths, *table)) {
      return nullptr;
    }
    last_lengths = lengths;
    last_table = table;
    return table;
  }
  static void expect(bool ok, std::size_t offset, const std::string& what) {
    if (!ok) [[unlikely]] {
      throw format_error(offset, what);
    }
  }
  [[nodiscard]] std::size_t begin_of(std::size_t j) const noexcept {
    return j == 0 ? 0 : ends_[j - 1];
  }
  [[nodiscard]] detail::huffman_lane make_lane(std::size_t j, std::span<std::uint8_t> out) const {
    const std::size_t first = j * block_;
    const std::size_t last = std::min(symbols_, first + block_);
    return {data_.data(),       data_.size(),     begin_of(j), begin_of(j), 0, 0,
            out.data() + first, out.data() + last};
  }
  void check_end(const detail::huffman_lane& lane, std::size_t j) const {
    expect(
        lane.ended_cleanly(ends_[j] - begin_of(j)), format_error::no_offset,
        "Huffman sub-stream " + std::to_string(j) + " does not decode to exactly its " + "symbols");
  }

  std::shared_ptr<const huffman_table> table_;  // 16 KiB, shared with the thread's cache
  std::size_t symbols_ = 0;
  std::uint32_t block_ = 0;
  std::uint8_t single_ = 0;
  std::span<const std::uint8_t> data_;
  std::vector<std::uint32_t> ends_;
};

namespace detail {
/// The Huffman encoding of `symbols` with sub-streams of `block` symbols, appended to `sink`;
/// with the code `code` when given (it must cover every symbol), else the chunk's own.
inline void huffman_encode(std::span<const std::uint8_t> symbols, std::uint32_t block,
                           const huffman_lengths* code, std::vector<std::uint8_t>& sink) {
  WISP_EXPECTS(block >= 1 && block <= huffman_max_block, "huffman_coder: block ", block,
               " is outside [1, 2^24]");
  if (symbols.empty()) {
    return;
  }
  std::array<std::uint64_t, 256> counts{};
  for (const std::uint8_t s : symbols) {
    ++counts[s];
  }
  if (std::count_if(counts.begin(), counts.end(), [](std::uint64_t c) { return c != 0; }) == 1) {
    sink.push_back(0);
    sink.push_back(symbols[0]);
    return;
  }
  const huffman_lengths lengths = code != nullptr ? *code : huffman_code_lengths(counts);
  for (std::size_t x = 0; x < 256; ++x) {
    WISP_EXPECTS(counts[x] == 0 || lengths[x] != 0, "huffman_coder: symbol ", x,
                 " has no code in the fitted code lengths");
  }
  const std::array<std::uint16_t, 256> codes = huffman_codes(lengths);
  std::size_t first = 0;
  while (lengths[first] == 0) {
    ++first;
  }
  std::size_t last = 255;
  while (lengths[last] == 0) {
    --last;
  }
  const std::size_t count = last + 1 - first;
  sink.push_back(1);
  sink.push_back(static_cast<std::uint8_t>(first));
  sink.push_back(static_cast<std::uint8_t>(last));
  for (std::size_t i = 0; i < count; i += 2) {
    const std::uint8_t high = i + 1 < count ? lengths[first + i + 1] : 0;
    sink.push_back(static_cast<std::uint8_t>(lengths[first + i] | (high << 4)));
  }
  append_u32(sink, block);
  const std::size_t streams = (symbols.size() + block - 1) / block;
  const std::size_t offsets_at = sink.size();
  sink.resize(sink.size() + 4 * streams);
  const std::size_t data_at = sink.size();
  for (std::size_t j = 0; j < streams; ++j) {
    std::uint64_t acc = 0;
    unsigned filled = 0;
    const std::size_t last = std::min(symbols.size(), (j + 1) * block);
    for (std::size_t i = j * block; i < last; ++i) {
      acc |= static_cast<std::uint64_t>(codes[symbols[i]]) << filled;
      filled += lengths[symbols[i]];
      while (filled >= 8) {
        sink.push_back(static_cast<std::uint8_t>(acc));
        acc >>= 8;
        filled -= 8;
      }
    }
    if (filled > 0) {
      sink.push_back(static_cast<std::uint8_t>(acc));
    }
    const std::size_t end = sink.size() - data_at;
    WISP_EXPECTS(end <= 0xFFFFFFFFu, "huffman_coder: E-chunk data of ", end,
                 " bytes exceeds 4 GiB; use more E-chunks");
    for (int b = 0; b < 4; ++b) {
      sink[offsets_at + 4 * j + static_cast<std::size_t>(b)] =
          static_cast<std::uint8_t>(end >> (8 * b));
    }
  }
}
}  // namespace detail

/// @brief Canonical Huffman exponent coder (see the file comment for its layout). Stateless
/// apart from the sub-stream size; every call is thread-safe.
struct huffman_coder {
  /// Symbols per independently decodable sub-stream: smaller means more parallelism (GPU
  /// threads) and more offset bytes.
  std::uint32_t block = huffman_default_block;

  [[nodiscard]] coder_id id() const noexcept { return coder_id::huffman; }
  /// "huffman", or "huffman-b<block>" for a sub-stream size other than the default.
  [[nodiscard]] std::string name() const {
    return block == huffman_default_block ? "huffman" : "huffman-b" + std::to_string(block);
  }

  /// Appends the encoding of `symbols`, with a code fitted to them. O(n + 256 log 256).
  /// @throws wisp::logic_error if `block` is outside [1, 2^24] or a sub-stream would exceed 4 GiB.
  void encode(std::span<const std::uint8_t> symbols, std::vector<std::uint8_t>& sink) const {
    detail::huffman_encode(symbols, block, nullptr, sink);
  }

  /// Decodes exactly `out.size()` symbols from `encoded`. O(n).
  /// @throws wisp::format_error on any input that is not such an encoding.
  void decode(std::span<const std::uint8_t> encoded, std::span<std::uint8_t> out) const {
    huffman_chunk(encoded, out.size()).decode(out);
  }

  /// This coder with one code for all of `symbols` (a whole tensor's exponents), so that its
  /// E-chunks share a code and a decoder builds one table per tensor instead of one per chunk.
  /// Costs a little size when chunks differ (a tensor's chunks rarely do). O(n).
  [[nodiscard]] struct fitted_huffman_coder fitted(std::span<const std::uint8_t> symbols) const;
};
static_assert(exponent_coder<huffman_coder>);

/// @brief `huffman_coder` with one code for a whole stream, made by `huffman_coder::fitted`;
/// writes the same format.
struct fitted_huffman_coder {
  std::uint32_t block = huffman_default_block;
  std::shared_ptr<const detail::huffman_lengths> code;  ///< null: each chunk gets its own

  [[nodiscard]] coder_id id() const noexcept { return coder_id::huffman; }
  [[nodiscard]] std::string name() const { return huffman_coder{block}.name(); }
  /// @throws wisp::logic_error as `huffman_coder::encode`, or if a symbol has no code.
  void encode(std::span<const std::uint8_t> symbols, std::vector<std::uint8_t>& sink) const {
    detail::huffman_encode(symbols, block, code.get(), sink);
  }
  void decode(std::span<const std::uint8_t> encoded, std::span<std::uint8_t> out) const {
    huffman_coder{block}.decode(encoded, out);
  }
};
static_assert(exponent_coder<fitted_huffman_coder>);

inline fitted_huffman_coder huffman_coder::fitted(std::span<const std::uint8_t> symbols) const {
  std::array<std::uint64_t, 256> counts{};
  for (const std::uint8_t x : symbols) {
    ++counts[x];
  }
  fitted_huffman_coder out{block, nullptr};
  if (std::count_if(counts.begin(), counts.end(), [](std::uint64_t c) { return c != 0; }) >= 2) {
    out.code =
        std::make_shared<const detail::huffman_lengths>(detail::huffman_code_lengths(counts));
  }
  return out;
}
static_assert(fittable_coder<huffman_coder>);

}  // namespace wisp
