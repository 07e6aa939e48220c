// SPDX-License-Identifier: Apache-2.0
// _simulate_ranks: the expert-parallel simulator (wisp/sim/ep_sim.hpp), one dict per (capacity,
// arm) with the fields of `wisp sim --ranks --json`'s arms.
#include "arrays.hpp"
#include "bindings.hpp"
#include "errors.hpp"

#include <wisp/sim/ep_sim.hpp>
#include <wisp/trace/routing_trace.hpp>

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace wisp_python {
namespace {

template <class F>
numpy_array per_rank_u64(const wisp::ep_arm_result& a, F field) {
  std::vector<std::uint64_t> v;
  for (const wisp::ep_rank_result& r : a.ranks) {
    v.push_back(field(r));
  }
  return numpy_copy(std::span<const std::uint64_t>(v));
}

}  // namespace

// One declarative table of the module's parallel bindings (long, but a list reads best whole).
void bind_parallel(nb::module_& m) {
  m.def(
      "_simulate_ranks",
      [](const wisp::routing_trace& trace, std::int32_t ranks, std::int32_t batch,
         const std::vector<std::int32_t>& capacities, std::int32_t local_experts,
         const std::string& policy, std::uint64_t expert_bytes, double bandwidth_gbps,
         double miss_latency_us, std::int32_t hidden, double a2a_gbps, double a2a_latency_us,
         double hbm_gbps, double tflops, std::uint64_t expert_params) {
        WISP_EXPECTS(expert_bytes > 0 && bandwidth_gbps > 0,
                     "simulate(ranks=...) needs the copy of an expert: expert_bytes > 0 and "
                     "bandwidth_gbps > 0, got ",
                     expert_bytes, " and ", bandwidth_gbps);
        wisp::ep_sim_config config;
        config.ranks = ranks;
        config.batch = batch;
        config.local_experts = local_experts;
        config.policy = std::string(policy_name(policy));
        config.costs = wisp::ep_cost_model::from_hardware(
            wisp::link_model{bandwidth_gbps * 1e9, miss_latency_us * 1e-6}, expert_bytes,
            expert_params, hbm_gbps * 1e9, tflops * 1e12, hidden, a2a_gbps * 1e9,
            a2a_latency_us * 1e-6);
        config.validate();
        struct row {
          std::int32_t capacity;
          wisp::ep_arm_result result;
        };
        std::vector<row> rows;
        {
          nb::gil_scoped_release unlocked;
          for (const std::int32_t c : capacities) {
            config.total_slots = c;
            for (const wisp::ep_arm arm : {wisp::ep_arm::ep_lru, wisp::ep_arm::eplb_lru,
                                           wisp::ep_arm::wisp, wisp::ep_arm::ep_policy}) {
              rows.push_back({c, wisp::simulate_ep(trace, config, arm)});
            }
          }
        }
        nb::typed<nb::list, nb::dict> out;
        for (const row& r : rows) {
          const wisp::ep_arm_result& a = r.result;
          const auto versus = [&](const char* name) {
            for (const row& o : rows) {
              if (o.capacity == r.capacity && o.result.name == name) {
                return o.result.slowest_rank_step_s > 0
                           ? a.slowest_rank_step_s / o.result.slowest_rank_step_s
                           : 0.0;
              }
            }
            return 0.0;
          };
          nb::dict d;
          d["name"] = a.name;
          d["policy"] = a.policy;
          d["ranks"] = ranks;
          d["total_slots"] = r.capacity;
          d["local_experts"] = a.local_experts;
          d["physical_experts"] = a.physical_experts;
          d["steps"] = a.steps;
          d["tokens"] = a.tokens;
          d["slowest_rank_step_s"] = a.slowest_rank_step_s;
          d["x_ep_lru"] = versus("ep-lru");
          d["x_eplb_lru"] = versus("eplb-lru");
          d["load_imbalance"] = a.load_imbalance;
          d["layer_load_imbalance"] = a.layer_load_imbalance;
          d["slots"] = per_rank_u64(a, [](const auto& x) { return std::uint64_t(x.slots); });
          d["misses"] = per_rank_u64(a, [](const auto& x) { return x.misses; });
          d["hits"] = per_rank_u64(a, [](const auto& x) { return x.hits; });
          d["link_bytes"] = per_rank_u64(a, [](const auto& x) { return x.link_bytes; });
          d["token_load"] = per_rank_u64(a, [](const auto& x) { return x.pairs; });
          d["tokens_received"] = per_rank_u64(a, [](const auto& x) { return x.tokens_received; });
          std::vector<double> busy;
          for (const wisp::ep_rank_result& x : a.ranks) {
            busy.push_back(x.busy_seconds);
          }
          d["busy_s"] = numpy_copy(std::span<const double>(busy));
          out.append(d);
        }
        return out;
      },
      nb::arg("trace"), nb::arg("ranks"), nb::arg("batch"), nb::arg("capacities"),
      nb::arg("local_experts"), nb::arg("policy"), nb::arg("expert_bytes"),
      nb::arg("bandwidth_gbps"), nb::arg("miss_latency_us"), nb::arg("hidden"), nb::arg("a2a_gbps"),
      nb::arg("a2a_latency_us"), nb::arg("hbm_gbps"), nb::arg("tflops"), nb::arg("expert_params"));
}

}  // namespace wisp_python
