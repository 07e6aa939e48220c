// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Miss policies (SpecMD §3.1.2): what a layer does with a routed expert that is not
/// resident. `miss_policy::fetch` (block until copied) is the default; `hybrid` (copy it or
/// compute it on the host, <wisp/pager/hybrid.hpp>) is exact too; **`drop` and `substitute`
/// change the model's outputs** and are opt-in.
///
/// - `fetch`: every routed expert is made resident (`pager::prepare`). Outputs are exact.
/// - `hybrid`: each missing expert is copied or computed by the host from its master weights,
///   whichever the cost model of <wisp/pager/hybrid.hpp> prefers; a host-computed expert leaves the
///   cache unchanged. Outputs are exact; `rewrite_misses` leaves the batch as it is.
/// - `drop` (APPROXIMATE): a missing expert is skipped; the token's remaining gate weights are
///   rescaled so that they sum to what the token's weights summed to before.
/// - `substitute` (APPROXIMATE): a missing expert is replaced by the resident expert of the layer
///   with the highest router score for that token (not already routed by it), keeping the gate
///   weight. SpecMD reports that substitution degrades quality badly; it is here to measure that.
///
/// Both approximate policies keep the token's `always_fetch_top` highest-weight experts exact
/// (SpecMD drops only low-ranked experts: models tolerate losing rank 3 and beyond far better
/// than rank 1), and a token never loses every expert: if none of its experts may be kept, its
/// top-ranked one is fetched.
///
/// `rewrite_misses` edits one batch's `topk_ids` / `topk_weights` in place from a residency test;
/// `prepare_with_misses` runs it against a pager's resident set and then `prepare`s the rewritten
/// batch, so only the experts still routed are fetched. A dropped entry keeps a valid id (the
/// token's first kept expert) with weight 0, so an unmodified fused-MoE kernel computes the
/// token exactly as if the expert were absent.
/// @code
/// wisp::miss_options approx{.policy = wisp::miss_policy::drop, .always_fetch_top = 2};
/// auto r = wisp::prepare_with_misses(pager, layer, ids, weights, tokens, k, approx);
/// // r.prepared: map and copy plan as from prepare; r.rewrite.dropped_weight: gate mass lost
/// @endcode
#pragma once

#include <wisp/core/enum_names.hpp>
#include <wisp/core/error.hpp>
#include <wisp/core/topk.hpp>
#include <wisp/pager/pager.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace wisp {

/// What a layer does with a routed expert that is not resident.
enum class miss_policy : std::uint8_t {
  fetch,       ///< copy it in and wait (exact; the default)
  drop,        ///< APPROXIMATE: skip it and rescale the token's remaining weights
  substitute,  ///< APPROXIMATE: use the resident expert with the highest router score instead
  hybrid,      ///< copy it in, or compute it on the host (exact; see <wisp/pager/hybrid.hpp>)
};

/// The policies' names: "fetch", "drop", "substitute", "hybrid" (`to_string`, `from_string`).
template <>
struct enum_names<miss_policy> {
  static constexpr std::array<enum_name<miss_policy>, 4> values{
      {{miss_policy::fetch, "fetch"},
       {miss_policy::drop, "drop"},
       {miss_policy::substitute, "substitute"},
       {miss_policy::hybrid, "hybrid"}}};
};

/// @brief Options of `rewrite_misses` / `prepare_with_misses`.
struct miss_options {
  miss_policy policy = miss_policy::fetch;
  /// Each token's highest-weight experts that are always fetched (exact), >= 0.
  std::int32_t always_fetch_top = 0;
};

/// @brief What `rewrite_misses` changed: the quality cost of an approximate policy.
struct miss_rewrite {
  std::int32_t fetched = 0;       ///< missing entries kept (they will be fetched)
  std::int32_t dropped = 0;       ///< missing entries dropped
  std::int32_t substituted = 0;   ///< missing entries replaced by a resident expert
  double dropped_weight = 0;      ///< gate weight of the dropped entries (before rescaling)
  double substituted_weight = 0;  ///< gate weight moved to a substitute expert
};

