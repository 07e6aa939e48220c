// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Hindsight references: offline policies that know *statistics* of the whole trace, but
/// not the order of the accesses to come, to measure how much of Belady's advantage is within
/// reach of an online policy.
///
/// Belady's optimum (`belady`) knows the exact next use of every key. No online policy can, so
/// its miss count is a bound that no policy reaches; how far above it a good policy must stay
/// depends on the trace. The two references here sit in between: each knows, from the start, more
/// about the future than any online policy could learn from the past, but only as a frequency or
/// an average, not as the next access.
///
/// - `hindsight_frequency` knows how often every key is used in the **whole current sequence**
///   (request), its future included: the exact request-level popularity an online frequency
///   estimate converges to, without the estimation error.
/// - `hindsight_reuse` ranks keys by their expected next use given two features an online policy
///   has (passes since the key's last use, its uses in the last 8 passes) and that popularity,
///   with the expectations measured on the whole trace it replays. A policy that ranks by those
///   features, however it learns, only approaches the averages this one knows.
///
/// They are measuring instruments for `wisp sim` and `simulate_hindsight`, not policies to serve
/// with: they need the trace in advance. docs/policies.md gives their counts on the real traces.
/// @code
/// wisp::sim_config config{.scope = wisp::cache_scope::global, .capacity = 416};
/// const wisp::sim_result r = wisp::simulate_hindsight("hindsight_reuse", trace, config);
/// @endcode
#pragma once

#include <wisp/cache/eviction_policy.hpp>
#include <wisp/cache/log_bins.hpp>
#include <wisp/core/error.hpp>
#include <wisp/sim/simulate.hpp>
#include <wisp/sim/trace_sim.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace wisp {

/// The names `simulate_hindsight` and `wisp sim --policy` accept for the hindsight references.
inline constexpr std::string_view hindsight_policy_names[] = {"hindsight_frequency",
                                                              "hindsight_reuse"};

/// True if `name` is one of `hindsight_policy_names` (exact spelling). O(1). Thread-safe.
[[nodiscard]] constexpr bool is_hindsight_policy(std::string_view name) noexcept {
  return name == hindsight_policy_names[0] || name == hindsight_policy_names[1];
}

namespace detail {

/// The passes (steps) at which each key of one cache is used, from the cache's accesses in
/// order. O(accesses) time and memory.
class key_passes {
 public:
  key_passes() = default;
  /// @throws wisp::logic_error if the sizes differ, a key is negative or steps decrease.
  key_passes(std::span<const std::uint32_t> steps, std::span<const cache_key> keys) {
    WISP_EXPECTS(steps.size() == keys.size(), "hindsight: ", steps.size(), " steps for ",
                 keys.size(), " keys");
    cache_key max_key = -1;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      WISP_EXPECTS(keys[i] >= 0, "hindsight: key ", keys[i], " at position ", i, " is negative");
      WISP_EXPECTS(i == 0 || steps[i - 1] <= steps[i], "hindsight: steps must not decrease, but ",
                   "position ", i, " has step ", steps[i], " after ", i == 0 ? 0 : steps[i - 1]);
      max_key = std::max(max_key, keys[i]);
      if (passes_.empty() || passes_.back() != steps[i]) {
        passes_.push_back(steps[i]);
      }
    }
    const auto n = static_cast<std::size_t>(max_key + 1);
    std::vector<std::uint32_t> last(n, 0);
    std::vector<bool> seen(n, false);
    offsets_.assign(n + 1, 0);
    for (std::size_t i = 0; i < keys.size(); ++i) {  // count each key's distinct passes
      const auto k = static_cast<std::size_t>(keys[i]);
      if (!seen[k] || last[k] != steps[i]) {
        ++offsets_[k + 1];
        seen[k] = true;
        last[k] = steps[i];
      }
    }
    for (std::size_t k = 0; k < n; ++k) {
      offsets_[k + 1] += offsets_[k];
    }
    uses_.resize(offsets_[n]);
    std::vector<std::size_t> fill(offsets_.begin(), offsets_.end() - 1);
    for (std::size_t i = 0; i < keys.size(); ++i) {
      const auto k = static_cast<std::size_t>(keys[i]);
      if (fill[k] == offsets_[k] || uses_[fill[k] - 1] != steps[i]) {
        uses_[fill[k]++] = steps[i];
      }
    }
  }
  /// Keys with at least one use are in `[0, key_space())`.
  [[nodiscard]] std::int32_t key_space() const noexcept {
    return offsets_.empty() ? 0 : static_cast<std::int32_t>(offsets_.size() - 1);
  }
  /// The distinct passes that use `key`, increasing (empty for a key outside the history).
  [[nodiscard]] std::span<const std::uint32_t> of(cache_key key) const noexcept {
    if (key < 0 || key >= key_space()) {
      return {};
    }
    const auto k = static_cast<std::size_t>(key);
    return {uses_.data() + offsets_[k], offsets_[k + 1] - offsets_[k]};
  }
  /// Every distinct pass of the history, increasing.
  [[nodiscard]] std::span<const std::uint32_t> passes() const noexcept { return passes_; }

