// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Splitting a batch whose expert union exceeds a cache capacity: `plan_token_groups`
/// (fewest contiguous row groups whose unions fit; exact) and `plan_expert_groups` (a partition of
/// the union into groups of at most `capacity`; every expert fetched at most once per forward).
///
/// The two split modes of vLLM's `CachedWeightProvider` (`--moe-expert-cache-split token|expert`):
/// - **token**: run the kernel once per row group, each group with its own expert map; output is
///   identical to the unpaged layer (a token's output depends only on its own experts). Cost: one
///   launch per group, approaching one per token as the capacity approaches k.
/// - **expert**: run the whole batch once per expert group with the map hiding the other groups
///   and sum the partial outputs (in fp32); `ceil(union / capacity)` launches whatever the token
///   count, each expert loaded at most once, rounding-level differences from the unpaged layer.
///
/// Never drops an expert: a row that alone needs more than `capacity` experts is an error.
/// @code
/// wisp::group_planner planner(/*experts=*/64, /*max_tokens=*/512, /*max_k=*/8);
/// for (const wisp::token_group& g : planner.plan_token_groups(ids, tokens, k, capacity)) {
///   // rows [g.row_begin, g.row_end) need exactly g.experts (sorted), at most `capacity` of them
/// }
/// @endcode
#pragma once

#include <wisp/cache/eviction_policy.hpp>
#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/core/topk.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace wisp {

/// @brief Rows `[row_begin, row_end)` of a `[tokens x k]` batch and the sorted distinct experts
/// they route to. `experts` views the planner's buffer (valid until its next `plan_*` call).
struct token_group {
  std::int32_t row_begin = 0;
  std::int32_t row_end = 0;
  std::span<const std::int32_t> experts;

  /// Number of rows. O(1).
  [[nodiscard]] constexpr std::int32_t rows() const noexcept { return row_end - row_begin; }
  /// The group's slice of the batch `topk_ids` (row-major, `k` ids per row). O(1).
  template <topk_id Id>
  [[nodiscard]] constexpr std::span<const Id> ids_of(std::span<const Id> topk_ids,
                                                     std::int32_t k) const noexcept {
    return topk_ids.subspan(static_cast<std::size_t>(row_begin) * static_cast<std::size_t>(k),
                            static_cast<std::size_t>(rows()) * static_cast<std::size_t>(k));
  }
};

/// @brief One group of the expert split: the sorted experts that one kernel run may see.
struct expert_group {
  std::span<const std::int32_t> experts;
};

/// @brief Plans token and expert groups for batches over `experts` experts, in buffers it owns.
///
/// - **Buffers.** Sized at construction for `max_tokens x max_k` ids. A larger batch grows them
///   (one allocation, amortised); call `reserve()` at start-up to keep planning allocation-free.
/// - **Lifetime.** Returned spans (and the `experts` spans inside them) view planner-owned buffers
///   and stay valid until the next `plan_*` or `reserve` call on this planner. A call that throws
///   leaves the previous plan valid.
/// - **Thread safety:** none; one thread at a time.
class group_planner {
 public:
  /// An empty planner (`experts() == 0`); assign a sized one before use.
  group_planner() = default;

  /// @param experts     ids are in `[0, experts)`.
  /// @param max_tokens  rows planned without allocation (with `max_k`); may be 0.
  /// @param max_k       ids per row planned without allocation.
  /// @throws wisp::logic_error if `experts < 1`, `max_tokens < 0` or `max_k < 1`; std::bad_alloc.
  explicit group_planner(std::int32_t experts, std::int32_t max_tokens = 0, std::int32_t max_k = 1)
      : experts_(experts) {
    WISP_EXPECTS(experts >= 1, "group_planner: experts must be >= 1, got ", experts);
    WISP_EXPECTS(max_tokens >= 0 && max_k >= 1, "group_planner: max_tokens ", max_tokens,
                 " must be >= 0 and max_k ", max_k, " >= 1");
    seen_ = protect_set(experts);
    reserve(max_tokens, max_k);
  }

  /// Grows the buffers so that batches of up to `tokens x k` ids plan without allocation.
  /// Invalidates previous plans if it grows. @throws std::bad_alloc
  void reserve(std::int32_t tokens, std::int32_t k) {
    const std::size_t ids =
        static_cast<std::size_t>(std::max(tokens, 0)) * static_cast<std::size_t>(std::max(k, 1));
    const std::size_t flat = std::max(ids, static_cast<std::size_t>(experts_));
    if (flat_.size() < flat) {
      flat_.resize(flat);
    }
    const std::size_t groups =
        std::max(static_cast<std::size_t>(std::max(tokens, 0)), static_cast<std::size_t>(experts_));
    if (token_groups_.size() < groups) {
      token_groups_.resize(groups);
    }
    if (expert_groups_.size() < static_cast<std::size_t>(experts_)) {
      expert_groups_.resize(static_cast<std::size_t>(experts_));
    }
  }

