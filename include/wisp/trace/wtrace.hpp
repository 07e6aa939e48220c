// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The `.wtrace` binary file format for `routing_trace`: writer and validating reader.
///
/// Layout (all integers little-endian regardless of host; see docs/formats.md for the table):
/// a 64-byte header (magic, version, flags, shape, id width, step and sequence counts, payload
/// size, header CRC-32), the payload (sequence starts as u64, for a trace with partial steps a
/// bitmap of the (step, layer) rows held, ids as u8 or u16, optional weights as IEEE-754
/// binary32), then the CRC-32 of the payload. The file ends there: trailing bytes are an error.
///
/// The reader never trusts a size before checking it: the header has its own CRC, the payload
/// size must equal the one implied by the shape and counts, it is compared with the bytes left in
/// a seekable stream before anything is allocated, and otherwise the payload is read in bounded
/// chunks so a tiny corrupt file cannot make it allocate gigabytes. Every problem is reported as
/// `wisp::format_error` with the byte offset (relative to where reading began).
///
/// @code
/// wisp::write_wtrace(trace, "intent.wtrace");
/// wisp::routing_trace back = wisp::read_wtrace("intent.wtrace");
/// assert(back == trace);
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/detail/crc32.hpp>
#include <wisp/core/detail/files.hpp>
#include <wisp/core/detail/little_endian.hpp>
#include <wisp/core/error.hpp>
#include <wisp/trace/routing_trace.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <istream>
#include <limits>
#include <numeric>
#include <ostream>
#include <span>
#include <string>
#include <vector>

namespace wisp {

/// Constants of the `.wtrace` format.
namespace wtrace {
/// File signature: "WTRC" then CR LF SUB LF, which detects text-mode newline translation.
inline constexpr std::array<std::uint8_t, 8> magic = {'W', 'T', 'R', 'C', 0x0D, 0x0A, 0x1A, 0x0A};
/// The only version this reader understands.
inline constexpr std::uint32_t version = 1;
/// Header size in bytes.
inline constexpr std::size_t header_bytes = 64;
/// Flag bit: gate weights are present.
inline constexpr std::uint32_t flag_weights = 1u;
/// Flag bit: some steps lack layers; a row bitmap follows the sequence starts.
inline constexpr std::uint32_t flag_partial = 2u;
}  // namespace wtrace

namespace detail {

/// Writes `bytes` and folds them into `crc`. @throws wisp::error if the stream fails.
inline void write_bytes(std::ostream& out, const std::vector<std::uint8_t>& bytes,
                        std::uint32_t* crc) {
  if (crc != nullptr) {
    *crc = crc32_update(*crc, bytes);
  }
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    WISP_FAIL(wisp::error, "writing a .wtrace stream failed");
  }
}

/// `a * b` or `nullopt`-like failure reported through `ok`.
[[nodiscard]] inline std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, bool& ok) {
  if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) {
    ok = false;
    return 0;
  }
  return a * b;
}

}  // namespace detail

