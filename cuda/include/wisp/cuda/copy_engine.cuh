// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `wisp::cuda::copy_engine`: the GPU model of `wisp::copy_engine`. It executes a pager's
/// copy plan on a dedicated copy stream and hands back a CUDA event, so the compute stream waits
/// only for the copies its layer needs. nvcc only.
///
/// - The plan's entries are merged into runs of consecutive experts and slots
///   (`plan_copy_runs`; order kept). Where the toolkit offers batched asynchronous copies
///   (`cudaMemcpyBatchAsync`, CUDA 13) and the stream is not being captured, all runs go in one
///   call; else each run is one `cudaMemcpyAsync` (or `cudaMemcpy2DAsync` when the row strides
///   differ from the row size). A batch has no graph node (the driver refuses it during capture,
///   and the refusal does not fail the capture: the copy would silently be missing from the
///   graph), so captured plans always take the per-run path.
/// - Ordering: `copy(..., after)` makes the copy stream wait for `after` first (pass
///   `consumer_event()`, recorded on the compute stream after the kernels that read the slots
///   before), so no copy overwrites a slot a kernel still reads; `wait(e)` makes the compute
///   stream wait for the copies, so no kernel reads a slot before its copy has landed. Copies of
///   one plan write distinct slots (checked), so their order within a batch does not matter.
/// - Under stream capture the same calls build the fork/join a graph needs: the copy stream joins
///   the capture through `after` (a consumer event is recorded for it when none is given), and
///   must be joined back by a `wait` before the capture ends.
/// @code
/// wisp::cuda::copy_engine engine(compute_stream);
/// wisp::copy_layout where{masters.host_view(), slots.view(), layout.row_bytes()};
/// auto r = pager.prepare(layer, ids, tokens, k);
/// auto landed = engine.copy(where, r.copy_plan, engine.consumer_event());
/// engine.wait(landed);                                   // compute waits for its copies only
/// moe(args);                                             // on compute_stream
/// @endcode
#pragma once

#include <wisp/core/error.hpp>
#include <wisp/core/topk.hpp>
#include <wisp/cuda/runtime.cuh>
#include <wisp/transfer/copy_engine.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace wisp::cuda {

/// Options of a `copy_engine`.
struct copy_engine_options {
  bool batch = true;        ///< use `cudaMemcpyBatchAsync` where the toolkit has it
  std::size_t events = 64;  ///< events handed out round robin (see `copy_engine`)
  int priority = 0;         ///< the copy stream's priority (`cudaStreamCreateWithPriority`)
};

/// Counters of a `copy_engine`: the shared ones, plus how the runs were issued.
struct cuda_copy_stats : copy_engine_stats {
  std::uint64_t batches = 0;        ///< plans issued as one `cudaMemcpyBatchAsync`
  std::uint64_t per_run_plans = 0;  ///< plans issued as one call per run
};

/// @brief Executes copy plans on its own copy stream, ordered against one compute stream by
/// events (see the file comment).
///
/// Events come from a pool of `options.events` handed out round robin: an event is re-recorded
/// that many calls later, after which waiting on it waits for the newer work (never less than
/// the old). Memory: the pool and scratch sized on first use; `copy` allocates only when a plan
/// is longer than any before. Thread safety: one thread at a time. Masters and slots must stay
/// alive until the copies have landed (`synchronize()`, or a wait on a later event).
class copy_engine {
 public:
  using event = cudaEvent_t;

  /// Creates the copy stream (non-blocking) and the event pool on the current device.
  /// @throws wisp::logic_error if `options.events` is 0; wisp::cuda_error.
  explicit copy_engine(cudaStream_t compute, copy_engine_options options = {})
      : compute_(compute), options_(options) {
    WISP_EXPECTS(options.events >= 1, "copy_engine: the event pool needs at least one event");
    WISP_CUDA_TRY(cudaStreamCreateWithPriority(&copy_, cudaStreamNonBlocking, options.priority));
    try {
      detail::create_events(events_, options.events);
    } catch (...) {
      destroy();
      throw;
    }
  }
  copy_engine(const copy_engine&) = delete;
  copy_engine& operator=(const copy_engine&) = delete;
  /// Waits for the copy stream, then destroys it and the events.
  ~copy_engine() { destroy(); }

  /// @brief Enqueues the copies of `plan` on the copy stream after `after` (null: no wait, unless
  /// the compute stream is being captured: then after a consumer event) and returns the event of
  /// their completion. O(plan.size()) host work.
  /// @throws wisp::logic_error (nothing enqueued) if the plan does not fit `layout`;
  ///   wisp::cuda_error if a CUDA call fails.
  event copy(const copy_layout& layout, copy_plan plan, event after = nullptr) {
    checker_.check("cuda::copy_engine::copy", layout, plan);
    if (after == nullptr && capturing(compute_)) {
      after = consumer_event();  // join the capture: uncaptured copies would run eagerly
    }
    if (after != nullptr) {
      WISP_CUDA_TRY(cudaStreamWaitEvent(copy_, after, 0));
    }
    if (runs_.size() < plan.size()) {
      runs_.resize(plan.size());
    }
    const std::size_t runs = plan_copy_runs(plan, runs_);
    const bool contiguous = layout.row_bytes == layout.masters.row_stride &&
                            layout.row_bytes == layout.slots.row_stride;
    if (runs > 0 && !(runs > 1 && issue_batch(layout, runs, contiguous))) {
      for (std::size_t i = 0; i < runs; ++i) {
        issue_run(layout, runs_[i], contiguous);
      }
      ++stats_.per_run_plans;
    }
    ++stats_.plans;
    stats_.runs += runs;
    stats_.rows += plan.size();
    stats_.bytes += plan.size() * layout.row_bytes;
    return record(copy_);
  }

