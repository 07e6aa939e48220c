// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The modelled device: expert memory (rows of `wisp::virtual_expert_tensor`), one
/// host-to-device link and one compute queue (`wisp::device_timeline`), joined per row by events.
///
/// - A **copy** of `n` expert rows costs `latency + n * expert_bytes / bandwidth` on the link
///   (`wisp::link_model`), whatever the host's `memcpy` speed: the link is modelled, not measured.
///   It starts no earlier than the link is free, the caller's event (e.g. the router that decided
///   it) and the end of every launch that read its destination rows (a copy never overwrites a
///   row that a kernel still reads).
/// - A **compute** op runs on the host (the outputs are the CPU's, byte for byte) and is charged
///   by `compute_charges`: with a device profile (`--device NAME|FILE`), by the profile's roofline,
///   the larger of its bytes over device memory bandwidth (a fused-MoE launch: over `moe_gbps`
///   when measured) and its FLOPs over the BF16 peak, plus one launch; the arm's planning costs
///   one host sync (the routing read back: one copy latency) when it needs the routing on the
///   host, and nothing else. Without a profile (`--device host`), by the thread CPU time the host
///   spent on it; in tests by a `compute_clock`. It starts when the compute queue is free and its
///   waits have happened. A launch waits only for the copies into the rows it reads.
/// - **Host experts** (`cpu-experts`, `cpu-moe-layers`, `pager+hybrid`): experts the host computes
/// from its masters
///   run on a host queue beside the device's: the hidden states of their tokens cross to the host
///   (`tokens x hidden x 2` bytes, one copy on an activation link with the link's figures), the
///   host computes (charged by the profile's host roofline, the larger of the experts' weight bytes
///   over host memory bandwidth and their FLOPs over `host_threads x host_thread_flops`; or its
///   measured CPU time), and the outputs cross back the same way. The activation link is its own
///   queue: a few KiB per layer are not held behind expert copies (a separate stream).
/// - The real bytes still move, so outputs stay real: a copy records its source and the `memcpy`
///   happens just before the first launch that reads the row (`materialize`), outside every
///   measured region, so its host time is never charged on top of the modelled link time.
/// - **Compressed paging** (`page_compressed`, the `pager+zip` arm): a copy moves the expert's
///   compressed bytes (`zip_masters::link_bytes`) and is then decoded on the device's decode
///   queue, in order, at a modelled rate (`decode_bytes_per_second` of BF16 written, one queue:
///   a decode kernel on its own stream, or a decompression engine); the row is ready when its
///   decode ends. The real decode (`zip_masters::decode`, on the host: it stands in for the
///   kernel) writes the row at `materialize`; its thread CPU time is measured and reported, never
///   charged.
/// - **Tiered paging** (`page_tiered`, the `tiered` arm): the copies of one launch are one layer
///   call of the compression-aware pools. Each says where the expert's chunks already are
///   (`row_copy::from`: C, S, E, or a miss); `wisp::schedule_layer` (the cache-affinity scheduler)
///   orders the call's SM and E-chunk reads on the link and its decodes on `L` decode threads.
///   The call starts once its planning is done and the previous call's decodes have ended; the
///   link then carries one copy per expert that reads anything (each paying the link's latency,
///   as every copy does; the latencies are paid before the first byte moves), its bytes the
///   schedule's reads. A row is ready when its expert's decodes end (recovery, SM + exponents ->
///   BF16, is free: on the device at memory speed) and no launch still reads the row. The real
///   decode writes the row at `materialize`, as for compressed paging.
#pragma once

#include "index.hpp"
#include "model.hpp"
#include "zip_masters.hpp"

#include <wisp/core/error.hpp>
#include <wisp/pager/hybrid.hpp>
#include <wisp/tiered/affinity_scheduler.hpp>
#include <wisp/transfer/device_profile.hpp>
#include <wisp/transfer/timeline.hpp>
#include <wisp/vmm/page_pool.hpp>
#include <wisp/vmm/posix_vmm.hpp>
#include <wisp/vmm/virtual_expert_tensor.hpp>