  /// Uses of `key` in passes `[from, to)`. O(log uses).
  [[nodiscard]] std::size_t count(cache_key key, std::uint64_t from, std::uint64_t to) const {
    const auto u = of(key);
    const auto at = [&u](std::uint64_t p) {
      return std::lower_bound(u.begin(), u.end(), p,
                              [](std::uint32_t a, std::uint64_t b) { return a < b; }) -
             u.begin();
    };
    return to <= from ? 0 : static_cast<std::size_t>(at(to) - at(from));
  }

 private:
  std::vector<std::size_t> offsets_;  // [key space + 1] into uses_
  std::vector<std::uint32_t> uses_;   // per key, its distinct passes, increasing
  std::vector<std::uint32_t> passes_;
};

/// The resident keys of a hindsight policy, with the tick of each key's last access (recency,
/// for ties). Insert, erase and touch O(1).
class resident_keys {
 public:
  void reset(std::int32_t key_space) {
    keys_.clear();
    keys_.reserve(static_cast<std::size_t>(key_space));
    where_.assign(static_cast<std::size_t>(key_space), 0);
    ticks_.assign(static_cast<std::size_t>(key_space), 0);
    tick_ = 0;
  }
  void insert(cache_key key) noexcept {
    where_[static_cast<std::size_t>(key)] = keys_.size();
    keys_.push_back(key);
    touch(key);
  }
  void touch(cache_key key) noexcept { ticks_[static_cast<std::size_t>(key)] = ++tick_; }
  void erase(cache_key key) noexcept {
    const std::size_t at = where_[static_cast<std::size_t>(key)];
    keys_[at] = keys_.back();
    where_[static_cast<std::size_t>(keys_[at])] = at;
    keys_.pop_back();
  }
  [[nodiscard]] std::span<const cache_key> keys() const noexcept { return keys_; }
  [[nodiscard]] std::uint64_t tick(cache_key key) const noexcept {
    return ticks_[static_cast<std::size_t>(key)];
  }

 private:
  std::vector<cache_key> keys_;
  std::vector<std::size_t> where_;
  std::vector<std::uint64_t> ticks_;
  std::uint64_t tick_ = 0;
};

