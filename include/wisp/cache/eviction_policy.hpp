// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The `eviction_policy` concept, the key layout it works on, the per-access context and the
/// protect set a cache hands to `victim()`.
///
/// A *key* is a dense integer in `[0, key_space)`. Two scopes are supported:
/// - `cache_scope::per_layer` (WiSP): one cache per MoE layer, key = expert id, key_space = E;
/// - `cache_scope::global` (SpecMD): one cache over all layers, key = layer * E + expert,
///   key_space = L * E.
///
/// A policy is told the layout once (`reset(layout)`, where it sizes every array), then sees one
/// event per cache operation. It never allocates afterwards.
/// @code
/// struct my_policy {                      // a user-written policy: evict the largest key
///   void reset(const wisp::key_layout& layout);
///   void on_insert(wisp::cache_key key, const wisp::access_context& ctx);
///   void on_hit(wisp::cache_key key, const wisp::access_context& ctx);
///   void on_erase(wisp::cache_key key);
///   wisp::cache_key victim(const wisp::access_context& ctx, wisp::protected_keys is_protected);
/// };
/// static_assert(wisp::eviction_policy<my_policy>);
/// wisp::slot_cache<my_policy> cache(wisp::key_layout{wisp::cache_scope::per_layer, 1, 64},
/// /*capacity=*/8);
/// @endcode
#pragma once

#include <wisp/cache/detail/inline.hpp>
#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/core/scope.hpp>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

namespace wisp {

/// A cache key: an expert id (per-layer scope) or `layer * experts + expert` (global scope).
using cache_key = std::int32_t;

/// "No key": returned by `victim()` when nothing can be evicted, and by an access that evicted
/// nothing.
inline constexpr cache_key no_key = -1;

/// @brief The shape of a cache's key space: scope, number of MoE layers `L`, experts per layer `E`,
/// written as an aggregate in that order: `key_layout{cache_scope::global, 26, 64}`.
///
/// Trivially copyable. `size()` is the key space (`E` per layer, `L * E` global).
struct key_layout {
  cache_scope scope = cache_scope::per_layer;
  std::int32_t layers = 1;   ///< L >= 1: MoE layers of the model
  std::int32_t experts = 1;  ///< E >= 1: routed experts per layer

  /// Number of keys: `experts` (per layer) or `layers * experts` (global). O(1).
  [[nodiscard]] constexpr std::int32_t size() const noexcept {
    return scope == cache_scope::global ? layers * experts : experts;
  }

  /// The layer a key belongs to: `key / experts` in global scope, `executing_layer` in per-layer
  /// scope (all keys of a per-layer cache belong to the layer the cache serves). O(1).
  [[nodiscard]] constexpr std::int32_t layer_of(cache_key key,
                                                std::int32_t executing_layer) const noexcept {
    return scope == cache_scope::global ? key / experts : executing_layer;
  }

  /// The key of (layer, expert) in this layout: `layer * experts + expert` (global) or `expert`.
  [[nodiscard]] constexpr cache_key key_of(std::int32_t layer, std::int32_t expert) const noexcept {
    return scope == cache_scope::global ? layer * experts + expert : expert;
  }

  /// @throws wisp::logic_error if `scope` is `stream` (a cache is per layer or global), `layers`
  /// or `experts` is not positive, or `layers * experts` overflows `int32`.
  void validate() const {
    WISP_EXPECTS(scope != cache_scope::stream,
                 "key_layout: a cache's scope is 'layer' or 'global', got '", scope, "'");
    WISP_EXPECTS(layers >= 1, "key_layout: layers must be >= 1, got ", layers);
    WISP_EXPECTS(experts >= 1, "key_layout: experts must be >= 1, got ", experts);
    WISP_EXPECTS(
        static_cast<std::int64_t>(layers) * experts <= std::numeric_limits<std::int32_t>::max(),
        "key_layout: layers * experts = ", static_cast<std::int64_t>(layers) * experts,
        " overflows int32");
  }

