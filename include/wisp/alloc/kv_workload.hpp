// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief A KV-cache reference stream of synthetic agentic sessions (multi-turn, long-context
/// turns and tool-call bursts), for trace-driven evaluation of expert/KV splits.
///
/// **Model.** A pool of `sessions` live sessions; each *round* (one scheduling burst) serves
/// `concurrency` of them, chosen at random without replacement, one turn each. A turn is a
/// *tool-call burst* with probability `tool_call_fraction` (short tool output, long decode) and a
/// *long-context turn* otherwise (a long document, short answer). A turn
/// 1. looks up the session's cached prefix: every block of its context is referenced, last block
///    first, so LRU evicts a session's tail before its head and the missed blocks of a prefix are
///    always a suffix (vLLM frees blocks in reverse order for the same reason): a miss means the
///    block's `block_tokens` tokens are recomputed;
/// 2. appends the prompt and the decoded tokens: new blocks, first sight (cold: every split pays
///    them alike).
/// A session whose next turn would exceed `context` tokens ends and a fresh one takes its place;
/// its blocks are never referenced again. The sessions parked between turns (waiting on tools or
/// users) are what KV capacity above the admission floor keeps warm.
///
/// Blocks get dense ids in order of creation, so an array-indexed LRU or reuse counter can replay
/// the stream. Deterministic: the same phases and seed give the same stream.
/// @code
/// wisp::agentic_config cfg;            // 12 sessions, 4 at a time, 8k context
/// cfg.tool_call_fraction = 0.9;               // a tool-call-heavy workflow
/// auto kv = wisp::make_agentic_kv_stream({{cfg, 200}}, 7);
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/detail/random.hpp>
#include <wisp/core/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

namespace wisp {

/// @brief One kind of turn: prompt tokens drawn uniformly in `[prompt_min, prompt_max]`, then
/// `decode_tokens` generated tokens.
struct turn_shape {
  std::uint32_t prompt_min = 0;
  std::uint32_t prompt_max = 0;
  std::uint32_t decode_tokens = 0;
};

/// @brief Parameters of the agentic session model (see the file comment).
struct agentic_config {
  std::uint32_t sessions = 12;    ///< Live sessions in the pool, >= concurrency.
  std::uint32_t concurrency = 4;  ///< Sessions served per round (the admission floor's C).
  std::uint32_t context = 8192;   ///< Largest context of a session in tokens (the floor's N).
  std::uint32_t block_tokens = 16;
  double tool_call_fraction = 0.5;  ///< Probability that a turn is a tool-call burst.
  turn_shape long_turn{1024, 3072, 32};
  turn_shape tool_turn{64, 256, 160};

