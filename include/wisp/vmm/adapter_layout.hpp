// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `adapter_layout<Backend>`: ExpertWeave's multi-adapter expert tensor (§3.1 padding
/// layout, §4.2 virtual weight tensor) on a `virtual_expert_tensor`. Rows `[0, M)` hold the base
/// model's `M` experts; adapter `i` owns rows `[M + i * Emax, M + (i + 1) * Emax)` of address
/// space, but loading it maps only the rows of the experts it actually fine-tuned, and granules
/// straddling two adapters' rows are shared (reference-counted) instead of padded.
///
/// Memory fragmentation factor (ExpertWeave §3.1, "Memory Fragmentation Analysis"):
///   F_mem = L * (M + N * Emax) / sum_{l=1..L} (M + sum_{i=1..N} e_i^(l))
/// with `N` adapters, `e_i^(l)` the experts adapter `i` fine-tunes in layer `l`. One
/// `adapter_layout` is one layer (L = 1): `fragmentation().padded` is (M + N * Emax) / (M +
/// sum_i e_i) over the loaded adapters, what the padding approach would allocate per byte of
/// weights; `fragmentation().mapped` is what this layout actually maps per byte of weights.
/// For several layers, add `padded_rows` and `used_rows` over the layers and divide.
/// @code
/// wisp::adapter_layout<wisp::posix_vmm> layer(pool, {.base_experts = 64, .adapters = 4,
///                                                    .max_adapter_experts = 13,
///                                                    .row_stride = 9 << 20});
/// layer.load_base();
/// std::vector<wisp::expert_id> tuned = {wisp::expert_id{3}, wisp::expert_id{14}};
/// layer.load_adapter(1, tuned);          // maps rows 77 and 78 only
/// wisp::write_routes(layer, table);      // table.row(1, 14) == 78 (wisp/pager/reroute_table.hpp)
/// layer.unload_adapter(1);               // pages back to the pool
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/core/ids.hpp>
#include <wisp/vmm/page_pool.hpp>
#include <wisp/vmm/virtual_expert_tensor.hpp>
#include <wisp/vmm/vmm_backend.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

namespace wisp {

/// Shape of an `adapter_layout`.
struct adapter_layout_shape {
  std::int32_t base_experts = 0;         ///< M: the base model's experts (rows [0, M))
  std::int32_t adapters = 0;             ///< N: adapter slots
  std::int32_t max_adapter_experts = 0;  ///< Emax: rows of address space per adapter
  std::size_t row_stride = 0;            ///< bytes per expert row
};

/// ExpertWeave's memory fragmentation factor for one layer (see the file comment).
struct fragmentation_report {
  std::size_t padded_rows = 0;   ///< M + N * Emax
  std::size_t used_rows = 0;     ///< M + sum_i e_i (loaded adapters)
  std::size_t used_bytes = 0;    ///< used_rows * row_stride
  std::size_t mapped_bytes = 0;  ///< physical bytes behind the tensor
  double padded = 1.0;           ///< F_mem of the padding approach: padded_rows / used_rows
  double mapped = 1.0;           ///< mapped_bytes / (mapped rows * row_stride); 1 if none mapped
};

/// @brief Base experts and `N` adapters' fine-tuned experts in one virtual expert tensor.
///
/// Adapter `i`'s `j`-th listed expert lives at row `M + i * Emax + j` (ExpertWeave's
/// `Delta_i + delta_ij`). Move-only; the pool must outlive it. Memory O(M + N * Emax) plus the
/// tensor's; no allocation after construction. Not thread-safe.
template <vmm_backend B>
class adapter_layout {
 public:
  /// @brief Reserves `M + N * Emax` rows; maps nothing.
  /// @throws wisp::logic_error if `M < 1`, `N < 0`, `Emax < 0`, `Emax > M` or the row count
  ///   overflows int32; as the `virtual_expert_tensor` constructor.
  adapter_layout(page_pool<B>& pool, adapter_layout_shape shape)
      : shape_(checked(shape)),
        tensor_(pool, {static_cast<std::size_t>(rows_of(shape_)), shape_.row_stride}),
        experts_(static_cast<std::size_t>(shape_.adapters) *
                     static_cast<std::size_t>(shape_.max_adapter_experts),
                 -1),
        count_(static_cast<std::size_t>(shape_.adapters), 0),
        loaded_(static_cast<std::size_t>(shape_.adapters), 0),
        seen_(static_cast<std::size_t>(shape_.base_experts), 0) {}

