// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Resizing the pager arms at drained barriers: forced cap changes (tests) and the online
/// controller of `pager+dynamic`.
///
/// The controller (`wisp::split_controller`) is fed, every burst, each pager call's experts
/// (`record_expert_call`: it measures their per-layer reuse distances the way the pager serves a
/// call, the call's experts protected from each other) and the KV block reuse distances of
/// `wisp::reuse_distance_counter`, and proposes a split at every `dynamic_burst`-th
/// barrier; the proposal is clamped by the dual-resize law's KV target
/// (`wisp::dual_resize_target`) and applied shrinking first through `plan_transition` /
/// `apply_resize`. A failed step leaves the previous split, in the engine and in the controller.
#pragma once

#include "index.hpp"
#include "residency.hpp"

#include <wisp/alloc/controller.hpp>
#include <wisp/alloc/cost_model.hpp>
#include <wisp/alloc/resize.hpp>
#include <wisp/alloc/split.hpp>
#include <wisp/pager/pager.hpp>
#include <wisp/pager/resize_layer_rows.hpp>
#include <wisp/reuse/reuse_distance.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

namespace wisp_engine {

/// The cost model's parameters: the modelled link's bandwidth.
[[nodiscard]] inline wisp::cost_params cost_params(const engine_options& opt) {
  wisp::cost_params p;
  p.bandwidth_bytes_per_second = opt.link.bytes_per_second;
  return p;
}

/// @brief The resizing state of one pager arm (tensor `l` is layer `l`'s). Not thread-safe.
template <class Policy>
class pager_resizer {
 public:
  pager_resizer(wisp::pager<Policy>& pager, const arm_context& ctx,
                const wisp::admission_floor& floor, const wisp::split& current)
      : pager_(&pager),
        dev_(&ctx.dev),
        opt_(&ctx.options),
        spec_(ctx.spec),
        budget_(ctx.budget),
        floor_(floor),
        current_(current) {}

  [[nodiscard]] const engine_options& options() const noexcept { return *opt_; }

  /// The controller starts at the current cap; one exact counter over KV blocks (keys =
  /// (request, block index), so a block keeps its key when the pool compacts it or a preempted
  /// session recomputes it).
  void start_controller(const std::vector<request>& requests) {
    ctl_.emplace(spec_, budget_, floor_, cost_params(*opt_), opt_->controller, current_.expert_cap);
    std::uint64_t keys = 0;
    for (const request& r : requests) {
      kv_key_base_.push_back(keys);
      keys += blocks_for_tokens(r.prompt.size() + idx(std::max(r.max_new_tokens, 0)),
                                spec_.block_tokens);
    }
    kv_reuse_.emplace(std::max<std::uint64_t>(keys, 1));
  }

  /// One pager call of layer `l` (its distinct experts), into the expert stream.
  void record_call(std::int32_t l, std::span<const std::int32_t> experts) {
    ctl_->record_expert_call(l, experts);
  }

  /// After each forward: every block its attention read, once, into the KV stream; every
  /// `dynamic_burst` forwards, close the burst and resize (see the file comment).
  void dynamic_barrier(barrier_context& ctx) {
    for (const session* s : ctx.batch.sessions) {
      const auto i = idx(s - ctx.sessions.data());
      const std::uint64_t blocks = blocks_for_tokens(idx(s->kv_len), spec_.block_tokens);
      for (std::uint64_t b = 0; b < blocks; ++b) {
        ctl_->record_kv(kv_reuse_->access(static_cast<std::uint32_t>(kv_key_base_[i] + b)));
      }
    }
    burst_peak_kv_ = std::max<std::uint64_t>(burst_peak_kv_, ctx.kv.used());
    if (ctx.forwards % opt_->dynamic_burst != 0) {
      return;
    }
    const wisp::controller_decision d = ctl_->end_burst();
    const std::uint64_t peak = std::max<std::uint64_t>(burst_peak_kv_, ctx.sched.kv_demand());
    burst_peak_kv_ = 0;
    const wisp::split law =
        wisp::dual_resize_target(spec_, budget_, floor_, peak, opt_->dynamic_headroom);
    const std::int32_t wanted = d.moves() ? d.next : current_.expert_cap;
    const std::int32_t target = std::min(wanted, law.expert_cap);
    if (target == current_.expert_cap) {
      return;
    }
    const wisp::resize_plan plan =
        wisp::plan_transition(spec_, budget_, current_, wisp::make_split(spec_, budget_, target));
    levers l{this, &ctx};
    const wisp::resize_outcome out = wisp::apply_resize(plan, l);
    resize_event ev;
    ev.forward = ctx.forwards;
    ev.from_cap = plan.from.expert_cap;
    ev.from_kv = plan.from.kv_blocks;
    ev.to_cap = plan.to.expert_cap;
    ev.to_kv = plan.to.kv_blocks;
    ev.by_controller = d.moves() && target == d.next;
    ev.applied = out.applied;
    current_ = out.current;
    if (out.applied) {
      ctl_->set_cap(target);
      ++ctx.result.resizes;
      ctx.result.controller_moves += ev.by_controller ? 1 : 0;
    } else {
      ++ctx.result.resize_failures;
    }
    check_split(ctx);  // the engine holds the split apply_resize reports
    ev.cap_after = pager_->capacity(0);
    ev.kv_after = ctx.kv.capacity();
    ctx.result.resize_log.push_back(ev);
  }