/// @brief Writes `trace` in `.wtrace` format to `out` (which should be opened in binary mode).
/// O(access_count()) time, O(1) extra memory (the payload is streamed in 64 KiB chunks).
/// @throws wisp::error if the stream reports a failure.
inline void write_wtrace(const routing_trace& trace, std::ostream& out) {
  const moe_shape& shape = trace.shape();
  const std::uint64_t n = trace.access_count();
  const std::uint64_t seqs = trace.sequence_starts().size();
  const std::uint64_t id_bytes = trace.id_bytes();
  const bool partial = !trace.complete();
  const std::uint64_t rows = trace.steps() * static_cast<std::uint64_t>(shape.layers);
  const std::uint64_t mask_bytes = partial ? (rows + 7) / 8 : 0;
  const std::uint64_t payload =
      seqs * 8 + mask_bytes + n * id_bytes + (trace.has_weights() ? n * sizeof(float) : 0);
  const std::uint32_t flags =
      (trace.has_weights() ? wtrace::flag_weights : 0u) | (partial ? wtrace::flag_partial : 0u);

  std::vector<std::uint8_t> buf;
  buf.reserve(1u << 16);
  buf.insert(buf.end(), wtrace::magic.begin(), wtrace::magic.end());
  detail::append_le(buf, wtrace::version, 4);
  detail::append_le(buf, flags, 4);
  detail::append_le(buf, static_cast<std::uint32_t>(shape.layers), 4);
  detail::append_le(buf, static_cast<std::uint32_t>(shape.experts), 4);
  detail::append_le(buf, static_cast<std::uint32_t>(shape.top_k), 4);
  detail::append_le(buf, id_bytes, 4);
  detail::append_le(buf, trace.steps(), 8);
  detail::append_le(buf, seqs, 8);
  detail::append_le(buf, payload, 8);
  detail::append_le(buf, detail::crc32(buf), 4);
  detail::append_le(buf, 0, 4);
  detail::write_bytes(out, buf, nullptr);
  buf.clear();

  std::uint32_t crc = 0;
  constexpr std::size_t chunk = (1u << 16) - 8;
  auto flush_if_full = [&] {
    if (buf.size() >= chunk) {
      detail::write_bytes(out, buf, &crc);
      buf.clear();
    }
  };
  for (const std::size_t s : trace.sequence_starts()) {
    detail::append_le(buf, s, 8);
    flush_if_full();
  }
  if (partial) {  // bit r (LSB first) of the bitmap: row r = step * layers + layer is held
    std::uint64_t byte = 0;
    for (std::uint64_t r = 0; r < rows; ++r) {
      const auto layer = static_cast<std::int32_t>(r % static_cast<std::uint64_t>(shape.layers));
      byte |= (trace.has_layer(
                   static_cast<std::size_t>(r / static_cast<std::uint64_t>(shape.layers)), layer)
                   ? 1u
                   : 0u)
              << (r % 8);
      if (r % 8 == 7 || r + 1 == rows) {
        detail::append_le(buf, byte, 1);
        byte = 0;
        flush_if_full();
      }
    }
  }
  trace.for_each_access([&](access a) {
    detail::append_le(buf, static_cast<std::uint64_t>(a.expert), static_cast<int>(id_bytes));
    flush_if_full();
  });
  if (trace.has_weights()) {
    for (std::size_t s = 0; s < trace.steps(); ++s) {
      for (std::int32_t l = 0; l < shape.layers; ++l) {
        for (std::int32_t j = 0; j < shape.top_k && trace.has_layer(s, l); ++j) {
          detail::append_le(buf, std::bit_cast<std::uint32_t>(trace.weight(s, l, j)), 4);
          flush_if_full();
        }
      }
    }
  }
  detail::write_bytes(out, buf, &crc);
  buf.clear();
  detail::append_le(buf, crc, 4);
  detail::write_bytes(out, buf, nullptr);
}

/// @brief Writes `trace` to the file `path` (created or truncated).
/// @throws wisp::error if the file cannot be opened (naming the operating system's reason) or
///         written.
inline void write_wtrace(const routing_trace& trace, const std::filesystem::path& path) {
  std::ofstream out = wisp::detail::open_for_writing(path);
  write_wtrace(trace, out);
  out.close();
  if (!out) {
    throw error("writing " + path.string() + " failed");
  }
}

