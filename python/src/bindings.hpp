// SPDX-License-Identifier: Apache-2.0
// One function per area of wisp, each in its own file, called by module.cpp. Every entity they
// bind is in the one namespace `wisp::`, whatever its area.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/stl/string_view.h>  // in every file: one definition of its caster

#include <string>
#include <string_view>

namespace wisp_python {

namespace nb = nanobind;

void bind_pager(nb::module_& m);     // pager.cpp: Pager, PrepareResult, groups, RerouteTable
void bind_trace(nb::module_& m);     // trace.cpp: Trace and its readers, writers and generator
void bind_reuse(nb::module_& m);     // reuse.cpp: profiles, miss curves, decayed and SHARDS
void bind_sim(nb::module_& m);       // sim.cpp: trace-driven policy simulation
void bind_alloc(nb::module_& m);     // alloc.cpp: model presets, budget plans
void bind_parallel(nb::module_& m);  // parallel.cpp: the expert-parallel simulator

/// The library's name of a built-in policy given by its library or command-line name
/// ("least_stale" or "least-stale"). @throws wisp::logic_error listing the known names.
std::string_view policy_name(std::string_view name);

}  // namespace wisp_python
