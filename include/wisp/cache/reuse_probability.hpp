// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `reuse_probability`: evicts the resident key least likely to be used again within the
/// next few forward passes, estimated online from two histories: the key's own reuse distances,
/// and the keys past sequences used at the token positions coming next.
///
/// Belady evicts the key used farthest in the future. This policy asks a question a cache can
/// answer from its past: *how likely is the key to be used within the next `horizon` passes?*
/// With `s` the current pass, `t = ctx.position` its token index within its sequence and `k` a
/// resident key:
///
/// - **Own reuse.** Every access of `k` at pass `s'` after one at `s0 < s'` records the reuse
///   distance `s' - s0` (distances above `max_distance` are recorded as `max_distance + 1`). `k`
///   was last used `a - 1` passes ago, so its next use is at least `a` passes away; among the
///   recorded distances `d >= a`, the share with `d < a + horizon` estimates the probability that
///   it is used within `horizon` passes (`P(D < a + h | D >= a)`, a hazard estimate in the manner
///   of reuse-distance predictors such as EVA, Beckmann and Sanchez, HPCA 2016). 0 when `a >
///   max_distance` or nothing is recorded.
/// - **Position profile.** Per token position `u < positions`, the policy counts the passes at
///   that position and, per key, the passes that used it. The probability that `k` is used at
///   one of the next positions `t + 1 .. t + horizon` is `1 - prod_u (1 - used(u, k) / passes(u))`
///   over the positions seen before. In prefill of templated prompts (the ESFT trace) routing
///   depends strongly on the token position: the experts used at a position in past sequences
///   predict it at precision@6 0.50, against 0.27 for the overall frequency.
///
///     score(k) = (1 - position_weight) x own + position_weight x profile
///
/// The victim is the unprotected resident key with the smallest score, then the least recently
/// used. Without positions (`ctx.position` always 0, as from `pager::prepare` without positions),
/// the profile is never consulted beyond position 0 and the policy ranks by its own-reuse
/// estimate alone.
///
/// **How it is fast.** A key's score changes only when the key is used, when the pass or the token
/// position changes, or when a pass at a position inside the horizon is counted. So the resident
/// keys sit in a binary heap ordered by `(score, last use)`, scored for one `(pass, position)`: a
/// used key is rescored in place, and the first `victim` at a new pass or position rescores every
/// resident key and rebuilds the heap in O(r). In per-layer scope a cache serves one call per pass,
/// so every call rescores every resident key: there the keys are kept unordered and each victim
/// is found by a scan, O(r), no more than the rescoring, and a use costs no heap sift. Each key
/// keeps its reuse distances as suffix counts (`at_least[d]`: recorded distances `>= d`), so its
/// own-reuse estimate is two reads.
///
/// Cost, for r resident keys, distances up to `max_distance` = D and `horizon` = h:
/// `on_insert`, `on_hit` O(D + h + log r); `on_erase` O(log r); `victim` O(1 + p) (p protected keys
/// above the answer in the heap), plus O(r x h) once per pass and token position (per-row positions
/// of a batch pay it at every change of position). Per-layer scope: `on_insert`, `on_hit`
/// O(D + h), `on_erase` O(1), `victim` O(r) plus the same rescoring. Memory: `keys x (D + 2 +
/// positions)` 32-bit counters. Not thread-safe; allocation-free after `reset`.
/// @code
/// wisp::per_layer_cache<wisp::reuse_probability> caches(26, 64, 21);
/// // ctx.position = the token's index in its sequence (wisp::sim fills it from the trace)
/// @endcode
#pragma once

#include <wisp/cache/detail/key_heap.hpp>
#include <wisp/cache/eviction_policy.hpp>
#include <wisp/core/error.hpp>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <vector>

namespace wisp {

/// @brief Parameters of `reuse_probability`.
struct reuse_probability_config {
  /// Passes ahead in which a use counts (>= 1).
  std::int32_t horizon = 8;
  /// Longest reuse distance, in passes, recorded exactly (>= 1).
  std::int32_t max_distance = 64;
  /// Token positions profiled (>= 0; 0 disables the position profile).
  std::int32_t positions = 256;
  /// Weight of the position profile against the own-reuse estimate, in [0, 1].
  double position_weight = 0.5;

