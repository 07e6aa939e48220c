// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `learned_belady`: evicts the key that Belady's offline optimum would most likely not
/// have kept, as learned online from what the optimum did over the recent past.
///
/// The past is known, so the cache can compute what Belady would have done with it: OPTgen
/// (Jain and Lin, "Back to the future: leveraging Belady's algorithm for improved cache
/// replacement", ISCA 2016) replays each reuse interval into an occupancy vector and says whether
/// the optimum, holding as many keys as this cache, kept the key from one access to the next. Each
/// such verdict is a label. The policy learns from the labels twice:
///
/// 1. **A perceptron** (Jimenez and Teran, "Multiperspective reuse prediction", MICRO 2017) over
///    features of an access gives it a confidence `y`, and a *class* `clamp((y + 64) / 8, 0, 15)`.
///    The features, each a weight in one hashed table: the key; the key with its previous reuse
///    distance; the key with the number of the last 32 passes that used it; the key with the token
///    position (`access_context::position`); and, in global scope, the key with each expert the
///    same token routed to at the layer before (the co-activation signal, up to 8 experts). When an
///    access's label arrives, the weights of its features move towards it (only while the
///    perceptron was wrong or `|y| < threshold`), so they learn which keys, in which context, the
///    optimum keeps.
/// 2. **Per class, how long the optimum keeps keys**: counts of labels by class and reuse distance
///    (passes, in log-spaced bins up to `window`). For a resident key of class `c` whose layer has
///    run `m` times since its last use, `score = (kept + 1) / (all + 2)` over the labelled reuses
///    of class `c` at distances `> m`: the estimated probability that the optimum still holds it.
///
/// The victim: in each class, the least recently used unprotected key is a candidate; the one with
/// the smallest score goes, ties to the larger layer distance (`fld`'s order, global scope), then
/// to the least recently used. Scores are compared exactly (integer cross-products).
///
/// **Labels (OPTgen).** A *call* is a run of accesses with the same `(step, layer)`. Each call is
/// one slot of an occupancy vector that counts the keys the optimum holds then (the call's own
/// keys, and every interval it kept across the call). When a key comes back, the interval between
/// its two calls is *kept* when every call strictly inside holds fewer keys than the cache's
/// capacity; a kept interval adds one to each of them. An interval longer than the occupancy
/// vector (`(window + 1) x L` calls in global scope, `window + 1` per layer) is labelled not kept
/// as the vector drops its start. The capacity is the number of resident keys when the cache last
/// asked for a victim (the whole key space before the first eviction). OPTgen's hits over a whole
/// stream equal Belady's misses' complement under the simulator's call protection.
///
/// **Why it works.** Belady evicts the key used farthest in the future. Its per-access verdicts
/// are a function of reuse distance *relative to what else competes for the cache*, so they adapt
/// to the capacity and the trace without any horizon or weight to tune: the same parameters serve
/// every trace, scope and capacity (docs/policies.md shows the measurements). The counts decay
/// (halved every `count_half_life` passes, counted from the first one seen), so a shift of the
/// routing (a new request) is followed.
///
/// Cost, with `F` features per access (4, plus up to 8 in global scope) and `Q = 16` classes:
/// `on_insert`, `on_hit` O(F + r) where r is the reuse interval in calls (at most the occupancy
/// vector's length: a vectorised scan), `on_erase` O(1), `victim` O(Q + p) plus O(Q x bins) when
/// labels arrived since the last victim. Memory: O(key space) plus a weight table of
/// `clamp(64 x key space, 2^10, 2^16)` bytes. Allocation-free after `reset`. Not thread-safe.
/// @code
/// wisp::pager<wisp::learned_belady> pager({.layers = 26, .experts = 64, .top_k = 6,
///                                          .capacity = 416, .scope = wisp::cache_scope::global});
/// @endcode
#pragma once

#include <wisp/cache/detail/key_lists.hpp>
#include <wisp/cache/eviction_policy.hpp>
#include <wisp/cache/log_bins.hpp>
#include <wisp/core/error.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace wisp {

