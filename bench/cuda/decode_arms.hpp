// SPDX-License-Identifier: Apache-2.0
// The arms of the GPU decode benchmark as host rules. For each layer call a rule says which rows
// of the device's slot arena the fused-MoE kernel reads (the expert map over a view of the
// arena, or the layer's pinned masters), which masters are copied into those rows first, which
// experts the host computes instead, and what the call hit and missed. The GPU driver
// (decode_run.cuh) executes exactly these decisions (wisp-graph's are made on the device by the
// same step as `device_step_rule`). Host-safe: the host tests replay every rule on the ESFT trace
// against the host pager, llama_cpp_cache and an `arena_mirror`, which checks that every routed
// expert is computed once: read from a row that holds its bytes, or by the host.
#pragma once

#include "decode_model.hpp"

#include <wisp/cache/lru.hpp>
#include <wisp/cache/visit_policy.hpp>
#include <wisp/core/error.hpp>
#include <wisp/core/topk.hpp>
#include <wisp/cuda/pager_step.hpp>
#include <wisp/pager/hybrid.hpp>
#include <wisp/pager/llama_cpp_cache.hpp>
#include <wisp/pager/pager.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace wisp::bench {

/// The arms, in the order the reports list them.
enum class decode_arm : std::int32_t {
  layer_offload,    ///< whole layers resident, the others read from pinned memory (vLLM)
  on_demand,        ///< exactly the routed experts copied each call
  static_hot,       ///< the history's hottest experts pinned, staging rows for the rest
  llama_cpp_cache,  ///< llama.cpp's upstream cache: global LRU, sorted misses
  cpu_moe_layers,   ///< llama.cpp `--n-cpu-moe N`: the first N layers' experts on the host
  cpu_experts,      ///< KTransformers: the hottest experts resident, the host computes the rest
  wisp,             ///< the host pager, the trace's best policy, per-layer caches
  pager_hybrid,     ///< wisp's pager, each miss copied or computed by the host (hybrid_splitter)
  wisp_graph,       ///< the device pager: step, copies and MoE of every layer in one graph
  all_resident,     ///< every expert in device memory: the upper bound
};
inline constexpr std::array<decode_arm, 10> decode_arms{
    decode_arm::layer_offload,  decode_arm::on_demand,
    decode_arm::static_hot,     decode_arm::llama_cpp_cache,
    decode_arm::cpu_moe_layers, decode_arm::cpu_experts,
    decode_arm::wisp,           decode_arm::pager_hybrid,
    decode_arm::wisp_graph,     decode_arm::all_resident};

[[nodiscard]] constexpr std::string_view arm_name(decode_arm a) noexcept {
  constexpr std::array<std::string_view, 10> names{
      "layer-offload", "on-demand", "static-hot",   "llama.cpp-cache", "cpu-moe-layers",
      "cpu-experts",   "wisp",      "pager+hybrid", "wisp-graph",      "all-resident"};
  return names[static_cast<std::size_t>(a)];
}

/// Whether arm `a` computes experts on the host (its outputs are then within
/// `host_swiglu_tolerance` of the reference instead of equal to it).
[[nodiscard]] constexpr bool computes_on_host(decode_arm a) noexcept {
  return a == decode_arm::cpu_moe_layers || a == decode_arm::cpu_experts ||
         a == decode_arm::pager_hybrid;
}

/// The arm named `name` (as `arm_name` spells it). O(arms).
/// @throws wisp::logic_error naming `name` and listing the arms.
[[nodiscard]] inline decode_arm arm_named(std::string_view name) {
  for (const decode_arm a : decode_arms) {
    if (arm_name(a) == name) {
      return a;
    }
  }
  WISP_FAIL(logic_error, "unknown arm '", name,
            "' (layer-offload, on-demand, static-hot, llama.cpp-cache, cpu-moe-layers, "
            "cpu-experts, wisp, pager+hybrid, wisp-graph, all-resident)");
}

/// @brief One layer call as an arm decided it: the view of memory its kernel reads, the map
/// into that view, the copies that must land first, the experts the host computes, and the
/// counts.
struct layer_call {
  /// `int32[experts]`: the row (within the view) of each expert the kernel may read, else -1.
  std::span<const std::int32_t> map;
  /// Masters to copy before the kernel runs: master `expert` into row `slot` of the view.
  std::span<const copy_op> copies;
  std::int64_t first_row = 0;  ///< the view: arena rows `[first_row, first_row + rows)`
  std::int64_t rows = 0;
  bool masters = false;        ///< the kernel reads the layer's pinned masters (UVA) instead
  std::int32_t hits = 0;       ///< distinct experts found in device memory
  std::int32_t misses = 0;     ///< distinct experts that were not (copied, read over the link, or
                               ///< computed by the host)
  std::int32_t link_rows = 0;  ///< expert rows that crossed the link for this call
  /// Distinct experts the host computes from their masters (hidden in `map`); their outputs
  /// join the layer's on the device.
  std::span<const std::int32_t> host{};
};

/// One arena row's content: expert `expert` of layer `layer`.
struct arena_row {
  std::int64_t row = 0;
  std::int32_t layer = 0;
  std::int32_t expert = 0;
};

/// @brief The distinct ids of a call in first-seen order (generation stamps, no clearing).
class distinct_ids {
 public:
  explicit distinct_ids(std::int32_t experts) : seen_(static_cast<std::size_t>(experts), 0) {}
  /// @throws wisp::logic_error naming the first id outside `[0, experts)`.
  std::span<const std::int32_t> operator()(std::span<const std::int32_t> ids) {
    if (++generation_ == 0) {
      std::fill(seen_.begin(), seen_.end(), 0u);
      generation_ = 1;
    }
    list_.clear();
    for (const std::int32_t id : ids) {
      WISP_EXPECTS(id >= 0 && static_cast<std::size_t>(id) < seen_.size(), "routed id ", id,
                   " is outside [0, ", seen_.size(), ")");
      if (seen_[static_cast<std::size_t>(id)] != generation_) {
        seen_[static_cast<std::size_t>(id)] = generation_;
        list_.push_back(id);
      }
    }
    return list_;
  }

