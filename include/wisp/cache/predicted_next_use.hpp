// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `predicted_next_use`: a prediction-aware policy. Evicts the resident key whose predicted
/// next use is farthest away (Belady's rule with a prediction in place of the future).
///
/// Let `c` be the layer now executing and `d(k)` the layer distance of `least_stale.hpp` (layer
/// executions until key `k`'s layer runs again after the current call, in `[1, L]`). If `k`'s
/// expert is routed at its layer's next execution with probability `p(k)`, and independently at
/// later ones with the same probability, its expected next use is
///
///     D(k) = d(k) + L x (1 / p(k) - 1)          layer executions from now
///
/// and the victim is the unprotected resident key with the largest `D` (ties: least recently
/// used; `p = 0` gives `D = inf`). `p(k)` comes from:
///
/// - **the routing predictor**, for a key whose layer is still ahead in the current pass and
///   within `lookahead` layers of the next one to run, when a predictor (any `routing_predictor`:
///   `coactivation_predictor`, `frequency_predictor`, a user's) and the
///   current `routing_pass` are attached (global scope): the predictor's estimate given the
///   experts routed so far in this pass;
/// - **the key's decayed routing rate** otherwise: its `decayed_frequency` count over the decayed
///   count of passes, with the same half-life (in passes).
///
/// In per-layer scope `d` is the same for every key of a cache, so the order is the decayed rate's
/// and the victims are `decayed_frequency`'s. In global scope the rule weighs layer position
/// (as `fld` does) against how likely the key is to be needed at all.
///
/// The attached predictor and pass are read, never written: their owner observes each layer's
/// routing into the pass before that layer's cache call and learns complete passes (the timeline
/// simulator does).
///
/// **How it is fast.** The keys of one layer share `d`, and `D` falls as the count rises, so the
/// farthest key of a layer is its least-counted one (ties: least recently used; the order of the
/// counts does not change as they decay). Each layer's resident keys sit in a heap by
/// `(count, last use)`, as in `decayed_frequency`; `victim` compares `D` of each layer's top
/// (kept from one victim to the next until that layer's heap, the executing layer or the pass
/// changes), and scans only the layers whose `p` comes from the predictor. (A scan of every key
/// could prefer the less recently used of two keys whose different counts round to the same `D`;
/// this takes the smaller count.)
///
/// Cost, L layers (1 in per-layer scope): `on_insert`, `on_hit`, `on_erase` O(log n); `victim`
/// O(L + p) plus the resident keys of the `lookahead` predicted layers, and, once per (pass,
/// layer), a score of those layers (O(lookahead x window x top_k x E)). Allocation-free after
/// `reset`. Not thread-safe.
/// @code
/// wisp::coactivation_predictor table(shape);
/// wisp::routing_pass pass(shape);
/// wisp::slot_cache<wisp::predicted_next_use> cache(
///     wisp::key_layout{wisp::cache_scope::global, 26, 64}, 546,
///     wisp::predicted_next_use(256.0).attach(table, pass));
/// @endcode
#pragma once

#include <wisp/cache/detail/decay_clock.hpp>
#include <wisp/cache/detail/key_heap.hpp>
#include <wisp/cache/eviction_policy.hpp>
#include <wisp/core/error.hpp>
#include <wisp/predict/coactivation.hpp>
#include <wisp/predict/routing_predictor.hpp>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>
#include <vector>

namespace wisp {

class predicted_next_use {
 public:
  static constexpr std::string_view name = "predicted_next_use";

  /// @param half_life   of the decayed rates, in forward passes (finite, > 0).
  /// @param lookahead   layers ahead scored by an attached predictor (>= 0).
  /// @throws wisp::logic_error on an out-of-range parameter.
  explicit predicted_next_use(double half_life = 256.0, std::int32_t lookahead = 4)
      : clock_(half_life, "predicted_next_use"), lookahead_(lookahead) {
    WISP_EXPECTS(lookahead >= 0, "predicted_next_use: lookahead must be >= 0, got ", lookahead);
  }

  /// Attaches a predictor (any `routing_predictor`) and the pass it reads; both must outlive the
  /// policy and its copies. Returns `*this` for chaining. O(1); the predictor is called through
  /// one function pointer, without allocation.
  template <routing_predictor P>
  predicted_next_use& attach(const P& predictor, const routing_pass& pass) {
    predictor_ = &predictor;
    score_ = [](const void* p, const routing_pass& pass, std::int32_t target,
                std::span<float> scores) { static_cast<const P*>(p)->score(pass, target, scores); };
    predictor_shape_ = pass.shape();
    if constexpr (requires { predictor.shape(); }) {
      predictor_shape_ = predictor.shape();
    }
    pass_ = &pass;
    return *this;
  }