  /// @brief Maps the base rows `[0, M)`. Strong guarantee. O(M * row_stride / g) + backend calls.
  /// @throws as `virtual_expert_tensor::map_rows`.
  void load_base() { tensor_.map_rows(0, static_cast<std::size_t>(shape_.base_experts)); }

  /// Unmaps the base rows. Never fails.
  void unload_base() noexcept {
    tensor_.unmap_rows(0, static_cast<std::size_t>(shape_.base_experts));
  }

  /// @brief Loads adapter `adapter`: maps rows `[Delta_i, Delta_i + experts.size())` only, the
  /// `j`-th for `experts[j]`. Strong guarantee: on failure nothing is mapped and the adapter stays
  /// unloaded. O(e * row_stride / g + M) plus the backend calls.
  /// @throws wisp::logic_error (nothing changed) if `adapter` is outside `[0, N)` or already
  ///   loaded, `experts` holds more than Emax ids, an id outside `[0, M)` or a repeated id;
  ///   wisp::out_of_memory and the backend's errors as `map_rows`.
  void load_adapter(std::int32_t adapter, std::span<const expert_id> experts) {
    check_adapter("load_adapter", adapter);
    const auto a = static_cast<std::size_t>(adapter);
    WISP_EXPECTS(loaded_[a] == 0, "adapter_layout::load_adapter: adapter ", adapter,
                 " is already loaded (unload it first)");
    WISP_EXPECTS(experts.size() <= static_cast<std::size_t>(shape_.max_adapter_experts),
                 "adapter_layout::load_adapter: adapter ", adapter, " lists ", experts.size(),
                 " experts, more than max_adapter_experts = ", shape_.max_adapter_experts);
    std::size_t bad = experts.size();
    for (std::size_t j = 0; j < experts.size() && bad == experts.size(); ++j) {
      const std::int32_t e = experts[j].value();
      if (e < 0 || e >= shape_.base_experts || seen_[static_cast<std::size_t>(e)] != 0) {
        bad = j;
      } else {
        seen_[static_cast<std::size_t>(e)] = 1;
      }
    }
    for (const expert_id e : experts.first(bad)) {
      seen_[static_cast<std::size_t>(e.value())] = 0;
    }
    WISP_EXPECTS(bad == experts.size(), "adapter_layout::load_adapter: adapter ", adapter,
                 "'s experts[", bad, "] = ", bad < experts.size() ? experts[bad].value() : 0,
                 " is outside [0, base_experts = ", shape_.base_experts, ") or repeated");
    tensor_.map_rows(offset(adapter), experts.size());
    const std::size_t emax = static_cast<std::size_t>(shape_.max_adapter_experts);
    for (std::size_t j = 0; j < experts.size(); ++j) {
      experts_[a * emax + j] = experts[j].value();
    }
    count_[a] = static_cast<std::int32_t>(experts.size());
    loaded_[a] = 1;
  }

  /// Unloads adapter `adapter` (no-op when not loaded): unmaps its rows, pages back to the pool.
  /// Once `adapter` is checked nothing can fail.
  /// @throws wisp::logic_error if `adapter` is outside `[0, N)`; the layout is unchanged.
  void unload_adapter(std::int32_t adapter) {
    check_adapter("unload_adapter", adapter);
    const auto a = static_cast<std::size_t>(adapter);
    if (loaded_[a] == 0) {
      return;
    }
    tensor_.unmap_rows(offset(adapter), static_cast<std::size_t>(count_[a]));
    count_[a] = 0;
    loaded_[a] = 0;
  }

  /// Whether adapter `adapter` is loaded. @throws wisp::logic_error if outside `[0, N)`.
  [[nodiscard]] bool adapter_loaded(std::int32_t adapter) const {
    check_adapter("adapter_loaded", adapter);
    return loaded_[static_cast<std::size_t>(adapter)] != 0;
  }

  /// The expert ids adapter `adapter` was loaded with, in row order (empty when not loaded).
  /// @throws wisp::logic_error if outside `[0, N)`.
  [[nodiscard]] std::span<const std::int32_t> adapter_experts(std::int32_t adapter) const {
    check_adapter("adapter_experts", adapter);
    const auto a = static_cast<std::size_t>(adapter);
    return std::span<const std::int32_t>(experts_).subspan(
        a * static_cast<std::size_t>(shape_.max_adapter_experts),
        static_cast<std::size_t>(count_[a]));
  }

