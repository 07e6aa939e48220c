// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief What the engine serves: the requests, the routing trace that routes them, and the
/// warm-up sessions that come first.
///
/// Every workload is a list of sessions in arrival order; the first 20% are the **warm-up**
/// (served once, before any arm is measured: `static-hot` profiles it, the pager arms replay it to
/// warm their caches and size their plan) and the rest are **evaluated** (every arm serves exactly
/// these). Nothing an arm learns comes from the evaluated sessions.
///
/// - `chat`: stationary routing (one synthetic trace, the ESFT-calibrated "default" preset);
///   prompts of 16-47 tokens, 24 generated.
/// - `shift`: four routing domains (synthetic traces with different seeds: different per-layer
///   expert popularity, as different tasks have), sessions arriving in phases of four, each phase
///   from the next domain; phases alternate long-context turns (96-127 tokens, 16 generated) and
///   tool-call bursts (8-15 tokens, 8 generated). A frequency profile of the first phase goes stale
///   when the domain changes.
/// - a recorded trace (`--routing trace FILE`): one session per recorded sequence, its positions
///   routed by the sequence's own steps; the last `min(24, T/2)` positions are generated.
#pragma once

#include "model.hpp"
#include "scheduler.hpp"

#include <wisp/core/error.hpp>
#include <wisp/trace/esft.hpp>
#include <wisp/trace/import.hpp>
#include <wisp/trace/jsonl.hpp>
#include <wisp/trace/routing_trace.hpp>
#include <wisp/trace/synthetic.hpp>
#include <wisp/trace/wtrace.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace wisp_engine {

/// @brief Sessions to serve and the routing trace their positions index (`request::trace_offset`
/// + position is a step of `trace`).
struct workload {
  std::string name;
  wisp::routing_trace trace{wisp::moe_shape{1, 1, 1}};
  std::vector<request> warmup;     ///< served first, never measured
  std::vector<request> evaluated;  ///< what every arm serves and is measured on
};

/// Warm-up sessions for `evaluated` measured ones: 20% of the total (at least one).
[[nodiscard]] inline std::int32_t warmup_sessions(std::int32_t evaluated) noexcept {
  return std::max(1, evaluated / 4);
}

/// @brief The synthetic routing trace of one domain for the model's shape ("default" preset).
[[nodiscard]] inline wisp::routing_trace synthetic_domain(const model_config& c,
                                                          std::size_t steps = 4096,
                                                          std::uint64_t seed = 7) {
  wisp::synthetic_config s = wisp::synthetic_preset("default");
  s.layers = c.layers;
  s.experts = c.experts;
  s.top_k = c.top_k;
  s.working_set = std::max(c.top_k - 1, 1);
  return wisp::make_synthetic_trace(s, steps, seed);
}

namespace detail {
/// splitmix64: the workloads' deterministic stream.
struct stream {
  std::uint64_t z;
  std::uint64_t operator()() noexcept {
    z += 0x9E3779B97F4A7C15ull;
    std::uint64_t x = z;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  }
};

inline request make_request(std::int32_t id, std::int32_t prompt, std::int32_t gen,
                            std::uint64_t offset, const model_config& c, stream& next) {
  request r;
  r.id = id;
  for (std::int32_t i = 0; i < prompt; ++i) {
    r.prompt.push_back(static_cast<std::int32_t>(next() % static_cast<std::uint64_t>(c.vocab)));
  }
  r.max_new_tokens = gen;
  r.trace_offset = offset;
  return r;
}

/// Appends every step of `from` to `to`, keeping sequence starts.
inline void append_trace(wisp::routing_trace& to, const wisp::routing_trace& from) {
  const std::size_t n = from.shape().ids_per_step();
  std::vector<std::int32_t> ids(n);
  const auto starts = from.sequence_starts();
  std::size_t s = 0;
  for (std::size_t step = 0; step < from.steps(); ++step) {
    if (s < starts.size() && starts[s] == step) {
      to.begin_sequence();
      ++s;
    }
    for (std::int32_t l = 0; l < from.shape().layers; ++l) {
      for (std::int32_t j = 0; j < from.shape().top_k; ++j) {
        ids[static_cast<std::size_t>(l * from.shape().top_k + j)] = from.expert(step, l, j);
      }
    }
    to.append_step(ids);
  }
}

inline void split_warmup(workload& w, std::vector<request> all, std::size_t warm) {
  w.warmup.assign(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(warm));
  w.evaluated.assign(all.begin() + static_cast<std::ptrdiff_t>(warm), all.end());
}
}  // namespace detail

