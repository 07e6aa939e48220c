// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `tiered_cache`: one MoE layer's compression-aware pools F ≺ C ≺ S ≺ E (ZipMoE, seeds/001
/// §3.4), dispatched by a runtime frequency list.
///
/// **Dispatch.** The cache counts every activation of every expert (`frequency_list`; rank 0 is the
/// most frequent; among equal counts the expert that reached the count first stays ahead, experts
/// never activated in id order). After a layer call has
/// executed, each of its experts goes to the first pool `p` (in the order F, C, S, E, skipping
/// empty pools) whose threshold `tau_p = S_F + ... + S_p + delta` exceeds its rank, where `S_p` is
/// the pool's capacity and `delta` the tolerance margin; an expert ranked past every threshold is
/// dropped from the hierarchy after execution. A pool that overflows evicts through its eviction
/// policy (by default `frequency_rank`: the least frequent resident, ZipMoE's rule); the evicted
/// expert leaves the hierarchy. Experts of the same call never evict each other.
///
/// **Lookup.** Before a call, `lookup` reports where each requested expert is (`residency`): the
/// pool's hit kind decides the work (F: none; C: decode; S: read the E-chunks and decode; E: read
/// the SM chunks and decode; miss: read both and decode), which `affinity_scheduler.hpp` schedules.
///
/// The pools are `slot_cache<Policy>`s over the layer's experts, so any `eviction_policy` of the
/// pager (lru, lfu, least_stale, ...) can replace the frequency rule inside the pools; a policy
/// constructible from `const frequency_list&` gets the cache's list.
/// @code
/// wisp::tiered_cache<> tiers(64, {.capacity = {4, 6, 8, 12}, .tolerance = 1});
/// std::span<const wisp::residency> where = tiers.lookup(ids, {.step = s, .time = t});
/// // ... read / decode / execute according to `where` (one entry per distinct id) ...
/// tiers.dispatch({.step = s, .time = t});
/// // tiers.stats().pools[0].hits, tiers.last_pattern(), ...
/// @endcode
#pragma once

#include <wisp/cache/eviction_policy.hpp>
#include <wisp/cache/slot_cache.hpp>
#include <wisp/core/error.hpp>
#include <wisp/tiered/tier_model.hpp>

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace wisp {

/// @brief Activation counts of a layer's experts kept in rank order (the runtime frequency list).
/// `touch` is O(log E); `rank` and `count` O(1). Allocates only in the constructor.
class frequency_list {
 public:
  /// @throws wisp::logic_error if `experts < 1`.
  explicit frequency_list(std::int32_t experts) {
    WISP_EXPECTS(experts >= 1, "frequency_list: experts must be >= 1, got ", experts);
    const auto n = static_cast<std::size_t>(experts);
    count_.assign(n, 0);
    order_.resize(n);
    rank_.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      order_[i] = static_cast<std::int32_t>(i);
      rank_[i] = static_cast<std::int32_t>(i);
    }
  }

  /// Counts one activation of `e`: it moves to the front of the experts with its old count
  /// (behind every expert with more activations). O(log E + experts tied with it).
  /// @throws wisp::logic_error if `e` is out of range.
  void touch(std::int32_t e) {
    check(e);
    const std::uint64_t c = count_[static_cast<std::size_t>(e)];
    // The first rank holding count c (counts are non-increasing along the order).
    const auto first = std::partition_point(order_.begin(), order_.end(), [&](std::int32_t x) {
      return count_[static_cast<std::size_t>(x)] > c;
    });
    const auto at = order_.begin() + rank_[static_cast<std::size_t>(e)];
    std::rotate(first, at, at + 1);
    for (auto it = first; it <= at; ++it) {
      rank_[static_cast<std::size_t>(*it)] = static_cast<std::int32_t>(it - order_.begin());
    }
    ++count_[static_cast<std::size_t>(e)];
  }

  [[nodiscard]] std::int32_t experts() const noexcept {
    return static_cast<std::int32_t>(count_.size());
  }
  /// 0 for the most frequent expert. @throws wisp::logic_error if `e` is out of range.
  [[nodiscard]] std::int32_t rank(std::int32_t e) const {
    check(e);
    return rank_[static_cast<std::size_t>(e)];
  }
  /// Activations of `e` so far. @throws wisp::logic_error if `e` is out of range.
  [[nodiscard]] std::uint64_t count(std::int32_t e) const {
    check(e);
    return count_[static_cast<std::size_t>(e)];
  }
  /// Expert ids from the most to the least frequent.
  [[nodiscard]] std::span<const std::int32_t> order() const noexcept { return order_; }
  /// The rank array (stable address for the life of the list, even when the list is moved).
  [[nodiscard]] const std::int32_t* ranks() const noexcept { return rank_.data(); }

 private:
  void check(std::int32_t e) const {
    WISP_EXPECTS(e >= 0 && e < experts(), "frequency_list: expert ", e, " is outside [0, ",
                 experts(), ")");
  }
  std::vector<std::uint64_t> count_;
  std::vector<std::int32_t> order_;
  std::vector<std::int32_t> rank_;
};

