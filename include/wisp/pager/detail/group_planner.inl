// SPDX-License-Identifier: Apache-2.0
// Implementation of group_planner; included at the end of <wisp/pager/group_planner.hpp>.
#pragma once

#include <algorithm>

namespace wisp {

template <topk_id Id>
void group_planner::check_batch(const char* where, std::span<const Id> ids, std::int32_t tokens,
                                std::int32_t k, std::int32_t capacity) const {
  WISP_EXPECTS(experts_ >= 1, where, ": the planner is empty (default-constructed)");
  detail::check_topk_shape(where, ids.size(), tokens, k);
  WISP_EXPECTS(capacity >= 1, where, ": capacity must be >= 1, got ", capacity);
  detail::check_topk_ids(where, ids, k, experts_);
}

// Token split: greedy left-to-right, closing a group just before the first row that would push
// its union past `capacity`.
//
// Optimality (exchange / "greedy stays ahead" argument). Write a partition of rows [0, T) into
// contiguous groups as its end points e_1 < e_2 < ... < e_m = T (group i = rows [e_{i-1}, e_i),
// e_0 = 0). Feasibility is monotone under shrinking: rows [a, b) fit whenever [a', b) fits with
// a' <= a, because union(rows [a, b)) is a subset of union(rows [a', b)). Greedy picks each e_i
// as the largest end such that [e_{i-1}, e_i) fits. Let o_1 < ... < o_n = T be any feasible
// partition. Claim: e_i >= o_i for every i <= min(m, n). For i = 1 both start at row 0 and greedy
// takes the largest feasible end, so e_1 >= o_1. If e_{i-1} >= o_{i-1}, then either
// e_{i-1} >= o_i, and e_i > e_{i-1} >= o_i; or e_{i-1} < o_i, and [e_{i-1}, o_i) is a suffix of
// the feasible group [o_{i-1}, o_i), hence feasible, so greedy's largest feasible end satisfies
// e_i >= o_i. Taking i = n: e_n >= o_n = T, so greedy has ended after at most n groups: m <= n.
// (Every single row must fit for any partition to exist; that is checked first.) The tests check
// m against a brute-force DP over all contiguous partitions.
template <topk_id Id>
std::span<const token_group> group_planner::plan_token_groups_impl(std::span<const Id> ids,
                                                                   std::int32_t tokens,
                                                                   std::int32_t k,
                                                                   std::int32_t capacity) {
  check_batch("plan_token_groups", ids, tokens, k, capacity);
  const auto uk = static_cast<std::size_t>(k);
  if (k > capacity) {  // only then can a single row be too wide
    for (std::int32_t r = 0; r < tokens; ++r) {
      seen_.clear();
      std::int32_t distinct = 0;
      for (std::size_t j = 0; j < uk; ++j) {
        distinct +=
            seen_.insert(static_cast<cache_key>(ids[static_cast<std::size_t>(r) * uk + j])) ? 1 : 0;
      }
      WISP_EXPECTS(distinct <= capacity, "plan_token_groups: one token (row ", r, ") routes to ",
                   distinct, " experts but capacity is ", capacity,
                   "; no split can serve it (raise the capacity to at least ", distinct, ")");
    }
  }
  reserve(tokens, k);  // may allocate when the batch is larger than any before
  if (tokens == 0) {
    return {};
  }

  std::size_t groups = 0;
  std::size_t used = 0;         // flat_ entries written
  std::size_t group_start = 0;  // first flat_ entry of the open group
  std::int32_t row_begin = 0;
  seen_.clear();
  for (std::int32_t r = 0; r < tokens; ++r) {
    const std::size_t row_start = used;
    const Id* row = ids.data() + static_cast<std::size_t>(r) * uk;
    for (std::size_t j = 0; j < uk; ++j) {
      if (seen_.insert(static_cast<cache_key>(row[j]))) {
        flat_[used++] = static_cast<std::int32_t>(row[j]);
      }
    }
    if (used - group_start <= static_cast<std::size_t>(capacity)) {
      continue;
    }
    // Row r does not fit: close [row_begin, r) and open a group with row r alone (it fits).
    token_groups_[groups++] = token_group{
        row_begin, r,
        std::span<const std::int32_t>(flat_.data() + group_start, row_start - group_start)};
    seen_.clear();
    group_start = used = row_start;
    row_begin = r;
    for (std::size_t j = 0; j < uk; ++j) {
      if (seen_.insert(static_cast<cache_key>(row[j]))) {
        flat_[used++] = static_cast<std::int32_t>(row[j]);
      }
    }
  }
  token_groups_[groups++] =
      token_group{row_begin, tokens,
                  std::span<const std::int32_t>(flat_.data() + group_start, used - group_start)};

  for (std::size_t g = 0; g < groups; ++g) {
    const token_group& group = token_groups_[g];
    auto* first = flat_.data() + (group.experts.data() - flat_.data());
    std::sort(first, first + group.experts.size());
  }
  return {token_groups_.data(), groups};
}

template <topk_id Id, class IsResident>
std::span<const expert_group> group_planner::plan_expert_groups_impl(std::span<const Id> ids,
                                                                     std::int32_t tokens,
                                                                     std::int32_t k,
                                                                     std::int32_t capacity,
                                                                     IsResident is_resident) {
  check_batch("plan_expert_groups", ids, tokens, k, capacity);
  reserve(tokens, k);
  seen_.clear();
  for (const Id id : ids) {
    seen_.insert(static_cast<cache_key>(id));
  }
  // Resident experts first (served before later groups can evict them), then the others; both
  // ascending. O(experts).
  std::size_t used = 0;
  for (std::int32_t e = 0; e < experts_; ++e) {
    if (seen_.contains(e) && is_resident(e)) {
      flat_[used++] = e;
    }
  }
  for (std::int32_t e = 0; e < experts_; ++e) {
    if (seen_.contains(e) && !is_resident(e)) {
      flat_[used++] = e;
    }
  }
  std::size_t groups = 0;
  const auto cap = static_cast<std::size_t>(capacity);
  for (std::size_t begin = 0; begin < used; begin += cap) {
    const std::size_t size = std::min(cap, used - begin);
    std::sort(flat_.begin() + static_cast<std::ptrdiff_t>(begin),
              flat_.begin() + static_cast<std::ptrdiff_t>(begin + size));
    expert_groups_[groups++] =
        expert_group{std::span<const std::int32_t>(flat_.data() + begin, size)};
  }
  return {expert_groups_.data(), groups};
}

}  // namespace wisp
