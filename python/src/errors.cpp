// SPDX-License-Identifier: Apache-2.0
#include "errors.hpp"

#include <cerrno>
#include <exception>

namespace wisp_python {
namespace {

// The exception classes, looked up once; types live as long as the interpreter.
struct classes {
  PyObject* error = nullptr;
  PyObject* logic = nullptr;
  PyObject* format = nullptr;
  PyObject* infeasible = nullptr;
  PyObject* out_of_memory = nullptr;
};
classes python_classes;

void raise(PyObject* type, nb::object instance) {
  PyErr_SetObject(type, instance.ptr());
}

nb::object offset_of(const wisp::format_error& e) {
  if (e.offset() == wisp::format_error::no_offset) {
    return nb::none();
  }
  return nb::int_(e.offset());
}

void translate(const std::exception_ptr& p, void*) {
  const classes& c = python_classes;
  try {
    std::rethrow_exception(p);
  } catch (const file_format_error& e) {
    raise(c.format, nb::handle(c.format)(e.what(), offset_of(e), e.path));
  } catch (const wisp::format_error& e) {
    raise(c.format, nb::handle(c.format)(e.what(), offset_of(e), nb::none()));
  } catch (const infeasible_with_budget& e) {
    raise(c.infeasible, nb::handle(c.infeasible)(e.what(), e.minimum_budget));
  } catch (const wisp::infeasible_error& e) {
    raise(c.infeasible, nb::handle(c.infeasible)(e.what(), nb::none()));
  } catch (const wisp::out_of_memory& e) {
    PyErr_SetString(c.out_of_memory, e.what());
  } catch (const wisp::logic_error& e) {
    PyErr_SetString(c.logic, e.what());
  } catch (const wisp::error& e) {
    PyErr_SetString(c.error, e.what());
  }
}

PyObject* lookup(nb::module_ errors, const char* name) {
  return nb::getattr(errors, name).release().ptr();  // kept for the interpreter's lifetime
}

}  // namespace

void register_errors(nb::module_& m, nb::module_ errors) {
  python_classes = {lookup(errors, "Error"), lookup(errors, "LogicError"),
                    lookup(errors, "FormatError"), lookup(errors, "InfeasibleError"),
                    lookup(errors, "OutOfMemoryError")};
  nb::register_exception_translator(translate);
  m.def(
      "_raise_error",
      [](const std::string& kind, const std::string& message) {
        if (kind == "logic") {
          throw wisp::logic_error(message);
        }
        if (kind == "format") {
          throw wisp::format_error(7, message);
        }
        if (kind == "file_format") {
          throw file_format_error(wisp::format_error(7, message), "f");
        }
        if (kind == "infeasible") {
          throw wisp::infeasible_error(message);
        }
        if (kind == "infeasible_with_budget") {
          throw infeasible_with_budget(wisp::infeasible_error(message), 42);
        }
        if (kind == "out_of_memory") {
          throw wisp::out_of_memory(message);
        }
        throw wisp::error(message);
      },
      nb::arg("kind"), nb::arg("message"), "Throws a C++ exception of `kind` (for tests).");
}

void require_exists(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    nb::object e =
        nb::handle(PyExc_FileNotFoundError)(ENOENT, "No such file or directory", path.string());
    PyErr_SetObject(PyExc_FileNotFoundError, e.ptr());
    throw nb::python_error();
  }
}

}  // namespace wisp_python
