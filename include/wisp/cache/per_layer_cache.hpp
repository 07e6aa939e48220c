// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `per_layer_cache<Policy>`: one `slot_cache` per MoE layer, each with its own capacity
/// (WiSP's per-layer scope). Keys are expert ids; `ctx.layer` picks the cache.
/// @code
/// wisp::per_layer_cache<wisp::lru> caches(/*layers=*/24, /*experts=*/64, /*capacity=*/8);
/// auto r = caches.access(/*expert=*/5, {.step = 0, .layer = 3, .time = 0});
/// wisp::cache_stats total = caches.stats();
/// @endcode
#pragma once

#include <wisp/cache/eviction_policy.hpp>
#include <wisp/cache/slot_cache.hpp>
#include <wisp/core/error.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

namespace wisp {

/// @brief A set of per-layer slot caches, layer `l` holding experts of layer `l` only.
///
/// Every cache has layout `key_layout{cache_scope::per_layer, layers, experts}`. Costs are those of
/// `slot_cache` plus an O(1) dispatch. Not thread-safe.
template <eviction_policy Policy>
class per_layer_cache {
 public:
  using cache_type = slot_cache<Policy>;

  /// Every layer gets `capacity` slots and a copy of `prototype`.
  /// @throws wisp::logic_error if `layers < 1`, `experts < 1` or `capacity` is outside
  ///   `[1, experts]`.
  per_layer_cache(std::int32_t layers, std::int32_t experts, std::int32_t capacity,
                  const Policy& prototype = Policy{}) {
    WISP_EXPECTS(layers >= 1, "per_layer_cache: layers must be >= 1, got ", layers);
    caches_.reserve(static_cast<std::size_t>(layers));
    for (std::int32_t l = 0; l < layers; ++l) {
      caches_.emplace_back(key_layout{cache_scope::per_layer, layers, experts}, capacity,
                           prototype);
    }
  }

  /// Layer `l` gets `capacities[l]` slots and `make_policy(l)` (e.g. a per-layer `belady`).
  /// @throws wisp::logic_error if `capacities` is empty or any capacity is outside `[1, experts]`.
  template <class MakePolicy>
  requires std::invocable<MakePolicy&, std::int32_t> &&
      std::convertible_to<std::invoke_result_t<MakePolicy&, std::int32_t>, Policy>
      per_layer_cache(std::span<const std::int32_t> capacities, std::int32_t experts,
                      MakePolicy make_policy) {
    WISP_EXPECTS(!capacities.empty(), "per_layer_cache: no layers (empty capacity list)");
    const auto layers = static_cast<std::int32_t>(capacities.size());
    caches_.reserve(capacities.size());
    for (std::int32_t l = 0; l < layers; ++l) {
      caches_.emplace_back(key_layout{cache_scope::per_layer, layers, experts},
                           capacities[static_cast<std::size_t>(l)], make_policy(l));
    }
  }

  /// Layer `l` gets `capacities[l]` slots and a copy of `prototype`.
  per_layer_cache(std::span<const std::int32_t> capacities, std::int32_t experts,
                  const Policy& prototype = Policy{})
      : per_layer_cache(capacities, experts, [&](std::int32_t) { return prototype; }) {}

  /// Access of expert `expert` of layer `ctx.layer`. See `slot_cache::access`.
  /// @throws wisp::logic_error on an out-of-range layer or expert, or when every resident key of
  ///   the layer's cache is protected.
  access_result access(std::int32_t expert, const access_context& ctx) {
    return layer(ctx.layer).access(expert, ctx);
  }

  /// One call on layer `ctx.layer`. See `slot_cache::access_call`.
  std::size_t access_call(std::span<const cache_key> experts, const access_context& ctx,
                          std::span<access_result> out) {
    return layer(ctx.layer).access_call(experts, ctx, out);
  }

  /// The cache of layer `l`. @throws wisp::logic_error if `l` is outside `[0, layers)`.
  [[nodiscard]] cache_type& layer(std::int32_t l) {
    WISP_EXPECTS(l >= 0 && l < layers(), "per_layer_cache: layer ", l, " is outside [0, ", layers(),
                 ")");
    return caches_[static_cast<std::size_t>(l)];
  }
  /// @copydoc layer
  [[nodiscard]] const cache_type& layer(std::int32_t l) const {
    WISP_EXPECTS(l >= 0 && l < layers(), "per_layer_cache: layer ", l, " is outside [0, ", layers(),
                 ")");
    return caches_[static_cast<std::size_t>(l)];
  }

  [[nodiscard]] std::int32_t layers() const noexcept {
    return static_cast<std::int32_t>(caches_.size());
  }
  [[nodiscard]] std::int32_t experts() const noexcept { return caches_.front().key_space(); }
  /// Total slots over all layers. O(L).
  [[nodiscard]] std::int64_t total_capacity() const noexcept {
    std::int64_t total = 0;
    for (const cache_type& c : caches_) {
      total += c.capacity();
    }
    return total;
  }
  /// Counters summed over all layers. O(L).
  [[nodiscard]] cache_stats stats() const noexcept {
    return total_stats(std::span<const cache_type>(caches_));
  }

 private:
  std::vector<cache_type> caches_;
};

}  // namespace wisp
