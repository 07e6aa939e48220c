// SPDX-License-Identifier: Apache-2.0
// Test support: brute-force reference caches (O(n) scans over resident keys computing each
// policy's documented order) and random stream generators, shared by the cache and sim tests.
#pragma once

#include "cache/learned_belady_reference.hpp"

#include <wisp/cache/policies.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace wisp::test {

/// One protected call through a brute-force cache holding `resident` (at most `capacity` keys):
/// a requested key that is resident hits; otherwise, when the cache is full, it evicts
/// `victim(protect)` (`protect`: the call's keys) first. `note(key)` runs after each access, so
/// that a reference records its history; `out` gets one result per key.
template <class Victim, class Note>
void replay_reference_call(std::set<cache_key>& resident, std::int32_t capacity,
                           const std::vector<cache_key>& keys, Victim&& victim, Note&& note,
                           std::vector<access_result>& out) {
  out.clear();
  const std::set<cache_key> protect(keys.begin(), keys.end());
  for (const cache_key key : keys) {
    access_result r;
    if (resident.count(key) == 0) {
      if (static_cast<std::int32_t>(resident.size()) == capacity) {
        r.evicted = victim(protect);
        resident.erase(r.evicted);
      }
      resident.insert(key);
    } else {
      r.hit = true;
    }
    note(key);
    out.push_back(r);
  }
}

/// One access of a stream, with the call it belongs to.
struct stream_access {
  std::uint32_t step = 0;
  std::int32_t layer = 0;
  cache_key key = 0;
  std::uint64_t time = 0;
};

/// One call: the keys requested together in (step, layer).
struct stream_call {
  std::uint32_t step = 0;
  std::int32_t layer = 0;
  std::vector<cache_key> keys;
};

/// Random multi-layer stream in global-scope keys: `steps` passes over `layers` layers, each call
/// requesting `k` distinct experts out of `experts` drawn from a skewed (Zipf-like) distribution
/// that differs per layer. With `per_layer_keys` the keys are expert ids instead.
inline std::vector<stream_call> random_calls(std::mt19937_64& rng, std::int32_t layers,
                                             std::int32_t experts, std::int32_t k,
                                             std::uint32_t steps, bool per_layer_keys = false) {
  std::vector<double> weights(static_cast<std::size_t>(experts));
  for (std::int32_t e = 0; e < experts; ++e) {
    weights[static_cast<std::size_t>(e)] = 1.0 / (1.0 + e);
  }
  std::vector<std::vector<std::int32_t>> perm(static_cast<std::size_t>(layers));
  for (auto& p : perm) {
    p.resize(static_cast<std::size_t>(experts));
    for (std::int32_t e = 0; e < experts; ++e) {
      p[static_cast<std::size_t>(e)] = e;
    }
    std::shuffle(p.begin(), p.end(), rng);
  }
  std::discrete_distribution<std::int32_t> pick(weights.begin(), weights.end());
  std::vector<stream_call> calls;
  for (std::uint32_t s = 0; s < steps; ++s) {
    for (std::int32_t l = 0; l < layers; ++l) {
      stream_call call{s, l, {}};
      while (static_cast<std::int32_t>(call.keys.size()) < k) {
        const std::int32_t e =
            perm[static_cast<std::size_t>(l)][static_cast<std::size_t>(pick(rng))];
        const cache_key key = per_layer_keys ? e : l * experts + e;
        if (std::find(call.keys.begin(), call.keys.end(), key) == call.keys.end()) {
          call.keys.push_back(key);
        }
      }
      calls.push_back(std::move(call));
    }
  }
  return calls;
}

/// Flattens calls into accesses with times 0, 1, 2, ...
inline std::vector<stream_access> flatten(const std::vector<stream_call>& calls) {
  std::vector<stream_access> out;
  std::uint64_t t = 0;
  for (const stream_call& c : calls) {
    for (const cache_key key : c.keys) {
      out.push_back({c.step, c.layer, key, t++});
    }
  }
  return out;
}

