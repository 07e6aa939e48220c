// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief A modelled device with one host-to-device link: `link_model` (what a copy costs) and
/// `device_timeline` (an in-order copy queue and an in-order compute queue joined by events, the
/// way a copy stream and a compute stream are joined by CUDA events).
///
/// Serving figures that come from this timeline do not depend on how fast the host happens to run
/// `memcpy`: a copy of `b` bytes occupies the link for `latency + b / bandwidth` seconds, whatever
/// moved the bytes. Compute durations are the caller's (measured on the host, or modelled).
/// @code
/// wisp::device_timeline t(wisp::link_model{.bytes_per_second = 25e9, .latency_seconds = 10e-6});
/// wisp::timeline_event ready{};
/// for (const wisp::copy_op& op : plan) ready = t.copy(expert_bytes);   // copy queue, in order
/// t.compute(moe_seconds, ready);             // the layer's kernel waits only for its copies
/// double tpot = t.now();
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <span>

namespace wisp {

/// @brief The cost of one copy over a link: `latency_seconds + bytes / bytes_per_second`. The one
/// link type of the timeline, the simulators and the engine. `from_gbps(0, ...)` gives an
/// infinitely fast link (copies cost only their latency), which the serial simulator accepts as
/// "no transfer"; `validate`, which a modelled device's timeline calls, refuses it.
struct link_model {
  double bytes_per_second = 25e9;  ///< sustained bandwidth (default: a PCIe 4.0 x16 link)
  double latency_seconds = 10e-6;  ///< fixed cost per copy (issue, DMA set-up)

  /// The link of `gb_per_s` GB/s (1e9 B/s; 0: infinitely fast) and `latency_us` microseconds per
  /// copy, the units of the command line and Python. Not validated (see `validate`).
  [[nodiscard]] static constexpr link_model from_gbps(double gb_per_s, double latency_us) noexcept {
    return {gb_per_s == 0.0 ? std::numeric_limits<double>::infinity() : gb_per_s * 1e9,
            latency_us * 1e-6};
  }

  /// @throws wisp::logic_error unless the bandwidth is finite and > 0 and the latency finite and
  ///   >= 0.
  void validate() const {
    WISP_EXPECTS(std::isfinite(bytes_per_second) && bytes_per_second > 0,
                 "link_model: bytes_per_second must be finite and > 0, got ", bytes_per_second);
    WISP_EXPECTS(std::isfinite(latency_seconds) && latency_seconds >= 0,
                 "link_model: latency_seconds must be finite and >= 0, got ", latency_seconds);
  }
  /// Seconds one copy of `bytes` occupies the link. O(1).
  [[nodiscard]] double copy_seconds(std::uint64_t bytes) const noexcept {
    return latency_seconds + static_cast<double>(bytes) / bytes_per_second;
  }
};

/// @brief When an enqueued operation completes, in seconds since the timeline's start. The default
/// event (time 0) has already happened: waiting on it never delays anything.
struct timeline_event {
  double time = 0;

  friend constexpr bool operator==(const timeline_event&, const timeline_event&) = default;
};

/// Counters of a `device_timeline`.
struct timeline_stats {
  std::uint64_t copies = 0;      ///< copies enqueued
  std::uint64_t copy_bytes = 0;  ///< bytes they moved
  double copy_seconds = 0;       ///< time the link was busy
  std::uint64_t computes = 0;    ///< compute operations enqueued
  double compute_seconds = 0;    ///< time the compute queue was busy
  double stall_seconds = 0;      ///< time the compute queue sat idle waiting for an event
};

/// @brief Two in-order queues of a modelled device: copies on the link, and compute.
///
/// - `copy(bytes, after)` starts when the link has finished every earlier copy and `after` has
///   happened (e.g. the kernel that last read the destination slot: a copy never overwrites a slot
///   before its reader is done); it ends `link.copy_seconds(bytes)` later.
/// - `compute(seconds, waits)` starts when the compute queue has finished every earlier compute
///   and every event of `waits` has happened; it ends `seconds` later. Time the queue spends idle
///   because of `waits` is counted as stall.
/// - Both return the completion event, so a caller can issue the next layer's copies before this
///   layer's compute (double buffering) and make the next compute wait only for its own copies.
///
/// Every operation is O(1) plus the number of events waited on; no allocation. Deterministic: the
/// same sequence of calls gives the same times bit for bit. Thread safety: none (one owner).
class device_timeline {
 public:
  /// @throws wisp::logic_error if `link` is invalid (see `link_model::validate`).
  explicit device_timeline(const link_model& link = {}) : link_(link) { link_.validate(); }

  /// Enqueues a copy of `bytes` on the link, starting no earlier than `after`. O(1).
  /// @throws wisp::logic_error if `after.time` is negative or not finite (nothing enqueued).
  timeline_event copy(std::uint64_t bytes, timeline_event after = {}) {
    check_event("device_timeline::copy", after);
    const double start = std::max(copy_free_, after.time);
    const double busy = link_.copy_seconds(bytes);
    copy_free_ = start + busy;
    ++stats_.copies;
    stats_.copy_bytes += bytes;
    stats_.copy_seconds += busy;
    return {copy_free_};
  }

  /// Enqueues `seconds` of compute that starts once every event of `waits` has happened. O(waits).
  /// @throws wisp::logic_error if `seconds` or an event's time is negative or not finite (nothing
  ///   enqueued).
  timeline_event compute(double seconds, std::span<const timeline_event> waits) {
    WISP_EXPECTS(std::isfinite(seconds) && seconds >= 0,
                 "device_timeline::compute: seconds must be finite and >= 0, got ", seconds);
    double ready = compute_free_;
    for (const timeline_event& e : waits) {
      check_event("device_timeline::compute", e);
      ready = std::max(ready, e.time);
    }
    stats_.stall_seconds += ready - compute_free_;
    compute_free_ = ready + seconds;
    ++stats_.computes;
    stats_.compute_seconds += seconds;
    return {compute_free_};
  }
  /// @copydoc compute
  timeline_event compute(double seconds, std::initializer_list<timeline_event> waits = {}) {
    return compute(seconds, std::span<const timeline_event>(waits.begin(), waits.size()));
  }

  /// The time both queues have finished everything enqueued so far. O(1).
  [[nodiscard]] double now() const noexcept { return std::max(copy_free_, compute_free_); }
  /// When the link finishes its last enqueued copy (an event a later compute can wait on).
  [[nodiscard]] timeline_event copies_done() const noexcept { return {copy_free_}; }
  /// When the compute queue finishes its last enqueued operation.
  [[nodiscard]] timeline_event compute_done() const noexcept { return {compute_free_}; }
  [[nodiscard]] const link_model& link() const noexcept { return link_; }
  [[nodiscard]] const timeline_stats& stats() const noexcept { return stats_; }

 private:
  static void check_event(const char* where, timeline_event e) {
    WISP_EXPECTS(std::isfinite(e.time) && e.time >= 0, where,
                 ": event time must be finite and >= 0, got ", e.time);
  }

  link_model link_;
  double copy_free_ = 0;
  double compute_free_ = 0;
  timeline_stats stats_;
};

}  // namespace wisp