/// Every key's uses in a sequence (request) of one cache's history, kept for the last two
/// sequences asked for: a victim at the end of a sequence scores keys in it and in the next, so a
/// view stays valid through the next call of `of`. A sequence is `[start_i, start_{i+1})`; steps
/// before the first start form one sequence.
class sequence_counts {
 public:
  sequence_counts() = default;
  /// @throws wisp::logic_error if the starts do not increase.
  explicit sequence_counts(std::span<const std::size_t> starts)
      : starts_(starts.begin(), starts.end()) {
    for (std::size_t i = 1; i < starts_.size(); ++i) {
      WISP_EXPECTS(starts_[i - 1] < starts_[i], "hindsight: sequence starts must increase, but ",
                   "start ", i, " is ", starts_[i], " after ", starts_[i - 1]);
    }
  }
  void reset(std::int32_t key_space) {
    uses_ = 0;
    for (slot& s : slots_) {
      s = slot{};
      s.counts.assign(static_cast<std::size_t>(key_space), 0);
    }
  }
  /// The sequence holding `step`: its index and its steps `[from, to)`.
  struct bounds {
    std::size_t index = 0;
    std::uint64_t from = 0, to = 0;
  };
  [[nodiscard]] bounds bounds_of(std::uint64_t step) const noexcept {
    const auto after = static_cast<std::size_t>(
        std::upper_bound(starts_.begin(), starts_.end(), step,
                         [](std::uint64_t a, std::size_t b) { return a < b; }) -
        starts_.begin());
    return {after, after == 0 ? 0 : std::uint64_t{starts_[after - 1]},
            after == starts_.size() ? ~std::uint64_t{0} : std::uint64_t{starts_[after]}};
  }
  /// Per key, its uses in the sequence holding `step`; and the sequence's passes in the history.
  /// O(1) for one of the last two sequences asked for, else O(keys x log uses).
  struct view {
    std::span<const std::uint32_t> counts;
    std::size_t passes = 0;
  };
  view of(const key_passes& history, std::uint64_t step) {
    const bounds b = bounds_of(step);
    ++uses_;
    for (slot& s : slots_) {
      if (s.valid && s.index == b.index) {
        s.used = uses_;
        return {s.counts, s.passes};
      }
    }
    // The slot asked for longer ago: never the one a caller holds from the call before.
    slot& s = slots_[0].used <= slots_[1].used ? slots_[0] : slots_[1];
    s.used = uses_;
    s.valid = true;
    s.index = b.index;
    for (std::size_t k = 0; k < s.counts.size(); ++k) {
      s.counts[k] =
          static_cast<std::uint32_t>(history.count(static_cast<cache_key>(k), b.from, b.to));
    }
    const auto p = history.passes();
    const auto at = [&p](std::uint64_t x) {
      return std::lower_bound(p.begin(), p.end(), x,
                              [](std::uint32_t a, std::uint64_t v) { return a < v; }) -
             p.begin();
    };
    s.passes = static_cast<std::size_t>(at(b.to) - at(b.from));
    return {s.counts, s.passes};
  }

 private:
  struct slot {
    bool valid = false;
    std::uint64_t used = 0;  // when it was last asked for
    std::size_t index = 0;
    std::size_t passes = 0;
    std::vector<std::uint32_t> counts;
  };
  std::vector<std::size_t> starts_;
  std::array<slot, 2> slots_;
  std::uint64_t uses_ = 0;
};

}  // namespace detail

/// @brief Evicts the unprotected resident key used in the fewest passes of the **whole current
/// sequence**, past and future; ties to the least recently used.
///
/// Built from the accesses one cache will see (their steps and keys, in order) and the steps at
/// which sequences begin (see `detail::sequence_counts`). Every key's count for a sequence is
/// computed when the cache first asks for a victim in it: O(keys x log uses) per sequence.
/// `victim` O(r) for r resident keys (a scan); hooks O(1). A measuring instrument (see the file
/// description). Not thread-safe.
class hindsight_frequency {
 public:
  static constexpr std::string_view name = "hindsight_frequency";

  /// An empty history: every count is 0, so the policy is LRU.
  hindsight_frequency() = default;
  /// @param steps, keys the cache's accesses in order (the steps non-decreasing).
  /// @param sequence_starts the steps at which sequences begin, increasing (empty: one sequence).
  /// @throws wisp::logic_error if the sizes differ, a key is negative, steps decrease or the
  ///   starts do not increase.
  hindsight_frequency(std::span<const std::uint32_t> steps, std::span<const cache_key> keys,
                      std::span<const std::size_t> sequence_starts = {})
      : passes_(steps, keys), sequences_(sequence_starts) {}

