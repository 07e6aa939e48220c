// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `expert_row_layout`: one expert's tensors packed into one row (weights, and block scales
/// for FP8/quantised experts, WiSP App. E), so that one copy moves a whole expert.
///
/// Row addressing is the one `host_expert_store` uses: expert `e`'s row starts `e * row_bytes()`
/// bytes from the base, and tensor `t` of that row `offset(t)` bytes further. Every tensor starts
/// at a multiple of `alignment()` from the row start and `row_bytes()` is itself a multiple of it,
/// so the tensors of every row are aligned when the base is. `wisp::cuda::pinned_host_store`
/// allocates its page-locked masters with this layout; a `host_expert_store` built with
/// `bytes_per_expert = row_bytes()` has byte-identical row addresses.
/// @code
/// // w13 [2I x H] and w2 [H x I] in FP8, one fp32 scale per 128 x 128 block of each
/// wisp::expert_row_layout layout({2 * I * H, H * I, w13_scales * 4, w2_scales * 4}, 16);
/// std::byte* w2_scales_of_7 = base + layout.row_offset(7) + layout.offset(3);
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <span>
#include <type_traits>

namespace wisp {

/// @brief Offsets of the tensors of one expert row (see the file comment). Trivially copyable.
class expert_row_layout {
 public:
  /// Tensors one row can hold.
  static constexpr std::size_t max_tensors = 8;

  /// @param tensor_bytes  bytes of each tensor, in row order (1 to `max_tensors`, each >= 1)
  /// @param alignment     a power of two: each tensor's offset and `row_bytes()` are multiples
  /// @throws wisp::logic_error naming the bad value if a size is 0, there are no or too many
  ///   tensors, `alignment` is not a power of two, or the row size overflows `size_t`.
  explicit expert_row_layout(std::span<const std::size_t> tensor_bytes, std::size_t alignment = 16)
      : count_(tensor_bytes.size()), alignment_(alignment) {
    WISP_EXPECTS(count_ >= 1 && count_ <= max_tensors, "expert_row_layout: ", count_,
                 " tensors given; a row holds 1 to ", max_tensors);
    WISP_EXPECTS(alignment >= 1 && (alignment & (alignment - 1)) == 0,
                 "expert_row_layout: alignment ", alignment, " is not a power of two");
    constexpr std::size_t max = std::numeric_limits<std::size_t>::max();
    std::size_t at = 0;
    for (std::size_t t = 0; t < count_; ++t) {
      const std::size_t bytes = tensor_bytes[t];
      WISP_EXPECTS(bytes >= 1, "expert_row_layout: tensor ", t, " has 0 bytes");
      WISP_EXPECTS(bytes <= max - at && round_up(at + bytes) >= at + bytes,
                   "expert_row_layout: the row overflows size_t at tensor ", t, " (", bytes,
                   " bytes at offset ", at, ")");
      offsets_[t] = at;
      bytes_[t] = bytes;
      at = round_up(at + bytes);
    }
    row_bytes_ = at;
  }
  /// @copydoc expert_row_layout(std::span<const std::size_t>, std::size_t)
  expert_row_layout(std::initializer_list<std::size_t> tensor_bytes, std::size_t alignment = 16)
      : expert_row_layout(std::span<const std::size_t>(tensor_bytes.begin(), tensor_bytes.size()),
                          alignment) {}

  /// Number of tensors per row.
  [[nodiscard]] std::size_t tensors() const noexcept { return count_; }
  /// Offset of tensor `t` from its row's start. @throws wisp::logic_error if `t >= tensors()`.
  [[nodiscard]] std::size_t offset(std::size_t t) const {
    check_tensor(t);
    return offsets_[t];
  }
  /// Bytes of tensor `t`. @throws wisp::logic_error if `t >= tensors()`.
  [[nodiscard]] std::size_t bytes(std::size_t t) const {
    check_tensor(t);
    return bytes_[t];
  }
  /// Bytes from one row to the next (the tensors plus alignment padding).
  [[nodiscard]] std::size_t row_bytes() const noexcept { return row_bytes_; }
  [[nodiscard]] std::size_t alignment() const noexcept { return alignment_; }
  /// Offset of row `row` from the base: `row * row_bytes()`. O(1).
  /// @throws wisp::logic_error if it overflows `size_t`.
  [[nodiscard]] std::size_t row_offset(std::size_t row) const {
    WISP_EXPECTS(row == 0 || row <= std::numeric_limits<std::size_t>::max() / row_bytes_,
                 "expert_row_layout: row ", row, " of ", row_bytes_, " bytes overflows size_t");
    return row * row_bytes_;
  }

 private:
  [[nodiscard]] std::size_t round_up(std::size_t at) const noexcept {
    return (at + alignment_ - 1) & ~(alignment_ - 1);
  }
  void check_tensor(std::size_t t) const {
    WISP_EXPECTS(t < count_, "expert_row_layout: tensor ", t, " of a ", count_, "-tensor row");
  }

  std::array<std::size_t, max_tensors> offsets_{};
  std::array<std::size_t, max_tensors> bytes_{};
  std::size_t count_ = 0;
  std::size_t alignment_ = 1;
  std::size_t row_bytes_ = 0;
};
static_assert(std::is_trivially_copyable_v<expert_row_layout>);

}  // namespace wisp