  /// An event recorded on the compute stream now: pass it as `after`. @throws wisp::cuda_error.
  [[nodiscard]] event consumer_event() { return record(compute_); }

  /// The compute stream waits for `e` before its next work. @throws wisp::cuda_error.
  void wait(event e) { WISP_CUDA_TRY(cudaStreamWaitEvent(compute_, e, 0)); }

  /// The calling thread waits until every copy enqueued so far has landed.
  /// @throws wisp::cuda_error.
  void synchronize() { WISP_CUDA_TRY(cudaStreamSynchronize(copy_)); }

  [[nodiscard]] cudaStream_t stream() const noexcept { return copy_; }
  [[nodiscard]] cudaStream_t compute() const noexcept { return compute_; }
  [[nodiscard]] const cuda_copy_stats& stats() const noexcept { return stats_; }

 private:
  static bool capturing(cudaStream_t stream) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    WISP_CUDA_TRY(cudaStreamIsCapturing(stream, &status));
    return status != cudaStreamCaptureStatusNone;
  }

  event record(cudaStream_t stream) {
    const event e = events_[next_event_];
    next_event_ = (next_event_ + 1) % events_.size();
    WISP_CUDA_TRY(cudaEventRecord(e, stream));
    return e;
  }

  void issue_run(const copy_layout& layout, const copy_run& run, bool contiguous) {
    const std::byte* from = layout.masters.row(static_cast<std::size_t>(run.expert));
    std::byte* to = layout.slots.row(static_cast<std::size_t>(run.slot));
    const auto rows = static_cast<std::size_t>(run.rows);
    if (contiguous) {
      WISP_CUDA_TRY(cudaMemcpyAsync(to, from, rows * layout.row_bytes, cudaMemcpyDefault, copy_));
    } else {
      WISP_CUDA_TRY(cudaMemcpy2DAsync(to, layout.slots.row_stride, from, layout.masters.row_stride,
                                      layout.row_bytes, rows, cudaMemcpyDefault, copy_));
    }
  }

  // One cudaMemcpyBatchAsync for every run (one entry per run, or per row when the runs are
  // pitched). Returns false, having issued nothing, when batching is off, unavailable or the
  // stream is being captured.
  bool issue_batch(const copy_layout& layout, std::size_t runs, bool contiguous) {
#if CUDART_VERSION >= 13000
    if (!options_.batch || !batch_works_) {
      return false;
    }
    if (capturing(copy_)) {
      return false;
    }
    destinations_.clear();
    sources_.clear();
    sizes_.clear();
    for (std::size_t i = 0; i < runs; ++i) {
      const copy_run& run = runs_[i];
      const auto rows = static_cast<std::size_t>(run.rows);
      const std::size_t pieces = contiguous ? 1 : rows;
      for (std::size_t r = 0; r < pieces; ++r) {
        destinations_.push_back(layout.slots.row(static_cast<std::size_t>(run.slot) + r));
        sources_.push_back(layout.masters.row(static_cast<std::size_t>(run.expert) + r));
        sizes_.push_back(contiguous ? rows * layout.row_bytes : layout.row_bytes);
      }
    }
    cudaMemcpyAttributes attributes{};
    attributes.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    attributes.flags = cudaMemcpyFlagPreferOverlapWithCompute;
    std::size_t first_copy = 0;
    const cudaError_t status =
        cudaMemcpyBatchAsync(destinations_.data(), sources_.data(), sizes_.data(),
                             destinations_.size(), &attributes, &first_copy, 1, copy_);
    if (status == cudaErrorNotSupported || status == cudaErrorInvalidValue) {
      (void)cudaGetLastError();
      batch_works_ = false;  // this driver or memory kind refuses batches: per-run from now on
      return false;
    }
    WISP_CUDA_TRY(status);
    ++stats_.batches;
    return true;
#else
    (void)layout;
    (void)runs;
    (void)contiguous;
    return false;
#endif
  }

  void destroy() noexcept {
    if (copy_ != nullptr) {
      (void)cudaStreamSynchronize(copy_);
    }
    for (cudaEvent_t e : events_) {
      (void)cudaEventDestroy(e);
    }
    events_.clear();
    if (copy_ != nullptr) {
      (void)cudaStreamDestroy(copy_);
      copy_ = nullptr;
    }
  }

  cudaStream_t compute_;
  cudaStream_t copy_ = nullptr;
  copy_engine_options options_;
  std::vector<cudaEvent_t> events_;
  std::size_t next_event_ = 0;
  bool batch_works_ = true;
  wisp::copy_plan_checker checker_;
  std::vector<copy_run> runs_;
  std::vector<void*> destinations_;
  std::vector<const void*> sources_;
  std::vector<std::size_t> sizes_;
  cuda_copy_stats stats_;
};
static_assert(wisp::copy_engine<copy_engine>);

}  // namespace wisp::cuda
