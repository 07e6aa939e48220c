// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `page_pool<Backend>`: a pool of one-granule physical pages over a `vmm_backend`
/// (ExpertWeave §4.2 "physical memory pool"; vAttention's `reserve_cuda_pages`). Pages released by
/// one tensor are reused by the next without a driver call; a configurable limit caps the
/// physical memory the pool may own; `trim` gives free pages back to the backend.
///
/// A page is one handle of one granule. CUDA's `cuMemMap` cannot map part of a handle (its offset
/// must be 0), so a page that is unmapped alone must be its own handle (as in PyTorch's expandable
/// segments and vAttention).
/// @code
/// wisp::page_pool<wisp::posix_vmm> pool(wisp::posix_vmm{}, {.limit = 512, .prereserve = 64});
/// wisp::virtual_expert_tensor<wisp::posix_vmm> w(pool, {.max_rows = 96, .row_stride = 9 << 20});
/// w.map_rows(0, 64);                  // takes 288 pages, 64 of them from the pre-reservation
/// w.unmap_rows(32, 32);               // 144 pages back to the free list
/// pool.trim();                        // and back to the driver
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/vmm/vmm_backend.hpp>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <span>
#include <utility>
#include <vector>

namespace wisp {

/// Options of `page_pool`.
struct page_pool_options {
  /// Most pages (granules) the pool may own at once, mapped and free together. Reaching it is
  /// `wisp::out_of_memory`, as the backend running out is.
  std::size_t limit = std::numeric_limits<std::size_t>::max();
  /// Pages created up front by the constructor (vAttention pre-creates its pages).
  std::size_t prereserve = 0;
};

/// Counters of a `page_pool`, in pages (granules).
struct page_pool_stats {
  std::size_t mapped = 0;  ///< handed out (mapped by tensors)
  std::size_t free = 0;    ///< owned and ready for reuse
  std::size_t peak = 0;    ///< highest `mapped` seen (restored by `undo`)
  std::size_t limit = 0;   ///< `options.limit`
  /// Pages owned: live backend handles.
  [[nodiscard]] std::size_t owned() const noexcept { return mapped + free; }
  friend bool operator==(const page_pool_stats&, const page_pool_stats&) = default;
};

/// @brief Pool of one-granule physical pages of backend `B`.
///
/// Owns the backend (reach it with `backend()`) and every page it created. Not copyable or
/// movable: tensors hold a reference, so the pool must outlive every tensor using it, and be
/// destroyed after them (its destructor releases the free pages only). Not thread-safe.
template <vmm_backend B>
class page_pool {
 public:
  using backend_type = B;
  using handle = typename B::handle;

  /// What an `acquire` did, so that `undo` can revert it exactly.
  struct receipt {
    std::size_t from_free = 0;      ///< pages taken from the free list (the rest were created)
    std::size_t previous_peak = 0;  ///< `stats().peak` before the acquire
  };

  /// @brief Takes the backend and creates `options.prereserve` pages.
  /// @throws wisp::logic_error if `prereserve > limit`; wisp::out_of_memory (or the backend's
  ///   error) if they cannot be created, with every page created so far released.
  explicit page_pool(B backend, page_pool_options options = {})
      : backend_(std::move(backend)), options_(options) {
    WISP_EXPECTS(options.prereserve <= options.limit, "page_pool: prereserve ", options.prereserve,
                 " exceeds the limit ", options.limit);
    reserve(options.prereserve);
  }

  page_pool(const page_pool&) = delete;
  page_pool& operator=(const page_pool&) = delete;

  /// Releases the free pages. Pages still handed out leak: destroy the tensors first.
  ~page_pool() { (void)trim(0); }

  /// The backend (for reservations and mappings, and for tests to inspect).
  [[nodiscard]] B& backend() noexcept { return backend_; }
  [[nodiscard]] const B& backend() const noexcept { return backend_; }
  /// Bytes per page.
  [[nodiscard]] std::size_t granularity() const noexcept { return backend_.granularity(); }
  /// The counters. O(1).
  [[nodiscard]] page_pool_stats stats() const noexcept {
    return {mapped_, free_.size(), peak_, options_.limit};
  }

