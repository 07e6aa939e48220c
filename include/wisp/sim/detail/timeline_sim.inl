// SPDX-License-Identifier: Apache-2.0
// Implementation of the timeline simulator; included at the end of <wisp/sim/timeline_sim.hpp>.
#pragma once

namespace wisp {
namespace detail {

/// The discrete-event replay behind `simulate_timeline` (see the header's description).
template <eviction_policy Policy, routing_predictor Predictor>
class timeline_replay {
 public:
  template <class MakePolicy>
  timeline_replay(const routing_trace& trace, const timeline_config& config,
                  MakePolicy& make_policy, Predictor& predictor)
      : trace_(trace),
        config_(config),
        shape_(trace.shape()),
        global_(config.scope == cache_scope::global),
        predictor_(predictor),
        pass_(shape_),
        queue_(shape_.layers, shape_.experts),
        values_(shape_.layers, shape_.experts, config.hybrid_value_rate) {
    const key_layout layout =
        global_ ? key_layout{cache_scope::global, shape_.layers, shape_.experts}
                : key_layout{cache_scope::per_layer, shape_.layers, shape_.experts};
    const std::int32_t high = layout.size();
    WISP_EXPECTS(config.capacity >= shape_.top_k && config.capacity <= high,
                 "simulate_timeline: capacity ", config.capacity,
                 " is outside [top_k = ", shape_.top_k, ", ", high, "] for ",
                 global_ ? "global" : "per-layer", " scope");
    const std::int32_t caches = global_ ? 1 : shape_.layers;
    caches_.reserve(static_cast<std::size_t>(caches));
    for (std::int32_t c = 0; c < caches; ++c) {
      Policy policy = make_policy(global_ ? -1 : c);
      if constexpr (std::is_same_v<Policy, predicted_next_use>) {
        policy.attach(predictor_, pass_);
      }
      caches_.emplace_back(layout, config.capacity, std::move(policy));
    }
    const std::size_t keys =
        static_cast<std::size_t>(shape_.layers) * static_cast<std::size_t>(shape_.experts);
    times_.assign(caches_.size(), 0);
    ready_.assign(keys, 0.0);
    prefetched_for_.assign(keys, 0);
    stamps_.assign(keys, 0);
    const auto k = static_cast<std::size_t>(shape_.top_k);
    ids_.resize(k);
    original_.resize(k);
    weights_.resize(k);
    keys_.resize(k);
    experts_.resize(k);
    out_.resize(k);
    scores_.resize(static_cast<std::size_t>(shape_.experts));
    hybrid_ = config.miss.policy == miss_policy::hybrid;
    cost_ = config.hybrid;
    cost_.copy_seconds = config.link.copy_seconds(config.expert_bytes);
    layer_capacity_ = global_ ? std::max(1, config.capacity / shape_.layers) : config.capacity;
    learns_ = config.prefetch.rule != prefetch_rule::none ||
              config.miss.policy == miss_policy::substitute ||
              (std::is_same_v<Policy, predicted_next_use> && global_);
  }

