// SPDX-License-Identifier: Apache-2.0
#include "arrays.hpp"

#include <wisp/core/error.hpp>

#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL wisp_python_numpy_api
#include <numpy/arrayobject.h>

#include <algorithm>
#include <cstring>

namespace wisp_python {
namespace {

template <class T>
constexpr int numpy_type() {
  if constexpr (std::is_same_v<T, bool>) {
    static_assert(sizeof(bool) == 1, "numpy's bool is one byte");
    return NPY_BOOL;
  } else if constexpr (std::is_same_v<T, std::int32_t>) {
    return NPY_INT32;
  } else if constexpr (std::is_same_v<T, std::int64_t>) {
    return NPY_INT64;
  } else if constexpr (std::is_same_v<T, std::uint32_t>) {
    return NPY_UINT32;
  } else if constexpr (std::is_same_v<T, std::uint64_t>) {
    return NPY_UINT64;
  } else if constexpr (std::is_same_v<T, float>) {
    return NPY_FLOAT32;
  } else {
    static_assert(std::is_same_v<T, double>);
    return NPY_FLOAT64;
  }
}

template <class T>
nb::object new_array(std::initializer_list<std::int64_t> shape, void* data, int flags) {
  npy_intp dims[NPY_MAXDIMS];
  int nd = 0;
  for (const std::int64_t d : shape) {
    dims[nd++] = static_cast<npy_intp>(d);
  }
  PyObject* a =
      PyArray_New(&PyArray_Type, nd, dims, numpy_type<T>(), nullptr, data, 0, flags, nullptr);
  if (a == nullptr) {
    throw nb::python_error();
  }
  return nb::steal(a);
}

std::size_t element_count(std::initializer_list<std::int64_t> shape) {
  std::size_t n = 1;
  for (const std::int64_t d : shape) {
    n *= static_cast<std::size_t>(d);
  }
  return n;
}

[[noreturn]] void bad_dtype(const char* what, const std::string& got) {
  throw nb::type_error(
      (std::string(what) + " must be an int32 or int64 array, got dtype " + got).c_str());
}

// The numpy fast path: no DLPack capsule, no buffer request.
int_matrix from_numpy(PyArrayObject* a, const char* what) {
  const int type = PyArray_TYPE(a);
  int_matrix m;
  if (type == NPY_INT32 || (type == NPY_LONG && sizeof(long) == 4)) {
    m.wide = false;
  } else if (type == NPY_INT64 || type == NPY_LONGLONG || (type == NPY_LONG && sizeof(long) == 8)) {
    m.wide = true;
  } else {
    bad_dtype(what, nb::str(nb::handle(reinterpret_cast<PyObject*>(PyArray_DESCR(a)))).c_str());
  }
  if (!PyArray_ISNOTSWAPPED(a)) {
    bad_dtype(what, "with non-native byte order");
  }
  const int nd = PyArray_NDIM(a);
  const npy_intp* shape = PyArray_DIMS(a);
  const npy_intp* strides = PyArray_STRIDES(a);
  const npy_intp item = m.wide ? 8 : 4;
  m.data = PyArray_DATA(a);
  m.ndim = nd;
  if (nd == 2) {
    m.rows = shape[0];
    m.cols = shape[1];
    m.row_stride = strides[0] / item;
    m.col_stride = strides[1] / item;
    WISP_EXPECTS(strides[0] % item == 0 && strides[1] % item == 0, what,
                 ": strides are not a multiple of the element size");
  } else if (nd == 1) {
    m.rows = shape[0];
    m.cols = 1;
    m.row_stride = strides[0] / item;
    m.col_stride = 1;
    WISP_EXPECTS(strides[0] % item == 0, what, ": strides are not a multiple of the element size");
  }
  return m;
}

int_matrix from_dlpack(nb::handle obj, const char* what) {
  nb::ndarray<nb::ro> a;
  if (!nb::try_cast(obj, a, /*convert=*/false)) {
    throw nb::type_error((std::string(what) +
                          " must be an integer array (numpy, torch CPU tensor, or any object "
                          "with __dlpack__ or the buffer protocol), got " +
                          nb::inst_name(obj).c_str())
                             .c_str());
  }
  if (a.device_type() != nb::device::cpu::value) {
    throw nb::type_error((std::string(what) +
                          " must be on the CPU (the pager runs on the host: move the ids with "
                          ".cpu() first), got device type " +
                          std::to_string(a.device_type()))
                             .c_str());
  }
  const nb::dlpack::dtype dt = a.dtype();
  int_matrix m;
  if (dt == nb::dtype<std::int32_t>()) {
    m.wide = false;
  } else if (dt == nb::dtype<std::int64_t>()) {
    m.wide = true;
  } else {
    bad_dtype(what,
              "code " + std::to_string(dt.code) + " with " + std::to_string(dt.bits) + " bits");
  }
  m.data = a.data();
  m.ndim = static_cast<int>(a.ndim());
  if (a.ndim() == 2) {
    m.rows = static_cast<std::int64_t>(a.shape(0));
    m.cols = static_cast<std::int64_t>(a.shape(1));
    m.row_stride = a.stride(0);
    m.col_stride = a.stride(1);
  } else if (a.ndim() == 1) {
    m.rows = static_cast<std::int64_t>(a.shape(0));
    m.cols = 1;
    m.row_stride = a.stride(0);
    m.col_stride = 1;
  }
  m.holder = std::move(a);
  return m;
}

int_matrix any_int_array(nb::handle obj, const char* what) {
  if (PyArray_Check(obj.ptr())) {
    return from_numpy(reinterpret_cast<PyArrayObject*>(obj.ptr()), what);
  }
  return from_dlpack(obj, what);
}

}  // namespace

namespace detail {
bool is_numpy_array(PyObject* o) noexcept {
  return PyArray_Check(o);
}
}  // namespace detail

void init_numpy() {
  if (_import_array() < 0) {
    throw nb::python_error();
  }
}

template <class T>
void int_matrix::gather(std::vector<T>& out) const {
  out.resize(static_cast<std::size_t>(rows * cols));
  const T* base = static_cast<const T*>(data);
  std::size_t i = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      out[i++] = base[r * row_stride + c * col_stride];
    }
  }
}
template void int_matrix::gather(std::vector<std::int32_t>&) const;
template void int_matrix::gather(std::vector<std::int64_t>&) const;