  /// @brief Fills `out` with pages: from the free list first (most recently freed first), then
  /// newly created. All or nothing (strong guarantee). O(out.size()) plus the backend calls; no
  /// allocation except growing the free list's capacity when pages are created.
  /// @return what to pass to `undo` to revert this call.
  /// @throws wisp::out_of_memory if the limit would be exceeded or the backend runs out;
  ///   the backend's other errors; std::bad_alloc. The pool is unchanged and nothing leaks.
  [[nodiscard]] receipt acquire(std::span<handle> out) {
    const receipt r{std::min(out.size(), free_.size()), peak_};
    const std::size_t create = out.size() - r.from_free;
    if (create != 0) {
      const std::size_t owned = mapped_ + free_.size();
      if (create > options_.limit - owned) {
        WISP_FAIL(out_of_memory, "page_pool: ", out.size(), " pages requested, ", free_.size(),
                  " free, and creating ", create, " more would exceed the limit of ",
                  options_.limit, " pages (", owned, " owned)");
      }
      // Room to take every owned page back without allocating, so `release` is noexcept.
      free_.reserve(owned + create);
      std::size_t made = r.from_free;
      try {
        for (; made < out.size(); ++made) {
          out[made] = backend_.create(1);
        }
      } catch (...) {
        while (made > r.from_free) {
          backend_.release(out[--made]);
        }
        throw;
      }
    }
    for (std::size_t i = 0; i < r.from_free; ++i) {
      out[i] = free_.back();
      free_.pop_back();
    }
    mapped_ += out.size();
    peak_ = std::max(peak_, mapped_);
    return r;
  }

  /// @brief Reverts the `acquire` that filled `pages` and returned `r`, provided the pool was not
  /// used in between: created pages go back to the backend, the others back to the free list in
  /// their old order, and the peak is restored. O(pages.size()).
  void undo(std::span<const handle> pages, receipt r) noexcept {
    for (std::size_t i = pages.size(); i > r.from_free; --i) {
      backend_.release(pages[i - 1]);
    }
    for (std::size_t i = r.from_free; i > 0; --i) {
      free_.push_back(pages[i - 1]);  // capacity >= owned: no allocation
    }
    mapped_ -= pages.size();
    peak_ = r.previous_peak;
  }

  /// @brief Returns one page (unmapped by the caller) to the free list. O(1), no allocation.
  void release(handle page) noexcept {
    free_.push_back(page);  // capacity >= owned: no allocation
    --mapped_;
  }

  /// @brief Makes sure at least `free_pages` pages are free, creating the missing ones. Strong
  /// guarantee. O(created) backend calls.
  /// @throws wisp::out_of_memory if the limit would be exceeded or the backend runs out;
  ///   the backend's other errors; std::bad_alloc. The pool is unchanged then.
  void reserve(std::size_t free_pages) {
    if (free_pages <= free_.size()) {
      return;
    }
    const std::size_t create = free_pages - free_.size();
    const std::size_t owned = mapped_ + free_.size();
    if (create > options_.limit - owned) {
      WISP_FAIL(out_of_memory, "page_pool::reserve: ", free_pages,
                " free pages would exceed the limit of ", options_.limit, " pages (", owned,
                " owned)");
    }
    free_.reserve(owned + create);
    const std::size_t before = free_.size();
    try {
      while (free_.size() < free_pages) {
        free_.push_back(backend_.create(1));
      }
    } catch (...) {
      while (free_.size() > before) {
        backend_.release(free_.back());
        free_.pop_back();
      }
      throw;
    }
  }

  /// @brief Gives free pages back to the backend until at most `keep_free` remain (the least
  /// recently freed go first). O(released) backend calls. @return pages released.
  std::size_t trim(std::size_t keep_free = 0) noexcept {
    if (free_.size() <= keep_free) {
      return 0;
    }
    const std::size_t drop = free_.size() - keep_free;
    for (std::size_t i = 0; i < drop; ++i) {
      backend_.release(free_[i]);
    }
    free_.erase(free_.begin(), free_.begin() + static_cast<std::ptrdiff_t>(drop));
    return drop;
  }

 private:
  B backend_;
  page_pool_options options_;
  std::vector<handle> free_;  // LIFO; capacity >= owned pages at all times
  std::size_t mapped_ = 0;
  std::size_t peak_ = 0;
};

}  // namespace wisp