 private:
  std::vector<std::uint32_t> seen_;
  std::uint32_t generation_ = 0;
  std::vector<std::int32_t> list_;
};

namespace detail {
[[nodiscard]] inline std::vector<std::int32_t> identity_map(std::int32_t experts) {
  std::vector<std::int32_t> m(static_cast<std::size_t>(experts));
  std::iota(m.begin(), m.end(), 0);
  return m;
}
}  // namespace detail

/// layer-offload (vLLM `--cpu-offload-gb`): as many whole layers resident as the budget's rows
/// hold (`layers x capacity / experts`), the last layers (vLLM offloads parameters in model order
/// until its offload budget is spent); the other layers' kernels read their routed experts from
/// the pinned masters through UVA, so every routed position's row crosses the link on every
/// call. The maps are the identity and never change.
class offload_rule {
 public:
  static constexpr bool ids_on_host = false;  ///< no decision depends on the routing
  static constexpr bool static_map = true;

  offload_rule(const moe_shape& shape, std::int32_t capacity)
      : shape_(shape),
        resident_(static_cast<std::int32_t>(static_cast<std::int64_t>(shape.layers) * capacity /
                                            shape.experts)),
        identity_(detail::identity_map(shape.experts)),
        distinct_(shape.experts) {}

  void begin_token(std::uint32_t /*position*/) noexcept {}
  layer_call call(std::int32_t layer, std::span<const std::int32_t> ids) {
    const auto d = static_cast<std::int32_t>(distinct_(ids).size());
    if (resident(layer)) {
      return {identity_, {}, first_row(layer), shape_.experts, false, d, 0, 0};
    }
    return {identity_, {}, 0, shape_.experts, true, 0, d, static_cast<std::int32_t>(ids.size())};
  }
  [[nodiscard]] bool resident(std::int32_t layer) const noexcept {
    return layer >= shape_.layers - resident_;
  }
  [[nodiscard]] std::int32_t resident_layers() const noexcept { return resident_; }
  [[nodiscard]] std::int64_t first_row(std::int32_t layer) const noexcept {
    return static_cast<std::int64_t>(layer - (shape_.layers - resident_)) * shape_.experts;
  }
  [[nodiscard]] std::vector<arena_row> preload() const {
    std::vector<arena_row> rows;
    for (std::int32_t l = shape_.layers - resident_; l < shape_.layers; ++l) {
      for (std::int32_t e = 0; e < shape_.experts; ++e) {
        rows.push_back({first_row(l) + e, l, e});
      }
    }
    return rows;
  }
  [[nodiscard]] std::int64_t arena_rows() const noexcept {
    return static_cast<std::int64_t>(resident_) * shape_.experts;
  }

 private:
  moe_shape shape_;
  std::int32_t resident_;
  std::vector<std::int32_t> identity_;
  distinct_ids distinct_;
};

/// on-demand: every call copies exactly its distinct experts into `staging` rows shared by all
/// layers (first-seen order), nothing is reused.
class on_demand_rule {
 public:
  static constexpr bool ids_on_host = true;
  static constexpr bool static_map = false;

  on_demand_rule(const moe_shape& shape, std::int32_t staging)
      : staging_(staging),
        map_(static_cast<std::size_t>(shape.experts), -1),
        distinct_(shape.experts) {
    WISP_EXPECTS(staging >= shape.top_k, "on-demand: ", staging, " staging rows for top-",
                 shape.top_k);
  }
  void begin_token(std::uint32_t /*position*/) noexcept {}
  layer_call call(std::int32_t, std::span<const std::int32_t> ids) {
    for (const copy_op& c : copies_) {
      map_[static_cast<std::size_t>(c.expert)] = -1;
    }
    copies_.clear();
    const std::span<const std::int32_t> d = distinct_(ids);
    WISP_EXPECTS(d.size() <= static_cast<std::size_t>(staging_), "on-demand: ", d.size(),
                 " distinct experts for ", staging_, " staging rows");
    for (const std::int32_t e : d) {
      const auto row = static_cast<std::int32_t>(copies_.size());
      copies_.push_back({e, row});
      map_[static_cast<std::size_t>(e)] = row;
    }
    const auto n = static_cast<std::int32_t>(d.size());
    return {map_, copies_, 0, staging_, false, 0, n, n};
  }
  [[nodiscard]] std::vector<arena_row> preload() const { return {}; }
  [[nodiscard]] std::int64_t arena_rows() const noexcept { return staging_; }

 private:
  std::int32_t staging_;
  std::vector<std::int32_t> map_;
  std::vector<copy_op> copies_;
  distinct_ids distinct_;
};

/// Counts of each expert over tokens `[begin, end)` of the routing: `[layers x experts]`.
[[nodiscard]] inline std::vector<std::uint64_t> expert_counts(const decode_routing& r,
                                                              std::int32_t begin,
                                                              std::int32_t end) {
  std::vector<std::uint64_t> counts(
      static_cast<std::size_t>(r.shape.layers) * static_cast<std::size_t>(r.shape.experts), 0);
  for (std::int32_t t = begin; t < end; ++t) {
    for (std::int32_t l = 0; l < r.shape.layers; ++l) {
      for (const std::int32_t e : r.ids_of(t, l)) {
        ++counts[static_cast<std::size_t>(l) * static_cast<std::size_t>(r.shape.experts) +
                 static_cast<std::size_t>(e)];
      }
    }
  }
  return counts;
}