// The shape of `obj` as Python prints it, for messages.
std::string shape_of(nb::handle obj) {
  return nb::str(nb::getattr(obj, "shape", nb::none())).c_str();
}

int_matrix int_matrix_from(nb::handle obj, const char* what) {
  int_matrix m = any_int_array(obj, what);
  if (m.ndim != 2) {
    WISP_FAIL(wisp::logic_error, what, " must be a 2-D [tokens, k] array, got shape ",
              shape_of(obj));
  }
  return m;
}

int_matrix int_vector_from(nb::handle obj, const char* what) {
  int_matrix m = any_int_array(obj, what);
  if (m.ndim != 1) {
    WISP_FAIL(wisp::logic_error, what, " must be a 1-D array, got shape ", shape_of(obj));
  }
  return m;
}

std::span<std::int32_t> writable_int32(nb::handle obj, std::size_t size, const char* what,
                                       nb::ndarray<>& holder) {
  if (PyArray_Check(obj.ptr())) {
    auto* a = reinterpret_cast<PyArrayObject*>(obj.ptr());
    if (PyArray_TYPE(a) != NPY_INT32 || PyArray_NDIM(a) != 1 || !PyArray_ISCARRAY(a)) {
      throw nb::type_error(
          (std::string(what) + " must be a writable, contiguous 1-D int32 array").c_str());
    }
    WISP_EXPECTS(static_cast<std::size_t>(PyArray_DIM(a, 0)) == size, what, " holds ",
                 PyArray_DIM(a, 0), " entries but the pager has ", size, " experts");
    return {static_cast<std::int32_t*>(PyArray_DATA(a)), size};
  }
  nb::ndarray<std::int32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> a;
  if (!nb::try_cast(obj, a, /*convert=*/false)) {
    throw nb::type_error(
        (std::string(what) + " must be a writable, contiguous 1-D int32 CPU array (numpy or torch)")
            .c_str());
  }
  WISP_EXPECTS(a.shape(0) == size, what, " holds ", a.shape(0), " entries but the pager has ", size,
               " experts");
  std::span<std::int32_t> out(a.data(), size);
  holder = nb::ndarray<>(a);
  return out;
}

template <class T>
numpy_array numpy_copy(const T* data, std::initializer_list<std::int64_t> shape) {
  T* out = nullptr;
  numpy_array a = numpy_empty<T>(shape, out);
  const std::size_t n = element_count(shape);
  if (n != 0) {
    std::memcpy(out, data, n * sizeof(T));
  }
  return a;
}

template <class T>
numpy_array numpy_view(const T* data, std::initializer_list<std::int64_t> shape, nb::handle owner) {
  // numpy never writes through a read-only array (NPY_ARRAY_WRITEABLE is off).
  nb::object a = new_array<T>(shape, const_cast<T*>(data), NPY_ARRAY_CARRAY_RO);
  if (PyArray_SetBaseObject(reinterpret_cast<PyArrayObject*>(a.ptr()), owner.inc_ref().ptr()) < 0) {
    throw nb::python_error();
  }
  return nb::steal<numpy_array>(a.release());
}

template <class T>
numpy_array numpy_empty(std::initializer_list<std::int64_t> shape, T*& data) {
  nb::object a = new_array<T>(shape, nullptr, 0);
  data = static_cast<T*>(PyArray_DATA(reinterpret_cast<PyArrayObject*>(a.ptr())));
  return nb::steal<numpy_array>(a.release());
}

#define WISP_PYTHON_ARRAYS(T)                                                                    \
  template numpy_array numpy_copy<T>(const T*, std::initializer_list<std::int64_t>);             \
  template numpy_array numpy_view<T>(const T*, std::initializer_list<std::int64_t>, nb::handle); \
  template numpy_array numpy_empty<T>(std::initializer_list<std::int64_t>, T*&);
WISP_PYTHON_ARRAYS(bool)
WISP_PYTHON_ARRAYS(std::int32_t)
WISP_PYTHON_ARRAYS(std::int64_t)
WISP_PYTHON_ARRAYS(std::uint32_t)
WISP_PYTHON_ARRAYS(std::uint64_t)
WISP_PYTHON_ARRAYS(float)
WISP_PYTHON_ARRAYS(double)
#undef WISP_PYTHON_ARRAYS

}  // namespace wisp_python
