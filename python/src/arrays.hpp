// SPDX-License-Identifier: Apache-2.0
// Arrays across the Python boundary. Incoming integer arrays are read in place (numpy arrays
// directly, anything else through DLPack or the buffer protocol); outgoing arrays are numpy
// arrays made with numpy's C API, which costs a fraction of a generic DLPack export on a
// per-layer hot path. Only arrays.cpp sees numpy's headers.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

namespace wisp_python {

namespace nb = nanobind;

/// Imports numpy's C API; called once by the module initialiser.
void init_numpy();

namespace detail {
bool is_numpy_array(PyObject* o) noexcept;
inline bool any_object(PyObject*) noexcept {
  return true;
}
}  // namespace detail

/// A numpy array we return (typed as such in signatures and stubs).
class numpy_array : public nb::object {
 public:
  NB_OBJECT_DEFAULT(numpy_array, object, "numpy.typing.NDArray", detail::is_numpy_array)
};

/// An array argument: numpy, a torch CPU tensor, or anything with __dlpack__ or the buffer
/// protocol (typed as numpy.typing.ArrayLike in signatures and stubs).
class array_like : public nb::object {
 public:
  NB_OBJECT_DEFAULT(array_like, object, "numpy.typing.ArrayLike", detail::any_object)
};

/// A 2-D int32 or int64 CPU array handed in by a caller, viewed without copying.
struct int_matrix {
  const void* data = nullptr;
  bool wide = false;            // int64 elements (else int32)
  int ndim = 0;                 // 1: rows holds the length and cols is 1
  std::int64_t rows = 0;        // tokens
  std::int64_t cols = 0;        // k
  std::int64_t row_stride = 0;  // in elements
  std::int64_t col_stride = 0;  // in elements
  nb::ndarray<nb::ro> holder;   // keeps a DLPack import alive (empty for numpy arrays)

  /// Row-major with no gaps: the elements can be handed to C++ as one span.
  [[nodiscard]] bool contiguous() const noexcept {
    return (col_stride == 1 || cols <= 1) && (row_stride == cols || rows <= 1);
  }
  /// The contiguous elements as a span (only when `contiguous()`).
  template <class T>
  [[nodiscard]] std::span<const T> span() const noexcept {
    return {static_cast<const T*>(data), static_cast<std::size_t>(rows * cols)};
  }
  /// Copies the elements row-major into `out` (resized): for arrays that are not contiguous.
  template <class T>
  void gather(std::vector<T>& out) const;
};

/// Calls `f(values)` with the elements of `m` copied row-major into a vector of their own type
/// (`std::vector<std::int32_t>` or `std::vector<std::int64_t>`): for batch calls that check every
/// value before applying any.
template <class F>
decltype(auto) with_values(const int_matrix& m, F&& f) {
  if (m.wide) {
    std::vector<std::int64_t> values;
    m.gather(values);
    return f(values);
  }
  std::vector<std::int32_t> values;
  m.gather(values);
  return f(values);
}

/// Views `obj` (numpy array, torch CPU tensor, anything with `__dlpack__` or the buffer protocol)
/// as a 2-D int32/int64 array. `what` names the argument in error messages.
/// @throws nb::type_error for another dtype or a non-CPU array; wisp::logic_error for ndim != 2.
int_matrix int_matrix_from(nb::handle obj, const char* what);

/// Views `obj` as a 1-D int32/int64 array (same sources and errors as `int_matrix_from`).
int_matrix int_vector_from(nb::handle obj, const char* what);

/// A writable, contiguous 1-D int32 CPU array of `size` elements handed in by a caller.
/// @throws nb::type_error / wisp::logic_error naming `what` otherwise.
std::span<std::int32_t> writable_int32(nb::handle obj, std::size_t size, const char* what,
                                       nb::ndarray<>& holder);

/// A new numpy array of `shape` holding a copy of `data` (its size must match the shape).
template <class T>
numpy_array numpy_copy(const T* data, std::initializer_list<std::int64_t> shape);
template <class T>
numpy_array numpy_copy(std::span<const T> data) {
  return numpy_copy(data.data(), {static_cast<std::int64_t>(data.size())});
}

/// A new read-only numpy array of `shape` viewing `data`, which `owner` keeps alive.
template <class T>
numpy_array numpy_view(const T* data, std::initializer_list<std::int64_t> shape, nb::handle owner);

/// A new, uninitialised, writable numpy array of `shape`; `data` receives its first element.
template <class T>
numpy_array numpy_empty(std::initializer_list<std::int64_t> shape, T*& data);

}  // namespace wisp_python
