// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `expert_placement`: where the experts of a MoE model live under expert parallelism (EP)
/// over `ranks` GPUs, per layer, with replicas, in the vocabulary of the engines.
///
/// Each rank holds, for every MoE layer, up to `local_experts` **physical experts** (local ids
/// `0 .. local_experts - 1`: the rows of that rank's expert tensors). Each physical expert is a
/// **replica** of one logical expert (the router's id). A logical expert has at least one replica
/// and at most one per rank; with redundant experts (EPLB) a hot one has several.
///
/// Import and export use vLLM's per-rank `expert_map` convention: for one (rank, layer), an
/// `int32[experts]` mapping every global logical id to its local id on that rank, or -1 when the
/// rank holds no replica of it. `linear` is vLLM's default placement without redundancy
/// (`determine_expert_map(..., "linear")`: contiguous blocks, the remainder to the first ranks).
/// @code
/// // 2 ranks, 1 layer, 4 experts, 3 local experts per rank: expert 0 is replicated.
/// const std::int32_t maps[] = {0, 1, -1, -1,    // rank 0: experts 0 and 1
///                              0, -1, 1, 2};    // rank 1: experts 0, 2 and 3
/// auto p = wisp::expert_placement::from_expert_maps(1, 4, 2, 3, maps);
/// for (const wisp::replica& r : p.replicas(0, 0)) { /* {rank 0, local 0}, {rank 1, local 0} */ }
/// @endcode
///
/// Thread safety: an immutable value type after construction (const members may be called
/// concurrently).
#pragma once

#include <wisp/core/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace wisp {

/// One physical copy of a logical expert: row `local` of rank `rank`'s expert tensors.
struct replica {
  std::int32_t rank = 0;
  std::int32_t local = 0;

  friend constexpr bool operator==(const replica&, const replica&) = default;
};

namespace detail {

/// @brief Checks one (rank, layer) `expert_map` (`int32[experts]`, logical -> local or -1): every
/// value in `[-1, local_experts)`, no local id used twice.
/// @throws wisp::logic_error naming the rank, layer, expert and value otherwise.
inline void check_expert_map(const char* where, std::int32_t rank, std::int32_t layer,
                             std::span<const std::int32_t> map, std::int32_t local_experts,
                             std::vector<std::int32_t>& owner_scratch) {
  owner_scratch.assign(static_cast<std::size_t>(local_experts), -1);
  for (std::size_t e = 0; e < map.size(); ++e) {
    const std::int32_t local = map[e];
    WISP_EXPECTS(local >= -1 && local < local_experts, where, ": rank ", rank, ", layer ", layer,
                 ": expert_map[", e, "] = ", local,
                 " is outside [-1, local_experts = ", local_experts, ")");
    if (local < 0) {
      continue;
    }
    std::int32_t& owner = owner_scratch[static_cast<std::size_t>(local)];
    WISP_EXPECTS(owner < 0, where, ": rank ", rank, ", layer ", layer, ": experts ", owner, " and ",
                 e, " both map to local id ", local, " (duplicate slot)");
    owner = static_cast<std::int32_t>(e);
  }
}

/// Checks the dimensions shared by every placement and rank map.
inline void check_ep_dims(const char* where, std::int32_t layers, std::int32_t experts,
                          std::int32_t ranks, std::int32_t local_experts) {
  WISP_EXPECTS(layers >= 1, where, ": layers must be >= 1, got ", layers);
  WISP_EXPECTS(experts >= 1, where, ": experts must be >= 1, got ", experts);
  WISP_EXPECTS(ranks >= 1, where, ": ranks must be >= 1, got ", ranks);
  WISP_EXPECTS(local_experts >= 1, where, ": local_experts must be >= 1, got ", local_experts);
  const std::int64_t entries = std::int64_t{layers} * ranks * std::max(experts, local_experts);
  WISP_EXPECTS(entries <= (std::int64_t{1} << 31), where, ": layers x ranks x experts = ", entries,
               " is too large (at most 2^31 map entries)");
}

}  // namespace detail

