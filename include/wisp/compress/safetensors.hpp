// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief A small, strict reader of the safetensors header: where each named tensor lies in the
/// file, its dtype and shape. Enough to compress the BF16 tensors of a checkpoint and keep every
/// other byte as it is; no tensor data is interpreted here.
///
/// The format: a little-endian u64 `N`, `N` bytes of UTF-8 JSON (possibly padded with spaces),
/// then the data. The JSON object maps each tensor name to
/// `{"dtype": "BF16", "shape": [rows, cols], "data_offsets": [begin, end]}` (offsets relative to
/// the data, which starts at byte `8 + N`); the optional key `"__metadata__"` maps to an object of
/// strings. The reader checks that `N` fits the file (and 100 MB, the format's own limit), that
/// every entry has a known dtype, that `end - begin` is the byte size its shape and dtype imply,
/// and that tensors lie inside the data without overlapping. Gaps between tensors are allowed
/// (they are kept as they are by whoever rewrites the file).
/// @code
/// std::vector<std::uint8_t> file = ...;                 // the whole .safetensors file
/// wisp::safetensors_header h = wisp::parse_safetensors_header(file);
/// for (const wisp::safetensors_tensor& t : h.tensors)
///   if (t.dtype == "BF16") compress(file.data() + t.begin, t.end - t.begin);
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/detail/json.hpp>
#include <wisp/core/detail/little_endian.hpp>
#include <wisp/core/error.hpp>

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace wisp {

/// @brief One tensor of a safetensors file.
struct safetensors_tensor {
  std::string name;
  std::string dtype;  ///< as written: "BF16", "F32", "I64", ...
  std::vector<std::uint64_t> shape;
  std::uint64_t begin = 0;  ///< first byte, from the start of the file
  std::uint64_t end = 0;    ///< one past the last byte, from the start of the file

  /// Elements (product of the shape; 1 for a scalar).
  [[nodiscard]] std::uint64_t elements() const noexcept {
    std::uint64_t n = 1;
    for (const std::uint64_t d : shape) {
      n *= d;
    }
    return n;
  }
};

/// @brief The parsed header of a safetensors file.
struct safetensors_header {
  std::uint64_t data_begin = 0;             ///< `8 + N`: where the data starts
  std::vector<safetensors_tensor> tensors;  ///< sorted by `begin` (then name)
};

/// Bytes per element of a safetensors dtype, or 0 if the dtype is unknown.
[[nodiscard]] constexpr std::uint64_t safetensors_dtype_bytes(std::string_view dtype) noexcept {
  if (dtype == "BOOL" || dtype == "U8" || dtype == "I8" || dtype == "F8_E5M2" ||
      dtype == "F8_E4M3") {
    return 1;
  }
  if (dtype == "BF16" || dtype == "F16" || dtype == "I16" || dtype == "U16") {
    return 2;
  }
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") {
    return 4;
  }
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") {
    return 8;
  }
  return 0;
}