/// @brief Parameters of `learned_belady`. The defaults serve every trace, scope and capacity.
struct learned_belady_config {
  /// Passes over which OPTgen looks back: longer reuses are labelled not kept; also the span of
  /// the reuse-distance bins. In [1, 256].
  std::int32_t window = 64;
  /// The perceptron trains while `|y|` is below this (or its sign is wrong). In [1, 255].
  std::int32_t threshold = 16;
  /// Passes after which every label count is halved. In [1, 2^20].
  std::int32_t count_half_life = 256;

  /// @throws wisp::logic_error naming the field if a parameter is out of range.
  void validate() const {
    WISP_EXPECTS(window >= 1 && window <= 256, "learned_belady: window must be in [1, 256], got ",
                 window);
    WISP_EXPECTS(threshold >= 1 && threshold <= 255,
                 "learned_belady: threshold must be in [1, 255], got ", threshold);
    WISP_EXPECTS(count_half_life >= 1 && count_half_life <= (1 << 20),
                 "learned_belady: count_half_life must be in [1, 2^20], got ", count_half_life);
  }
};

/// @brief See the file description. Models `eviction_policy`.
class learned_belady {
 public:
  static constexpr std::string_view name = "learned_belady";
  /// Confidence classes.
  static constexpr std::int32_t classes = 16;
  /// Experts of the previous layer's call used as co-activation features (global scope).
  static constexpr std::int32_t coactivation_features = 8;
  /// Weights saturate in [weight_min, weight_max].
  static constexpr std::int32_t weight_min = -32;
  static constexpr std::int32_t weight_max = 31;

  /// @throws wisp::logic_error on an invalid config (see `learned_belady_config::validate`).
  explicit learned_belady(const learned_belady_config& config = {}) : config_(config) {
    config_.validate();
  }

  /// Forgets everything; sizes for `layout`. @throws std::bad_alloc
  void reset(const key_layout& layout) {
    layout_ = layout;
    const auto n = static_cast<std::size_t>(layout.size());
    global_ = layout.scope == cache_scope::global;
    coactivation_ = global_ && layout.experts <= 256;    // experts kept as bytes
    bins_ = bin_of(config_.window, config_.window) + 2;  // the last bin: beyond the window
    ring_ = static_cast<std::uint64_t>(config_.window + 1) *
            static_cast<std::uint64_t>(global_ ? layout.layers : 1);
    position_bits_ = std::clamp(static_cast<int>(std::bit_width(n * 64 - 1)), 10, 16);
    keys_.assign(n, key_record{});
    position_weights_.assign(std::size_t{1} << position_bits_, 0);
    coactivation_weights_.assign(coactivation_ ? n * static_cast<std::size_t>(layout.experts) : 0,
                                 0);
    occupancy_.assign(static_cast<std::size_t>(ring_), 0);
    kept_.assign(static_cast<std::size_t>(classes) * padded_bins, 0);
    seen_ = kept_;
    by_class_.reset(layout.size(), classes);
    by_age_.reset(layout.size(), 1);
    heads_.fill(head{});
    nonempty_ = 0;
    resident_ = 0;
    capacity_ = layout.size();
    tick_ = 0;
    call_ = 0;
    started_ = false;
    call_step_ = 0;
    call_layer_ = 0;
    previous_experts_ = 0;
    current_experts_ = 0;
  }
  void on_insert(cache_key key, const access_context& ctx) noexcept {
    ++resident_;
    access(key, ctx);
  }
  void on_hit(cache_key key, const access_context& ctx) noexcept { access(key, ctx); }
  void on_erase(cache_key key) noexcept {
    --resident_;
    const std::int32_t c = keys_[static_cast<std::size_t>(key)].klass;
    by_class_.remove(key);
    forget_head(c, key);
    if (by_class_.front(c) == no_key) {
      nonempty_ &= ~(1u << c);
    }
  }
  /// Among the least recently used unprotected key of each class, the one with the smallest
  /// score (then the larger layer distance, then the least recently used); `no_key` if every
  /// resident key is protected.
  [[nodiscard]] cache_key victim(const access_context& ctx, protected_keys is_protected) noexcept {
    capacity_ = resident_;
    cache_key best = no_key;
    std::uint64_t best_kept = 0;
    std::uint64_t best_seen = 1;
    std::int32_t best_distance = 0;
    std::uint64_t best_tick = 0;
    for (std::uint32_t mask = nonempty_; mask != 0; mask &= mask - 1) {
      const auto c = static_cast<std::int32_t>(std::countr_zero(mask));
      head h = head_of(c);
      if (is_protected(h.key)) [[unlikely]] {
        h.key = by_class_.first_unprotected(c, is_protected);
        if (h.key == no_key) {
          continue;
        }
        h.step = keys_[static_cast<std::size_t>(h.key)].step;
        h.tick = keys_[static_cast<std::size_t>(h.key)].tick;
      }
      const std::int32_t key_layer = global_ ? h.key / layout_.experts : ctx.layer;
      const std::int64_t age = std::max<std::int64_t>(
          std::int64_t{ctx.step} - std::int64_t{h.step} - (key_layer > ctx.layer ? 1 : 0), 0);
      const std::size_t at =
          static_cast<std::size_t>(c) * padded_bins + static_cast<std::size_t>(bin_of(age + 1));
      const std::uint64_t kept = std::uint64_t{kept_[at]} + 1;
      const std::uint64_t seen = std::uint64_t{seen_[at]} + 2;
      const std::int32_t distance = global_ ? layer_distance(key_layer, ctx.layer) : 0;
      if (best == no_key || kept * best_seen < best_kept * seen ||
          (kept * best_seen == best_kept * seen &&
           (distance > best_distance || (distance == best_distance && h.tick < best_tick)))) {
        best = h.key;
        best_kept = kept;
        best_seen = seen;
        best_distance = distance;
        best_tick = h.tick;
      }
    }
    return best;
  }