/// @brief A placement of every layer's logical experts on `ranks` ranks (see the file comment).
///
/// Construction validates everything and is O(layers x ranks x (experts + local_experts));
/// queries are O(1). Copyable and movable.
class expert_placement {
 public:
  /// @brief vLLM's linear placement without redundancy: rank `r` holds the contiguous block of
  /// `experts / ranks` logical experts (one more for the first `experts % ranks` ranks), local ids
  /// in logical order, the same in every layer. `local_experts() = ceil(experts / ranks)`.
  /// @throws wisp::logic_error if a count is not positive.
  [[nodiscard]] static expert_placement linear(std::int32_t layers, std::int32_t experts,
                                               std::int32_t ranks) {
    detail::check_ep_dims("expert_placement::linear", layers, experts, ranks, 1);
    const std::int32_t base = experts / ranks;
    const std::int32_t extra = experts % ranks;
    expert_placement p(layers, experts, ranks, base + (extra > 0 ? 1 : 0));
    for (std::int32_t l = 0; l < layers; ++l) {
      for (std::int32_t r = 0; r < ranks; ++r) {
        const std::int32_t first = r * base + std::min(r, extra);
        const std::int32_t count = base + (r < extra ? 1 : 0);
        std::int32_t* map = p.map_data(r, l);
        for (std::int32_t i = 0; i < count; ++i) {
          map[first + i] = i;
        }
      }
    }
    p.index();
    return p;
  }

  /// @brief A placement from the ranks holding each logical expert: `replica_ranks[l * experts +
  /// e]` lists the ranks with a replica of expert `e` of layer `l`. Local ids are given on each
  /// (rank, layer) in increasing logical order.
  /// @throws wisp::logic_error, naming the values, if a count is not positive,
  ///   `replica_ranks.size() != layers * experts`, a rank is outside `[0, ranks)`, an expert has
  ///   no replica or two on one rank, or a rank would hold more than `local_experts` experts of a
  ///   layer.
  [[nodiscard]] static expert_placement from_replica_ranks(
      std::int32_t layers, std::int32_t experts, std::int32_t ranks, std::int32_t local_experts,
      std::span<const std::vector<std::int32_t>> replica_ranks) {
    constexpr const char* where = "expert_placement::from_replica_ranks";
    detail::check_ep_dims(where, layers, experts, ranks, local_experts);
    WISP_EXPECTS(replica_ranks.size() == static_cast<std::size_t>(layers) * experts, where,
                 ": replica_ranks has ", replica_ranks.size(),
                 " entries but layers x experts = ", layers, " x ", experts, " = ",
                 static_cast<std::int64_t>(layers) * experts);
    expert_placement p(layers, experts, ranks, local_experts);
    std::vector<std::int32_t> used(static_cast<std::size_t>(ranks));
    for (std::int32_t l = 0; l < layers; ++l) {
      std::fill(used.begin(), used.end(), 0);
      for (std::int32_t e = 0; e < experts; ++e) {
        const auto& holders = replica_ranks[static_cast<std::size_t>(l) * experts + e];
        WISP_EXPECTS(!holders.empty(), where, ": layer ", l, ", expert ", e, " has no replica");
        for (const std::int32_t r : holders) {
          WISP_EXPECTS(r >= 0 && r < ranks, where, ": layer ", l, ", expert ", e, ": replica rank ",
                       r, " is outside [0, ranks = ", ranks, ")");
          std::int32_t& local = p.map_data(r, l)[e];
          WISP_EXPECTS(local < 0, where, ": layer ", l, ", expert ", e,
                       " has two replicas on rank ", r);
          std::int32_t& n = used[static_cast<std::size_t>(r)];
          WISP_EXPECTS(n < local_experts, where, ": layer ", l, ": rank ", r,
                       " would hold more than local_experts = ", local_experts, " experts");
          local = n++;
        }
      }
    }
    p.index();
    return p;
  }