/// @brief The `chat` or `shift` workload with `sessions` evaluated sessions (plus
/// `warmup_sessions(sessions)` first). Deterministic in `seed`.
/// @throws wisp::logic_error on another name or `sessions < 1`.
[[nodiscard]] inline workload synthetic_workload(std::string_view name, const model_config& c,
                                                 std::int32_t sessions, std::uint64_t seed = 3) {
  WISP_EXPECTS(name == "chat" || name == "shift", "unknown workload '", name,
               "' (valid: chat, shift)");
  WISP_EXPECTS(sessions >= 1, "a workload needs at least one session, got ", sessions);
  constexpr std::size_t domain_steps = 4096;
  constexpr std::size_t headroom = 256;  // a session's positions stay inside its domain
  const std::int32_t domains = name == "shift" ? 4 : 1;
  workload w;
  w.name = std::string(name);
  w.trace = wisp::routing_trace(wisp::moe_shape{c.layers, c.experts, c.top_k});
  std::vector<std::vector<std::size_t>> starts(static_cast<std::size_t>(domains));
  for (std::int32_t d = 0; d < domains; ++d) {
    const auto t = synthetic_domain(c, domain_steps, 7 + static_cast<std::uint64_t>(d));
    for (const std::size_t s : t.sequence_starts()) {
      if (s + headroom <= domain_steps) {
        starts[static_cast<std::size_t>(d)].push_back(w.trace.steps() + s);
      }
    }
    detail::append_trace(w.trace, t);
  }
  detail::stream next{seed};
  const std::int32_t warm = warmup_sessions(sessions);
  std::vector<request> all;
  for (std::int32_t i = 0; i < warm + sessions; ++i) {
    const auto& pool = starts[static_cast<std::size_t>((i / 4) % domains)];
    const std::uint64_t offset = pool[next() % pool.size()];
    if (name == "chat") {
      all.push_back(detail::make_request(i, 16 + static_cast<std::int32_t>(next() % 32), 24, offset,
                                         c, next));
    } else if ((i / 4) % 2 == 0) {  // long-context turn
      all.push_back(detail::make_request(i, 96 + static_cast<std::int32_t>(next() % 32), 16, offset,
                                         c, next));
    } else {  // tool-call burst
      all.push_back(
          detail::make_request(i, 8 + static_cast<std::int32_t>(next() % 8), 8, offset, c, next));
    }
  }
  detail::split_warmup(w, std::move(all), static_cast<std::size_t>(warm));
  return w;
}

/// @brief Reads a recorded routing trace: an ESFT `expert_weights` folder, a `.jsonl` log or a
/// `.wtrace` file. Tokens that lack a layer are refused (`incomplete_tokens::error`) or left out
/// (`skip`, counted in the report); the engine routes every layer of every token, so it cannot
/// keep partial steps.
/// @throws wisp::error if it cannot be read, wisp::format_error if it is malformed or (a
///   `.wtrace`) holds partial steps, wisp::logic_error for `incomplete_tokens::keep`.
[[nodiscard]] inline wisp::imported_trace read_routing_trace(
    const std::string& path,
    wisp::incomplete_tokens on_incomplete = wisp::incomplete_tokens::error) {
  WISP_EXPECTS(on_incomplete != wisp::incomplete_tokens::keep,
               "the engine routes every layer of every token: incomplete tokens can be refused "
               "(error) or left out (skip), not kept");
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return wisp::import_esft(path, {.on_incomplete = on_incomplete});
  }
  if (std::filesystem::path(path).extension() == ".jsonl") {
    wisp::jsonl_config opt;
    opt.on_incomplete = on_incomplete;
    return wisp::import_jsonl(std::filesystem::path(path), opt);
  }
  wisp::imported_trace t{wisp::read_wtrace(std::filesystem::path(path)), {}};
  if (!t.trace.complete()) {
    WISP_FAIL(wisp::format_error, path, ": ", t.trace.missing_rows(),
              " (step, layer) rows are missing; the engine needs every layer of every token");
  }
  return t;
}

/// @brief One session per recorded sequence of `trace` (the whole trace is one sequence when it
/// marks none): the first 20% of the sequences are the warm-up, the next `sessions` (all when
/// 0) are evaluated. A sequence of `T` steps generates `min(24, T / 2)` tokens after a prompt of
/// the rest; sequences shorter than 2 steps are skipped. Prompt tokens are drawn from `seed`
/// (routing comes from the trace, not from them).
/// @throws wisp::logic_error if the trace's shape is not the model's, or fewer than two sequences
///   are usable (one warm-up, one evaluated).
[[nodiscard]] inline workload trace_workload(wisp::routing_trace trace, const model_config& c,
                                             std::int32_t sessions = 0, std::uint64_t seed = 3) {
  const auto& s = trace.shape();
  WISP_EXPECTS(s.layers == c.layers && s.experts == c.experts && s.top_k == c.top_k,
               "the trace has ", s.layers, " layers x ", s.experts, " experts (top-", s.top_k,
               ") but the model ", c.layers, " x ", c.experts, " (top-", c.top_k, ")");
  std::vector<std::size_t> starts(trace.sequence_starts().begin(), trace.sequence_starts().end());
  if (starts.empty() || starts.front() != 0) {
    starts.insert(starts.begin(), 0);
  }
  detail::stream next{seed};
  std::vector<request> all;
  for (std::size_t i = 0; i < starts.size(); ++i) {
    const std::size_t end = i + 1 < starts.size() ? starts[i + 1] : trace.steps();
    const auto len = static_cast<std::int32_t>(end - starts[i]);
    if (len < 2) {
      continue;
    }
    const std::int32_t gen = std::min(24, len / 2);
    all.push_back(detail::make_request(static_cast<std::int32_t>(all.size()), len - gen, gen,
                                       starts[i], c, next));
  }
  WISP_EXPECTS(all.size() >= 2, "the trace has ", all.size(),
               " sequences of 2 or more steps; the engine needs a warm-up and an evaluated one");
  const std::size_t warm = std::max<std::size_t>(1, all.size() / 5);
  if (sessions > 0) {
    all.resize(std::min(all.size(), warm + static_cast<std::size_t>(sessions)));
  }
  workload w;
  w.name = "trace";
  w.trace = std::move(trace);
  detail::split_warmup(w, std::move(all), warm);
  return w;
}

}  // namespace wisp_engine
