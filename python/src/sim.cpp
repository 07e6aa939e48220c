// SPDX-License-Identifier: Apache-2.0
// simulate: replays a trace through built-in policies (and the hindsight references) at several
// capacities, one row per (capacity, policy) with the counters `wisp sim --json` reports.
#include "arrays.hpp"
#include "bindings.hpp"
#include "errors.hpp"

#include <wisp/sim/hindsight.hpp>
#include <wisp/sim/simulate.hpp>
#include <wisp/sim/trace_sim.hpp>
#include <wisp/trace/routing_trace.hpp>

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <string>
#include <vector>

namespace wisp_python {
namespace {

struct sim_row {
  std::string policy;
  std::int32_t capacity = 0;
  wisp::sim_result result;
};

}  // namespace

void bind_sim(nb::module_& m) {
  m.def(
      "_simulate",
      [](const wisp::routing_trace& trace, const std::vector<std::string>& policies,
         const std::vector<std::int32_t>& capacities, const std::string& scope,
         std::uint64_t expert_bytes, double bandwidth_gbps, double miss_latency_us,
         bool protect_calls) {
        const wisp::cache_scope cache_scope = wisp::cache_scope_from_string(scope);
        WISP_EXPECTS(bandwidth_gbps >= 0 && miss_latency_us >= 0,
                     "bandwidth_gbps and miss_latency_us must be >= 0, got ", bandwidth_gbps,
                     " and ", miss_latency_us);
        std::vector<std::string_view> names;
        for (const std::string& p : policies) {
          names.push_back(wisp::is_hindsight_policy(p) ? std::string_view(p) : policy_name(p));
        }
        wisp::sim_config config;
        config.scope = cache_scope;
        config.expert_bytes = expert_bytes;
        config.link = wisp::link_model::from_gbps(bandwidth_gbps, miss_latency_us);
        config.protect_calls = protect_calls;
        std::vector<sim_row> rows;
        {
          nb::gil_scoped_release unlocked;
          for (const std::int32_t capacity : capacities) {
            config.capacity = capacity;
            for (const std::string_view name : names) {
              rows.push_back({std::string(name), capacity,
                              wisp::is_hindsight_policy(name)
                                  ? wisp::simulate_hindsight(name, trace, config)
                                  : wisp::simulate_named(name, trace, config)});
            }
          }
        }
        const std::int64_t layers = trace.shape().layers;
        nb::typed<nb::list, nb::dict> out;
        for (const sim_row& r : rows) {
          const wisp::cache_stats& s = r.result.stats;
          nb::dict d;
          d["policy"] = r.policy;
          d["scope"] = scope;
          d["capacity"] = r.capacity;
          d["total_slots"] =
              cache_scope == wisp::cache_scope::per_layer ? r.capacity * layers : r.capacity;
          d["accesses"] = s.accesses;
          d["hits"] = s.hits;
          d["misses"] = s.misses;
          d["miss_rate"] = s.accesses == 0
                               ? 0.0
                               : static_cast<double>(s.misses) / static_cast<double>(s.accesses);
          d["collision_misses"] = s.collision_misses;
          d["evictions"] = s.evictions;
          d["bytes_moved"] = r.result.bytes_moved;
          d["stall_s"] = r.result.stall_seconds;
          std::vector<std::uint64_t> per_layer_misses;
          for (const wisp::cache_stats& l : r.result.per_layer) {
            per_layer_misses.push_back(l.misses);
          }
          d["per_layer_misses"] = numpy_copy(std::span<const std::uint64_t>(per_layer_misses));
          out.append(d);
        }
        return out;
      },
      nb::arg("trace"), nb::arg("policies"), nb::arg("capacities"), nb::arg("scope"),
      nb::arg("expert_bytes"), nb::arg("bandwidth_gbps"), nb::arg("miss_latency_us"),
      nb::arg("protect_calls"));
}

}  // namespace wisp_python
