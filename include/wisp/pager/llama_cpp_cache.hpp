// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `llama_cpp_cache`: the expert cache llama.cpp ships upstream (`src/llama-moe-cache.cpp`),
/// re-implemented from its public description as a **baseline** to measure wisp against: same
/// rule, same data structures, written for speed. It is not a wisp eviction policy and does not
/// plug into `pager`; it exists so that a comparison with llama.cpp is made in one binary, on one
/// trace, by one implementation (the pager benchmark, the example engine and the GPU benchmark
/// all use this one).
///
/// The rule, per call `plan(layer, ids, tokens)`:
/// 1. **Dedup** the call's ids with a generation-stamped `seen` array (never cleared: a call bumps
///    the generation).
/// 2. **Cached calls** (`tokens <= max_batch`, llama.cpp's 32, and the distinct experts fit the
///    pool): touch every hit to the most-recently-used end first, in first-seen order; then give
///    each miss, **in ascending expert order**, the least-recently-used slot and touch it. Hits
///    touched first and a call that fits the pool make the call's experts safe from its own misses.
///    With slots handed out in LRU order, consecutive misses often land in consecutive slots, and
///    their uploads merge (`upload_runs` counts the merged uploads).
/// 3. **Bypassed calls** (a larger ubatch, e.g. a prefill, or more distinct experts than slots):
///    hits are read where they are, misses are uploaded to staging rows `capacity + i` (i-th miss
///    in ascending order), and the cache is not changed, so a prefill never evicts what decoding
///    uses.
///
/// Scope: one LRU pool over every layer's `(layer, expert)` keys (`cache_scope::global`,
/// llama.cpp's), or one pool per layer (`cache_scope::per_layer`) for per-layer comparisons.
///
/// The map the kernel reads (`llama_cpp_plan::expert_map`) is the layer's slot map: every
/// resident expert of the layer at its slot, maintained in O(misses) per call (llama.cpp copies a
/// slot map to the device); a bypassed call's misses appear at their staging rows until the next
/// call.
/// @code
/// wisp::llama_cpp_cache llama({.layers = 26, .experts = 64, .top_k = 6, .capacity = 416});
/// auto p = llama.plan(layer, ids, /*tokens=*/1);
/// for (const wisp::copy_op& up : p.uploads) upload(master(layer, up.expert), row(up.slot));
/// kernel(hidden, ids, weights, rows, p.expert_map);
/// @endcode
#pragma once

#include <wisp/cache/eviction_policy.hpp>
#include <wisp/core/error.hpp>
#include <wisp/core/topk.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace wisp {

/// @brief Configuration of a `llama_cpp_cache`.
struct llama_cpp_cache_config {
  std::int32_t layers = 1;   ///< MoE layers, >= 1
  std::int32_t experts = 1;  ///< experts per layer E, >= 1
  std::int32_t top_k = 1;    ///< the model's k, >= 1; the pool holds at least one token's call
  /// Slots of the pool (global scope) or of each layer's pool (per-layer scope).
  std::int32_t capacity = 1;
  cache_scope scope = cache_scope::global;  ///< llama.cpp's is one pool over every layer
  std::int32_t max_batch = 32;              ///< ubatches of more tokens bypass the cache, >= 1
};

/// @brief What one `plan` decided, as views into buffers of the cache: valid until the next
/// `plan` or until the cache is moved or destroyed. Trivially copyable.
struct llama_cpp_plan {
  std::int32_t layer = 0;
  /// `int32[experts]`: the layer's slot map; every resident expert at its slot (its pool's slot
  /// index), a bypassed call's misses at their staging rows, -1 elsewhere.
  std::span<const std::int32_t> expert_map;
  /// The misses in ascending expert order: upload master `expert` into row `slot` before the
  /// kernel runs (a pool slot, or a staging row `>= capacity` for a bypassed call).
  std::span<const copy_op> uploads;
  std::int32_t hits = 0;         ///< distinct experts that were resident
  std::int32_t misses = 0;       ///< distinct experts that were not (`== uploads.size()`)
  std::int32_t upload_runs = 0;  ///< uploads once consecutive (expert, slot) pairs are merged
  bool cached = true;            ///< false: a bypassed call (the cache was read, not changed)
};