/// @brief Per layer, the `n` experts routed most often in the history (`counts`,
/// `[layers x experts]`; ties to the lower id) pinned in rows `[0, n)` of the layer's
/// `capacity` rows, in rank order: static-hot's and cpu-experts' resident experts.
class hot_set {
 public:
  /// O(layers x experts log experts). @throws wisp::logic_error if `counts` has the wrong size.
  hot_set(const moe_shape& shape, std::int32_t capacity, std::int32_t n,
          std::span<const std::uint64_t> counts)
      : shape_(shape),
        capacity_(capacity),
        row_(static_cast<std::size_t>(shape.layers) * static_cast<std::size_t>(shape.experts), -1) {
    WISP_EXPECTS(counts.size() == row_.size(), "hot_set: ", counts.size(), " counts for ",
                 row_.size(), " experts");
    std::vector<std::int32_t> order(static_cast<std::size_t>(shape.experts));
    for (std::int32_t l = 0; l < shape.layers; ++l) {
      const std::uint64_t* c = counts.data() + index(l, 0);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [c](std::int32_t a, std::int32_t b) { return c[a] > c[b]; });
      for (std::int32_t rank = 0; rank < std::min(n, shape.experts); ++rank) {
        row_[index(l, order[static_cast<std::size_t>(rank)])] = rank;
      }
    }
  }
  /// The row of `expert` within `layer`'s rows, or -1 when it is not pinned. O(1).
  [[nodiscard]] std::int32_t row(std::int32_t layer, std::int32_t expert) const {
    return row_[index(layer, expert)];
  }
  /// Every pinned expert at its arena row (`layer x capacity + row`).
  [[nodiscard]] std::vector<arena_row> preload() const {
    std::vector<arena_row> rows;
    for (std::int32_t l = 0; l < shape_.layers; ++l) {
      for (std::int32_t e = 0; e < shape_.experts; ++e) {
        if (const std::int32_t r = row(l, e); r >= 0) {
          rows.push_back({static_cast<std::int64_t>(l) * capacity_ + r, l, e});
        }
      }
    }
    return rows;
  }
  [[nodiscard]] std::int64_t arena_rows() const noexcept {
    return static_cast<std::int64_t>(shape_.layers) * capacity_;
  }

 private:
  [[nodiscard]] std::size_t index(std::int32_t layer, std::int32_t expert) const noexcept {
    return static_cast<std::size_t>(layer) * static_cast<std::size_t>(shape_.experts) +
           static_cast<std::size_t>(expert);
  }

  moe_shape shape_;
  std::int32_t capacity_;
  std::vector<std::int32_t> row_;  // [layers x experts]: pinned row, or -1
};

/// static-hot: per layer, the `capacity - staging` experts routed most often in the history
/// (`counts`, ties to the lower id) are pinned in rows `[0, hot)` of the layer's `capacity` rows,
/// in rank order; the other experts of a call are copied into the `staging` rows after them.
class static_hot_rule {
 public:
  static constexpr bool ids_on_host = true;
  static constexpr bool static_map = false;

  /// @throws wisp::logic_error if `staging` is outside `[top_k, capacity]` or `counts` has the
  ///   wrong size.
  static_hot_rule(const moe_shape& shape, std::int32_t capacity, std::int32_t staging,
                  std::span<const std::uint64_t> counts)
      : capacity_(capacity),
        hot_(capacity - staging),
        pinned_(shape, capacity, capacity - staging, counts),
        map_(static_cast<std::size_t>(shape.experts), -1),
        distinct_(shape.experts) {
    WISP_EXPECTS(staging >= shape.top_k && staging <= capacity, "static-hot: staging ", staging,
                 " must be in [top_k = ", shape.top_k, ", capacity = ", capacity, "]");
  }
  void begin_token(std::uint32_t /*position*/) noexcept {}
  layer_call call(std::int32_t layer, std::span<const std::int32_t> ids) {
    for (const std::int32_t e : shown_) {
      map_[static_cast<std::size_t>(e)] = -1;
    }
    shown_.clear();
    copies_.clear();
    std::int32_t hits = 0;
    for (const std::int32_t e : distinct_(ids)) {
      std::int32_t row = pinned_.row(layer, e);
      if (row >= 0) {
        ++hits;
      } else {
        row = hot_ + static_cast<std::int32_t>(copies_.size());
        WISP_EXPECTS(row < capacity_, "static-hot: more misses in one call than ", capacity_ - hot_,
                     " staging rows");
        copies_.push_back({e, row});
      }
      map_[static_cast<std::size_t>(e)] = row;
      shown_.push_back(e);
    }
    const auto misses = static_cast<std::int32_t>(copies_.size());
    return {map_,   copies_, static_cast<std::int64_t>(layer) * capacity_, capacity_, false, hits,
            misses, misses};
  }
  /// Whether `expert` of `layer` is pinned.
  [[nodiscard]] bool hot(std::int32_t layer, std::int32_t expert) const {
    return pinned_.row(layer, expert) >= 0;
  }
  [[nodiscard]] std::vector<arena_row> preload() const { return pinned_.preload(); }
  [[nodiscard]] std::int64_t arena_rows() const noexcept { return pinned_.arena_rows(); }

 private:
  std::int32_t capacity_;
  std::int32_t hot_;
  hot_set pinned_;
  std::vector<std::int32_t> map_;
  std::vector<std::int32_t> shown_;
  std::vector<copy_op> copies_;
  distinct_ids distinct_;
};