  timeline_result run() {
    const double copy = config_.link.copy_seconds(config_.expert_bytes);
    const double compute = config_.layer_compute_seconds();
    const bool prefetching = config_.prefetch.rule != prefetch_rule::none;
    const auto k = static_cast<std::size_t>(shape_.top_k);
    timeline_result r;
    r.policy = std::string(policy_name<Policy>());
    double now = 0.0;  // T of the layer being processed
    for (std::size_t s = 0; s < trace_.steps(); ++s) {
      const auto step = static_cast<std::uint32_t>(s);
      pass_.clear();
      for (std::int32_t l = 0; l < shape_.layers; ++l) {
        // 2. Prefetches the link starts before this layer begins, then the ones it can no longer.
        if (prefetching) {
          start_prefetches(now, step, l, copy, r);
          r.prefetches_cancelled += queue_.cancel_passed(step, l);
        }
        // 3. The call: the routed row (rewritten by an approximate miss policy), its keys kept
        //    out of reach of the prefetches that run while it computes.
        load_row(s, l, r);
        pass_.observe(l, original_);
        next_generation();
        std::size_t n = 0;
        for (std::size_t j = 0; j < k; ++j) {
          const cache_key key = key_of(l, ids_[j]);
          if (std::find(keys_.begin(), keys_.begin() + static_cast<std::ptrdiff_t>(n), key) ==
              keys_.begin() + static_cast<std::ptrdiff_t>(n)) {
            keys_[n++] = key;
            stamps_[index(l, ids_[j])] = generation_;
          }
        }
        slot_cache<Policy>& cache = cache_of(l);
        double ready = now;
        if (hybrid_) {  // the host's misses leave the call (and the cache)
          const std::size_t all = n;
          n = split_call(l, n, now, r);
          ready = std::max(ready, host_end_);
          values_.record_call(l, std::span<const std::int32_t>(experts_.data(), all),
                              static_cast<std::int32_t>(n - hits_));
        }
        std::uint64_t& time = times_[global_ ? 0 : static_cast<std::size_t>(l)];
        cache.access_call(std::span<const cache_key>(keys_.data(), n), {step, l, time},
                          std::span<access_result>(out_.data(), n));
        time += n;
        for (std::size_t i = 0; i < n; ++i) {
          const std::size_t g = index(l, keys_[i] - key_of(l, 0));
          if (out_[i].hit) {
            if (prefetched_for_[g] == step + 1) {
              ++r.prefetches_useful;
            }
          } else {
            const double start = std::max(link_free_, now);
            link_free_ = start + copy;
            ready_[g] = link_free_;
            r.link_busy_seconds += copy;
            ++r.demand_copies;
          }
          prefetched_for_[g] = 0;
          ready = std::max(ready, ready_[g]);
        }
        // 4. Compute once every routed expert is on the device.
        r.stall_seconds += ready - now;
        r.compute_seconds += compute;
        const double submitted = now;
        now = ready + compute;
        // 5. Prefetch the target layer's predicted experts.
        if (prefetching && l + config_.prefetch.distance < shape_.layers) {
          submit_prefetches(step, l + config_.prefetch.distance, submitted);
        }
      }
      if (learns_) {
        predictor_.learn(pass_);
      }
    }
    for (const slot_cache<Policy>& c : caches_) {
      r.stats += c.stats();
    }
    r.steps = trace_.steps();
    r.total_seconds = now;
    r.tpot_seconds = r.steps == 0 ? 0.0 : now / static_cast<double>(r.steps);
    r.wasted_prefetch_bytes = (r.prefetches_started - r.prefetches_useful) * config_.expert_bytes;
    if (r.prefetches_started > 0) {
      r.prefetch_precision =
          static_cast<double>(r.prefetches_useful) / static_cast<double>(r.prefetches_started);
    }
    if (r.prefetches_useful + r.stats.misses > 0) {
      r.prefetch_recall = static_cast<double>(r.prefetches_useful) /
                          static_cast<double>(r.prefetches_useful + r.stats.misses);
    }
    return r;
  }

 private:
  [[nodiscard]] cache_key key_of(std::int32_t layer, std::int32_t expert) const noexcept {
    return global_ ? layer * shape_.experts + expert : expert;
  }
  [[nodiscard]] std::size_t index(std::int32_t layer, std::int32_t expert) const noexcept {
    return static_cast<std::size_t>(layer) * static_cast<std::size_t>(shape_.experts) +
           static_cast<std::size_t>(expert);
  }
  [[nodiscard]] slot_cache<Policy>& cache_of(std::int32_t layer) noexcept {
    return caches_[global_ ? 0 : static_cast<std::size_t>(layer)];
  }
  // Keys out of reach of a prefetch into `layer`'s cache: stamped with the current generation.
  [[nodiscard]] protected_keys keep_view(std::int32_t layer) const noexcept {
    return protected_keys(stamps_.data() + (global_ ? 0 : index(layer, 0)), generation_);
  }
  void next_generation() noexcept {
    if (++generation_ == 0) {
      std::fill(stamps_.begin(), stamps_.end(), 0u);
      generation_ = 1;
    }
  }

  // Hybrid: splits the misses among keys_[0, n) of layer `l`'s call decided at `now` between
  // copies and the host; keys_ keeps the hits and the copies (in order), the host's work goes on
  // the host queue (host_end_: when this call's host work is done, `now` if none).
  // @returns how many keys stay.
  std::size_t split_call(std::int32_t l, std::size_t n, double now, timeline_result& r) {
    const slot_cache<Policy>& cache = cache_of(l);
    const hybrid_cost_model& cost = cost_;
    misses_.clear();
    hits_ = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const std::int32_t e = keys_[i] - key_of(l, 0);
      experts_[i] = e;
      if (cache.slot_of(keys_[i]) < 0) {
        misses_.push_back(
            {.expert = e,
             .positions = config_.tokens,
             .value_seconds = values_.expected_hits(l, e, layer_capacity_) * cost.miss_seconds()});
      } else {
        ++hits_;
      }
    }
    host_end_ = now;
    if (misses_.empty()) {
      return n;
    }
    // What the copies may evict: the resident keys this call does not use (its own are stamped).
    resident_values_.clear();
    cache.for_each_resident([&](cache_key key, std::int32_t) {
      const std::int32_t layer = global_ ? key / shape_.experts : l;
      const std::int32_t e = key - key_of(layer, 0);
      if (stamps_[index(layer, e)] != generation_) {
        resident_values_.push_back(values_.expected_hits(layer, e, layer_capacity_) *
                                   cost.miss_seconds());
      }
    });
    eviction_losses(cache.capacity() - cache.size(), resident_values_, losses_);
    split_.resize(misses_.size());
    const hybrid_decision d = splitter_.split(cost,
                                              {.link_seconds = std::max(0.0, link_free_ - now),
                                               .host_seconds = std::max(0.0, host_free_ - now)},
                                              misses_, split_, -1, losses_);
    if (d.host_experts > 0) {
      const double busy = cost.call_seconds + cost.host_seconds(d.host_experts, d.host_positions);
      host_free_ = std::max(host_free_, now) + busy;
      host_end_ = host_free_;
      r.host_busy_seconds += busy;
      r.host_experts += static_cast<std::uint64_t>(d.host_experts);
    }
    std::size_t kept = 0, miss = 0;
    for (std::size_t i = 0; i < n; ++i) {
      bool keep = true;
      if (cache.slot_of(keys_[i]) < 0) {
        keep = split_[miss++] != 0;
      }
      if (keep) {
        keys_[kept++] = keys_[i];
      }
    }
    return kept;
  }

