// SPDX-License-Identifier: Apache-2.0
// Expert parallelism: _simulate_ranks (the simulator, wisp/sim/ep_sim.hpp, one dict per
// (capacity, arm) with the fields of `wisp sim --ranks --json`'s arms); Placement
// (expert_placement), EpPlan and _plan_placement (the plan an arm of the simulator replays under),
// ReplicaChooser (replica_chooser) and _ep_batches (the simulator's serving steps), so that live
// ranks (examples/ep_torch) run what the simulator models.
#include "arrays.hpp"
#include "bindings.hpp"
#include "errors.hpp"

#include <wisp/sim/ep_sim.hpp>
#include <wisp/trace/routing_trace.hpp>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
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

// The simulator's configuration from the Python keywords (the constants of `wisp sim --ranks`).
wisp::ep_sim_config ep_config(std::int32_t ranks, std::int32_t batch, std::int32_t local_experts,
                              const std::string& policy, std::uint64_t expert_bytes,
                              double bandwidth_gbps, double miss_latency_us, std::int32_t hidden,
                              double a2a_gbps, double a2a_latency_us, double hbm_gbps,
                              double tflops, std::uint64_t expert_params, const char* where) {
  WISP_EXPECTS(expert_bytes > 0 && bandwidth_gbps > 0, where,
               " needs the copy of an expert: expert_bytes > 0 and bandwidth_gbps > 0, got ",
               expert_bytes, " and ", bandwidth_gbps);
  wisp::ep_sim_config config;
  config.ranks = ranks;
  config.batch = batch;
  config.local_experts = local_experts;
  config.policy = std::string(policy_name(policy));
  config.costs = wisp::ep_cost_model::from_hardware(
      wisp::link_model{bandwidth_gbps * 1e9, miss_latency_us * 1e-6}, expert_bytes, expert_params,
      hbm_gbps * 1e9, tflops * 1e12, hidden, a2a_gbps * 1e9, a2a_latency_us * 1e-6);
  config.validate();
  return config;
}

wisp::ep_arm arm_from_name(std::string_view name) {
  if (name == "wisp") {
    return wisp::ep_arm::wisp;
  }
  if (name == "eplb-lru") {
    return wisp::ep_arm::eplb_lru;
  }
  if (name == "ep-lru") {
    return wisp::ep_arm::ep_lru;
  }
  WISP_EXPECTS(false, "plan_placement: arm must be 'wisp', 'eplb-lru' or 'ep-lru', got '", name,
               "'");
  return wisp::ep_arm::wisp;
}

// The plan an arm of the simulator replays under: its placement, each rank's pager capacity and
// the costs its replica choice weighs.
struct ep_plan_view {
  wisp::expert_placement placement;
  std::vector<std::int32_t> slots;  // each rank's device slots (its pager's capacity)
  wisp::dispatch_costs costs;
  std::int32_t batch = 16;
  std::int32_t total_slots = 0;
  std::string arm;
};

// A (layers x ranks x experts) int32 numpy copy of the placement's maps.
numpy_array maps_array(const wisp::expert_placement& p) {
  return numpy_copy(p.expert_maps().data(), {p.layers(), p.ranks(), p.experts()});
}

