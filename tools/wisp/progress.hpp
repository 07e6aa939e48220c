// SPDX-License-Identifier: Apache-2.0
// A progress bar with an ETA on stderr, for the long runs of the `wisp` tool (sim, evaluate,
// large imports). Drawn only when stderr is a terminal, never when a --json/--csv result goes to
// a pipe, and only once the work has run for a second (short runs print nothing; the environment
// variable WISP_PROGRESS_DELAY_MS changes that second, e.g. to 0 in tests).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>

namespace wisp::tool {

/// Whether a command should draw progress: stderr is a terminal, and the result is not
/// machine output (`--json`, `--csv`) headed for a pipe or a file.
[[nodiscard]] inline bool progress_wanted(bool machine_output) {
  return isatty(STDERR_FILENO) == 1 && !(machine_output && isatty(STDOUT_FILENO) != 1);
}

/// @brief `[#####.....]  42.0%  eta 12s  what` on one stderr line, redrawn at most 10 times a
/// second and erased at the end. `advance` may be called from several threads.
class progress_bar {
 public:
  progress_bar(std::string what, std::uint64_t total, bool enabled)
      : what_(std::move(what)), total_(total), enabled_(enabled), start_(clock::now()) {
    if (const char* delay = std::getenv("WISP_PROGRESS_DELAY_MS"); delay != nullptr) {
      delay_ = std::chrono::milliseconds(std::strtoll(delay, nullptr, 10));
    }
  }
  progress_bar(const progress_bar&) = delete;
  progress_bar& operator=(const progress_bar&) = delete;
  ~progress_bar() {
    if (drawn_) {
      std::fprintf(stderr, "\r%*s\r", 79, "");
      std::fflush(stderr);
    }
  }

  [[nodiscard]] bool enabled() const noexcept { return enabled_; }

  /// Adds `n` units of work done. Cheap: it looks at the clock once per 2^16 units (or per call
  /// when `n` is large).
  void advance(std::uint64_t n = 1) noexcept {
    if (!enabled_) {
      return;
    }
    const std::uint64_t before = done_.fetch_add(n, std::memory_order_relaxed);
    if (((before + n) >> 16) != (before >> 16) || n >= (1u << 16)) {
      draw(before + n);
    }
  }

  /// Sets the total work (for sources that learn it as they go, e.g. an import's bytes). Not to be
  /// called concurrently with `advance` or `set`.
  void set_total(std::uint64_t total) noexcept { total_ = total; }

  /// Sets the work done to `done` (for sources that report a position, e.g. bytes read).
  void set(std::uint64_t done) noexcept {
    if (enabled_) {
      done_.store(done, std::memory_order_relaxed);
      draw(done);
    }
  }

 private:
  using clock = std::chrono::steady_clock;

  void draw(std::uint64_t done) noexcept {
    const std::unique_lock lock(mutex_, std::try_to_lock);
    const auto now = clock::now();
    if (!lock.owns_lock() || now - start_ < delay_ ||
        now - last_draw_ < std::chrono::milliseconds(100)) {
      return;
    }
    last_draw_ = now;
    drawn_ = true;
    const double fraction =
        total_ == 0 ? 1.0 : std::min(1.0, static_cast<double>(done) / static_cast<double>(total_));
    constexpr int width = 30;
    const int filled = static_cast<int>(fraction * width);
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double eta = fraction > 0 ? elapsed * (1.0 - fraction) / fraction : 0.0;
    std::fprintf(stderr, "\r[%.*s%*s] %5.1f%%  eta %4.0fs  %-28.28s", filled,
                 "##############################", width - filled, "", 100.0 * fraction, eta,
                 what_.c_str());
    std::fflush(stderr);
  }

  std::string what_;
  std::uint64_t total_;
  bool enabled_;
  std::atomic<std::uint64_t> done_{0};
  std::mutex mutex_;
  std::chrono::milliseconds delay_{1000};
  bool drawn_ = false;
  clock::time_point start_;
  clock::time_point last_draw_{};
};

}  // namespace wisp::tool