  /// @throws wisp::logic_error naming the bad field.
  void validate() const {
    WISP_EXPECTS(concurrency >= 1 && sessions >= concurrency, "need 1 <= concurrency (",
                 concurrency, ") <= sessions (", sessions, ")");
    WISP_EXPECTS(block_tokens >= 1, "block_tokens must be positive");
    WISP_EXPECTS(tool_call_fraction >= 0 && tool_call_fraction <= 1,
                 "tool_call_fraction must be in [0, 1], got ", tool_call_fraction);
    for (const turn_shape& t : {long_turn, tool_turn}) {
      WISP_EXPECTS(t.prompt_min <= t.prompt_max, "turn prompt_min ", t.prompt_min,
                   " exceeds prompt_max ", t.prompt_max);
      WISP_EXPECTS(std::uint64_t{t.prompt_max} + t.decode_tokens <= context, "a turn of up to ",
                   std::uint64_t{t.prompt_max} + t.decode_tokens,
                   " tokens does not fit the context of ", context);
      WISP_EXPECTS(t.prompt_max + t.decode_tokens > 0, "a turn must add tokens");
    }
  }
};

/// @brief A stretch of rounds run with one configuration (only the turn mix and shapes may
/// change between phases; the session pool carries over).
struct agentic_phase {
  agentic_config config;
  std::uint32_t rounds = 0;
};

/// @brief One round of the KV stream.
struct kv_round {
  std::uint64_t begin = 0;          ///< First access of the round in `kv_stream::accesses`.
  std::uint64_t end = 0;            ///< One past the last.
  std::uint32_t decode_tokens = 0;  ///< Tokens decoded this round (expert-stream steps).
  std::uint32_t tool_turns = 0;
  std::uint32_t long_turns = 0;
  std::uint64_t working_blocks = 0;  ///< Blocks the round's sessions hold at its end (peak use).
  std::uint32_t phase = 0;
};

/// @brief The block reference stream and its rounds.
struct kv_stream {
  std::vector<std::uint32_t> accesses;  ///< Block ids in reference order.
  std::vector<kv_round> rounds;
  std::uint32_t blocks = 0;  ///< Distinct block ids (`[0, blocks)`).
  std::uint32_t block_tokens = 16;
  std::uint64_t decode_tokens = 0;  ///< Sum over rounds.
};

/// @brief Generates the stream of `phases` run back to back. O(accesses).
/// @throws wisp::logic_error on an invalid configuration, phases that change the pool
/// (`sessions`, `concurrency`, `context`, `block_tokens`), or more than 2^32 - 2 blocks.
[[nodiscard]] inline kv_stream make_agentic_kv_stream(std::span<const agentic_phase> phases,
                                                      std::uint64_t seed) {
  WISP_EXPECTS(!phases.empty(), "an agentic workload needs at least one phase");
  const agentic_config& base = phases.front().config;
  for (const auto& p : phases) {
    p.config.validate();
    WISP_EXPECTS(p.config.sessions == base.sessions && p.config.concurrency == base.concurrency &&
                     p.config.context == base.context && p.config.block_tokens == base.block_tokens,
                 "phases must share the session pool (sessions, concurrency, context, "
                 "block_tokens)");
  }
  wisp::detail::xoshiro256ss rng{seed};
  struct session {
    std::uint32_t tokens = 0;
    std::vector<std::uint32_t> blocks;
  };
  std::vector<session> pool(base.sessions);
  kv_stream out;
  out.block_tokens = base.block_tokens;
  const std::uint32_t bt = base.block_tokens;
  auto blocks_for = [bt](std::uint64_t tokens) { return (tokens + bt - 1) / bt; };
  std::vector<std::uint32_t> order(base.sessions);
  for (std::uint32_t phase = 0; phase < phases.size(); ++phase) {
    const agentic_config& cfg = phases[phase].config;
    const auto tool_threshold = wisp::detail::probability_threshold(cfg.tool_call_fraction);
    for (std::uint32_t r = 0; r < phases[phase].rounds; ++r) {
      kv_round round;
      round.phase = phase;
      round.begin = out.accesses.size();
      // Choose `concurrency` distinct sessions (partial Fisher-Yates).
      for (std::uint32_t i = 0; i < base.sessions; ++i) {
        order[i] = i;
      }
      for (std::uint32_t i = 0; i < cfg.concurrency; ++i) {
        const auto j = i + static_cast<std::uint32_t>(rng.below(base.sessions - i));
        std::swap(order[i], order[j]);
      }
      for (std::uint32_t i = 0; i < cfg.concurrency; ++i) {
        session& s = pool[order[i]];
        const bool tool = rng.chance(tool_threshold);
        const turn_shape& shape = tool ? cfg.tool_turn : cfg.long_turn;
        const auto prompt = static_cast<std::uint32_t>(
            shape.prompt_min + rng.below(std::uint64_t{shape.prompt_max} - shape.prompt_min + 1));
        const std::uint32_t added = prompt + shape.decode_tokens;
        if (std::uint64_t{s.tokens} + added > cfg.context) {
          s = session{};  // the session ends; a fresh one takes its place
        }
        for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it) {
          out.accesses.push_back(*it);  // prefix lookup, last block first
        }
        const std::uint64_t before = blocks_for(s.tokens);
        s.tokens += added;
        for (std::uint64_t b = before; b < blocks_for(s.tokens); ++b) {
          WISP_EXPECTS(out.blocks < 0xFFFFFFFEu, "the KV stream exceeds 2^32 - 2 blocks");
          s.blocks.push_back(out.blocks);
          out.accesses.push_back(out.blocks);  // first sight
          ++out.blocks;
        }
        round.decode_tokens += shape.decode_tokens;
        round.working_blocks += s.blocks.size();
        (tool ? round.tool_turns : round.long_turns) += 1;
      }
      round.end = out.accesses.size();
      out.decode_tokens += round.decode_tokens;
      out.rounds.push_back(round);
    }
  }
  return out;
}

/// @brief Overload for a braced list of phases.
[[nodiscard]] inline kv_stream make_agentic_kv_stream(std::initializer_list<agentic_phase> phases,
                                                      std::uint64_t seed) {
  return make_agentic_kv_stream(std::span<const agentic_phase>(phases.begin(), phases.size()),
                                seed);
}

}  // namespace wisp
