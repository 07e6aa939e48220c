// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `virtual_expert_tensor<Backend>`: an expert weight tensor `[max_rows x row_stride]` at a
/// fixed virtual address whose rows are backed by physical pages only while they are mapped
/// (ExpertWeave §4.2, "virtual weight tensor"). Rows that do not align to granules share the
/// boundary granule, which is reference-counted ("sub-page allocation"): no memory is wasted on
/// padding and no granule is unmapped while a neighbouring row still uses it.
///
/// Row `r` occupies bytes `[r * row_stride, (r + 1) * row_stride)` from `data()`, hence granules
/// `[r * row_stride / g, ceil((r + 1) * row_stride / g))` for granule size `g`. A granule's
/// reference count is the number of mapped rows overlapping it; it is backed iff that is > 0.
/// @code
/// wisp::page_pool<wisp::posix_vmm> pool(wisp::posix_vmm{});           // 2 MiB pages
/// wisp::virtual_expert_tensor<wisp::posix_vmm> w(pool, {.max_rows = 64,
///                                                       .row_stride = 3 << 20});  // 3 MiB rows
/// w.resize_resident(8);               // rows [0, 8): 12 pages, boundary pages shared
/// std::memcpy(w.row(3), weights, 3 << 20);
/// w.resize_resident(16);              // grows in place: w.data() is unchanged, row 3 too
/// auto view = w.view();               // pass by value to a kernel
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/core/expert_tensor_view.hpp>
#include <wisp/vmm/page_pool.hpp>
#include <wisp/vmm/vmm_backend.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

namespace wisp {

/// Shape of a `virtual_expert_tensor`.
struct expert_tensor_shape {
  std::size_t max_rows = 0;    ///< rows of address space reserved, once
  std::size_t row_stride = 0;  ///< bytes from one row to the next (any value > 0)
};

/// @brief A tensor of `max_rows` rows of `row_stride` bytes at a fixed address, with physical
/// pages from a `page_pool` behind mapped rows only.
///
/// Move-only owner of one address reservation and of the pages behind its mapped rows; the pool
/// must outlive it. `data()` never changes for the object's lifetime. Contents of a newly mapped
/// row are unspecified (a reused page keeps old bytes; a shared boundary granule keeps its
/// neighbour's). Mapping is all-or-nothing; unmapping never fails. Memory: O(max_rows + granules)
/// allocated by the constructor, nothing afterwards. Not thread-safe.
template <vmm_backend B>
class virtual_expert_tensor {
 public:
  using backend_type = B;
  using handle = typename B::handle;

  /// @brief Reserves `ceil(max_rows * row_stride / g)` granules of address space; maps nothing.
  /// O(max_rows + granules).
  /// @throws wisp::logic_error if `max_rows` or `row_stride` is 0 or the size overflows;
  ///   wisp::out_of_memory if the address space is exhausted; std::bad_alloc.
  virtual_expert_tensor(page_pool<B>& pool, expert_tensor_shape shape)
      : pool_(&pool), rows_(shape.max_rows), stride_(shape.row_stride) {
    WISP_EXPECTS(rows_ > 0 && stride_ > 0, "virtual_expert_tensor: max_rows ", rows_,
                 " and row_stride ", stride_, " must both be > 0");
    WISP_EXPECTS(stride_ <= max_size / rows_, "virtual_expert_tensor: ", rows_, " rows of ",
                 stride_, " B overflow size_t");
    const std::size_t g = pool.granularity();
    const std::size_t bytes = rows_ * stride_;
    WISP_EXPECTS(bytes <= max_size - (g - 1), "virtual_expert_tensor: ", bytes,
                 " B overflow size_t when rounded up to granules");
    granules_ = (bytes + g - 1) / g;
    refcount_.assign(granules_, 0);
    page_.assign(granules_, handle{});
    scratch_.assign(granules_, handle{});
    need_.assign(granules_, 0);
    row_mapped_.assign(rows_, 0);
    base_ = pool.backend().reserve(granules_);
  }

  virtual_expert_tensor(const virtual_expert_tensor&) = delete;
  virtual_expert_tensor& operator=(const virtual_expert_tensor&) = delete;

  /// Takes over `other`'s reservation and pages; `other` is left empty (`data() == nullptr`).
  virtual_expert_tensor(virtual_expert_tensor&& other) noexcept { swap(other); }
  virtual_expert_tensor& operator=(virtual_expert_tensor&& other) noexcept {
    if (this != &other) {
      destroy();
      swap(other);
    }
    return *this;
  }

  /// Unmaps every row, returns the pages to the pool and frees the reservation.
  ~virtual_expert_tensor() { destroy(); }

