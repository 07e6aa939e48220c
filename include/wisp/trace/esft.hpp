// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Importer for the ESFT expert-score text format (github.com/deepseek-ai/ESFT,
/// `results/expert_scores/<task>/expert_weights_<L>.txt`).
///
/// One file per MoE layer, `expert_weights_1.txt` .. `expert_weights_N.txt` (file `_1` is wisp MoE
/// layer 0). Line *i* of every file is the same sequence; a line is
/// `id_0 \t ... \t id_{kT-1} \t\t w_0 \t ... \t w_{kT-1}`: T tokens x k ids, a double tab, then the
/// matching gate weights. The trace is built in the canonical replay order of
/// shared/traces/SOURCES.md: for each line, for each token, for each layer, the k ids as written;
/// each line begins a sequence.
///
/// **Incomplete lines.** A line whose layer files disagree on its token count (a recorder that
/// stopped early for some layers) is an error unless `esft_config::on_incomplete` says otherwise.
/// The files do not say which tokens a short line lacks; the importer assumes its last ones (the
/// files agree on the line's first tokens): `skip` keeps the tokens every file holds and drops the
/// rest, `keep` keeps every token with the layers that hold it. A line a file lacks altogether
/// (the file is shorter) holds no token of that layer.
///
/// **Top-k.** The files do not record k either. A `top_k` smaller than the data's shows as groups
/// of a multiple of it that never repeat an id (top-k routing picks k distinct experts, so groups
/// spanning several tokens do repeat ids); one larger than the data's shows as repeated ids within
/// a group. Both are reported (`wisp::format_error`) instead of producing a plausible wrong trace.
///
/// @code
/// auto [trace, report] = wisp::import_esft("traces/raw/esft_deepseek_v2_lite_intent");
/// // trace.shape() == {26, 64, 6}; trace.steps() == 8222; trace.sequence_starts().size() == 127
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/detail/files.hpp>
#include <wisp/core/error.hpp>
#include <wisp/trace/import.hpp>
#include <wisp/trace/routing_trace.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace wisp {

/// @brief Parameters of the ESFT model that the text files do not record.
struct esft_config {
  std::int32_t experts = 64;  ///< Routed experts per layer (DeepSeek-V2-Lite: 64).
  std::int32_t top_k = 6;     ///< Ids per token and layer (DeepSeek-V2-Lite: 6).
  /// What to do with the tokens of a line whose files disagree on its token count.
  incomplete_tokens on_incomplete = incomplete_tokens::error;
  /// Called after each layer file with the bytes read so far and the files' total size, for a
  /// progress display. Empty: not called.
  std::function<void(std::uint64_t done, std::uint64_t total)> progress{};
};
/// @deprecated The settings are `esft_config`.
using esft_options [[deprecated("use wisp::esft_config")]] = esft_config;