namespace detail {

[[noreturn]] inline void safetensors_fail(std::uint64_t at, const std::string& what) {
  throw format_error(at, "safetensors: " + what);
}

/// The non-negative integer `v` (`what` names it in the error).
[[nodiscard]] inline std::uint64_t safetensors_u64(const json_value& v, const std::string& what) {
  std::uint64_t x = 0;
  const char* first = v.text.data();
  const char* last = first + v.text.size();
  if (v.type != json_value::kind::number || std::from_chars(first, last, x).ptr != last) {
    safetensors_fail(8, what + " is not a non-negative integer");
  }
  return x;
}

/// The tensor `name` of the header, `entry` its JSON object; its data must lie inside the
/// `data_size` bytes from `data_begin` and hold exactly what its dtype and shape imply.
[[nodiscard]] inline safetensors_tensor safetensors_entry(const std::string& name,
                                                          const json_value& entry,
                                                          std::uint64_t data_begin,
                                                          std::uint64_t data_size) {
  const std::string where = "tensor '" + name + "'";
  const json_value* dtype = entry.find("dtype");
  const json_value* shape = entry.find("shape");
  const json_value* offsets = entry.find("data_offsets");
  if (entry.type != json_value::kind::object || dtype == nullptr || shape == nullptr ||
      offsets == nullptr || entry.members.size() != 3 || dtype->type != json_value::kind::string ||
      shape->type != json_value::kind::array || offsets->type != json_value::kind::array ||
      offsets->items.size() != 2) {
    safetensors_fail(
        8, where + " needs exactly dtype (string), shape (array), data_offsets ([begin, end])");
  }
  safetensors_tensor t;
  t.name = name;
  t.dtype = dtype->text;
  const std::uint64_t width = safetensors_dtype_bytes(t.dtype);
  if (width == 0) {
    safetensors_fail(8, where + " has unknown dtype '" + t.dtype + "'");
  }
  std::uint64_t bytes = width;
  for (const json_value& d : shape->items) {
    t.shape.push_back(safetensors_u64(d, where + " shape entry"));
    if (t.shape.back() != 0 && bytes > std::numeric_limits<std::uint64_t>::max() / t.shape.back()) {
      safetensors_fail(8, where + " shape overflows 64 bits");
    }
    bytes *= t.shape.back();
  }
  const std::uint64_t begin = safetensors_u64(offsets->items[0], where + " data_offsets[0]");
  const std::uint64_t end = safetensors_u64(offsets->items[1], where + " data_offsets[1]");
  if (begin > end || end > data_size) {
    safetensors_fail(8, where + " data_offsets [" + std::to_string(begin) + ", " +
                            std::to_string(end) + ") are not inside the " +
                            std::to_string(data_size) + " data bytes");
  }
  if (end - begin != bytes) {
    safetensors_fail(8, where + " holds " + std::to_string(end - begin) +
                            " bytes but its dtype and shape need " + std::to_string(bytes));
  }
  t.begin = data_begin + begin;
  t.end = data_begin + end;
  return t;
}

}  // namespace detail

/// @brief Parses the header of the safetensors file `file` (all of it, or at least the header:
/// `file_size` is then the size of the whole file). O(header size + tensors log tensors).
/// @throws wisp::format_error with the byte offset of the problem.
[[nodiscard]] inline safetensors_header parse_safetensors_header(std::span<const std::uint8_t> file,
                                                                 std::uint64_t file_size) {
  constexpr std::uint64_t max_header = 100'000'000;  // the format's own limit
  if (file.size() < 8 || file_size < 8) {
    detail::safetensors_fail(0, "shorter than the 8-byte header size");
  }
  const std::uint64_t n = detail::load_le<std::uint64_t>(file.data());
  if (n > max_header || n > file_size - 8) {
    detail::safetensors_fail(0, "header size " + std::to_string(n) + " exceeds the file (" +
                                    std::to_string(file_size) +
                                    " bytes) or the format's 100 MB limit");
  }
  if (n > file.size() - 8) {
    detail::safetensors_fail(file.size(), "truncated header");
  }
  const std::string_view json(reinterpret_cast<const char*>(file.data() + 8),
                              static_cast<std::size_t>(n));
  const detail::json_value root = detail::json_parser(json, 8).parse_document();
  if (root.type != detail::json_value::kind::object) {
    detail::safetensors_fail(8, "the header is not a JSON object");
  }
  safetensors_header h;
  h.data_begin = 8 + n;
  for (const auto& [name, entry] : root.members) {
    if (name != "__metadata__") {
      h.tensors.push_back(
          detail::safetensors_entry(name, entry, h.data_begin, file_size - h.data_begin));
      continue;
    }
    bool strings = entry.type == detail::json_value::kind::object;
    for (const auto& member : entry.members) {
      strings &= member.value.type == detail::json_value::kind::string;
    }
    if (!strings) {
      detail::safetensors_fail(8, "__metadata__ must be an object of strings");
    }
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.name < b.name;
  });
  for (std::size_t i = 1; i < h.tensors.size(); ++i) {
    if (h.tensors[i].begin < h.tensors[i - 1].end) {
      detail::safetensors_fail(
          8, "tensors '" + h.tensors[i - 1].name + "' and '" + h.tensors[i].name + "' overlap");
    }
  }
  return h;
}

/// @copydoc parse_safetensors_header
[[nodiscard]] inline safetensors_header parse_safetensors_header(
    std::span<const std::uint8_t> file) {
  return parse_safetensors_header(file, file.size());
}

}  // namespace wisp
