// SPDX-License-Identifier: Apache-2.0
// Reuse: exact profiles of a trace in both scopes and both granularities (per call, as the pager
// serves a layer's request, or per access), reuse histograms, LRU miss curves, decayed histograms
// for online controllers and SHARDS-sampled curves.
#include "arrays.hpp"
#include "bindings.hpp"
#include "errors.hpp"

#include <wisp/reuse/decayed_histogram.hpp>
#include <wisp/reuse/histogram.hpp>
#include <wisp/reuse/reuse_distance.hpp>
#include <wisp/reuse/scoped_counter.hpp>
#include <wisp/reuse/shards.hpp>
#include <wisp/reuse/trace_profile.hpp>
#include <wisp/trace/routing_trace.hpp>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace wisp_python {
namespace {

wisp::reuse_granularity trace_granularity(const std::string& name) {
  const auto granularity = wisp::from_string<wisp::reuse_granularity>(name);
  WISP_EXPECTS(granularity.has_value(), "granularity must be 'call' or 'access', got '", name, "'");
  return *granularity;
}

// SHARDS with its key space, so a batch of keys is checked before any is recorded.
struct sampled_counter {
  wisp::sampled_reuse_counter counter;
  std::size_t key_space;
};

// Distances as numpy uint32 (cold = wisp.COLD).
template <class Record>
numpy_array distance_array(std::size_t n, Record&& record) {
  std::uint32_t* out = nullptr;
  numpy_array a = numpy_empty<std::uint32_t>({static_cast<std::int64_t>(n)}, out);
  record(out);
  return a;
}

}  // namespace

