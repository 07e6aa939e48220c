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

inline void put_le(std::vector<std::uint8_t>& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) {
    out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  }
}

[[nodiscard]] inline std::uint64_t get_le(const std::uint8_t* p, int bytes) noexcept {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) {
    v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  }
  return v;
}

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
  detail::put_le(buf, wtrace::version, 4);
  detail::put_le(buf, flags, 4);
  detail::put_le(buf, static_cast<std::uint32_t>(shape.layers), 4);
  detail::put_le(buf, static_cast<std::uint32_t>(shape.experts), 4);
  detail::put_le(buf, static_cast<std::uint32_t>(shape.top_k), 4);
  detail::put_le(buf, id_bytes, 4);
  detail::put_le(buf, trace.steps(), 8);
  detail::put_le(buf, seqs, 8);
  detail::put_le(buf, payload, 8);
  detail::put_le(buf, detail::crc32(buf), 4);
  detail::put_le(buf, 0, 4);
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
    detail::put_le(buf, s, 8);
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
        detail::put_le(buf, byte, 1);
        byte = 0;
        flush_if_full();
      }
    }
  }
  trace.for_each_access([&](access a) {
    detail::put_le(buf, static_cast<std::uint64_t>(a.expert), static_cast<int>(id_bytes));
    flush_if_full();
  });
  if (trace.has_weights()) {
    for (std::size_t s = 0; s < trace.steps(); ++s) {
      for (std::int32_t l = 0; l < shape.layers; ++l) {
        for (std::int32_t j = 0; j < shape.top_k && trace.has_layer(s, l); ++j) {
          detail::put_le(buf, std::bit_cast<std::uint32_t>(trace.weight(s, l, j)), 4);
          flush_if_full();
        }
      }
    }
  }
  detail::write_bytes(out, buf, &crc);
  buf.clear();
  detail::put_le(buf, crc, 4);
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