inline std::vector<cache_key> keys_of(const std::vector<stream_access>& accesses) {
  std::vector<cache_key> keys;
  keys.reserve(accesses.size());
  for (const auto& a : accesses) {
    keys.push_back(a.key);
  }
  return keys;
}

enum class rule { lru, fifo, lfu, lfu_history, lfru, fld, least_stale, learned_belady, belady };

template <class P>
constexpr rule rule_of() {
  if constexpr (std::is_same_v<P, lru>)
    return rule::lru;
  if constexpr (std::is_same_v<P, fifo>)
    return rule::fifo;
  if constexpr (std::is_same_v<P, lfu>)
    return rule::lfu;
  if constexpr (std::is_same_v<P, lfu_history>)
    return rule::lfu_history;
  if constexpr (std::is_same_v<P, lfru>)
    return rule::lfru;
  if constexpr (std::is_same_v<P, fld>)
    return rule::fld;
  if constexpr (std::is_same_v<P, least_stale>)
    return rule::least_stale;
  if constexpr (std::is_same_v<P, learned_belady>)
    return rule::learned_belady;
  if constexpr (std::is_same_v<P, belady>)
    return rule::belady;
}

/// Builds policy P; belady gets the future key sequence (and times, if a sub-stream).
template <class P>
P make_policy(const std::vector<cache_key>& future, const std::vector<std::uint64_t>& times = {}) {
  if constexpr (std::is_same_v<P, belady>) {
    return belady(future, times);
  } else {
    (void)future;
    (void)times;
    return P{};
  }
}

/// Brute-force cache: resident keys in a std::map, victim by a linear scan computing the
/// documented order. Calls (protection) follow slot_cache: a change of (step, layer) or an
/// explicit begin_call() starts a new call.
class reference_cache {
 public:
  reference_cache(rule r, key_layout layout, std::int32_t capacity,
                  std::vector<cache_key> future = {}, std::vector<std::uint64_t> times = {})
      : rule_(r),
        layout_(layout),
        capacity_(capacity),
        future_(std::move(future)),
        times_(std::move(times)),
        learned_(layout) {}

  struct entry {
    std::uint64_t inserted = 0, last = 0, count = 0, lfru_last = 0;
    std::uint32_t step = 0;
    std::int32_t layer = 0;
  };

  void begin_call(std::uint32_t step, std::int32_t layer) {
    protected_.clear();
    call_ = {step, layer};
  }
  void protect(cache_key key) { protected_.insert(key); }

  access_result access(cache_key key, const access_context& ctx) {
    if (!call_ || call_->first != ctx.step || call_->second != ctx.layer) {
      begin_call(ctx.step, ctx.layer);
    }
    protected_.insert(key);
    ++tick_;
    access_result r;
    ++history_[key];
    if (auto it = resident_.find(key); it != resident_.end()) {
      entry& e = it->second;
      ++e.count;
      e.last = tick_;
      e.step = ctx.step;
      e.lfru_last = ++clock_;
      ++pos_;
      r.hit = true;
      note_learned(key, ctx);
      return r;
    }
    if (static_cast<std::int32_t>(resident_.size()) == capacity_) {
      const cache_key v = victim(ctx);
      if (v == no_key) {
        throw std::runtime_error("reference: all protected");
      }
      resident_.erase(v);
      evicted_in_[v] = ctx.step;
      r.evicted = v;
    }
    if (auto it = evicted_in_.find(key); it != evicted_in_.end() && it->second == ctx.step) {
      r.collision = true;
    }
    entry e;
    e.inserted = e.last = tick_;
    e.count = 1;
    e.step = ctx.step;
    e.layer = layout_.layer_of(key, ctx.layer);
    e.lfru_last = ++clock_;
    resident_[key] = e;
    ++pos_;
    note_learned(key, ctx);
    return r;
  }

