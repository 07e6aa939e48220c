// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Moving a running engine from one split to another (WiSP §3.5, Appendix D): the
/// dual-resize control law, a `resize_plan` that frees the shrinking pool before growing the
/// other, and a fail-safe executor.
///
/// **Control law** at a drained barrier, with `p` the observed peak KV blocks and `h` the headroom:
///
///     kv_target = max(floor_blocks, p + h)                                    (D.8)
///     c_target  = min(E, floor((B - kv_target * block_bytes) / (L * expert_bytes)))  (D.9)
///     kv_final  = floor((B - c_target * L * expert_bytes) / block_bytes)      (D.10: slack to KV)
///
/// `c_target` is clamped up to `k` (the KV pool then gets less than `p + h`, never less than the
/// floor). The move is skipped when `|c_target - c| < dead_zone`, unless the current split breaks
/// the admission floor (the floor is an invariant, not a preference).
///
/// **Order.** Growing experts: shrink KV, then grow experts. Shrinking experts: shrink experts,
/// then grow KV. The footprint after every step is at most the budget.
///
/// **Fail-safe.** `apply_resize` runs the steps through the engine's levers; if one fails (returns
/// false or throws) the steps already done are undone in reverse and the previous split stands.
/// @code
/// auto plan = wisp::plan_dual_resize(spec, budget, floor, current, peak_blocks,
///                                           {.headroom_blocks = 64, .dead_zone = 2});
/// auto outcome = wisp::apply_resize(plan, engine_levers);  // engine_levers: resize_levers
/// current = outcome.current;
/// @endcode
#pragma once

#include <wisp/alloc/model_spec.hpp>
#include <wisp/alloc/split.hpp>
#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/core/ids.hpp>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <ostream>
#include <vector>

namespace wisp {

/// @brief Which pool a resize step changes.
enum class pool : std::uint8_t { experts, kv };

inline std::ostream& operator<<(std::ostream& out, pool p) {
  return out << (p == pool::experts ? "experts" : "kv");
}

/// @brief One lever pull: set `which` from `from` to `to` (per-layer cap, or KV blocks).
struct resize_step {
  pool which = pool::experts;
  std::uint64_t from = 0;
  std::uint64_t to = 0;
  byte_size footprint_after{};  ///< Expert + KV bytes once this step is done.

  [[nodiscard]] bool shrinks() const noexcept { return to < from; }
  friend bool operator==(const resize_step&, const resize_step&) = default;
};

/// @brief Why a plan has no steps.
enum class resize_skip : std::uint8_t {
  none,       ///< Not skipped: the plan has steps.
  no_change,  ///< The target equals the current split.
  dead_zone,  ///< `|c_target - c| < dead_zone`.
};

/// @brief An ordered sequence of at most two steps from `from` to `to`, shrinking first.
struct resize_plan {
  split from;
  split to;
  std::vector<resize_step> steps;
  resize_skip skipped = resize_skip::none;
  std::uint64_t kv_target = 0;  ///< D.8's KV target (0 for plans not made by the control law).
  byte_size budget{};
  byte_size cap_unit_bytes{};      ///< `L * expert_bytes` of the model.
  byte_size kv_block_bytes{};      ///< Bytes of one KV block.
  std::uint64_t block_tokens = 0;  ///< Tokens of one KV block.

  /// The split with cap `cap` and `blocks` KV blocks under this plan's model and budget.
  [[nodiscard]] split split_of(std::int32_t cap, std::uint64_t blocks) const {
    split s;
    s.expert_cap = cap;
    s.kv_blocks = blocks;
    s.expert_bytes = cap_unit_bytes * cap;
    s.kv_bytes = kv_block_bytes * blocks;
    s.kv_tokens = blocks * block_tokens;
    s.slack = s.used() <= budget ? budget - s.used() : byte_size{};
    return s;
  }