  /// @brief Splits rows into the fewest contiguous groups whose expert unions have at most
  /// `capacity` members (greedy; optimal, see the proof in the implementation).
  ///
  /// An empty batch (`tokens == 0`) gives no groups. Groups tile `[0, tokens)` in order. O(tokens
  /// x k + sum over groups of u log u), u = the group's distinct experts.
  /// @throws wisp::logic_error (nothing changed) on a malformed shape, an id outside
  ///   `[0, experts)`, `capacity < 1`, or a row that alone routes to more than `capacity` distinct
  ///   experts ("one token routes to N experts but capacity C").
  std::span<const token_group> plan_token_groups(std::span<const std::int32_t> topk_ids,
                                                 std::int32_t tokens, std::int32_t k,
                                                 std::int32_t capacity) {
    return plan_token_groups_impl(topk_ids, tokens, k, capacity);
  }
  /// @copydoc plan_token_groups
  std::span<const token_group> plan_token_groups(std::span<const std::int64_t> topk_ids,
                                                 std::int32_t tokens, std::int32_t k,
                                                 std::int32_t capacity) {
    return plan_token_groups_impl(topk_ids, tokens, k, capacity);
  }

  /// @brief Partitions the batch's distinct experts into `ceil(union / capacity)` groups of at
  /// most `capacity` (the minimum), independent of the token count.
  ///
  /// Experts for which `is_resident(e)` holds fill the first groups, so that they are served
  /// before later groups can evict them; each group is sorted ascending. An empty batch gives no
  /// groups. O(tokens x k + experts + union log capacity).
  /// @param is_resident `bool(std::int32_t expert)`; pass `[](std::int32_t) { return false; }` for
  ///   a plain ascending partition.
  /// @throws wisp::logic_error (nothing changed) on a malformed shape, an id outside
  ///   `[0, experts)` or `capacity < 1`.
  template <class IsResident>
  std::span<const expert_group> plan_expert_groups(std::span<const std::int32_t> topk_ids,
                                                   std::int32_t tokens, std::int32_t k,
                                                   std::int32_t capacity, IsResident is_resident) {
    return plan_expert_groups_impl(topk_ids, tokens, k, capacity, is_resident);
  }
  /// @copydoc plan_expert_groups
  template <class IsResident>
  std::span<const expert_group> plan_expert_groups(std::span<const std::int64_t> topk_ids,
                                                   std::int32_t tokens, std::int32_t k,
                                                   std::int32_t capacity, IsResident is_resident) {
    return plan_expert_groups_impl(topk_ids, tokens, k, capacity, is_resident);
  }
  /// Plain ascending partition (no residency preference).
  std::span<const expert_group> plan_expert_groups(std::span<const std::int32_t> topk_ids,
                                                   std::int32_t tokens, std::int32_t k,
                                                   std::int32_t capacity) {
    return plan_expert_groups_impl(topk_ids, tokens, k, capacity, no_residency{});
  }
  /// @copydoc plan_expert_groups(std::span<const
  /// std::int32_t>,std::int32_t,std::int32_t,std::int32_t)
  std::span<const expert_group> plan_expert_groups(std::span<const std::int64_t> topk_ids,
                                                   std::int32_t tokens, std::int32_t k,
                                                   std::int32_t capacity) {
    return plan_expert_groups_impl(topk_ids, tokens, k, capacity, no_residency{});
  }

  /// Ids are in `[0, experts())`.
  [[nodiscard]] std::int32_t experts() const noexcept { return experts_; }

 private:
  struct no_residency {
    constexpr bool operator()(std::int32_t /*expert*/) const noexcept { return false; }
  };

  template <topk_id Id>
  void check_batch(const char* where, std::span<const Id> ids, std::int32_t tokens, std::int32_t k,
                   std::int32_t capacity) const;
  template <topk_id Id>
  std::span<const token_group> plan_token_groups_impl(std::span<const Id> ids, std::int32_t tokens,
                                                      std::int32_t k, std::int32_t capacity);
  template <topk_id Id, class IsResident>
  std::span<const expert_group> plan_expert_groups_impl(std::span<const Id> ids,
                                                        std::int32_t tokens, std::int32_t k,
                                                        std::int32_t capacity,
                                                        IsResident is_resident);

  std::int32_t experts_ = 0;
  protect_set seen_;                         // generation-stamped "expert seen" set
  std::vector<std::int32_t> flat_;           // experts of every group, back to back
  std::vector<token_group> token_groups_;    // first n used by the last token plan
  std::vector<expert_group> expert_groups_;  // first n used by the last expert plan
};

}  // namespace wisp

#include <wisp/pager/detail/group_planner.inl>
