// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Importer for routing traces logged as JSON Lines: one record per (token, layer),
/// `{"layer": L, "experts": [e0, ...], "token_idx": t, "weights": [w0, ...], "<group>": g, ...}`.
///
/// Records may come in any order. They are sorted into (group, token, layer) order, where groups
/// keep the order of their first appearance in the file and tokens ascend by `token_idx` within a
/// group (gaps in `token_idx` are allowed: each distinct index is one step). Every (group, token)
/// carries each layer at most once; a token that lacks layers is an error unless
/// `jsonl_config::on_incomplete` says to skip or keep it (see import.hpp). Each group begins a
/// sequence (without a group key the whole file is one sequence). Unknown fields are skipped;
/// `weights` is optional but must be present in all records or in none. The JSON is parsed by a
/// small strict parser in the header (detail/json.hpp), so the core needs only the standard
/// library.
///
/// @code
/// wisp::jsonl_config opt;
/// opt.group_key = "problem_id";
/// const wisp::routing_trace trace = wisp::import_jsonl("routing.jsonl", opt).trace;
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/detail/files.hpp>
#include <wisp/core/detail/json.hpp>
#include <wisp/core/error.hpp>
#include <wisp/trace/import.hpp>
#include <wisp/trace/routing_trace.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <istream>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace wisp {

/// @brief How to read a JSONL routing log.
struct jsonl_config {
  /// Field whose value (string or number) groups records into sequences; empty: no grouping.
  std::string group_key;
  /// Experts per layer; 0 infers `max id + 1`.
  std::int32_t experts = 0;
  /// Number of MoE layers; 0 infers `max layer + 1`.
  std::int32_t layers = 0;
  std::string layer_key = "layer";      ///< Field holding the 0-based MoE layer.
  std::string experts_key = "experts";  ///< Field holding the top-k expert ids.
  std::string token_key = "token_idx";  ///< Field holding the token index.
  std::string weights_key = "weights";  ///< Optional field holding the gate weights.
  /// What to do with a token that lacks some layers (default: refuse the input).
  incomplete_tokens on_incomplete = incomplete_tokens::error;
  /// Called now and then with the bytes read so far and the input's size (0 when unknown), for a
  /// progress display. Empty: not called.
  std::function<void(std::uint64_t done, std::uint64_t total)> progress{};
};
/// @deprecated The settings are `jsonl_config`.
using jsonl_options [[deprecated("use wisp::jsonl_config")]] = jsonl_config;

