// SPDX-License-Identifier: Apache-2.0
// Trace: wisp::trace::routing_trace, its .wtrace reader/writer, the ESFT and JSONL importers, the
// synthetic router, and its accesses as numpy columns.
#include "arrays.hpp"
#include "bindings.hpp"
#include "errors.hpp"

#include <wisp/trace/esft.hpp>
#include <wisp/trace/jsonl.hpp>
#include <wisp/trace/routing_trace.hpp>
#include <wisp/trace/synthetic.hpp>
#include <wisp/trace/wtrace.hpp>

#include <nanobind/ndarray.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace wisp_python {
namespace {

namespace tr = wisp::trace;

// Columns of accesses [start, stop) in canonical order: step, layer, expert.
using columns_dict = nb::typed<nb::dict, nb::str, numpy_array>;

columns_dict columns(const tr::routing_trace& t, std::size_t start, std::size_t stop) {
  stop = std::min(stop, t.access_count());
  start = std::min(start, stop);
  const auto n = static_cast<std::int64_t>(stop - start);
  std::uint32_t* steps = nullptr;
  std::int32_t* layers = nullptr;
  std::int32_t* experts = nullptr;
  columns_dict out;
  out["step"] = numpy_empty<std::uint32_t>({n}, steps);
  out["layer"] = numpy_empty<std::int32_t>({n}, layers);
  out["expert"] = numpy_empty<std::int32_t>({n}, experts);
  const auto k = static_cast<std::size_t>(t.shape().top_k);
  const std::size_t per_step = t.shape().ids_per_step();
  for (std::size_t i = start, o = 0; i < stop; ++i, ++o) {
    const std::size_t step = i / per_step;
    const auto layer = static_cast<std::int32_t>((i % per_step) / k);
    steps[o] = static_cast<std::uint32_t>(step);
    layers[o] = layer;
    experts[o] = t.expert(step, layer, static_cast<std::int32_t>(i % k));
  }
  return out;
}

// Iterates a trace's accesses in chunks of numpy columns; holds the trace alive.
struct column_chunks {
  nb::object trace;  // the Python Trace
  std::size_t chunk;
  std::size_t next = 0;
};

tr::routing_trace from_arrays(
    nb::ndarray<const std::int32_t, nb::ndim<3>, nb::c_contig, nb::device::cpu> ids,
    std::int32_t experts,
    std::optional<nb::ndarray<const float, nb::ndim<3>, nb::c_contig, nb::device::cpu>> weights,
    std::optional<std::vector<std::int64_t>> sequence_starts) {
  tr::routing_trace t(
      {static_cast<std::int32_t>(ids.shape(1)), experts, static_cast<std::int32_t>(ids.shape(2))});
  const std::size_t steps = ids.shape(0);
  const std::size_t per_step = t.shape().ids_per_step();
  if (weights) {
    WISP_EXPECTS(weights->shape(0) == ids.shape(0) && weights->shape(1) == ids.shape(1) &&
                     weights->shape(2) == ids.shape(2),
                 "weights has shape [", weights->shape(0), ", ", weights->shape(1), ", ",
                 weights->shape(2), "] but ids has [", ids.shape(0), ", ", ids.shape(1), ", ",
                 ids.shape(2), "]");
  }
  const std::vector<std::int64_t> starts = sequence_starts.value_or(std::vector<std::int64_t>{});
  for (std::size_t i = 0; i < starts.size(); ++i) {
    WISP_EXPECTS(starts[i] >= 0 && static_cast<std::size_t>(starts[i]) < steps &&
                     (i == 0 || starts[i - 1] < starts[i]),
                 "sequence_starts must be strictly increasing step indices below ", steps,
                 "; entry ", i, " is ", starts[i]);
  }
  t.reserve(steps);
  std::size_t next_start = 0;
  for (std::size_t s = 0; s < steps; ++s) {
    if (next_start < starts.size() && static_cast<std::size_t>(starts[next_start]) == s) {
      t.begin_sequence();
      ++next_start;
    }
    const std::span<const std::int32_t> row(ids.data() + s * per_step, per_step);
    if (weights) {
      t.append_step(row, std::span<const float>(weights->data() + s * per_step, per_step));
    } else {
      t.append_step(row);
    }
  }
  return t;
}

tr::synthetic_config synthetic_config(const std::string& preset, nb::kwargs overrides) {
  tr::synthetic_config c = tr::synthetic_preset(preset);
  for (const auto& [key, value] : overrides) {
    const std::string name = nb::cast<std::string>(key);
    const auto set = [&](const char* field, auto& member) {
      if (name == field) {
        member = nb::cast<std::remove_reference_t<decltype(member)>>(value);
        return true;
      }
      return false;
    };
    const bool known = set("layers", c.layers) || set("experts", c.experts) ||
                       set("top_k", c.top_k) || set("zipf_exponent", c.zipf_exponent) ||
                       set("zipf_spread", c.zipf_spread) || set("working_set", c.working_set) ||
                       set("locality", c.locality) || set("coactivation", c.coactivation) ||
                       set("drift_rate", c.drift_rate) || set("topics", c.topics) ||
                       set("mean_sequence_length", c.mean_sequence_length) ||
                       set("topic_shift_probability", c.topic_shift_probability);
    WISP_EXPECTS(known, "synthetic: unknown parameter '", name, "'");
  }
  return c;
}

}  // namespace

