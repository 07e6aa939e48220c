// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The `copy_engine` concept (what executes a pager's copy plan), the pieces every model
/// shares (`copy_layout`, `plan_copy_runs`, the plan check) and `host_copy_engine`, the model
/// that copies with `memcpy` on the executor its caller gives (by default on the calling thread)
/// and charges the modelled link of a `device_timeline`. `wisp::cuda::copy_engine` is the GPU
/// model (a copy stream and events).
///
/// Ordering rules every model keeps (docs/cuda.md, "streams and events"):
/// - copies run in submission order, each plan's copies after the event it was given (`after`:
///   the consumer's progress when the slots' previous readers were enqueued), so a copy never
///   overwrites a slot a kernel still reads;
/// - `wait(e)` makes the consumer (the compute stream, or the calling thread for the host model)
///   wait until every copy up to `e` has landed, so a kernel never reads a slot before its copy.
/// @code
/// wisp::device_timeline timeline(wisp::link_model{.bytes_per_second = 25e9});
/// wisp::thread_pool copier(1);                          // copies beside the caller; or none
/// wisp::host_copy_engine engine(timeline, 1024, copier.executor());
/// wisp::copy_layout where{.masters = masters_view, .slots = slots_view, .row_bytes = bytes};
/// auto r = pager.prepare(layer, ids, tokens, k);
/// auto landed = engine.copy(where, r.copy_plan, engine.consumer_event());
/// engine.wait(landed);                                  // slots hold the experts from here
/// kernel(args);
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/core/executor.hpp>
#include <wisp/core/expert_tensor_view.hpp>
#include <wisp/core/topk.hpp>
#include <wisp/transfer/timeline.hpp>

#include <algorithm>
#include <cmath>
#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

namespace wisp {

/// @brief Where a copy plan's rows come from and go to: row `e` of `masters` (expert `e`) is
/// copied to row `s` of `slots` (slot `s`), `row_bytes` bytes each. Trivially copyable.
struct copy_layout {
  expert_tensor_view masters;  ///< source rows, one per expert (read only)
  expert_tensor_view slots;    ///< destination rows, one per slot
  std::size_t row_bytes = 0;   ///< bytes copied per row, <= both row strides
};

/// @brief Consecutive plan entries `(expert + i, slot + i)`, `i < rows`: one copy when both row
/// strides equal `row_bytes` (contiguous), else one pitched copy of `rows` rows.
struct copy_run {
  std::int32_t expert = -1;
  std::int32_t slot = -1;
  std::int32_t rows = 0;

  friend constexpr bool operator==(const copy_run&, const copy_run&) = default;
};

/// @brief Merges consecutive entries of `plan` into maximal runs, in plan order (entries are
/// never reordered; an entry joins the run before it only if it follows it directly and its
/// expert and slot are both one more). Writes the runs to `out` (`out.size() >= plan.size()`)
/// and returns how many. O(plan.size()), no allocation.
/// @throws wisp::logic_error if `out` is too small.
inline std::size_t plan_copy_runs(copy_plan plan, std::span<copy_run> out) {
  WISP_EXPECTS(out.size() >= plan.size(), "plan_copy_runs: room for ", out.size(),
               " runs but the plan has ", plan.size(), " entries");
  std::size_t runs = 0;
  for (const copy_op& op : plan) {
    copy_run* last = runs == 0 ? nullptr : &out[runs - 1];
    if (last != nullptr && op.expert == last->expert + last->rows &&
        op.slot == last->slot + last->rows) {
      ++last->rows;
    } else {
      out[runs++] = copy_run{op.expert, op.slot, 1};
    }
  }
  return runs;
}

/// @brief Checks layouts and plans for a copy engine (the host's, `wisp::cuda`'s or a user's).
/// Keeps the scratch that finds a slot written twice, grown to the largest slot tensor seen, so
/// a steady state allocates nothing. Not thread-safe.
class copy_plan_checker {
 public:
  /// @throws wisp::logic_error naming the values (nothing copied) if `row_bytes` is 0 or exceeds
  ///   a row stride, a base is null while rows are used, an entry's expert or slot is out of
  ///   range, or two entries write the same slot (the copies of one plan may run in any order).
  void check(const char* where, const copy_layout& layout, copy_plan plan) {
    if (plan.empty()) {
      return;
    }
    WISP_EXPECTS(layout.row_bytes >= 1 && layout.row_bytes <= layout.masters.row_stride &&
                     layout.row_bytes <= layout.slots.row_stride,
                 where, ": row_bytes ", layout.row_bytes, " must be in [1, min(master stride ",
                 layout.masters.row_stride, ", slot stride ", layout.slots.row_stride, ")]");
    WISP_EXPECTS(layout.masters.base != nullptr && layout.slots.base != nullptr, where,
                 ": the master or slot tensor has a null base");
    if (stamps_.size() < layout.slots.rows) {
      stamps_.assign(layout.slots.rows, 0);
      generation_ = 0;
    }
    if (++generation_ == 0) {
      std::fill(stamps_.begin(), stamps_.end(), 0u);
      generation_ = 1;
    }
    for (std::size_t i = 0; i < plan.size(); ++i) {
      const copy_op op = plan[i];
      WISP_EXPECTS(op.expert >= 0 && static_cast<std::size_t>(op.expert) < layout.masters.rows &&
                       op.slot >= 0 && static_cast<std::size_t>(op.slot) < layout.slots.rows,
                   where, ": plan[", i, "] = {expert ", op.expert, ", slot ", op.slot,
                   "} is outside masters [0, ", layout.masters.rows, ") x slots [0, ",
                   layout.slots.rows, ")");
      std::uint32_t& stamp = stamps_[static_cast<std::size_t>(op.slot)];
      WISP_EXPECTS(stamp != generation_, where, ": plan[", i, "] writes slot ", op.slot,
                   " again; a plan writes each slot at most once");
      stamp = generation_;
    }
  }

