// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Where wisp runs work it may run in parallel: the `executor` concept, `inline_executor`
/// (the default everywhere: the work runs on the calling thread), `thread_pool` (threads the
/// caller creates, owns and passes) and `any_executor`, the type-erased handle the library's
/// components store. No wisp component starts a thread of its own; one that can use several
/// takes an executor, as a stdexec scheduler would be passed.
/// @code
/// wisp::thread_pool pool(2);                                  // the caller's threads
/// wisp::compressed_expert_store store(config, wisp::huffman_coder{}, wisp::core_coders(),
///                                     pool.executor());       // decodes on the pool
/// wisp::compressed_expert_store single(config, wisp::huffman_coder{});  // on the caller
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>

#include <atomic>
#include <chrono>
#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace wisp {

/// @brief Something that runs tasks: `ex.execute(task)` runs the `std::function<void()>` `task`
/// exactly once, now on the calling thread or later on another one, or throws having taken
/// nothing (it could not queue the task). A task must not throw (an executor running it elsewhere
/// has nobody to report to); the components that submit work catch inside their tasks. Copies of
/// an executor refer to the same execution resource.
template <class E>
concept executor = std::copy_constructible<E> && requires(const E& ex, std::function<void()> task) {
  ex.execute(std::move(task));
};

/// @brief Runs each task on the calling thread before `execute` returns. Stateless; thread-safe.
struct inline_executor {
  /// Runs `task`. O(the task).
  void execute(const std::function<void()>& task) const { task(); }
};
static_assert(executor<inline_executor>);

/// @brief How a `thread_pool`'s idle threads wait.
struct thread_pool_options {
  /// How long a thread that finds no task keeps looking before it sleeps (0: it sleeps at once).
  /// A sleeping thread is woken by the kernel, serially, one per submitted task (a few
  /// microseconds each); a spinning one takes the task at once. Worth it when work comes in bursts
  /// closer together than the spin, on cores nothing else needs (a host computing experts beside
  /// a GPU); harmful on a machine with more threads than cores, where a spinning thread takes a
  /// core from the one with work.
  std::chrono::microseconds spin{0};
};

/// @brief A fixed set of threads that run submitted tasks in submission order (each task on
/// whichever thread is free), created and owned by the caller. Its `executor()` handles may be
/// copied into components; the pool must outlive every component holding one.
///
/// Thread safety: `execute` may be called from any thread, tasks included. The destructor runs
/// every task already submitted, then joins the threads (a spinning thread first ends its spin,
/// at most `thread_pool_options::spin`). A task that waits for tasks it submitted itself can
/// deadlock a pool with no thread to spare.
class thread_pool {
 public:
  /// A copyable handle that submits to this pool (models `executor`).
  class executor_type {
   public:
    /// Queues `task` for a pool thread. O(1) plus one allocation. @throws std::bad_alloc.
    void execute(std::function<void()> task) const { pool_->submit(std::move(task)); }
    friend bool operator==(const executor_type&, const executor_type&) = default;

   private:
    friend class thread_pool;
    explicit executor_type(thread_pool* pool) noexcept : pool_(pool) {}
    thread_pool* pool_;
  };

  /// Starts `threads` threads. @throws wisp::logic_error if `threads` is 0 or the spin is
  ///   negative; std::system_error if a thread cannot start (those already started are joined).
  explicit thread_pool(std::uint32_t threads, thread_pool_options options = {})
      : spin_(options.spin) {
    WISP_EXPECTS(threads >= 1, "thread_pool: threads must be >= 1, got ", threads);
    WISP_EXPECTS(options.spin.count() >= 0, "thread_pool: spin must be >= 0 us, got ",
                 options.spin.count());
    workers_.reserve(threads);
    for (std::uint32_t i = 0; i < threads; ++i) {
      workers_.emplace_back([this] { work(); });
    }
  }
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;
  /// Runs every queued task, then joins the threads.
  ~thread_pool() {
    {
      const std::lock_guard lock(mutex_);
      stop_.store(true, std::memory_order_relaxed);
    }
    ready_.notify_all();
    workers_.clear();  // joins
  }

  /// A handle that submits tasks to this pool.
  [[nodiscard]] executor_type executor() noexcept { return executor_type(this); }
  /// Threads of the pool.
  [[nodiscard]] std::size_t size() const noexcept { return workers_.size(); }

 private:
  void submit(std::function<void()> task) {
    {
      const std::lock_guard lock(mutex_);
      queue_.push_back(std::move(task));
      queued_.store(queue_.size(), std::memory_order_release);
    }
    ready_.notify_one();
  }

  void work() {
    std::unique_lock lock(mutex_);
    for (;;) {
      if (queue_.empty() && !stop_ && spin_.count() > 0) {
        lock.unlock();
        spin();
        lock.lock();
      }
      ready_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) {
        return;  // stopped and drained
      }
      std::function<void()> task = std::move(queue_.front());
      queue_.pop_front();
      queued_.store(queue_.size(), std::memory_order_relaxed);
      lock.unlock();
      task();
      lock.lock();
    }
  }

  // Looks for a task (or the stop) without the lock until the spin ends.
  void spin() const {
    const auto until = std::chrono::steady_clock::now() + spin_;
    for (std::uint32_t i = 0;
         queued_.load(std::memory_order_acquire) == 0 && !stop_.load(std::memory_order_relaxed);
         ++i) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#else
      std::this_thread::yield();
#endif
      if (i % 64 == 0 && std::chrono::steady_clock::now() >= until) {
        return;
      }
    }
  }

  std::chrono::microseconds spin_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> queue_;
  std::atomic<std::size_t> queued_{0};  // queue_.size(), for the spinning threads
  std::atomic<bool> stop_{false};       // written under the lock; read without it while spinning
  std::vector<std::jthread> workers_;   // last: joined before the state they use is destroyed
};
static_assert(executor<thread_pool::executor_type>);

/// @brief Any executor behind one copyable value, which a component stores (default: an
/// `inline_executor`). Thread safety: as the wrapped executor's.
class any_executor {
 public:
  /// An `inline_executor`.
  any_executor() : any_executor(inline_executor{}) {}
  /// Wraps a copy of `ex`. @throws std::bad_alloc.
  template <class E>
  requires(!std::same_as<std::remove_cvref_t<E>, any_executor> && executor<E>)
      any_executor(E ex)  // NOLINT(google-explicit-constructor): an executor is-an any_executor
      : run_([ex = std::move(ex)](std::function<void()> task) { ex.execute(std::move(task)); }) {}

  /// Runs `task` on the wrapped executor. @throws what the wrapped executor's `execute` throws.
  void execute(std::function<void()> task) const { run_(std::move(task)); }

 private:
  std::function<void(std::function<void()>)> run_;
};
static_assert(executor<any_executor>);

}  // namespace wisp