void bind_trace(nb::module_& m) {
  nb::class_<column_chunks>(m, "ColumnChunks", "Iterator over a trace's accesses in chunks.")
      .def(
          "__iter__", [](column_chunks& c) -> column_chunks& { return c; },
          nb::rv_policy::reference)
      .def("__next__", [](column_chunks& c) {
        const auto& t = nb::cast<const tr::routing_trace&>(c.trace);
        if (c.next >= t.access_count()) {
          throw nb::stop_iteration();
        }
        const std::size_t start = c.next;
        c.next = std::min(t.access_count(), start + c.chunk);
        return columns(t, start, c.next);
      });

  nb::class_<tr::routing_trace>(
      m, "Trace",
      "A routing trace (wisp::trace::routing_trace): which top_k of `experts` experts every MoE "
      "layer chose at every step (token), optional gate weights, and sequence starts. Immutable "
      "once made; replayed in canonical order: step, layer, then the top_k ids as recorded.")
      .def_static("from_arrays", &from_arrays, nb::arg("ids"), nb::arg("experts"),
                  nb::arg("weights") = nb::none(), nb::arg("sequence_starts") = nb::none(),
                  "A trace from ids[steps, layers, top_k] (ids distinct within each row), "
                  "optional float32 weights of the same shape and the steps where sequences "
                  "begin.")
      .def_static(
          "read",
          [](const std::filesystem::path& path) {
            return reading(path, [&] {
              nb::gil_scoped_release unlocked;
              return tr::read_wtrace(path);
            });
          },
          nb::arg("path"), "Reads a .wtrace file (validated: CRCs, sizes, ids, weights).")
      .def_static(
          "import_esft",
          [](const std::filesystem::path& path, std::int32_t experts, std::int32_t top_k) {
            return reading(path, [&] {
              nb::gil_scoped_release unlocked;
              return tr::import_esft(path, tr::esft_options{.experts = experts, .top_k = top_k});
            });
          },
          nb::arg("path"), nb::arg("experts") = 64, nb::arg("top_k") = 6,
          "Imports an ESFT expert_weights_<L>.txt folder (one file per MoE layer).")
      .def_static(
          "import_jsonl",
          [](const std::filesystem::path& path, std::string group_key, std::int32_t experts,
             std::int32_t layers, std::string layer_key, std::string experts_key,
             std::string token_key, std::string weights_key) {
            const tr::jsonl_options opt{.group_key = std::move(group_key),
                                        .experts = experts,
                                        .layers = layers,
                                        .layer_key = std::move(layer_key),
                                        .experts_key = std::move(experts_key),
                                        .token_key = std::move(token_key),
                                        .weights_key = std::move(weights_key)};
            return reading(path, [&] {
              nb::gil_scoped_release unlocked;
              return tr::import_jsonl(path, opt);
            });
          },
          nb::arg("path"), nb::arg("group_key") = "", nb::arg("experts") = 0, nb::arg("layers") = 0,
          nb::arg("layer_key") = "layer", nb::arg("experts_key") = "experts",
          nb::arg("token_key") = "token_idx", nb::arg("weights_key") = "weights",
          "Imports a JSON Lines routing log, one record per (token, layer); experts/layers 0 "
          "infer them from the data.")
      .def_static(
          "synthetic",
          [](const std::string& preset, std::size_t steps, std::uint64_t seed,
             nb::kwargs overrides) {
            const tr::synthetic_config config = synthetic_config(preset, std::move(overrides));
            nb::gil_scoped_release unlocked;
            return tr::make_synthetic_trace(config, steps, seed);
          },
          nb::arg("preset") = "default", nb::arg("steps") = tr::default_synthetic_steps,
          nb::arg("seed") = tr::default_synthetic_seed, nb::arg("overrides"),
          "The deterministic synthetic router: a preset (default, deepseek-v2-lite, "
          "qwen3-30b-a3b, mixtral-8x7b, olmoe-1b-7b, uniform) with any of its parameters "
          "overridden by keyword (layers, experts, top_k, zipf_exponent, zipf_spread, "
          "working_set, locality, coactivation, drift_rate, topics, mean_sequence_length, "
          "topic_shift_probability).")
      .def(
          "write",
          [](const tr::routing_trace& t, const std::filesystem::path& path) {
            nb::gil_scoped_release unlocked;
            tr::write_wtrace(t, path);
          },
          nb::arg("path"), "Writes the trace as a .wtrace file.")
      .def_prop_ro("layers", [](const tr::routing_trace& t) { return t.shape().layers; })
      .def_prop_ro("experts", [](const tr::routing_trace& t) { return t.shape().experts; })
      .def_prop_ro("top_k", [](const tr::routing_trace& t) { return t.shape().top_k; })
      .def_prop_ro("steps", &tr::routing_trace::steps)
      .def_prop_ro("access_count", &tr::routing_trace::access_count, "steps * layers * top_k")
      .def_prop_ro("has_weights", &tr::routing_trace::has_weights)
      .def_prop_ro(
          "sequence_starts",
          [](const tr::routing_trace& t) {
            const auto s = t.sequence_starts();
            std::vector<std::uint64_t> starts(s.begin(), s.end());
            return numpy_copy(std::span<const std::uint64_t>(starts));
          },
          "uint64 array: the steps where sequences begin")
      .def(
          "ids",
          [](const tr::routing_trace& t) {
            std::int32_t* out = nullptr;
            numpy_array a = numpy_empty<std::int32_t>(
                {static_cast<std::int64_t>(t.steps()), t.shape().layers, t.shape().top_k}, out);
            t.for_each_access([&out](const tr::access& x) { *out++ = x.expert; });
            return a;
          },
          "A copy of the ids, int32[steps, layers, top_k].")
      .def(
          "weights",
          [](const tr::routing_trace& t) {
            float* out = nullptr;
            numpy_array a = numpy_empty<float>(
                {static_cast<std::int64_t>(t.steps()), t.shape().layers, t.shape().top_k}, out);
            for (std::size_t s = 0; s < t.steps(); ++s) {
              for (std::int32_t l = 0; l < t.shape().layers; ++l) {
                for (std::int32_t j = 0; j < t.shape().top_k; ++j) {
                  *out++ = t.weight(s, l, j);
                }
              }
            }
            return a;
          },
          "A copy of the gate weights, float32[steps, layers, top_k]. Raises LogicError when "
          "the trace has none.")
      .def(
          "columns",
          [](const tr::routing_trace& t, std::size_t start, std::optional<std::size_t> stop) {
            return columns(t, start, stop.value_or(t.access_count()));
          },
          nb::arg("start") = 0, nb::arg("stop") = nb::none(),
          "Accesses [start, stop) in canonical order as numpy columns: {'step': uint32, "
          "'layer': int32, 'expert': int32}.")
      .def(
          "iter_columns",
          [](nb::handle self, std::size_t chunk) {
            WISP_EXPECTS(chunk > 0, "iter_columns: chunk must be positive");
            return column_chunks{nb::borrow(self), chunk};
          },
          nb::arg("chunk") = std::size_t{1} << 20,
          "Iterates the accesses in chunks of `chunk` as columns (see columns()); no per-access "
          "Python object.")
      .def("__len__", &tr::routing_trace::access_count)
      .def(
          "__eq__", [](const tr::routing_trace& a, const tr::routing_trace& b) { return a == b; },
          nb::is_operator())
      .def("__repr__", [](const tr::routing_trace& t) {
        return "Trace(steps=" + std::to_string(t.steps()) +
               ", layers=" + std::to_string(t.shape().layers) +
               ", experts=" + std::to_string(t.shape().experts) +
               ", top_k=" + std::to_string(t.shape().top_k) + (t.has_weights() ? ", weights" : "") +
               ")";
      });
}

}  // namespace wisp_python
