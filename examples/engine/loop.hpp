// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The serving loop: the scheduler's batches, one forward each, with every layer's MoE run
/// through a residency arm's launches on the modelled device.
///
/// Per layer, on the device's timeline (each compute op charged as device.hpp says):
/// 1. attention and the router;
/// 2. the arm's `layer` call (its host-side planning: the copies cannot be issued before it; with
///    a device profile, one host sync when the arm needs the routing on the host);
/// 3. per launch, in order: a host launch goes to the host queue (the hidden states out, the
///    host's experts, the outputs back); a device launch issues its copies on the link (after
///    every earlier launch that read their rows), then runs in two parts: the experts whose rows
///    are already in place first, then the ones still being copied, so resident experts compute
///    while misses are on the link; each part waits only for the copies into the rows it reads;
/// 4. the arm's `ahead` copies of the next layer, no earlier than this layer's planning plus the
///    host time `ahead` took (they overlap the rest of this layer wherever their rows are free);
/// 5. the ordered combine of the layer's positions, once the host's outputs are back.
///
/// TTFT, TPOT and tokens/s come from this timeline. The warm-up replay runs the same calls with
/// untimed copies and no compute, so an arm starts its evaluation in the state the warm-up left it.
#pragma once

#include "device.hpp"
#include "forward.hpp"
#include "index.hpp"
#include "options.hpp"
#include "residency.hpp"
#include "scheduler.hpp"

#include <wisp/core/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace wisp_engine {

/// @brief Serves `requests` with one arm on one device. Not thread-safe.
class serving_loop {
 public:
  /// `trace`: route by its ids (null: the model's router); `record`: log every forward's routing.
  serving_loop(const model_weights& w, const engine_options& opt, device& dev, residency& arm,
               const wisp::routing_trace* trace, warmup_log* record = nullptr)
      : w_(w), opt_(opt), dev_(dev), arm_(arm), dense_(w, trace), record_(record) {}

  /// Replays the warm-up's routing through the arm (copies untimed, no compute).
  void replay(const warmup_log& log) {
    const std::int32_t K = w_.cfg.top_k;
    for (const warmup_log::forward& f : log.forwards) {
      arm_.begin_forward(f.row_positions, true);
      for (std::int32_t l = 0; l < w_.cfg.layers; ++l) {
        fill(l, arm_.ahead(l, {}));
        for (const moe_launch& launch : arm_.layer(l, f.layer(l, K), f.tokens())) {
          fill(l, launch.copies);
        }
      }
    }
  }

  /// Serves every request with `kv_blocks` KV blocks; fills `res` (times from the timeline).
  void serve(const std::vector<request>& requests, std::uint64_t kv_blocks, arm_result& res) {
    kv_block_pool kv(kv_blocks, idx(w_.cfg.block_tokens) * w_.cfg.kv_floats_per_token());
    scheduler sched(kv, w_.cfg.block_tokens, opt_.max_running);
    std::vector<session> sessions(requests.size());
    for (std::size_t i = 0; i < requests.size(); ++i) {
      sessions[i].req = requests[i];
      if (!sched.submit(sessions[i])) {
        res.rejected.push_back(sessions[i].reject_reason);
      }
    }
    double prefill_s = 0, decode_s = 0;
    std::int32_t forwards = 0;
    while (!sched.idle()) {
      batch_plan plan = sched.next();
      if (plan.sessions.empty()) {
        break;  // nothing admissible (cannot happen: rejected sessions never queue)
      }
      const double start = dev_.compute_free();
      const std::int32_t rows = forward(plan, kv);
      const double end = dev_.compute_free();
      (plan.prefill ? prefill_s : decode_s) += end - start;
      (plan.prefill ? res.prefill_tokens : res.decode_tokens) += idx(rows);
      for (session* s : plan.sessions) {
        if (s->t_first < 0) {
          s->t_first = end;
        }
        if (s->generated >= s->req.max_new_tokens) {
          sched.finish(*s, end);
        }
      }
      ++forwards;
      barrier_context ctx{forwards, plan, sessions, kv, sched, res};
      arm_.between_forwards(ctx);
      if (opt_.progress && forwards % 32 == 0) {
        opt_.progress(res.name + ": forward " + std::to_string(forwards) + ", " +
                      std::to_string(sched.running()) + " running, " +
                      std::to_string(sched.waiting()) + " waiting");
      }
    }
    res.prefill_tok_s = prefill_s > 0 ? real(res.prefill_tokens) / prefill_s : 0;
    res.decode_tok_s = decode_s > 0 ? real(res.decode_tokens) / decode_s : 0;
    res.seconds = dev_.timeline().now();
    res.stall_seconds = dev_.timeline().stats().stall_seconds;
    res.bytes_moved = dev_.timeline().stats().copy_bytes;
    res.expert_copies = dev_.expert_copies();
    res.prefetch_copies = dev_.prefetch_copies();
    res.raw_bytes = (res.expert_copies + res.prefetch_copies) * w_.cfg.expert_bytes();
    res.decode_seconds = dev_.decode_seconds();
    res.host_decode_seconds = dev_.host_decode_seconds();
    res.host_decoded_bytes = dev_.host_decoded_bytes();
    res.expert_accesses = accesses_;
    res.host_experts = host_experts_;
    res.host_positions = host_positions_;
    res.host_seconds = dev_.host_timeline().stats().compute_seconds;
    res.hit_rate =
        accesses_ > 0
            ? 1.0 - std::min(1.0, real(res.expert_copies + host_experts_) / real(accesses_))
            : 0.0;
    res.preemptions = sched.preemptions();
    res.kv_blocks = kv.capacity();
    summarize(sessions, res);
    arm_.finish(res);
  }

