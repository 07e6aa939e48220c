// SPDX-License-Identifier: Apache-2.0
// Test support: a brute-force `learned_belady`. It keeps every event it is told (accesses, and
// victim requests with the number of resident keys then) and answers each victim request by
// replaying the whole history from scratch with plain containers: OPTgen over every call's
// occupancy (no ring, no window but the rule's), expiries found by scanning every key, each
// key's recent passes counted from its list of uses, the class counts summed afresh, the
// candidates found by scanning the resident keys. O(history x (keys + interval)) per decision:
// for small streams only.
#pragma once

#include <wisp/cache/learned_belady.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <map>
#include <set>
#include <tuple>
#include <vector>

namespace wisp::test {

class learned_belady_reference {
 public:
  explicit learned_belady_reference(key_layout layout, learned_belady_config config = {})
      : layout_(layout), config_(config) {}

  /// Records an access (after the cache made it).
  void access(cache_key key, const access_context& ctx) { events_.push_back({false, key, ctx, 0}); }

  /// The victim among `resident` minus `protect`, recomputed from every event so far; the
  /// request itself is recorded (it sets the capacity the optimum is simulated with).
  cache_key victim(const access_context& ctx, const std::set<cache_key>& resident,
                   const std::set<cache_key>& protect) {
    events_.push_back({true, no_key, ctx, static_cast<std::int32_t>(resident.size())});
    const state s = replay();
    cache_key best = no_key;
    std::uint64_t best_kept = 0, best_seen = 1;
    std::int64_t best_distance = 0;
    for (std::int32_t c = 0; c < learned_belady::classes; ++c) {
      // The class's candidate: its least recently used unprotected resident key.
      cache_key candidate = no_key;
      for (const cache_key key : resident) {
        if (protect.count(key) == 0 && s.keys[static_cast<std::size_t>(key)].klass == c &&
            (candidate == no_key || s.keys[static_cast<std::size_t>(key)].tick <
                                        s.keys[static_cast<std::size_t>(candidate)].tick)) {
          candidate = key;
        }
      }
      if (candidate == no_key) {
        continue;
      }
      const key_state& k = s.keys[static_cast<std::size_t>(candidate)];
      const bool later_layer = global() && candidate / layout_.experts > ctx.layer;
      const std::int64_t age =
          std::max<std::int64_t>(std::int64_t{ctx.step} - k.step - (later_layer ? 1 : 0), 0);
      const auto b = static_cast<std::size_t>(bin(age + 1));
      const std::uint64_t kept = s.kept[static_cast<std::size_t>(c)][b] + 1;
      const std::uint64_t seen = s.seen[static_cast<std::size_t>(c)][b] + 2;
      const std::int64_t L = layout_.layers;
      const std::int64_t distance =
          global() ? ((candidate / layout_.experts - ctx.layer - 1) % L + L) % L + 1 : 0;
      const bool better =
          candidate != no_key &&
          (best == no_key || kept * best_seen < best_kept * seen ||
           (kept * best_seen == best_kept * seen &&
            (distance > best_distance ||
             (distance == best_distance && k.tick < s.keys[static_cast<std::size_t>(best)].tick))));
      if (better) {
        best = candidate;
        best_kept = kept;
        best_seen = seen;
        best_distance = distance;
      }
    }
    return best;
  }

 private:
  struct event {
    bool victim_request;
    cache_key key;
    access_context ctx;
    std::int32_t resident;  // of a victim request
  };
  // A weight: (table, index, value): the key's bias (0, key, 0), reuse code (1, key, code),
  // recent-passes code (2, key, code), position (3, hashed index, 0), co-activation (4, key,
  // expert).
  using weight_id = std::tuple<int, std::int64_t, std::int64_t>;
  struct key_state {
    std::int64_t step = -1;   // pass of the last (first-in-its-call) access
    std::uint64_t call = 0;   // call of that access
    std::uint64_t tick = 0;   // index of the last access of any kind
    std::uint64_t order = 0;  // index of the last first-in-its-call access
    std::int32_t klass = 0;
    std::int32_t confidence = 0;  // y when the class was given
    bool pending = false;
    std::vector<weight_id> features;
  };
  struct state {
    std::vector<key_state> keys;  // [key]
    // [class][bin]: labels (kept / all) at a distance in that bin or a later one, halved with
    // the others every count_half_life passes.
    std::vector<std::vector<std::uint64_t>> kept, seen;
  };