  /// A forced cap change: the KV pool keeps its blocks. @throws wisp::logic_error on a cap
  /// outside `[k, E]` or one that does not fit beside the KV blocks.
  void force(std::int32_t cap, barrier_context& ctx) {
    const wisp::split to = wisp::make_split(spec_, budget_, cap, current_.kv_blocks);
    if (resize_experts(cap)) {
      current_ = to;
      ++ctx.result.resizes;
      if (ctl_) {
        ctl_->set_cap(to.expert_cap);
      }
    } else {
      ++ctx.result.resize_failures;
    }
    check_split(ctx);
  }

 private:
  /// Sets every layer's cap (pager and tensor); strong: on failure every layer is as before.
  bool resize_experts(std::int32_t cap) {
    const std::int32_t old = pager_->capacity(0);  // every layer's (check_split)
    std::int32_t l = 0;
    try {
      for (; l < pager_->layers(); ++l) {
        resize_layer(l, cap);
      }
    } catch (...) {
      // Layer l is as before (resize_layer_rows' strong guarantee): undo the layers before it.
      for (std::int32_t u = l - 1; u >= 0; --u) {
        resize_layer(u, old);
      }
      return false;
    }
    return true;
  }
  /// One layer, all or nothing: its pager cap and tensor rows change together or not at all.
  void resize_layer(std::int32_t l, std::int32_t cap) {
    dev_->flush(l);       // pending bytes land before rows move or unmap
    pager_->end_call(l);  // drained: the last call's experts may move or go
    fault_injecting_rows rows{dev_->tensor(l), l, opt_->layer_fault};
    const wisp::resize_report rep = wisp::resize_layer_rows(*pager_, l, cap, rows);
    for (const wisp::slot_move& m : rep.moves) {
      dev_->row_moved(l, m.from, m.to);
    }
  }

  /// Layer `l`'s tensor as `resize_layer_rows` resizes it, with `engine_options::layer_fault`
  /// deciding whether a grow fails the way an exhausted device would.
  struct fault_injecting_rows {
    device::tensor_type& t;
    std::int32_t layer;
    const std::function<bool(std::int32_t, std::size_t)>& fault;
    [[nodiscard]] std::size_t resident_rows() const { return t.resident_rows(); }
    [[nodiscard]] std::size_t row_stride() const { return t.row_stride(); }
    [[nodiscard]] std::byte* row(std::size_t r) const { return t.row(r); }
    void resize_resident(std::size_t rows) {
      if (rows > t.resident_rows() && fault && fault(layer, rows)) {
        WISP_FAIL(wisp::out_of_memory, "injected fault growing layer ", layer, " to ", rows,
                  " rows");
      }
      t.resize_resident(rows);
    }
  };

  /// After every resize attempt: each layer's pager cap and tensor rows, and the KV pool, are
  /// those of the split in force. @throws wisp::logic_error naming the layer that differs.
  void check_split(const barrier_context& ctx) const {
    const std::int32_t cap = current_.expert_cap;
    for (std::int32_t l = 0; l < pager_->layers(); ++l) {
      const std::size_t rows = dev_->tensor(l).resident_rows();
      WISP_EXPECTS(pager_->capacity(l) == cap && rows == idx(cap), "layer ", l, " has pager cap ",
                   pager_->capacity(l), " and ", rows,
                   " resident rows but the split in force has cap ", cap);
    }
    WISP_EXPECTS(ctx.kv.capacity() == current_.kv_blocks, "the KV pool has ", ctx.kv.capacity(),
                 " blocks but the split in force has ", current_.kv_blocks);
    ctx.result.cap = cap;
  }

  struct levers {
    pager_resizer* r;
    barrier_context* ctx;
    bool resize_experts(std::int32_t cap) {
      if (r->opt_->lever_fault && r->opt_->lever_fault(wisp::pool::experts, cap)) {
        return false;
      }
      return r->resize_experts(cap);
    }
    bool resize_kv(std::uint64_t blocks) {
      if (r->opt_->lever_fault && r->opt_->lever_fault(wisp::pool::kv, blocks)) {
        return false;
      }
      return ctx->kv.resize(idx(blocks), [this](std::int32_t from, std::int32_t to) {
        ctx->sched.relocate(from, to);
      });
    }
  };
  static_assert(wisp::resize_levers<levers>);

  wisp::pager<Policy>* pager_;
  device* dev_;
  const engine_options* opt_;
  wisp::model_spec spec_;
  wisp::byte_size budget_;
  wisp::admission_floor floor_;
  wisp::split current_;                        // the split in force (check_split)
  std::optional<wisp::split_controller> ctl_;  // pager+dynamic only
  std::optional<wisp::reuse_distance_counter> kv_reuse_;
  std::vector<std::uint64_t> kv_key_base_;  // first KV key of each request
  std::uint64_t burst_peak_kv_ = 0;         // most KV blocks in use this burst
};

}  // namespace wisp_engine
