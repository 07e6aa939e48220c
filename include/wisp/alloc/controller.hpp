// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The MV-WSA online controller (WiSP §3.4, Appendix B, Algorithm 2).
///
/// Per burst (e.g. one scheduler round) the caller records each stream's warm reuse distances:
/// expert accesses in the per-layer scope, KV block accesses over block keys. `record_expert_call`
/// measures the expert distances itself, one MoE layer's request at a time, the request's experts
/// protected from each other as wisp's pager serves them (`reuse_granularity::call`), so
/// its curve is the pager's. `end_burst()` decays
/// each stream's histogram by `decay` and adds the burst (first-sight misses are excluded: they are
/// constant in the split and would bias the controller toward the pool seen less). It then
/// evaluates the predicted warm cost (Eq. 4 over the decayed curves) on a **fixed grid** of
/// candidate caps, rather than a point-density marginal that reads zero in the gap of a bimodal
/// reuse-distance distribution, and proposes a move toward the grid minimum only when
///
/// - the predicted gain `cost(current) - cost(target)` exceeds `gate * cost(current)`,
/// - the target is at least `dead_zone` caps away, and
/// - by at most `rate_limit` caps per burst.
///
/// The KV histogram's bin edges sit at the grid points' KV pool sizes, so the predicted KV misses
/// are exact at every grid point. The proposal is not applied until `commit`: an engine first
/// executes the matching `resize_plan` (resize.hpp) and commits only on success (fail-safe).
/// @code
/// wisp::split_controller ctl{spec, budget, floor, params, {}, initial_cap};
/// for (auto& burst : bursts) {
///   for (auto& [layer, ids] : burst.expert_calls) ctl.record_expert_call(layer, ids);
///   for (auto d : burst.kv_distances) ctl.record_kv(d);
///   auto decision = ctl.end_burst();
///   if (decision.moves() && engine_resize(ctl.current(), decision.next)) ctl.commit(decision);
/// }
/// @endcode
#pragma once

#include <wisp/alloc/cost_model.hpp>
#include <wisp/alloc/model_spec.hpp>
#include <wisp/alloc/split.hpp>
#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/core/ids.hpp>
#include <wisp/reuse/decayed_histogram.hpp>
#include <wisp/reuse/reuse_distance.hpp>
#include <wisp/reuse/scoped_counter.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <span>
#include <utility>
#include <vector>

namespace wisp {

/// @brief Tuning of the online controller (WiSP App. B: gamma, the grid, gate, rate limit,
/// dead-zone).
struct controller_config {
  double decay = 0.9;             ///< gamma: weight a burst keeps per later burst, in [0, 1].
  std::int32_t grid_points = 33;  ///< Candidate caps, spread evenly over [k, max feasible cap].
  double gate = 0.05;             ///< Minimum predicted gain, as a fraction of the current cost.
  std::int32_t rate_limit = 4;    ///< Largest cap change per burst (>= 1).
  std::int32_t dead_zone = 2;     ///< Targets closer than this many caps are ignored.

  /// @throws wisp::logic_error naming the bad field.
  void validate() const {
    WISP_EXPECTS(decay >= 0.0 && decay <= 1.0, "decay ", decay, " is outside [0, 1]");
    WISP_EXPECTS(grid_points >= 2, "the grid needs at least 2 points, got ", grid_points);
    WISP_EXPECTS(std::isfinite(gate) && gate >= 0.0, "gate must be finite and >= 0, got ", gate);
    WISP_EXPECTS(rate_limit >= 1, "rate_limit must be at least 1");
  }
};

/// @brief Why the controller did or did not propose a move.
enum class controller_reason : std::uint8_t {
  no_signal,   ///< No warm reuse recorded yet.
  at_target,   ///< The current cap is the grid minimum.
  dead_zone,   ///< The target is closer than the dead-zone.
  below_gate,  ///< The predicted gain does not clear the gate.
  move,        ///< A move is proposed.
};

inline std::ostream& operator<<(std::ostream& out, controller_reason r) {
  constexpr const char* names[] = {"no_signal", "at_target", "dead_zone", "below_gate", "move"};
  return out << names[static_cast<int>(r)];
}

/// @brief One burst's decision.
struct controller_decision {
  controller_reason reason = controller_reason::no_signal;
  std::int32_t current = 0;  ///< Cap before the decision.
  std::int32_t target = 0;   ///< Grid minimum.
  std::int32_t next = 0;     ///< Proposed cap (== current unless `moves()`).
  double current_cost = 0;   ///< Predicted warm seconds at the current split (decayed).
  double target_cost = 0;    ///< Predicted warm seconds at the target.
  /// Finite differences toward the next grid point above the current cap, per byte moved:
  /// seconds the experts would save and seconds the KV pool would lose. Equal at an interior
  /// equimarginal optimum (Eq. 5). Zero at the top of the grid.
  double expert_gain_per_byte = 0;
  double kv_loss_per_byte = 0;