namespace detail {

/// One parsed ESFT file: all ids and weights flattened over lines, plus per-line token counts.
struct esft_file {
  std::vector<std::int32_t> ids;
  std::vector<float> weights;
  std::vector<std::size_t> tokens;  // T of each line
};

[[noreturn]] inline void esft_fail(std::uint64_t offset, const std::string& file, std::size_t line,
                                   const std::string& what) {
  throw format_error(offset, file + " line " + std::to_string(line) + ": " + what);
}

/// Splits the tab-separated fields of `part` (at byte `at` of its file) and calls
/// `emit(field, offset, index)` for each; returns their count. An empty field is an error.
template <class Emit>
std::size_t esft_fields(std::string_view part, std::uint64_t at, const std::string& name,
                        std::size_t line_no, Emit&& emit) {
  std::size_t count = 0;
  std::size_t p = 0;
  while (true) {
    std::size_t tab = part.find('\t', p);
    if (tab == std::string_view::npos) {
      tab = part.size();
    }
    const std::string_view f = part.substr(p, tab - p);
    if (f.empty()) {
      esft_fail(at + p, name, line_no, "empty field (stray tab) at field " + std::to_string(count));
    }
    emit(f, at + p, count);
    ++count;
    if (tab == part.size()) {
      break;
    }
    p = tab + 1;
  }
  return count;
}

/// Parses one line's ids and weights (the line at byte `line_off`) into `out`.
inline void parse_esft_line(std::string_view line, std::uint64_t line_off, const std::string& name,
                            std::size_t line_no, const esft_config& opt, esft_file& out) {
  const auto k = static_cast<std::size_t>(opt.top_k);
  const std::size_t split = line.find("\t\t");
  if (split == std::string_view::npos) {
    esft_fail(line_off, name, line_no, "missing the double tab between ids and weights");
  }
  const std::size_t first_id = out.ids.size();
  const std::size_t n_ids = esft_fields(
      line.substr(0, split), line_off, name, line_no,
      [&](std::string_view f, std::uint64_t off, std::size_t i) {
        std::int64_t v = 0;
        const auto r = std::from_chars(f.data(), f.data() + f.size(), v);
        if (r.ec != std::errc{} || r.ptr != f.data() + f.size()) {
          esft_fail(off, name, line_no, "bad expert id '" + std::string(f) + "'");
        }
        if (v < 0 || v >= opt.experts) {
          esft_fail(off, name, line_no,
                    "expert id " + std::to_string(v) + " out of range [0, " +
                        std::to_string(opt.experts) + ") at token " + std::to_string(i / k));
        }
        const std::size_t row = first_id + (i / k) * k;
        for (std::size_t j = row; j < out.ids.size(); ++j) {
          if (out.ids[j] == v) {
            esft_fail(
                off, name, line_no,
                "expert " + std::to_string(v) + " appears twice in token " + std::to_string(i / k));
          }
        }
        out.ids.push_back(static_cast<std::int32_t>(v));
      });
  if (n_ids % k != 0) {
    esft_fail(line_off, name, line_no,
              std::to_string(n_ids) + " ids is not a multiple of top_k " + std::to_string(k));
  }
  const std::size_t n_w =
      esft_fields(line.substr(split + 2), line_off + split + 2, name, line_no,
                  [&](std::string_view f, std::uint64_t off, std::size_t) {
                    float w = 0;
                    const auto r = std::from_chars(f.data(), f.data() + f.size(), w);
                    if (r.ec != std::errc{} || r.ptr != f.data() + f.size() || !std::isfinite(w)) {
                      esft_fail(off, name, line_no, "bad weight '" + std::string(f) + "'");
                    }
                    out.weights.push_back(w);
                  });
  if (n_w != n_ids) {
    esft_fail(line_off, name, line_no,
              std::to_string(n_w) + " weights for " + std::to_string(n_ids) + " ids");
  }
  out.tokens.push_back(n_ids / k);
}

/// Parses one file's text. `line` numbers in errors are 1-based.
[[nodiscard]] inline esft_file parse_esft_file(std::string_view text, const std::string& name,
                                               const esft_config& opt) {
  esft_file out;
  std::size_t pos = 0;
  std::size_t line_no = 0;
  while (pos < text.size()) {
    ++line_no;
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) {
      eol = text.size();
    }
    std::string_view line = text.substr(pos, eol - pos);
    const std::size_t line_off = pos;
    pos = eol + 1;
    if (!line.empty() && line.back() == '\r') {
      line.remove_suffix(1);
    }
    if (line.empty()) {
      esft_fail(line_off, name, line_no, "empty line");
    }
    parse_esft_line(line, line_off, name, line_no, opt, out);
  }
  return out;
}

/// @brief Throws if the ids look like top-k' routing for a multiple k' of `opt.top_k`: no group of
/// k' consecutive ids in any line of any file repeats an id, every line splits into such groups,
/// and that many groups being repeat-free would be very unlikely (below one in a million) if
/// the routing were top-k over uniformly chosen experts (real routing repeats experts between
/// neighbouring tokens more often still, so the bound is conservative).
inline void esft_check_top_k(const std::vector<esft_file>& files,
                             const std::vector<std::string>& names, const esft_config& opt) {
  const auto k = static_cast<std::size_t>(opt.top_k);
  const auto experts = static_cast<std::size_t>(opt.experts);
  std::vector<std::uint32_t> seen(experts, 0);
  std::uint32_t stamp = 0;
  std::size_t looks_like = 0;
  std::size_t evidence = 0;
  for (std::size_t group = 2 * k; group <= experts; group += k) {
    bool repeat_free = true;
    std::size_t groups = 0;
    for (const esft_file& f : files) {
      for (const std::size_t tokens : f.tokens) {
        repeat_free = repeat_free && (tokens * k) % group == 0;
      }
      for (std::size_t g = 0; repeat_free && g + group <= f.ids.size(); g += group) {
        ++stamp;
        for (std::size_t i = g; i < g + group && repeat_free; ++i) {
          auto& mark = seen[static_cast<std::size_t>(f.ids[i])];
          repeat_free = mark != stamp;
          mark = stamp;
        }
        ++groups;
      }
      if (!repeat_free) {
        break;
      }
    }
    if (!repeat_free || groups == 0) {
      continue;
    }
    // log P(a group of `group / k` independent uniform top-k tokens repeats no id).
    double log_p = 0.0;
    for (std::size_t taken = k; taken < group; ++taken) {
      log_p +=
          std::log(static_cast<double>(experts - taken) / static_cast<double>(experts - taken % k));
    }
    if (static_cast<double>(groups) * log_p < std::log(1e-6)) {
      looks_like = group;
      evidence = groups;
    }
  }
  if (looks_like != 0) {
    throw format_error(
        "top_k " + std::to_string(k) + " does not fit the data: no group of " +
        std::to_string(looks_like) + " consecutive ids repeats an expert in any of " +
        std::to_string(evidence) + " groups of " + names.front() + ".." + names.back() +
        ", which is what top-" + std::to_string(looks_like) + " routing looks like (top-" +
        std::to_string(k) + " routing would repeat experts there); give the model's top-k");
  }
}