 private:
  std::vector<std::uint32_t> stamps_;
  std::uint32_t generation_ = 0;
};

/// @brief Executes copy plans (see the file comment for the ordering rules).
///
/// - `copy(layout, plan, after)`: enqueues the plan's copies after `after`; returns the event of
///   their completion (of every earlier copy too: copies complete in order).
/// - `consumer_event()`: the consumer's progress so far (pass it as `after` so the copies wait for
///   the kernels that read the slots before).
/// - `wait(e)`: the consumer waits for `e` before its next work.
/// - `synchronize()`: the calling thread waits until every copy has landed.
template <class E>
concept copy_engine = requires(E& engine, const copy_layout& layout, copy_plan plan,
                               const typename E::event& e) {
  { engine.copy(layout, plan, e) } -> std::same_as<typename E::event>;
  { engine.consumer_event() } -> std::same_as<typename E::event>;
  engine.wait(e);
  engine.synchronize();
};

/// Counters of a copy engine.
struct copy_engine_stats {
  std::uint64_t plans = 0;  ///< `copy` calls
  std::uint64_t rows = 0;   ///< plan entries copied
  std::uint64_t runs = 0;   ///< copies issued (one per run)
  std::uint64_t bytes = 0;  ///< bytes copied
};

/// @brief A point in a `host_copy_engine`'s queue: every copy submitted up to it, and when they
/// end on the modelled link.
struct host_copy_event {
  std::uint64_t ticket = 0;   ///< `copy` calls up to this one (0: nothing to wait for)
  timeline_event modelled{};  ///< when those copies end on the modelled link
};

/// @brief The host model of `copy_engine`: the runs are `memcpy`d in order by a drain task on the
/// executor the caller gives: with the default `inline_executor` inside `copy`, with a
/// `thread_pool`'s on a pool thread while the caller goes on. Each run is charged on the caller's
/// `device_timeline` as one copy of its bytes (the link's latency per run), so modelled times do
/// not depend on the host's memcpy speed or on the executor.
///
/// The consumer is the calling thread: `wait` blocks it until the copies have landed, and
/// `consumer_event()` is already satisfied in real time (the caller has finished reading when it
/// asks), carrying only the timeline's compute progress. Order: at most one drain task runs at a
/// time and it takes the runs in submission order, so a pool of any size keeps the order.
/// Memory: a queue of `queue_runs` runs allocated at construction; `copy` blocks while the queue
/// is full and allocates nothing once the plan check has seen the largest slot tensor (a drain
/// task is one `std::function`, made once per wake-up of the executor). Thread safety: `copy`,
/// `wait`, `synchronize` and `stats` from one thread at a time (the owner), never from a task of
/// the executor. Masters and slots must stay alive and unchanged by the caller until the copies
/// have landed; the executor must outlive the engine.
class host_copy_engine {
 public:
  using event = host_copy_event;

  /// An engine that queues up to `queue_runs` runs and copies them on `executor` (by default on
  /// the calling thread, inside `copy`). @throws wisp::logic_error if `queue_runs` is 0;
  ///   std::bad_alloc.
  explicit host_copy_engine(device_timeline& timeline, std::size_t queue_runs = 1024,
                            any_executor executor = {})
      : timeline_(&timeline), executor_(std::move(executor)) {
    WISP_EXPECTS(queue_runs >= 1, "host_copy_engine: queue_runs must be >= 1");
    queue_.resize(queue_runs);
    runs_.resize(queue_runs);
  }
  host_copy_engine(const host_copy_engine&) = delete;
  host_copy_engine& operator=(const host_copy_engine&) = delete;
  /// Waits until every queued copy has landed.
  ~host_copy_engine() {
    std::unique_lock<std::mutex> lock(mutex_);
    drain_ended_.wait(lock, [&] { return !draining_; });
  }

