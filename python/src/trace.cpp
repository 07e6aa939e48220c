// SPDX-License-Identifier: Apache-2.0
// Trace: wisp::routing_trace, its .wtrace reader/writer, the ESFT and JSONL importers (an
// ImportedTrace: the trace and its ImportReport), the synthetic router, and its accesses as numpy
// columns. Traces may hold partial steps (tokens lacking some layers): the columns skip their
// missing rows, and the [steps, layers, top_k] arrays mark them (-1 ids, NaN weights).
#include "arrays.hpp"
#include "bindings.hpp"
#include "errors.hpp"

#include <wisp/trace/esft.hpp>
#include <wisp/trace/import.hpp>
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
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace wisp_python {
namespace {

// Columns of the next `n` accesses from `it`, in canonical order: step, layer, expert. The
// trace's own iterator skips the rows that partial steps lack.
using columns_dict = nb::typed<nb::dict, nb::str, numpy_array>;

columns_dict columns(wisp::routing_trace::access_iterator& it, std::size_t n) {
  std::uint32_t* steps = nullptr;
  std::int32_t* layers = nullptr;
  std::int32_t* experts = nullptr;
  const auto size = static_cast<std::int64_t>(n);
  columns_dict out;
  out["step"] = numpy_empty<std::uint32_t>({size}, steps);
  out["layer"] = numpy_empty<std::int32_t>({size}, layers);
  out["expert"] = numpy_empty<std::int32_t>({size}, experts);
  for (std::size_t o = 0; o < n; ++o, ++it) {
    const wisp::access a = *it;
    steps[o] = a.step;
    layers[o] = a.layer;
    experts[o] = a.expert;
  }
  return out;
}

// Iterates a trace's accesses in chunks of numpy columns; holds the (immutable) trace alive, so
// its iterator stays valid.
struct column_chunks {
  nb::object trace;  // the Python Trace
  wisp::routing_trace::access_iterator next;
  std::size_t left;
  std::size_t chunk;
};

// The trace an importer made, and what it found missing (a Trace to Python, with `.report`).
struct imported : wisp::routing_trace {
  explicit imported(wisp::imported_trace&& r)
      : wisp::routing_trace(std::move(r.trace)), report(r.report) {}
  wisp::import_report report;
};

wisp::incomplete_tokens parse_on_incomplete(const std::string& name) {
  const auto policy = wisp::from_string<wisp::incomplete_tokens>(name);
  WISP_EXPECTS(policy.has_value(), "on_incomplete must be 'error', 'skip' or 'keep', got '", name,
               "'");
  return *policy;
}

template <class T>
using array3 = nb::ndarray<const T, nb::ndim<3>, nb::c_contig, nb::device::cpu>;

wisp::routing_trace from_arrays(
    array3<std::int32_t> ids, std::int32_t experts, std::optional<array3<float>> weights,
    std::optional<std::vector<std::int64_t>> sequence_starts,
    std::optional<nb::ndarray<const bool, nb::ndim<2>, nb::c_contig, nb::device::cpu>> present) {
  wisp::routing_trace t(
      {static_cast<std::int32_t>(ids.shape(1)), experts, static_cast<std::int32_t>(ids.shape(2))});
  const std::size_t steps = ids.shape(0);
  const std::size_t layers = ids.shape(1);
  const std::size_t per_step = t.shape().ids_per_step();
  if (weights) {
    WISP_EXPECTS(weights->shape(0) == ids.shape(0) && weights->shape(1) == ids.shape(1) &&
                     weights->shape(2) == ids.shape(2),
                 "weights has shape [", weights->shape(0), ", ", weights->shape(1), ", ",
                 weights->shape(2), "] but ids has [", ids.shape(0), ", ", ids.shape(1), ", ",
                 ids.shape(2), "]");
  }
  if (present) {
    WISP_EXPECTS(present->shape(0) == steps && present->shape(1) == layers, "present has shape [",
                 present->shape(0), ", ", present->shape(1), "] but ids has [", steps, ", ", layers,
                 ", ...]");
  }
  const std::vector<std::int64_t> starts = sequence_starts.value_or(std::vector<std::int64_t>{});
  for (std::size_t i = 0; i < starts.size(); ++i) {
    WISP_EXPECTS(starts[i] >= 0 && static_cast<std::size_t>(starts[i]) < steps &&
                     (i == 0 || starts[i - 1] < starts[i]),
                 "sequence_starts must be strictly increasing step indices below ", steps,
                 "; entry ", i, " is ", starts[i]);
  }
  t.reserve(steps);
  std::vector<std::uint8_t> held(layers);
  std::size_t next_start = 0;
  for (std::size_t s = 0; s < steps; ++s) {
    if (next_start < starts.size() && static_cast<std::size_t>(starts[next_start]) == s) {
      t.begin_sequence();
      ++next_start;
    }
    const std::span<const std::int32_t> row(ids.data() + s * per_step, per_step);
    const std::span<const float> w =
        weights ? std::span<const float>(weights->data() + s * per_step, per_step)
                : std::span<const float>();
    bool complete = true;
    for (std::size_t l = 0; present && l < layers; ++l) {
      held[l] = present->data()[s * layers + l] ? 1 : 0;
      complete = complete && held[l] != 0;
    }
    if (complete) {
      t.append_step(row, w);
    } else {
      t.append_partial_step(row, held, w);
    }
  }
  return t;
}

wisp::synthetic_config synthetic_config(const std::string& preset, nb::kwargs overrides) {
  wisp::synthetic_config c = wisp::synthetic_preset(preset);
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

// One declarative table of the module's trace bindings (long, but a list reads best whole).
void bind_trace(nb::module_& m) {
  nb::class_<column_chunks>(m, "ColumnChunks", "Iterator over a trace's accesses in chunks.")
      .def(
          "__iter__", [](column_chunks& c) -> column_chunks& { return c; },
          nb::rv_policy::reference)
      .def("__next__", [](column_chunks& c) {
        if (c.left == 0) {
          throw nb::stop_iteration();
        }
        const std::size_t n = std::min(c.left, c.chunk);
        c.left -= n;
        return columns(c.next, n);
      });

  nb::class_<wisp::import_report>(
      m, "ImportReport",
      "What an importer found missing in a routing log and what it did about it (all zero for a "
      "complete log). A record is one (token, layer) entry: a JSONL line, or one token's top_k ids "
      "in an ESFT layer file.")
      .def_ro("incomplete_tokens", &wisp::import_report::incomplete_tokens,
              "tokens lacking at least one layer")
      .def_ro("missing_records", &wisp::import_report::missing_records,
              "(token, layer) records those tokens lack")
      .def_ro("dropped_tokens", &wisp::import_report::dropped_tokens,
              "on_incomplete='skip': incomplete tokens left out")
      .def_ro("dropped_records", &wisp::import_report::dropped_records,
              "on_incomplete='skip': the records of those tokens, left out")
      .def_ro("partial_tokens", &wisp::import_report::partial_tokens,
              "on_incomplete='keep': incomplete tokens kept with the layers present")
      .def_ro("incomplete_sequences", &wisp::import_report::incomplete_sequences,
              "sequences (ESFT lines, JSONL groups) holding such tokens")
      .def(
          "__eq__",
          [](const wisp::import_report& a, const wisp::import_report& b) { return a == b; },
          nb::is_operator())
      .def("__repr__", [](const wisp::import_report& r) {
        return "ImportReport(incomplete_tokens=" + std::to_string(r.incomplete_tokens) +
               ", missing_records=" + std::to_string(r.missing_records) +
               ", dropped_tokens=" + std::to_string(r.dropped_tokens) +
               ", dropped_records=" + std::to_string(r.dropped_records) +
               ", partial_tokens=" + std::to_string(r.partial_tokens) +
               ", incomplete_sequences=" + std::to_string(r.incomplete_sequences) + ")";
      });

  nb::class_<wisp::routing_trace>(
      m, "Trace",
      "A routing trace (wisp::routing_trace): which top_k of `experts` experts every MoE "
      "layer chose at every step (token), optional gate weights, and sequence starts. Immutable "
      "once made; replayed in canonical order: step, layer, then the top_k ids as recorded.\n\n"
      "A step may be partial (a token the routing log lacks some layers of, kept by an importer "
      "with on_incomplete='keep'): replays skip its missing (step, layer) rows, `present()` says "
      "which rows are held and `complete` is False.")
      .def_static("from_arrays", &from_arrays, nb::arg("ids"), nb::arg("experts"),
                  nb::arg("weights") = nb::none(), nb::arg("sequence_starts") = nb::none(),
                  nb::arg("present") = nb::none(),
                  "A trace from ids[steps, layers, top_k] (ids distinct within each row), "
                  "optional float32 weights of the same shape, the steps where sequences begin, "
                  "and optional present[steps, layers] (bool): False marks a row the step lacks, "
                  "whose ids and weights are ignored. Round trip: from_arrays(t.ids(), "
                  "t.experts, t.weights(), t.sequence_starts, t.present()) == t (weights only "
                  "when t.has_weights).")
      .def_static(
          "read",
          [](const std::filesystem::path& path) {
            return reading(path, [&] {
              nb::gil_scoped_release unlocked;
              return wisp::read_wtrace(path);
            });
          },
          nb::arg("path"), "Reads a .wtrace file (validated: CRCs, sizes, ids, weights).")
      .def_static(
          "import_esft",
          [](const std::filesystem::path& path, std::int32_t experts, std::int32_t top_k,
             const std::string& on_incomplete) {
            const wisp::esft_config opt{.experts = experts,
                                        .top_k = top_k,
                                        .on_incomplete = parse_on_incomplete(on_incomplete)};
            return reading(path, [&] {
              nb::gil_scoped_release unlocked;
              return imported(wisp::import_esft(path, opt));
            });
          },
          nb::arg("path"), nb::arg("experts") = 64, nb::arg("top_k") = 6,
          nb::arg("on_incomplete") = "error",
          "Imports an ESFT expert_weights_<L>.txt folder (one file per MoE layer). A line whose "
          "files disagree on its token count is refused (on_incomplete='error', FormatError), or "
          "its tokens lacking some layers are left out ('skip') or kept with the layers present "
          "('keep'); the result's `report` counts them. Releases the GIL.")
      .def_static(
          "import_jsonl",
          [](const std::filesystem::path& path, std::string group_key, std::int32_t experts,
             std::int32_t layers, std::string layer_key, std::string experts_key,
             std::string token_key, std::string weights_key, const std::string& on_incomplete) {
            const wisp::jsonl_config opt{.group_key = std::move(group_key),
                                         .experts = experts,
                                         .layers = layers,
                                         .layer_key = std::move(layer_key),
                                         .experts_key = std::move(experts_key),
                                         .token_key = std::move(token_key),
                                         .weights_key = std::move(weights_key),
                                         .on_incomplete = parse_on_incomplete(on_incomplete)};
            return reading(path, [&] {
              nb::gil_scoped_release unlocked;
              return imported(wisp::import_jsonl(path, opt));
            });
          },
          nb::arg("path"), nb::arg("group_key") = "", nb::arg("experts") = 0, nb::arg("layers") = 0,
          nb::arg("layer_key") = "layer", nb::arg("experts_key") = "experts",
          nb::arg("token_key") = "token_idx", nb::arg("weights_key") = "weights",
          nb::arg("on_incomplete") = "error",
          "Imports a JSON Lines routing log, one record per (token, layer); experts/layers 0 "
          "infer them from the data. A token lacking some layers is refused "
          "(on_incomplete='error', FormatError), left out ('skip') or kept with the layers "
          "present ('keep'); the result's `report` counts them. Releases the GIL.")
      .def_static(
          "synthetic",
          [](const std::string& preset, std::size_t steps, std::uint64_t seed,
             nb::kwargs overrides) {
            const wisp::synthetic_config config = synthetic_config(preset, std::move(overrides));
            nb::gil_scoped_release unlocked;
            return wisp::make_synthetic_trace(config, steps, seed);
          },
          nb::arg("preset") = "default", nb::arg("steps") = wisp::default_synthetic_steps,
          nb::arg("seed") = wisp::default_synthetic_seed, nb::arg("overrides"),
          "The deterministic synthetic router: a preset (default, deepseek-v2-lite, "
          "qwen3-30b-a3b, mixtral-8x7b, olmoe-1b-7b, uniform) with any of its parameters "
          "overridden by keyword (layers, experts, top_k, zipf_exponent, zipf_spread, "
          "working_set, locality, coactivation, drift_rate, topics, mean_sequence_length, "
          "topic_shift_probability).")
      .def(
          "write",
          [](const wisp::routing_trace& t, const std::filesystem::path& path) {
            nb::gil_scoped_release unlocked;
            wisp::write_wtrace(t, path);
          },
          nb::arg("path"), "Writes the trace as a .wtrace file (partial steps included).")
      .def_prop_ro("layers", [](const wisp::routing_trace& t) { return t.shape().layers; })
      .def_prop_ro("experts", [](const wisp::routing_trace& t) { return t.shape().experts; })
      .def_prop_ro("top_k", [](const wisp::routing_trace& t) { return t.shape().top_k; })
      .def_prop_ro("steps", &wisp::routing_trace::steps)
      .def_prop_ro("access_count", &wisp::routing_trace::access_count,
                   "top_k per (step, layer) row held: (steps * layers - missing_rows) * top_k")
      .def_prop_ro("has_weights", &wisp::routing_trace::has_weights)
      .def_prop_ro("complete", &wisp::routing_trace::complete,
                   "True when every step holds every layer (no partial step)")
      .def_prop_ro("missing_rows", &wisp::routing_trace::missing_rows,
                   "(step, layer) rows that partial steps lack")
      .def(
          "present",
          [](const wisp::routing_trace& t) {
            bool* out = nullptr;
            numpy_array a =
                numpy_empty<bool>({static_cast<std::int64_t>(t.steps()), t.shape().layers}, out);
            for (std::size_t s = 0; s < t.steps(); ++s) {
              for (std::int32_t l = 0; l < t.shape().layers; ++l) {
                *out++ = t.has_layer(s, l);
              }
            }
            return a;
          },
          "bool[steps, layers]: whether each step holds each layer (all True for a complete "
          "trace).")
      .def_prop_ro(
          "sequence_starts",
          [](const wisp::routing_trace& t) {
            const auto s = t.sequence_starts();
            std::vector<std::uint64_t> starts(s.begin(), s.end());
            return numpy_copy(std::span<const std::uint64_t>(starts));
          },
          "uint64 array: the steps where sequences begin")
      .def(
          "ids",
          [](const wisp::routing_trace& t) {
            const std::int64_t layers = t.shape().layers;
            const std::int64_t k = t.shape().top_k;
            std::int32_t* out = nullptr;
            numpy_array a =
                numpy_empty<std::int32_t>({static_cast<std::int64_t>(t.steps()), layers, k}, out);
            if (!t.complete()) {
              std::fill_n(out, t.steps() * t.shape().ids_per_step(), -1);
            }
            t.for_each_call(
                [&](std::uint32_t step, std::int32_t layer, std::span<const std::int32_t> ids) {
                  std::copy(ids.begin(), ids.end(), out + (step * layers + layer) * k);
                });
            return a;
          },
          "A copy of the ids, int32[steps, layers, top_k]; -1 in the rows partial steps lack.")
      .def(
          "weights",
          [](const wisp::routing_trace& t) {
            WISP_EXPECTS(t.has_weights(), "this routing trace has no gate weights");
            float* out = nullptr;
            numpy_array a = numpy_empty<float>(
                {static_cast<std::int64_t>(t.steps()), t.shape().layers, t.shape().top_k}, out);
            for (std::size_t s = 0; s < t.steps(); ++s) {
              for (std::int32_t l = 0; l < t.shape().layers; ++l) {
                const bool held = t.has_layer(s, l);
                for (std::int32_t j = 0; j < t.shape().top_k; ++j) {
                  *out++ = held ? t.weight(s, l, j) : std::numeric_limits<float>::quiet_NaN();
                }
              }
            }
            return a;
          },
          "A copy of the gate weights, float32[steps, layers, top_k]; NaN in the rows partial "
          "steps lack. Raises LogicError when the trace has none.")
      .def(
          "columns",
          [](const wisp::routing_trace& t, std::size_t start, std::optional<std::size_t> stop) {
            const std::size_t end = std::min(stop.value_or(t.access_count()), t.access_count());
            start = std::min(start, end);
            auto it = t.accesses().begin();
            std::advance(it, static_cast<std::ptrdiff_t>(start));
            return columns(it, end - start);
          },
          nb::arg("start") = 0, nb::arg("stop") = nb::none(),
          "Accesses [start, stop) in canonical order as numpy columns: {'step': uint32, "
          "'layer': int32, 'expert': int32} (the rows partial steps lack are skipped). "
          "O(stop).")
      .def(
          "iter_columns",
          [](nb::handle self, std::size_t chunk) {
            WISP_EXPECTS(chunk > 0, "iter_columns: chunk must be positive");
            const auto& t = nb::cast<const wisp::routing_trace&>(self);
            return column_chunks{nb::borrow(self), t.accesses().begin(), t.access_count(), chunk};
          },
          nb::arg("chunk") = std::size_t{1} << 20,
          "Iterates the accesses in chunks of `chunk` as columns (see columns()); no per-access "
          "Python object, O(accesses) in all.")
      .def("__len__", &wisp::routing_trace::access_count)
      .def(
          "__eq__",
          [](const wisp::routing_trace& a, const wisp::routing_trace& b) { return a == b; },
          nb::is_operator(),
          "Same shape, rows held, ids, weights and sequence starts (an import report does not "
          "count).")
      .def("__repr__", [](const wisp::routing_trace& t) {
        return "Trace(steps=" + std::to_string(t.steps()) +
               ", layers=" + std::to_string(t.shape().layers) +
               ", experts=" + std::to_string(t.shape().experts) +
               ", top_k=" + std::to_string(t.shape().top_k) + (t.has_weights() ? ", weights" : "") +
               (t.complete() ? "" : ", missing_rows=" + std::to_string(t.missing_rows())) + ")";
      });

  nb::class_<imported, wisp::routing_trace>(
      m, "ImportedTrace",
      "A Trace made by an importer (Trace.import_esft, Trace.import_jsonl), with the importer's "
      "`report`: what the routing log lacked and what was done about it.")
      .def_ro("report", &imported::report, "the ImportReport (all zero for a complete log)");
}

}  // namespace wisp_python
