// SPDX-License-Identifier: Apache-2.0
// The executors: inline runs each task before execute returns, on the caller; a thread pool runs
// every task exactly once, on its own threads, several at a time, and its destructor runs what was
// queued; any_executor forwards to what it wraps.
#include "support/expect_error.hpp"

#include <wisp/core/executor.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace {

TEST(InlineExecutor, RunsEachTaskOnTheCallerBeforeReturning) {
  const wisp::inline_executor ex;
  int runs = 0;
  std::thread::id where;
  ex.execute([&] {
    ++runs;
    where = std::this_thread::get_id();
  });
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(where, std::this_thread::get_id());
}

// Each pool test runs with threads that sleep at once and with threads that spin first.
class ThreadPool : public ::testing::TestWithParam<int> {
 protected:
  [[nodiscard]] static wisp::thread_pool_options options() {
    return {.spin = std::chrono::microseconds(GetParam())};
  }
};
INSTANTIATE_TEST_SUITE_P(Spin, ThreadPool, ::testing::Values(0, 200),
                         [](const auto& info) { return "spin_us_" + std::to_string(info.param); });

TEST_P(ThreadPool, RunsEveryTaskOnceOnItsOwnThreads) {
  constexpr int tasks = 2000;
  std::vector<std::atomic<int>> ran(tasks);
  std::mutex mutex;
  std::set<std::thread::id> threads;
  {
    wisp::thread_pool pool(3, options());
    EXPECT_EQ(pool.size(), 3u);
    const wisp::thread_pool::executor_type ex = pool.executor();
    EXPECT_TRUE(ex == pool.executor());
    for (int i = 0; i < tasks; ++i) {
      ex.execute([&, i] {
        ran[static_cast<std::size_t>(i)].fetch_add(1);
        const std::lock_guard lock(mutex);
        threads.insert(std::this_thread::get_id());
      });
    }
  }  // the destructor runs every queued task before joining
  for (int i = 0; i < tasks; ++i) {
    ASSERT_EQ(ran[static_cast<std::size_t>(i)].load(), 1) << i;
  }
  EXPECT_EQ(threads.count(std::this_thread::get_id()), 0u);
  EXPECT_LE(threads.size(), 3u);
}

TEST_P(ThreadPool, RunsTasksConcurrently) {
  // Two tasks that each wait for the other can only both finish on two threads at once.
  wisp::thread_pool pool(2, options());
  std::atomic<int> arrived{0};
  std::atomic<int> done{0};
  for (int i = 0; i < 2; ++i) {
    pool.executor().execute([&] {
      arrived.fetch_add(1);
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (arrived.load() < 2 && std::chrono::steady_clock::now() < give_up) {
        std::this_thread::yield();
      }
      done.fetch_add(arrived.load() == 2 ? 1 : 0);
    });
  }
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (done.load() < 2 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::yield();
  }
  EXPECT_EQ(done.load(), 2);
}

TEST_P(ThreadPool, TakesBurstsAfterIdleGapsShorterAndLongerThanTheSpin) {
  // Bursts of tasks (some submitted by tasks) with idle gaps around the spin's length: a
  // thread that went back to sleep, or is still spinning, must take every one of them.
  std::atomic<int> ran{0};
  int submitted = 0;
  {
    wisp::thread_pool pool(2, options());
    const auto ex = pool.executor();
    for (const int gap_us : {0, 50, 400, 0, 2000, 100}) {
      std::this_thread::sleep_for(std::chrono::microseconds(gap_us));
      for (int i = 0; i < 5; ++i) {
        ex.execute([&, ex] {
          ran.fetch_add(1);
          ex.execute([&] { ran.fetch_add(1); });
        });
        submitted += 2;
      }
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (ran.load() < submitted && std::chrono::steady_clock::now() < give_up) {
        std::this_thread::yield();
      }
      ASSERT_EQ(ran.load(), submitted) << "after a gap of " << gap_us << " us";
    }
  }  // idle (sleeping or spinning) threads join
  EXPECT_EQ(ran.load(), submitted);
}

TEST(ThreadPoolOptions, NeedsAThreadAndASpinOfZeroOrMore) {
  wisp::test::expect_error([] { wisp::thread_pool pool(0); }, "threads must be >= 1, got 0");
  wisp::test::expect_error(
      [] { wisp::thread_pool pool(1, {.spin = std::chrono::microseconds(-5)}); },
      "spin must be >= 0 us, got -5");
}

TEST(AnyExecutor, DefaultsToInlineAndForwardsToWhatItWraps) {
  int runs = 0;
  const wisp::any_executor inline_default;
  inline_default.execute([&] { ++runs; });
  EXPECT_EQ(runs, 1);
  std::atomic<int> pooled{0};
  {
    wisp::thread_pool pool(1);
    const wisp::any_executor on_pool(pool.executor());
    const wisp::any_executor copy = on_pool;
    on_pool.execute([&] { pooled.fetch_add(1); });
    copy.execute([&] { pooled.fetch_add(1); });
  }
  EXPECT_EQ(pooled.load(), 2);
  static_assert(wisp::executor<wisp::any_executor>);
  static_assert(!wisp::executor<int>);
}

}  // namespace