  /// @throws wisp::logic_error naming the field if a parameter is out of range.
  void validate() const {
    WISP_EXPECTS(horizon >= 1 && horizon <= 4096,
                 "reuse_probability: horizon must be in [1, 4096], got ", horizon);
    WISP_EXPECTS(max_distance >= 1 && max_distance <= 65536,
                 "reuse_probability: max_distance must be in [1, 65536], got ", max_distance);
    WISP_EXPECTS(positions >= 0 && positions <= 65536,
                 "reuse_probability: positions must be in [0, 65536], got ", positions);
    WISP_EXPECTS(position_weight >= 0.0 && position_weight <= 1.0,
                 "reuse_probability: position_weight must be in [0, 1], got ", position_weight);
  }
};

/// @brief See the file description. Models `eviction_policy`.
class reuse_probability {
 public:
  static constexpr std::string_view name = "reuse_probability";

  /// @throws wisp::logic_error on an invalid config (see `reuse_probability_config::validate`).
  explicit reuse_probability(const reuse_probability_config& config = {}) : config_(config) {
    config_.validate();
  }

  /// Forgets every key and every count; sizes for `layout.size()` keys. @throws std::bad_alloc
  void reset(const key_layout& layout) {
    keys_ = static_cast<std::size_t>(layout.size());
    bins_ = static_cast<std::size_t>(config_.max_distance) + 2;
    at_least_.assign(keys_ * bins_, 0);
    used_.assign(keys_ * static_cast<std::size_t>(config_.positions), 0);
    passes_.assign(static_cast<std::size_t>(config_.positions), 0);
    last_step_.assign(keys_, never);
    last_.assign(keys_, 0);
    scanned_ = layout.scope == cache_scope::per_layer;
    heap_.reset(scanned_ ? 0 : layout.size());
    scanned_keys_.reset(scanned_ ? layout.size() : 0);
    tick_ = 0;
    step_ = never;
    scored_ = false;
  }
  void on_insert(cache_key key, const access_context& ctx) noexcept { record(key, ctx); }
  void on_hit(cache_key key, const access_context& ctx) noexcept { record(key, ctx); }
  void on_erase(cache_key key) noexcept {  // the histories stay
    with_keys([key](auto& keys) { keys.erase(key); });
  }
  /// The unprotected resident key with the smallest `score`, then the least recently used; or
  /// `no_key`.
  [[nodiscard]] cache_key victim(const access_context& ctx, protected_keys is_protected) noexcept {
    if (!scored_ || ctx.step != scored_step_ || ctx.position != scored_position_) {
      scored_ = true;
      scored_step_ = ctx.step;
      scored_position_ = ctx.position;
      with_keys([this](auto& keys) { keys.rebuild([this](cache_key k) { return priority(k); }); });
    }
    return with_keys([is_protected](auto& keys) { return keys.min_unprotected(is_protected); });
  }

  /// The estimated probability that `key` is used within `horizon` passes after `ctx.step`
  /// (see the file description), in [0, 1]. O(horizon).
  [[nodiscard]] double score(cache_key key, const access_context& ctx) const noexcept {
    const double w = config_.position_weight;
    return (1.0 - w) * own_reuse(static_cast<std::size_t>(key), ctx.step) +
           w * profile(static_cast<std::size_t>(key), ctx.position);
  }
  [[nodiscard]] const reuse_probability_config& config() const noexcept { return config_; }

 private:
  static constexpr std::int64_t never = -1;