  [[nodiscard]] bool global() const { return layout_.scope == cache_scope::global; }
  [[nodiscard]] std::int64_t ring() const {
    return std::int64_t{config_.window + 1} * (global() ? layout_.layers : 1);
  }
  // Bins: 0..4 for distances 0..4; then lower edges 5, 7, 9, 13, 17, 25, ... (two per power of
  // two); one more bin for distances beyond the window.
  [[nodiscard]] std::int32_t bin(std::int64_t d) const {
    if (d > config_.window) {
      return bin(config_.window) + 1;
    }
    if (d <= 4) {
      return static_cast<std::int32_t>(std::max<std::int64_t>(d, 0));
    }
    std::int32_t b = 4;
    for (std::int64_t p = 4; p + 1 <= d; p *= 2) {
      b += p + 1 <= d ? 1 : 0;
      b += p + p / 2 + 1 <= d ? 1 : 0;
    }
    return b;
  }
  [[nodiscard]] std::int32_t bins() const { return bin(config_.window) + 2; }
  // The shared position weights: (key, min(position, 1023)) hashed into a table of
  // clamp(64 x keys, 2^10, 2^16) weights (a splitmix64 finaliser, top bits).
  [[nodiscard]] std::int64_t position_weight(cache_key key, std::uint32_t position) const {
    const auto n = static_cast<std::uint64_t>(layout_.size());
    const int bits = std::clamp(static_cast<int>(std::bit_width(n * 64 - 1)), 10, 16);
    std::uint64_t x =
        (static_cast<std::uint64_t>(key) << 32) ^ std::min<std::uint32_t>(position, 1023);
    x ^= x >> 31;
    x *= 0x7FB5D329728EA185ull;
    x ^= x >> 27;
    x *= 0x81DADEF4BC2DD44Dull;
    x ^= x >> 33;
    return static_cast<std::int64_t>(x >> (64 - bits));
  }