  /// First row of adapter `adapter`'s range: `M + adapter * Emax` (ExpertWeave's Delta_i).
  [[nodiscard]] std::size_t offset(std::int32_t adapter) const noexcept {
    return static_cast<std::size_t>(shape_.base_experts) +
           static_cast<std::size_t>(adapter) * static_cast<std::size_t>(shape_.max_adapter_experts);
  }

  /// @brief The row serving `expert` for `adapter` (-1 = base model): the adapter's row if it is
  /// loaded and fine-tunes `expert`, else the base row. O(e).
  /// @throws wisp::logic_error if `adapter` is outside `[-1, N)` or `expert` outside `[0, M)`.
  [[nodiscard]] std::int32_t row(std::int32_t adapter, expert_id expert) const {
    WISP_EXPECTS(adapter >= -1 && adapter < shape_.adapters, "adapter_layout::row: adapter ",
                 adapter, " is outside [-1, adapters = ", shape_.adapters, ")");
    WISP_EXPECTS(expert.value() >= 0 && expert.value() < shape_.base_experts,
                 "adapter_layout::row: ", expert,
                 " is outside [0, base_experts = ", shape_.base_experts, ")");
    if (adapter >= 0) {
      const auto list = adapter_experts(adapter);
      for (std::size_t j = 0; j < list.size(); ++j) {
        if (list[j] == expert.value()) {
          return static_cast<std::int32_t>(offset(adapter) + j);
        }
      }
    }
    return expert.value();
  }

  /// @brief F_mem of the padded layout and of this one, for the adapters loaded now. O(N).
  [[nodiscard]] fragmentation_report fragmentation() const noexcept {
    fragmentation_report f;
    f.padded_rows = tensor_.max_rows();
    f.used_rows = static_cast<std::size_t>(shape_.base_experts);
    for (const std::int32_t c : count_) {
      f.used_rows += static_cast<std::size_t>(c);
    }
    f.used_bytes = f.used_rows * shape_.row_stride;
    f.mapped_bytes = tensor_.mapped_bytes();
    f.padded = static_cast<double>(f.padded_rows) / static_cast<double>(f.used_rows);
    const std::size_t mapped_row_bytes = tensor_.mapped_rows() * shape_.row_stride;
    f.mapped = mapped_row_bytes == 0
                   ? 1.0
                   : static_cast<double>(f.mapped_bytes) / static_cast<double>(mapped_row_bytes);
    return f;
  }

  [[nodiscard]] const adapter_layout_shape& shape() const noexcept { return shape_; }
  /// The underlying tensor (rows, base address, view for kernels).
  [[nodiscard]] const virtual_expert_tensor<B>& tensor() const noexcept { return tensor_; }
  /// A view for kernels over all `M + N * Emax` rows.
  [[nodiscard]] expert_tensor_view view() const noexcept { return tensor_.view(); }

 private:
  static adapter_layout_shape checked(adapter_layout_shape s) {
    WISP_EXPECTS(s.base_experts >= 1 && s.adapters >= 0 && s.max_adapter_experts >= 0 &&
                     s.max_adapter_experts <= s.base_experts,
                 "adapter_layout: base_experts ", s.base_experts, ", adapters ", s.adapters,
                 ", max_adapter_experts ", s.max_adapter_experts,
                 " need M >= 1, N >= 0 and 0 <= Emax <= M");
    WISP_EXPECTS(rows_of(s) <= std::numeric_limits<std::int32_t>::max(), "adapter_layout: M + N * ",
                 "Emax = ", rows_of(s), " rows overflow int32");
    return s;
  }
  static std::int64_t rows_of(const adapter_layout_shape& s) noexcept {
    return std::int64_t{s.base_experts} + std::int64_t{s.adapters} * s.max_adapter_experts;
  }
  void check_adapter(const char* what, std::int32_t adapter) const {
    WISP_EXPECTS(adapter >= 0 && adapter < shape_.adapters, "adapter_layout::", what, ": adapter ",
                 adapter, " is outside [0, adapters = ", shape_.adapters, ")");
  }

  adapter_layout_shape shape_;
  virtual_expert_tensor<B> tensor_;
  std::vector<std::int32_t> experts_;  // [N x Emax]: adapter i's j-th expert id
  std::vector<std::int32_t> count_;    // per adapter: experts loaded
  std::vector<std::uint8_t> loaded_;   // per adapter
  std::vector<std::uint8_t> seen_;     // scratch for the duplicate check, all 0 between calls
};

}  // namespace wisp
