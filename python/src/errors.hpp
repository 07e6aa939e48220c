// SPDX-License-Identifier: Apache-2.0
// wisp's C++ exceptions as Python exceptions (classes defined in python/wisp/errors.py):
//   wisp::logic_error      -> wisp.LogicError        (a ValueError)
//   wisp::format_error     -> wisp.FormatError       (a ValueError; .offset, .path)
//   wisp::infeasible_error -> wisp.InfeasibleError   (a ValueError; .minimum_budget)
//   wisp::out_of_memory    -> wisp.OutOfMemoryError  (a MemoryError)
//   wisp::error            -> wisp.Error
#pragma once

#include <wisp/core/error.hpp>

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>

namespace wisp_python {

namespace nb = nanobind;

/// Registers the translator (`errors` is the imported wisp.errors module) and `_raise_error`,
/// which throws each C++ exception type so that the tests can check every mapping.
void register_errors(nb::module_& m, nb::module_ errors);

/// A format error located in a file the caller named.
struct file_format_error : wisp::format_error {
  file_format_error(const wisp::format_error& e, std::string file)
      : wisp::format_error(e), path(std::move(file)) {}
  std::string path;
};

/// No split is feasible; carries the smallest budget that is.
struct infeasible_with_budget : wisp::infeasible_error {
  infeasible_with_budget(const wisp::infeasible_error& e, std::uint64_t budget)
      : wisp::infeasible_error(e), minimum_budget(budget) {}
  std::uint64_t minimum_budget;
};

/// Raises FileNotFoundError unless `path` exists (the C++ readers report it as a plain error).
void require_exists(const std::filesystem::path& path);

/// Runs `read()` (which reads `path`), attaching the path to any format error.
template <class Read>
auto reading(const std::filesystem::path& path, Read&& read) {
  require_exists(path);
  try {
    return std::forward<Read>(read)();
  } catch (const wisp::format_error& e) {
    throw file_format_error(e, path.string());
  }
}

}  // namespace wisp_python
