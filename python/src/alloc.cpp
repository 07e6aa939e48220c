// SPDX-License-Identifier: Apache-2.0
// Allocation: model specs and presets, byte sizes, and plan(): the expert/KV split of a device
// budget chosen by the offline configurator (what `wisp plan` prints), with the sweep of caps.
#include "arrays.hpp"
#include "bindings.hpp"
#include "errors.hpp"

#include <wisp/alloc/configurator.hpp>
#include <wisp/alloc/cost_model.hpp>
#include <wisp/alloc/model_file.hpp>
#include <wisp/alloc/model_spec.hpp>
#include <wisp/alloc/split.hpp>
#include <wisp/alloc/units.hpp>
#include <wisp/reuse/histogram.hpp>
#include <wisp/reuse/trace_profile.hpp>
#include <wisp/trace/routing_trace.hpp>

#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace wisp_python {
namespace {

using budget_arg = std::variant<std::uint64_t, std::string>;

wisp::byte_size budget_bytes(const budget_arg& budget) {
  if (const auto* text = std::get_if<std::string>(&budget)) {
    return wisp::parse_byte_size(*text);
  }
  return wisp::byte_size{std::get<std::uint64_t>(budget)};
}

wisp::model_spec spec_of(const std::variant<wisp::model_spec, std::string>& model) {
  if (const auto* name = std::get_if<std::string>(&model)) {
    return wisp::model_preset(*name);
  }
  return std::get<wisp::model_spec>(model);
}

nb::typed<nb::dict, nb::str, nb::int_> split_dict(const wisp::split& s) {
  nb::typed<nb::dict, nb::str, nb::int_> d;
  d["expert_cap"] = s.expert_cap;
  d["kv_blocks"] = s.kv_blocks;
  d["kv_tokens"] = s.kv_tokens;
  d["expert_bytes"] = s.expert_bytes.count();
  d["kv_bytes"] = s.kv_bytes.count();
  d["slack"] = s.slack.count();
  return d;
}

struct plan_result {
  wisp::configuration conf;
  std::vector<wisp::sweep_point> sweep;
};

}  // namespace