  /// @brief Maps every row of `[first, first + n)` that is not mapped yet (mapped rows keep their
  /// pages and bytes). Granules already backed for a neighbour are shared, the others get pages
  /// from the pool. Strong guarantee. O(n * row_stride / g) plus one `map` per new page and one
  /// `set_access` per run of new pages. No allocation. @return the rows newly mapped.
  /// @throws wisp::logic_error if the range leaves `[0, max_rows)`; wisp::out_of_memory if the
  ///   pool cannot supply the pages; the backend's errors. Nothing changed then, nothing leaked.
  std::size_t map_rows(std::size_t first, std::size_t n) {
    check_range("map_rows", first, n);
    std::size_t k = 0;  // granules that need a page, ascending
    for (std::size_t r = first; r < first + n; ++r) {
      if (row_mapped_[r] != 0) {
        continue;
      }
      const auto [g0, g1] = granule_range(r);
      for (std::size_t g = g0; g < g1; ++g) {
        if (refcount_[g] == 0 && (k == 0 || need_[k - 1] != g)) {
          need_[k++] = g;
        }
      }
    }
    if (k != 0) {
      back_pages(k);
    }
    // Commit: nothing below can fail.
    std::size_t added = 0;
    for (std::size_t j = 0; j < k; ++j) {
      page_[need_[j]] = scratch_[j];
    }
    mapped_granules_ += k;
    for (std::size_t r = first; r < first + n; ++r) {
      if (row_mapped_[r] != 0) {
        continue;
      }
      row_mapped_[r] = 1;
      ++added;
      const auto [g0, g1] = granule_range(r);
      for (std::size_t g = g0; g < g1; ++g) {
        ++refcount_[g];
      }
    }
    mapped_rows_ += added;
    return added;
  }

  /// @brief Unmaps every mapped row of `[first, first + n)`. Granules no other mapped row uses
  /// are unmapped (one `unmap` per run) and their pages returned to the pool. O(n * row_stride /
  /// g) plus the backend calls. Once the range is checked nothing can fail.
  /// @return the rows unmapped.
  /// @throws wisp::logic_error if the range leaves `[0, max_rows)`; the tensor is unchanged.
  std::size_t unmap_rows(std::size_t first, std::size_t n) {
    check_range("unmap_rows", first, n);
    return unmap_checked_rows(first, n);
  }

 private:
  // unmap_rows after its range check: never fails (unmapping and releasing pages are noexcept).
  std::size_t unmap_checked_rows(std::size_t first, std::size_t n) noexcept {
    std::size_t removed = 0;
    std::size_t run_begin = 0;
    std::size_t run_end = 0;  // pending run of granules to unmap, [run_begin, run_end)
    for (std::size_t r = first; r < first + n; ++r) {
      if (row_mapped_[r] == 0) {
        continue;
      }
      row_mapped_[r] = 0;
      ++removed;
      const auto [g0, g1] = granule_range(r);
      for (std::size_t g = g0; g < g1; ++g) {
        if (--refcount_[g] != 0) {
          continue;
        }
        if (run_end != g) {
          flush_unmap(run_begin, run_end);
          run_begin = g;
        }
        run_end = g + 1;
      }
    }
    flush_unmap(run_begin, run_end);
    mapped_rows_ -= removed;
    return removed;
  }

 public:
  /// @brief Grows or shrinks the resident slot range `[0, resident_rows())` to `[0, n)` in place:
  /// growing maps rows `[resident_rows(), n)` (as `map_rows`, strong guarantee: on failure the
  /// tensor is exactly as it was), shrinking unmaps rows `[n, resident_rows())` (never fails).
  /// Rows that stay resident keep their pages and bytes; `data()` does not move.
  /// O(|n - resident_rows()| * row_stride / g) plus the backend calls.
  /// @throws wisp::logic_error if `n > max_rows()`; as `map_rows` when growing.
  void resize_resident(std::size_t n) {
    WISP_EXPECTS(n <= rows_, "virtual_expert_tensor::resize_resident: ", n,
                 " rows exceed max_rows ", rows_);
    if (n > resident_) {
      map_rows(resident_, n - resident_);
    } else {
      unmap_checked_rows(n, resident_ - n);
    }
    resident_ = n;
  }