  /// Forgets every key; sizes for `layout` (and, with a predictor attached in global scope, the
  /// scores of `lookahead` layers). @throws wisp::logic_error if the attached predictor's shape
  /// does not match the layout; std::bad_alloc.
  void reset(const key_layout& layout) {
    layout_ = layout;
    const auto n = static_cast<std::size_t>(layout.size());
    count_.assign(n, 0.0);
    last_.assign(n, 0);
    heaps_.resize(layout.scope == cache_scope::global ? static_cast<std::size_t>(layout.layers)
                                                      : 1u);
    for (detail::key_heap& heap : heaps_) {
      heap.reset(layout.experts);  // the layer's keys by expert
    }
    farthest_.assign(heaps_.size(), farthest{});
    farthest_layer_ = -1;
    passes_ = 0.0;
    tick_ = 0;
    clock_.reset();
    scored_step_ = 0;
    scored_observed_ = -1;
    const bool predicts = predictor_ != nullptr && layout.scope == cache_scope::global;
    if (predicts) {
      WISP_EXPECTS(
          predictor_shape_.layers == layout.layers && predictor_shape_.experts == layout.experts,
          "predicted_next_use: the predictor's shape (", predictor_shape_,
          ") does not match the cache's ", layout.layers, " layers x ", layout.experts, " experts");
    }
    scores_.assign(predicts ? static_cast<std::size_t>(lookahead_) * n / layout.layers : 0, 0.0f);
  }
  void on_insert(cache_key key, const access_context& ctx) noexcept { bump(key, ctx); }
  void on_hit(cache_key key, const access_context& ctx) noexcept { bump(key, ctx); }
  void on_erase(cache_key key) noexcept {
    const std::size_t h = heap_index(key);
    heaps_[h].erase(expert_in(h, key));
  }
  /// The unprotected resident key with the largest predicted next-use distance (then the least
  /// recently used), or `no_key`.
  [[nodiscard]] cache_key victim(const access_context& ctx, protected_keys is_protected) {
    if (heaps_.size() == 1) {
      // One heap (per layer, or a pool of one layer, where no layer lies ahead to predict): the
      // heap's order is the distance's, so its smallest unprotected key is the farthest.
      return heaps_[0].min_unprotected(is_protected);
    }
    refresh_scores(ctx);
    if (ctx.layer != farthest_layer_ || passes_ != farthest_passes_) {
      forget_farthest();
      farthest_layer_ = ctx.layer;
      farthest_passes_ = passes_;
    }
    cache_key best = no_key;
    double best_distance = 0.0;
    const auto consider = [&](cache_key key, double d) {
      if (best == no_key || d > best_distance ||
          (d == best_distance &&
           last_[static_cast<std::size_t>(key)] < last_[static_cast<std::size_t>(best)])) {
        best = key;
        best_distance = d;
      }
    };
    for (std::size_t h = 0; h < heaps_.size(); ++h) {
      const std::int32_t layer = heaps_.size() == 1 ? ctx.layer : static_cast<std::int32_t>(h);
      const cache_key base = heaps_.size() == 1 ? 0 : layer * layout_.experts;
      if (heaps_.size() > 1 && predicted(layer, ctx.layer)) {  // p per key: every key
        for (const cache_key expert : heaps_[h].keys()) {
          if (!is_protected(base + expert)) {
            consider(base + expert, distance(base + expert, layer, ctx.layer));
          }
        }
        continue;
      }
      const std::span<const cache_key> keys = heaps_[h].keys();
      if (!keys.empty() && !is_protected(base + keys[0])) {  // the layer's farthest: its top
        farthest& f = farthest_[h];
        if (f.expert != keys[0]) {
          f = farthest{keys[0], distance(base + keys[0], layer, ctx.layer)};
        }
        consider(base + f.expert, f.distance);
        continue;
      }
      const cache_key expert =
          heaps_[h].min_unprotected([&](cache_key e) { return is_protected(base + e); });
      if (expert != no_key) {
        consider(base + expert, distance(base + expert, layer, ctx.layer));
      }
    }
    return best;
  }

  /// The predicted next-use distance `D(key)` (layer executions) with layer `layer` executing.
  /// Uses the predictor's scores as of the last `victim` call.
  [[nodiscard]] double distance(cache_key key, std::int32_t layer) const noexcept {
    return distance(key, layout_.layer_of(key, layer), layer);
  }