/// @brief Rewrites a `[tokens x k]` batch for `options.policy` given a residency test
/// `is_resident(expert)` (see the file description). `fetch` and `hybrid` change nothing. Rank
/// within a token is by gate weight (ties: the earlier position). `scores` holds `[tokens x
/// experts]` router scores and is needed by `substitute` only. O(tokens x (k^2 + experts)); no
/// allocation.
/// @throws wisp::logic_error, before changing anything, on a shape mismatch, a negative
///   `always_fetch_top`, an id outside `[0, experts)`, `substitute` without `scores`, or `k > 64`
///   with an approximate policy.
template <topk_id Id, class IsResident>
miss_rewrite rewrite_misses(std::span<Id> topk_ids, std::span<float> topk_weights,
                            std::int32_t tokens, std::int32_t k, std::int32_t experts,
                            const miss_options& options, IsResident&& is_resident,
                            std::span<const float> scores = {}) {
  detail::check_topk_shape("rewrite_misses", topk_ids.size(), tokens, k);
  WISP_EXPECTS(topk_weights.size() == topk_ids.size(), "rewrite_misses: ", topk_weights.size(),
               " weights for ", topk_ids.size(), " ids");
  WISP_EXPECTS(options.always_fetch_top >= 0, "rewrite_misses: always_fetch_top must be >= 0, got ",
               options.always_fetch_top);
  detail::check_topk_ids("rewrite_misses", std::span<const Id>(topk_ids), k, experts);
  WISP_EXPECTS(
      options.policy != miss_policy::substitute ||
          scores.size() == static_cast<std::size_t>(tokens) * static_cast<std::size_t>(experts),
      "rewrite_misses: substitute needs [tokens x experts] = ", tokens, " x ", experts,
      " router scores, got ", scores.size());
  miss_rewrite out;
  if (options.policy == miss_policy::fetch || options.policy == miss_policy::hybrid) {
    return out;  // exact policies: every routed expert stays routed
  }
  WISP_EXPECTS(k <= 64, "rewrite_misses: drop and substitute take k <= 64, got ", k);
  const auto uk = static_cast<std::size_t>(k);
  for (std::size_t t = 0; t < static_cast<std::size_t>(tokens); ++t) {
    Id* ids = topk_ids.data() + t * uk;
    float* weights = topk_weights.data() + t * uk;
    // Which entries stay, decided on the row as routed: the top `always_fetch_top` by weight
    // (ties: the earlier position) and every resident expert.
    std::uint64_t kept = 0;
    std::size_t top = 0;  // the top-ranked entry
    for (std::size_t j = 0; j < uk; ++j) {
      std::size_t rank = 0;
      for (std::size_t i = 0; i < uk; ++i) {
        rank += weights[i] > weights[j] || (weights[i] == weights[j] && i < j) ? 1u : 0u;
      }
      top = rank == 0 ? j : top;
      const bool keep = rank < static_cast<std::size_t>(options.always_fetch_top) ||
                        is_resident(static_cast<std::int32_t>(ids[j]));
      kept |= static_cast<std::uint64_t>(keep) << j;
    }
    if (kept == 0) {  // nothing may stay: fetch the top-ranked expert
      kept = std::uint64_t{1} << top;
    }
    const auto first_kept = static_cast<std::size_t>(std::countr_zero(kept));
    double total = 0.0;
    double lost = 0.0;
    for (std::size_t j = 0; j < uk; ++j) {
      total += weights[j];
      if ((kept >> j & 1u) != 0) {
        out.fetched += is_resident(static_cast<std::int32_t>(ids[j])) ? 0 : 1;
        continue;
      }
      std::int32_t best = -1;
      if (options.policy == miss_policy::substitute) {
        // the resident expert with the best score that the token's row does not hold
        const float* row = scores.data() + t * static_cast<std::size_t>(experts);
        for (std::int32_t e = 0; e < experts; ++e) {
          if (!is_resident(e) || (best >= 0 && !(row[e] > row[best]))) {
            continue;
          }
          bool routed = false;
          for (std::size_t i = 0; i < uk; ++i) {
            routed |= static_cast<std::int32_t>(ids[i]) == e;
          }
          best = routed ? best : e;
        }
      }
      if (best >= 0) {
        ++out.substituted;
        out.substituted_weight += weights[j];
        ids[j] = static_cast<Id>(best);
        continue;
      }
      // drop (or substitute with no resident expert left): weight 0 on a kept expert's id
      ++out.dropped;
      out.dropped_weight += weights[j];
      lost += weights[j];
      weights[j] = 0.0f;
      ids[j] = ids[first_kept];
    }
    if (lost > 0.0 && total > lost) {  // rescale the kept weights to the token's old sum
      const auto scale = static_cast<float>(total / (total - lost));
      for (std::size_t j = 0; j < uk; ++j) {
        weights[j] *= scale;
      }
    }
  }
  return out;
}

/// @brief The result of `prepare_with_misses`: the `prepare` of the rewritten batch and what the
/// rewrite changed.
struct miss_prepare_result {
  prepare_result prepared;
  miss_rewrite rewrite;
};

/// @brief `rewrite_misses` against `pager`'s residency at `layer`, then `pager.prepare` of the
/// rewritten ids: with `drop` / `substitute` only kept experts are fetched. APPROXIMATE unless
/// `options.policy == fetch` (then exactly `prepare`). Costs and errors: those of both calls (if
/// `prepare` throws, the batch stays rewritten).
template <eviction_policy Policy, topk_id Id>
miss_prepare_result prepare_with_misses(pager<Policy>& pager, std::int32_t layer,
                                        std::span<Id> topk_ids, std::span<float> topk_weights,
                                        std::int32_t tokens, std::int32_t k,
                                        const miss_options& options,
                                        std::span<const float> scores = {}) {
  (void)pager.capacity(layer);  // checks the layer before anything changes
  miss_prepare_result out;
  out.rewrite = rewrite_misses(
      topk_ids, topk_weights, tokens, k, pager.experts(), options,
      [&](std::int32_t expert) { return pager.slot_of(layer, expert) >= 0; }, scores);
  out.prepared = pager.prepare(layer, std::span<const Id>(topk_ids), tokens, k);
  return out;
}

}  // namespace wisp