  /// @throws wisp::logic_error if the history holds a key outside `[0, layout.size())`.
  void reset(const key_layout& layout) {
    WISP_EXPECTS(passes_.key_space() <= layout.size(), "hindsight_frequency: the history holds ",
                 "key ", passes_.key_space() - 1, " but the key space is ", layout.size());
    resident_.reset(layout.size());
    sequences_.reset(passes_.key_space());
  }
  void on_insert(cache_key key, const access_context& /*ctx*/) noexcept { resident_.insert(key); }
  void on_hit(cache_key key, const access_context& /*ctx*/) noexcept { resident_.touch(key); }
  void on_erase(cache_key key) noexcept { resident_.erase(key); }
  /// The unprotected resident key with the fewest uses in the sequence of `ctx.step`, then the
  /// least recently used; `no_key` if every resident key is protected.
  [[nodiscard]] cache_key victim(const access_context& ctx, protected_keys is_protected) {
    const auto counts = sequences_.of(passes_, ctx.step).counts;
    const auto count = [&counts](cache_key key) {
      const auto k = static_cast<std::size_t>(key);
      return k < counts.size() ? counts[k] : 0u;
    };
    cache_key best = no_key;
    for (const cache_key key : resident_.keys()) {
      if (is_protected(key)) {
        continue;
      }
      if (best == no_key || count(key) < count(best) ||
          (count(key) == count(best) && resident_.tick(key) < resident_.tick(best))) {
        best = key;
      }
    }
    return best;
  }

 private:
  detail::key_passes passes_;
  detail::sequence_counts sequences_;
  detail::resident_keys resident_;
};
static_assert(eviction_policy<hindsight_frequency>);

/// @brief Evicts the unprotected resident key with the largest expected next use given features
/// of its past and its popularity in the whole current sequence, the expectations measured on the
/// whole history; ties to the least recently used.
///
/// At a pass `t`, a key that was used before has three features: `a = t - ` its last use (in
/// passes; bucket `bit_width(a)`, at most 15), its uses in `[t - 8, t)` (0..8), and its
/// popularity in the sequence holding `t`, future included: `256 x uses / passes` of the
/// sequence (0..4 exactly, then two buckets per power of two). The table: for every pass of the
/// history and every key used before it, the bucket of its features gets one sample of
/// `min(next use - t, 256)` passes. The score of a resident key at a victim: `mean` of its bucket
/// at the first pass where its layer can run again (this pass if its layer is still ahead, in
/// global scope; else the next), or 256 for an empty bucket; in global scope `mean x layers + d`,
/// with `d` in [1, layers] the layer executions until its layer runs (as `fld`), so that keys of
/// different layers compare by expected layer executions.
///
/// Cost: construction O(accesses); the table at `reset`, O(passes x keys); `victim` O(r) for r
/// resident keys (each key's features kept by cursors that only move forward while the step does
/// not decrease). A measuring instrument (see the file description). Not thread-safe.
class hindsight_reuse {
 public:
  static constexpr std::string_view name = "hindsight_reuse";
  /// Passes of the short count window, and the cap of a sample's next use.
  static constexpr std::uint32_t short_window = 8;
  static constexpr std::uint32_t horizon = 256;

  /// An empty history: every bucket is empty, so the policy is LRU within each layer distance
  /// (`fld`'s order in global scope, LRU per layer).
  hindsight_reuse() = default;
  /// @param steps, keys the cache's accesses in order (the steps non-decreasing).
  /// @param sequence_starts the steps at which sequences begin, increasing (empty: one sequence).
  /// @throws wisp::logic_error if the sizes differ, a key is negative, steps decrease or the
  ///   starts do not increase.
  hindsight_reuse(std::span<const std::uint32_t> steps, std::span<const cache_key> keys,
                  std::span<const std::size_t> sequence_starts = {})
      : passes_(steps, keys), sequences_(sequence_starts) {}

