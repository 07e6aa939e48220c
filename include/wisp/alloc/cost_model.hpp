// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The latency cost of a split (WiSP Eq. 4): expert misses pay a host-to-device transfer,
/// KV misses pay a prefill recompute.
///
///     T(c) = M_e(c) * expert_bytes / bandwidth + M_kv(kv_blocks(c)) * block_tokens * recompute
///
/// `M_e` and `M_kv` are miss counts read off the two streams' miss curves: the expert stream in
/// the per-layer scope (capacity = slots in each layer, misses summed over layers) and the KV
/// stream over block keys (capacity = blocks). Any type with `misses(capacity)` is a curve
/// (`miss_curve_like`): the exact `miss_curve`, the decayed warm curve of the online
/// controller (`warm_curve`), or a test's table.
/// @code
/// wisp::cost_model cost{spec, expert_curve, kv_curve, {.bandwidth_bytes_per_second = 25e9,
///                                                          .recompute_seconds_per_token = 2e-4}};
/// double t = cost.seconds(wisp::make_split(spec, budget, 32));
/// @endcode
#pragma once

#include <wisp/alloc/model_spec.hpp>
#include <wisp/alloc/split.hpp>
#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/reuse/decayed_histogram.hpp>
#include <wisp/reuse/histogram.hpp>

#include <cmath>
#include <concepts>
#include <cstdint>
#include <utility>

namespace wisp {

/// @brief A miss curve: `misses(capacity)` is the (possibly fractional, decayed) miss count of an
/// LRU cache with `capacity` entries; non-increasing in `capacity`.
template <class C>
concept miss_curve_like = requires(const C& curve, std::uint64_t capacity) {
  { curve.misses(capacity) } -> std::convertible_to<double>;
};

static_assert(miss_curve_like<miss_curve>);

/// @brief The warm (non-compulsory) miss curve of a decayed histogram: `warm_total - hits(c)`.
/// First-sight misses are excluded (WiSP App. B, design decision 2). Holds a pointer: the
/// histogram must outlive it.
class warm_curve {
 public:
  explicit warm_curve(const decayed_histogram& h) noexcept : h_(&h) {}
  [[nodiscard]] double misses(std::uint64_t capacity) const noexcept {
    return std::max(0.0, h_->warm_total() - h_->hits(capacity));
  }

 private:
  const decayed_histogram* h_;
};
static_assert(miss_curve_like<warm_curve>);

/// @brief The two per-miss costs.
struct cost_params {
  /// Effective host-to-device bandwidth for expert pages, bytes per second (> 0).
  double bandwidth_bytes_per_second = 25e9;
  /// Prefill recompute time per token of a missed KV block, seconds (>= 0).
  double recompute_seconds_per_token = 2e-4;

  /// @throws wisp::logic_error naming the bad field.
  void validate() const {
    WISP_EXPECTS(std::isfinite(bandwidth_bytes_per_second) && bandwidth_bytes_per_second > 0,
                 "bandwidth must be a positive number of bytes per second, got ",
                 bandwidth_bytes_per_second);
    WISP_EXPECTS(std::isfinite(recompute_seconds_per_token) && recompute_seconds_per_token >= 0,
                 "recompute time per token must be finite and >= 0, got ",
                 recompute_seconds_per_token);
  }
};

/// @brief WiSP Eq. 4 over two miss curves. Copyable value; thread-safety: const calls are safe
/// when the curves' are. Complexity: one `misses` call per stream.
template <miss_curve_like ExpertCurve = miss_curve, miss_curve_like KvCurve = miss_curve>
class cost_model {
 public:
  /// @throws wisp::logic_error if the spec or the parameters are invalid.
  cost_model(model_spec spec, ExpertCurve expert_curve, KvCurve kv_curve, cost_params params)
      : spec_(std::move(spec)),
        expert_(std::move(expert_curve)),
        kv_(std::move(kv_curve)),
        params_(params) {
    spec_.validate();
    params_.validate();
  }

  /// Seconds one expert miss costs: `expert_bytes / bandwidth`.
  [[nodiscard]] double expert_miss_seconds() const noexcept {
    return static_cast<double>(spec_.expert_bytes.count()) / params_.bandwidth_bytes_per_second;
  }
  /// Seconds one KV block miss costs: `block_tokens * recompute`.
  [[nodiscard]] double kv_miss_seconds() const noexcept {
    return static_cast<double>(spec_.block_tokens) * params_.recompute_seconds_per_token;
  }
  /// Expert misses with `cap` slots per layer.
  [[nodiscard]] double expert_misses(std::int32_t cap) const {
    return static_cast<double>(expert_.misses(cap));
  }
  /// KV misses with `blocks` blocks.
  [[nodiscard]] double kv_misses(std::uint64_t blocks) const {
    return static_cast<double>(kv_.misses(blocks));
  }
  /// Expert part of T: `M_e(cap) * expert_miss_seconds()`.
  [[nodiscard]] double expert_seconds(std::int32_t cap) const {
    return expert_misses(cap) * expert_miss_seconds();
  }
  /// KV part of T: `M_kv(blocks) * kv_miss_seconds()`.
  [[nodiscard]] double kv_seconds(std::uint64_t blocks) const {
    return kv_misses(blocks) * kv_miss_seconds();
  }
  /// T for a cap and a KV pool.
  [[nodiscard]] double seconds(std::int32_t cap, std::uint64_t kv_blocks) const {
    return expert_seconds(cap) + kv_seconds(kv_blocks);
  }
  /// T for a split.
  [[nodiscard]] double seconds(const split& s) const { return seconds(s.expert_cap, s.kv_blocks); }

  [[nodiscard]] const model_spec& spec() const noexcept { return spec_; }
  [[nodiscard]] const cost_params& params() const noexcept { return params_; }
  [[nodiscard]] const ExpertCurve& expert_curve() const noexcept { return expert_; }
  [[nodiscard]] const KvCurve& kv_curve() const noexcept { return kv_; }

 private:
  model_spec spec_;
  ExpertCurve expert_;
  KvCurve kv_;
  cost_params params_;
};

/// @brief The KV miss curve of a resident working set read every round: `working_blocks` blocks
/// touched once per round for `rounds` rounds (a cyclic stream). LRU holds the set from
/// `working_blocks` blocks on (cold misses only) and misses every access below (the admission
/// cliff). This is the step curve of WiSP §3.5, used when no KV trace is given.
/// @throws wisp::logic_error if the working set exceeds 2^32 - 2 blocks.
[[nodiscard]] inline miss_curve working_set_kv_curve(std::uint64_t working_blocks,
                                                     std::uint64_t rounds) {
  WISP_EXPECTS(working_blocks < reuse_distance_counter::cold, "working set of ", working_blocks,
               " blocks is too large for a reuse histogram");
  reuse_histogram h{{cache_scope::stream, 1, 0}};
  if (working_blocks > 0) {
    h.add(reuse_distance_counter::cold, working_blocks);
    if (rounds > 1) {
      h.add(static_cast<reuse_distance_counter::distance_type>(working_blocks),
            (rounds - 1) * working_blocks);
    }
  }
  return miss_curve{h};
}

}  // namespace wisp