  friend constexpr bool operator==(const key_layout&, const key_layout&) = default;
};

/// @brief What a position-aware policy needs to know about one access.
///
/// The experts-per-layer count that decodes a global key to its layer is part of the
/// `key_layout` the policy received in `reset()`, so it cannot disagree between accesses.
struct access_context {
  std::uint32_t step = 0;  ///< forward-pass index; non-decreasing; a change ends the pass
  std::int32_t layer = 0;  ///< the MoE layer now executing, in [0, layers)
  std::uint64_t time = 0;  ///< index of this access in the whole stream (increasing; Belady)
  /// Token index of the pass within its sequence (request), where the caller knows it; 0
  /// otherwise. Only position-aware policies (`reuse_probability`) read it.
  std::uint32_t position = 0;
};

/// @brief Non-owning, trivially copyable view of a `protect_set`: "is this key requested by the
/// current call?". A default-constructed view protects nothing. O(1), noexcept.
class protected_keys {
 public:
  constexpr protected_keys() = default;
  constexpr protected_keys(const std::uint32_t* stamps, std::uint32_t generation) noexcept
      : stamps_(stamps), generation_(generation) {}

  /// True if `key` is protected. `key` must be in the key space of the owning set.
  [[nodiscard]] constexpr bool operator()(cache_key key) const noexcept {
    return stamps_ != nullptr && stamps_[key] == generation_;
  }

 private:
  const std::uint32_t* stamps_ = nullptr;
  std::uint32_t generation_ = 0;
};

/// @brief The keys requested by the current call: a generation-stamped array over the key space.
/// `clear()` is O(1) (it bumps the generation; every 2^32 - 1 clears it refills the array once).
/// Not thread-safe.
class protect_set {
 public:
  protect_set() = default;
  /// Sizes the set for keys in `[0, key_space)`. Allocates. @throws std::bad_alloc
  explicit protect_set(std::int32_t key_space)
      : stamps_(static_cast<std::size_t>(std::max(key_space, 0)), 0u),
        distinct_(static_cast<std::size_t>(std::max(key_space, 0)) + 1, no_key) {}

  /// Empties the set. O(1) amortised, noexcept.
  void clear() noexcept {
    if (++generation_ == 0) {
      std::fill(stamps_.begin(), stamps_.end(), 0u);
      generation_ = 1;
    }
  }
  /// Adds `key` (in range, unchecked). Returns true if it was not in the set. O(1).
  bool insert(cache_key key) noexcept {
    std::uint32_t& stamp = stamps_[static_cast<std::size_t>(key)];
    const bool added = stamp != generation_;
    stamp = generation_;
    return added;
  }
  /// Removes `key` (in range, unchecked). O(1).
  void erase(cache_key key) noexcept {
    std::uint32_t& stamp = stamps_[static_cast<std::size_t>(key)];
    if (stamp == generation_) {
      stamp = 0;
    }
  }
  /// True if `key` (in range, unchecked) is in the set. O(1).
  [[nodiscard]] bool contains(cache_key key) const noexcept {
    return stamps_[static_cast<std::size_t>(key)] == generation_;
  }
  /// The predicate handed to `victim()`; valid until this set is destroyed or moved.
  [[nodiscard]] protected_keys view() const noexcept {
    return protected_keys{stamps_.data(), generation_};
  }

  /// Empties the set, then adds every key of `keys` (in range, unchecked) and returns their
  /// distinct keys in first-seen order: `keys` itself when they are distinct (the common case:
  /// one pass, no copy), else a list kept in this set, valid until the next `assign`.
  /// O(keys.size()), no allocation. The generation and the array stay in registers for the whole
  /// loop (a member-at-a-time `insert` must reload the generation after every stamp store, which
  /// may alias it): this is the bulk insert that starts a cache call.
  WISP_DETAIL_ALWAYS_INLINE std::span<const cache_key> assign(
      std::span<const cache_key> keys) noexcept {
    clear();
    std::uint32_t* const stamps = stamps_.data();
    const std::uint32_t generation = generation_;
    bool repeated = false;
    for (const cache_key key : keys) {
      std::uint32_t& stamp = stamps[static_cast<std::size_t>(key)];
      repeated |= stamp == generation;
      stamp = generation;
    }
    if (!repeated) [[likely]] {
      return keys;
    }
    return assign_repeated(keys);
  }

 private:
  // `assign` of keys that repeat: start over under a fresh generation, keeping the first
  // occurrence of each key (branch-free: `distinct_` has one spare entry for the store after the
  // last new key).
  std::span<const cache_key> assign_repeated(std::span<const cache_key> keys) noexcept {
    clear();
    std::uint32_t* const stamps = stamps_.data();
    cache_key* const out = distinct_.data();
    const std::uint32_t fresh = generation_;
    std::size_t count = 0;
    for (const cache_key key : keys) {
      std::uint32_t& stamp = stamps[static_cast<std::size_t>(key)];
      const bool added = stamp != fresh;
      stamp = fresh;
      out[count] = key;  // overwritten by the next key unless this one was new
      count += added ? 1u : 0u;
    }
    return {out, count};
  }