#include <time.h>  // clock_gettime (POSIX)

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

namespace wisp_engine {

/// What a compute op does (for a modelled `compute_clock`).
enum class compute_op : std::uint8_t {
  embed,      ///< token embeddings; units = rows
  attention,  ///< RMSNorm, QKV, RoPE, attention over the KV blocks and the router; units = rows
  plan,       ///< the residency arm's host-side planning of one layer; units = 1
  kernel,     ///< one fused-MoE launch; units = positions (token, j) computed
  combine,    ///< the ordered sum of a layer's positions and the residual; units = rows
  head,       ///< the LM head on each session's last row; units = rows
  host        ///< experts the host computes (on the host queue); units = positions
};

/// Seconds a compute op takes given its kind and units; empty = measure the host CPU time.
using compute_clock = std::function<double(compute_op, std::int64_t units)>;

/// @brief What one compute op reads and computes: its units for a `compute_clock`, its bytes and
/// FLOPs for a device profile's roofline, and the host syncs it waits for (the planning op).
struct op_work {
  std::int64_t units = 0;
  double bytes = 0;
  double flops = 0;
  std::int32_t syncs = 0;
};

/// @brief How the device charges compute (see the file comment).
struct compute_charges {
  std::optional<wisp::device_profile> profile;  ///< the roofline; nullopt: the host's CPU time
  compute_clock clock;                          ///< tests: overrides both
  bool host_measured = false;                   ///< host experts: CPU time even with a profile
  double host_thread_flops = 64e9;              ///< the profile's host: FLOP/s of one thread
};

/// Host-to-device copy: master experts `[expert, expert + count)` of the current layer into rows
/// `[row, row + count)` of tensor `tensor` (one copy, one link latency). `prefetch`: a predicted
/// expert, not one a call asked for (counted apart).
struct row_copy {
  std::int32_t tensor = 0;
  std::int32_t row = 0;
  std::int32_t expert = 0;
  std::int32_t count = 1;
  bool prefetch = false;
  /// Tiered paging: where the expert's chunks already are (C, S, E or a miss; see the file
  /// comment).
  wisp::residency from = wisp::residency::miss;
};

/// @brief Tiered paging's model of a call (`device::page_tiered`): the schedule's durations
/// (u = one SM chunk on the link, v = one E-chunk on the link, c = one E-chunk's decode on one
/// thread, recovery 0, L threads, K E-chunks) and the bytes each read moves.
struct tiered_paging {
  wisp::tier_costs schedule;
  std::uint32_t tensors = 3;  ///< n: tensors per expert
  double sm_chunk_bytes = 0;  ///< one tensor's SM chunk
  double e_chunk_bytes = 0;   ///< one E-chunk
};

/// @brief The modelled device of one arm's run. Not thread-safe.
class device {
 public:
  using tensor_type = wisp::virtual_expert_tensor<wisp::posix_vmm>;

  /// @throws wisp::logic_error if `link` or the profile is invalid.
  device(const model_weights& w, const wisp::link_model& link, compute_charges charges = {})
      : w_(&w),
        timeline_(link),
        host_(link),
        charges_(std::move(charges)),
        pool_(wisp::posix_vmm{wisp::posix_vmm_options{.granule = granule_for(w.cfg)}}) {
    if (charges_.profile) {
      charges_.profile->validate();
    }
  }

  // ------------------------------------------------------------------ memory
  /// A new tensor of up to `max_rows` rows (default `E`) with `resident` rows mapped.
  /// @returns its index.
  std::int32_t add_tensor(std::size_t resident, std::size_t max_rows = 0) {
    const std::size_t rows = max_rows > 0 ? max_rows : idx(w_->cfg.experts);
    tensors_.push_back(std::make_unique<tensor_type>(
        pool_, wisp::expert_tensor_shape{rows, w_->cfg.expert_bytes()}));
    tensors_.back()->resize_resident(resident);
    rows_.emplace_back(rows);
    return count(tensors_) - 1;
  }
  [[nodiscard]] tensor_type& tensor(std::int32_t t) { return *tensors_[idx(t)]; }
  [[nodiscard]] std::size_t tensors() const noexcept { return tensors_.size(); }