  // The row of (step, layer) into ids_ (rewritten for an approximate miss policy) and original_.
  void load_row(std::size_t step, std::int32_t layer, timeline_result& r) {
    const auto k = static_cast<std::size_t>(shape_.top_k);
    for (std::size_t j = 0; j < k; ++j) {
      original_[j] = trace_.expert(step, layer, static_cast<std::int32_t>(j));
      ids_[j] = original_[j];
      weights_[j] = trace_.has_weights() ? trace_.weight(step, layer, static_cast<std::int32_t>(j))
                                         : 1.0f / static_cast<float>(k);
      r.routed_weight += weights_[j];
    }
    if (config_.miss.policy == miss_policy::fetch || config_.miss.policy == miss_policy::hybrid) {
      return;  // exact: the row stays as routed
    }
    std::span<const float> scores;
    if (config_.miss.policy == miss_policy::substitute) {
      predictor_.score(pass_, layer, scores_);
      scores = scores_;
    }
    const slot_cache<Policy>& cache = cache_of(layer);
    const miss_rewrite w = rewrite_misses(
        std::span<std::int32_t>(ids_), std::span<float>(weights_), 1, shape_.top_k, shape_.experts,
        config_.miss, [&](std::int32_t e) { return cache.slot_of(key_of(layer, e)) >= 0; }, scores);
    r.rewrite.fetched += w.fetched;
    r.rewrite.dropped += w.dropped;
    r.rewrite.substituted += w.substituted;
    r.rewrite.dropped_weight += w.dropped_weight;
    r.rewrite.substituted_weight += w.substituted_weight;
  }

  // Starts, in queue order, the prefetches the link can begin before `until` (the start of
  // (step, layer)); the stale ones are cancelled.
  void start_prefetches(double until, std::uint32_t step, std::int32_t layer, double copy,
                        timeline_result& r) {
    while (!queue_.empty() && std::max(link_free_, submitted_at_) < until) {
      const prefetch_request q = queue_.front();
      queue_.pop();
      if (q.step < step || (q.step == step && q.layer < layer)) {
        ++r.prefetches_cancelled;
        continue;
      }
      slot_cache<Policy>& cache = cache_of(q.layer);
      const access_context ctx{q.step, q.layer,
                               times_[global_ ? 0 : static_cast<std::size_t>(q.layer)]};
      const access_result loaded =
          cache.prefetch(key_of(q.layer, q.expert), ctx, keep_view(q.layer));
      if (loaded.hit || loaded.slot < 0) {
        continue;  // resident meanwhile, or no slot out of reach of the pending call
      }
      const std::size_t g = index(q.layer, q.expert);
      const double start = std::max(link_free_, submitted_at_);
      link_free_ = start + copy;
      ready_[g] = link_free_;
      stamps_[g] = generation_;
      prefetched_for_[g] = q.step + 1;
      r.link_busy_seconds += copy;
      ++r.prefetches_started;
    }
  }

  void submit_prefetches(std::uint32_t step, std::int32_t target, double at) {
    if constexpr (requires { predictor_.passes(); }) {
      if (predictor_.passes() <= 0.0) {
        return;  // nothing learned yet: no prediction to act on
      }
    }
    predictor_.score(pass_, target, scores_);
    candidates_.clear();
    choose_prefetch(scores_, shape_.top_k, config_.prefetch, scratch_, candidates_);
    const slot_cache<Policy>& cache = cache_of(target);
    std::erase_if(candidates_,
                  [&](std::int32_t e) { return cache.slot_of(key_of(target, e)) >= 0; });
    if (!candidates_.empty()) {
      queue_.submit(step, target, candidates_);
      submitted_at_ = at;
    }
  }