/// The `expert_weights_<L>.txt` files of `dir` by L, which must run 1..N without gaps.
/// @throws wisp::error if `dir` is not a readable folder; wisp::format_error on no or missing
/// files.
[[nodiscard]] inline std::map<long, std::filesystem::path> esft_layer_files(
    const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);
  if (status.type() == fs::file_type::not_found) {
    throw error("cannot open ESFT folder " + dir.string() + ": " +
                std::generic_category().message(ENOENT));
  }
  if (ec || status.type() != fs::file_type::directory) {
    throw error("cannot open ESFT folder " + dir.string() + ": " +
                (ec ? ec.message() : "it is not a folder"));
  }
  std::map<long, fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    constexpr std::string_view prefix = "expert_weights_";
    constexpr std::string_view suffix = ".txt";
    if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) ||
        !name.ends_with(suffix)) {
      continue;
    }
    const std::string_view num(name.data() + prefix.size(),
                               name.size() - prefix.size() - suffix.size());
    long n = 0;
    const auto r = std::from_chars(num.data(), num.data() + num.size(), n);
    if (r.ec != std::errc{} || r.ptr != num.data() + num.size() || n < 1) {
      continue;
    }
    files.emplace(n, entry.path());
  }
  if (files.empty()) {
    throw format_error("no expert_weights_<L>.txt files in " + dir.string());
  }
  const auto layers = static_cast<long>(files.size());
  if (files.rbegin()->first != layers) {
    long missing = 1;
    while (files.count(missing) != 0) {
      ++missing;
    }
    throw format_error("expert_weights_" + std::to_string(missing) + ".txt is missing in " +
                       dir.string() + " (found " + std::to_string(layers) +
                       " files, largest index " + std::to_string(files.rbegin()->first) + ")");
  }
  return files;
}

/// Parses every file (in layer order, their names into `names`), reporting progress; with
/// `on_incomplete` = error, every file must have the first's lines and tokens per line.
[[nodiscard]] inline std::vector<esft_file> esft_read_files(
    const std::map<long, std::filesystem::path>& files, const esft_config& opt,
    std::vector<std::string>& names) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::uint64_t total_bytes = 0;
  for (const auto& [index, path] : files) {
    total_bytes += static_cast<std::uint64_t>(fs::file_size(path, ec));
  }
  std::vector<esft_file> parsed;
  parsed.reserve(files.size());
  std::uint64_t read_bytes = 0;
  for (const auto& [index, path] : files) {
    std::ifstream in = wisp::detail::open_for_reading(path);
    std::ostringstream text;
    text << in.rdbuf();
    names.push_back(path.filename().string());
    parsed.push_back(parse_esft_file(text.str(), names.back(), opt));
    read_bytes += text.str().size();
    if (opt.progress) {
      opt.progress(read_bytes, total_bytes);
    }
    if (opt.on_incomplete != incomplete_tokens::error) {
      continue;  // short lines and files are resolved below
    }
    const auto& cur = parsed.back();
    const auto& first = parsed.front();
    if (cur.tokens.size() != first.tokens.size()) {
      throw format_error(names.back() + " has " + std::to_string(cur.tokens.size()) +
                         " lines but " + names.front() + " has " +
                         std::to_string(first.tokens.size()) +
                         " (on_incomplete can skip or keep the tokens a shorter file lacks)");
    }
    for (std::size_t i = 0; i < cur.tokens.size(); ++i) {
      if (cur.tokens[i] != first.tokens[i]) {
        throw format_error(names.back() + " line " + std::to_string(i + 1) + ": " +
                           std::to_string(cur.tokens[i]) + " tokens but " + names.front() +
                           " line " + std::to_string(i + 1) + " has " +
                           std::to_string(first.tokens[i]) +
                           " (on_incomplete can skip or keep the tokens such a line lacks)");
      }
    }
  }
  return parsed;
}