  /// From now on, every copy moves compressed experts and decodes them (see the file comment).
  /// `masters` must outlive the device. @throws wisp::logic_error on a rate that is not > 0.
  void page_compressed(const zip_masters& masters, double decode_bytes_per_second) {
    zip_ = &masters;
    decoder_ = wisp::device_timeline(
        wisp::link_model{.bytes_per_second = decode_bytes_per_second, .latency_seconds = 0});
  }

  /// From now on, a launch's copies are one scheduled call of the tiered pools (see the file
  /// comment). `masters` must outlive the device.
  /// @throws wisp::logic_error on invalid schedule parameters.
  void page_tiered(const zip_masters& masters, const tiered_paging& paging) {
    paging.schedule.validate();
    zip_ = &masters;
    tiered_ = paging;
  }

  /// Untimed copy (initial residency, warm-up): the bytes land now and cost no link time.
  void fill(std::int32_t layer, const row_copy& c) {
    place(layer, c);
    for (std::int32_t i = 0; i < c.count; ++i) {
      materialize(c.tensor, c.row + i);
    }
  }
  /// A device-side copy that costs nothing (a recovered expert kept in another row): the rows
  /// hold the experts from now; their bytes are written at `materialize`, outside every measured
  /// region.
  void place(std::int32_t layer, const row_copy& c) {
    for (std::int32_t i = 0; i < c.count; ++i) {
      row_state& r = rows_[idx(c.tensor)][idx(c.row + i)];
      r.layer = layer;
      r.expert = c.expert + i;
      r.timed = false;
    }
  }

  /// A timed copy on the link, then its decode when paging compressed experts (see the file
  /// comment). @returns when the rows are ready.
  wisp::timeline_event copy(std::int32_t layer, const row_copy& c, wisp::timeline_event after) {
    auto& rows = rows_[idx(c.tensor)];
    std::uint64_t bytes = 0;
    for (std::int32_t i = 0; i < c.count; ++i) {
      after.time = std::max(after.time, rows[idx(c.row + i)].free.time);
      bytes += zip_ != nullptr ? zip_->link_bytes(layer, c.expert + i) : w_->cfg.expert_bytes();
    }
    wisp::timeline_event done = timeline_.copy(bytes, after);
    if (zip_ != nullptr) {
      done = decoder_.copy(idx(c.count) * w_->cfg.expert_bytes(), done);
    }
    for (std::int32_t i = 0; i < c.count; ++i) {
      row_state& r = rows[idx(c.row + i)];
      r.ready = done;
      r.layer = layer;
      r.expert = c.expert + i;
      r.timed = true;
    }
    (c.prefetch ? prefetch_copies_ : expert_copies_) += idx(c.count);
    return done;
  }