  /// The class `key` got at its last access (0 before any), in [0, classes).
  [[nodiscard]] std::int32_t class_of(cache_key key) const noexcept {
    return keys_[static_cast<std::size_t>(key)].klass;
  }
  /// The reuse-distance bin of a reuse `distance` passes long, in [0, bins): `distance` up to 4,
  /// then two bins per power of two, the last bin for distances beyond `window`.
  [[nodiscard]] std::int32_t bin_of(std::int64_t distance) const noexcept {
    return bin_of(distance, config_.window);
  }
  [[nodiscard]] const learned_belady_config& config() const noexcept { return config_; }

 private:
  static constexpr std::size_t padded_bins = 32;   // >= bins for any window <= 256
  static constexpr std::uint8_t seen_flag = 1;     // the key was accessed before
  static constexpr std::uint8_t pending_flag = 2;  // its last access awaits its label
  // Weights of a key record: its bias, one per reuse-distance code, one per recent-pass code.
  static constexpr std::size_t reuse_weights = 1;    // [1, 20): codes 0..bins (bins = never)
  static constexpr std::size_t recent_weights = 20;  // [20, 27): bit_width(passes), 0..6

  // Everything about one key that one access reads and writes, in one cache line.
  struct alignas(64) key_record {
    std::uint64_t tick = 0;          // last access of any kind (recency)
    std::uint32_t step = 0;          // pass of the last access (the first of its call)
    std::uint32_t call = 0;          // its call, modulo 2^32
    std::uint32_t usage = 0;         // bit i: used i passes before the last access
    std::uint16_t position = 0;      // index of its position weight
    std::int16_t confidence = 0;     // its y
    std::uint8_t reuse = 0;          // its reuse-distance code
    std::uint8_t recent = 0;         // its recent-passes code
    std::uint8_t coactivations = 0;  // its co-activation features
    std::uint8_t klass = 0;          // its class
    std::uint8_t flags = 0;
    std::array<std::uint8_t, coactivation_features> experts{};  // the previous layer's experts
    std::array<std::int8_t, 27> weights{};
  };
  static_assert(sizeof(key_record) == 64);

  // A class's least recently used key as last looked up (no_key: look again).
  struct head {
    cache_key key = no_key;
    std::uint32_t step = 0;
    std::uint64_t tick = 0;
  };