  std::size_t access_call(const std::vector<cache_key>& keys, const access_context& ctx,
                          std::vector<access_result>& out) {
    begin_call(ctx.step, ctx.layer);
    for (cache_key k : keys)
      protected_.insert(k);
    out.clear();
    std::size_t misses = 0;
    access_context each = ctx;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      each.time = ctx.time + i;
      out.push_back(access(keys[i], each));
      misses += out.back().hit ? 0 : 1;
    }
    return misses;
  }

  bool invalidate(cache_key key) { return resident_.erase(key) > 0; }
  [[nodiscard]] bool contains(cache_key key) const { return resident_.count(key) > 0; }
  [[nodiscard]] std::size_t size() const { return resident_.size(); }

 private:
  void note_learned(cache_key key, const access_context& ctx) {
    if (rule_ == rule::learned_belady) {
      learned_.access(key, ctx);
    }
  }

  // Order tuple: smallest evicts first.
  [[nodiscard]] std::uint64_t next_use(cache_key key) const {
    // position pos_ is the current (missing) access; resident keys are not at pos_.
    for (std::size_t j = pos_; j < future_.size(); ++j) {
      if (future_[j] == key) {
        return times_.empty() ? j : times_[j];
      }
    }
    return ~std::uint64_t{0};
  }

  [[nodiscard]] bool before(cache_key a, const entry& ea, cache_key b, const entry& eb,
                            const access_context& ctx) const {
    const std::int64_t L = layout_.layers;
    // Layer executions until the key's layer runs again after this call: the executing layer's
    // unrequested keys are next needed a whole pass later (distance L).
    auto dist = [&](const entry& e) { return ((e.layer - ctx.layer - 1) % L + L) % L + 1; };
    switch (rule_) {
      case rule::lru:
        return ea.last < eb.last;
      case rule::fifo:
        return ea.inserted < eb.inserted;
      case rule::lfu:
        return std::tie(ea.count, ea.last) < std::tie(eb.count, eb.last);
      case rule::lfu_history: {  // every access since the start, evicted or not
        const std::uint64_t ha = history_.at(a), hb = history_.at(b);
        return std::tie(ha, ea.last) < std::tie(hb, eb.last);
      }
      case rule::lfru: {
        const std::uint64_t lhs = ea.count * (clock_ - eb.lfru_last + 1);
        const std::uint64_t rhs = eb.count * (clock_ - ea.lfru_last + 1);
        return lhs < rhs || (lhs == rhs && ea.lfru_last < eb.lfru_last);
      }
      case rule::fld:
        return std::make_tuple(-dist(ea), ea.last) < std::make_tuple(-dist(eb), eb.last);
      case rule::least_stale: {
        const int ca = ea.step == ctx.step ? 1 : 0;
        const int cb = eb.step == ctx.step ? 1 : 0;
        return std::make_tuple(ca, -dist(ea), ea.last) < std::make_tuple(cb, -dist(eb), eb.last);
      }
      case rule::belady: {
        const std::uint64_t na = next_use(a), nb = next_use(b);
        return na > nb || (na == nb && a < b);
      }
      case rule::learned_belady:  // answered by `learned_`
        break;
    }
    return false;
  }

  [[nodiscard]] cache_key victim(const access_context& ctx) {
    if (rule_ == rule::learned_belady) {  // a brute force of its own, from the whole history
      std::set<cache_key> resident;
      for (const auto& [key, e] : resident_) {
        resident.insert(key);
      }
      return learned_.victim(ctx, resident, protected_);
    }
    cache_key best = no_key;
    const entry* best_entry = nullptr;
    for (const auto& [key, e] : resident_) {
      if (protected_.count(key) > 0)
        continue;
      if (best == no_key || before(key, e, best, *best_entry, ctx)) {
        best = key;
        best_entry = &e;
      }
    }
    return best;
  }

  rule rule_;
  key_layout layout_;
  std::int32_t capacity_;
  std::vector<cache_key> future_;
  std::vector<std::uint64_t> times_;
  std::map<cache_key, entry> resident_;
  std::map<cache_key, std::uint32_t> evicted_in_;
  std::map<cache_key, std::uint64_t> history_;  // accesses of each key since the start
  learned_belady_reference learned_;            // rule::learned_belady's own history
  std::set<cache_key> protected_;
  std::optional<std::pair<std::uint32_t, std::int32_t>> call_;
  std::uint64_t tick_ = 0, clock_ = 0;
  std::size_t pos_ = 0;
};