namespace detail {

struct jsonl_record {
  std::size_t group;
  std::int64_t token;
  std::int32_t layer;
  std::size_t line;      // 1-based
  std::uint64_t offset;  // byte offset of the line
  std::size_t first;     // index of the first id in the flat id / weight arrays
};

[[noreturn]] inline void jsonl_fail(std::uint64_t offset, std::size_t line,
                                    const std::string& what) {
  throw format_error(offset, "line " + std::to_string(line) + ": " + what);
}

[[nodiscard]] inline std::int64_t jsonl_int(const json_value* v, std::string_view key,
                                            std::uint64_t off, std::size_t line) {
  if (v == nullptr) {
    jsonl_fail(off, line, "missing field \"" + std::string(key) + "\"");
  }
  if (v->type != json_value::kind::number || v->number != std::floor(v->number) ||
      std::abs(v->number) > 9.0e15) {
    jsonl_fail(off, line, "field \"" + std::string(key) + "\" is not an integer");
  }
  return static_cast<std::int64_t>(v->number);
}

// What the records read so far hold: the records, their ids and weights (flat), the groups in
// order of first appearance, and what every record must agree on.
struct jsonl_parsed {
  std::vector<jsonl_record> records;
  std::vector<std::int32_t> ids;
  std::vector<float> weights;
  std::map<std::string, std::size_t> groups;  // group value (type-tagged) -> first-appearance
  std::int64_t k = -1;
  int with_weights = -1;
  std::int64_t max_layer = -1;
  std::int64_t max_id = -1;
};

// The group of record `v` (type-tagged so that "1" and 1 differ), or "" without grouping.
[[nodiscard]] inline std::string jsonl_group(const json_value& v, const jsonl_config& opt,
                                             std::uint64_t off, std::size_t line) {
  if (opt.group_key.empty()) {
    return {};
  }
  const json_value* g = v.find(opt.group_key);
  if (g == nullptr) {
    jsonl_fail(off, line, "missing group field \"" + opt.group_key + "\"");
  }
  if (g->type == json_value::kind::string) {
    return "s" + g->text;
  }
  if (g->type != json_value::kind::number) {
    jsonl_fail(off, line, "group field \"" + opt.group_key + "\" is not a string or number");
  }
  return "n" + g->text;
}

// Appends the expert ids of record `v` to `p.ids`: k of them (the first record sets k), each in
// range and distinct.
inline void jsonl_experts(const json_value& v, const jsonl_config& opt, std::uint64_t off,
                          std::size_t line, jsonl_parsed& p) {
  const json_value* e = v.find(opt.experts_key);
  if (e == nullptr || e->type != json_value::kind::array) {
    jsonl_fail(off, line, "missing or non-array field \"" + opt.experts_key + "\"");
  }
  if (e->items.empty()) {
    jsonl_fail(off, line, "empty \"" + opt.experts_key + "\"");
  }
  if (p.k < 0) {
    p.k = static_cast<std::int64_t>(e->items.size());
  } else if (static_cast<std::int64_t>(e->items.size()) != p.k) {
    jsonl_fail(off, line,
               std::to_string(e->items.size()) + " experts but earlier records have " +
                   std::to_string(p.k));
  }
  const std::size_t first = p.ids.size();
  for (const auto& item : e->items) {
    const std::int64_t id = jsonl_int(&item, opt.experts_key, off, line);
    if (id < 0 || id >= moe_shape::max_experts || (opt.experts > 0 && id >= opt.experts)) {
      jsonl_fail(off, line, "expert id " + std::to_string(id) + " out of range");
    }
    for (std::size_t j = first; j < p.ids.size(); ++j) {
      if (p.ids[j] == id) {
        jsonl_fail(off, line, "expert " + std::to_string(id) + " appears twice");
      }
    }
    p.ids.push_back(static_cast<std::int32_t>(id));
    p.max_id = std::max(p.max_id, id);
  }
}

// Appends the weights of record `v` to `p.weights`: every record has them or none does.
inline void jsonl_weights(const json_value& v, const jsonl_config& opt, std::uint64_t off,
                          std::size_t line, jsonl_parsed& p) {
  const json_value* w = v.find(opt.weights_key);
  const bool has_w = w != nullptr && w->type != json_value::kind::null;
  if (p.with_weights < 0) {
    p.with_weights = has_w ? 1 : 0;
  } else if ((p.with_weights == 1) != has_w) {
    jsonl_fail(off, line,
               has_w ? "has weights but earlier records do not"
                     : "has no weights but earlier "
                       "records do");
  }
  if (!has_w) {
    return;
  }
  if (w->type != json_value::kind::array || static_cast<std::int64_t>(w->items.size()) != p.k) {
    jsonl_fail(
        off, line,
        "\"" + opt.weights_key + "\" must be an array of " + std::to_string(p.k) + " numbers");
  }
  for (const auto& item : w->items) {
    if (item.type != json_value::kind::number) {
      jsonl_fail(off, line, "weight is not a number");
    }
    const auto f = static_cast<float>(item.number);
    if (!std::isfinite(f)) {
      jsonl_fail(off, line, "weight does not fit a float");
    }
    p.weights.push_back(f);
  }
}

// Parses the non-blank line `text` (number `line`, at byte `off`) as one record into `p`.
inline void jsonl_parse_line(const std::string& text, std::uint64_t off, std::size_t line,
                             const jsonl_config& opt, jsonl_parsed& p) {
  json_value v;
  try {
    v = json_parser(text, off).parse_document();
  } catch (const format_error& e) {
    jsonl_fail(e.offset(), line, e.problem());
  }
  if (v.type != json_value::kind::object) {
    jsonl_fail(off, line, "record is not a JSON object");
  }
  jsonl_record rec{};
  rec.line = line;
  rec.offset = off;
  const std::int64_t layer = jsonl_int(v.find(opt.layer_key), opt.layer_key, off, line);
  if (layer < 0 || layer > 1'000'000 || (opt.layers > 0 && layer >= opt.layers)) {
    jsonl_fail(off, line, "layer " + std::to_string(layer) + " out of range");
  }
  rec.layer = static_cast<std::int32_t>(layer);
  p.max_layer = std::max(p.max_layer, layer);
  rec.token = jsonl_int(v.find(opt.token_key), opt.token_key, off, line);
  if (rec.token < 0) {
    jsonl_fail(off, line, "negative " + opt.token_key);
  }
  rec.group = p.groups.emplace(jsonl_group(v, opt, off, line), p.groups.size()).first->second;
  rec.first = p.ids.size();
  jsonl_experts(v, opt, off, line, p);
  jsonl_weights(v, opt, off, line, p);
  p.records.push_back(rec);
}

// The steps of the records, token by token in (group, token) order: complete tokens appended,
// incomplete ones refused, skipped or kept as `opt.on_incomplete` says and counted in `report`.
// `p.records` must be sorted by (group, token, layer).
inline void jsonl_append_steps(const jsonl_parsed& p, const jsonl_config& opt, routing_trace& trace,
                               import_report& report) {
  const std::int32_t layers = trace.shape().layers;
  const auto uk = static_cast<std::size_t>(p.k);
  const std::vector<jsonl_record>& records = p.records;
  std::vector<std::int32_t> step_ids(static_cast<std::size_t>(layers) * uk);
  std::vector<float> step_w(p.with_weights == 1 ? step_ids.size() : 0);
  std::vector<std::uint8_t> present(static_cast<std::size_t>(layers));
  std::size_t current_group = records.front().group + 1;
  std::size_t incomplete_group = current_group;  // last group counted in incomplete_sequences
  for (std::size_t i = 0; i < records.size();) {
    // One (group, token): its records are records[i, end), sorted by layer.
    const auto& head = records[i];
    std::size_t end = i;
    std::fill(present.begin(), present.end(), std::uint8_t{0});
    for (; end < records.size() && records[end].group == head.group &&
           records[end].token == head.token;
         ++end) {
      const auto& r = records[end];
      if (present[static_cast<std::size_t>(r.layer)] != 0) {
        jsonl_fail(r.offset, r.line,
                   "layer " + std::to_string(r.layer) + " of token " + std::to_string(r.token) +
                       " repeats line " + std::to_string(records[end - 1].line));
      }
      present[static_cast<std::size_t>(r.layer)] = 1;
      const auto at = static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r.layer) * uk);
      std::copy_n(p.ids.begin() + static_cast<std::ptrdiff_t>(r.first), uk, step_ids.begin() + at);
      if (!step_w.empty()) {
        std::copy_n(p.weights.begin() + static_cast<std::ptrdiff_t>(r.first), uk,
                    step_w.begin() + at);
      }
    }
    const std::size_t held = end - i;
    i = end;
    if (head.group != current_group) {
      trace.begin_sequence();
      current_group = head.group;
    }
    if (held == static_cast<std::size_t>(layers)) {
      trace.append_step(step_ids, step_w);
      continue;
    }
    if (opt.on_incomplete == incomplete_tokens::error) {
      const auto gap = std::find(present.begin(), present.end(), std::uint8_t{0}) - present.begin();
      jsonl_fail(head.offset, head.line,
                 "token " + std::to_string(head.token) + " has no record for layer " +
                     std::to_string(gap) + " (on_incomplete can skip or keep such tokens)");
    }
    ++report.incomplete_tokens;
    report.missing_records += static_cast<std::size_t>(layers) - held;
    if (incomplete_group != head.group) {
      incomplete_group = head.group;
      ++report.incomplete_sequences;
    }
    if (opt.on_incomplete == incomplete_tokens::skip) {
      ++report.dropped_tokens;
      report.dropped_records += held;
    } else {
      ++report.partial_tokens;
      trace.append_partial_step(step_ids, present, step_w);
    }
  }
}

}  // namespace detail