/// llama.cpp-cache: `wisp::llama_cpp_cache` over one global pool of `layers x capacity` rows;
/// the map is the layer's slot map (every resident expert of the layer). A call the cache would
/// bypass (more than 32 tokens, or more distinct experts than the pool) is refused: the
/// benchmark decodes one token at a time and allocates no staging rows.
class llama_rule {
 public:
  static constexpr bool ids_on_host = true;
  static constexpr bool static_map = false;

  llama_rule(const moe_shape& shape, std::int32_t capacity)
      : shape_(shape),
        pool_(shape.layers * capacity),
        cache_({.layers = shape.layers,
                .experts = shape.experts,
                .top_k = shape.top_k,
                .capacity = shape.layers * capacity,
                .scope = cache_scope::global}) {}
  void begin_token(std::uint32_t /*position*/) noexcept {}
  layer_call call(std::int32_t layer, std::span<const std::int32_t> ids) {
    const llama_cpp_plan p =
        cache_.plan(layer, ids, static_cast<std::int32_t>(ids.size()) / shape_.top_k);
    WISP_EXPECTS(p.cached, "llama.cpp-cache: layer ", layer,
                 " bypassed the cache (no staging rows are allocated)");
    upload_runs_ += static_cast<std::uint64_t>(p.upload_runs);
    return {p.expert_map, p.uploads, 0, pool_, false, p.hits, p.misses, p.misses};
  }
  [[nodiscard]] std::vector<arena_row> preload() const { return {}; }
  [[nodiscard]] std::int64_t arena_rows() const noexcept { return pool_; }
  /// Merged uploads so far (consecutive (expert, slot) pairs merged, as llama.cpp issues them).
  [[nodiscard]] std::uint64_t upload_runs() const noexcept { return upload_runs_; }

 private:
  moe_shape shape_;
  std::int32_t pool_;
  llama_cpp_cache cache_;
  std::uint64_t upload_runs_ = 0;
};

/// Whether `Rule`'s calls may list experts for the host (`layer_call::host`): the driver then
/// reads each layer's input and routing weights back with its ids.
template <class Rule>
inline constexpr bool host_compute_v = requires {
  requires Rule::host_compute;
};

/// cpu-moe-layers (llama.cpp `--n-cpu-moe N`): the experts of the first N layers stay in host
/// memory and the host computes every expert routed there; the other layers' experts are all
/// resident, as many whole layers as the budget's rows hold (`layers x capacity / experts`, the
/// same rows as layer-offload). Nothing crosses the link. At batch 1 llama.cpp computes a host
/// layer on the host (it offloads host weights to the GPU only for 32 rows and more), so the
/// benchmark's one-token calls never stage.
class cpu_moe_layers_rule {
 public:
  static constexpr bool ids_on_host = true;  // the host reads the routing of its layers
  static constexpr bool static_map = false;
  static constexpr bool host_compute = true;

  cpu_moe_layers_rule(const moe_shape& shape, std::int32_t capacity)
      : shape_(shape),
        offload_(shape, capacity),
        hidden_(static_cast<std::size_t>(shape.experts), -1),
        distinct_(shape.experts) {}

  void begin_token(std::uint32_t /*position*/) noexcept {}
  layer_call call(std::int32_t layer, std::span<const std::int32_t> ids) {
    if (offload_.resident(layer)) {
      return offload_.call(layer, ids);  // the same resident layers as layer-offload's
    }
    const std::span<const std::int32_t> d = distinct_(ids);
    return {hidden_, {}, 0, 0, false, 0, static_cast<std::int32_t>(d.size()), 0, d};
  }
  /// Layers `[0, host_layers())` are computed by the host.
  [[nodiscard]] std::int32_t host_layers() const noexcept {
    return shape_.layers - offload_.resident_layers();
  }
  [[nodiscard]] std::vector<arena_row> preload() const { return offload_.preload(); }
  [[nodiscard]] std::int64_t arena_rows() const noexcept { return offload_.arena_rows(); }

 private:
  moe_shape shape_;
  offload_rule offload_;
  std::vector<std::int32_t> hidden_;  // every expert hidden: the device computes nothing
  distinct_ids distinct_;
};

/// cpu-experts (KTransformers; llama.cpp `-ot exps=CPU` with hot experts kept on the GPU): per
/// layer the `capacity` experts routed most often in the history are resident in rows
/// `[0, capacity)` of the layer's rows (rank order, as `static-hot` pins them but without staging
/// rows); every other routed expert is computed by the host from its master. Nothing crosses the
/// link and nothing adapts while serving.
class cpu_experts_rule {
 public:
  static constexpr bool ids_on_host = true;
  static constexpr bool static_map = false;
  static constexpr bool host_compute = true;

  /// @throws wisp::logic_error if `counts` has the wrong size.
  cpu_experts_rule(const moe_shape& shape, std::int32_t capacity,
                   std::span<const std::uint64_t> counts)
      : capacity_(capacity),
        resident_(shape, capacity, capacity, counts),
        map_(static_cast<std::size_t>(shape.experts), -1),
        distinct_(shape.experts) {}

  void begin_token(std::uint32_t /*position*/) noexcept {}
  layer_call call(std::int32_t layer, std::span<const std::int32_t> ids) {
    for (const std::int32_t e : shown_) {
      map_[static_cast<std::size_t>(e)] = -1;
    }
    shown_.clear();
    host_.clear();
    for (const std::int32_t e : distinct_(ids)) {
      const std::int32_t row = resident_.row(layer, e);
      if (row >= 0) {
        map_[static_cast<std::size_t>(e)] = row;
        shown_.push_back(e);
      } else {
        host_.push_back(e);
      }
    }
    return {map_,
            {},
            static_cast<std::int64_t>(layer) * capacity_,
            capacity_,
            false,
            static_cast<std::int32_t>(shown_.size()),
            static_cast<std::int32_t>(host_.size()),
            0,
            host_};
  }
  [[nodiscard]] std::vector<arena_row> preload() const { return resident_.preload(); }
  [[nodiscard]] std::int64_t arena_rows() const noexcept { return resident_.arena_rows(); }

