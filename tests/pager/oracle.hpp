// SPDX-License-Identifier: Apache-2.0
// Test-only helpers for the pager suite: a brute-force model of one slot cache that applies each
// policy's eviction *rule* literally (O(resident) scans, no shared code with the policies), the
// per-policy factory, and a harness that runs a pager, two host stores (weights + a scales-like
// second buffer) and the model side by side, checking every invariant after each call.
#pragma once

#include <wisp/cache/policies.hpp>
#include <wisp/pager/host_expert_store.hpp>
#include <wisp/pager/pager.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

namespace wisp::test {

/// One prepare: `ids` is `[tokens x k]` of layer `layer`; `new_step` calls `begin_step()` first.
struct call {
  std::int32_t layer = 0;
  std::vector<std::int32_t> ids;
  std::int32_t k = 1;
  bool new_step = false;
  [[nodiscard]] std::int32_t tokens() const { return static_cast<std::int32_t>(ids.size()) / k; }
};

/// Distinct ids of a call in first-seen order: the order the pager documents for its accesses.
inline std::vector<std::int32_t> first_seen(const std::vector<std::int32_t>& ids) {
  std::vector<std::int32_t> out;
  for (const std::int32_t id : ids) {
    if (std::find(out.begin(), out.end(), id) == out.end()) {
      out.push_back(id);
    }
  }
  return out;
}

/// Brute-force model of one cache over keys [0, key_space) for policy `P`, following the rules
/// stated in the policies' documentation (and vLLM's LFRU formula), not their code.
template <class P>
class model {
 public:
  model(std::int32_t key_space, std::int32_t capacity, std::int32_t layers, std::int32_t experts,
        bool global, std::vector<std::int32_t> future)
      : cap_(capacity),
        layers_(layers),
        experts_(experts),
        global_(global),
        future_(std::move(future)),
        keys_(static_cast<std::size_t>(key_space)) {}

  struct key_state {
    bool resident = false;
    std::uint64_t inserted = 0;  // insertion sequence number
    std::uint64_t last = 0;      // clock of the last access
    std::uint64_t freq = 0;      // accesses since insertion
    std::uint32_t step = 0;      // step of the last access
  };

  /// One call: the keys in access order; returns {hits, evicted keys}.
  std::pair<std::int32_t, std::vector<std::int32_t>> access_call(
      const std::vector<std::int32_t>& keys, std::uint32_t step, std::int32_t layer) {
    std::set<std::int32_t> protect(keys.begin(), keys.end());
    std::int32_t hits = 0;
    std::vector<std::int32_t> evicted;
    for (const std::int32_t key : keys) {
      key_state& s = keys_[static_cast<std::size_t>(key)];
      if (s.resident) {
        ++hits;
        ++s.freq;
      } else {
        if (resident() == cap_) {
          const std::int32_t v = victim(protect, step, layer);
          EXPECT_GE(v, 0) << "model: no victim";
          keys_[static_cast<std::size_t>(v)].resident = false;
          evicted.push_back(v);
        }
        s = key_state{true, ++sequence_, 0, 1, 0};
      }
      s.last = ++clock_;
      s.step = step;
      ++position_;
    }
    return {hits, evicted};
  }

  void invalidate(std::int32_t key) { keys_[static_cast<std::size_t>(key)].resident = false; }
  [[nodiscard]] bool resident(std::int32_t key) const {
    return keys_[static_cast<std::size_t>(key)].resident;
  }
  [[nodiscard]] std::int32_t resident() const {
    return static_cast<std::int32_t>(
        std::count_if(keys_.begin(), keys_.end(), [](const key_state& s) { return s.resident; }));
  }