/// @brief Counters of a `llama_cpp_cache` since construction.
struct llama_cpp_stats {
  std::uint64_t calls = 0;           ///< `plan` calls
  std::uint64_t bypassed_calls = 0;  ///< calls that read the cache without changing it
  std::uint64_t hits = 0;            ///< distinct resident experts over every call
  std::uint64_t misses = 0;          ///< distinct uploaded experts over every call
  std::uint64_t upload_runs = 0;     ///< merged uploads over every call
};

/// @brief llama.cpp's upstream expert cache as a baseline (see the file description).
///
/// - **Hot path.** `plan` is O(tokens x k + m log m) for m misses, allocation-free: LRU order is
///   an intrusive doubly-linked list over slots, residency two flat arrays (key -> slot,
///   slot -> key).
/// - **Errors.** Invalid arguments throw `wisp::logic_error` naming the values and change nothing.
/// - **Thread safety:** none; one thread at a time.
class llama_cpp_cache {
 public:
  /// @throws wisp::logic_error if a count is not positive, `max_batch < 1`, or `capacity` is
  ///   outside `[top_k, experts]` (per layer) or `[top_k, layers * experts]` (global).
  explicit llama_cpp_cache(const llama_cpp_cache_config& config) : config_(config) {
    WISP_EXPECTS(config.layers >= 1, "llama_cpp_cache: layers must be >= 1, got ", config.layers);
    WISP_EXPECTS(config.experts >= 1, "llama_cpp_cache: experts must be >= 1, got ",
                 config.experts);
    WISP_EXPECTS(config.top_k >= 1, "llama_cpp_cache: top_k must be >= 1, got ", config.top_k);
    WISP_EXPECTS(config.max_batch >= 1, "llama_cpp_cache: max_batch must be >= 1, got ",
                 config.max_batch);
    const bool global = config.scope == cache_scope::global;
    const std::int64_t keys_per_pool =
        global ? static_cast<std::int64_t>(config.layers) * config.experts : config.experts;
    WISP_EXPECTS(config.capacity >= config.top_k && config.capacity <= keys_per_pool,
                 "llama_cpp_cache: capacity ", config.capacity,
                 " is outside [top_k = ", config.top_k, ", ",
                 global ? "layers * experts = " : "experts = ", keys_per_pool, "]");
    const std::size_t keys = static_cast<std::size_t>(config.layers) * ucount(config.experts);
    const std::size_t pools = global ? 1u : ucount(config.layers);
    const std::size_t cap = ucount(config.capacity);
    slot_of_key_.assign(keys, -1);
    seen_.assign(keys, 0);
    key_of_slot_.assign(pools * cap, -1);
    prev_.resize(pools * (cap + 1));
    next_.resize(pools * (cap + 1));
    for (std::size_t p = 0; p < pools; ++p) {  // every slot free, slot 0 at the LRU end
      const std::size_t base = p * (cap + 1);
      for (std::size_t s = 0; s <= cap; ++s) {
        next_[base + s] = static_cast<std::int32_t>(s == cap ? 0 : s + 1);
        prev_[base + s] = static_cast<std::int32_t>(s == 0 ? cap : s - 1);
      }
    }
    hit_slots_.resize(ucount(config.experts));
    missed_.resize(ucount(config.experts));
    uploads_.resize(ucount(config.experts));
    staged_.reserve(ucount(config.experts));
  }