  const routing_trace& trace_;
  const timeline_config& config_;
  moe_shape shape_;
  bool global_;
  Predictor& predictor_;  // the caller's, learned online
  routing_pass pass_;
  prefetch_queue queue_;
  std::vector<slot_cache<Policy>> caches_;     // one (global) or one per layer
  std::vector<std::uint64_t> times_;           // per cache: accesses so far (ctx.time)
  std::vector<double> ready_;                  // [layers x experts]: when the last copy arrived
  std::vector<std::uint32_t> prefetched_for_;  // [layers x experts]: prefetch pass + 1, 0 = none
  std::vector<std::uint32_t> stamps_;          // [layers x experts]: keep stamps (generation_)
  std::uint32_t generation_ = 0;
  std::vector<std::int32_t> ids_, original_, candidates_, scratch_;
  std::vector<float> weights_, scores_;
  std::vector<cache_key> keys_;
  std::vector<access_result> out_;
  bool hybrid_ = false;
  hybrid_cost_model cost_;           // config.hybrid with the link's copy time
  std::int32_t layer_capacity_ = 0;  // the value estimator's capacity per layer
  reuse_value_estimator values_;
  hybrid_splitter splitter_;
  std::vector<hybrid_miss> misses_;
  std::vector<std::uint8_t> split_;
  std::vector<double> resident_values_, losses_;
  std::vector<std::int32_t> experts_;  // the call's distinct experts (hybrid)
  std::size_t hits_ = 0;               // of the current call (hybrid)
  double host_free_ = 0.0;             // when the host finishes its last work
  double host_end_ = 0.0;              // when the current call's host work is done
  double link_free_ = 0.0;             // when the link finishes its last copy
  double submitted_at_ = 0.0;          // when the queued prefetches were last submitted
  bool learns_ = false;
};

// The per-cache sequences of distinct keys a fetch-only replay accesses (belady's future).
inline std::vector<std::vector<cache_key>> timeline_futures(const routing_trace& trace,
                                                            bool global) {
  const moe_shape& shape = trace.shape();
  std::vector<std::vector<cache_key>> keys(global ? 1 : static_cast<std::size_t>(shape.layers));
  for (std::size_t s = 0; s < trace.steps(); ++s) {
    for (std::int32_t l = 0; l < shape.layers; ++l) {
      std::vector<cache_key>& seq = keys[global ? 0 : static_cast<std::size_t>(l)];
      const std::size_t begin = seq.size();
      for (std::int32_t j = 0; j < shape.top_k; ++j) {
        const cache_key key = (global ? l * shape.experts : 0) + trace.expert(s, l, j);
        if (std::find(seq.begin() + static_cast<std::ptrdiff_t>(begin), seq.end(), key) ==
            seq.end()) {
          seq.push_back(key);
        }
      }
    }
  }
  return keys;
}

}  // namespace detail

template <eviction_policy Policy, routing_predictor Predictor, class MakePolicy>
timeline_result simulate_timeline(const routing_trace& trace, const timeline_config& config,
                                  MakePolicy make_policy, Predictor& predictor) {
  config.validate();
  if constexpr (std::is_same_v<Policy, belady>) {
    WISP_EXPECTS(
        config.prefetch.rule == prefetch_rule::none && config.miss.policy == miss_policy::fetch,
        "simulate_timeline: belady needs the future it replays, so it takes neither "
        "prefetch (rule ",
        to_string(config.prefetch.rule), ") nor another miss policy than fetch (",
        to_string(config.miss.policy), ")");
  }
  detail::timeline_replay<Policy, Predictor> replay(trace, config, make_policy, predictor);
  return replay.run();
}

template <eviction_policy Policy, class MakePolicy>
timeline_result simulate_timeline(const routing_trace& trace, const timeline_config& config,
                                  MakePolicy make_policy) {
  config.validate();
  coactivation_predictor predictor(trace.shape(), config.predictor);
  return simulate_timeline<Policy>(trace, config, std::move(make_policy), predictor);
}

template <eviction_policy Policy>
timeline_result simulate_timeline(const routing_trace& trace, const timeline_config& config) {
  if constexpr (std::is_same_v<Policy, belady>) {
    const bool global = config.scope == cache_scope::global;
    const auto futures = detail::timeline_futures(trace, global);
    return simulate_timeline<belady>(trace, config, [&](std::int32_t layer) {
      return belady(futures[layer < 0 ? 0 : static_cast<std::size_t>(layer)]);
    });
  } else {
    return simulate_timeline<Policy>(trace, config, [](std::int32_t) { return Policy{}; });
  }
}

inline timeline_result simulate_timeline_named(std::string_view policy, const routing_trace& trace,
                                               const timeline_config& config) {
  return visit_policy(policy, [&]<class Policy>(std::type_identity<Policy>) {
    return simulate_timeline<Policy>(trace, config);
  });
}

}  // namespace wisp