// Refuses `expert_map` (int[experts] for every layer, or int[layers, experts]) unless it is
// `rank`'s map in `p`, naming the first disagreement.
void check_rank_map(const wisp::expert_placement& p, std::int32_t rank, const array_like& map) {
  WISP_EXPECTS(rank >= 0 && rank < p.ranks(), "Placement.check_expert_map: rank ", rank,
               " is outside [0, ranks = ", p.ranks(), ")");
  const nb::object a = nb::module_::import_("numpy").attr("asarray")(map);
  const auto ndim = nb::cast<int>(a.attr("ndim"));
  WISP_EXPECTS(ndim == 1 || ndim == 2,
               "Placement.check_expert_map: expert_map must be "
               "int[experts] or int[layers, experts], got ",
               ndim, " dimensions");
  const int_matrix m =
      ndim == 1 ? int_vector_from(a, "expert_map") : int_matrix_from(a, "expert_map");
  const std::int64_t experts = ndim == 1 ? m.rows : m.cols;
  WISP_EXPECTS(
      experts == p.experts() && (ndim == 1 || m.rows == p.layers()),
      "Placement.check_expert_map: rank ", rank, "'s expert_map has shape ",
      ndim == 1 ? std::to_string(m.rows) : std::to_string(m.rows) + " x " + std::to_string(m.cols),
      " but the placement has ", p.layers(), " layers x ", p.experts(), " experts");
  with_values(m, [&](const auto& values) {
    for (std::int32_t l = 0; l < p.layers(); ++l) {
      const auto want = p.expert_map(rank, l);
      for (std::int32_t e = 0; e < p.experts(); ++e) {
        const auto got = values[static_cast<std::size_t>(ndim == 1 ? e : l * p.experts() + e)];
        WISP_EXPECTS(got == want[static_cast<std::size_t>(e)], "rank ", rank,
                     ": expert_map disagrees with the placement at layer ", l, ", expert ", e,
                     ": it holds ", static_cast<std::int64_t>(got), ", the placement ",
                     want[static_cast<std::size_t>(e)]);
      }
    }
  });
}

// ReplicaChooser: the chooser and its placement (the chooser keeps no reference to it).
class python_chooser {
 public:
  python_chooser(const wisp::expert_placement& placement, wisp::dispatch_costs costs)
      : chooser_(placement, std::move(costs)), layers_(placement.layers()) {}

  numpy_array choose(std::int32_t layer, array_like topk_ids,
                     const std::optional<array_like>& out) {
    const int_matrix ids = int_matrix_from(topk_ids, "topk_ids");
    WISP_EXPECTS(
        ids.rows <= std::numeric_limits<std::int32_t>::max() / std::max<std::int64_t>(ids.cols, 1),
        "ReplicaChooser.choose: ", ids.rows, " x ", ids.cols, " ids do not fit int32");
    const auto tokens = static_cast<std::int32_t>(ids.rows);
    const auto k = static_cast<std::int32_t>(ids.cols);
    const auto n = static_cast<std::size_t>(ids.rows * ids.cols);
    nb::ndarray<> holder;
    numpy_array fresh;
    std::span<std::int32_t> ranks;
    nb::object flat;  // a 1-D view of `out` (the same memory when it is contiguous)
    if (out) {        // numpy only: a reshape of a strided array would be a copy, written in vain
      WISP_EXPECTS(detail::is_numpy_array(out->ptr()) &&
                       nb::cast<bool>(out->attr("flags").attr("c_contiguous")),
                   "ReplicaChooser.choose: out must be a C-contiguous int32 numpy array");
      flat = nb::getattr(*out, "reshape")(-1);
      ranks = writable_int32(flat, n, "out", holder);
    } else {
      std::int32_t* data = nullptr;
      fresh = numpy_empty<std::int32_t>({ids.rows, ids.cols}, data);
      ranks = {data, n};
    }
    if (ids.wide) {
      const std::span<const std::int64_t> span =
          ids.contiguous() ? ids.span<std::int64_t>() : gathered(ids, scratch64_);
      last_ids_address_ = reinterpret_cast<std::uintptr_t>(span.data());
      chooser_.choose(layer, span, tokens, k, ranks);
    } else {
      const std::span<const std::int32_t> span =
          ids.contiguous() ? ids.span<std::int32_t>() : gathered(ids, scratch32_);
      last_ids_address_ = reinterpret_cast<std::uintptr_t>(span.data());
      chooser_.choose(layer, span, tokens, k, ranks);
    }
    return out ? nb::borrow<numpy_array>(*out) : fresh;
  }

  wisp::replica_chooser& get() { return chooser_; }
  [[nodiscard]] std::uintptr_t last_ids_address() const { return last_ids_address_; }

 private:
  template <class T>
  static std::span<const T> gathered(const int_matrix& m, std::vector<T>& scratch) {
    m.gather(scratch);
    return scratch;
  }