/// The trace of the parsed files: line i of every file is sequence i, its tokens the steps;
/// tokens some files lack are skipped or kept as `opt.on_incomplete` says, and counted.
[[nodiscard]] inline imported_trace esft_build_trace(const std::vector<esft_file>& parsed,
                                                     const esft_config& opt) {
  // Line i of file l holds tokens_of(l, i) tokens: 0 when the file is shorter.
  std::size_t lines = 0;
  for (const auto& f : parsed) {
    lines = std::max(lines, f.tokens.size());
  }
  auto tokens_of = [&](std::size_t l, std::size_t i) {
    return i < parsed[l].tokens.size() ? parsed[l].tokens[i] : std::size_t{0};
  };
  const auto L = static_cast<std::int32_t>(parsed.size());
  const auto k = static_cast<std::size_t>(opt.top_k);
  routing_trace trace({L, opt.experts, opt.top_k});
  trace.reserve(parsed.front().ids.size() / k);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(L) * k);
  std::vector<float> ws(ids.size());
  std::vector<std::uint8_t> present(parsed.size());
  std::vector<std::size_t> base(parsed.size(), 0);  // each file's first token of the current line
  import_report report;
  for (std::size_t i = 0; i < lines; ++i) {
    std::size_t fewest = tokens_of(0, i);
    std::size_t most = fewest;
    for (std::size_t l = 1; l < parsed.size(); ++l) {
      fewest = std::min(fewest, tokens_of(l, i));
      most = std::max(most, tokens_of(l, i));
    }
    const std::size_t kept = opt.on_incomplete == incomplete_tokens::keep ? most : fewest;
    if (most != fewest) {
      ++report.incomplete_sequences;
      report.incomplete_tokens += most - fewest;
      for (std::size_t l = 0; l < parsed.size(); ++l) {
        report.missing_records += most - tokens_of(l, i);
        if (opt.on_incomplete == incomplete_tokens::skip) {
          report.dropped_records += tokens_of(l, i) - fewest;
        }
      }
      (opt.on_incomplete == incomplete_tokens::skip ? report.dropped_tokens
                                                    : report.partial_tokens) += most - fewest;
    }
    if (kept > 0) {
      trace.begin_sequence();
    }
    for (std::size_t t = 0; t < kept; ++t) {
      for (std::size_t l = 0; l < parsed.size(); ++l) {
        present[l] = t < tokens_of(l, i) ? 1 : 0;
        const std::size_t src = (base[l] + t) * k;
        for (std::size_t j = 0; j < k && present[l] != 0; ++j) {
          ids[l * k + j] = parsed[l].ids[src + j];
          ws[l * k + j] = parsed[l].weights[src + j];
        }
      }
      if (t < fewest) {
        trace.append_step(ids, ws);
      } else {
        trace.append_partial_step(ids, present, ws);
      }
    }
    for (std::size_t l = 0; l < parsed.size(); ++l) {
      base[l] += tokens_of(l, i);
    }
  }
  return {std::move(trace), report};
}

}  // namespace detail

/// @brief Imports an ESFT expert-score folder (see the file comment).
///
/// Reads every `expert_weights_<L>.txt` in `dir` (L must run 1..N without gaps), validates that
/// all files have the same number of lines and the same token count per line (unless
/// `opt.on_incomplete` skips or keeps the tokens of lines that differ), that every id is
/// in `[0, experts)`, that each token's k ids are distinct and that weights match ids one to one.
/// Time O(total text), memory O(activations) (all files are parsed before the trace is built).
/// @throws wisp::logic_error if `opt` is not a valid shape; wisp::error if the folder or a file
///         cannot be read (naming the operating system's reason); wisp::format_error naming the
///         file, line and problem (the offset is the byte in that file), or when `top_k` does not
///         fit the data (see the file comment).
[[nodiscard]] inline imported_trace import_esft(const std::filesystem::path& dir,
                                                const esft_config& opt = {}) {
  moe_shape{1, opt.experts, opt.top_k}.validate();
  const std::map<long, std::filesystem::path> files = detail::esft_layer_files(dir);
  std::vector<std::string> names;
  const std::vector<detail::esft_file> parsed = detail::esft_read_files(files, opt, names);
  detail::esft_check_top_k(parsed, names, opt);
  return detail::esft_build_trace(parsed, opt);
}

}  // namespace wisp