  /// Sizes for `layout` and measures the table on the history. O(passes x keys).
  /// @throws wisp::logic_error if the history holds a key outside `[0, layout.size())`.
  void reset(const key_layout& layout) {
    WISP_EXPECTS(passes_.key_space() <= layout.size(), "hindsight_reuse: the history holds key ",
                 passes_.key_space() - 1, " but the key space is ", layout.size());
    layout_ = layout;
    resident_.reset(layout.size());
    sequences_.reset(passes_.key_space());
    sums_.assign(buckets, 0);
    samples_.assign(buckets, 0);
    cursors_.assign(static_cast<std::size_t>(passes_.key_space()), cursor{});
    for (const std::uint32_t t : passes_.passes()) {
      const auto sequence = sequences_.of(passes_, t);
      for (cache_key key = 0; key < passes_.key_space(); ++key) {
        const features f = features_at(key, t, sequence);
        if (f.bucket != no_bucket) {
          sums_[f.bucket] += std::min<std::uint64_t>(f.next, horizon);
          ++samples_[f.bucket];
        }
      }
    }
    cursors_.assign(static_cast<std::size_t>(passes_.key_space()), cursor{});
  }
  void on_insert(cache_key key, const access_context& /*ctx*/) noexcept { resident_.insert(key); }
  void on_hit(cache_key key, const access_context& /*ctx*/) noexcept { resident_.touch(key); }
  void on_erase(cache_key key) noexcept { resident_.erase(key); }
  /// The unprotected resident key with the largest `score`, then the least recently used;
  /// `no_key` if every resident key is protected.
  [[nodiscard]] cache_key victim(const access_context& ctx, protected_keys is_protected) {
    const scoring at = scoring_at(ctx);
    cache_key best = no_key;
    double best_score = 0.0;
    for (const cache_key key : resident_.keys()) {
      if (is_protected(key)) {
        continue;
      }
      const double s = score(key, at);
      if (best == no_key || s > best_score ||
          (s == best_score && resident_.tick(key) < resident_.tick(best))) {
        best = key;
        best_score = s;
      }
    }
    return best;
  }

 private:
  static constexpr std::size_t age_buckets = 16;
  static constexpr std::size_t short_buckets = short_window + 1;
  static constexpr std::size_t popularity_buckets = 18;  // half_octave_bin(256) = 17
  static constexpr std::size_t buckets = age_buckets * short_buckets * popularity_buckets;
  static constexpr std::size_t no_bucket = buckets;

  struct features {
    std::size_t bucket = no_bucket;  // no_bucket: not used before t
    std::uint64_t next = 0;          // passes from t to the next use (~0: none)
  };
  // Indices into a key's passes: the first use at or after t, and at or after t - 8.
  struct cursor {
    std::uint64_t t = 0;
    std::size_t now = 0, near = 0;
  };