 private:
  std::int32_t capacity_;
  hot_set resident_;
  std::vector<std::int32_t> map_;
  std::vector<std::int32_t> shown_;
  std::vector<std::int32_t> host_;
  distinct_ids distinct_;
};

/// wisp: `pager<Policy>` with one cache of `capacity` slots per layer, in rows
/// `[layer x capacity, (layer + 1) x capacity)`; the map shows exactly the call's experts.
template <eviction_policy Policy>
class pager_rule {
 public:
  static constexpr bool ids_on_host = true;
  static constexpr bool static_map = false;

  pager_rule(const moe_shape& shape, std::int32_t capacity)
      : shape_(shape),
        capacity_(capacity),
        pager_({.layers = shape.layers,
                .experts = shape.experts,
                .top_k = shape.top_k,
                .capacity = capacity}) {}
  void begin_token(std::uint32_t position) noexcept {
    pager_.begin_step();
    position_ = position;
  }
  layer_call call(std::int32_t layer, std::span<const std::int32_t> ids) {
    const prepare_result r =
        pager_.prepare(layer, ids, static_cast<std::int32_t>(ids.size()) / shape_.top_k,
                       shape_.top_k, std::span<const std::uint32_t>(&position_, 1));
    return {r.expert_map, r.copy_plan, static_cast<std::int64_t>(layer) * capacity_,
            capacity_,    false,       r.hits,
            r.misses,     r.misses};
  }
  [[nodiscard]] std::vector<arena_row> preload() const { return {}; }
  [[nodiscard]] std::int64_t arena_rows() const noexcept {
    return static_cast<std::int64_t>(shape_.layers) * capacity_;
  }

 private:
  moe_shape shape_;
  std::int32_t capacity_;
  pager<Policy> pager_;
  std::uint32_t position_ = 0;  // the current token's position in its sequence
};

/// pager+hybrid: `pager<Policy>` as `pager_rule` keeps it, each call's misses split between
/// copies into the cache and host compute by `wisp::hybrid_splitter`, as wisp-engine's
/// `pager+hybrid` splits them, under `cost` (the run's measured link and host rates; the host's
/// side then follows the host calls the driver times, `observe_host`, through
/// `wisp::host_cost_tracker`). A copied miss is worth its expected hits before eviction
/// (`wisp::reuse_value_estimator` over the layer's calls, in units of `cost.miss_seconds()`) less
/// what it evicts (`wisp::eviction_losses`), so an expert about to be reused is copied and a
/// one-off one goes to the host. Host experts never enter the cache. Both queues are empty when a
/// layer is decided: the driver synchronises every layer.
template <eviction_policy Policy>
class hybrid_pager_rule {
 public:
  static constexpr bool ids_on_host = true;
  static constexpr bool static_map = false;
  static constexpr bool host_compute = true;

  /// @throws wisp::logic_error on an invalid `cost` (`hybrid_cost_model::validate`) or
  ///   `value_rate` outside (0, 1].
  hybrid_pager_rule(const moe_shape& shape, std::int32_t capacity, const hybrid_cost_model& cost,
                    double value_rate = 0.25)
      : shape_(shape),
        capacity_(capacity),
        host_(cost),
        pager_({.layers = shape.layers,
                .experts = shape.experts,
                .top_k = shape.top_k,
                .capacity = capacity}),
        values_(shape.layers, shape.experts, value_rate),
        hidden_(static_cast<std::size_t>(shape.experts), -1),
        in_call_(static_cast<std::size_t>(shape.experts), 0),
        distinct_(shape.experts) {}
  void begin_token(std::uint32_t position) noexcept {
    pager_.begin_step();
    position_ = position;
  }
  layer_call call(std::int32_t layer, std::span<const std::int32_t> ids) {
    const std::span<const std::int32_t> experts = distinct_(ids);
    for (const std::int32_t e : ids) {
      ++in_call_[static_cast<std::size_t>(e)];
    }
    const hybrid_cost_model& cost = host_.costs();
    const double miss = cost.miss_seconds();
    const auto value = [&](std::int32_t e) {
      return values_.expected_hits(layer, e, capacity_) * miss;
    };
    misses_.clear();
    for (const std::int32_t e : experts) {
      if (pager_.slot_of(layer, e) < 0) {
        misses_.push_back({.expert = e,
                           .positions = in_call_[static_cast<std::size_t>(e)],
                           .value_seconds = value(e)});
      }
    }
    resident_values_.clear();  // what a copy may evict: the resident experts the call does not use
    pager_.cache(layer).for_each_resident([&](cache_key e, std::int32_t) {
      if (in_call_[static_cast<std::size_t>(e)] == 0) {
        resident_values_.push_back(value(static_cast<std::int32_t>(e)));
      }
    });
    for (const std::int32_t e : ids) {
      in_call_[static_cast<std::size_t>(e)] = 0;
    }
    eviction_losses(capacity_ - pager_.cache(layer).size(), resident_values_, losses_);
    flags_.resize(misses_.size());
    (void)splitter_.split(cost, {}, misses_, flags_, -1, losses_);
    on_host_.clear();
    for (std::size_t i = 0; i < misses_.size(); ++i) {
      if (flags_[i] == 0) {
        on_host_.push_back(misses_[i].expert);
      }
    }
    device_.clear();
    for (const std::int32_t e : experts) {
      if (std::find(on_host_.begin(), on_host_.end(), e) == on_host_.end()) {
        device_.push_back(e);
      }
    }
    const auto first = static_cast<std::int64_t>(layer) * capacity_;
    const auto n_host = static_cast<std::int32_t>(on_host_.size());
    if (device_.empty()) {
      values_.record_call(layer, experts, 0);
      return {hidden_, {}, first, capacity_, false, 0, n_host, 0, on_host_};
    }
    positions_.assign(device_.size(), position_);
    const prepare_result r =
        pager_.prepare(layer, device_, static_cast<std::int32_t>(device_.size()), 1, positions_);
    values_.record_call(layer, experts, r.misses);
    return {r.expert_map, r.copy_plan,       first,    capacity_, false,
            r.hits,       r.misses + n_host, r.misses, on_host_};
  }
  [[nodiscard]] std::vector<arena_row> preload() const { return {}; }
  [[nodiscard]] std::int64_t arena_rows() const noexcept {
    return static_cast<std::int64_t>(shape_.layers) * capacity_;
  }
  /// The host computed the last call's host experts (`experts` of them, over `positions`) in
  /// `seconds`: the costs of the next splits follow it (`wisp::host_cost_tracker`).
  void observe_host(std::int32_t experts, std::int64_t positions, double seconds) {
    host_.record(experts, positions, seconds);
  }
  /// The costs the next call is split under.
  [[nodiscard]] const hybrid_cost_model& cost() const noexcept { return host_.costs(); }