 private:
  [[nodiscard]] double distance(cache_key key, std::int32_t key_layer,
                                std::int32_t layer) const noexcept {
    const std::int32_t layers = layout_.layers;
    const std::int32_t d = key_layer > layer ? key_layer - layer : key_layer - layer + layers;
    const double p = probability(key, key_layer, layer);
    return p <= 0.0 ? std::numeric_limits<double>::infinity() : d + layers * (1.0 / p - 1.0);
  }
  void bump(cache_key key, const access_context& ctx) noexcept {
    if (!clock_.at(ctx.step)) {
      if (const int shift = clock_.advance(ctx.step); shift != 0) {
        for (double& c : count_) {
          c = std::ldexp(c, -shift);
        }
        passes_ = std::ldexp(passes_, -shift);
        forget_farthest();
        // Counts that became equal (or 0) may have changed order: rebuild the heaps.
        for (std::size_t h = 0; h < heaps_.size(); ++h) {
          const auto base = static_cast<cache_key>(h) * layout_.experts;
          heaps_[h].rebuild([&](cache_key e) { return priority(base + e); });
        }
      }
      passes_ += clock_.weight();  // a new pass
    }
    const auto k = static_cast<std::size_t>(key);
    count_[k] += clock_.weight();
    last_[k] = ++tick_;
    const std::size_t h = heap_index(key);
    heaps_[h].set(expert_in(h, key), priority(key));
    farthest_[h].expert = no_key;
  }
  // The heap of `key`, and its expert there. One division in global scope, none per layer (the
  // keys are the experts): a division takes tens of cycles, and every access runs these.
  [[nodiscard]] std::size_t heap_index(cache_key key) const noexcept {
    return heaps_.size() == 1 ? 0u : static_cast<std::size_t>(key / layout_.experts);
  }
  [[nodiscard]] cache_key expert_in(std::size_t heap, cache_key key) const noexcept {
    return key - static_cast<cache_key>(heap) * layout_.experts;
  }
  void forget_farthest() noexcept {
    for (farthest& f : farthest_) {
      f.expert = no_key;
    }
  }
  // Non-negative doubles order as their bit patterns.
  [[nodiscard]] detail::heap_priority priority(cache_key key) const noexcept {
    const auto k = static_cast<std::size_t>(key);
    return {std::bit_cast<std::uint64_t>(count_[k]), last_[k]};
  }
  // Whether keys of `key_layer` take `p` from the predictor while `layer` executes.
  [[nodiscard]] bool predicted(std::int32_t key_layer, std::int32_t layer) const noexcept {
    const std::int32_t ahead = key_layer - scored_observed_;  // 0 = the next layer to observe
    return !scores_.empty() && scored_observed_ >= 0 && key_layer > layer && ahead >= 0 &&
           ahead < lookahead_;
  }
  [[nodiscard]] double probability(cache_key key, std::int32_t key_layer,
                                   std::int32_t layer) const noexcept {
    if (predicted(key_layer, layer)) {
      const auto experts = static_cast<std::size_t>(layout_.experts);
      const std::size_t expert = static_cast<std::size_t>(key) % experts;
      return scores_[static_cast<std::size_t>(key_layer - scored_observed_) * experts + expert];
    }
    return passes_ > 0.0 ? count_[static_cast<std::size_t>(key)] / passes_ : 0.0;
  }
  // Scores the lookahead layers after the pass's observed ones, once per (pass, observed).
  void refresh_scores(const access_context& ctx) {
    if (scores_.empty() || pass_ == nullptr) {
      return;
    }
    const std::int32_t observed = pass_->observed();
    if (scored_observed_ == observed && scored_step_ == ctx.step) {
      return;
    }
    scored_step_ = ctx.step;
    scored_observed_ = observed;
    const auto experts = static_cast<std::size_t>(layout_.experts);
    for (std::int32_t a = 0; a < lookahead_ && observed + a < layout_.layers; ++a) {
      score_(predictor_, *pass_, observed + a,
             std::span<float>(scores_.data() + static_cast<std::size_t>(a) * experts, experts));
    }
  }

  detail::decay_clock clock_;  // counts and passes are scaled by it (see decayed_frequency)
  std::int32_t lookahead_;
  const void* predictor_ = nullptr;  // a routing_predictor, called through score_
  void (*score_)(const void*, const routing_pass&, std::int32_t, std::span<float>) = nullptr;
  moe_shape predictor_shape_{};
  const routing_pass* pass_ = nullptr;
  key_layout layout_;
  std::vector<double> count_;            // every key's decayed count, scaled
  std::vector<std::uint64_t> last_;      // every key's last access tick
  std::vector<detail::key_heap> heaps_;  // per layer (one in per-layer scope): by (count, last)
  // Per heap: its top and the top's D, while the executing layer and passes_ stay as noted.
  struct farthest {
    cache_key expert = no_key;
    double distance = 0.0;
  };
  std::vector<farthest> farthest_;
  std::int32_t farthest_layer_ = -1;
  double farthest_passes_ = 0.0;
  std::vector<float> scores_;  // [lookahead x experts]: predicted probabilities
  double passes_ = 0.0;        // decayed passes seen, scaled
  std::uint64_t tick_ = 0;
  std::uint32_t scored_step_ = 0;
  std::int32_t scored_observed_ = -1;
};
static_assert(eviction_policy<predicted_next_use>);

}  // namespace wisp