/// @brief Reads one `.wtrace` trace from `in` (opened in binary mode), consuming exactly its bytes.
///
/// Validates magic, version, flags, shape, id width, payload size (against the counts and the
/// bytes actually present), both CRC-32s, sequence starts (strictly increasing, `< steps`), ids
/// (`< experts`, distinct within each row) and weights (finite).
/// Time O(file size); memory: the payload once plus the resulting trace.
/// @throws wisp::format_error naming the byte offset and the problem.
[[nodiscard]] inline routing_trace read_wtrace(std::istream& in) {
  using u64 = std::uint64_t;
  // Bytes left in a seekable stream, or max when unknown.
  u64 available = std::numeric_limits<u64>::max();
  {
    const auto here = in.tellg();
    if (here != std::streampos(-1)) {
      in.seekg(0, std::ios::end);
      const auto end = in.tellg();
      in.seekg(here);
      if (end != std::streampos(-1) && in && end >= here) {
        available = static_cast<u64>(end - here);
      }
    }
    in.clear(in.rdstate() & ~std::ios::failbit);
  }

  std::array<std::uint8_t, wtrace::header_bytes> h{};
  in.read(reinterpret_cast<char*>(h.data()), static_cast<std::streamsize>(h.size()));
  const auto got = static_cast<u64>(in.gcount());
  if (got < 8 || !std::equal(wtrace::magic.begin(), wtrace::magic.end(), h.begin())) {
    // Report a bad signature before a short header: a non-wtrace file is the likelier mistake.
    const u64 n = std::min<u64>(got, 8);
    if (!std::equal(h.begin(), h.begin() + static_cast<std::ptrdiff_t>(n), wtrace::magic.begin())) {
      throw format_error(0, "not a .wtrace file (bad magic)");
    }
    throw format_error(got, "truncated .wtrace header (" + std::to_string(got) + " of 64 bytes)");
  }
  if (got < wtrace::header_bytes) {
    throw format_error(got, "truncated .wtrace header (" + std::to_string(got) + " of 64 bytes)");
  }
  auto field = [&](std::size_t off, int bytes) { return detail::get_le(h.data() + off, bytes); };
  const u64 header_crc = field(56, 4);
  if (detail::crc32(std::span<const std::uint8_t>(h.data(), 56)) != header_crc) {
    throw format_error(56, "header checksum mismatch (corrupted header)");
  }
  if (field(8, 4) != wtrace::version) {
    throw format_error(8, "unsupported .wtrace version " + std::to_string(field(8, 4)) +
                              " (this reader knows version 1)");
  }
  const u64 flags = field(12, 4);
  if ((flags & ~u64{wtrace::flag_weights | wtrace::flag_partial}) != 0) {
    throw format_error(12, "unknown flag bits " + std::to_string(flags));
  }
  const auto layers = static_cast<std::int32_t>(static_cast<std::uint32_t>(field(16, 4)));
  const auto experts = static_cast<std::int32_t>(static_cast<std::uint32_t>(field(20, 4)));
  const auto top_k = static_cast<std::int32_t>(static_cast<std::uint32_t>(field(24, 4)));
  if (layers <= 0) {
    throw format_error(16, "layers must be positive, got " + std::to_string(layers));
  }
  if (experts <= 0 || experts > moe_shape::max_experts) {
    throw format_error(20, "experts must be in [1, 65536], got " + std::to_string(experts));
  }
  if (top_k <= 0 || top_k > experts) {
    throw format_error(24, "top_k must be in [1, experts=" + std::to_string(experts) + "], got " +
                               std::to_string(top_k));
  }
  const u64 id_bytes = field(28, 4);
  const u64 want_id_bytes = experts > 256 ? 2 : 1;
  if (id_bytes != want_id_bytes) {
    throw format_error(28, "id width " + std::to_string(id_bytes) + " bytes, expected " +
                               std::to_string(want_id_bytes) + " for " + std::to_string(experts) +
                               " experts");
  }
  if (field(60, 4) != 0) {
    throw format_error(60, "reserved header field is not zero");
  }
  const u64 steps = field(32, 8);
  const u64 seqs = field(40, 8);
  const u64 payload = field(48, 8);
  const bool weights = (flags & wtrace::flag_weights) != 0;
  const bool partial = (flags & wtrace::flag_partial) != 0;
  if (steps > routing_trace::max_steps) {
    throw format_error(32, "step count " + std::to_string(steps) + " exceeds the maximum");
  }
  if (seqs > steps) {
    throw format_error(40, "sequence count " + std::to_string(seqs) + " exceeds step count " +
                               std::to_string(steps));
  }
  // Sizes: every (step, layer) row holds top_k ids (and weights); a partial trace stores only the
  // rows its bitmap marks, so its payload is checked against the bitmap once that is read.
  bool ok = true;
  const u64 rows = detail::checked_mul(steps, static_cast<u64>(layers), ok);
  const u64 per_step = static_cast<u64>(layers) * static_cast<u64>(top_k);
  const u64 row_bytes = static_cast<u64>(top_k) * (id_bytes + (weights ? 4 : 0));
  const u64 seq_part = seqs * 8;  // seqs <= 2^32
  const u64 mask_part = partial ? rows / 8 + (rows % 8 != 0 ? 1 : 0) : 0;
  const u64 rows_part = detail::checked_mul(rows, row_bytes, ok);
  const u64 fixed = seq_part + mask_part;
  if (!ok || fixed + rows_part < fixed) {
    throw format_error(32, "step count " + std::to_string(steps) + " overflows the payload size");
  }
  if (!partial && payload != fixed + rows_part) {
    throw format_error(48, "payload size " + std::to_string(payload) + " does not match " +
                               std::to_string(fixed + rows_part) + " implied by the header");
  }
  if (partial &&
      (payload < fixed || payload - fixed > rows_part || (payload - fixed) % row_bytes != 0)) {
    throw format_error(48, "payload size " + std::to_string(payload) +
                               " does not fit the header: sequence starts and row bitmap " +
                               std::to_string(fixed) + " bytes plus a multiple of " +
                               std::to_string(row_bytes) + " up to " +
                               std::to_string(fixed + rows_part));
  }
  const u64 rest = available == std::numeric_limits<u64>::max()
                       ? available
                       : available - std::min<u64>(available, wtrace::header_bytes);
  if (rest < payload + 4) {
    throw format_error(wtrace::header_bytes + rest,
                       "truncated .wtrace file: header announces " + std::to_string(payload + 4) +
                           " more bytes but only " + std::to_string(rest) + " remain");
  }

  // Read the payload and trailing CRC in bounded chunks (growth follows the data, not the header).
  std::vector<std::uint8_t> body;
  const u64 total = payload + 4;
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
  const u64 stored_crc = detail::get_le(p + payload, 4);
  if (detail::crc32(std::span<const std::uint8_t>(p, static_cast<std::size_t>(payload))) !=
      stored_crc) {
    throw format_error(wtrace::header_bytes + payload,
                       "payload checksum mismatch (corrupted data)");
  }

  routing_trace trace({layers, experts, top_k});
  trace.reserve(static_cast<std::size_t>(steps));
  std::vector<std::size_t> starts(static_cast<std::size_t>(seqs));
  for (u64 i = 0; i < seqs; ++i) {
    const u64 s = detail::get_le(p + 8 * i, 8);
    if (s >= steps || (i > 0 && s <= starts[i - 1])) {
      throw format_error(
          wtrace::header_bytes + 8 * i,
          "sequence start " + std::to_string(s) + " is not increasing or not below the step count");
    }
    starts[i] = static_cast<std::size_t>(s);
  }
  const std::uint8_t* mask = p + seq_part;
  auto held = [&](u64 row) { return !partial || ((mask[row / 8] >> (row % 8)) & 1u) != 0; };
  u64 held_rows = rows;
  if (partial) {
    held_rows = 0;
    for (u64 r = 0; r < rows; ++r) {
      held_rows += held(r) ? 1 : 0;
    }
    if (rows % 8 != 0 && (mask[rows / 8] >> (rows % 8)) != 0) {
      throw format_error(wtrace::header_bytes + seq_part + rows / 8,
                         "row bitmap has bits set past the last row");
    }
    if (held_rows == rows) {
      throw format_error(12, "partial flag set but every step holds every layer");
    }
    if (fixed + held_rows * row_bytes != payload) {
      throw format_error(48, "payload size " + std::to_string(payload) + " does not match " +
                                 std::to_string(fixed + held_rows * row_bytes) +
                                 " implied by the row bitmap");
    }
  }
  const u64 n = held_rows * static_cast<u64>(top_k);
  const u64 id_base = fixed;                  // payload offset of the first id
  const u64 w_base = id_base + n * id_bytes;  // payload offset of the first weight
  const int width = static_cast<int>(id_bytes);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(per_step));
  std::vector<float> ws(weights ? static_cast<std::size_t>(per_step) : 0);
  std::vector<std::uint8_t> present(static_cast<std::size_t>(layers));
  std::vector<std::uint8_t> seen(static_cast<std::size_t>(experts), 0);
  std::size_t next_seq = 0;
  u64 idx = 0;  // index of the next stored id (and weight)
  for (u64 s = 0; s < steps; ++s) {
    bool any = false;
    bool all = true;
    for (std::int32_t l = 0; l < layers; ++l) {
      const bool row_held = held(s * static_cast<u64>(layers) + static_cast<u64>(l));
      present[static_cast<std::size_t>(l)] = row_held ? 1 : 0;
      any = any || row_held;
      all = all && row_held;
      for (std::int32_t j = 0; j < top_k; ++j) {
        const auto i = static_cast<std::size_t>(l * top_k + j);
        if (!row_held) {
          ids[i] = j;  // ignored by append_partial_step
          continue;
        }
        const u64 off = id_base + idx * id_bytes;
        const auto id = static_cast<std::int64_t>(detail::get_le(p + off, width));
        if (id >= experts) {
          throw format_error(wtrace::header_bytes + off,
                             "expert id " + std::to_string(id) + " >= experts " +
                                 std::to_string(experts) + " (step " + std::to_string(s) + ")");
        }
        auto& mark = seen[static_cast<std::size_t>(id)];
        if (mark != 0) {
          throw format_error(wtrace::header_bytes + off,
                             "expert " + std::to_string(id) + " appears twice in step " +
                                 std::to_string(s) + " layer " + std::to_string(l));
        }
        mark = 1;
        ids[i] = static_cast<std::int32_t>(id);
        if (weights) {
          const u64 woff = w_base + idx * 4;
          const float w =
              std::bit_cast<float>(static_cast<std::uint32_t>(detail::get_le(p + woff, 4)));
          if (!std::isfinite(w)) {
            throw format_error(wtrace::header_bytes + woff, "weight is not finite");
          }
          ws[i] = w;
        }
        ++idx;
      }
      for (std::int32_t j = 0; j < top_k && row_held; ++j) {
        seen[static_cast<std::size_t>(ids[static_cast<std::size_t>(l * top_k + j)])] = 0;
      }
    }
    if (!any) {
      throw format_error(wtrace::header_bytes + seq_part + (s * static_cast<u64>(layers)) / 8,
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
