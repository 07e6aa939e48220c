// SPDX-License-Identifier: Apache-2.0
// The extension module wisp._wisp. The Python package `wisp` (python/wisp) re-exports it.
#include "arrays.hpp"
#include "bindings.hpp"
#include "errors.hpp"

#include <wisp/cache/visit_policy.hpp>
#include <wisp/version.hpp>

#include <string_view>
#include <type_traits>

namespace wisp_python {

std::string_view policy_name(std::string_view name) {
  // An unknown name: wisp::logic_error "unknown policy 'NAME' (known: ...)".
  return wisp::visit_policy(name, []<class P>(std::type_identity<P>) { return P::name; });
}

}  // namespace wisp_python

NB_MODULE(_wisp, m) {
  namespace wp = wisp_python;
  namespace nb = nanobind;
  wp::init_numpy();
  wp::register_errors(m, nb::module_::import_("wisp.errors"));
  m.attr("__version__") = WISP_VERSION_STRING;
  nb::list policies;
  for (const std::string_view name : wisp::builtin_policy_names) {
    policies.append(nb::str(name.data(), name.size()));
  }
  m.attr("POLICIES") = nb::tuple(policies);
  wp::bind_pager(m);
  wp::bind_trace(m);
  wp::bind_reuse(m);
  wp::bind_sim(m);
  wp::bind_alloc(m);
  wp::bind_parallel(m);
}
