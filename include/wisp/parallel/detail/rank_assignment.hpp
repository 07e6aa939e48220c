// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The planner's exact step (internal to `<wisp/parallel/planner.hpp>`): which rank each
/// rank's plan (its replicas and slots) should run on, given what each would cost there.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <numeric>
#include <span>
#include <vector>

namespace wisp {
namespace detail {

/// @brief Assigns `n` jobs to `n` machines, job `j` on machine `m` costing `cost[j * n + m]`,
/// minimising the largest cost, then the next largest and so on (the sorted costs in the
/// lexicographic order; exact for the largest, and for all of them when no two costs are equal).
/// Returns the machine of each job.
///
/// Edges are taken largest first; each is forbidden when a perfect matching remains without it
/// (one augmenting path from the job it frees), and kept otherwise: an edge every remaining
/// matching uses is in every optimum that agrees on the larger ones. O(n^4) time, O(n^2) memory.
[[nodiscard]] inline std::vector<std::int32_t> leximax_assignment(std::span<const double> cost,
                                                                  std::int32_t n) {
  const auto un = static_cast<std::size_t>(n);
  std::vector<std::uint8_t> allowed(un * un, 1);
  std::vector<std::int32_t> machine_of(un);  // job -> machine
  std::vector<std::int32_t> job_of(un);      // machine -> job
  std::iota(machine_of.begin(), machine_of.end(), std::int32_t{0});
  std::iota(job_of.begin(), job_of.end(), std::int32_t{0});
  std::vector<std::uint8_t> seen(un);
  // Kuhn's augmenting path from job j over allowed edges; on success job j is matched.
  const std::function<bool(std::int32_t)> augment = [&](std::int32_t j) {
    for (std::int32_t m = 0; m < n; ++m) {
      const auto um = static_cast<std::size_t>(m);
      if (!allowed[static_cast<std::size_t>(j) * un + um] || seen[um]) {
        continue;
      }
      seen[um] = 1;
      if (job_of[um] < 0 || augment(job_of[um])) {
        job_of[um] = j;
        machine_of[static_cast<std::size_t>(j)] = m;
        return true;
      }
    }
    return false;
  };
  std::vector<std::size_t> edges(un * un);
  std::iota(edges.begin(), edges.end(), std::size_t{0});
  std::stable_sort(edges.begin(), edges.end(),
                   [&](std::size_t a, std::size_t b) { return cost[a] > cost[b]; });
  for (const std::size_t edge : edges) {
    const auto j = static_cast<std::int32_t>(edge / un);
    const auto m = static_cast<std::int32_t>(edge % un);
    allowed[edge] = 0;
    if (machine_of[static_cast<std::size_t>(j)] != m) {
      continue;  // unused: forbidding it costs nothing
    }
    job_of[static_cast<std::size_t>(m)] = -1;
    std::fill(seen.begin(), seen.end(), 0);
    if (!augment(j)) {  // every remaining matching uses it: keep it
      allowed[edge] = 1;
      job_of[static_cast<std::size_t>(m)] = j;
      machine_of[static_cast<std::size_t>(j)] = m;
    }
  }
  return machine_of;
}

}  // namespace detail
}  // namespace wisp