  /// Issues a launch's copies after `after`: each by `copy`, or under tiered paging as one
  /// scheduled call (see the file comment).
  /// @throws wisp::logic_error under tiered paging on a copy of several rows or of an F expert.
  void copy_all(std::int32_t layer, std::span<const row_copy> copies, wisp::timeline_event after) {
    if (!tiered_ || copies.empty()) {
      for (const row_copy& c : copies) {
        (void)copy(layer, c, after);
      }
      return;
    }
    call_.clear();
    for (const row_copy& c : copies) {
      WISP_EXPECTS(c.count == 1 && c.from != wisp::residency::full, "tiered paging copies one ",
                   "non-F expert per row_copy, got ", c.count, " rows of expert ", c.expert);
      call_.push_back({.expert = c.expert, .where = c.from, .tensors = tiered_->tensors});
    }
    const wisp::affinity_schedule s = wisp::schedule_layer(call_, tiered_->schedule);
    done_.assign(copies.size(), 0.0);
    sm_reads_.assign(copies.size(), 0);
    e_reads_.assign(copies.size(), 0);
    double decode_end = 0;
    for (const wisp::scheduled_op& op : s.ops) {
      const auto x = idx(op.expert);
      done_[x] = std::max(done_[x], op.finish);
      sm_reads_[x] += op.kind == wisp::op_kind::sm_read ? 1 : 0;
      e_reads_[x] += op.kind == wisp::op_kind::e_read ? 1 : 0;
      if (op.kind == wisp::op_kind::decode) {
        decode_end = std::max(decode_end, op.finish);
        scheduled_decode_seconds_ += op.finish - op.start;
      }
    }
    const double start = std::max(after.time, decode_free_);  // the call's time 0
    double base = start;
    if (std::any_of(copies.begin(), copies.end(),
                    [](const row_copy& c) { return c.from != wisp::residency::compressed; })) {
      // One copy per reading expert, every latency paid before the first byte moves: the reads
      // then run back to back as the schedule has them.
      const double link_start = std::max(start, timeline_.copies_done().time);
      base = link_start;
      for (std::size_t x = 0; x < copies.size(); ++x) {
        if (copies[x].from != wisp::residency::compressed) {
          (void)timeline_.copy(
              static_cast<std::uint64_t>(std::llround(sm_reads_[x] * tiered_->sm_chunk_bytes +
                                                      e_reads_[x] * tiered_->e_chunk_bytes)),
              {link_start});
          base += timeline_.link().latency_seconds;
          ++expert_copies_;
        }
      }
    }
    decode_free_ = base + decode_end;
    auto& rows = rows_[idx(copies.front().tensor)];
    for (std::size_t x = 0; x < copies.size(); ++x) {
      row_state& r = rows[idx(copies[x].row)];
      r.ready.time = std::max(base + done_[x], r.free.time);
      r.layer = layer;
      r.expert = copies[x].expert;
      r.timed = true;
    }
  }

  /// When the last copy into row `row` of tensor `t` lands.
  [[nodiscard]] wisp::timeline_event ready(std::int32_t t, std::int32_t row) const {
    return rows_[idx(t)][idx(row)].ready;
  }
  /// Performs the pending real copy (or decode) into the row, if any (outside measured
  /// regions).
  void materialize(std::int32_t t, std::int32_t row) {
    row_state& r = rows_[idx(t)][idx(row)];
    if (r.layer < 0) {
      return;
    }
    std::byte* dst = tensor(t).row(idx(row));
    if (zip_ != nullptr) {
      const double t0 = thread_seconds();
      zip_->decode(r.layer, r.expert, dst);
      if (r.timed) {
        host_decode_seconds_ += thread_seconds() - t0;
        host_decoded_bytes_ += w_->cfg.expert_bytes();
      }
    } else {
      std::memcpy(dst, w_->master(r.layer, r.expert), w_->cfg.expert_bytes());
    }
    r.layer = -1;
  }
  /// Materializes every pending copy of tensor `t` (before it is resized or its rows move).
  void flush(std::int32_t t) {
    for (std::size_t r = 0; r < rows_[idx(t)].size(); ++r) {
      materialize(t, static_cast<std::int32_t>(r));
    }
  }
  /// A launch that ends at `done` read the row: a later copy into it waits for `done`.
  void read(std::int32_t t, std::int32_t row, wisp::timeline_event done) {
    row_state& r = rows_[idx(t)][idx(row)];
    r.free.time = std::max(r.free.time, done.time);
  }
  /// A device-side row move (a resize at a drained barrier, after `flush`) moved the bytes of
  /// row `from` to row `to`: its events follow them.
  void row_moved(std::int32_t t, std::int32_t from, std::int32_t to) {
    auto& rows = rows_[idx(t)];
    const row_state src = rows[idx(from)];
    row_state& dst = rows[idx(to)];
    dst.ready = src.ready;
    dst.free.time = std::max(dst.free.time, src.free.time);
  }