  /// @brief A placement from vLLM-style per-rank expert maps: `expert_maps` is
  /// `int32[layers][ranks][experts]` (row-major), entry `(l, r, e)` the local id of logical expert
  /// `e` on rank `r` in layer `l`, or -1.
  /// @throws wisp::logic_error, naming the values, if a count is not positive, the size is not
  ///   `layers x ranks x experts`, a value is outside `[-1, local_experts)`, two experts of one
  ///   (rank, layer) share a local id, or a logical expert has no replica in some layer.
  [[nodiscard]] static expert_placement from_expert_maps(
      std::int32_t layers, std::int32_t experts, std::int32_t ranks, std::int32_t local_experts,
      std::span<const std::int32_t> expert_maps) {
    constexpr const char* where = "expert_placement::from_expert_maps";
    detail::check_ep_dims(where, layers, experts, ranks, local_experts);
    const std::size_t want = static_cast<std::size_t>(layers) * ranks * experts;
    WISP_EXPECTS(expert_maps.size() == want, where, ": expert_maps holds ", expert_maps.size(),
                 " values but layers x ranks x experts = ", layers, " x ", ranks, " x ", experts,
                 " = ", want);
    std::vector<std::int32_t> owners;
    for (std::int32_t l = 0; l < layers; ++l) {
      for (std::int32_t r = 0; r < ranks; ++r) {
        detail::check_expert_map(where, r, l,
                                 expert_maps.subspan(index_of(l, r, 0, ranks, experts),
                                                     static_cast<std::size_t>(experts)),
                                 local_experts, owners);
      }
    }
    expert_placement p(layers, experts, ranks, local_experts);
    std::copy(expert_maps.begin(), expert_maps.end(), p.maps_.begin());
    p.index();
    return p;
  }

  [[nodiscard]] std::int32_t layers() const noexcept { return layers_; }
  [[nodiscard]] std::int32_t experts() const noexcept { return experts_; }
  [[nodiscard]] std::int32_t ranks() const noexcept { return ranks_; }
  /// Physical experts each rank can hold per layer (rows of its expert tensors).
  [[nodiscard]] std::int32_t local_experts() const noexcept { return local_experts_; }

  /// @brief The replicas of logical expert `expert` of `layer`, by increasing rank. O(1).
  /// @throws wisp::logic_error if the layer or expert is out of range.
  [[nodiscard]] std::span<const replica> replicas(std::int32_t layer, std::int32_t expert) const {
    check_expert("expert_placement::replicas", layer, expert);
    const std::size_t i = static_cast<std::size_t>(layer) * experts_ + expert;
    return {replicas_.data() + offsets_[i],
            static_cast<std::size_t>(offsets_[i + 1] - offsets_[i])};
  }
  /// Replicas of every expert of `layer` (its physical experts). @throws on a bad layer.
  [[nodiscard]] std::int32_t physical_experts(std::int32_t layer) const {
    check_layer("expert_placement::physical_experts", layer);
    const std::size_t i = static_cast<std::size_t>(layer) * experts_;
    return offsets_[i + static_cast<std::size_t>(experts_)] - offsets_[i];
  }

  /// @brief The vLLM `expert_map` of (`rank`, `layer`): `int32[experts]`, logical id -> local id
  /// or -1. A view into the placement. O(1).
  /// @throws wisp::logic_error if the rank or layer is out of range.
  [[nodiscard]] std::span<const std::int32_t> expert_map(std::int32_t rank,
                                                         std::int32_t layer) const {
    check_rank("expert_placement::expert_map", rank);
    check_layer("expert_placement::expert_map", layer);
    return {maps_.data() + index_of(layer, rank, 0, ranks_, experts_),
            static_cast<std::size_t>(experts_)};
  }
  /// Every expert map, `int32[layers][ranks][experts]`: what `from_expert_maps` reads back.
  [[nodiscard]] std::span<const std::int32_t> expert_maps() const noexcept { return maps_; }

  /// @brief The logical expert in row `local` of `rank`'s tensors for `layer`, or -1 if that row
  /// holds none. O(1). @throws wisp::logic_error on an out-of-range rank, layer or local id.
  [[nodiscard]] std::int32_t logical_of(std::int32_t rank, std::int32_t layer,
                                        std::int32_t local) const {
    check_rank("expert_placement::logical_of", rank);
    check_layer("expert_placement::logical_of", layer);
    WISP_EXPECTS(local >= 0 && local < local_experts_, "expert_placement::logical_of: local id ",
                 local, " is outside [0, local_experts = ", local_experts_, ")");
    return logical_[index_of(layer, rank, local, ranks_, local_experts_)];
  }
  /// Physical experts `rank` holds in `layer`. O(local_experts). @throws on a bad rank or layer.
  [[nodiscard]] std::int32_t held(std::int32_t rank, std::int32_t layer) const {
    check_rank("expert_placement::held", rank);
    check_layer("expert_placement::held", layer);
    const auto* row = logical_.data() + index_of(layer, rank, 0, ranks_, local_experts_);
    return static_cast<std::int32_t>(
        std::count_if(row, row + local_experts_, [](std::int32_t e) { return e >= 0; }));
  }

