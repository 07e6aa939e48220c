// SPDX-License-Identifier: Apache-2.0
// A `thread_group` of real host threads joined by a std::barrier: runs a block-level step
// function with several ranks on the CPU, so the tests exercise the same index arithmetic,
// scans and barriers a CUDA thread block runs (serial_group runs it with one rank).
#pragma once

#include <wisp/cuda/thread_group.hpp>

#include <atomic>
#include <barrier>
#include <cstdint>
#include <thread>
#include <vector>

namespace wisp::cuda::testing {

class host_thread_group {
 public:
  // What the threads of one group share.
  struct shared {
    explicit shared(std::int32_t size) : barrier(size), values(static_cast<std::size_t>(size), 0) {}
    std::barrier<> barrier;
    std::vector<std::int32_t> values;
  };

  host_thread_group(shared& s, std::int32_t rank) : shared_(&s), rank_(rank) {}

  [[nodiscard]] std::int32_t rank() const noexcept { return rank_; }
  [[nodiscard]] std::int32_t size() const noexcept {
    return static_cast<std::int32_t>(shared_->values.size());
  }
  void sync() const { shared_->barrier.arrive_and_wait(); }
  [[nodiscard]] bool any(bool p) const {
    std::int32_t total = 0;
    (void)exclusive_sum(p ? 1 : 0, total);
    return total != 0;
  }
  std::int32_t exclusive_sum(std::int32_t v, std::int32_t& total) const {
    shared_->values[static_cast<std::size_t>(rank_)] = v;
    sync();
    std::int32_t below = 0;
    total = 0;
    for (std::int32_t r = 0; r < size(); ++r) {
      const std::int32_t x = shared_->values[static_cast<std::size_t>(r)];
      below += r < rank_ ? x : 0;
      total += x;
    }
    sync();  // every rank has read the values before any writes the next ones
    return below;
  }
  void atomic_min(std::int32_t* cell, std::int32_t v) const {
    std::atomic_ref<std::int32_t> a(*cell);
    std::int32_t current = a.load();
    while (v < current && !a.compare_exchange_weak(current, v)) {
    }
  }

 private:
  shared* shared_;
  std::int32_t rank_;
};
static_assert(thread_group<host_thread_group>);

// Runs `body(group)` on `size` threads, one rank each, and joins them.
template <class Body>
void run_on_threads(std::int32_t size, Body body) {
  host_thread_group::shared s(size);
  std::vector<std::thread> threads;
  for (std::int32_t r = 0; r < size; ++r) {
    threads.emplace_back([&s, &body, r] { body(host_thread_group(s, r)); });
  }
  for (std::thread& t : threads) {
    t.join();
  }
}

}  // namespace wisp::cuda::testing