 private:
  /// One forward of `plan` on the timeline. @returns the rows computed.
  std::int32_t forward(const batch_plan& plan, kv_block_pool& kv) {
    dense_.begin(plan, kv);
    const std::int32_t T = dense_.tokens();
    const std::int32_t K = w_.cfg.top_k;
    arm_.begin_forward(dense_.row_positions(), false);
    const double start = dev_.compute_free();
    issue(0, arm_.ahead(0, {start, start}), {start});  // issued as the forward starts
    dev_.compute(compute_op::embed, [&] {
      dense_.embed();
      return dense_.embed_work();
    });
    if (record_ != nullptr) {
      const std::span<const std::uint32_t> positions = dense_.row_positions();
      record_->forwards.push_back({{positions.begin(), positions.end()}, {}});
    }
    for (std::int32_t l = 0; l < w_.cfg.layers; ++l) {
      dev_.compute(compute_op::attention, [&] {
        dense_.attention_and_route(l);
        return dense_.attention_work();
      });
      const std::span<const std::int32_t> ids = dense_.ids();
      if (record_ != nullptr) {
        auto& r = record_->forwards.back().ids;
        r.insert(r.end(), ids.begin(), ids.end());
      }
      std::span<const moe_launch> launches;
      const wisp::timeline_event planned = dev_.compute(compute_op::plan, [&] {
        launches = arm_.layer(l, ids, T);
        return op_work{.units = 1, .syncs = arm_.host_sync(l) ? 1 : 0};
      });
      count_accesses(ids);
      std::int64_t positions = 0;
      wisp::timeline_event host_done{};
      for (const moe_launch& launch : launches) {
        if (launch.host) {
          WISP_EXPECTS(launch.copies.empty(), "a host launch of layer ", l, " has copies");
          host_done.time = std::max(host_done.time, run_host(l, launch, planned, positions).time);
          continue;
        }
        // Copies are issued after every earlier launch, so a copy into a row an earlier launch
        // reads waits for it; copies into other rows start as soon as the link is free.
        issue(l, launch.copies, planned);
        const double now = dev_.compute_free();  // rows in place by now: that part goes first
        positions += run(launch, now, true) + run(launch, now, false);
      }
      if (l + 1 < w_.cfg.layers) {
        // Issued during layer l, a layer ahead: the link is free from the later of its last copy
        // and this layer's planning until this layer's kernels end.
        // The host decides them beside the device's queues: they go out that much later.
        const link_window window{std::max(dev_.timeline().copies_done().time, planned.time),
                                 dev_.compute_free()};
        std::span<const row_copy> ahead;
        const double decided =
            dev_.host_seconds([&] { ahead = arm_.ahead(l + 1, window); }) + planned.time;
        issue(l + 1, ahead, {decided});
      }
      WISP_EXPECTS(positions == std::int64_t{T} * K, "the launches of layer ", l, " computed ",
                   positions, " of ", T * K,
                   " positions: each routed (token, j) must be visible in exactly one launch");
      const wisp::timeline_event combine_waits[] = {host_done};
      dev_.compute(
          compute_op::combine,
          [&] {
            dense_.combine();
            return dense_.combine_work();
          },
          combine_waits);
    }
    if (record_ != nullptr) {
      record_tokens(T, K);
    }
    dev_.compute(compute_op::head, [&] {
      (void)dense_.head();
      return dense_.head_work();
    });
    return T;
  }

  void issue(std::int32_t layer, std::span<const row_copy> copies, wisp::timeline_event after) {
    dev_.copy_all(layer, copies, after);
  }
  void fill(std::int32_t layer, std::span<const row_copy> copies) {
    for (const row_copy& c : copies) {
      dev_.fill(layer, c);
    }
  }

  /// The part of `launch` whose rows are in place at `now` (`ready`) or still on the link.
  /// @returns the positions it computed.
  std::int64_t run(const moe_launch& launch, double now, bool ready) {
    part_.assign(launch.expert_map.size(), -1);
    double wait = 0;
    bool any = false;
    for (std::size_t e = 0; e < launch.expert_map.size(); ++e) {
      const std::int32_t row = launch.expert_map[e];
      if (row < 0) {
        continue;
      }
      const double at = dev_.ready(launch.tensor, row).time;
      if ((at <= now) == ready) {
        part_[e] = row;
        wait = std::max(wait, at);
        any = true;
        dev_.materialize(launch.tensor, row);
      }
    }
    if (!any) {
      return 0;
    }
    std::int64_t written = 0;
    const wisp::expert_tensor_view view = dev_.tensor(launch.tensor).view();
    const wisp::timeline_event waits[] = {{wait}};
    const std::int64_t experts = routed_experts(part_);
    const wisp::timeline_event done = dev_.compute(
        compute_op::kernel,
        [&] {
          written = dense_.expert_outputs(view, part_);
          return dense_.moe_work(experts, written);
        },
        waits);
    for (const std::int32_t row : part_) {
      if (row >= 0) {
        dev_.read(launch.tensor, row, done);
      }
    }
    return written;
  }