  // What a victim at `ctx` scores with: the sequences of this pass and of the next.
  struct scoring {
    access_context ctx;
    detail::sequence_counts::view now, next;
  };
  scoring scoring_at(const access_context& ctx) {
    scoring at{ctx, sequences_.of(passes_, ctx.step), {}};
    at.next = sequences_.of(passes_, std::uint64_t{ctx.step} + 1);
    return at;
  }
  double score(cache_key key, const scoring& at) {
    const bool global = layout_.scope == cache_scope::global;
    const std::int32_t layer = at.ctx.layer;
    const std::int32_t key_layer = global ? key / layout_.experts : layer;
    const bool ahead = key_layer > layer;  // its layer still runs in this pass
    const double mean = mean_of(
        features_at(key, std::uint64_t{at.ctx.step} + (ahead ? 0u : 1u), ahead ? at.now : at.next)
            .bucket);
    if (!global) {
      return mean;
    }
    const std::int32_t d = key_layer - layer - 1;
    return mean * layout_.layers + ((d < 0 ? d + layout_.layers : d) + 1);
  }
  [[nodiscard]] double mean_of(std::size_t bucket) const noexcept {
    return bucket == no_bucket || samples_[bucket] == 0
               ? static_cast<double>(horizon)
               : static_cast<double>(sums_[bucket]) / static_cast<double>(samples_[bucket]);
  }
  // The features of `key` at pass `t` (its cursor moves there), in the sequence `sequence`.
  features features_at(cache_key key, std::uint64_t t, detail::sequence_counts::view sequence) {
    if (key >= passes_.key_space()) {  // not in the history
      return {};
    }
    const auto u = passes_.of(key);
    cursor& c = cursors_[static_cast<std::size_t>(key)];
    const auto advance = [&u](std::size_t& i, std::uint64_t p) {
      while (i < u.size() && u[i] < p) {
        ++i;
      }
    };
    if (t < c.t) {  // back in time: start over
      c = cursor{};
    }
    c.t = t;
    advance(c.now, t);
    advance(c.near, t > short_window ? t - short_window : 0);
    features f;
    if (c.now == 0) {
      return f;
    }
    const std::uint64_t age = t - u[c.now - 1];
    const auto age_bucket =
        std::min<std::size_t>(static_cast<std::size_t>(std::bit_width(age)), age_buckets - 1);
    const std::size_t uses = sequence.counts[static_cast<std::size_t>(key)];
    const std::size_t popularity = sequence.passes == 0 ? 0 : uses * 256 / sequence.passes;
    f.bucket = (age_bucket * short_buckets + (c.now - c.near)) * popularity_buckets +
               static_cast<std::size_t>(half_octave_bin(popularity));
    f.next = c.now < u.size() ? u[c.now] - t : ~std::uint64_t{0};
    return f;
  }

  detail::key_passes passes_;
  detail::sequence_counts sequences_;
  key_layout layout_;
  detail::resident_keys resident_;
  std::vector<cursor> cursors_;
  std::vector<std::uint64_t> sums_;     // [buckets]: sum of min(next use, horizon)
  std::vector<std::uint64_t> samples_;  // [buckets]: samples
};
static_assert(eviction_policy<hindsight_reuse>);

/// @brief Replays `source` through the hindsight reference named `policy` (one of
/// `hindsight_policy_names`), built from the source itself, which is visited twice (once for the
/// history, once for the replay). Per-layer scope: each layer's cache is built from that layer's
/// accesses. Same results and counters as `simulate`.
/// @throws wisp::logic_error on an unknown name (the message lists the known ones), and as
///   `simulate`.
template <access_source Source>
sim_result simulate_hindsight(std::string_view policy, moe_shape shape, const Source& source,
                              const sim_config& config) {
  WISP_EXPECTS(is_hindsight_policy(policy), "simulate_hindsight: unknown policy '", policy,
               "' (valid: ", hindsight_policy_names[0], ", ", hindsight_policy_names[1], ")");
  detail::check_shape(shape);
  const auto histories = detail::cache_histories(shape, source, config.scope);
  if (policy == hindsight_frequency::name) {
    return simulate<hindsight_frequency>(shape, source, config, [&](std::int32_t layer) {
      const detail::cache_history& h = histories[detail::history_index(layer)];
      return hindsight_frequency(h.steps, h.keys, config.sequence_starts);
    });
  }
  return simulate<hindsight_reuse>(shape, source, config, [&](std::int32_t layer) {
    const detail::cache_history& h = histories[detail::history_index(layer)];
    return hindsight_reuse(h.steps, h.keys, config.sequence_starts);
  });
}

/// `simulate_hindsight` over `trace` (sequences from the trace's own starts).
inline sim_result simulate_hindsight(std::string_view policy, const routing_trace& trace,
                                     const sim_config& config) {
  return simulate_hindsight(policy, shape_of(trace), detail::trace_source{&trace},
                            detail::with_sequences(trace, config));
}

}  // namespace wisp