  [[nodiscard]] bool moves() const noexcept { return reason == controller_reason::move; }
};

/// @brief MV-WSA's online controller. Owns two decayed histograms (and, for `record_expert_call`,
/// one LRU stack per MoE layer); no allocation per access or per burst. Complexity: `record_*`
/// O(log bins), `record_expert_call` O(k (log E + log bins)), `end_burst` O(grid * bins).
/// Thread-safety: none.
class split_controller {
 public:
  using distance_type = reuse_distance_counter::distance_type;

  /// @param initial_cap must be feasible (in `[k, max_feasible_cap]`).
  /// @throws wisp::infeasible_error if no split is feasible; wisp::logic_error on an invalid spec,
  /// parameters, configuration or initial cap.
  split_controller(model_spec spec, byte_size budget, admission_floor floor, cost_params params,
                   controller_config config, std::int32_t initial_cap)
      : spec_(std::move(spec)),
        budget_(budget),
        floor_(floor),
        params_(params),
        config_(config),
        max_cap_(max_feasible_cap(spec_, budget_, floor_)),
        grid_(make_grid(spec_.top_k, max_cap_, config.grid_points)),
        expert_hist_(decayed_histogram::unit_edges(spec_.experts), config.decay),
        kv_hist_(kv_edges(spec_, budget_, grid_), config.decay),
        expert_calls_(cache_scope::per_layer, spec_.layers, spec_.experts) {
    params_.validate();
    config_.validate();
    WISP_EXPECTS(initial_cap >= spec_.top_k && initial_cap <= max_cap_, "initial cap ", initial_cap,
                 " is not feasible: feasible caps are [", spec_.top_k, ", ", max_cap_, "]");
    current_ = make_split(spec_, budget_, initial_cap);
  }

  /// Records one expert access's per-layer reuse distance (`cold` is counted apart and ignored).
  void record_expert(distance_type d, double weight = 1.0) { expert_hist_.record(d, weight); }
  /// @brief Records one MoE layer's request for `experts` (its top-k ids, distinct): each one's
  /// per-layer distance in the stack as it was before the request, as the pager serves it.
  /// @throws wisp::logic_error if `layer` or an expert is out of the spec's range (nothing
  ///   recorded then).
  void record_expert_call(std::int32_t layer, std::span<const std::int32_t> experts) {
    WISP_EXPECTS(layer >= 0, "layer ", layer, " is negative");
    call_ids_.resize(experts.size());
    for (std::size_t i = 0; i < experts.size(); ++i) {
      WISP_EXPECTS(experts[i] >= 0, "expert ", experts[i], " is negative");
      call_ids_[i] = static_cast<std::uint32_t>(experts[i]);
    }
    call_distances_.resize(experts.size());
    expert_calls_.access_call(static_cast<std::uint32_t>(layer), call_ids_, call_distances_);
    for (const distance_type d : call_distances_) {
      expert_hist_.record(d);
    }
  }
  /// Records one KV block access's reuse distance (`cold` is counted apart and ignored).
  void record_kv(distance_type d, double weight = 1.0) { kv_hist_.record(d, weight); }

  /// @brief Closes the burst (decay, then add) and returns the proposal. Does not change the split.
  [[nodiscard]] controller_decision end_burst() {
    expert_hist_.end_burst();
    kv_hist_.end_burst();
    return decide();
  }

  /// @brief The proposal for the current histograms (what `end_burst` returns).
  [[nodiscard]] controller_decision decide() const {
    controller_decision d;
    const std::int32_t c = current_.expert_cap;
    d.current = d.target = d.next = c;
    if (expert_hist_.warm_total() <= 0.0 && kv_hist_.warm_total() <= 0.0) {
      return d;
    }
    d.current_cost = predicted_cost(c);
    d.target_cost = d.current_cost;
    for (const std::int32_t g : grid_) {
      const double cost = predicted_cost(g);
      const auto dist = [c](std::int32_t x) { return x > c ? x - c : c - x; };
      // Strictly better, or equal and nearer to the current cap (no move for nothing).
      if (cost < d.target_cost || (cost == d.target_cost && dist(g) < dist(d.target))) {
        d.target = g;
        d.target_cost = cost;
      }
    }
    // Finite differences toward the next grid point above c.
    const auto up = std::upper_bound(grid_.begin(), grid_.end(), c);
    if (up != grid_.end()) {
      const split hi = make_split(spec_, budget_, *up);
      const double moved = static_cast<double>((hi.expert_bytes - current_.expert_bytes).count());
      const warm_curve e{expert_hist_};
      const warm_curve k{kv_hist_};
      d.expert_gain_per_byte = (e.misses(c) - e.misses(*up)) * expert_miss_seconds() / moved;
      d.kv_loss_per_byte =
          (k.misses(hi.kv_blocks) - k.misses(current_.kv_blocks)) * kv_miss_seconds() / moved;
    }
    if (d.target == c) {
      d.reason = controller_reason::at_target;
      return d;
    }
    const std::int32_t distance = d.target > c ? d.target - c : c - d.target;
    if (distance < config_.dead_zone) {
      d.reason = controller_reason::dead_zone;
      return d;
    }
    if (!(d.current_cost - d.target_cost > config_.gate * d.current_cost)) {
      d.reason = controller_reason::below_gate;
      return d;
    }
    const std::int32_t step = std::min(distance, config_.rate_limit);
    d.next = d.target > c ? c + step : c - step;
    d.reason = controller_reason::move;
    return d;
  }