/// @brief ZipMoE's overflow rule as an `eviction_policy`: the victim is the unprotected resident
/// with the worst rank in a `frequency_list` (the least frequently activated). `victim` is
/// O(residents); the other hooks O(1). Keeps a pointer to the list's ranks: the list must outlive
/// the policy (inside `tiered_cache` it does).
class frequency_rank {
 public:
  static constexpr std::string_view name = "frequency_rank";
  frequency_rank() = default;
  explicit frequency_rank(const frequency_list& list) noexcept : rank_(list.ranks()) {}

  void reset(const key_layout& layout) {
    index_.assign(static_cast<std::size_t>(layout.size()), -1);
    residents_.clear();
    residents_.reserve(static_cast<std::size_t>(layout.size()));
  }
  void on_insert(cache_key key, const access_context&) {
    index_[static_cast<std::size_t>(key)] = static_cast<std::int32_t>(residents_.size());
    residents_.push_back(key);
  }
  void on_hit(cache_key, const access_context&) noexcept {}
  void on_erase(cache_key key) {
    const std::int32_t i = index_[static_cast<std::size_t>(key)];
    const cache_key last = residents_.back();
    residents_[static_cast<std::size_t>(i)] = last;
    index_[static_cast<std::size_t>(last)] = i;
    residents_.pop_back();
    index_[static_cast<std::size_t>(key)] = -1;
  }
  /// Without a list (default-constructed), the largest key goes first.
  [[nodiscard]] cache_key victim(const access_context&, protected_keys is_protected) const {
    cache_key best = no_key;
    for (const cache_key key : residents_) {
      if (!is_protected(key) && (best == no_key || worse(key, best))) {
        best = key;
      }
    }
    return best;
  }

 private:
  [[nodiscard]] bool worse(cache_key a, cache_key b) const noexcept {
    return rank_ == nullptr
               ? a > b
               : rank_[static_cast<std::size_t>(a)] > rank_[static_cast<std::size_t>(b)];
  }
  const std::int32_t* rank_ = nullptr;
  std::vector<std::int32_t> index_;
  std::vector<cache_key> residents_;
};
static_assert(eviction_policy<frequency_rank>);

/// @brief Pool capacities (experts) and the tolerance margin delta of the thresholds.
struct tier_config {
  tier_sizes capacity{};       ///< S_F, S_C, S_S, S_E; 0 disables a pool
  std::int32_t tolerance = 0;  ///< delta >= 0, added to every threshold
};

/// @brief Counters of one pool.
struct tier_pool_stats {
  std::uint64_t hits = 0;                ///< requested experts found in this pool
  std::uint64_t admitted = 0;            ///< experts dispatched into it
  std::uint64_t overflow_evictions = 0;  ///< residents evicted to make room
  std::uint64_t moved_out = 0;           ///< residents re-dispatched to another pool
};

