// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The offline configurator (WiSP §3.4, Eq. 7): evaluate every feasible per-layer cap
/// `c` in `[k, E]` at a budget and return the minimum-cost split with the two engine knobs (the
/// per-layer expert cap and the KV-cache bytes).
///
/// Ties go to the smallest cap (the most KV headroom at the same predicted cost).
/// @code
/// auto profile = wisp::profile_trace(trace, wisp::cache_scope::per_layer);
/// wisp::cost_model cost{spec, wisp::miss_curve{profile.histogram}, kv_curve, {}};
/// auto conf = wisp::configure(cost, 24_GiB, {4, 8192});
/// engine.set_expert_cap(conf.knobs.per_layer_expert_cap);
/// engine.set_kv_cache_bytes(conf.knobs.kv_cache_bytes.count());
/// @endcode
#pragma once

#include <wisp/alloc/cost_model.hpp>
#include <wisp/alloc/model_spec.hpp>
#include <wisp/alloc/split.hpp>
#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/core/ids.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace wisp {

/// @brief One cap of a sweep.
struct sweep_point {
  std::int32_t expert_cap = 0;
  bool fits = false;      ///< The expert pool alone fits the budget (`s` is meaningful).
  bool feasible = false;  ///< Fits and the KV pool meets the admission floor.
  split s{};              ///< The split at this cap (zero KV when it does not fit).
  /// Predicted seconds (Eq. 4); NaN when the cap does not fit or no cost model was given.
  double seconds = std::numeric_limits<double>::quiet_NaN();
};

/// @brief The two knobs an engine takes (WiSP Eq. 7).
struct engine_knobs {
  std::int32_t per_layer_expert_cap = 0;  ///< Expert scratch slots per MoE layer.
  byte_size kv_cache_bytes{};             ///< KV pool bytes (whole blocks).
  std::uint64_t kv_blocks = 0;
};

/// @brief What the configurator returns.
struct configuration {
  split choice;                        ///< The minimum-cost feasible split.
  double predicted_seconds = 0;        ///< T at the choice.
  engine_knobs knobs;                  ///< The choice as engine settings.
  std::int32_t max_feasible_cap = 0;   ///< Feasible caps are `[k, max_feasible_cap]`.
  std::vector<sweep_point> evaluated;  ///< Every feasible cap, ascending, with its cost.
};

/// @brief The split at each requested cap and whether it is feasible. Caps that do not fit the
/// budget are reported with `fits == false` (and zero KV). O(caps).
/// @throws wisp::logic_error if a cap is outside `[k, E]` or the spec is invalid.
[[nodiscard]] inline std::vector<sweep_point> sweep(const model_spec& m, byte_size budget,
                                                    const admission_floor& floor,
                                                    std::span<const std::int32_t> caps) {
  m.validate();
  std::vector<sweep_point> out;
  out.reserve(caps.size());
  for (const std::int32_t c : caps) {
    WISP_EXPECTS(c >= m.top_k && c <= m.experts, "expert cap ", c, " is outside [top_k, experts]",
                 " = [", m.top_k, ", ", m.experts, "] for ", m.name);
    sweep_point p;
    p.expert_cap = c;
    p.fits = m.expert_pool_bytes(c) <= budget;
    if (p.fits) {
      p.s = make_split(m, budget, c);
      p.feasible = floor.admits(m, p.s);
    } else {
      p.s.expert_cap = c;
      p.s.expert_bytes = m.expert_pool_bytes(c);
    }
    out.push_back(p);
  }
  return out;
}

/// @brief `sweep` with each fitting point's predicted cost filled in from `cost`.
template <miss_curve_like ExpertCurve, miss_curve_like KvCurve>
[[nodiscard]] std::vector<sweep_point> sweep(const cost_model<ExpertCurve, KvCurve>& cost,
                                             byte_size budget, const admission_floor& floor,
                                             std::span<const std::int32_t> caps) {
  auto out = sweep(cost.spec(), budget, floor, caps);
  for (auto& p : out) {
    if (p.fits) {
      p.seconds = cost.seconds(p.s);
    }
  }
  return out;
}

/// @brief Evaluates every feasible cap in `[k, E]` and returns the minimum-cost split (ties to the
/// smallest cap). O((E - k) * cost of one evaluation).
/// @throws wisp::infeasible_error stating the budget, the floor and the smallest budget that
/// would work if no cap is feasible; wisp::logic_error on an invalid spec.
template <miss_curve_like ExpertCurve, miss_curve_like KvCurve>
[[nodiscard]] configuration configure(const cost_model<ExpertCurve, KvCurve>& cost,
                                      byte_size budget, const admission_floor& floor) {
  const model_spec& m = cost.spec();
  configuration out;
  out.max_feasible_cap = max_feasible_cap(m, budget, floor);  // throws when infeasible
  out.evaluated.reserve(out.max_feasible_cap - m.top_k + 1);
  bool have = false;
  for (std::int32_t c = m.top_k; c <= out.max_feasible_cap; ++c) {
    sweep_point p;
    p.expert_cap = c;
    p.fits = true;
    p.feasible = true;
    p.s = make_split(m, budget, c);
    p.seconds = cost.seconds(p.s);
    if (!have || p.seconds < out.predicted_seconds) {
      have = true;
      out.choice = p.s;
      out.predicted_seconds = p.seconds;
    }
    out.evaluated.push_back(p);
  }
  out.knobs = {out.choice.expert_cap, out.choice.kv_bytes, out.choice.kv_blocks};
  return out;
}

}  // namespace wisp