 private:
  // Layer executions until the key's layer runs again after this call (the executing layer: L).
  [[nodiscard]] std::int32_t layer_distance(std::int32_t key, std::int32_t layer) const {
    const std::int32_t key_layer = global_ ? key / experts_ : layer;
    return ((key_layer - layer - 1) % layers_ + layers_) % layers_ + 1;
  }
  [[nodiscard]] std::uint64_t next_use(std::int32_t key) const {
    for (std::size_t i = position_; i < future_.size(); ++i) {
      if (future_[i] == key) {
        return i;
      }
    }
    return std::numeric_limits<std::uint64_t>::max();
  }
  // true if a should be evicted before b
  [[nodiscard]] bool before(std::int32_t a, std::int32_t b, std::uint32_t step,
                            std::int32_t layer) const {
    const key_state& x = keys_[static_cast<std::size_t>(a)];
    const key_state& y = keys_[static_cast<std::size_t>(b)];
    if constexpr (std::is_same_v<P, lru>) {
      return x.last < y.last;
    } else if constexpr (std::is_same_v<P, fifo>) {
      return x.inserted < y.inserted;
    } else if constexpr (std::is_same_v<P, lfu>) {
      return x.freq != y.freq ? x.freq < y.freq : x.last < y.last;
    } else if constexpr (std::is_same_v<P, lfru>) {
      // freq / (clock - last + 1), exact: cross-multiply (values are small in tests).
      const std::uint64_t lhs = x.freq * (clock_ - y.last + 1);
      const std::uint64_t rhs = y.freq * (clock_ - x.last + 1);
      return lhs != rhs ? lhs < rhs : x.last < y.last;
    } else if constexpr (std::is_same_v<P, fld>) {
      const std::int32_t da = layer_distance(a, layer);
      const std::int32_t db = layer_distance(b, layer);
      return da != db ? da > db : x.last < y.last;
    } else if constexpr (std::is_same_v<P, least_stale>) {
      const bool stale_a = x.step != step;
      const bool stale_b = y.step != step;
      if (stale_a != stale_b) {
        return stale_a;
      }
      const std::int32_t da = layer_distance(a, layer);
      const std::int32_t db = layer_distance(b, layer);
      return da != db ? da > db : x.last < y.last;
    } else {
      static_assert(std::is_same_v<P, belady>);
      const std::uint64_t na = next_use(a);
      const std::uint64_t nb = next_use(b);
      return na != nb ? na > nb : a < b;
    }
  }
  [[nodiscard]] std::int32_t victim(const std::set<std::int32_t>& protect, std::uint32_t step,
                                    std::int32_t layer) const {
    std::int32_t best = -1;
    for (std::int32_t k = 0; k < static_cast<std::int32_t>(keys_.size()); ++k) {
      if (keys_[static_cast<std::size_t>(k)].resident && protect.count(k) == 0 &&
          (best < 0 || before(k, best, step, layer))) {
        best = k;
      }
    }
    return best;
  }

  std::int32_t cap_;
  std::int32_t layers_;
  std::int32_t experts_;
  bool global_;
  std::vector<std::int32_t> future_;  // belady: this cache's whole key sequence
  std::vector<key_state> keys_;
  std::uint64_t clock_ = 0;
  std::uint64_t sequence_ = 0;
  std::size_t position_ = 0;
};

/// Runs `calls` through a pager<P> with host stores and the brute-force model, checking after
/// every call: the map shows exactly the call's experts at distinct slots, every visible slot holds
/// its expert's bytes in both buffers, hits + misses == distinct experts, the copy plan is the
/// misses, and hits and residency agree with the model.
template <class P>
class harness {
 public:
  harness(std::int32_t layers, std::int32_t experts, std::int32_t top_k, std::int32_t capacity,
          std::vector<call> calls, cache_scope scope = cache_scope::per_layer)
      : layers_(layers),
        experts_(experts),
        global_(scope == cache_scope::global),
        calls_(std::move(calls)),
        pager_(pager_config{.layers = layers,
                            .experts = experts,
                            .top_k = top_k,
                            .capacity = capacity,
                            .scope = scope},
               [this](std::int32_t c) { return make_policy(c); }),
        weights_(experts * layers, capacity * (global_ ? 1 : layers), 64),
        scales_(experts * layers, capacity * (global_ ? 1 : layers), 8) {
    weights_.fill_pattern(1);
    scales_.fill_pattern(2);
    const std::int32_t caches = global_ ? 1 : layers;
    for (std::int32_t c = 0; c < caches; ++c) {
      models_.emplace_back(experts * (global_ ? layers : 1), capacity, layers, experts, global_,
                           future_of(c));
    }
  }

  /// Runs the next call and checks it; returns the pager's result.
  prepare_result next() {
    EXPECT_LT(cursor_, calls_.size());
    const call& c = calls_[cursor_++];
    if (c.new_step) {
      pager_.begin_step();
    }
    const prepare_result r = pager_.prepare(c.layer, c.ids, c.tokens(), c.k);
    check(c, r);
    return r;
  }
  /// Runs every remaining call.
  void run_all() {
    while (cursor_ < calls_.size()) {
      next();
    }
  }
  void invalidate(std::int32_t layer, std::int32_t expert) {
    pager_.invalidate(layer, expert);
    models_[global_ ? 0 : static_cast<std::size_t>(layer)].invalidate(key(layer, expert));
  }

  [[nodiscard]] wisp::pager<P>& pager() { return pager_; }
  [[nodiscard]] const std::vector<std::int32_t>& evicted() const { return last_evicted_; }
  [[nodiscard]] bool resident(std::int32_t layer, std::int32_t expert) const {
    return pager_.slot_of(layer, expert) >= 0;
  }
  [[nodiscard]] host_expert_store& weights() { return weights_; }

 private:
  [[nodiscard]] std::int32_t key(std::int32_t layer, std::int32_t expert) const {
    return global_ ? layer * experts_ + expert : expert;
  }
  // Store layout: masters [layers x experts] (each layer's experts have their own bytes); slots
  // of the global pool, or of layer l at [l * capacity, (l + 1) * capacity).
  [[nodiscard]] std::int32_t master_row(std::int32_t layer, std::int32_t expert) const {
    return layer * experts_ + expert;
  }
  [[nodiscard]] std::int32_t store_slot(std::int32_t layer, std::int32_t slot) const {
    return global_ ? slot : layer * (weights_.slots() / layers_) + slot;
  }

