// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The expert/KV split of one device budget, in exact integer arithmetic, and the KV
/// admission floor.
///
/// A split gives experts a per-layer cap `c` and the KV cache the rest in whole blocks:
///
///     expert_bytes = c * L * expert_bytes_per_expert
///     kv_blocks    = floor((B - expert_bytes) / (block_tokens * kv_bytes_per_token))
///     slack        = B - expert_bytes - kv_blocks * kv_block_bytes      (< one KV block)
///
/// so `expert_bytes + kv_bytes + slack == B` exactly. The admission floor (WiSP Eq. 6) requires
/// `kv_blocks * block_tokens >= concurrency * context`: an expert-heavy split that breaks it
/// cannot admit the concurrent sessions. Feasible caps form the interval `[k, max_feasible_cap]`.
/// @code
/// using namespace wisp::literals;
/// const auto m = wisp::model_preset("qwen3-30b-a3b");
/// const wisp::admission_floor floor{4, 8192};            // 4 sessions x 8k tokens
/// const auto s = wisp::make_split(m, 24_GiB, 32);         // cap 32 in each of 48 layers
/// bool ok = floor.admits(m, s);
/// auto hi = wisp::max_feasible_cap(m, 24_GiB, floor);    // throws infeasible_error if none
/// @endcode
#pragma once

#include <wisp/alloc/model_spec.hpp>
#include <wisp/alloc/units.hpp>
#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/core/ids.hpp>

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <string>

namespace wisp {

/// @brief One split of a budget between the expert pool and the KV pool.
struct split {
  std::int32_t expert_cap = 0;  ///< Per-layer expert slots c.
  std::uint64_t kv_blocks = 0;  ///< KV blocks.
  byte_size expert_bytes{};     ///< `c * L * expert_bytes`.
  byte_size kv_bytes{};         ///< `kv_blocks * kv_block_bytes`.
  byte_size slack{};            ///< Budget left over (less than one KV block).
  std::uint64_t kv_tokens = 0;  ///< `kv_blocks * block_tokens`.

  /// Bytes in use: `expert_bytes + kv_bytes` (never above the budget).
  [[nodiscard]] byte_size used() const { return expert_bytes + kv_bytes; }

  friend bool operator==(const split&, const split&) = default;
  friend std::ostream& operator<<(std::ostream& out, const split& s) {
    return out << "cap " << s.expert_cap << " (" << s.expert_bytes.count() << " B), " << s.kv_blocks
               << " KV blocks (" << s.kv_bytes.count() << " B, " << s.kv_tokens
               << " tokens), slack " << s.slack.count() << " B";
  }
};

/// @brief The split with per-layer cap `cap` and every remaining whole KV block. O(1), exact.
/// @throws wisp::logic_error if the spec is invalid, `cap` is outside `[top_k, experts]`, or the
/// cap alone exceeds the budget (the message gives the cap's bytes and the budget).
[[nodiscard]] inline split make_split(const model_spec& m, byte_size budget, std::int32_t cap) {
  m.validate();
  WISP_EXPECTS(cap >= m.top_k && cap <= m.experts, "expert cap ", cap,
               " is outside [top_k, experts]", " = [", m.top_k, ", ", m.experts, "] for ", m.name);
  const byte_size experts = m.expert_pool_bytes(cap);
  WISP_EXPECTS(experts <= budget, "expert cap ", cap, " needs ", experts.count(), " B (", cap,
               " x ", m.layers, " layers x ", m.expert_bytes.count(), " B) but the budget is only ",
               budget.count(), " B");
  const byte_size rest = budget - experts;
  const byte_size block = m.kv_block_bytes();
  const std::uint64_t blocks = rest / block;
  split s;
  s.expert_cap = cap;
  s.kv_blocks = blocks;
  s.expert_bytes = experts;
  s.kv_bytes = block * blocks;
  s.slack = rest - s.kv_bytes;
  s.kv_tokens = blocks * m.block_tokens;  // <= rest / kv_bytes_per_token: cannot overflow
  return s;
}

/// @brief A split of `budget` with an explicit KV pool (e.g. a plan step that is not the
/// "every remaining block" split). @throws wisp::logic_error if `cap` is outside `[k, E]` or the
/// two pools exceed the budget.
[[nodiscard]] inline split make_split(const model_spec& m, byte_size budget, std::int32_t cap,
                                      std::uint64_t kv_blocks) {
  const split full = make_split(m, budget, cap);
  WISP_EXPECTS(kv_blocks <= full.kv_blocks, "cap ", cap, " with ", kv_blocks,
               " KV blocks exceeds the budget of ", budget.count(), " B (at most ", full.kv_blocks,
               " blocks fit)");
  split s = full;
  s.kv_blocks = kv_blocks;
  s.kv_bytes = m.kv_block_bytes() * kv_blocks;
  s.kv_tokens = kv_blocks * m.block_tokens;
  s.slack = budget - s.expert_bytes - s.kv_bytes;
  return s;
}

/// @brief The KV admission floor: the pool must hold `concurrency` sessions of `context` tokens.
struct admission_floor {
  std::uint64_t concurrency = 0;  ///< Sessions served at once.
  std::uint64_t context = 0;      ///< Tokens per session (e.g. max_model_len).