/// @brief Imports a JSONL routing log from `in` (see the file comment for the record format).
/// `size` is the input's length for `opt.progress` (0 when unknown).
/// Time O(n log n) in the number of records, memory O(file) during import.
/// @throws wisp::format_error naming the line (and its byte offset) for malformed JSON, missing or
///         mistyped fields, inconsistent k, ids out of range or repeated within a record, weights
///         present in some records only, a layer given twice for a (group, token), a layer missing
///         for one (unless `opt.on_incomplete` skips or keeps such tokens), or an empty input;
///         wisp::logic_error if the options give an invalid shape.
[[nodiscard]] inline imported_trace import_jsonl(std::istream& in, const jsonl_config& opt = {},
                                                 std::uint64_t size = 0) {
  detail::jsonl_parsed p;
  std::uint64_t offset = 0;
  std::size_t line_no = 0;
  std::string line;
  std::uint64_t reported = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const std::uint64_t off = offset;
    offset += line.size() + 1;
    if (opt.progress && offset - reported >= (std::uint64_t{1} << 20)) {
      reported = offset;
      opt.progress(offset, size);
    }
    if (line.find_first_not_of(" \t\r") != std::string::npos) {  // blank lines are skipped
      detail::jsonl_parse_line(line, off, line_no, opt, p);
    }
  }
  if (in.bad()) {
    WISP_FAIL(wisp::error, "reading the JSONL input failed");
  }
  if (p.records.empty()) {
    throw format_error("JSONL input holds no records");
  }
  const auto layers = opt.layers > 0 ? opt.layers : static_cast<std::int32_t>(p.max_layer + 1);
  const auto experts = opt.experts > 0 ? opt.experts : static_cast<std::int32_t>(p.max_id + 1);
  if (p.k > experts) {
    throw format_error("top-k " + std::to_string(p.k) + " exceeds the " + std::to_string(experts) +
                       " experts");
  }
  routing_trace trace({layers, experts, static_cast<std::int32_t>(p.k)});
  std::stable_sort(p.records.begin(), p.records.end(), [](const auto& a, const auto& b) {
    if (a.group != b.group) {
      return a.group < b.group;
    }
    if (a.token != b.token) {
      return a.token < b.token;
    }
    return a.layer < b.layer;
  });
  import_report report;
  detail::jsonl_append_steps(p, opt, trace, report);
  return {std::move(trace), report};
}

/// @brief Imports the JSONL file at `path`. @throws wisp::error if it cannot be opened (naming
/// the operating system's reason); wisp::format_error as the stream overload (the message names
/// the file).
[[nodiscard]] inline imported_trace import_jsonl(const std::filesystem::path& path,
                                                 const jsonl_config& opt = {}) {
  std::ifstream in = wisp::detail::open_for_reading(path);
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  try {
    return import_jsonl(in, opt, ec ? 0 : static_cast<std::uint64_t>(size));
  } catch (const format_error& e) {
    throw e.in_file(path.string());
  }
}

}  // namespace wisp