  /// Base address; constant for the object's lifetime (nullptr only when moved from).
  [[nodiscard]] std::byte* data() const noexcept { return base_; }
  /// Start of row `r` (no check, the row may be unmapped).
  [[nodiscard]] std::byte* row(std::size_t r) const noexcept { return base_ + r * stride_; }
  /// A view for kernels.
  [[nodiscard]] expert_tensor_view view() const noexcept { return {base_, rows_, stride_}; }
  [[nodiscard]] std::size_t max_rows() const noexcept { return rows_; }
  [[nodiscard]] std::size_t row_stride() const noexcept { return stride_; }
  [[nodiscard]] std::size_t granularity() const noexcept { return pool_->granularity(); }
  /// Granules of address space reserved.
  [[nodiscard]] std::size_t granules() const noexcept { return granules_; }
  [[nodiscard]] std::size_t reserved_bytes() const noexcept { return granules_ * granularity(); }
  /// End of the slot range managed by `resize_resident`.
  [[nodiscard]] std::size_t resident_rows() const noexcept { return resident_; }
  /// Rows currently mapped (by any operation).
  [[nodiscard]] std::size_t mapped_rows() const noexcept { return mapped_rows_; }
  /// Granules currently backed by a page.
  [[nodiscard]] std::size_t mapped_granules() const noexcept { return mapped_granules_; }
  /// Bytes of physical memory behind the tensor.
  [[nodiscard]] std::size_t mapped_bytes() const noexcept {
    return mapped_granules_ * granularity();
  }
  /// Whether row `r` is mapped. @throws wisp::logic_error if `r >= max_rows()`.
  [[nodiscard]] bool is_mapped(std::size_t r) const {
    WISP_EXPECTS(r < rows_, "virtual_expert_tensor::is_mapped: row ", r, " >= max_rows ", rows_);
    return row_mapped_[r] != 0;
  }
  /// Mapped rows overlapping granule `g`. @throws wisp::logic_error if `g >= granules()`.
  [[nodiscard]] std::uint32_t granule_refcount(std::size_t g) const {
    WISP_EXPECTS(g < granules_, "virtual_expert_tensor::granule_refcount: granule ", g,
                 " >= granules ", granules_);
    return refcount_[g];
  }
  /// The page behind granule `g` (meaningful when its refcount is > 0).
  [[nodiscard]] handle page(std::size_t g) const {
    WISP_EXPECTS(g < granules_, "virtual_expert_tensor::page: granule ", g, " >= granules ",
                 granules_);
    return page_[g];
  }
  /// Granules `[first, last)` row `r` overlaps. O(1).
  [[nodiscard]] std::pair<std::size_t, std::size_t> granule_range(std::size_t r) const noexcept {
    const std::size_t g = granularity();
    const std::size_t begin = r * stride_;
    const std::size_t end = begin + stride_;
    return {begin / g, (end + g - 1) / g};
  }
  /// The pool the pages come from.
  [[nodiscard]] page_pool<B>& pool() const noexcept { return *pool_; }

 private:
  static constexpr std::size_t max_size = std::numeric_limits<std::size_t>::max();

  void check_range(const char* what, std::size_t first, std::size_t n) const {
    WISP_EXPECTS(first <= rows_ && n <= rows_ - first, "virtual_expert_tensor::", what, ": rows [",
                 first, ", ", first + n, ") leave [0, max_rows = ", rows_, ")");
  }

  [[nodiscard]] std::byte* granule_address(std::size_t g) const noexcept {
    return base_ + g * granularity();
  }

  // Gives pages to the k granules need_[0, k): all or nothing.
  void back_pages(std::size_t k) {
    B& backend = pool_->backend();
    const std::span<handle> pages(scratch_.data(), k);
    const auto receipt = pool_->acquire(pages);  // throws with nothing taken
    std::size_t mapped = 0;
    try {
      for (; mapped < k; ++mapped) {
        backend.map(granule_address(need_[mapped]), pages[mapped], 0, 1);
      }
      for (std::size_t j = 0; j < k;) {  // one set_access per run of consecutive granules
        std::size_t e = j + 1;
        while (e < k && need_[e] == need_[e - 1] + 1) {
          ++e;
        }
        backend.set_access(granule_address(need_[j]), e - j);
        j = e;
      }
    } catch (...) {
      for (std::size_t j = 0; j < mapped; ++j) {
        backend.unmap(granule_address(need_[j]), 1);
      }
      pool_->undo(pages, receipt);
      throw;
    }
  }

  void flush_unmap(std::size_t begin, std::size_t end) noexcept {
    if (begin == end) {
      return;
    }
    pool_->backend().unmap(granule_address(begin), end - begin);
    for (std::size_t g = begin; g < end; ++g) {
      pool_->release(page_[g]);
      page_[g] = handle{};
    }
    mapped_granules_ -= end - begin;
  }

  void destroy() noexcept {
    if (base_ == nullptr) {
      return;
    }
    unmap_checked_rows(0, rows_);
    pool_->backend().free(base_, granules_);
    base_ = nullptr;
  }

  void swap(virtual_expert_tensor& other) noexcept {
    std::swap(pool_, other.pool_);
    std::swap(base_, other.base_);
    std::swap(rows_, other.rows_);
    std::swap(stride_, other.stride_);
    std::swap(granules_, other.granules_);
    std::swap(resident_, other.resident_);
    std::swap(mapped_rows_, other.mapped_rows_);
    std::swap(mapped_granules_, other.mapped_granules_);
    refcount_.swap(other.refcount_);
    page_.swap(other.page_);
    scratch_.swap(other.scratch_);
    need_.swap(other.need_);
    row_mapped_.swap(other.row_mapped_);
  }

  page_pool<B>* pool_ = nullptr;
  std::byte* base_ = nullptr;
  std::size_t rows_ = 0;
  std::size_t stride_ = 0;
  std::size_t granules_ = 0;
  std::size_t resident_ = 0;
  std::size_t mapped_rows_ = 0;
  std::size_t mapped_granules_ = 0;
  std::vector<std::uint32_t> refcount_;   // per granule: mapped rows overlapping it
  std::vector<handle> page_;              // per granule: its page while refcount > 0
  std::vector<handle> scratch_;           // pages being acquired by map_rows
  std::vector<std::size_t> need_;         // granules being backed by map_rows
  std::vector<std::uint8_t> row_mapped_;  // per row
};

}  // namespace wisp
