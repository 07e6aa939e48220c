// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Packing one layer's replicas onto ranks (internal to `<wisp/parallel/planner.hpp>`):
/// the last step of `eplb_placement` and of the planner's balanced start.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace wisp {
namespace detail {

/// Packs one layer's replicas (counts in `count`, weights `weight(e, n)`) onto ranks: largest
/// weight first, each to the lightest rank with room that does not hold it yet. When every rank
/// with room already holds the expert, another expert moves from a full rank lacking it to a rank
/// with room lacking that one (one always exists: the full rank holds `local_experts` distinct
/// experts, the rank with room fewer, one of them this expert).
template <class Weight>
void pack_layer(std::int32_t l, std::int32_t experts, std::int32_t ranks,
                std::int32_t local_experts, std::span<const std::int32_t> count, Weight weight,
                std::vector<std::vector<std::int32_t>>& out) {
  struct item {
    std::int32_t expert;
    double weight;
  };
  std::vector<item> items;
  for (std::int32_t e = 0; e < experts; ++e) {
    for (std::int32_t i = 0; i < count[static_cast<std::size_t>(e)]; ++i) {
      items.push_back({e, weight(e, count[static_cast<std::size_t>(e)])});
    }
  }
  std::stable_sort(items.begin(), items.end(),
                   [](const item& a, const item& b) { return a.weight > b.weight; });
  std::vector<std::vector<std::int32_t>> on(static_cast<std::size_t>(ranks));
  std::vector<double> total(static_cast<std::size_t>(ranks), 0.0);
  const auto holds = [&](std::int32_t r, std::int32_t e) {
    const auto& h = on[static_cast<std::size_t>(r)];
    return std::find(h.begin(), h.end(), e) != h.end();
  };
  const auto full = [&](std::int32_t r) {
    return static_cast<std::int32_t>(on[static_cast<std::size_t>(r)].size()) >= local_experts;
  };
  for (const item& it : items) {
    std::int32_t best = -1;
    for (std::int32_t r = 0; r < ranks; ++r) {
      if (!full(r) && !holds(r, it.expert) &&
          (best < 0 ||
           total[static_cast<std::size_t>(r)] < total[static_cast<std::size_t>(best)])) {
        best = r;
      }
    }
    for (std::int32_t from = 0; from < ranks && best < 0; ++from) {
      if (holds(from, it.expert)) {
        continue;
      }
      for (std::int32_t to = 0; to < ranks && best < 0; ++to) {
        if (full(to)) {
          continue;
        }
        auto& src = on[static_cast<std::size_t>(from)];
        for (std::size_t j = 0; j < src.size(); ++j) {
          const std::int32_t other = src[j];
          if (!holds(to, other)) {
            const double w = weight(other, count[static_cast<std::size_t>(other)]);
            src.erase(src.begin() + static_cast<std::ptrdiff_t>(j));
            on[static_cast<std::size_t>(to)].push_back(other);
            total[static_cast<std::size_t>(from)] -= w;
            total[static_cast<std::size_t>(to)] += w;
            best = from;
            break;
          }
        }
      }
    }
    on[static_cast<std::size_t>(best)].push_back(it.expert);
    total[static_cast<std::size_t>(best)] += it.weight;
  }
  for (std::int32_t r = 0; r < ranks; ++r) {
    for (const std::int32_t e : on[static_cast<std::size_t>(r)]) {
      out[static_cast<std::size_t>(l) * experts + e].push_back(r);
    }
  }
}

}  // namespace detail
}  // namespace wisp