  [[nodiscard]] static std::int32_t bin_of(std::int64_t distance, std::int32_t window) noexcept {
    if (distance > window) {
      return half_octave_bin(static_cast<std::uint64_t>(window)) + 1;
    }
    return half_octave_bin(static_cast<std::uint64_t>(std::max<std::int64_t>(distance, 0)));
  }
  // Layers from `layer` forward to `key_layer`'s next execution, in [1, layers] (global scope).
  [[nodiscard]] std::int32_t layer_distance(std::int32_t key_layer,
                                            std::int32_t layer) const noexcept {
    const std::int32_t d = key_layer - layer - 1;  // in [-layers, layers - 2]
    return (d < 0 ? d + layout_.layers : d) + 1;
  }
  // The position weight of (key, position): a splitmix64 finaliser of both, top bits.
  [[nodiscard]] std::uint16_t position_index(cache_key key, std::uint32_t position) const noexcept {
    std::uint64_t x =
        (static_cast<std::uint64_t>(key) << 32) ^ std::min<std::uint32_t>(position, 1023);
    x ^= x >> 31;
    x *= 0x7FB5D329728EA185ull;
    x ^= x >> 27;
    x *= 0x81DADEF4BC2DD44Dull;
    x ^= x >> 33;
    return static_cast<std::uint16_t>(x >> (64 - position_bits_));
  }
  static void prefetch(const void* p) noexcept {
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(p);
#else
    (void)p;
#endif
  }
  head head_of(std::int32_t c) noexcept {
    head& h = heads_[static_cast<std::size_t>(c)];
    const cache_key front = by_class_.front(c);
    if (h.key != front) {
      const key_record& r = keys_[static_cast<std::size_t>(front)];
      h = head{front, r.step, r.tick};
    }
    return h;
  }
  void forget_head(std::int32_t c, cache_key key) noexcept {
    head& h = heads_[static_cast<std::size_t>(c)];
    h.key = h.key == key ? no_key : h.key;
  }

  // Calls `f(weight&)` for every feature weight of key k's last access.
  template <class F>
  void for_each_weight(std::size_t k, F&& f) noexcept {
    key_record& r = keys_[k];
    f(r.weights[0]);
    f(r.weights[reuse_weights + r.reuse]);
    f(r.weights[recent_weights + r.recent]);
    f(position_weights_[r.position]);
    if (r.coactivations != 0) {
      std::int8_t* row =
          coactivation_weights_.data() + k * static_cast<std::size_t>(layout_.experts);
      for (std::uint8_t i = 0; i < r.coactivations; ++i) {
        f(row[r.experts[i]]);
      }
    }
  }

  // The label of key k's pending access: train the perceptron, count it by class and distance.
  void label(std::size_t k, bool kept, std::int32_t bin) noexcept {
    key_record& r = keys_[k];
    r.flags &= static_cast<std::uint8_t>(~pending_flag);
    const std::int32_t y = r.confidence;
    if ((y >= 0) != kept || (y < 0 ? -y : y) < config_.threshold) {
      for_each_weight(k, [kept](std::int8_t& w) {
        w = static_cast<std::int8_t>(kept ? std::min<std::int32_t>(w + 1, weight_max)
                                          : std::max<std::int32_t>(w - 1, weight_min));
      });
    }
    // Counts over every bin <= `bin`: a label at distance d counts for every age below d.
    const std::size_t row = static_cast<std::size_t>(r.klass) * padded_bins;
    count(seen_.data() + row, bin, 1u);
    count(kept_.data() + row, bin, kept ? 1u : 0u);
  }
  // Adds `add` to counts [0, bin]: one pass over the whole row, branch-free (vectorised).
  static void count(std::uint32_t* row, std::int32_t bin, std::uint32_t add) noexcept {
    for (std::size_t b = 0; b < padded_bins; ++b) {
      row[b] += static_cast<std::int32_t>(b) <= bin ? add : 0u;
    }
  }