namespace detail {

/// The fields of a `.wtrace` header and the payload sizes they imply (all checked by
/// `parse_wtrace_header`).
struct wtrace_header {
  std::int32_t layers = 0;
  std::int32_t experts = 0;
  std::int32_t top_k = 0;
  std::uint64_t id_bytes = 0;
  std::uint64_t steps = 0;
  std::uint64_t seqs = 0;
  std::uint64_t payload = 0;  ///< payload bytes, the trailing CRC excluded
  bool weights = false;
  bool partial = false;
  std::uint64_t rows = 0;       ///< steps x layers
  std::uint64_t row_bytes = 0;  ///< one (step, layer) row: top_k ids (and weights)
  std::uint64_t seq_part = 0;   ///< bytes of the sequence starts
  std::uint64_t fixed = 0;      ///< sequence starts plus the row bitmap of a partial trace
};

/// Bytes left in a seekable stream from where it stands, or max when unknown.
[[nodiscard]] inline std::uint64_t wtrace_bytes_left(std::istream& in) {
  std::uint64_t available = std::numeric_limits<std::uint64_t>::max();
  const auto here = in.tellg();
  if (here != std::streampos(-1)) {
    in.seekg(0, std::ios::end);
    const auto end = in.tellg();
    in.seekg(here);
    if (end != std::streampos(-1) && in && end >= here) {
      available = static_cast<std::uint64_t>(end - here);
    }
  }
  in.clear(in.rdstate() & ~std::ios::failbit);
  return available;
}

/// Reads the 64 header bytes; checks the signature, the length and the header CRC.
[[nodiscard]] inline std::array<std::uint8_t, wtrace::header_bytes> read_wtrace_header_bytes(
    std::istream& in) {
  std::array<std::uint8_t, wtrace::header_bytes> h{};
  in.read(reinterpret_cast<char*>(h.data()), static_cast<std::streamsize>(h.size()));
  const auto got = static_cast<std::uint64_t>(in.gcount());
  if (got < 8 || !std::equal(wtrace::magic.begin(), wtrace::magic.end(), h.begin())) {
    // Report a bad signature before a short header: a non-wtrace file is the likelier mistake.
    const std::uint64_t n = std::min<std::uint64_t>(got, 8);
    if (!std::equal(h.begin(), h.begin() + static_cast<std::ptrdiff_t>(n), wtrace::magic.begin())) {
      throw format_error(0, "not a .wtrace file (bad magic)");
    }
    throw format_error(got, "truncated .wtrace header (" + std::to_string(got) + " of 64 bytes)");
  }
  if (got < wtrace::header_bytes) {
    throw format_error(got, "truncated .wtrace header (" + std::to_string(got) + " of 64 bytes)");
  }
  if (crc32(std::span<const std::uint8_t>(h.data(), 56)) != load_le(h.data() + 56, 4)) {
    throw format_error(56, "header checksum mismatch (corrupted header)");
  }
  return h;
}

/// Derives the payload sizes of `w` and checks its payload size against them: every (step,
/// layer) row holds top_k ids (and weights); a partial trace stores only the rows its bitmap
/// marks, so its payload is checked against the bitmap once that is read.
inline void check_wtrace_payload_size(wtrace_header& w) {
  using u64 = std::uint64_t;
  bool ok = true;
  w.rows = checked_mul(w.steps, static_cast<u64>(w.layers), ok);
  w.row_bytes = static_cast<u64>(w.top_k) * (w.id_bytes + (w.weights ? 4 : 0));
  w.seq_part = w.seqs * 8;  // seqs <= 2^32
  const u64 mask_part = w.partial ? w.rows / 8 + (w.rows % 8 != 0 ? 1 : 0) : 0;
  const u64 rows_part = checked_mul(w.rows, w.row_bytes, ok);
  w.fixed = w.seq_part + mask_part;
  if (!ok || w.fixed + rows_part < w.fixed) {
    throw format_error(32, "step count " + std::to_string(w.steps) + " overflows the payload size");
  }
  if (!w.partial && w.payload != w.fixed + rows_part) {
    throw format_error(48, "payload size " + std::to_string(w.payload) + " does not match " +
                               std::to_string(w.fixed + rows_part) + " implied by the header");
  }
  if (w.partial && (w.payload < w.fixed || w.payload - w.fixed > rows_part ||
                    (w.payload - w.fixed) % w.row_bytes != 0)) {
    throw format_error(48, "payload size " + std::to_string(w.payload) +
                               " does not fit the header: sequence starts and row bitmap " +
                               std::to_string(w.fixed) + " bytes plus a multiple of " +
                               std::to_string(w.row_bytes) + " up to " +
                               std::to_string(w.fixed + rows_part));
  }
}

/// The fields of a header whose CRC matched: version, flags, shape, id width and counts are
/// checked, and the payload size against the sizes they imply.
[[nodiscard]] inline wtrace_header parse_wtrace_header(
    const std::array<std::uint8_t, wtrace::header_bytes>& h) {
  using u64 = std::uint64_t;
  auto field = [&](std::size_t off, int bytes) { return load_le(h.data() + off, bytes); };
  if (field(8, 4) != wtrace::version) {
    throw format_error(8, "unsupported .wtrace version " + std::to_string(field(8, 4)) +
                              " (this reader knows version 1)");
  }
  const u64 flags = field(12, 4);
  if ((flags & ~u64{wtrace::flag_weights | wtrace::flag_partial}) != 0) {
    throw format_error(12, "unknown flag bits " + std::to_string(flags));
  }
  wtrace_header w;
  w.layers = static_cast<std::int32_t>(static_cast<std::uint32_t>(field(16, 4)));
  w.experts = static_cast<std::int32_t>(static_cast<std::uint32_t>(field(20, 4)));
  w.top_k = static_cast<std::int32_t>(static_cast<std::uint32_t>(field(24, 4)));
  if (w.layers <= 0) {
    throw format_error(16, "layers must be positive, got " + std::to_string(w.layers));
  }
  if (w.experts <= 0 || w.experts > moe_shape::max_experts) {
    throw format_error(20, "experts must be in [1, 65536], got " + std::to_string(w.experts));
  }
  if (w.top_k <= 0 || w.top_k > w.experts) {
    throw format_error(24, "top_k must be in [1, experts=" + std::to_string(w.experts) + "], got " +
                               std::to_string(w.top_k));
  }
  w.id_bytes = field(28, 4);
  const u64 want_id_bytes = w.experts > 256 ? 2 : 1;
  if (w.id_bytes != want_id_bytes) {
    throw format_error(28, "id width " + std::to_string(w.id_bytes) + " bytes, expected " +
                               std::to_string(want_id_bytes) + " for " + std::to_string(w.experts) +
                               " experts");
  }
  if (field(60, 4) != 0) {
    throw format_error(60, "reserved header field is not zero");
  }
  w.steps = field(32, 8);
  w.seqs = field(40, 8);
  w.payload = field(48, 8);
  w.weights = (flags & wtrace::flag_weights) != 0;
  w.partial = (flags & wtrace::flag_partial) != 0;
  if (w.steps > routing_trace::max_steps) {
    throw format_error(32, "step count " + std::to_string(w.steps) + " exceeds the maximum");
  }
  if (w.seqs > w.steps) {
    throw format_error(40, "sequence count " + std::to_string(w.seqs) + " exceeds step count " +
                               std::to_string(w.steps));
  }
  check_wtrace_payload_size(w);
  return w;
}

/// Reads the payload and its trailing CRC (checked) in bounded chunks: growth follows the data,
/// not the header. `available` is what `wtrace_bytes_left` reported before the header.
[[nodiscard]] inline std::vector<std::uint8_t> read_wtrace_payload(std::istream& in,
                                                                   const wtrace_header& w,
                                                                   std::uint64_t available) {
  using u64 = std::uint64_t;
  const u64 rest = available == std::numeric_limits<u64>::max()
                       ? available
                       : available - std::min<u64>(available, wtrace::header_bytes);
  if (rest < w.payload + 4) {
    throw format_error(wtrace::header_bytes + rest,
                       "truncated .wtrace file: header announces " + std::to_string(w.payload + 4) +
                           " more bytes but only " + std::to_string(rest) + " remain");
  }
  std::vector<std::uint8_t> body;
  const u64 total = w.payload + 4;
  if (available != std::numeric_limits<u64>::max()) {
    body.reserve(static_cast<std::size_t>(total));
  }
  while (body.size() < total) {
    const u64 want = std::min<u64>(total - body.size(), u64{1} << 20);
    const std::size_t old = body.size();
    body.resize(old + static_cast<std::size_t>(want));
    in.read(reinterpret_cast<char*>(body.data() + old), static_cast<std::streamsize>(want));
    const auto r = static_cast<u64>(in.gcount());
    if (r < want) {
      throw format_error(
          wtrace::header_bytes + old + r,
          "truncated .wtrace file: " + std::to_string(total - old - r) + " bytes missing");
    }
  }
  const std::uint8_t* p = body.data();
  if (crc32(std::span<const std::uint8_t>(p, static_cast<std::size_t>(w.payload))) !=
      load_le(p + w.payload, 4)) {
    throw format_error(wtrace::header_bytes + w.payload,
                       "payload checksum mismatch (corrupted data)");
  }
  return body;
}

/// The sequence starts at the front of the payload `p`: strictly increasing, below the steps.
[[nodiscard]] inline std::vector<std::size_t> read_wtrace_sequence_starts(const std::uint8_t* p,
                                                                          const wtrace_header& w) {
  std::vector<std::size_t> starts(static_cast<std::size_t>(w.seqs));
  for (std::uint64_t i = 0; i < w.seqs; ++i) {
    const std::uint64_t s = load_le(p + 8 * i, 8);
    if (s >= w.steps || (i > 0 && s <= starts[i - 1])) {
      throw format_error(
          wtrace::header_bytes + 8 * i,
          "sequence start " + std::to_string(s) + " is not increasing or not below the step count");
    }
    starts[i] = static_cast<std::size_t>(s);
  }
  return starts;
}

/// The rows a trace holds: all of them, or for a partial trace those its bitmap (at `mask`)
/// marks, checked against the payload size.
[[nodiscard]] inline std::uint64_t wtrace_held_rows(const std::uint8_t* mask,
                                                    const wtrace_header& w) {
  using u64 = std::uint64_t;
  if (!w.partial) {
    return w.rows;
  }
  u64 held = 0;
  for (u64 r = 0; r < w.rows; ++r) {
    held += (mask[r / 8] >> (r % 8)) & 1u;
  }
  if (w.rows % 8 != 0 && (mask[w.rows / 8] >> (w.rows % 8)) != 0) {
    throw format_error(wtrace::header_bytes + w.seq_part + w.rows / 8,
                       "row bitmap has bits set past the last row");
  }
  if (held == w.rows) {
    throw format_error(12, "partial flag set but every step holds every layer");
  }
  if (w.fixed + held * w.row_bytes != w.payload) {
    throw format_error(48, "payload size " + std::to_string(w.payload) + " does not match " +
                               std::to_string(w.fixed + held * w.row_bytes) +
                               " implied by the row bitmap");
  }
  return held;
}

/// Reads the ids and weights of one row of step `s`, layer `l` into `ids` and `ws` (`top_k`
/// each), stored entry `idx` onwards: ids below the experts and distinct, weights finite.
/// `seen` is all zero before and after.
inline void read_wtrace_row(const std::uint8_t* p, const wtrace_header& w, std::uint64_t held_rows,
                            std::uint64_t idx, std::uint64_t s, std::int32_t l,
                            std::span<std::int32_t> ids, std::span<float> ws,
                            std::vector<std::uint8_t>& seen) {
  using u64 = std::uint64_t;
  const u64 id_base = w.fixed;  // payload offset of the first id
  const u64 w_base = id_base + held_rows * static_cast<u64>(w.top_k) * w.id_bytes;
  for (std::int32_t j = 0; j < w.top_k; ++j, ++idx) {
    const u64 off = id_base + idx * w.id_bytes;
    const auto id = static_cast<std::int64_t>(load_le(p + off, static_cast<int>(w.id_bytes)));
    if (id >= w.experts) {
      throw format_error(wtrace::header_bytes + off,
                         "expert id " + std::to_string(id) + " >= experts " +
                             std::to_string(w.experts) + " (step " + std::to_string(s) + ")");
    }
    auto& mark = seen[static_cast<std::size_t>(id)];
    if (mark != 0) {
      throw format_error(wtrace::header_bytes + off,
                         "expert " + std::to_string(id) + " appears twice in step " +
                             std::to_string(s) + " layer " + std::to_string(l));
    }
    mark = 1;
    ids[static_cast<std::size_t>(j)] = static_cast<std::int32_t>(id);
    if (w.weights) {
      const u64 woff = w_base + idx * 4;
      const float weight = std::bit_cast<float>(load_le<std::uint32_t>(p + woff));
      if (!std::isfinite(weight)) {
        throw format_error(wtrace::header_bytes + woff, "weight is not finite");
      }
      ws[static_cast<std::size_t>(j)] = weight;
    }
  }
  for (const std::int32_t id : ids) {
    seen[static_cast<std::size_t>(id)] = 0;
  }
}

/// The trace of a checked payload `p`: its steps, row by row, and its sequences.
[[nodiscard]] inline routing_trace decode_wtrace_payload(const std::uint8_t* p,
                                                         const wtrace_header& w) {
  using u64 = std::uint64_t;
  const std::vector<std::size_t> starts = read_wtrace_sequence_starts(p, w);
  const std::uint8_t* mask = p + w.seq_part;
  auto held = [&](u64 row) { return !w.partial || ((mask[row / 8] >> (row % 8)) & 1u) != 0; };
  const u64 held_rows = wtrace_held_rows(mask, w);
  routing_trace trace({w.layers, w.experts, w.top_k});
  trace.reserve(static_cast<std::size_t>(w.steps));
  const auto top_k = static_cast<std::size_t>(w.top_k);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(w.layers) * top_k);
  std::vector<float> ws(w.weights ? ids.size() : 0);
  std::vector<std::uint8_t> present(static_cast<std::size_t>(w.layers));
  std::vector<std::uint8_t> seen(static_cast<std::size_t>(w.experts), 0);
  std::size_t next_seq = 0;
  u64 idx = 0;  // index of the next stored id (and weight)
  for (u64 s = 0; s < w.steps; ++s) {
    bool any = false;
    bool all = true;
    for (std::int32_t l = 0; l < w.layers; ++l) {
      const bool row_held = held(s * static_cast<u64>(w.layers) + static_cast<u64>(l));
      present[static_cast<std::size_t>(l)] = row_held ? 1 : 0;
      any = any || row_held;
      all = all && row_held;
      const std::size_t first = static_cast<std::size_t>(l) * top_k;
      const std::span<std::int32_t> row(ids.data() + first, top_k);
      if (!row_held) {
        std::iota(row.begin(), row.end(), 0);  // ignored by append_partial_step
        continue;
      }
      read_wtrace_row(p, w, held_rows, idx, s, l, row,
                      w.weights ? std::span<float>(ws).subspan(first, top_k) : std::span<float>{},
                      seen);
      idx += top_k;
    }
    if (!any) {
      throw format_error(wtrace::header_bytes + w.seq_part + (s * static_cast<u64>(w.layers)) / 8,
                         "step " + std::to_string(s) + " holds no layer in the row bitmap");
    }
    if (next_seq < starts.size() && starts[next_seq] == s) {
      trace.begin_sequence();
      ++next_seq;
    }
    if (all) {
      trace.append_step(ids, ws);
    } else {
      trace.append_partial_step(ids, present, ws);
    }
  }
  return trace;
}

}  // namespace detail

