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
/// @code
/// auto trace = wisp::trace::import_esft("traces/raw/esft_deepseek_v2_lite_intent");
/// // trace.shape() == {26, 64, 6}; trace.steps() == 8222; trace.sequence_starts().size() == 127
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/trace/routing_trace.hpp>

#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace wisp::trace {

/// @brief Parameters of the ESFT model that the text files do not record.
struct esft_options {
  std::int32_t experts = 64;  ///< Routed experts per layer (DeepSeek-V2-Lite: 64).
  std::int32_t top_k = 6;     ///< Ids per token and layer (DeepSeek-V2-Lite: 6).
};

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

/// Parses one file's text. `line` numbers in errors are 1-based.
[[nodiscard]] inline esft_file parse_esft_file(std::string_view text, const std::string& name,
                                               const esft_options& opt) {
  esft_file out;
  const auto k = static_cast<std::size_t>(opt.top_k);
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
    const std::size_t split = line.find("\t\t");
    if (split == std::string_view::npos) {
      esft_fail(line_off, name, line_no, "missing the double tab between ids and weights");
    }
    // Parse one tab-separated field list into numbers; returns the count.
    auto fields = [&](std::string_view part, std::size_t base, auto&& emit) {
      std::size_t count = 0;
      std::size_t p = 0;
      while (true) {
        std::size_t tab = part.find('\t', p);
        if (tab == std::string_view::npos) {
          tab = part.size();
        }
        const std::string_view f = part.substr(p, tab - p);
        if (f.empty()) {
          esft_fail(line_off + base + p, name, line_no,
                    "empty field (stray tab) at field " + std::to_string(count));
        }
        emit(f, line_off + base + p, count);
        ++count;
        if (tab == part.size()) {
          break;
        }
        p = tab + 1;
      }
      return count;
    };
    const std::size_t first_id = out.ids.size();
    const std::size_t n_ids =
        fields(line.substr(0, split), 0, [&](std::string_view f, std::uint64_t off, std::size_t i) {
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
              esft_fail(off, name, line_no,
                        "expert " + std::to_string(v) + " appears twice in token " +
                            std::to_string(i / k));
            }
          }
          out.ids.push_back(static_cast<std::int32_t>(v));
        });
    if (n_ids % k != 0) {
      esft_fail(line_off, name, line_no,
                std::to_string(n_ids) + " ids is not a multiple of top_k " + std::to_string(k));
    }
    const std::size_t n_w = fields(
        line.substr(split + 2), split + 2, [&](std::string_view f, std::uint64_t off, std::size_t) {
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
  return out;
}

}  // namespace detail

/// @brief Imports an ESFT expert-score folder (see the file comment).
///
/// Reads every `expert_weights_<L>.txt` in `dir` (L must run 1..N without gaps), validates that
/// all files have the same number of lines and the same token count per line, that every id is
/// in `[0, experts)`, that each token's k ids are distinct and that weights match ids one to one.
/// Time O(total text), memory O(activations) (all files are parsed before the trace is built).
/// @throws wisp::logic_error if `opt` is not a valid shape; wisp::error if the folder or a file
///         cannot be read; wisp::format_error naming the file, line and problem (the offset is
///         the byte in that file).
[[nodiscard]] inline routing_trace import_esft(const std::filesystem::path& dir,
                                               const esft_options& opt = {}) {
  namespace fs = std::filesystem;
  trace_shape{1, opt.experts, opt.top_k}.validate();
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    WISP_FAIL(wisp::error, "ESFT input ", dir.string(), " is not a readable folder");
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

  std::vector<detail::esft_file> parsed;
  parsed.reserve(files.size());
  for (const auto& [index, path] : files) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      WISP_FAIL(wisp::error, "cannot open ", path.string());
    }
    std::ostringstream text;
    text << in.rdbuf();
    const std::string name = path.filename().string();
    parsed.push_back(detail::parse_esft_file(text.str(), name, opt));
    const auto& cur = parsed.back();
    const auto& first = parsed.front();
    if (cur.tokens.size() != first.tokens.size()) {
      throw format_error(name + " has " + std::to_string(cur.tokens.size()) + " lines but " +
                         files.begin()->second.filename().string() + " has " +
                         std::to_string(first.tokens.size()));
    }
    for (std::size_t i = 0; i < cur.tokens.size(); ++i) {
      if (cur.tokens[i] != first.tokens[i]) {
        throw format_error(name + " line " + std::to_string(i + 1) + ": " +
                           std::to_string(cur.tokens[i]) + " tokens but " +
                           files.begin()->second.filename().string() + " line " +
                           std::to_string(i + 1) + " has " + std::to_string(first.tokens[i]));
      }
    }
  }

  const auto L = static_cast<std::int32_t>(layers);
  const auto k = static_cast<std::size_t>(opt.top_k);
  routing_trace trace({L, opt.experts, opt.top_k});
  std::size_t total_tokens = 0;
  for (const std::size_t t : parsed.front().tokens) {
    total_tokens += t;
  }
  trace.reserve(total_tokens);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(L) * k);
  std::vector<float> ws(ids.size());
  std::size_t token_base = 0;  // first token of the current line, in every file's flat arrays
  for (const std::size_t tokens : parsed.front().tokens) {
    trace.begin_sequence();
    for (std::size_t t = 0; t < tokens; ++t) {
      const std::size_t src = (token_base + t) * k;
      for (std::size_t l = 0; l < parsed.size(); ++l) {
        for (std::size_t j = 0; j < k; ++j) {
          ids[l * k + j] = parsed[l].ids[src + j];
          ws[l * k + j] = parsed[l].weights[src + j];
        }
      }
      trace.append_step(ids, ws);
    }
    token_base += tokens;
  }
  return trace;
}

}  // namespace wisp::trace