  std::vector<std::uint32_t> stamps_;
  std::vector<cache_key> distinct_;  // assign's deduplicated keys (key_space + 1 entries)
  std::uint32_t generation_ = 1;
};

/// @brief A cache eviction policy over dense keys.
///
/// Contract (the cache guarantees the preconditions, a policy may rely on them unchecked):
/// - `reset(layout)`: forget everything and size internal arrays for `layout.size()` keys
///   (may allocate; the only call that may).
/// - `on_insert(key, ctx)`: `key` was not resident and now is (a miss filled it).
/// - `on_hit(key, ctx)`: resident `key` was accessed again.
/// - `on_erase(key)`: resident `key` left the cache (evicted, invalidated, or dropped by resize).
/// - `victim(ctx, is_protected)`: return a resident key with `!is_protected(key)` that the policy
///   would evict now, or `no_key` if there is none. Must not change which keys are resident (the
///   cache follows up with `on_erase`). It is called for every eviction of a full cache, before
///   `on_insert` of the missing key.
///
/// Policies are values: copyable or at least movable, and never allocate after `reset`.
template <class P>
concept eviction_policy = std::movable<P> &&
    requires(P& policy, const key_layout& layout, cache_key key, const access_context& ctx,
             protected_keys is_protected) {
  policy.reset(layout);
  policy.on_insert(key, ctx);
  policy.on_hit(key, ctx);
  policy.on_erase(key);
  { policy.victim(ctx, is_protected) } -> std::same_as<cache_key>;
};

/// @brief One whole call of a cache, as handed to a policy's optional `on_call` (see
/// `call_eviction_policy`).
///
/// The call accesses `keys` in order; the i-th access uses time `ctx.time + i`. The first misses
/// take free slots; each of the last `victims.size()` misses evicts one key, which the policy
/// writes to `victims`, in eviction order.
struct call_events {
  std::span<const cache_key> keys;      ///< the call's distinct keys, in access order
  std::span<const std::int32_t> slots;  ///< slot of each key before the call; -1 = a miss
  std::span<cache_key> victims;         ///< out: one victim per evicting miss, in eviction order
  access_context ctx;                   ///< context of the first access
  protected_keys is_protected;          ///< exactly the keys of `keys`
};

/// @brief An `eviction_policy` that can also take a whole call at once:
/// `policy.on_call(const call_events& call) noexcept`.
///
/// Optional: a `slot_cache` uses it for its bulk calls (`access_distinct`) when present and keeps
/// the per-access events otherwise. Contract: `on_call` leaves the policy in exactly the state,
/// and writes exactly the victims, that the per-access events would: for each key in order,
/// `on_hit` if it was resident (`slots[i] >= 0`), else, for one of the last `victims.size()`
/// misses, `victim` followed by `on_erase` of it, then `on_insert`. It must not allocate. The
/// cache checks every victim (a resident, unprotected key, each at most once) and throws
/// `wisp::logic_error` otherwise, its maps and counters unchanged (the policy's state is then
/// unspecified). `wisp::lru` provides it: one pass over its list per call; its victims are proven
/// by its tests against the per-access events, so an optimised build (`NDEBUG`) does not check
/// them.
template <class P>
concept call_eviction_policy = eviction_policy<P> && requires(P& policy, const call_events& call) {
  { policy.on_call(call) }
  noexcept;
};

namespace detail {
/// True for wisp's own whole-call policies (each specialises it beside its definition): their
/// `on_call` victims are proven by their tests, so a cache checks them in debug builds only.
template <class P>
inline constexpr bool trusted_call_victims = false;
/// Whether a cache checks the victims of `P::on_call`: always for a user's policy.
template <class P>
#ifdef NDEBUG
inline constexpr bool checks_call_victims = !trusted_call_victims<P>;
#else
inline constexpr bool checks_call_victims = true;
#endif
}  // namespace detail

/// The policy's `P::name` (a `std::string_view`-convertible static member) if it has one, else
/// `"custom"`. Used for test names and reports.
template <class P>
[[nodiscard]] constexpr std::string_view policy_name() noexcept {
  if constexpr (requires { std::string_view{P::name}; }) {
    return std::string_view{P::name};
  } else {
    return "custom";
  }
}

}  // namespace wisp
