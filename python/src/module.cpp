// SPDX-License-Identifier: Apache-2.0
// The extension module wisp._wisp. The Python package `wisp` (python/wisp) re-exports it.
#include "arrays.hpp"
#include "bindings.hpp"
#include "errors.hpp"

#include <wisp/sim/simulate.hpp>
#include <wisp/version.hpp>

#include <string>

namespace wisp_python {

std::string_view policy_name(std::string_view name) {
  for (const std::string_view known : wisp::sim::builtin_policies) {
    if (name == known) {
      return known;
    }
  }
  if (name == "least-stale") {
    return "least_stale";
  }
  std::string valid;
  for (const std::string_view known : wisp::sim::builtin_policies) {
    valid += valid.empty() ? "" : ", ";
    valid += known;
  }
  WISP_FAIL(wisp::logic_error, "unknown policy '", name, "' (valid: ", valid, ")");
}

}  // namespace wisp_python

NB_MODULE(_wisp, m) {
  namespace wp = wisp_python;
  namespace nb = nanobind;
  wp::init_numpy();
  wp::register_errors(m, nb::module_::import_("wisp.errors"));
  m.attr("__version__") = WISP_VERSION_STRING;
  nb::list policies;
  for (const std::string_view name : wisp::sim::builtin_policies) {
    policies.append(nb::str(name.data(), name.size()));
  }
  m.attr("POLICIES") = nb::tuple(policies);
  wp::bind_pager(m);
  wp::bind_trace(m);
  wp::bind_reuse(m);
  wp::bind_sim(m);
  wp::bind_alloc(m);
}