 private:
  moe_shape shape_;
  std::int32_t capacity_;
  host_cost_tracker host_;
  pager<Policy> pager_;
  reuse_value_estimator values_;
  hybrid_splitter splitter_;
  std::vector<std::int32_t> hidden_;   // every expert hidden: a call the host computes whole
  std::vector<std::int32_t> in_call_;  // [experts]: positions of the current call
  std::vector<hybrid_miss> misses_;
  std::vector<std::uint8_t> flags_;
  std::vector<double> resident_values_, losses_;
  std::vector<std::int32_t> on_host_, device_;
  std::vector<std::uint32_t> positions_;
  distinct_ids distinct_;
  std::uint32_t position_ = 0;
};

/// The device step's policy for wisp-graph when the wisp arm runs the host policy `name`, and why
/// it differs when it does.
struct graph_policy {
  cuda::step_policy policy = cuda::step_policy::lru;
  std::string note;  ///< empty when the device step makes the host policy's very decisions
};

/// The device step policy that makes the decisions of host policy `name` in per-layer scope:
/// `lru` and `least_stale` (which evicts as `lru` per layer) run `lru`, `lfu_history` runs
/// `lfu_history`; any other falls back to `lru`, and the note says so. O(1).
[[nodiscard]] inline graph_policy graph_policy_for(std::string_view name) {
  if (name == lru::name || name == least_stale::name) {
    return {cuda::step_policy::lru, ""};
  }
  if (name == lfu_history::name) {
    return {cuda::step_policy::lfu_history, ""};
  }
  return {cuda::step_policy::lru,
          "the device step has no " + std::string(name) + ": wisp-graph runs lru instead"};
}

/// wisp-graph's decisions, made on the host by the very step the device runs
/// (`host_pager_state`, the form `device_pager` picks): per-layer caches of `capacity` slots
/// under `policy` (LRU by default), in the same rows as `pager_rule`. The GPU driver replays the
/// history with it and loads the result into the `device_pager`, and checks the device's counters
/// against it.
class device_step_rule {
 public:
  static constexpr bool ids_on_host = false;  // on the GPU, the step reads the ids in place
  static constexpr bool static_map = false;

  device_step_rule(const moe_shape& shape, std::int32_t capacity,
                   cuda::step_policy policy = cuda::step_policy::lru)
      : capacity_(capacity),
        state_({.layers = shape.layers,
                .experts = shape.experts,
                .capacity = capacity,
                .policy = policy}) {}
  void begin_token(std::uint32_t /*position*/) noexcept {}
  layer_call call(std::int32_t layer, std::span<const std::int32_t> ids) {
    const cuda::pager_step_status s = state_.step(layer, ids, cuda::step_kernel::automatic);
    WISP_EXPECTS(s == cuda::pager_step_status::ok, "wisp-graph: the step of layer ", layer,
                 " failed with status ", static_cast<std::int32_t>(s));
    const cuda::pager_layer_info& info = state_.info(layer);
    return {state_.map(layer),
            state_.copies(layer),
            static_cast<std::int64_t>(layer) * capacity_,
            capacity_,
            false,
            info.hits,
            info.copies,
            info.copies};
  }
  [[nodiscard]] std::vector<arena_row> preload() const { return {}; }
  [[nodiscard]] std::int64_t arena_rows() const noexcept {
    return static_cast<std::int64_t>(state_.state().layers) * capacity_;
  }
  [[nodiscard]] const cuda::host_pager_state& state() const noexcept { return state_; }

 private:
  std::int32_t capacity_;
  cuda::host_pager_state state_;
};

/// all-resident: every expert of layer `l` in rows `[l x experts, (l + 1) x experts)`, identity
/// maps that never change.
class all_resident_rule {
 public:
  static constexpr bool ids_on_host = false;
  static constexpr bool static_map = true;

  explicit all_resident_rule(const moe_shape& shape)
      : shape_(shape), identity_(detail::identity_map(shape.experts)), distinct_(shape.experts) {}
  void begin_token(std::uint32_t /*position*/) noexcept {}
  layer_call call(std::int32_t layer, std::span<const std::int32_t> ids) {
    const auto d = static_cast<std::int32_t>(distinct_(ids).size());
    return {
        identity_, {}, static_cast<std::int64_t>(layer) * shape_.experts, shape_.experts, false, d,
        0,         0};
  }
  [[nodiscard]] std::vector<arena_row> preload() const {
    std::vector<arena_row> rows;
    for (std::int32_t l = 0; l < shape_.layers; ++l) {
      for (std::int32_t e = 0; e < shape_.experts; ++e) {
        rows.push_back({static_cast<std::int64_t>(l) * shape_.experts + e, l, e});
      }
    }
    return rows;
  }
  [[nodiscard]] std::int64_t arena_rows() const noexcept {
    return static_cast<std::int64_t>(shape_.layers) * shape_.experts;
  }

