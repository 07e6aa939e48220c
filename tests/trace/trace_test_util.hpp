// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the trace tests.
#pragma once

#include <wisp/core/detail/crc32.hpp>
#include <wisp/trace/routing_trace.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace wisp_test {

/// A random valid trace (xoshiro from the library, so it is the same on every platform).
wisp::routing_trace random_trace(wisp::moe_shape shape, std::size_t steps, bool weights,
                                 std::uint64_t seed);

/// `random_trace` in which about a third of the steps (never the first) lack a random proper
/// subset of their layers (`append_partial_step`).
wisp::routing_trace random_partial_trace(wisp::moe_shape shape, std::size_t steps, bool weights,
                                         std::uint64_t seed);

/// A fresh empty folder under the system temp folder, removed by the destructor.
class temp_dir {
 public:
  explicit temp_dir(const std::string& name);
  ~temp_dir();
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  void write(const std::string& file, const std::string& text) const;

 private:
  std::filesystem::path path_;
};

/// Per-layer LRU hit rate (hits / accesses, cold misses included), brute force: an expert hits
/// iff fewer than `capacity` distinct experts of its layer were touched since its last access.
double per_layer_lru_hit_rate(const wisp::routing_trace& trace, int capacity);

/// The same for several capacities in one pass (one LRU stack per layer, stack depth histogram).
std::vector<double> per_layer_lru_curve(const wisp::routing_trace& trace,
                                        const std::vector<int>& capacities);

}  // namespace wisp_test
