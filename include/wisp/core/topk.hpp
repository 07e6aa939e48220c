// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Vocabulary of top-k routing: the `topk_id` element types a router may emit, one entry
/// of a copy plan (`copy_op`), and the shape check every top-k consumer shares.
/// @code
/// std::vector<std::int64_t> ids = {3, 7, 3, 9};           // [tokens = 2] x [k = 2], row-major
/// static_assert(wisp::topk_id<std::int64_t>);
/// wisp::copy_op op{.expert = 7, .slot = 1};               // "load expert 7 into slot 1"
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

namespace wisp {

/// Element type of a `topk_ids` buffer: `int32` or `int64`, as routers emit (vLLM accepts both).
template <class T>
concept topk_id = std::same_as<T, std::int32_t> || std::same_as<T, std::int64_t>;

/// @brief One entry of a copy plan: copy the host master of `expert` into device slot `slot`.
///
/// Trivially copyable (a kernel or a copy engine can take a span of them as is).
struct copy_op {
  std::int32_t expert = -1;  ///< logical expert of the layer (row of the host master)
  std::int32_t slot = -1;    ///< destination slot (row of the device expert buffer)

  friend constexpr bool operator==(const copy_op&, const copy_op&) = default;
};

/// A copy plan: the copies to issue, in order, before the kernel reads the slots.
using copy_plan = std::span<const copy_op>;

namespace detail {

/// Checks that a row-major `[tokens x k]` buffer of `size` elements is well formed.
/// @throws wisp::logic_error naming the values if `tokens < 0`, `k < 1` or `size != tokens * k`.
inline void check_topk_shape(const char* where, std::size_t size, std::int32_t tokens,
                             std::int32_t k) {
  WISP_EXPECTS(tokens >= 0, where, ": tokens must be >= 0, got ", tokens);
  WISP_EXPECTS(k >= 1, where, ": k must be >= 1, got ", k);
  WISP_EXPECTS(static_cast<std::int64_t>(tokens) * k == static_cast<std::int64_t>(size), where,
               ": topk_ids holds ", size, " ids but tokens * k = ", tokens, " * ", k, " = ",
               static_cast<std::int64_t>(tokens) * k);
}

/// Throws the error for the bad id `ids[i]` of a `[tokens x k]` buffer over `experts` experts.
template <topk_id Id>
[[noreturn]] void fail_bad_id(const char* where, std::span<const Id> ids, std::size_t i,
                              std::int32_t k, std::int32_t experts) {
  WISP_FAIL(logic_error, where, ": topk_ids[", i, "] (token ", i / static_cast<std::size_t>(k),
            ", position ", i % static_cast<std::size_t>(k),
            ") = ", static_cast<std::int64_t>(ids[i]), " is outside [0, experts = ", experts, ")");
}

/// Checks every id of `ids` against `[0, experts)`. O(ids.size()).
template <topk_id Id>
void check_topk_ids(const char* where, std::span<const Id> ids, std::int32_t k,
                    std::int32_t experts) {
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= experts) [[unlikely]] {
      fail_bad_id(where, ids, i, k, experts);
    }
  }
}

}  // namespace detail
}  // namespace wisp