  // ------------------------------------------------------------------ compute
  /// Runs `f` (which returns the op's `op_work`) as a compute op that starts after `waits`,
  /// charged as the file comment says. @returns when it ends.
  template <class F>
  wisp::timeline_event compute(compute_op op, F&& f,
                               std::span<const wisp::timeline_event> waits = {}) {
    const double seconds = charge(op, f, !charges_.profile);
    return timeline_.compute(seconds, waits);
  }

  /// Runs `f` (which returns the `op_work` of the experts it computes) on the host queue: the
  /// hidden states (`activation_bytes`) cross to the host no earlier than `after`, the host
  /// computes, the outputs cross back. @returns when they are on the device.
  template <class F>
  wisp::timeline_event host_compute(F&& f, std::uint64_t activation_bytes,
                                    wisp::timeline_event after) {
    const double seconds = charge(compute_op::host, f, charges_.host_measured || !charges_.profile);
    const wisp::timeline_event in = host_.copy(activation_bytes, after);
    const wisp::timeline_event done = host_.compute(seconds, {in});
    return host_.copy(activation_bytes, done);
  }

  /// Host CPU time `f` took, or 0 when compute is modelled (a profile or a clock): host work that
  /// runs beside the device's queues, such as a prefetch decision while the layer's kernels run.
  template <class F>
  double host_seconds(F&& f) {
    const bool measured = !charges_.clock && !charges_.profile;
    const double t0 = measured ? thread_seconds() : 0;
    f();
    return measured ? thread_seconds() - t0 : 0;
  }

  /// @brief The times the hybrid miss policy compares for a call of `tokens` rows, as this device
  /// charges them: a copy of one expert on the link; the host's roofline for one expert and one
  /// position (a clock's host cost per position; measured: the mean CPU time per position so
  /// far); the hidden states of `tokens` rows crossing both ways.
  [[nodiscard]] wisp::hybrid_cost_model hybrid_costs(std::int32_t tokens) const {
    const auto bytes = real(w_->cfg.expert_bytes());
    const wisp::link_model& link = timeline_.link();
    const double call = 2 * link.copy_seconds(activation_bytes(tokens));
    const double copy = link.copy_seconds(w_->cfg.expert_bytes());
    if (charges_.clock) {
      return {copy, 0, charges_.clock(compute_op::host, 1), call};
    }
    if (charges_.profile && !charges_.host_measured) {
      const wisp::device_profile& p = *charges_.profile;
      return wisp::bf16_hybrid_costs(
          copy, bytes,
          {.memory_bytes_per_second = p.host_memory_gbps * 1e9,
           .flops_per_second = p.host_threads * charges_.host_thread_flops},
          call);
    }
    return {copy, 0, measured_positions_ > 0 ? measured_seconds_ / real(measured_positions_) : 0,
            call};
  }
  /// Bytes of `tokens` rows of hidden states in BF16 (what crosses to the host and back).
  [[nodiscard]] std::uint64_t activation_bytes(std::int32_t tokens) const noexcept {
    return std::uint64_t{2} * idx(tokens) * idx(w_->cfg.hidden);
  }

  /// When the compute queue is free (the time the next compute op would start at the earliest).
  [[nodiscard]] double compute_free() const noexcept { return timeline_.compute_done().time; }
  [[nodiscard]] const wisp::device_timeline& timeline() const noexcept { return timeline_; }
  /// The host queue (compute) and the activation link (copies) of host experts.
  [[nodiscard]] const wisp::device_timeline& host_timeline() const noexcept { return host_; }
  /// Compressed and tiered paging: modelled decode time, summed over the decode threads.
  [[nodiscard]] double decode_seconds() const noexcept {
    return decoder_.stats().copy_seconds + scheduled_decode_seconds_;
  }
  /// Compressed paging: thread CPU time of the real decodes on the host of the timed copies so
  /// far (the warm-up's are not counted).
  [[nodiscard]] double host_decode_seconds() const noexcept { return host_decode_seconds_; }
  /// Compressed paging: BF16 bytes those decodes wrote.
  [[nodiscard]] std::uint64_t host_decoded_bytes() const noexcept { return host_decoded_bytes_; }
  /// Expert rows copied over the link so far because a call or a known schedule needed them.
  [[nodiscard]] std::uint64_t expert_copies() const noexcept { return expert_copies_; }
  /// Expert rows copied over the link so far as predictions (`row_copy::prefetch`).
  [[nodiscard]] std::uint64_t prefetch_copies() const noexcept { return prefetch_copies_; }