  void begin_call(const access_context& ctx) noexcept {
    const bool next_layer = started_ && ctx.step == call_step_ && ctx.layer == call_layer_ + 1;
    first_step_ = started_ ? first_step_ : ctx.step;
    if (started_ && ctx.step > call_step_) {
      // Passes counted from the first one this policy saw: the same halvings whether a caller
      // numbers passes from 0 (the simulator) or from 1 (the pager after begin_step).
      const auto period = static_cast<std::uint32_t>(config_.count_half_life);
      const std::uint32_t halvings =
          (ctx.step - first_step_) / period - (call_step_ - first_step_) / period;
      if (halvings > 0) {
        const std::uint32_t shift = std::min<std::uint32_t>(halvings, 31);
        for (std::size_t i = 0; i < kept_.size(); ++i) {
          kept_[i] >>= shift;
          seen_[i] >>= shift;
        }
      }
    }
    call_ += started_ ? 1u : 0u;
    started_ = true;
    call_step_ = ctx.step;
    call_layer_ = ctx.layer;
    occupancy_[static_cast<std::size_t>(call_ % ring_)] = 0;
    // Accesses whose key has not come back within the occupancy vector: not kept.
    const auto now = static_cast<std::uint32_t>(call_);
    for (cache_key key = by_age_.front(0); key != no_key; key = by_age_.front(0)) {
      const auto k = static_cast<std::size_t>(key);
      if (now - keys_[k].call <= ring_) {
        break;
      }
      if ((keys_[k].flags & pending_flag) != 0) {
        label(k, false, static_cast<std::int32_t>(bins_) - 1);
      }
      by_age_.remove(key);
    }
    previous_experts_ = next_layer ? current_experts_ : 0;
    if (next_layer) {
      previous_ = current_;
    }
    current_experts_ = 0;
  }

  // OPTgen: was the interval between the call `back` calls ago and this one (both excluded) kept?
  [[nodiscard]] bool keep_interval(std::uint32_t back) noexcept {
    const std::size_t count = back - 1;
    const auto start = static_cast<std::size_t>((call_ - back + 1) % ring_);
    const std::size_t first = std::min(count, static_cast<std::size_t>(ring_) - start);
    std::uint32_t* const occ = occupancy_.data();
    // An occupancy counts keys, so it is below 2^31 and compares as a signed integer, which SSE2
    // compares 4 at a time.
    const std::int32_t cap = capacity_;
    // Segments [start, start + first) and [0, count - first): stop at the first full call, looking
    // 16 calls at a time (a fixed count the compiler vectorises).
    const auto full = [occ, cap](std::size_t from, std::size_t to) {
      std::size_t i = from;
      for (; i + 16 <= to; i += 16) {
        std::int32_t any = 0;
        for (std::size_t j = 0; j < 16; ++j) {
          any |= static_cast<std::int32_t>(occ[i + j]) >= cap ? 1 : 0;
        }
        if (any != 0) {
          return true;
        }
      }
      std::int32_t any = 0;
      for (; i < to; ++i) {
        any |= static_cast<std::int32_t>(occ[i]) >= cap ? 1 : 0;
      }
      return any != 0;
    };
    if (full(start, start + first) || full(0, count - first)) {
      return false;
    }
    for (std::size_t i = start; i < start + first; ++i) {
      ++occ[i];
    }
    for (std::size_t i = 0; i < count - first; ++i) {
      ++occ[i];
    }
    return true;
  }