  /// @brief Enqueues the copies of `plan` (see `copy_engine`). O(plan.size()) plus the copies,
  /// which run on the executor; blocks only while the queue is full.
  /// @throws wisp::logic_error (nothing enqueued) if the plan does not fit `layout` (see
  ///   `copy_plan_checker`) or `after.modelled` is not a valid time.
  event copy(const copy_layout& layout, copy_plan plan, event after = {}) {
    checker_.check("host_copy_engine::copy", layout, plan);
    WISP_EXPECTS(std::isfinite(after.modelled.time) && after.modelled.time >= 0,
                 "host_copy_engine::copy: event time must be finite and >= 0, got ",
                 after.modelled.time);
    if (runs_.size() < plan.size()) {
      runs_.resize(plan.size());
    }
    const std::size_t runs = plan_copy_runs(plan, runs_);
    const std::uint64_t ticket = ++submitted_;
    timeline_event modelled{std::max(after.modelled.time, timeline_->copies_done().time)};
    for (std::size_t i = 0; i < runs; ++i) {
      const copy_run& run = runs_[i];
      const std::size_t bytes = layout.row_bytes * static_cast<std::size_t>(run.rows);
      modelled = timeline_->copy(bytes, after.modelled);
      push(job{layout.masters.row(static_cast<std::size_t>(run.expert)), layout.masters.row_stride,
               layout.slots.row(static_cast<std::size_t>(run.slot)), layout.slots.row_stride,
               layout.row_bytes, static_cast<std::size_t>(run.rows), 0});
      stats_.bytes += bytes;
      stats_.rows += static_cast<std::uint64_t>(run.rows);
    }
    push(job{nullptr, 0, nullptr, 0, 0, 0, ticket});  // marks the plan's end
    ++stats_.plans;
    stats_.runs += runs;
    std::unique_lock<std::mutex> lock(mutex_);
    start_drain(lock);
    return event{ticket, modelled};
  }

  /// The consumer's progress: nothing to wait for in real time; the timeline's compute end.
  [[nodiscard]] event consumer_event() const noexcept {
    return event{0, timeline_->compute_done()};
  }

  /// Blocks until every copy up to `e` has landed. O(1) plus the wait.
  void wait(const event& e) {
    std::unique_lock<std::mutex> lock(mutex_);
    landed_.wait(lock, [&] { return completed_ >= e.ticket; });
  }

  /// Blocks until every copy submitted so far has landed.
  void synchronize() { wait(event{submitted_, {}}); }

  [[nodiscard]] const copy_engine_stats& stats() const noexcept { return stats_; }
  [[nodiscard]] device_timeline& timeline() const noexcept { return *timeline_; }

 private:
  // One pitched copy of `rows` rows of `bytes`, or (rows == 0) the end of plan `ticket`.
  struct job {
    const std::byte* source;
    std::size_t source_pitch;
    std::byte* destination;
    std::size_t destination_pitch;
    std::size_t bytes;
    std::size_t rows;
    std::uint64_t ticket;
  };

  // Queues `j`; a full queue is drained first (by the executor: at once when it is inline).
  void push(const job& j) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (tail_ - head_ == queue_.size()) {
      start_drain(lock);
      space_.wait(lock, [&] { return tail_ - head_ < queue_.size(); });
    }
    queue_[tail_++ % queue_.size()] = j;
  }

  // Hands a drain task to the executor unless one is running (`lock` holds `mutex_`; it is
  // released while the executor takes the task, which may run it right there).
  void start_drain(std::unique_lock<std::mutex>& lock) {
    if (draining_ || head_ == tail_) {
      return;
    }
    draining_ = true;
    lock.unlock();
    try {
      executor_.execute([this] { drain(); });
    } catch (...) {  // the executor refused the task: copy here rather than lose the copies
      drain();
    }
    lock.lock();
  }

  // Copies every queued run in order, then ends (the only task that touches the queue's head).
  void drain() noexcept {
    std::unique_lock<std::mutex> lock(mutex_);
    while (head_ != tail_) {
      const job j = queue_[head_ % queue_.size()];
      lock.unlock();
      for (std::size_t r = 0; r < j.rows; ++r) {
        std::memcpy(j.destination + r * j.destination_pitch, j.source + r * j.source_pitch,
                    j.bytes);
      }
      lock.lock();
      ++head_;
      if (j.rows == 0) {
        completed_ = j.ticket;
        landed_.notify_all();
      }
      space_.notify_one();
    }
    draining_ = false;
    drain_ended_.notify_all();  // under the lock: the engine may go once it is released
  }

  device_timeline* timeline_;
  any_executor executor_;
  copy_plan_checker checker_;
  std::vector<copy_run> runs_;  // scratch of `copy`
  copy_engine_stats stats_;
  std::uint64_t submitted_ = 0;  // tickets handed out (owner thread only)

  std::mutex mutex_;  // guards everything below
  std::condition_variable space_;
  std::condition_variable landed_;
  std::condition_variable drain_ended_;
  std::vector<job> queue_;  // ring buffer: [head_, tail_) pending
  std::size_t head_ = 0;
  std::size_t tail_ = 0;
  std::uint64_t completed_ = 0;  // last plan whose copies have all landed
  bool draining_ = false;        // a drain task has been handed to the executor and not ended
};
static_assert(copy_engine<host_copy_engine>);

}  // namespace wisp