/// @brief Reads one `.wtrace` trace from `in` (opened in binary mode), consuming exactly its bytes.
///
/// Validates magic, version, flags, shape, id width, payload size (against the counts and the
/// bytes actually present), both CRC-32s, sequence starts (strictly increasing, `< steps`), ids
/// (`< experts`, distinct within each row) and weights (finite).
/// Time O(file size); memory: the payload once plus the resulting trace.
/// @throws wisp::format_error naming the byte offset and the problem.
[[nodiscard]] inline routing_trace read_wtrace(std::istream& in) {
  const std::uint64_t available = detail::wtrace_bytes_left(in);
  const detail::wtrace_header w = detail::parse_wtrace_header(detail::read_wtrace_header_bytes(in));
  const std::vector<std::uint8_t> body = detail::read_wtrace_payload(in, w, available);
  return detail::decode_wtrace_payload(body.data(), w);
}

/// @brief Reads the `.wtrace` file at `path`, which must hold exactly one trace.
/// @throws wisp::error if the file cannot be opened (naming the operating system's reason);
///         wisp::format_error if it is malformed or has bytes after the trace (the message names
///         the file).
[[nodiscard]] inline routing_trace read_wtrace(const std::filesystem::path& path) {
  std::ifstream in = wisp::detail::open_for_reading(path);
  try {
    routing_trace trace = read_wtrace(in);
    const auto end = static_cast<std::uint64_t>(in.tellg());
    if (in.peek() != std::char_traits<char>::eof()) {
      in.seekg(0, std::ios::end);
      const auto size = static_cast<std::uint64_t>(in.tellg());
      throw format_error(end, std::to_string(size - end) +
                                  " unexpected bytes after the trace (a .wtrace file holds one "
                                  "trace)");
    }
    return trace;
  } catch (const format_error& e) {
    throw e.in_file(path.string());
  }
}

}  // namespace wisp
