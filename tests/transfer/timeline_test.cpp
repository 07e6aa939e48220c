// SPDX-License-Identifier: Apache-2.0
// device_timeline: a schedule computed by hand, the link's arithmetic, double buffering, and bad
// arguments that leave the timeline unchanged.
#include "support/expect_error.hpp"

#include <wisp/transfer/timeline.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace {

using wisp::device_timeline;
using wisp::link_model;
using wisp::timeline_event;
using wisp::test::expect_error;

// 1000 B/s and 1 s per copy: every time below is a small integer, exact in binary.
constexpr link_model slow_link{.bytes_per_second = 1000, .latency_seconds = 1};

TEST(LinkModel, CopyCostsLatencyPlusBytesOverBandwidth) {
  EXPECT_EQ(slow_link.copy_seconds(0), 1.0);
  EXPECT_EQ(slow_link.copy_seconds(3000), 4.0);
  const link_model pcie{.bytes_per_second = 25e9, .latency_seconds = 10e-6};
  EXPECT_DOUBLE_EQ(pcie.copy_seconds(196'608), 10e-6 + 196'608 / 25e9);
}

TEST(DeviceTimeline, MatchesAHandComputedSchedule) {
  device_timeline t(slow_link);
  const timeline_event c1 = t.copy(1000);        // link [0, 2]
  const timeline_event c2 = t.copy(3000);        // link [2, 6]
  const timeline_event k1 = t.compute(5, {c1});  // waits for c1: compute [2, 7], stall 2
  const timeline_event c3 = t.copy(1000, k1);    // its slot is read by k1: link [7, 9]
  const timeline_event k2 = t.compute(1, {c2});  // c2 done at 6, queue free at 7: [7, 8]
  const timeline_event k3 = t.compute(2, {c3});  // waits for c3: [9, 11], stall 1
  EXPECT_EQ(c1.time, 2);
  EXPECT_EQ(c2.time, 6);
  EXPECT_EQ(k1.time, 7);
  EXPECT_EQ(c3.time, 9);
  EXPECT_EQ(k2.time, 8);
  EXPECT_EQ(k3.time, 11);
  EXPECT_EQ(t.now(), 11);
  EXPECT_EQ(t.copies_done().time, 9);
  EXPECT_EQ(t.compute_done().time, 11);
  const wisp::timeline_stats& s = t.stats();
  EXPECT_EQ(s.copies, 3u);
  EXPECT_EQ(s.copy_bytes, 5000u);
  EXPECT_EQ(s.copy_seconds, 8);
  EXPECT_EQ(s.computes, 3u);
  EXPECT_EQ(s.compute_seconds, 8);
  EXPECT_EQ(s.stall_seconds, 3);
}

TEST(DeviceTimeline, ComputeWithoutWaitsNeverStalls) {
  device_timeline t(slow_link);
  t.copy(10'000);  // the link is busy until 11, but nobody waits for it
  EXPECT_EQ(t.compute(3).time, 3);
  EXPECT_EQ(t.compute(3, {timeline_event{}}).time, 6);
  EXPECT_EQ(t.stats().stall_seconds, 0);
  EXPECT_EQ(t.now(), 11);  // now() covers the link too
}

// Two layers of one forward, each needing one copy of 1000 B (2 s) and 3 s of compute. Issuing
// layer 1's copy before layer 0's compute (double buffering) hides it behind that compute.
TEST(DeviceTimeline, IssuingTheNextLayersCopiesEarlyHidesThem) {
  // Each copy issued only once the previous layer's compute is done (one queue, no overlap).
  device_timeline serial(slow_link);
  const timeline_event k0 = serial.compute(3, {serial.copy(1000)});
  serial.compute(3, {serial.copy(1000, k0)});
  EXPECT_EQ(serial.now(), 2 + 3 + 2 + 3);

  device_timeline ahead(slow_link);
  const timeline_event l0 = ahead.copy(1000);
  const timeline_event l1 = ahead.copy(1000);  // issued a layer ahead: link [2, 4]
  ahead.compute(3, {l0});                      // [2, 5]
  ahead.compute(3, {l1});                      // [5, 8]: l1 arrived at 4
  EXPECT_EQ(ahead.now(), 8);
  EXPECT_EQ(ahead.stats().stall_seconds, 2);
}

// The modelled time scales with the link, not with how fast the host moved the bytes.
TEST(DeviceTimeline, ACopyBoundRunScalesWithTheBandwidth) {
  const auto run = [](double bandwidth) {
    device_timeline t({.bytes_per_second = bandwidth, .latency_seconds = 0});
    for (int layer = 0; layer < 8; ++layer)
      t.compute(1e-6, {t.copy(1u << 20)});
    return t.now();
  };
  // Copies run back to back on the link; each layer's 1 us compute waits for its own copy, so
  // the forward ends 1 us after the last copy.
  const double slow = run(5e9);
  const double fast = run(25e9);
  EXPECT_DOUBLE_EQ(slow, 8 * (1 << 20) / 5e9 + 1e-6);
  EXPECT_DOUBLE_EQ(fast, 8 * (1 << 20) / 25e9 + 1e-6);
  EXPECT_GT(slow / fast, 4.9);
}

TEST(DeviceTimeline, RejectsBadArgumentsAndStaysUnchanged) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  expect_error([] { device_timeline t({.bytes_per_second = 0}); }, "bytes_per_second", "got 0");
  expect_error([&] { device_timeline t({.bytes_per_second = inf}); }, "bytes_per_second");
  expect_error([] { device_timeline t({.latency_seconds = -1}); }, "latency_seconds", "got -1");
  expect_error([&] { device_timeline t({.latency_seconds = nan}); }, "latency_seconds");

  device_timeline t(slow_link);
  t.compute(1, {t.copy(1000)});
  expect_error([&] { t.copy(1, timeline_event{-1}); }, "device_timeline::copy", "got -1");
  expect_error([&] { t.compute(-2); }, "device_timeline::compute", "seconds", "got -2");
  expect_error([&] { t.compute(nan); }, "device_timeline::compute", "seconds");
  expect_error(
      [&] {
        t.compute(1, {timeline_event{2}, timeline_event{inf}});
      },
      "device_timeline::compute", "event time");
  EXPECT_EQ(t.now(), 3);
  EXPECT_EQ(t.stats().copies, 1u);
  EXPECT_EQ(t.stats().computes, 1u);
  EXPECT_EQ(t.stats().stall_seconds, 2);
}

}  // namespace
