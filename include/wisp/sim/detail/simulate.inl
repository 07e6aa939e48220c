// SPDX-License-Identifier: Apache-2.0
// Implementation of wisp::simulate; included at the end of <wisp/sim/simulate.hpp>.
#pragma once

#include <span>

namespace wisp {
namespace detail {

/// Groups accesses into calls and feeds them to `cache` (a slot_cache or per_layer_cache).
template <class Cache>
class replayer {
 public:
  replayer(Cache& cache, moe_shape shape, const sim_config& config, sim_result& result)
      : cache_(cache), shape_(shape), config_(config), result_(result) {}

  void push(const access& a) {
    WISP_EXPECTS(a.layer >= 0 && a.layer < shape_.layers, "simulate: access ", time_ + keys_.size(),
                 " has layer ", a.layer, " outside [0, ", shape_.layers, ")");
    WISP_EXPECTS(a.expert >= 0 && a.expert < shape_.experts, "simulate: access ",
                 time_ + keys_.size(), " has expert ", a.expert, " outside [0, ", shape_.experts,
                 ")");
    WISP_EXPECTS(!started_ || a.step >= step_, "simulate: access ", time_ + keys_.size(),
                 " goes back from step ", step_, " to step ", a.step);
    if (started_ && (a.step != step_ || a.layer != layer_ || !config_.protect_calls)) {
      flush();
    }
    started_ = true;
    step_ = a.step;
    while (next_start_ < config_.sequence_starts.size() &&
           config_.sequence_starts[next_start_] <= a.step) {
      start_ = config_.sequence_starts[next_start_++];
    }
    layer_ = a.layer;
    keys_.push_back(config_.scope == cache_scope::global ? a.layer * shape_.experts + a.expert
                                                         : a.expert);
  }

  void flush() {
    if (keys_.empty()) {
      return;
    }
    if (out_.size() < keys_.size()) {
      out_.resize(keys_.size());
    }
    const auto position =
        config_.sequence_starts.empty() ? 0u : static_cast<std::uint32_t>(step_ - start_);
    cache_.access_call(keys_, access_context{step_, layer_, time_, position}, out_);
    cache_stats& layer = result_.per_layer[static_cast<std::size_t>(layer_)];
    for (std::size_t i = 0; i < keys_.size(); ++i) {
      const access_result& r = out_[i];
      ++layer.accesses;
      layer.hits += r.hit ? 1u : 0u;
      layer.misses += r.hit ? 0u : 1u;
      layer.evictions += r.evicted != no_key ? 1u : 0u;
      layer.collision_misses += r.collision ? 1u : 0u;
    }
    time_ += keys_.size();
    keys_.clear();
  }

 private:
  Cache& cache_;
  moe_shape shape_;
  const sim_config& config_;
  sim_result& result_;
  std::vector<cache_key> keys_;
  std::vector<access_result> out_;
  std::uint64_t time_ = 0;
  std::uint32_t step_ = 0;
  std::int32_t layer_ = 0;
  bool started_ = false;
  std::size_t next_start_ = 0;  // the first sequence start after step_
  std::size_t start_ = 0;       // the start of step_'s sequence
};

/// One cache's accesses in replay order: the keys (in the cache's key space), their steps and
/// their stream times. The futures `belady` and the hindsight references are built from.
struct cache_history {
  std::vector<cache_key> keys;
  std::vector<std::uint32_t> steps;
  std::vector<std::uint64_t> times;
};

/// Every cache's history from one visit of `source`: one cache in global scope, one per layer
/// otherwise (index it with `history_index(layer)` of the `make_policy` argument).
/// @throws wisp::logic_error on an access outside the shape's layers.
template <class Source>
std::vector<cache_history> cache_histories(moe_shape shape, const Source& source,
                                           cache_scope scope) {
  const bool global = scope == cache_scope::global;
  std::vector<cache_history> out(global ? 1 : static_cast<std::size_t>(shape.layers));
  std::uint64_t t = 0;
  visit(source, [&](const access& a) {
    WISP_EXPECTS(a.layer >= 0 && a.layer < shape.layers, "simulate: access ", t, " has layer ",
                 a.layer, " outside [0, ", shape.layers, ")");
    cache_history& h = out[global ? 0 : static_cast<std::size_t>(a.layer)];
    h.keys.push_back(global ? a.layer * shape.experts + a.expert : a.expert);
    h.steps.push_back(a.step);
    h.times.push_back(t++);
  });
  return out;
}

/// The history of the cache `make_policy(layer)` builds: the layer's, or the one (layer -1).
[[nodiscard]] inline std::size_t history_index(std::int32_t layer) noexcept {
  return layer < 0 ? std::size_t{0} : static_cast<std::size_t>(layer);
}

inline void check_shape(moe_shape shape) {
  WISP_EXPECTS(shape.layers >= 1, "simulate: layers must be >= 1, got ", shape.layers);
  WISP_EXPECTS(shape.experts >= 1, "simulate: experts must be >= 1, got ", shape.experts);
  key_layout{cache_scope::global, shape.layers, shape.experts}.validate();
}

}  // namespace detail

template <eviction_policy Policy, access_source Source, class MakePolicy>
requires std::invocable<MakePolicy&, std::int32_t> sim_result simulate(moe_shape shape,
                                                                       const Source& source,
                                                                       const sim_config& config,
                                                                       MakePolicy make_policy) {
  detail::check_shape(shape);
  sim_result result;
  result.policy = std::string(policy_name<Policy>());
  result.per_layer.assign(static_cast<std::size_t>(shape.layers), cache_stats{});
  if (config.scope == cache_scope::global) {
    slot_cache<Policy> cache(key_layout{cache_scope::global, shape.layers, shape.experts},
                             config.capacity, make_policy(-1));
    detail::replayer<slot_cache<Policy>> replay(cache, shape, config, result);
    detail::visit(source, [&](const access& a) { replay.push(a); });
    replay.flush();
    result.stats = cache.stats();
  } else {
    const std::vector<std::int32_t> capacities(static_cast<std::size_t>(shape.layers),
                                               config.capacity);
    per_layer_cache<Policy> caches(std::span<const std::int32_t>(capacities), shape.experts,
                                   make_policy);
    detail::replayer<per_layer_cache<Policy>> replay(caches, shape, config, result);
    detail::visit(source, [&](const access& a) { replay.push(a); });
    replay.flush();
    result.stats = caches.stats();
  }
  result.bytes_moved = result.stats.misses * config.expert_bytes;
  result.stall_seconds =
      static_cast<double>(result.stats.misses) * config.link.copy_seconds(config.expert_bytes);
  return result;
}

template <eviction_policy Policy, access_source Source>
sim_result simulate(moe_shape shape, const Source& source, const sim_config& config) {
  if constexpr (std::is_same_v<Policy, belady>) {
    detail::check_shape(shape);
    // Belady needs the future: one pass to collect each cache's key sequence and times.
    const auto histories = detail::cache_histories(shape, source, config.scope);
    return simulate<belady>(shape, source, config, [&](std::int32_t layer) {
      const detail::cache_history& h = histories[detail::history_index(layer)];
      return config.scope == cache_scope::global ? belady(h.keys) : belady(h.keys, h.times);
    });
  } else {
    return simulate<Policy>(shape, source, config, [](std::int32_t) { return Policy{}; });
  }
}

template <access_source Source>
sim_result simulate_named(std::string_view policy, moe_shape shape, const Source& source,
                          const sim_config& config) {
  return visit_policy(policy, [&]<class Policy>(std::type_identity<Policy>) {
    return simulate<Policy>(shape, source, config);
  });
}

}  // namespace wisp