/// @brief Counters of a `tiered_cache`.
struct tiered_stats {
  std::array<tier_pool_stats, tier_count> pools{};
  std::uint64_t calls = 0;
  std::uint64_t accesses = 0;  ///< distinct experts looked up
  std::uint64_t misses = 0;    ///< ... found in no pool
  std::uint64_t dropped = 0;   ///< residents ranked past every threshold, dropped after execution
  std::uint64_t rejected = 0;  ///< dispatched experts a full pool of this call's experts refused

  /// Adds another cache's counters (e.g. to sum over layers).
  tiered_stats& operator+=(const tiered_stats& o) noexcept {
    for (std::size_t p = 0; p < tier_count; ++p) {
      pools[p].hits += o.pools[p].hits;
      pools[p].admitted += o.pools[p].admitted;
      pools[p].overflow_evictions += o.pools[p].overflow_evictions;
      pools[p].moved_out += o.pools[p].moved_out;
    }
    calls += o.calls;
    accesses += o.accesses;
    misses += o.misses;
    dropped += o.dropped;
    rejected += o.rejected;
    return *this;
  }
};

/// @brief One layer's F/C/S/E pools (see the file description). Move-only; not thread-safe.
template <eviction_policy Policy = frequency_rank>
class tiered_cache {
 public:
  /// @throws wisp::logic_error if `experts < 1`, a capacity or the tolerance is negative, or the
  ///   capacities add up to more than `experts`.
  tiered_cache(std::int32_t experts, tier_config config)
      : config_(config),
        frequency_(experts),
        protect_(experts),
        where_(static_cast<std::size_t>(experts), residency::miss) {
    std::int64_t total = 0;
    for (std::size_t p = 0; p < tier_count; ++p) {
      WISP_EXPECTS(config.capacity[p] >= 0, "tiered_cache: pool ", to_string(static_cast<tier>(p)),
                   " capacity ", config.capacity[p], " is negative");
      total += config.capacity[p];
    }
    WISP_EXPECTS(total <= experts, "tiered_cache: the pools hold ", total,
                 " experts, more than the ", experts, " of the layer");
    WISP_EXPECTS(config.tolerance >= 0, "tiered_cache: tolerance ", config.tolerance,
                 " is negative");
    std::int32_t threshold = config.tolerance;
    for (std::size_t p = 0; p < tier_count; ++p) {
      threshold += config.capacity[p];
      threshold_[p] = threshold;
      if (config.capacity[p] > 0) {
        pools_[p].emplace(key_layout{cache_scope::per_layer, 1, experts}, config.capacity[p],
                          make_policy());
      }
    }
  }
  tiered_cache(tiered_cache&&) noexcept = default;
  tiered_cache& operator=(tiered_cache&&) noexcept = default;
  tiered_cache(const tiered_cache&) = delete;
  tiered_cache& operator=(const tiered_cache&) = delete;

  /// @brief Looks up one layer call: each distinct expert of `experts` is counted in the
  /// frequency list and reported where it is. The returned span (valid until the next `lookup`)
  /// has one entry per distinct expert, in first-seen order (`call_experts()`). O(|experts| log E).
  /// @throws wisp::logic_error (nothing counted) on an expert id out of range.
  std::span<const residency> lookup(std::span<const std::int32_t> experts,
                                    const access_context& ctx) {
    for (const std::int32_t e : experts) {
      WISP_EXPECTS(e >= 0 && e < frequency_.experts(), "tiered_cache::lookup: expert ", e,
                   " is outside [0, ", frequency_.experts(), ")");
    }
    const std::span<const cache_key> distinct = protect_.assign(experts);
    call_.assign(distinct.begin(), distinct.end());
    found_.clear();
    pattern_ = {};
    ++stats_.calls;
    for (const std::int32_t e : call_) {
      frequency_.touch(e);
      const residency r = where_[static_cast<std::size_t>(e)];
      found_.push_back(r);
      ++stats_.accesses;
      if (r == residency::miss) {
        ++stats_.misses;
        continue;
      }
      const auto p = static_cast<std::size_t>(r);
      ++stats_.pools[p].hits;
      ++pattern_.hits[p];
      (void)pools_[p]->access(e, local(ctx));  // the pool's policy sees the hit
    }
    return found_;
  }

