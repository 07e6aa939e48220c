// SPDX-License-Identifier: Apache-2.0
#include "trace_test_util.hpp"

#include <wisp/trace/synthetic.hpp>

#include <gtest/gtest.h>

#include <algorithm>

namespace wisp_test {

wisp::routing_trace random_trace(wisp::moe_shape shape, std::size_t steps, bool weights,
                                 std::uint64_t seed) {
  wisp::detail::xoshiro256ss rng(seed);
  wisp::routing_trace t(shape);
  const auto k = static_cast<std::size_t>(shape.top_k);
  std::vector<std::int32_t> ids(shape.ids_per_step());
  std::vector<float> ws(weights ? ids.size() : 0);
  std::vector<std::int32_t> pool(static_cast<std::size_t>(shape.experts));
  for (std::size_t s = 0; s < steps; ++s) {
    if (rng.below(7) == 0 || s == 0) {
      t.begin_sequence();
    }
    for (std::size_t row = 0; row < ids.size(); row += k) {
      for (std::size_t e = 0; e < pool.size(); ++e) {
        pool[e] = static_cast<std::int32_t>(e);
      }
      for (std::size_t j = 0; j < k; ++j) {  // partial Fisher-Yates: k distinct ids
        std::swap(pool[j], pool[j + rng.below(pool.size() - j)]);
        ids[row + j] = pool[j];
      }
    }
    for (auto& w : ws) {
      w = static_cast<float>(rng.below(1u << 20)) / static_cast<float>(1u << 20);
    }
    t.append_step(ids, ws);
  }
  return t;
}

wisp::routing_trace random_partial_trace(wisp::moe_shape shape, std::size_t steps, bool weights,
                                         std::uint64_t seed) {
  const wisp::routing_trace full = random_trace(shape, steps, weights, seed);
  wisp::detail::xoshiro256ss rng(seed + 1000);
  wisp::routing_trace t(shape);
  const auto layers = static_cast<std::size_t>(shape.layers);
  const auto k = static_cast<std::size_t>(shape.top_k);
  std::vector<std::int32_t> ids(shape.ids_per_step());
  std::vector<float> ws(weights ? ids.size() : 0);
  std::vector<std::uint8_t> present(layers);
  std::size_t next_start = 0;
  for (std::size_t s = 0; s < full.steps(); ++s) {
    if (next_start < full.sequence_starts().size() && full.sequence_starts()[next_start] == s) {
      t.begin_sequence();
      ++next_start;
    }
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const auto l = static_cast<std::int32_t>(i / k);
      const auto j = static_cast<std::int32_t>(i % k);
      ids[i] = full.expert(s, l, j);
      if (weights) {
        ws[i] = full.weight(s, l, j);
      }
    }
    if (s == 0 || layers == 1 || rng.below(3) != 0) {
      t.append_step(ids, ws);
      continue;
    }
    std::fill(present.begin(), present.end(), std::uint8_t{1});
    const std::size_t drop = 1 + rng.below(layers - 1);  // keeps at least one layer
    for (std::size_t d = 0; d < drop; ++d) {
      present[rng.below(layers)] = 0;
    }
    present[rng.below(layers)] = 1;
    if (std::find(present.begin(), present.end(), std::uint8_t{0}) == present.end()) {
      present[0] = 0;
      present[layers - 1] = 1;
    }
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (present[i / k] == 0) {
        ids[i] = -1;  // ignored: a missing row's ids are never validated
      }
    }
    t.append_partial_step(ids, present, ws);
  }
  return t;
}

temp_dir::temp_dir(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string unique = name;
  if (info != nullptr) {
    unique += std::string("_") + info->test_suite_name() + "_" + info->name();
  }
  path_ = std::filesystem::temp_directory_path() / ("wisp_trace_test_" + unique);
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

temp_dir::~temp_dir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void temp_dir::write(const std::string& file, const std::string& text) const {
  std::ofstream out(path_ / file, std::ios::binary);
  out << text;
}

double per_layer_lru_hit_rate(const wisp::routing_trace& trace, int capacity) {
  return per_layer_lru_curve(trace, {capacity}).front();
}

std::vector<double> per_layer_lru_curve(const wisp::routing_trace& trace,
                                        const std::vector<int>& capacities) {
  std::vector<std::vector<std::int32_t>> stacks(static_cast<std::size_t>(trace.shape().layers));
  // depth_hits[d]: accesses found at LRU stack depth d (0 = most recent); a capacity-c LRU cache
  // hits exactly the accesses with depth < c.
  std::vector<std::size_t> depth_hits(static_cast<std::size_t>(trace.shape().experts), 0);
  std::size_t total = 0;
  trace.for_each_access([&](wisp::access a) {
    auto& s = stacks[static_cast<std::size_t>(a.layer)];  // most recent first
    ++total;
    const auto it = std::find(s.begin(), s.end(), a.expert);
    if (it != s.end()) {
      ++depth_hits[static_cast<std::size_t>(it - s.begin())];
      s.erase(it);
    }
    s.insert(s.begin(), a.expert);
  });
  std::vector<double> out;
  for (const int c : capacities) {
    std::size_t hits = 0;
    for (std::size_t d = 0; d < depth_hits.size() && d < static_cast<std::size_t>(c); ++d) {
      hits += depth_hits[d];
    }
    out.push_back(total == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(total));
  }
  return out;
}

}  // namespace wisp_test