  void access(cache_key key, const access_context& ctx) noexcept {
    if (!started_ || ctx.step != call_step_ || ctx.layer != call_layer_) [[unlikely]] {
      begin_call(ctx);
    }
    const auto k = static_cast<std::size_t>(key);
    key_record& r = keys_[k];
    // The two position weights this access reads (the pending access's and its own) are the
    // likeliest cache misses: start loading them now.
    const std::uint16_t position = position_index(key, ctx.position);
    prefetch(&position_weights_[position]);
    prefetch(&position_weights_[r.position]);
    r.tick = ++tick_;
    const std::int32_t old_class = r.klass;
    forget_head(old_class, key);
    const bool seen = (r.flags & seen_flag) != 0;
    const std::uint32_t back = static_cast<std::uint32_t>(call_) - r.call;
    if (seen && back == 0) [[unlikely]] {  // again in the same call
      move_to_class(key, old_class, old_class);
      return;
    }
    ++occupancy_[static_cast<std::size_t>(call_ % ring_)];
    const std::int64_t distance = seen ? std::int64_t{ctx.step} - std::int64_t{r.step} : -1;
    if ((r.flags & pending_flag) != 0) {
      label(k, keep_interval(back), bin_of(distance));
    }
    // This access's features, confidence and class.
    r.usage = distance < 0 || distance >= 32 ? 1u : (r.usage << distance) | 1u;
    r.reuse = static_cast<std::uint8_t>(distance < 0 ? static_cast<std::int32_t>(bins_)
                                                     : bin_of(distance));
    r.recent = static_cast<std::uint8_t>(
        std::bit_width(static_cast<std::uint32_t>(std::popcount(r.usage))));
    r.position = position;
    r.coactivations = 0;
    if (coactivation_) {
      for (std::int32_t i = 0; i < previous_experts_; ++i) {
        r.experts[static_cast<std::size_t>(i)] = previous_[static_cast<std::size_t>(i)];
      }
      r.coactivations = static_cast<std::uint8_t>(previous_experts_);
      if (current_experts_ < coactivation_features) {
        current_[static_cast<std::size_t>(current_experts_++)] =
            static_cast<std::uint8_t>(key % layout_.experts);
      }
    }
    std::int32_t y = 0;
    for_each_weight(k, [&y](const std::int8_t& w) { y += w; });
    const std::int32_t c = std::clamp((y + 64) / 8, 0, classes - 1);
    r.confidence = static_cast<std::int16_t>(y);
    r.klass = static_cast<std::uint8_t>(c);
    r.flags = seen_flag | pending_flag;
    r.step = ctx.step;
    r.call = static_cast<std::uint32_t>(call_);
    by_age_.move_to_back(0, key);
    move_to_class(key, old_class, c);
  }

  void move_to_class(cache_key key, std::int32_t from, std::int32_t to) noexcept {
    by_class_.move_to_back(to, key);  // also when `key` was in no list (an insertion)
    if (from != to && by_class_.front(from) == no_key) {
      nonempty_ &= ~(1u << from);
    }
    nonempty_ |= 1u << to;
  }

  learned_belady_config config_;
  key_layout layout_;
  bool global_ = false;
  bool coactivation_ = false;  // global scope with at most 256 experts per layer
  std::size_t bins_ = 0;       // reuse-distance bins, the last one beyond the window
  std::uint64_t ring_ = 1;     // calls in the occupancy vector
  int position_bits_ = 10;
  std::vector<key_record> keys_;
  std::vector<std::int8_t> position_weights_;      // [2^position_bits_], hashed (key, position)
  std::vector<std::int8_t> coactivation_weights_;  // [key x experts] (global scope)
  std::vector<std::uint32_t> occupancy_;           // [ring_]: keys the optimum holds per call
  // [classes x padded_bins]: labels (kept / all) at distances in the bin or beyond, per class.
  std::vector<std::uint32_t> kept_, seen_;
  detail::key_lists by_class_;  // resident keys per class, least recent first
  detail::key_lists by_age_;    // keys with a pending access, oldest first
  std::array<head, classes> heads_{};
  std::uint32_t nonempty_ = 0;  // classes with a resident key
  std::int32_t resident_ = 0;
  std::int32_t capacity_ = 1;  // the optimum's capacity (see the file description)
  std::uint64_t tick_ = 0;
  std::uint64_t call_ = 0;
  bool started_ = false;
  std::uint32_t call_step_ = 0;
  std::uint32_t first_step_ = 0;  // step of the first access since reset
  std::int32_t call_layer_ = 0;
  std::array<std::uint8_t, coactivation_features> previous_{};  // experts of the previous layer
  std::array<std::uint8_t, coactivation_features> current_{};   // experts of this call
  std::int32_t previous_experts_ = 0;
  std::int32_t current_experts_ = 0;
};
static_assert(eviction_policy<learned_belady>);

}  // namespace wisp
