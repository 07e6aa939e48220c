// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The engine's indexing helpers. Ids and counts (layers, experts, rows, tokens, tensors)
/// are `std::int32_t`, as everywhere in wisp; containers index by `std::size_t`. These say so once
/// instead of a cast at every subscript.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <iterator>

namespace wisp_engine {

/// A non-negative id or count as a container index.
[[nodiscard]] constexpr std::size_t idx(std::int64_t i) noexcept {
  return static_cast<std::size_t>(i);
}

/// Element `i` (an id, non-negative) of `v`.
template <class V>
[[nodiscard]] constexpr decltype(auto) at(V& v, std::int64_t i) noexcept {
  return v[idx(i)];
}

/// The size of `v` as an id or count.
template <class V>
[[nodiscard]] constexpr std::int32_t count(const V& v) noexcept {
  return static_cast<std::int32_t>(std::size(v));
}

/// An integer count as a real number (bytes, FLOPs, tokens in a rate).
[[nodiscard]] constexpr double real(std::integral auto n) noexcept {
  return static_cast<double>(n);
}

}  // namespace wisp_engine