  /// @brief Plans one call of `layer`: `ids` is the `[tokens x top_k]` routing, row-major.
  /// An empty call (`tokens == 0`) plans nothing and counts as a cached call.
  /// @throws wisp::logic_error, changing nothing, if `layer` is outside `[0, layers)`,
  ///   `tokens < 0`, `ids.size() != tokens * top_k`, or an id is outside `[0, experts)`.
  llama_cpp_plan plan(std::int32_t layer, std::span<const std::int32_t> ids, std::int32_t tokens) {
    return plan_impl(layer, ids, tokens);
  }
  /// @copydoc plan
  llama_cpp_plan plan(std::int32_t layer, std::span<const std::int64_t> ids, std::int32_t tokens) {
    return plan_impl(layer, ids, tokens);
  }

  /// The slot of `expert` of `layer` in its pool, or -1 if not resident. O(1).
  /// @throws wisp::logic_error on an out-of-range layer or expert.
  [[nodiscard]] std::int32_t slot_of(std::int32_t layer, std::int32_t expert) const {
    check_layer("llama_cpp_cache::slot_of", layer);
    WISP_EXPECTS(expert >= 0 && expert < config_.experts, "llama_cpp_cache::slot_of: expert ",
                 expert, " is outside [0, experts = ", config_.experts, ")");
    const std::int32_t s = slot_of_key_[key(layer, expert)];
    return s < config_.capacity ? s : -1;  // a staging row is not residency
  }
  [[nodiscard]] const llama_cpp_cache_config& config() const noexcept { return config_; }
  [[nodiscard]] const llama_cpp_stats& stats() const noexcept { return stats_; }

 private:
  template <topk_id Id>
  llama_cpp_plan plan_impl(std::int32_t layer, std::span<const Id> ids, std::int32_t tokens);
  static std::size_t ucount(std::int32_t n) noexcept { return static_cast<std::size_t>(n); }
  void check_layer(const char* where, std::int32_t layer) const {
    WISP_EXPECTS(layer >= 0 && layer < config_.layers, where, ": layer ", layer,
                 " is outside [0, layers = ", config_.layers, ")");
  }
  [[nodiscard]] std::size_t key(std::int32_t layer, std::int32_t expert) const noexcept {
    return static_cast<std::size_t>(layer) * ucount(config_.experts) + ucount(expert);
  }
  // The pool's list: slots [0, cap) and the sentinel cap; next_ of the sentinel is the LRU end.
  void move_to_mru(std::int32_t* prev, std::int32_t* next, std::int32_t slot) const noexcept {
    const std::int32_t sentinel = config_.capacity;
    next[prev[slot]] = next[slot];
    prev[next[slot]] = prev[slot];
    const std::int32_t last = prev[sentinel];
    prev[slot] = last;
    next[slot] = sentinel;
    next[last] = slot;
    prev[sentinel] = slot;
  }

  llama_cpp_cache_config config_;
  std::vector<std::int32_t> slot_of_key_;  // [layers x experts]: pool slot, staging row, or -1
  std::vector<std::int32_t> key_of_slot_;  // [pools x capacity]: key index or -1
  std::vector<std::int32_t> prev_, next_;  // [pools x (capacity + 1)]: LRU lists
  std::vector<std::uint32_t> seen_;        // [layers x experts]: generation of the last call
  std::uint32_t generation_ = 0;
  std::vector<std::int32_t> hit_slots_;  // scratch [experts]: the call's hits, first-seen order
  std::vector<std::int32_t> missed_;     // scratch [experts]: the call's misses
  std::vector<copy_op> uploads_;         // [experts]: the last plan's uploads
  std::vector<std::size_t> staged_;      // keys a bypassed call put on staging rows
  llama_cpp_stats stats_;
};