  void record(cache_key key, const access_context& ctx) noexcept {
    const auto k = static_cast<std::size_t>(key);
    const auto step = static_cast<std::int64_t>(ctx.step);
    const auto position = static_cast<std::size_t>(ctx.position);
    const bool profiled = position < passes_.size();
    if (step != step_) {  // the first access of a pass
      step_ = step;
      if (profiled) {
        ++passes_[position];
        // A pass counted inside the scored horizon changes every key's profile.
        scored_ = scored_ && (position <= scored_position_ ||
                              position > std::size_t{scored_position_} +
                                             static_cast<std::size_t>(config_.horizon));
      }
    }
    if (last_step_[k] != never && step > last_step_[k]) {
      const auto d = std::min(static_cast<std::size_t>(step - last_step_[k]), bins_ - 1);
      std::uint32_t* const row = at_least_.data() + k * bins_;
      for (std::size_t i = 0; i <= d; ++i) {
        ++row[i];
      }
    }
    if (profiled && step != last_step_[k]) {
      ++used_[position * keys_ + k];
    }
    last_step_[k] = step;
    last_[k] = ++tick_;
    // Inserted or moved in the heap: rescored in place while the heap is for this pass.
    scored_ = scored_ && ctx.step == scored_step_;
    const detail::heap_priority prio = scored_ ? priority(key) : detail::heap_priority{};
    with_keys([key, prio](auto& keys) { keys.set(key, prio); });
  }
  // Runs `f` on the resident keys, kept in whichever order the scope uses.
  template <class F>
  std::invoke_result_t<F&, detail::key_heap&> with_keys(F&& f) noexcept {
    return scanned_ ? f(scanned_keys_) : f(heap_);
  }
  // The heap order: (score at the scored pass and position, last use). A score is never -0.0, so
  // its bits order as the doubles do.
  [[nodiscard]] detail::heap_priority priority(cache_key key) const noexcept {
    access_context at;
    at.step = scored_step_;
    at.position = scored_position_;
    return {std::bit_cast<std::uint64_t>(score(key, at)), last_[static_cast<std::size_t>(key)]};
  }
  // P(next use < a + horizon | next use >= a), a = passes since the last use + 1.
  [[nodiscard]] double own_reuse(std::size_t k, std::uint32_t step) const noexcept {
    if (last_step_[k] == never) {
      return 0.0;
    }
    const auto a = static_cast<std::size_t>(static_cast<std::int64_t>(step) - last_step_[k] + 1);
    if (a > static_cast<std::size_t>(config_.max_distance)) {
      return 0.0;
    }
    const std::uint32_t* row = at_least_.data() + k * bins_;
    const std::size_t soon = std::min(a + static_cast<std::size_t>(config_.horizon), bins_ - 1);
    const std::uint32_t all = row[a];  // recorded distances >= a
    return all == 0 ? 0.0 : static_cast<double>(all - row[soon]) / static_cast<double>(all);
  }
  // 1 - prod over the next `horizon` profiled positions of (1 - used / passes).
  [[nodiscard]] double profile(std::size_t k, std::uint32_t position) const noexcept {
    double none = 1.0;
    const auto first = static_cast<std::size_t>(position) + 1;
    const std::size_t end =
        std::min(first + static_cast<std::size_t>(config_.horizon), passes_.size());
    for (std::size_t u = first; u < end; ++u) {
      if (passes_[u] > 0) {
        none *= 1.0 - static_cast<double>(used_[u * keys_ + k]) / static_cast<double>(passes_[u]);
      }
    }
    return 1.0 - none;
  }

  reuse_probability_config config_;
  std::size_t keys_ = 0;
  std::size_t bins_ = 0;
  std::vector<std::uint32_t> at_least_;  // [key x (max_distance + 2)] recorded distances >= d
  std::vector<std::uint32_t> used_;      // [position x key] passes at the position that used it
  std::vector<std::uint32_t> passes_;    // [position] passes seen at the position
  std::vector<std::int64_t> last_step_;  // [key] pass of the last use, or `never`
  std::vector<std::uint64_t> last_;      // [key] tick of the last use (ties)
  // The resident keys by priority(), exact while scored_: a heap in global scope, unordered
  // (scanned) in per-layer scope, where every call rescores them
  detail::key_heap heap_;
  detail::scanned_keys scanned_keys_;
  bool scanned_ = false;
  std::uint64_t tick_ = 0;
  std::int64_t step_ = never;  // the pass of the last access
  bool scored_ = false;        // every resident key's place is for the scored pass and position
  std::uint32_t scored_step_ = 0;
  std::uint32_t scored_position_ = 0;
};
static_assert(eviction_policy<reuse_probability>);

}  // namespace wisp