  friend bool operator==(const expert_placement& a, const expert_placement& b) noexcept {
    return a.layers_ == b.layers_ && a.experts_ == b.experts_ && a.ranks_ == b.ranks_ &&
           a.local_experts_ == b.local_experts_ && a.maps_ == b.maps_;
  }

 private:
  expert_placement(std::int32_t layers, std::int32_t experts, std::int32_t ranks,
                   std::int32_t local_experts)
      : layers_(layers),
        experts_(experts),
        ranks_(ranks),
        local_experts_(local_experts),
        maps_(static_cast<std::size_t>(layers) * ranks * experts, -1) {}

  static std::size_t index_of(std::int32_t layer, std::int32_t rank, std::int32_t i,
                              std::int32_t ranks, std::int32_t width) noexcept {
    return (static_cast<std::size_t>(layer) * ranks + rank) * width + i;
  }
  std::int32_t* map_data(std::int32_t rank, std::int32_t layer) noexcept {
    return maps_.data() + index_of(layer, rank, 0, ranks_, experts_);
  }

  // Builds the local -> logical rows and the replica lists from maps_; checks coverage.
  void index() {
    logical_.assign(static_cast<std::size_t>(layers_) * ranks_ * local_experts_, -1);
    offsets_.assign(static_cast<std::size_t>(layers_) * experts_ + 1, 0);
    for (std::int32_t l = 0; l < layers_; ++l) {
      for (std::int32_t r = 0; r < ranks_; ++r) {
        const std::int32_t* map = map_data(r, l);
        for (std::int32_t e = 0; e < experts_; ++e) {
          if (map[e] >= 0) {
            logical_[index_of(l, r, map[e], ranks_, local_experts_)] = e;
            ++offsets_[static_cast<std::size_t>(l) * experts_ + e + 1];
          }
        }
      }
      for (std::int32_t e = 0; e < experts_; ++e) {
        WISP_EXPECTS(offsets_[static_cast<std::size_t>(l) * experts_ + e + 1] > 0,
                     "expert_placement: layer ", l, ", logical expert ", e,
                     " has no replica (every rank's expert_map holds -1 for it)");
      }
    }
    for (std::size_t i = 1; i < offsets_.size(); ++i) {
      offsets_[i] += offsets_[i - 1];
    }
    replicas_.resize(static_cast<std::size_t>(offsets_.back()));
    std::vector<std::int32_t> next(offsets_.begin(), offsets_.end() - 1);
    for (std::int32_t l = 0; l < layers_; ++l) {
      for (std::int32_t r = 0; r < ranks_; ++r) {  // by rank: each list comes out sorted
        const std::int32_t* map = map_data(r, l);
        for (std::int32_t e = 0; e < experts_; ++e) {
          if (map[e] >= 0) {
            replicas_[static_cast<std::size_t>(
                next[static_cast<std::size_t>(l) * experts_ + e]++)] = {r, map[e]};
          }
        }
      }
    }
  }

  void check_layer(const char* where, std::int32_t layer) const {
    WISP_EXPECTS(layer >= 0 && layer < layers_, where, ": layer ", layer,
                 " is outside [0, layers = ", layers_, ")");
  }
  void check_rank(const char* where, std::int32_t rank) const {
    WISP_EXPECTS(rank >= 0 && rank < ranks_, where, ": rank ", rank,
                 " is outside [0, ranks = ", ranks_, ")");
  }
  void check_expert(const char* where, std::int32_t layer, std::int32_t expert) const {
    check_layer(where, layer);
    WISP_EXPECTS(expert >= 0 && expert < experts_, where, ": expert ", expert,
                 " is outside [0, experts = ", experts_, ")");
  }

  std::int32_t layers_ = 1;
  std::int32_t experts_ = 1;
  std::int32_t ranks_ = 1;
  std::int32_t local_experts_ = 1;
  std::vector<std::int32_t> maps_;     // [layers][ranks][experts]: logical -> local or -1
  std::vector<std::int32_t> logical_;  // [layers][ranks][local_experts]: local -> logical or -1
  std::vector<std::int32_t> offsets_;  // [layers * experts + 1]: replica list bounds
  std::vector<replica> replicas_;      // every replica, grouped by (layer, expert), by rank
};

}  // namespace wisp