template <topk_id Id>
llama_cpp_plan llama_cpp_cache::plan_impl(std::int32_t layer, std::span<const Id> ids,
                                          std::int32_t tokens) {
  // One function on purpose: llama.cpp's plan step by step, in the order its description gives
  // (the baseline is meant to be read against that description).
  check_layer("llama_cpp_cache::plan", layer);
  detail::check_topk_shape("llama_cpp_cache::plan", ids.size(), tokens, config_.top_k);
  detail::check_topk_ids("llama_cpp_cache::plan", ids, config_.top_k, config_.experts);

  for (const std::size_t k : staged_) {  // the last bypassed call's staging rows are gone
    slot_of_key_[k] = -1;
  }
  staged_.clear();
  if (++generation_ == 0) {  // wrapped: forget every stamp once
    std::fill(seen_.begin(), seen_.end(), 0u);
    generation_ = 1;
  }
  const std::size_t base = key(layer, 0);
  std::int32_t hits = 0;
  std::int32_t misses = 0;
  for (const Id id : ids) {
    const std::size_t k = base + static_cast<std::size_t>(id);
    if (seen_[k] == generation_) {
      continue;
    }
    seen_[k] = generation_;
    const std::int32_t s = slot_of_key_[k];
    if (s >= 0) {
      hit_slots_[static_cast<std::size_t>(hits++)] = s;
    } else {
      missed_[static_cast<std::size_t>(misses++)] = static_cast<std::int32_t>(id);
    }
  }
  std::sort(missed_.begin(), missed_.begin() + misses);

  const bool cached = tokens <= config_.max_batch && hits + misses <= config_.capacity;
  if (cached) {
    const std::size_t pool = config_.scope == cache_scope::global ? 0u : ucount(layer);
    const std::size_t list = pool * (ucount(config_.capacity) + 1);
    std::int32_t* prev = prev_.data() + list;
    std::int32_t* next = next_.data() + list;
    std::int32_t* key_of_slot = key_of_slot_.data() + pool * ucount(config_.capacity);
    for (std::int32_t i = 0; i < hits; ++i) {
      move_to_mru(prev, next, hit_slots_[static_cast<std::size_t>(i)]);
    }
    for (std::int32_t i = 0; i < misses; ++i) {
      const std::int32_t expert = missed_[static_cast<std::size_t>(i)];
      const std::int32_t s = next[config_.capacity];  // the LRU end
      const std::int32_t old = key_of_slot[s];
      if (old >= 0) {
        slot_of_key_[static_cast<std::size_t>(old)] = -1;
      }
      key_of_slot[s] = static_cast<std::int32_t>(base) + expert;
      slot_of_key_[base + ucount(expert)] = s;
      move_to_mru(prev, next, s);
      uploads_[static_cast<std::size_t>(i)] = copy_op{expert, s};
    }
  } else {
    for (std::int32_t i = 0; i < misses; ++i) {
      const std::int32_t expert = missed_[static_cast<std::size_t>(i)];
      const std::int32_t row = config_.capacity + i;
      slot_of_key_[base + ucount(expert)] = row;
      staged_.push_back(base + ucount(expert));
      uploads_[static_cast<std::size_t>(i)] = copy_op{expert, row};
    }
  }
  std::int32_t runs = 0;
  for (std::int32_t i = 0; i < misses; ++i) {
    const auto u = static_cast<std::size_t>(i);
    runs += i == 0 || uploads_[u].expert != uploads_[u - 1].expert + 1 ||
                    uploads_[u].slot != uploads_[u - 1].slot + 1
                ? 1
                : 0;
  }
  ++stats_.calls;
  stats_.bypassed_calls += cached ? 0u : 1u;
  stats_.hits += static_cast<std::uint64_t>(hits);
  stats_.misses += static_cast<std::uint64_t>(misses);
  stats_.upload_runs += static_cast<std::uint64_t>(runs);
  return llama_cpp_plan{
      .layer = layer,
      .expert_map = {slot_of_key_.data() + base, ucount(config_.experts)},
      .uploads = {uploads_.data(), ucount(misses)},
      .hits = hits,
      .misses = misses,
      .upload_runs = runs,
      .cached = cached,
  };
}

}  // namespace wisp