// One declarative table of the module's reuse bindings (long, but a list reads best whole).
void bind_reuse(nb::module_& m) {
  m.attr("COLD") = wisp::reuse_distance_counter::cold;

  nb::class_<wisp::reuse_histogram>(
      m, "ReuseHistogram",
      "Counts of LRU stack distances plus cold (first-sight) accesses. A per-layer histogram is "
      "the sum of one histogram per layer.")
      .def_prop_ro("scope",
                   [](const wisp::reuse_histogram& h) {
                     return std::string(wisp::to_string(h.shape().scope));
                   })
      .def_prop_ro("partitions",
                   [](const wisp::reuse_histogram& h) { return h.shape().partitions; })
      .def_prop_ro("keys_per_partition",
                   [](const wisp::reuse_histogram& h) { return h.shape().keys_per_partition; })
      .def_prop_ro("cold", &wisp::reuse_histogram::cold)
      .def_prop_ro("warm", &wisp::reuse_histogram::warm)
      .def_prop_ro("accesses", &wisp::reuse_histogram::accesses)
      .def_prop_ro("max_distance", &wisp::reuse_histogram::max_distance)
      .def("count", &wisp::reuse_histogram::count, nb::arg("distance"))
      .def(
          "counts",
          [](const wisp::reuse_histogram& h) {
            std::vector<std::uint64_t> c(std::size_t{h.max_distance()} + 1);
            for (std::uint32_t d = 1; d <= h.max_distance(); ++d) {
              c[d] = h.count(d);
            }
            return numpy_copy(std::span<const std::uint64_t>(c));
          },
          "uint64[max_distance + 1]: counts[d] accesses of distance d (counts[0] is 0).")
      .def("merge", &wisp::reuse_histogram::merge, nb::arg("other"), nb::rv_policy::none,
           "Adds every count of `other` (same shape: an independent stream or cache).")
      .def(
          "__eq__",
          [](const wisp::reuse_histogram& a, const wisp::reuse_histogram& b) { return a == b; },
          nb::is_operator());

  nb::class_<wisp::miss_curve>(
      m, "MissCurve",
      "Misses of an LRU cache at every capacity, from one reuse histogram: misses(c) = cold + "
      "#{d > c}. Per-layer scope: c is the slots of each layer, misses summed over layers.")
      .def(nb::init<const wisp::reuse_histogram&>(), nb::arg("histogram"))
      .def_prop_ro("accesses", &wisp::miss_curve::accesses)
      .def_prop_ro("cold", &wisp::miss_curve::cold)
      .def_prop_ro("max_capacity", &wisp::miss_curve::max_capacity,
                   "smallest capacity at which only cold misses remain")
      .def("misses", &wisp::miss_curve::misses, nb::arg("capacity"))
      .def("miss_ratio", &wisp::miss_curve::miss_ratio, nb::arg("capacity"))
      .def("hit_ratio", &wisp::miss_curve::hit_ratio, nb::arg("capacity"))
      .def("capacity_for_hit_ratio", &wisp::miss_curve::capacity_for_hit_ratio, nb::arg("target"),
           "Smallest capacity whose hit ratio is at least `target`, or None when cold misses "
           "make it unreachable.")
      .def(
          "values", [](const wisp::miss_curve& c) { return numpy_copy(c.values()); },
          "uint64[max_capacity + 1]: misses at capacities 0..max_capacity.")
      .def(
          "miss_ratios",
          [](const wisp::miss_curve& c) {
            std::vector<double> r(c.values().size());
            for (std::size_t i = 0; i < r.size(); ++i) {
              r[i] = c.miss_ratio(i);
            }
            return numpy_copy(std::span<const double>(r));
          },
          "float64[max_capacity + 1]: miss ratios at capacities 0..max_capacity.");

  nb::class_<wisp::reuse_profile>(m, "ReuseProfile", "The exact reuse profile of a trace.")
      .def_ro("histogram", &wisp::reuse_profile::histogram)
      .def_ro("distinct_per_cache", &wisp::reuse_profile::distinct_per_cache,
              "distinct keys of the largest cache (global: all keys)")
      .def_ro("distinct_total", &wisp::reuse_profile::distinct_total,
              "distinct (layer, expert) keys over all caches")
      .def_prop_ro(
          "curve", [](const wisp::reuse_profile& p) { return wisp::miss_curve(p.histogram); },
          "The LRU miss curve of the histogram.");

  m.def(
      "profile",
      [](const wisp::routing_trace& trace, const std::string& scope,
         const std::string& granularity) {
        const wisp::cache_scope s = wisp::cache_scope_from_string(scope);
        const wisp::reuse_granularity g = trace_granularity(granularity);
        nb::gil_scoped_release unlocked;
        return wisp::profile_trace(trace, s, g);
      },
      nb::arg("trace"), nb::arg("scope") = "layer", nb::arg("granularity") = "call",
      "Exact reuse profile of `trace` replayed in canonical order: scope 'layer' (one LRU cache "
      "per layer) or 'global' (one over all (layer, expert) keys). Granularity 'call' (the "
      "default, as `wisp reuse`): each (step, layer) request's top_k experts are one call that "
      "cannot evict its own experts, so the curve equals the misses of the pager and of "
      "simulate(trace, 'lru', c) at every capacity c >= top_k; 'access': every expert access on "
      "its own (textbook LRU, equal to simulate(..., protect_calls=False)). O(accesses log keys); "
      "releases the GIL.");

  m.def(
      "reuse_distances",
      [](const wisp::routing_trace& trace, const std::string& scope,
         const std::string& granularity) {
        const wisp::cache_scope s = wisp::cache_scope_from_string(scope);
        const wisp::reuse_granularity g = trace_granularity(granularity);
        return distance_array(trace.access_count(), [&](std::uint32_t* out) {
          nb::gil_scoped_release unlocked;
          wisp::scoped_reuse_counter counter(s, static_cast<std::uint32_t>(trace.shape().layers),
                                             static_cast<std::uint32_t>(trace.shape().experts));
          if (g == wisp::reuse_granularity::access) {
            trace.for_each_access([&](const wisp::access& a) {
              *out++ = counter.access(static_cast<std::uint32_t>(a.layer),
                                      static_cast<std::uint32_t>(a.expert));
            });
            return;
          }
          std::vector<std::uint32_t> experts(static_cast<std::size_t>(trace.shape().top_k));
          trace.for_each_call(
              [&](std::uint32_t, std::int32_t layer, std::span<const std::int32_t> ids) {
                experts.assign(ids.begin(), ids.end());
                counter.access_call(static_cast<std::uint32_t>(layer), experts,
                                    std::span<std::uint32_t>(out, experts.size()));
                out += experts.size();
              });
        });
      },
      nb::arg("trace"), nb::arg("scope") = "layer", nb::arg("granularity") = "call",
      "uint32[accesses]: the stack distance of every access in canonical order (wisp.COLD on "
      "first sight). Granularity 'call': each access's distance in the stack as it was before "
      "its (step, layer) call (profile()'s histogram counts these); 'access': per access. "
      "Releases the GIL.");

  nb::class_<wisp::decayed_histogram>(
      m, "DecayedHistogram",
      "A binned reuse-distance histogram with per-burst exponential decay (H <- decay * H + "
      "burst): the current marginal value of one more slot, for online controllers.")
      .def(nb::init<std::vector<std::uint32_t>, double>(), nb::arg("edges"), nb::arg("decay"))
      .def_static("unit_edges", &wisp::decayed_histogram::unit_edges, nb::arg("max_distance"))
      .def_static("power_of_two_edges", &wisp::decayed_histogram::power_of_two_edges,
                  nb::arg("max_distance"))
      .def("record", &wisp::decayed_histogram::record, nb::arg("distance"), nb::arg("weight") = 1.0,
           "Adds `weight` accesses of `distance` (wisp.COLD = cold).")
      .def(
          "record_many",
          [](wisp::decayed_histogram& h, array_like distances) {
            with_values(int_vector_from(distances, "distances"), [&](const auto& values) {
              for (const auto v : values) {
                WISP_EXPECTS(
                    v >= 1 && static_cast<std::uint64_t>(v) <= wisp::reuse_distance_counter::cold,
                    "distance ", v, " is outside [1, wisp.COLD]");
              }
              for (const auto v : values) {
                h.record(static_cast<std::uint32_t>(v));
              }
            });
          },
          nb::arg("distances"),
          "record() for each entry of a 1-D int64/int32 array (e.g. reuse_distances as int64).")
      .def("end_burst", &wisp::decayed_histogram::end_burst)
      .def("add_burst", &wisp::decayed_histogram::add_burst, nb::arg("burst"))
      .def_prop_ro("decay", &wisp::decayed_histogram::decay)
      .def_prop_ro("edges", [](const wisp::decayed_histogram& h) { return numpy_copy(h.edges()); })
      .def_prop_ro(
          "bins", [](const wisp::decayed_histogram& h) { return numpy_copy(h.bins()); },
          "decayed mass per bin; the last is the overflow bin")
      .def_prop_ro("cold", &wisp::decayed_histogram::cold)
      .def_prop_ro("warm_total", &wisp::decayed_histogram::warm_total)
      .def_prop_ro("bursts", &wisp::decayed_histogram::bursts)
      .def_prop_ro("max_capacity", &wisp::decayed_histogram::max_capacity)
      .def("hits", &wisp::decayed_histogram::hits, nb::arg("capacity"))
      .def("warm_miss_ratio", &wisp::decayed_histogram::warm_miss_ratio, nb::arg("capacity"))
      .def("marginal", &wisp::decayed_histogram::marginal, nb::arg("capacity"))
      .def(
          "marginals",
          [](const wisp::decayed_histogram& h) {
            const std::vector<double> v = h.marginals();
            return numpy_copy(std::span<const double>(v));
          },
          "float64[max_capacity]: marginal(c) for c = 0..max_capacity-1.");

  nb::class_<sampled_counter>(
      m, "SampledReuseCounter",
      "Fixed-rate SHARDS: exact stack distances of a hash-sampled subset of the keys, scaled "
      "back into a miss-ratio curve estimate.")
      .def(
          "__init__",
          [](sampled_counter* self, std::size_t key_space, double rate, std::uint64_t seed,
             bool adjust) {
            new (self) sampled_counter{
                wisp::sampled_reuse_counter(
                    key_space, wisp::shards_options{.rate = rate, .seed = seed, .adjust = adjust}),
                key_space};
          },
          nb::arg("key_space"), nb::arg("rate") = 0.01, nb::arg("seed") = 0,
          nb::arg("adjust") = true)
      .def(
          "access",
          [](sampled_counter& c, array_like keys) {
            with_values(int_vector_from(keys, "keys"), [&](const auto& values) {
              for (const auto v : values) {
                WISP_EXPECTS(v >= 0 && static_cast<std::uint64_t>(v) < c.key_space, "key ", v,
                             " is outside [0, key_space = ", c.key_space, ")");
              }
              for (const auto v : values) {  // holds the GIL: the counter is shared state
                c.counter.access(static_cast<wisp::sampled_reuse_counter::key_type>(v));
              }
            });
          },
          nb::arg("keys"), "Records one access per entry of a 1-D integer key array.")
      .def_ro("key_space", &sampled_counter::key_space)
      .def_prop_ro("rate", [](const sampled_counter& c) { return c.counter.rate(); })
      .def_prop_ro("adjusted", [](const sampled_counter& c) { return c.counter.adjusted(); })
      .def_prop_ro("accesses", [](const sampled_counter& c) { return c.counter.accesses(); })
      .def_prop_ro("sampled_accesses",
                   [](const sampled_counter& c) { return c.counter.sampled_accesses(); })
      .def_prop_ro("sampled_keys",
                   [](const sampled_counter& c) { return c.counter.sampled_keys(); })
      .def(
          "estimated_miss_ratio",
          [](const sampled_counter& c, std::uint64_t capacity) {
            return c.counter.estimated_miss_ratio(capacity);
          },
          nb::arg("capacity"))
      .def(
          "estimated_misses",
          [](const sampled_counter& c, std::uint64_t capacity) {
            return c.counter.estimated_misses(capacity);
          },
          nb::arg("capacity"))
      .def(
          "estimate",
          [](const sampled_counter& c, std::uint64_t max_capacity) {
            const wisp::miss_ratio_curve curve = c.counter.estimate(max_capacity);
            return numpy_copy(curve.values());
          },
          nb::arg("max_capacity"),
          "float64[max_capacity + 1]: estimated miss ratios at capacities 0..max_capacity.");
}

}  // namespace wisp_python