 private:
  moe_shape shape_;
  std::vector<std::int32_t> identity_;
  distinct_ids distinct_;
};

// ---- the arena's content -------------------------------------------------------------------

/// @brief Which (layer, expert) each row of the device's slot arena holds, as the copies left
/// it. The GPU driver keeps one for the real arena (to copy only the rows an arm needs changed)
/// and the host tests one per replay (to check every call reads the right bytes).
class arena_mirror {
 public:
  arena_mirror(std::int64_t rows, const moe_shape& shape)
      : shape_(shape), key_(static_cast<std::size_t>(rows), -1) {}

  [[nodiscard]] std::int64_t rows() const noexcept {
    return static_cast<std::int64_t>(key_.size());
  }
  /// The key `layer x experts + expert` of `row`'s content, or -1.
  [[nodiscard]] std::int64_t key(std::int64_t row) const { return key_[checked(row)]; }
  [[nodiscard]] std::int64_t key_of(std::int32_t layer, std::int32_t expert) const noexcept {
    return static_cast<std::int64_t>(layer) * shape_.experts + expert;
  }
  void load(const arena_row& r) { key_[checked(r.row)] = key_of(r.layer, r.expert); }
  void clear() { std::fill(key_.begin(), key_.end(), -1); }

  /// @brief Applies `c`'s copies of `layer`'s masters. @throws wisp::logic_error (nothing
  /// changed) if a copy's expert or row is outside the layer or the view, or the view outside
  /// the arena.
  void apply(std::int32_t layer, const layer_call& c) {
    check_view(c);
    for (const copy_op& op : c.copies) {
      WISP_EXPECTS(op.expert >= 0 && op.expert < shape_.experts && op.slot >= 0 && op.slot < c.rows,
                   "layer ", layer, ": copy of expert ", op.expert, " into row ", op.slot,
                   " of a view of ", c.rows, " rows");
    }
    for (const copy_op& op : c.copies) {
      key_[static_cast<std::size_t>(c.first_row + op.slot)] = key_of(layer, op.expert);
    }
  }

  /// @brief Empty when every routed id of `ids` is computed exactly once: by the host (listed
  /// in `c.host` and hidden in the map), or by the kernel of `c` (run after its copies) from a
  /// row that holds that expert of `layer`; else what is wrong with the first that is not.
  [[nodiscard]] std::string check(std::int32_t layer, const layer_call& c,
                                  std::span<const std::int32_t> ids) const {
    if (c.first_row < 0 || c.rows < 0 || c.first_row + c.rows > rows()) {
      return "the view [" + std::to_string(c.first_row) + ", +" + std::to_string(c.rows) +
             ") is outside the arena of " + std::to_string(rows()) + " rows";
    }
    for (const std::int32_t e : c.host) {
      if (std::find(ids.begin(), ids.end(), e) == ids.end()) {
        return "layer " + std::to_string(layer) + ": the host computes expert " +
               std::to_string(e) + ", which the call does not route";
      }
    }
    for (const std::int32_t id : ids) {
      const std::int32_t row = id >= 0 && static_cast<std::size_t>(id) < c.map.size()
                                   ? c.map[static_cast<std::size_t>(id)]
                                   : -1;
      if (std::find(c.host.begin(), c.host.end(), id) != c.host.end()) {  // the host's
        if (row >= 0 && row < c.rows) {
          return "layer " + std::to_string(layer) + ": expert " + std::to_string(id) +
                 " is computed by the host and visible to the kernel (counted twice)";
        }
        continue;
      }
      if (row < 0 || row >= c.rows) {
        return "layer " + std::to_string(layer) + ": routed expert " + std::to_string(id) +
               " is not visible in the map";
      }
      if (c.masters) {
        if (row != id) {
          return "layer " + std::to_string(layer) + ": expert " + std::to_string(id) +
                 " is read from master row " + std::to_string(row);
        }
        continue;
      }
      const std::int64_t held = key_[static_cast<std::size_t>(c.first_row + row)];
      if (held != key_of(layer, id)) {
        return "layer " + std::to_string(layer) + ": expert " + std::to_string(id) +
               " is read from arena row " + std::to_string(c.first_row + row) + ", which holds " +
               (held < 0 ? std::string("nothing")
                         : "expert " + std::to_string(held % shape_.experts) + " of layer " +
                               std::to_string(held / shape_.experts));
      }
    }
    return {};
  }

  /// @brief The copies that make this arena's content `target`'s, per layer: (expert, arena
  /// row) for every row whose content differs and that `target` fills. Rows `target` leaves
  /// empty are not touched. O(rows).
  /// @throws wisp::logic_error if the arenas differ in size.
  [[nodiscard]] std::vector<std::vector<copy_op>> copies_to(const arena_mirror& target) const {
    WISP_EXPECTS(target.rows() == rows(), "arena_mirror::copies_to: ", target.rows(), " rows for ",
                 rows());
    std::vector<std::vector<copy_op>> out(static_cast<std::size_t>(shape_.layers));
    for (std::size_t r = 0; r < key_.size(); ++r) {
      const std::int64_t want = target.key_[r];
      if (want >= 0 && want != key_[r]) {
        out[static_cast<std::size_t>(want / shape_.experts)].push_back(
            {static_cast<std::int32_t>(want % shape_.experts), static_cast<std::int32_t>(r)});
      }
    }
    return out;
  }
  /// This arena after `copies_to(target)` landed. O(rows).
  void take_from(const arena_mirror& target) {
    for (std::size_t r = 0; r < key_.size(); ++r) {
      if (target.key_[r] >= 0) {
        key_[r] = target.key_[r];
      }
    }
  }