  wisp::replica_chooser chooser_;
  std::int32_t layers_;
  std::vector<std::int32_t> scratch32_;
  std::vector<std::int64_t> scratch64_;
  std::uintptr_t last_ids_address_ = 0;
};

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
        wisp::ep_sim_config config =
            ep_config(ranks, batch, local_experts, policy, expert_bytes, bandwidth_gbps,
                      miss_latency_us, hidden, a2a_gbps, a2a_latency_us, hbm_gbps, tflops,
                      expert_params, "simulate(ranks=...)");
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

  nb::class_<wisp::expert_placement>(
      m, "Placement",
      "Every MoE layer's logical experts and their replicas on `ranks` ranks "
      "(wisp::expert_placement): rank r holds, per layer, up to `local_experts` physical experts "
      "(rows 0..local_experts-1 of its expert tensors); vLLM describes a rank by its expert_map, "
      "int32[experts]: logical id -> local row or -1. Immutable; validated when made.")
      .def_static(
          "linear",
          [](std::int32_t layers, std::int32_t experts, std::int32_t ranks) {
            return wisp::expert_placement::linear(layers, experts, ranks);
          },
          nb::arg("layers"), nb::arg("experts"), nb::arg("ranks"),
          "vLLM's default placement: contiguous blocks of experts per rank, no redundancy.")
      .def_static(
          "from_expert_maps",
          [](array_like maps, std::int32_t local_experts) {
            const nb::object a = nb::module_::import_("numpy").attr("ascontiguousarray")(
                maps, nb::module_::import_("numpy").attr("int32"));
            const auto shape = nb::cast<std::vector<std::int64_t>>(a.attr("shape"));
            WISP_EXPECTS(shape.size() == 3,
                         "Placement.from_expert_maps: maps must be "
                         "int[layers, ranks, experts], got ",
                         shape.size(), " dimensions");
            std::vector<std::int32_t> values;
            with_values(int_vector_from(a.attr("reshape")(-1), "maps"),
                        [&](const auto& v) { values.assign(v.begin(), v.end()); });
            return wisp::expert_placement::from_expert_maps(
                static_cast<std::int32_t>(shape[0]), static_cast<std::int32_t>(shape[2]),
                static_cast<std::int32_t>(shape[1]), local_experts, values);
          },
          nb::arg("maps"), nb::arg("local_experts"),
          "A placement from vLLM-style maps, int[layers, ranks, experts] (what expert_maps() "
          "returns). Raises LogicError naming the values on a value outside [-1, "
          "local_experts), two experts on one local row, or an expert with no replica.")
      .def_prop_ro("layers", &wisp::expert_placement::layers)
      .def_prop_ro("experts", &wisp::expert_placement::experts)
      .def_prop_ro("ranks", &wisp::expert_placement::ranks)
      .def_prop_ro("local_experts", &wisp::expert_placement::local_experts,
                   "rows (physical experts) each rank holds per layer")
      .def(
          "expert_map",
          [](const wisp::expert_placement& p, std::int32_t rank, std::int32_t layer) {
            return numpy_copy(p.expert_map(rank, layer));
          },
          nb::arg("rank"), nb::arg("layer"),
          "vLLM's expert_map of (rank, layer): int32[experts], logical id -> local row or -1.")
      .def(
          "rank_maps",
          [](const wisp::expert_placement& p, std::int32_t rank) {
            std::vector<std::int32_t> out;
            for (std::int32_t l = 0; l < p.layers(); ++l) {
              const auto row = p.expert_map(rank, l);
              out.insert(out.end(), row.begin(), row.end());
            }
            return numpy_copy(out.data(), {p.layers(), p.experts()});
          },
          nb::arg("rank"),
          "int32[layers, experts]: `rank`'s expert_map of every layer (what ExpertCache and "
          "Pager take as expert_map=).")
      .def("expert_maps", &maps_array,
           "int32[layers, ranks, experts]: every map (what from_expert_maps reads back).")
      .def(
          "replicas",
          [](const wisp::expert_placement& p, std::int32_t layer, std::int32_t expert) {
            std::vector<std::int32_t> out;
            for (const wisp::replica& r : p.replicas(layer, expert)) {
              out.insert(out.end(), {r.rank, r.local});
            }
            return numpy_copy(out.data(), {static_cast<std::int64_t>(out.size() / 2), 2});
          },
          nb::arg("layer"), nb::arg("expert"),
          "int32[replicas, 2]: (rank, local row) of each replica of the expert, by rank.")
      .def("physical_experts", &wisp::expert_placement::physical_experts, nb::arg("layer"),
           "replicas of every expert of the layer")
      .def("check_expert_map", &check_rank_map, nb::arg("rank"), nb::arg("expert_map"),
           "Raises LogicError, naming the first (layer, expert) and both values, unless "
           "`expert_map` (int[experts] for every layer, or int[layers, experts]: an engine's EP "
           "map) is `rank`'s map in this placement. Touches no process group: call it before any "
           "collective, on every rank.")
      .def("__repr__", [](const wisp::expert_placement& p) {
        std::string s = "Placement(layers=" + std::to_string(p.layers()) +
                        ", experts=" + std::to_string(p.experts()) +
                        ", ranks=" + std::to_string(p.ranks()) +
                        ", local_experts=" + std::to_string(p.local_experts()) + ")";
        return s;
      });

  nb::class_<ep_plan_view>(
      m, "EpPlan",
      "The plan one arm of the expert-parallel simulator replays under (wisp.plan_placement): "
      "its placement, each rank's device slots (its pager's capacity), and the costs its "
      "ReplicaChooser weighs. The same inputs give the same plan on every rank.")
      .def_ro("placement", &ep_plan_view::placement)
      .def_prop_ro(
          "rank_slots",
          [](const ep_plan_view& p) { return numpy_copy(std::span<const std::int32_t>(p.slots)); },
          "int32[ranks]: each rank's device slots, one pool over its (layer, local row) keys; the "
          "`slots` of `wisp sim --ranks --json`")
      .def_prop_ro(
          "copy_seconds",
          [](const ep_plan_view& p) {
            return numpy_copy(std::span<const double>(p.costs.copy_seconds));
          },
          "float64[ranks]: one expert copy over each rank's link (the modelled link time)")
      .def_prop_ro(
          "expert_seconds", [](const ep_plan_view& p) { return p.costs.expert_seconds; },
          "modelled compute of one expert active on a rank in a call")
      .def_prop_ro(
          "token_seconds", [](const ep_plan_view& p) { return p.costs.token_seconds; },
          "modelled compute of one (token, expert) pair")
      .def_ro("batch", &ep_plan_view::batch, "concurrent sequences of the serving steps")
      .def_ro("total_slots", &ep_plan_view::total_slots)
      .def_ro("arm", &ep_plan_view::arm)
      .def("__repr__", [](const ep_plan_view& p) {
        std::string slots;
        for (const std::int32_t s : p.slots) {
          slots += (slots.empty() ? "" : ", ") + std::to_string(s);
        }
        return "EpPlan(arm='" + p.arm + "', ranks=" + std::to_string(p.placement.ranks()) +
               ", rank_slots=[" + slots + "])";
      });

  m.def(
      "_plan_placement",
      [](const wisp::routing_trace& trace, std::int32_t ranks, std::int32_t total_slots,
         std::int32_t batch, std::int32_t local_experts, const std::string& arm,
         std::uint64_t expert_bytes, double bandwidth_gbps, double miss_latency_us,
         std::int32_t hidden, double a2a_gbps, double a2a_latency_us, double hbm_gbps,
         double tflops, std::uint64_t expert_params) {
        wisp::ep_sim_config config = ep_config(
            ranks, batch, local_experts, "lru", expert_bytes, bandwidth_gbps, miss_latency_us,
            hidden, a2a_gbps, a2a_latency_us, hbm_gbps, tflops, expert_params, "plan_placement");
        config.total_slots = total_slots;
        const wisp::ep_arm which = arm_from_name(arm);
        wisp::detail::ep_arm_plan plan = [&] {
          nb::gil_scoped_release unlocked;
          return wisp::detail::plan_ep_arm(trace, config, which);
        }();
        const std::int32_t rows = trace.shape().layers * plan.placement.local_experts();
        for (std::int32_t& s : plan.slots) {
          s = std::min(s, rows);  // a rank cannot use more slots than it has rows (as the sim)
        }
        return ep_plan_view{std::move(plan.placement),
                            std::move(plan.slots),
                            std::move(plan.costs),
                            batch,
                            total_slots,
                            arm};
      },
      nb::arg("trace"), nb::arg("ranks"), nb::arg("total_slots"), nb::arg("batch"),
      nb::arg("local_experts"), nb::arg("arm"), nb::arg("expert_bytes"), nb::arg("bandwidth_gbps"),
      nb::arg("miss_latency_us"), nb::arg("hidden"), nb::arg("a2a_gbps"), nb::arg("a2a_latency_us"),
      nb::arg("hbm_gbps"), nb::arg("tflops"), nb::arg("expert_params"));

  m.def(
      "_ep_batches",
      [](const wisp::routing_trace& trace, std::int32_t batch) {
        WISP_EXPECTS(batch >= 1, "ep_batches: batch must be >= 1, got ", batch);
        std::vector<numpy_array> out;
        for (const std::vector<std::size_t>& step : wisp::detail::ep_batches(trace, batch)) {
          std::vector<std::int64_t> s(step.begin(), step.end());
          out.push_back(numpy_copy(std::span<const std::int64_t>(s)));
        }
        return out;
      },
      nb::arg("trace"), nb::arg("batch"));

  nb::class_<python_chooser>(
      m, "ReplicaChooser",
      "Residency- and load-aware replica choice (wisp::replica_chooser, docs/expert_parallel.md): "
      "the rank of each (token, expert) of a call. Deterministic: every rank running it on the "
      "same calls and the same published residency computes the same targets. O(tokens x k x "
      "replicas) per call, no allocation but the returned array; not thread-safe.")
      .def(
          "__init__",
          [](python_chooser* self, const ep_plan_view& plan) {
            new (self) python_chooser(plan.placement, plan.costs);
          },
          nb::arg("plan"), "The chooser of a plan (its placement and costs).")
      .def(
          "__init__",
          [](python_chooser* self, const wisp::expert_placement& placement,
             std::vector<double> copy_seconds, double expert_seconds, double token_seconds) {
            new (self) python_chooser(
                placement,
                wisp::dispatch_costs{std::move(copy_seconds), expert_seconds, token_seconds});
          },
          nb::arg("placement"), nb::arg("copy_seconds"), nb::arg("expert_seconds"),
          nb::arg("token_seconds"),
          "A chooser over `placement` with the modelled costs: one expert copy per rank "
          "(copy_seconds[ranks]), an active expert, a (token, expert) pair.")
      .def("choose", &python_chooser::choose, nb::arg("layer"), nb::arg("topk_ids"),
           nb::arg("out").none() = nb::none(),
           "The rank computing each pair of a call of `layer`: topk_ids is [tokens, k] int32 or "
           "int64 (numpy or torch CPU), read in place when C-contiguous; returns int32[tokens, k] "
           "(written into `out`, a writable C-contiguous int32 numpy array of tokens x k, and "
           "returned, when given). The whole "
           "call at once, as `wisp sim --ranks` does (replica_chooser::choose). Raises "
           "LogicError (nothing changed) on a bad layer, shape or id.")
      .def(
          "set_resident",
          [](python_chooser& c, std::int32_t rank, std::int32_t layer, std::int32_t local,
             bool resident) { c.get().set_resident(rank, layer, local, resident); },
          nb::arg("rank"), nb::arg("layer"), nb::arg("local"), nb::arg("resident"),
          "Records whether row `local` of `rank` for `layer` is resident on its device (ranks "
          "publish it from their copy plans). O(1).")
      .def(
          "resident",
          [](const python_chooser& c, std::int32_t rank, std::int32_t layer, std::int32_t local) {
            return const_cast<python_chooser&>(c).get().resident(rank, layer, local);
          },
          nb::arg("rank"), nb::arg("layer"), nb::arg("local"))
      .def(
          "reset_load", [](python_chooser& c) { c.get().reset_load(); },
          "Forgets the long-run pair counts (the last tie-breaker).")
      .def_prop_ro("ranks", [](python_chooser& c) { return c.get().ranks(); })
      .def_prop_ro("_last_ids_address", &python_chooser::last_ids_address,
                   "address of the ids the last choose handed to C++ (for tests)");
}

}  // namespace wisp_python