  /// A host launch of layer `l` after `planned`: its experts computed from the masters on the
  /// host queue, the hidden states of the rows it touches crossing both ways. Adds the positions
  /// it computed to `positions`. @returns when its outputs are back on the device.
  wisp::timeline_event run_host(std::int32_t l, const moe_launch& launch,
                                wisp::timeline_event planned, std::int64_t& positions) {
    const std::int64_t experts = routed_experts(launch.expert_map);
    if (experts == 0) {
      return {};
    }
    const std::int32_t K = w_.cfg.top_k;
    std::int32_t rows = 0;  // rows with a position on the host
    const std::span<const std::int32_t> ids = dense_.ids();
    for (std::size_t t = 0; t < ids.size(); t += idx(K)) {
      rows += std::ranges::any_of(ids.subspan(t, idx(K)),
                                  [&](std::int32_t e) { return at(launch.expert_map, e) >= 0; })
                  ? 1
                  : 0;
    }
    const wisp::expert_tensor_view masters{const_cast<std::byte*>(w_.master(l, 0)),
                                           idx(w_.cfg.experts), w_.cfg.expert_bytes()};
    std::int64_t written = 0;
    const wisp::timeline_event done = dev_.host_compute(
        [&] {
          written = dense_.expert_outputs(masters, launch.expert_map);
          return dense_.moe_work(experts, written);
        },
        dev_.activation_bytes(rows), planned);
    host_experts_ += idx(experts);
    host_positions_ += idx(written);
    positions += written;
    return done;
  }

  /// Distinct experts of the layer's routing that `map` shows (what a launch reads).
  [[nodiscard]] std::int64_t routed_experts(std::span<const std::int32_t> map) {
    seen_.assign(idx(w_.cfg.experts), 0);
    std::int64_t n = 0;
    for (const std::int32_t e : dense_.ids()) {
      if (at(map, e) >= 0 && at(seen_, e) == 0) {
        at(seen_, e) = 1;
        ++n;
      }
    }
    return n;
  }

  /// Distinct experts of a layer call, for the hit rate.
  void count_accesses(std::span<const std::int32_t> ids) {
    seen_.assign(idx(w_.cfg.experts), 0);
    for (const std::int32_t e : ids) {
      auto& seen = at(seen_, e);
      accesses_ += seen == 0 ? 1 : 0;
      seen = 1;
    }
  }

  /// Appends the forward's rows as per-token steps of the warm-up log's trace.
  void record_tokens(std::int32_t T, std::int32_t K) {
    const auto& f = record_->forwards.back();
    const std::int32_t L = w_.cfg.layers;
    step_.resize(idx(L * K));
    for (std::int32_t r = 0; r < T; ++r) {
      for (std::int32_t l = 0; l < L; ++l) {
        const auto src = f.layer(l, K).subspan(idx(r * K), idx(K));
        std::copy(src.begin(), src.end(), step_.begin() + l * K);
      }
      record_->tokens.append_step(step_);
    }
  }

  /// Per-session outputs, TTFT and TPOT, and the digest over every output.
  static void summarize(const std::vector<session>& sessions, arm_result& res) {
    double ttft = 0, tpot = 0;
    std::int32_t n = 0, m = 0;
    std::uint64_t digest = 1469598103934665603ull;
    for (const session& s : sessions) {
      const auto first =
          static_cast<std::ptrdiff_t>(std::min(s.req.prompt.size(), s.tokens.size()));
      std::vector<std::int32_t> out(s.tokens.begin() + first, s.tokens.end());
      digest = fnv(digest, out.data(), out.size() * sizeof(std::int32_t));
      digest = fnv(digest, &s.logits_hash, sizeof s.logits_hash);
      res.outputs.push_back(std::move(out));
      res.logits_hashes.push_back(s.logits_hash);
      if (s.state == session_state::finished) {
        ttft += s.t_first;
        ++n;
        if (s.generated > 1) {
          tpot += (s.t_done - s.t_first) / (s.generated - 1);
          ++m;
        }
      }
    }
    res.ttft_s = n > 0 ? ttft / n : 0;
    res.tpot_s = m > 0 ? tpot / m : 0;
    res.output_digest = digest;
  }

  const model_weights& w_;
  const engine_options& opt_;
  device& dev_;
  residency& arm_;
  dense_forward dense_;
  warmup_log* record_;
  std::uint64_t accesses_ = 0;
  std::uint64_t host_experts_ = 0, host_positions_ = 0;
  std::vector<std::int32_t> part_;  // one launch part's expert map
  std::vector<std::uint8_t> seen_;
  std::vector<std::int32_t> step_;
};

}  // namespace wisp_engine