  /// `concurrency * context`. @throws wisp::logic_error on overflow.
  [[nodiscard]] std::uint64_t tokens() const { return (byte_size{concurrency} * context).count(); }
  /// Smallest number of blocks that holds `tokens()`: `ceil(tokens / block_tokens)`.
  /// @throws wisp::logic_error if `block_tokens` is 0 or on overflow.
  [[nodiscard]] std::uint64_t blocks(std::uint64_t block_tokens) const {
    WISP_EXPECTS(block_tokens > 0, "block_tokens must be positive");
    const std::uint64_t t = tokens();
    return t / block_tokens + (t % block_tokens != 0 ? 1 : 0);
  }
  /// Bytes of `blocks(m.block_tokens)` KV blocks.
  [[nodiscard]] byte_size bytes(const model_spec& m) const {
    return m.kv_block_bytes() * blocks(m.block_tokens);
  }
  /// Whether `s` meets the floor: `kv_blocks * block_tokens >= concurrency * context`.
  [[nodiscard]] bool admits(const model_spec& m, const split& s) const {
    return s.kv_blocks >= blocks(m.block_tokens);
  }

  friend bool operator==(const admission_floor&, const admission_floor&) = default;
};

/// @brief The smallest budget with a feasible split: `k * L * expert_bytes + floor bytes`
/// (the cap at its minimum `k`, the KV pool at the floor). Exact.
/// @throws wisp::logic_error on overflow or an invalid spec.
[[nodiscard]] inline byte_size minimum_budget(const model_spec& m, const admission_floor& floor) {
  m.validate();
  return m.expert_pool_bytes(m.top_k) + floor.bytes(m);
}

/// @brief Whether the cap `cap` (in `[k, E]`) is feasible at `budget`: its expert pool fits and the
/// remaining KV blocks meet the floor. O(1).
/// @throws wisp::logic_error if `cap` is outside `[k, E]`.
[[nodiscard]] inline bool feasible(const model_spec& m, byte_size budget,
                                   const admission_floor& floor, std::int32_t cap) {
  m.validate();
  WISP_EXPECTS(cap >= m.top_k && cap <= m.experts, "expert cap ", cap,
               " is outside [top_k, experts]", " = [", m.top_k, ", ", m.experts, "] for ", m.name);
  const byte_size experts = m.expert_pool_bytes(cap);
  return experts <= budget && floor.admits(m, make_split(m, budget, cap));
}

/// @brief Throws `wisp::infeasible_error` stating the budget, the floor and the smallest budget
/// that would work, unless `budget >= minimum_budget(m, floor)`.
inline void require_feasible(const model_spec& m, byte_size budget, const admission_floor& floor) {
  const byte_size needed = minimum_budget(m, floor);
  if (budget < needed) {
    const byte_size experts = m.expert_pool_bytes(m.top_k);
    const std::string floor_text =
        std::to_string(floor.tokens()) + " tokens (" + std::to_string(floor.concurrency) +
        " sessions x " + std::to_string(floor.context) +
        " tokens = " + std::to_string(floor.blocks(m.block_tokens)) +
        " blocks = " + format_bytes_and_gib(floor.bytes(m).count()) + ")";
    if (budget < experts) {
      WISP_FAIL(infeasible_error, "no split of the budget ", format_bytes_and_gib(budget.count()),
                " is feasible for ", m.name,
                ": it is below the fixed cost of the minimum expert cap (top_k = ", m.top_k,
                " slots x ", m.layers, " layers x ", m.expert_bytes.count(),
                " B = ", format_bytes_and_gib(experts.count()),
                "); with the KV admission floor of ", floor_text,
                " the smallest budget that works is ", format_bytes_and_gib(needed.count()));
    }
    WISP_FAIL(infeasible_error, "no split of the budget ", format_bytes_and_gib(budget.count()),
              " is feasible for ", m.name, ": the KV admission floor needs ", floor_text,
              " and the minimum expert cap (top_k = ", m.top_k, ") needs ",
              format_bytes_and_gib(experts.count()), "; the smallest budget that works is ",
              format_bytes_and_gib(needed.count()));
  }
}

/// @brief The largest feasible cap: `min(E, floor((B - floor bytes) / (L * expert_bytes)))`.
/// Every cap in `[k, max_feasible_cap]` is feasible and no other is. O(1).
/// @throws wisp::infeasible_error (see `require_feasible`) if no cap is feasible.
[[nodiscard]] inline std::int32_t max_feasible_cap(const model_spec& m, byte_size budget,
                                                   const admission_floor& floor) {
  require_feasible(m, budget, floor);
  const std::uint64_t by_budget = (budget - floor.bytes(m)) / m.cap_unit_bytes();
  return static_cast<std::int32_t>(std::min(static_cast<std::uint64_t>(m.experts), by_budget));
}

}  // namespace wisp
