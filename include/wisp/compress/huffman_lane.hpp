// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `huffman_lane`: the decoder of one Huffman sub-stream (see `huffman.hpp` for the
/// encoded layout), `WISP_HOST_DEVICE`, so the host (`huffman_chunk`, four lanes in lockstep) and
/// a CUDA kernel (one lane per thread, `wisp::cuda`'s `decode_huffman_kernel`) decode with the
/// same code.
/// @code
/// // data: a chunk's sub-stream bytes; sub-stream j starts at `begin` and holds block symbols
/// wisp::huffman_lane lane(data, data_bytes, begin, out + j * block, out + (j + 1) * block);
/// lane.run(table);
/// bool ok = lane.ended_cleanly(end - begin);
/// @endcode
#pragma once

#include <wisp/compress/huffman_code.hpp>
#include <wisp/core/config.hpp>
#include <wisp/core/detail/little_endian.hpp>

#include <cstddef>
#include <cstdint>

namespace wisp {

/// @brief Decoding state of one sub-stream: the next unread byte, a bit buffer, where the
/// symbols go. All member functions are `WISP_HOST_DEVICE` and never touch memory outside
/// `data[0, limit)` and `[out, out_end)`, whatever the bytes. Trivially copyable (a decoder keeps
/// a copy in registers); the members are public so that a decoder running several lanes can
/// bound their steps (`huffman_chunk` does).
struct huffman_lane {
  const std::uint8_t* data;  ///< the chunk's data (all sub-streams)
  std::size_t limit;         ///< readable bytes of `data`; loads past it read zeros
  std::size_t begin;         ///< offset of this sub-stream
  std::size_t next;          ///< offset of the next byte to load into `buffer`
  std::uint64_t buffer;      ///< unread bits, least significant first
  unsigned bits;             ///< valid bits in `buffer`
  std::uint8_t* out;         ///< next symbol goes here
  std::uint8_t* out_end;     ///< end of this sub-stream's symbols

  /// A lane at the start of the sub-stream at `offset` of `chunk_data` (`chunk_bytes` long),
  /// writing its symbols to `[first, last)`. O(1).
  WISP_HOST_DEVICE huffman_lane(const std::uint8_t* chunk_data, std::size_t chunk_bytes,
                                std::size_t offset, std::uint8_t* first,
                                std::uint8_t* last) noexcept
      : data(chunk_data),
        limit(chunk_bytes),
        begin(offset),
        next(offset),
        buffer(0),
        bits(0),
        out(first),
        out_end(last) {}

  /// Tops the buffer up to at least 56 bits. `Checked = false` is for callers that know the
  /// 8 bytes at `next` lie before `limit`.
  template <bool Checked = true>
  WISP_HOST_DEVICE void refill() noexcept {
    std::uint64_t word = 0;
    if (!Checked || next + 8 <= limit) {
      word = detail::load_le<std::uint64_t>(data + next);
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
      const std::uint64_t e = t.entry[buffer & detail::huffman_window_mask];
      detail::store_le<std::uint64_t>(out, e);  // symbols past the count: overwritten next window
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
      const std::uint64_t e = t.entry[buffer & detail::huffman_window_mask];
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

}  // namespace wisp