  /// @brief Adopts `decision.next` as the current split (call after the resize succeeded).
  /// @throws wisp::logic_error if the cap is not feasible.
  void commit(const controller_decision& decision) { set_cap(decision.next); }

  /// @brief Sets the current cap (e.g. after an external resize). @throws wisp::logic_error if the
  /// cap is not feasible.
  void set_cap(std::int32_t cap) {
    WISP_EXPECTS(cap >= spec_.top_k && cap <= max_cap_, "cap ", cap,
                 " is not feasible: feasible caps are [", spec_.top_k, ", ", max_cap_, "]");
    current_ = make_split(spec_, budget_, cap);
  }

  /// Predicted warm seconds (decayed) at cap `cap` with every remaining block to KV.
  [[nodiscard]] double predicted_cost(std::int32_t cap) const {
    const split s = make_split(spec_, budget_, cap);
    return warm_curve{expert_hist_}.misses(cap) * expert_miss_seconds() +
           warm_curve{kv_hist_}.misses(s.kv_blocks) * kv_miss_seconds();
  }

  [[nodiscard]] const split& current() const noexcept { return current_; }
  [[nodiscard]] std::span<const std::int32_t> grid() const noexcept { return grid_; }
  [[nodiscard]] std::int32_t max_cap() const noexcept { return max_cap_; }
  [[nodiscard]] const model_spec& spec() const noexcept { return spec_; }
  [[nodiscard]] const controller_config& config() const noexcept { return config_; }
  [[nodiscard]] const decayed_histogram& expert_histogram() const noexcept { return expert_hist_; }
  [[nodiscard]] const decayed_histogram& kv_histogram() const noexcept { return kv_hist_; }

 private:
  [[nodiscard]] double expert_miss_seconds() const noexcept {
    return static_cast<double>(spec_.expert_bytes.count()) / params_.bandwidth_bytes_per_second;
  }
  [[nodiscard]] double kv_miss_seconds() const noexcept {
    return static_cast<double>(spec_.block_tokens) * params_.recompute_seconds_per_token;
  }

  static std::vector<std::int32_t> make_grid(std::int32_t lo, std::int32_t hi,
                                             std::int32_t points) {
    std::vector<std::int32_t> g;
    const auto span = static_cast<std::int64_t>(hi - lo);
    for (std::int64_t i = 0; i < points; ++i) {
      const auto c = static_cast<std::int32_t>(lo + (span * i + (points - 1) / 2) / (points - 1));
      if (g.empty() || g.back() != c) {
        g.push_back(c);
      }
    }
    if (g.back() != hi) {
      g.push_back(hi);
    }
    return g;
  }

  // Edges 1 and kv_blocks(g) + 1 for every grid cap g: hits are exact at the grid's pool sizes.
  static std::vector<distance_type> kv_edges(const model_spec& m, byte_size budget,
                                             const std::vector<std::int32_t>& grid) {
    std::vector<distance_type> edges{1};
    for (auto it = grid.rbegin(); it != grid.rend(); ++it) {  // descending cap = ascending KV
      const std::uint64_t blocks = make_split(m, budget, *it).kv_blocks;
      const auto e = static_cast<distance_type>(
          std::min<std::uint64_t>(blocks + 1, reuse_distance_counter::cold - 1));
      if (e > edges.back()) {
        edges.push_back(e);
      }
    }
    return edges;
  }

  model_spec spec_;
  byte_size budget_;
  admission_floor floor_;
  cost_params params_;
  controller_config config_;
  std::int32_t max_cap_;
  std::vector<std::int32_t> grid_;
  decayed_histogram expert_hist_;
  decayed_histogram kv_hist_;
  scoped_reuse_counter expert_calls_;          // the per-layer stacks of record_expert_call
  std::vector<distance_type> call_distances_;  // its scratch
  std::vector<std::uint32_t> call_ids_;        // the reuse counter's key type
  split current_;
};

}  // namespace wisp