  std::vector<std::int32_t> future_of(std::int32_t cache) const {
    std::vector<std::int32_t> future;
    for (const call& c : calls_) {
      if (global_ || c.layer == cache) {
        for (const std::int32_t e : first_seen(c.ids)) {
          future.push_back(key(c.layer, e));
        }
      }
    }
    return future;
  }
  P make_policy(std::int32_t cache) const {
    if constexpr (std::is_same_v<P, belady>) {
      const std::vector<std::int32_t> f = future_of(cache);
      return belady(std::span<const cache_key>(f.data(), f.size()));
    } else {
      (void)cache;
      return P{};
    }
  }

  void check(const call& c, const prepare_result& r) {
    const std::vector<std::int32_t> distinct = first_seen(c.ids);
    ASSERT_EQ(r.layer, c.layer);
    ASSERT_EQ(r.expert_map.size(), static_cast<std::size_t>(experts_));
    EXPECT_EQ(std::vector<std::int32_t>(r.experts.begin(), r.experts.end()), distinct);
    EXPECT_EQ(r.hits + r.misses, static_cast<std::int32_t>(distinct.size()));
    EXPECT_EQ(r.copy_plan.size(), static_cast<std::size_t>(r.misses));
    // Apply the plan to both buffers (slots of layer l live at [l * cap, (l + 1) * cap)).
    std::vector<copy_op> plan;
    for (const copy_op& op : r.copy_plan) {
      EXPECT_NE(std::find(distinct.begin(), distinct.end(), op.expert), distinct.end());
      EXPECT_EQ(r.expert_map[static_cast<std::size_t>(op.expert)], op.slot);
      plan.push_back(copy_op{master_row(c.layer, op.expert), store_slot(c.layer, op.slot)});
    }
    weights_.apply(plan);
    scales_.apply(plan);
    // Exactly the call's experts are visible, at distinct slots holding their bytes.
    std::set<std::int32_t> slots;
    for (std::int32_t e = 0; e < experts_; ++e) {
      const std::int32_t slot = r.expert_map[static_cast<std::size_t>(e)];
      const bool requested = std::find(distinct.begin(), distinct.end(), e) != distinct.end();
      if (!requested) {
        EXPECT_EQ(slot, -1) << "expert " << e << " is visible but not requested";
        continue;
      }
      ASSERT_GE(slot, 0) << "requested expert " << e << " is not visible";
      EXPECT_TRUE(slots.insert(slot).second) << "slot " << slot << " shown twice";
      EXPECT_EQ(pager_.slot_of(c.layer, e), slot);
      EXPECT_TRUE(weights_.slot_holds(store_slot(c.layer, slot), master_row(c.layer, e)))
          << "slot " << slot << " does not hold expert " << e << "'s weights";
      EXPECT_TRUE(scales_.slot_holds(store_slot(c.layer, slot), master_row(c.layer, e)))
          << "slot " << slot << " does not hold expert " << e << "'s scales";
    }
    // Agreement with the brute-force rule.
    std::vector<std::int32_t> keys;
    for (const std::int32_t e : distinct) {
      keys.push_back(key(c.layer, e));
    }
    model<P>& m = models_[global_ ? 0 : static_cast<std::size_t>(c.layer)];
    const auto [hits, evicted] = m.access_call(keys, pager_.step(), c.layer);
    EXPECT_EQ(r.hits, hits) << policy_name<P>() << ": hits differ from the brute-force rule";
    last_evicted_ = evicted;
    const std::int32_t caches = global_ ? 1 : layers_;
    for (std::int32_t cache = 0; cache < caches; ++cache) {
      for (std::int32_t e = 0; e < experts_ * (global_ ? layers_ : 1); ++e) {
        const std::int32_t layer = global_ ? e / experts_ : cache;
        const std::int32_t expert = global_ ? e % experts_ : e;
        EXPECT_EQ(pager_.slot_of(layer, expert) >= 0,
                  models_[static_cast<std::size_t>(cache)].resident(e))
            << policy_name<P>() << ": residency of layer " << layer << " expert " << expert
            << " differs from the brute-force rule after call " << cursor_;
      }
    }
    EXPECT_TRUE(pager_.cache(c.layer).invariants_hold());
  }

  std::int32_t layers_;
  std::int32_t experts_;
  bool global_;
  std::vector<call> calls_;
  std::size_t cursor_ = 0;
  wisp::pager<P> pager_;
  host_expert_store weights_;
  host_expert_store scales_;
  std::vector<model<P>> models_;
  std::vector<std::int32_t> last_evicted_;
};

/// Readable names for typed suites.
struct policy_names {
  template <class P>
  static std::string GetName(int /*index*/) {
    return std::string(policy_name<P>());
  }
};

using all_policies = ::testing::Types<lru, fifo, lfu, lfru, fld, least_stale, belady>;

}  // namespace wisp::test