 private:
  [[nodiscard]] std::size_t checked(std::int64_t row) const {
    WISP_EXPECTS(row >= 0 && row < rows(), "arena row ", row, " is outside [0, ", rows(), ")");
    return static_cast<std::size_t>(row);
  }
  void check_view(const layer_call& c) const {
    WISP_EXPECTS(c.masters || (c.first_row >= 0 && c.rows >= 0 && c.first_row + c.rows <= rows()),
                 "the view [", c.first_row, ", +", c.rows, ") is outside the arena of ", rows(),
                 " rows");
  }

  moe_shape shape_;
  std::vector<std::int64_t> key_;
};

/// What a replay's calls added up to.
struct call_totals {
  std::uint64_t calls = 0;
  std::uint64_t hits = 0;          ///< distinct experts found in device memory
  std::uint64_t misses = 0;        ///< distinct experts that were not
  std::uint64_t link_rows = 0;     ///< expert rows across the link
  std::uint64_t host_experts = 0;  ///< distinct experts computed by the host
  /// Wall seconds the host spent computing them (the GPU driver's clock; 0 in host replays).
  double host_seconds = 0;
  [[nodiscard]] double hit_rate() const noexcept {
    return hits + misses == 0 ? 0.0
                              : static_cast<double>(hits) / static_cast<double>(hits + misses);
  }
  call_totals& operator+=(const layer_call& c) noexcept {
    ++calls;
    hits += static_cast<std::uint64_t>(c.hits);
    misses += static_cast<std::uint64_t>(c.misses);
    link_rows += static_cast<std::uint64_t>(c.link_rows);
    host_experts += c.host.size();
    return *this;
  }
};

/// @brief Replays tokens `[begin, end)` of `r` through `rule` on the host, applying every call's
/// copies to `mirror`. With `check`, every call must read the right bytes (`arena_mirror::check`).
/// @throws wisp::logic_error naming the token and the problem.
template <class Rule>
call_totals replay(Rule& rule, arena_mirror& mirror, const decode_routing& r, std::int32_t begin,
                   std::int32_t end, bool check = false) {
  call_totals totals;
  for (std::int32_t t = begin; t < end; ++t) {
    rule.begin_token(r.position_of(t));
    for (std::int32_t l = 0; l < r.shape.layers; ++l) {
      const std::span<const std::int32_t> ids = r.ids_of(t, l);
      const layer_call c = rule.call(l, ids);
      mirror.apply(l, c);
      if (check) {
        const std::string problem = mirror.check(l, c, ids);
        WISP_EXPECTS(problem.empty(), "token ", t, ": ", problem);
      }
      totals += c;
    }
  }
  return totals;
}

/// An arm's arena after its preloaded rows (static-hot's pinned experts, layer-offload's
/// resident layers, all-resident's everything).
template <class Rule>
arena_mirror preloaded(const Rule& rule, std::int64_t rows, const moe_shape& shape) {
  arena_mirror m(rows, shape);
  for (const arena_row& r : rule.preload()) {
    m.load(r);
  }
  return m;
}

// ---- wisp's policy ---------------------------------------------------------------------------

/// The policies the wisp arm chooses from: every built-in that `pager` serves online (each of
/// `builtin_policy_names` but `belady`, which needs the future), in the tools' order.
inline constexpr auto wisp_policy_names = [] {
  std::array<std::string_view, std::size(builtin_policy_names) - 1> names{};
  std::size_t n = 0;
  for (const std::string_view name : builtin_policy_names) {
    if (name != belady::name) {
      names[n++] = name;
    }
  }
  return names;
}();

/// Calls `f(std::type_identity<Policy>{})` for the policy `name` of `wisp_policy_names`.
/// @throws wisp::logic_error listing the names if `name` is not one of them.
template <class F>
decltype(auto) visit_wisp_policy(std::string_view name, F&& f) {
  WISP_EXPECTS(name != belady::name, "the wisp arm's policy must be online, got '", name, "'");
  return visit_policy(name, [&]<class P>(std::type_identity<P> policy) -> decltype(auto) {
    if constexpr (std::is_same_v<P, belady>) {
      return f(std::type_identity<lru>{});  // unreachable: refused above; belady needs the future
    } else {
      return f(policy);
    }
  });
}

/// The policy with the fewest misses over a history, and every candidate's misses.
struct policy_choice {
  std::string_view name;
  std::array<std::uint64_t, wisp_policy_names.size()> misses{};
};

/// @brief Replays tokens `[0, tokens)` through `pager_rule<P>` for every policy of
/// `wisp_policy_names` and picks the one with the fewest misses (the first on ties): the best
/// policy for the trace, chosen on the history the timed tokens follow. O(policies x tokens x
/// layers x k).
[[nodiscard]] inline policy_choice choose_wisp_policy(const decode_routing& r,
                                                      std::int32_t capacity, std::int32_t tokens) {
  policy_choice c;
  for (std::size_t i = 0; i < wisp_policy_names.size(); ++i) {
    c.misses[i] = visit_wisp_policy(wisp_policy_names[i], [&]<class P>(std::type_identity<P>) {
      pager_rule<P> rule(r.shape, capacity);
      arena_mirror mirror(rule.arena_rows(), r.shape);
      return replay(rule, mirror, r, 0, tokens).misses;
    });
  }
  const auto best = std::min_element(c.misses.begin(), c.misses.end());
  c.name = wisp_policy_names[static_cast<std::size_t>(best - c.misses.begin())];
  return c;
}

}  // namespace wisp::bench