  /// Largest footprint over the start and every step (at most `budget`).
  [[nodiscard]] byte_size peak_footprint() const {
    byte_size peak = from.used();
    for (const auto& s : steps) {
      peak = std::max(peak, s.footprint_after);
    }
    return peak;
  }
  [[nodiscard]] bool empty() const noexcept { return steps.empty(); }
};

/// @brief The plan from `from` to `to`: every shrinking step first, then every growing step; no
/// step for a pool that does not change. O(1).
/// @throws wisp::logic_error if either split's pools exceed `budget`.
[[nodiscard]] inline resize_plan plan_transition(const model_spec& m, byte_size budget,
                                                 const split& from, const split& to) {
  WISP_EXPECTS(from.used() <= budget && to.used() <= budget, "a split exceeds the budget of ",
               budget.count(), " B (from ", from.used().count(), " B, to ", to.used().count(),
               " B)");
  resize_plan plan;
  plan.from = from;
  plan.to = to;
  plan.budget = budget;
  plan.cap_unit_bytes = m.cap_unit_bytes();
  plan.kv_block_bytes = m.kv_block_bytes();
  plan.block_tokens = m.block_tokens;
  byte_size experts = from.expert_bytes;
  byte_size kv = from.kv_bytes;
  auto add = [&](pool which, std::uint64_t a, std::uint64_t b) {
    if (which == pool::experts) {
      experts = m.expert_pool_bytes(b);
    } else {
      kv = m.kv_block_bytes() * b;
    }
    plan.steps.push_back({which, a, b, experts + kv});
  };
  const bool experts_shrink = to.expert_cap < from.expert_cap;
  const bool kv_shrink = to.kv_blocks < from.kv_blocks;
  // Shrinking steps first, then growing ones: the footprint never exceeds max(from, to).
  if (experts_shrink) {
    add(pool::experts, from.expert_cap, to.expert_cap);
  }
  if (kv_shrink) {
    add(pool::kv, from.kv_blocks, to.kv_blocks);
  }
  if (to.expert_cap > from.expert_cap) {
    add(pool::experts, from.expert_cap, to.expert_cap);
  }
  if (to.kv_blocks > from.kv_blocks) {
    add(pool::kv, from.kv_blocks, to.kv_blocks);
  }
  if (plan.steps.empty()) {
    plan.skipped = resize_skip::no_change;
  }
  return plan;
}

/// @brief Parameters of the dual-resize law.
struct dual_resize_config {
  std::uint64_t headroom_blocks = 0;  ///< h: KV blocks kept above the observed peak.
  std::int32_t dead_zone = 0;         ///< Skip cap moves smaller than this many experts.
};

/// @brief The target split of the control law (D.8-D.10) for an observed peak. O(1), exact.
/// @throws wisp::infeasible_error if no split meets the floor; wisp::logic_error on overflow.
[[nodiscard]] inline split dual_resize_target(const model_spec& m, byte_size budget,
                                              const admission_floor& floor,
                                              std::uint64_t peak_kv_blocks,
                                              std::uint64_t headroom_blocks,
                                              std::uint64_t* kv_target_out = nullptr) {
  require_feasible(m, budget, floor);
  const std::uint64_t floor_blocks = floor.blocks(m.block_tokens);
  const std::uint64_t wanted = peak_kv_blocks > ~std::uint64_t{0} - headroom_blocks
                                   ? ~std::uint64_t{0}
                                   : peak_kv_blocks + headroom_blocks;
  const std::uint64_t kv_target = std::max(floor_blocks, wanted);
  if (kv_target_out != nullptr) {
    *kv_target_out = kv_target;
  }
  const byte_size block = m.kv_block_bytes();
  std::int32_t cap = m.top_k;
  // kv_target * block may not fit (or overflow): then experts get their minimum.
  if (kv_target <= budget / block) {
    const byte_size kv_bytes = block * kv_target;
    const std::uint64_t fits = (budget - kv_bytes) / m.cap_unit_bytes();
    cap = std::max(
        m.top_k, static_cast<std::int32_t>(std::min(static_cast<std::uint64_t>(m.experts), fits)));
  }
  return make_split(m, budget, cap);  // every remaining whole block to KV (D.10)
}

/// @brief The control law's plan for the current split and an observed peak (see the file
/// comment). Skipped (no steps) when the cap would move less than `dead_zone` and the current split
/// meets the floor.
/// @throws wisp::infeasible_error if no split meets the floor; wisp::logic_error if `current`
/// exceeds the budget.
[[nodiscard]] inline resize_plan plan_dual_resize(const model_spec& m, byte_size budget,
                                                  const admission_floor& floor,
                                                  const split& current,
                                                  std::uint64_t peak_kv_blocks,
                                                  const dual_resize_config& config) {
  std::uint64_t kv_target = 0;
  const split target =
      dual_resize_target(m, budget, floor, peak_kv_blocks, config.headroom_blocks, &kv_target);
  const std::int32_t distance = target.expert_cap > current.expert_cap
                                    ? target.expert_cap - current.expert_cap
                                    : current.expert_cap - target.expert_cap;
  // Within the dead zone (and above the floor) the plan stays where it is: no step.
  const bool stay = distance < config.dead_zone && floor.admits(m, current);
  resize_plan plan = plan_transition(m, budget, current, stay ? current : target);
  plan.kv_target = kv_target;
  if (stay) {
    plan.skipped = resize_skip::dead_zone;
  }
  return plan;
}

/// @brief An engine's two resize levers, called only at a drained barrier. Each returns whether the
/// pool now has the requested size; on `false` (or an exception) the pool must be unchanged.
template <class L>
concept resize_levers = requires(L& levers, std::int32_t cap, std::uint64_t blocks) {
  { levers.resize_experts(cap) } -> std::convertible_to<bool>;
  { levers.resize_kv(blocks) } -> std::convertible_to<bool>;
};

/// @brief What `apply_resize` did.
struct resize_outcome {
  split current;                ///< The split in force afterwards.
  bool applied = false;         ///< Every step succeeded: `current == plan.to`.
  bool rolled_back = false;     ///< A step failed and the earlier steps were undone.
  bool consistent = true;       ///< False only if undoing a step failed too (see `current`).
  std::size_t failed_step = 0;  ///< Index of the failed step (when `!applied`).
};

/// @brief Runs `plan` through `levers` in order. On a failed step the completed steps are undone
/// in reverse, so the engine is left in `plan.from` (fail-safe, WiSP D3). Exceptions from a lever
/// count as failure and are not propagated. Complexity: at most 2 lever calls plus 2 undo calls.
template <resize_levers L>
[[nodiscard]] resize_outcome apply_resize(const resize_plan& plan, L& levers) noexcept {
  auto pull = [&](const resize_step& s, std::uint64_t value) noexcept -> bool {
    try {
      return s.which == pool::experts
                 ? static_cast<bool>(levers.resize_experts(static_cast<std::int32_t>(value)))
                 : static_cast<bool>(levers.resize_kv(value));
    } catch (...) {
      return false;
    }
  };
  resize_outcome out;
  out.current = plan.from;
  for (std::size_t i = 0; i < plan.steps.size(); ++i) {
    if (!pull(plan.steps[i], plan.steps[i].to)) {
      out.failed_step = i;
      out.rolled_back = i > 0;
      for (std::size_t j = i; j-- > 0;) {
        if (!pull(plan.steps[j], plan.steps[j].from)) {
          out.consistent = false;
          // The engine holds the state after step j; report it.
          std::uint64_t cap = plan.from.expert_cap;
          std::uint64_t blocks = plan.from.kv_blocks;
          for (std::size_t t = 0; t <= j; ++t) {
            (plan.steps[t].which == pool::experts ? cap : blocks) = plan.steps[t].to;
          }
          try {
            out.current = plan.split_of(static_cast<std::int32_t>(cap), blocks);
          } catch (...) {  // cannot overflow: both sizes were valid splits of the budget
          }
          return out;
        }
      }
      return out;
    }
  }
  out.applied = true;
  out.current = plan.to;
  return out;
}

}  // namespace wisp