/// Snapshot of everything observable about a slot_cache, to check "state unchanged".
struct cache_snapshot {
  std::int32_t capacity = 0;
  std::vector<std::int32_t> slot_of;
  std::vector<std::int32_t> free;
  cache_stats stats;
  friend bool operator==(const cache_snapshot&, const cache_snapshot&) = default;
};

template <class P>
cache_snapshot snapshot(const slot_cache<P>& c) {
  cache_snapshot s;
  s.capacity = c.capacity();
  for (cache_key k = 0; k < c.key_space(); ++k)
    s.slot_of.push_back(c.slot_of(k));
  s.free.assign(c.free_slots().begin(), c.free_slots().end());
  s.stats = c.stats();
  return s;
}

/// gtest name generator for typed suites over policies.
struct policy_names {
  template <class P>
  static std::string GetName(int) {
    return std::string(policy_name<P>());
  }
};

/// What `drive_hooks` saw: the victims taken, and the first access whose victim differed from the
/// rank's (`mismatch`, -1 if none; the run stops there).
struct hook_run {
  std::size_t victims = 0;
  std::int64_t mismatch = -1;
  cache_key expected = no_key;
  cache_key got = no_key;
};

/// Drives a policy's hooks directly, without a cache, with `accesses` random keys of
/// `[0, key_space)`: the i-th access has context `next(i)`; a resident key is a hit; another, with
/// `capacity` keys resident, first takes a victim in context `ask(ctx)` under random protection,
/// which must be the unprotected resident key with the smallest `rank(key, asked)`, ties to the
/// least recently used. Exercises orders of hooks that no simulator makes.
template <class Policy, class Next, class Ask, class Rank>
hook_run drive_hooks(Policy& policy, std::int32_t key_space, std::size_t capacity,
                     std::mt19937_64& rng, std::uint64_t accesses, Next next, Ask ask, Rank rank) {
  protect_set protect(key_space);
  std::set<cache_key> resident;
  std::map<cache_key, std::uint64_t> last;
  std::uint64_t tick = 0;
  hook_run run;
  for (std::uint64_t i = 0; i < accesses; ++i) {
    const access_context ctx = next(i);
    const auto key = static_cast<cache_key>(rng() % static_cast<std::uint64_t>(key_space));
    if (resident.count(key) != 0) {
      policy.on_hit(key, ctx);
      last[key] = ++tick;
      continue;
    }
    if (resident.size() == capacity) {
      protect.clear();
      for (const cache_key k : resident) {
        if (rng() % 4 == 0) {
          protect.insert(k);
        }
      }
      const access_context asked = ask(ctx);
      cache_key expected = no_key;
      double best = 0.0;
      for (const cache_key k : resident) {
        if (protect.contains(k)) {
          continue;
        }
        const double r = rank(k, asked);
        if (expected == no_key || r < best || (r == best && last[k] < last[expected])) {
          expected = k;
          best = r;
        }
      }
      const cache_key got = policy.victim(asked, protect.view());
      if (got != expected) {
        run.mismatch = static_cast<std::int64_t>(i);
        run.expected = expected;
        run.got = got;
        return run;
      }
      if (got == no_key) {
        continue;  // every resident key protected: the access is skipped
      }
      ++run.victims;
      policy.on_erase(got);
      resident.erase(got);
    }
    policy.on_insert(key, ctx);
    resident.insert(key);
    last[key] = ++tick;
  }
  return run;
}

}  // namespace wisp::test