  /// @brief After the looked-up call executed: sends each of its experts to its pool by rank
  /// (moving it out of its old pool), evicting through the pool's policy on overflow, and drops
  /// those ranked past every threshold. O(call x (policy victim cost)).
  void dispatch(const access_context& ctx) {
    const access_context c = local(ctx);
    const protected_keys keep = protect_.view();
    for (const std::int32_t e : call_) {
      const std::optional<tier> target = target_of(frequency_.rank(e));
      const residency now = where_[static_cast<std::size_t>(e)];
      if (target && static_cast<residency>(*target) == now) {
        continue;
      }
      if (now != residency::miss) {
        pools_[static_cast<std::size_t>(now)]->invalidate(e);
        where_[static_cast<std::size_t>(e)] = residency::miss;
        ++(target ? stats_.pools[static_cast<std::size_t>(now)].moved_out : stats_.dropped);
      }
      if (!target) {
        continue;
      }
      const auto p = static_cast<std::size_t>(*target);
      const access_result r = pools_[p]->prefetch(e, c, keep);
      if (r.slot < 0) {
        ++stats_.rejected;
        continue;
      }
      if (r.evicted != no_key) {
        where_[static_cast<std::size_t>(r.evicted)] = residency::miss;
        ++stats_.pools[p].overflow_evictions;
      }
      where_[static_cast<std::size_t>(e)] = static_cast<residency>(*target);
      ++stats_.pools[p].admitted;
    }
  }

  /// The pool an expert of rank `rank` is dispatched to, or none (dropped after execution). O(1).
  [[nodiscard]] std::optional<tier> target_of(std::int32_t rank) const noexcept {
    for (std::size_t p = 0; p < tier_count; ++p) {
      if (config_.capacity[p] > 0 && rank < threshold_[p]) {
        return static_cast<tier>(p);
      }
    }
    return std::nullopt;
  }
  /// tau_p = S_F + ... + S_p + delta.
  [[nodiscard]] std::int32_t threshold(tier p) const noexcept {
    return threshold_[static_cast<std::size_t>(p)];
  }
  /// Where expert `e` is now. @throws wisp::logic_error if `e` is out of range.
  [[nodiscard]] residency where(std::int32_t e) const {
    (void)frequency_.rank(e);  // checks e
    return where_[static_cast<std::size_t>(e)];
  }
  /// The distinct experts of the last `lookup`, in first-seen order.
  [[nodiscard]] std::span<const std::int32_t> call_experts() const noexcept { return call_; }
  /// Hits per pool of the last `lookup`.
  [[nodiscard]] const hit_pattern& last_pattern() const noexcept { return pattern_; }
  [[nodiscard]] const frequency_list& frequencies() const noexcept { return frequency_; }
  [[nodiscard]] const tier_config& config() const noexcept { return config_; }
  [[nodiscard]] const tiered_stats& stats() const noexcept { return stats_; }
  /// Experts resident in pool `p` now.
  [[nodiscard]] std::int32_t size(tier p) const noexcept {
    const auto& pool = pools_[static_cast<std::size_t>(p)];
    return pool ? pool->size() : 0;
  }

 private:
  Policy make_policy() const {
    if constexpr (std::constructible_from<Policy, const frequency_list&>) {
      return Policy(frequency_);
    } else {
      return Policy{};
    }
  }
  // The pools are single-layer caches: their context is the caller's step and time on layer 0.
  static access_context local(const access_context& ctx) noexcept {
    return {.step = ctx.step, .layer = 0, .time = ctx.time};
  }

  tier_config config_;
  frequency_list frequency_;
  protect_set protect_;
  std::array<std::int32_t, tier_count> threshold_{};
  std::array<std::optional<slot_cache<Policy>>, tier_count> pools_;
  std::vector<residency> where_;
  std::vector<std::int32_t> call_;
  std::vector<residency> found_;
  hit_pattern pattern_;
  tiered_stats stats_;
};

}  // namespace wisp