  [[nodiscard]] state replay() const {
    state s;
    s.keys.assign(static_cast<std::size_t>(layout_.size()), key_state{});
    s.kept.assign(learned_belady::classes,
                  std::vector<std::uint64_t>(static_cast<std::size_t>(bins()), 0));
    s.seen = s.kept;
    // Every weight, flattened: the tables one after the other.
    const std::int64_t n = layout_.size();
    const std::int64_t offsets[] = {0, n, n + 32 * n, n + 40 * n, n + 40 * n + (1 << 16)};
    std::vector<std::int32_t> weight_table(
        static_cast<std::size_t>(offsets[4] + n * layout_.experts), 0);
    auto weight = [&](const weight_id& f) -> std::int32_t& {
      const auto [table, index, value] = f;
      const std::int64_t stride = table == 1   ? 32
                                  : table == 2 ? 8
                                  : table == 4 ? layout_.experts
                                               : 1;
      return weight_table[static_cast<std::size_t>(offsets[table] + index * stride + value)];
    };
    std::vector<std::int64_t> occupancy;  // [call]: keys the optimum holds then
    std::int64_t capacity = layout_.size();
    std::uint64_t call = 0, tick = 0;
    bool started = false;
    access_context current{};
    std::vector<std::int32_t> previous_experts, current_experts;
    std::map<cache_key, std::vector<std::int64_t>> uses;  // every key's passes of use

    auto label = [&](key_state& k, bool kept, std::int32_t b) {
      k.pending = false;
      const std::int32_t y = k.confidence;
      if ((y >= 0) != kept || std::abs(y) < config_.threshold) {
        for (const weight_id& f : k.features) {
          std::int32_t& w = weight(f);
          w = kept ? std::min(w + 1, learned_belady::weight_max)
                   : std::max(w - 1, learned_belady::weight_min);
        }
      }
      for (std::int32_t i = 0; i <= b; ++i) {
        ++s.seen[static_cast<std::size_t>(k.klass)][static_cast<std::size_t>(i)];
        s.kept[static_cast<std::size_t>(k.klass)][static_cast<std::size_t>(i)] += kept ? 1 : 0;
      }
    };

    for (const event& e : events_) {
      if (e.victim_request) {
        capacity = e.resident;
        continue;
      }
      const access_context& ctx = e.ctx;
      if (!started || ctx.step != current.step || ctx.layer != current.layer) {
        if (started && ctx.step > current.step) {
          const std::uint32_t h = static_cast<std::uint32_t>(config_.count_half_life);
          const std::uint32_t first = events_.front().ctx.step;  // passes count from the first
          const std::uint32_t shift =
              std::min<std::uint32_t>((ctx.step - first) / h - (current.step - first) / h, 31);
          for (auto* table : {&s.kept, &s.seen}) {
            for (auto& row : *table) {
              for (auto& v : row) {
                v >>= shift;
              }
            }
          }
        }
        const bool next_layer =
            started && ctx.step == current.step && ctx.layer == current.layer + 1;
        call += started ? 1 : 0;
        started = true;
        occupancy.push_back(0);
        current = ctx;
        // Pending accesses now out of the occupancy vector, oldest first: not kept.
        std::vector<std::pair<std::uint64_t, cache_key>> expired;
        for (cache_key key = 0; key < layout_.size(); ++key) {
          const key_state& k = s.keys[static_cast<std::size_t>(key)];
          if (k.pending &&
              static_cast<std::int64_t>(k.call) + ring() < static_cast<std::int64_t>(call)) {
            expired.push_back({k.order, key});
          }
        }
        std::sort(expired.begin(), expired.end());
        for (const auto& [order, key] : expired) {
          label(s.keys[static_cast<std::size_t>(key)], false, bins() - 1);
        }
        previous_experts = next_layer ? current_experts : std::vector<std::int32_t>{};
        current_experts.clear();
      }
      key_state& k = s.keys[static_cast<std::size_t>(e.key)];
      k.tick = ++tick;
      if (k.step >= 0 && k.call == call) {
        continue;  // again in the same call
      }
      ++occupancy[call];
      const std::int64_t distance = k.step < 0 ? -1 : std::int64_t{ctx.step} - k.step;
      if (k.pending) {
        bool fits = true;
        for (std::uint64_t x = k.call + 1; x < call; ++x) {
          fits = fits && occupancy[x] < capacity;
        }
        if (fits) {
          for (std::uint64_t x = k.call + 1; x < call; ++x) {
            ++occupancy[x];
          }
        }
        label(k, fits, bin(distance));
      }
      uses[e.key].push_back(ctx.step);
      std::set<std::int64_t> recent;  // passes in (step - 32, step] that used the key
      for (const std::int64_t step : uses[e.key]) {
        if (step > std::int64_t{ctx.step} - 32) {
          recent.insert(step);
        }
      }
      k.features = {{0, e.key, 0},
                    {1, e.key, distance < 0 ? bins() : bin(distance)},
                    {2, e.key, std::bit_width(recent.size())},
                    {3, position_weight(e.key, ctx.position), 0}};
      if (global()) {
        for (const std::int32_t expert : previous_experts) {
          k.features.push_back({4, e.key, expert});
        }
        if (current_experts.size() < learned_belady::coactivation_features) {
          current_experts.push_back(e.key % layout_.experts);
        }
      }
      std::int32_t y = 0;
      for (const weight_id& f : k.features) {
        y += weight(f);
      }
      k.klass = std::clamp((y + 64) / 8, 0, learned_belady::classes - 1);
      k.confidence = y;
      k.pending = true;
      k.step = ctx.step;
      k.call = call;
      k.order = tick;
    }
    return s;
  }

  key_layout layout_;
  learned_belady_config config_;
  std::vector<event> events_;
};

}  // namespace wisp::test
