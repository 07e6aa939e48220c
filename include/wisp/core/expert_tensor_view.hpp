// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `expert_tensor_view`: the three fields a kernel or a copy needs from an expert tensor
/// (base address, rows, row stride). It lives in core so that kernel contracts and copy paths do
/// not pull in the virtual-memory machinery (`virtual_expert_tensor::view()` returns one; so does
/// any plain `[rows x row_stride]` buffer written by hand). `<wisp/vmm/expert_tensor_view.hpp>`
/// still includes it.
/// @code
/// std::vector<std::byte> slots(capacity * row_bytes);
/// wisp::expert_tensor_view v{slots.data(), capacity, row_bytes};
/// std::byte* third = v.row(3);  // slots.data() + 3 * row_bytes
/// @endcode
#pragma once

#include <wisp/core/config.hpp>

#include <cstddef>
#include <type_traits>

namespace wisp {

/// @brief Trivially copyable view of an expert tensor for kernels: row `r` starts at
/// `base + r * row_stride`. Rows that are not mapped must not be touched.
struct expert_tensor_view {
  std::byte* base = nullptr;
  std::size_t rows = 0;
  std::size_t row_stride = 0;

  /// Start of row `r` (no check).
  [[nodiscard]] WISP_HOST_DEVICE std::byte* row(std::size_t r) const noexcept {
    return base + r * row_stride;
  }
};
static_assert(std::is_trivially_copyable_v<expert_tensor_view>);

}  // namespace wisp