 private:
  struct row_state {
    wisp::timeline_event ready{};  // the last copy into the row lands
    wisp::timeline_event free{};   // the last launch that read the row ends
    std::int32_t layer = -1;       // the expert whose bytes are still to land (-1: none)
    std::int32_t expert = 0;
    bool timed = false;  // the bytes came with a timed copy (not the warm-up)
  };
  /// Physical granule of the expert rows: one expert rounded up to 64 KiB (a memfd each: a
  /// smaller granule would open thousands of them for a large model).
  static std::size_t granule_for(const model_config& c) noexcept {
    constexpr std::size_t unit = std::size_t{64} << 10;
    return (c.expert_bytes() + unit - 1) / unit * unit;
  }
  /// Seconds of the op `f` runs: the clock's, the host's CPU time (`measure`), or the roofline of
  /// the profile (the device's, or the host's for `compute_op::host`).
  template <class F>
  double charge(compute_op op, F& f, bool measure) {
    if (charges_.clock) {
      return charges_.clock(op, f().units);
    }
    if (measure) {
      const double t0 = thread_seconds();
      const op_work w = f();
      const double seconds = thread_seconds() - t0;
      if (op == compute_op::kernel || op == compute_op::host) {
        measured_seconds_ += seconds;
        measured_positions_ += w.units;
      }
      return seconds;
    }
    const op_work w = f();
    const wisp::device_profile& p = *charges_.profile;
    switch (op) {
      case compute_op::plan:
        return w.syncs * p.copy_latency_us * 1e-6;
      case compute_op::kernel:
        return p.moe_seconds(w.bytes, w.flops);
      case compute_op::host:
        return std::max(w.bytes / (p.host_memory_gbps * 1e9),
                        w.flops / (p.host_threads * charges_.host_thread_flops));
      default:
        return p.device_seconds(w.bytes, w.flops);
    }
  }
  /// CPU time of this thread: time the OS gives other processes (a busy machine) is not counted.
  static double thread_seconds() noexcept {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return real(ts.tv_sec) + real(ts.tv_nsec) * 1e-9;
  }

  const model_weights* w_;
  wisp::device_timeline timeline_;
  wisp::device_timeline host_;  // host experts: the activation link and the host queue
  compute_charges charges_;
  double measured_seconds_ = 0;          // measured CPU time of MoE positions so far
  std::int64_t measured_positions_ = 0;  // ...and how many positions
  wisp::page_pool<wisp::posix_vmm> pool_;
  std::vector<std::unique_ptr<tensor_type>> tensors_;
  std::vector<std::vector<row_state>> rows_;  // per tensor, per row
  std::uint64_t expert_copies_ = 0;
  std::uint64_t prefetch_copies_ = 0;
  const zip_masters* zip_ = nullptr;  // compressed paging
  wisp::device_timeline decoder_;     // its decode queue: "bytes" are BF16 bytes decoded
  double host_decode_seconds_ = 0;
  std::uint64_t host_decoded_bytes_ = 0;
  std::optional<tiered_paging> tiered_;   // tiered paging
  double decode_free_ = 0;                // when its last call's decodes end
  double scheduled_decode_seconds_ = 0;   // its decode threads' busy time
  std::vector<wisp::layer_expert> call_;  // scratch of copy_all
  std::vector<double> done_;
  std::vector<std::uint32_t> sm_reads_, e_reads_;
};

}  // namespace wisp_engine