// One declarative table of the module's alloc bindings (long, but a list reads best whole).
void bind_alloc(nb::module_& m) {
  nb::class_<wisp::model_spec>(
      m, "ModelSpec",
      "What an expert/KV split is made of: MoE layers, experts per layer, top-k, bytes of one "
      "expert, KV bytes per token and tokens per KV block.")
      .def(
          "__init__",
          [](wisp::model_spec* self, std::string name, std::int32_t layers, std::int32_t experts,
             std::int32_t top_k, std::uint64_t expert_bytes, std::uint64_t kv_bytes_per_token,
             std::uint32_t block_tokens) {
            wisp::model_spec s{std::move(name),
                               layers,
                               experts,
                               top_k,
                               wisp::byte_size{expert_bytes},
                               wisp::byte_size{kv_bytes_per_token},
                               block_tokens};
            s.validate();
            new (self) wisp::model_spec(std::move(s));
          },
          nb::arg("name"), nb::arg("layers"), nb::arg("experts"), nb::arg("top_k"),
          nb::arg("expert_bytes"), nb::arg("kv_bytes_per_token"), nb::arg("block_tokens") = 16)
      .def_static("preset", &wisp::model_preset, nb::arg("name"),
                  "A built-in preset (see wisp.model_presets()).")
      .def_static(
          "read_json",
          [](const std::filesystem::path& path) {
            return reading(path, [&] { return wisp::read_model_json(path).spec; });
          },
          nb::arg("path"), "A model .json file (the direct form or published config fields).")
      .def_ro("name", &wisp::model_spec::name)
      .def_ro("layers", &wisp::model_spec::layers)
      .def_ro("experts", &wisp::model_spec::experts)
      .def_ro("top_k", &wisp::model_spec::top_k)
      .def_prop_ro("expert_bytes", [](const wisp::model_spec& s) { return s.expert_bytes.count(); })
      .def_prop_ro("kv_bytes_per_token",
                   [](const wisp::model_spec& s) { return s.kv_bytes_per_token.count(); })
      .def_ro("block_tokens", &wisp::model_spec::block_tokens)
      .def_prop_ro(
          "cap_unit_bytes", [](const wisp::model_spec& s) { return s.cap_unit_bytes().count(); },
          "one slot in every MoE layer: layers * expert_bytes")
      .def_prop_ro("kv_block_bytes",
                   [](const wisp::model_spec& s) { return s.kv_block_bytes().count(); })
      .def(
          "__eq__", [](const wisp::model_spec& a, const wisp::model_spec& b) { return a == b; },
          nb::is_operator())
      .def("__repr__", [](const wisp::model_spec& s) {
        return "ModelSpec(name='" + s.name + "', layers=" + std::to_string(s.layers) +
               ", experts=" + std::to_string(s.experts) + ", top_k=" + std::to_string(s.top_k) +
               ", expert_bytes=" + std::to_string(s.expert_bytes.count()) +
               ", kv_bytes_per_token=" + std::to_string(s.kv_bytes_per_token.count()) +
               ", block_tokens=" + std::to_string(s.block_tokens) + ")";
      });

  m.def(
      "model_presets",
      [] {
        std::vector<std::string> names;
        for (const wisp::model_preset_entry& p : wisp::model_presets()) {
          names.emplace_back(p.config.name);
        }
        return names;
      },
      "Names of the built-in model presets.");

  m.def(
      "parse_byte_size",
      [](const std::string& text) { return wisp::parse_byte_size(text).count(); }, nb::arg("text"),
      "Bytes in a size as people write it ('24GiB', '1.5 GiB', '80GB', '8000000000'), exactly.");

  m.def(
      "minimum_budget",
      [](const std::variant<wisp::model_spec, std::string>& model, std::uint64_t concurrency,
         std::uint64_t context) {
        return wisp::minimum_budget(spec_of(model), {concurrency, context}).count();
      },
      nb::arg("model"), nb::arg("concurrency") = 0, nb::arg("context") = 0,
      "The smallest budget with a feasible split: top_k slots per layer plus the KV admission "
      "floor (concurrency sessions x context tokens).");

  nb::class_<plan_result>(m, "Plan", "What plan() chose, and the sweep of caps.")
      .def_prop_ro(
          "choice", [](const plan_result& p) { return split_dict(p.conf.choice); },
          "The minimum predicted-latency feasible split (ties to the smallest cap): "
          "{expert_cap, kv_blocks, kv_tokens, expert_bytes, kv_bytes, slack}.")
      .def_prop_ro("predicted_seconds",
                   [](const plan_result& p) { return p.conf.predicted_seconds; })
      .def_prop_ro(
          "max_feasible_cap", [](const plan_result& p) { return p.conf.max_feasible_cap; },
          "feasible caps are [top_k, max_feasible_cap]")
      .def_prop_ro(
          "knobs",
          [](const plan_result& p) {
            nb::typed<nb::dict, nb::str, nb::int_> d;
            d["per_layer_expert_cap"] = p.conf.knobs.per_layer_expert_cap;
            d["kv_cache_bytes"] = p.conf.knobs.kv_cache_bytes.count();
            d["kv_blocks"] = p.conf.knobs.kv_blocks;
            return d;
          },
          "The choice as the two engine settings.")
      .def_prop_ro(
          "sweep",
          [](const plan_result& p) {
            nb::typed<nb::list, nb::dict> rows;
            for (const wisp::sweep_point& s : p.sweep) {
              nb::dict d = split_dict(s.s);
              d["fits"] = s.fits;
              d["feasible"] = s.feasible;
              d["predicted_seconds"] = s.seconds;
              rows.append(d);
            }
            return rows;
          },
          "One row per swept cap: the split, whether the expert pool fits the budget, whether it "
          "is feasible (fits and meets the KV floor), and its predicted seconds (NaN if it does "
          "not fit).");

  m.def(
      "plan",
      [](const std::variant<wisp::model_spec, std::string>& model, const budget_arg& budget,
         const wisp::routing_trace& trace, std::uint64_t concurrency, std::uint64_t context,
         double bandwidth_gbps, double recompute,
         std::optional<std::vector<std::int32_t>> sweep_caps) {
        const wisp::model_spec spec = spec_of(model);
        const wisp::byte_size bytes = budget_bytes(budget);
        const wisp::admission_floor floor{concurrency, context};
        const auto& shape = trace.shape();
        WISP_EXPECTS(shape == spec.shape(), "trace has ", shape, " but model ", spec.name, " has ",
                     spec.shape());
        std::vector<std::int32_t> caps = sweep_caps.value_or(std::vector<std::int32_t>{});
        if (caps.empty()) {
          for (std::int32_t c = spec.top_k; c <= spec.experts; ++c) {
            caps.push_back(c);
          }
        }
        try {
          wisp::require_feasible(spec, bytes, floor);  // before any trace work
        } catch (const wisp::infeasible_error& e) {
          throw infeasible_with_budget(e, wisp::minimum_budget(spec, floor).count());
        }
        nb::gil_scoped_release unlocked;
        const wisp::reuse_profile profile =
            wisp::profile_trace(trace, wisp::cache_scope::per_layer);
        // The KV stream: the admission floor's working set read once per decode round.
        const std::uint64_t rounds =
            std::max<std::uint64_t>(1, trace.steps() / std::max<std::uint64_t>(1, concurrency));
        const wisp::cost_model<> cost{
            spec, wisp::miss_curve{profile.histogram},
            wisp::working_set_kv_curve(floor.blocks(spec.block_tokens), rounds),
            wisp::cost_params{bandwidth_gbps * 1e9, recompute}};
        return plan_result{wisp::configure(cost, bytes, floor),
                           wisp::sweep(cost, bytes, floor, caps)};
      },
      nb::arg("model"), nb::arg("budget"), nb::arg("trace"), nb::arg("concurrency") = 0,
      nb::arg("context") = 0, nb::arg("bandwidth_gbps") = 25.0, nb::arg("recompute") = 2e-4,
      nb::arg("sweep_caps") = nb::none(),
      "Splits a device budget (bytes or a size such as '24GiB') between expert slots and KV "
      "blocks (MV-WSA's offline configurator, what `wisp plan --trace` prints): the expert miss "
      "curve comes from `trace` (per-layer scope), the KV stream is the admission floor's "
      "working set read every round. Raises InfeasibleError (with .minimum_budget) when no cap "
      "is feasible. Releases the GIL for the profile and the sweep.");
}

}  // namespace wisp_python
