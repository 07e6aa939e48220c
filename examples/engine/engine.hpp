// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The example serving engine: the model of model.hpp served by the scheduler of
/// scheduler.hpp, with expert memory managed by wisp, under one emulated device budget.
///
/// Arms (all at the same budget, same requests, same routing):
/// - `full`: every expert resident (infeasible when they and the KV floor do not fit);
/// - `static-offload`: one layer's expert set of staging; every forward copies each layer's whole
///   expert set before its MoE (vLLM's `--cpu-offload-gb`);
/// - `pager`: `wisp::pager<Policy>` with a per-layer cap (given, or the largest that leaves the KV
///   floor), copy plans applied through the copy engine, token-group splitting;
/// - `pager+plan`: the cap and KV blocks of `wisp::alloc::configure` (offline, from the routing
///   trace's reuse profile);
/// - `pager+dynamic`: starts like `pager+plan`, then the online controller
///   (`wisp::alloc::split_controller`, fed each burst with the exact per-layer expert reuse
///   distances and the KV block reuse distances of `wisp::reuse::reuse_distance_counter`) proposes
///   a split at every drained barrier (between forwards); the proposal is clamped by the
///   dual-resize law's KV target (`wisp::alloc::dual_resize_target`) and applied shrinking first
///   through `plan_transition` / `apply_resize`; a failed step leaves the previous split.
///
/// Device memory is emulated: resident experts live in `wisp::virtual_expert_tensor<posix_vmm>`
/// rows (one tensor per layer, resized in place), KV in a `kv_block_pool`, and host-to-device
/// copies go through `copy_engine`, throttled to a bandwidth as SpecMD's emulation does.
#pragma once

#include "model.hpp"
#include "scheduler.hpp"

#include <wisp/alloc/configurator.hpp>
#include <wisp/alloc/controller.hpp>
#include <wisp/alloc/cost_model.hpp>
#include <wisp/alloc/model_spec.hpp>
#include <wisp/alloc/resize.hpp>
#include <wisp/alloc/split.hpp>
#include <wisp/cache/policies.hpp>
#include <wisp/kernel/fused_moe.hpp>
#include <wisp/pager/pager.hpp>
#include <wisp/reuse/histogram.hpp>
#include <wisp/reuse/reuse_distance.hpp>
#include <wisp/reuse/trace_profile.hpp>
#include <wisp/trace/routing_trace.hpp>
#include <wisp/trace/synthetic.hpp>
#include <wisp/vmm/page_pool.hpp>
#include <wisp/vmm/posix_vmm.hpp>
#include <wisp/vmm/virtual_expert_tensor.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace wisp_engine {

using clock_type = std::chrono::steady_clock;

/// @brief Host-to-device copies at an emulated bandwidth (SpecMD §A.4: "bandwidth throttling
/// delays expert transfers"). A copy completes no earlier than the previous one plus
/// `bytes / bandwidth`; `sync()` waits for the last one, as a stream would before the kernel.
class copy_engine {
 public:
  /// @param bytes_per_second 0 = unthrottled (memcpy speed).
  explicit copy_engine(double bytes_per_second) : bw_(bytes_per_second) {}

  void copy(std::byte* dst, const std::byte* src, std::size_t n) {
    const auto now = clock_type::now();
    if (busy_until_ < now) {
      busy_until_ = now;
    }
    std::memcpy(dst, src, n);
    if (bw_ > 0) {
      busy_until_ += std::chrono::duration_cast<clock_type::duration>(
          std::chrono::duration<double>(static_cast<double>(n) / bw_));
    }
    bytes_ += n;
  }
  /// Waits until every issued copy has completed at the emulated bandwidth.
  void sync() const {
    for (;;) {
      const auto now = clock_type::now();
      if (now >= busy_until_) {
        return;
      }
      const auto left = busy_until_ - now;
      if (left > std::chrono::microseconds(300)) {
        std::this_thread::sleep_for(left - std::chrono::microseconds(200));
      }
    }
  }
  [[nodiscard]] std::uint64_t bytes() const noexcept { return bytes_; }

 private:
  double bw_;
  clock_type::time_point busy_until_{};
  std::uint64_t bytes_ = 0;
};

enum class arm_kind : std::uint8_t { full, static_offload, pager, pager_plan, pager_dynamic };

[[nodiscard]] inline std::string_view arm_name(arm_kind a) noexcept {
  constexpr std::string_view names[] = {"full", "static-offload", "pager", "pager+plan",
                                        "pager+dynamic"};
  return names[static_cast<int>(a)];
}
[[nodiscard]] inline std::optional<arm_kind> parse_arm(std::string_view s) noexcept {
  for (int i = 0; i < 5; ++i) {
    if (arm_name(static_cast<arm_kind>(i)) == s) {
      return static_cast<arm_kind>(i);
    }
  }
  return std::nullopt;
}

/// @brief Where routing comes from.
enum class routing_source : std::uint8_t { model, trace };

/// @brief Settings of one arm's run.
struct engine_options {
  arm_kind arm = arm_kind::pager;
  std::uint64_t budget_bytes = 48ull << 20;  ///< device budget: resident experts + KV
  double bandwidth = 25e9;                   ///< bytes/s host->device, 0 = unthrottled
  std::string policy = "lru";                ///< pager eviction policy
  std::int32_t cap = 0;                      ///< pager arm: per-layer cap (0 = from the budget)
  std::int32_t max_running = 4;              ///< sessions decoded together
  routing_source routing = routing_source::trace;
  const wisp::trace::routing_trace* trace = nullptr;  ///< for `routing_source::trace`
  std::int32_t dynamic_burst = 4;                     ///< pager+dynamic: forwards between barriers
  std::uint64_t dynamic_headroom = 1;  ///< pager+dynamic: KV blocks kept above the observed peak
  /// pager+dynamic: the online controller's tuning. Decay 0 (only the last burst counts): the
  /// shift workload's phases last about two bursts, and a KV miss (a block's recompute) costs
  /// hundreds of expert misses, so any remembered long-context burst pins the split; the law's
  /// clamp (KV >= observed peak + headroom) already protects KV when long turns return.
  wisp::alloc::controller_config controller{.decay = 0.0};
  /// Tests: called before every resize lever pull of `pager+dynamic` (including the undo of a
  /// rollback) with the pool and its requested size; returning true makes that pull fail with the
  /// pool unchanged.
  std::function<bool(wisp::alloc::pool, std::uint64_t)> lever_fault;
  /// Tests: forced per-layer cap changes `(forward index, cap)` for the pager arms, each counted in
  /// `arm_result::resizes` or, when it fails and is rolled back, `resize_failures`; the KV pool
  /// keeps its blocks. @throws wisp::logic_error (from `run_arm`) for another arm, or a cap outside
  /// `[k, E]` or that does not fit the budget beside the KV blocks.
  std::vector<std::pair<std::int32_t, std::int32_t>> forced_resizes;
  /// Tests: called in every per-layer expert resize (forced, dynamic and their rollbacks) with the
  /// layer and the cap, after the layer's tensor has grown and before the pager resizes the layer;
  /// returning true makes that step throw, as a failing `pager::resize_layer` would.
  std::function<bool(std::int32_t, std::int32_t)> layer_fault;
  std::function<void(const std::string&)> progress;  ///< called now and then with a status line
};

/// @brief One drained-barrier resize attempt of `pager+dynamic`.
struct resize_event {
  std::int32_t forward = 0;  ///< forwards done before the barrier
  std::int32_t from_cap = 0, to_cap = 0;
  std::uint64_t from_kv = 0, to_kv = 0;
  bool by_controller = false;  ///< the controller proposed a move (else the law's clamp alone)
  bool applied = false;        ///< every step succeeded
  std::int32_t cap_after = 0;  ///< the engine's per-layer cap after the attempt
  std::uint64_t kv_after = 0;  ///< the engine's KV blocks after the attempt
};

/// @brief What one arm's run measured.
struct arm_result {
  std::string name;
  bool feasible = true;
  std::string note;  ///< why infeasible, or the split used
  double decode_tok_s = 0, prefill_tok_s = 0, ttft_s = 0, tpot_s = 0, hit_rate = 0;
  double seconds = 0;
  std::uint64_t bytes_moved = 0, preemptions = 0, decode_tokens = 0, prefill_tokens = 0;
  std::uint64_t resizes = 0;  ///< successful resizes (forced, and applied pager+dynamic attempts)
  std::int32_t cap = 0;
  std::uint64_t kv_blocks = 0;
  std::uint64_t output_digest = 0;
  std::vector<std::vector<std::int32_t>> outputs;  ///< generated tokens per request
  std::vector<std::uint64_t> logits_hashes;        ///< per request
  std::vector<std::string> rejected;               ///< rejection messages
  std::uint64_t controller_moves = 0;    ///< pager+dynamic: applied resizes the controller proposed
  std::uint64_t resize_failures = 0;     ///< resizes (forced or pager+dynamic) rolled back
  std::vector<resize_event> resize_log;  ///< pager+dynamic: every attempt
};

/// The model as wisp's allocator sees it.
[[nodiscard]] inline wisp::alloc::model_spec alloc_spec(const model_config& c) {
  return {"wisp-engine",
          static_cast<std::uint32_t>(c.layers),
          static_cast<std::uint32_t>(c.experts),
          static_cast<std::uint32_t>(c.top_k),
          wisp::byte_size{c.expert_bytes()},
          wisp::byte_size{c.kv_bytes_per_token()},
          static_cast<std::uint32_t>(c.block_tokens)};
}

/// A KV floor for a workload: `concurrency` sessions of its longest context. The `full`,
/// `static-offload` and `pager` arms keep `max_running` sessions' worth (every admitted session
/// can run to the end without preemption); `pager+plan` and `pager+dynamic` keep one session's
/// worth (the least that admits every request) and let the cost model or the controller decide
/// the rest.
[[nodiscard]] inline wisp::alloc::admission_floor workload_floor(const std::vector<request>& reqs,
                                                                 std::int32_t concurrency) {
  std::uint64_t longest = 0;
  for (const request& r : reqs) {
    longest = std::max<std::uint64_t>(longest, r.prompt.size() + r.max_new_tokens);
  }
  return {static_cast<std::uint64_t>(std::max(concurrency, 1)), longest};
}

namespace detail {

inline std::uint64_t fnv(std::uint64_t h, const void* p, std::size_t n) noexcept {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) {
    h = (h ^ b[i]) * 1099511628211ull;
  }
  return h;
}

/// The serving loop of one arm, for eviction policy `Policy` (the pager arms use it).
template <class Policy>
class runner {
 public:
  runner(const model_weights& w, const engine_options& opt, const std::vector<request>& reqs)
      : w_(w),
        cfg_(w.cfg),
        opt_(opt),
        reqs_(reqs),
        spec_(alloc_spec(w.cfg)),
        budget_(opt.budget_bytes),
        floor_(workload_floor(reqs,
                              opt.arm == arm_kind::pager_plan || opt.arm == arm_kind::pager_dynamic
                                  ? 1
                                  : opt.max_running)),
        copies_(opt.bandwidth),
        kernel_(w.cfg.hidden, w.cfg.intermediate),
        vmm_pool_(wisp::posix_vmm{wisp::posix_vmm_options{.granule = std::size_t{64} << 10}}) {
    const std::int32_t d = cfg_.head_dim();
    for (std::int32_t i = 0; i < d / 2; ++i) {
      rope_freq_.push_back(std::pow(10000.0, -2.0 * i / d));
    }
  }

  arm_result run() {
    arm_result res;
    res.name = std::string(arm_name(opt_.arm));
    if (!plan_memory(res)) {
      res.feasible = false;
      return res;
    }
    kv_ = std::make_unique<kv_block_pool>(
        static_cast<std::size_t>(current_.kv_blocks),
        static_cast<std::size_t>(cfg_.block_tokens) * cfg_.kv_floats_per_token());
    sched_ = std::make_unique<scheduler>(*kv_, cfg_.block_tokens, opt_.max_running);
    sessions_.resize(reqs_.size());
    for (std::size_t i = 0; i < reqs_.size(); ++i) {
      sessions_[i].req = reqs_[i];
      if (!sched_->submit(sessions_[i])) {
        res.rejected.push_back(sessions_[i].reject_reason);
      }
    }
    const auto t0 = clock_type::now();
    double prefill_s = 0, decode_s = 0;
    std::int32_t forward = 0;
    std::size_t done = 0;
    while (!sched_->idle()) {
      batch_plan plan = sched_->next();
      if (plan.sessions.empty()) {
        break;  // nothing admissible (cannot happen: rejected sessions never queue)
      }
      for (const auto& [at, cap] : opt_.forced_resizes) {
        if (at == forward) {
          force_resize(cap);
        }
      }
      const auto f0 = clock_type::now();
      const std::int32_t rows = run_forward(plan);
      const double dt = seconds_since(f0);
      if (ctl_) {
        record_kv_accesses(plan);
      }
      (plan.prefill ? prefill_s : decode_s) += dt;
      (plan.prefill ? res.prefill_tokens : res.decode_tokens) += static_cast<std::uint64_t>(rows);
      const double t = seconds_since(t0);
      for (session* s : plan.sessions) {
        if (s->t_first < 0) {
          s->t_first = t;
        }
        if (s->generated >= s->req.max_new_tokens) {
          sched_->finish(*s, t);
          ++done;
        }
      }
      ++forward;
      if (opt_.arm == arm_kind::pager_dynamic && forward % opt_.dynamic_burst == 0) {
        dynamic_barrier(forward, res);
      }
      if (opt_.progress && forward % 16 == 0) {
        opt_.progress(res.name + ": forward " + std::to_string(forward) + ", " +
                      std::to_string(done) + "/" + std::to_string(reqs_.size()) +
                      " sessions done, " + std::to_string(sched_->running()) + " running, cap " +
                      std::to_string(current_.expert_cap) + ", KV blocks " +
                      std::to_string(kv_->capacity()));
      }
    }
    res.seconds = seconds_since(t0);
    res.prefill_tok_s = prefill_s > 0 ? static_cast<double>(res.prefill_tokens) / prefill_s : 0;
    res.decode_tok_s = decode_s > 0 ? static_cast<double>(res.decode_tokens) / decode_s : 0;
    double ttft = 0, tpot = 0;
    std::int32_t n = 0, m = 0;
    std::uint64_t digest = 1469598103934665603ull;
    for (const session& s : sessions_) {
      std::vector<std::int32_t> out(s.tokens.begin() + static_cast<std::ptrdiff_t>(std::min(
                                                           s.req.prompt.size(), s.tokens.size())),
                                    s.tokens.end());
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
    res.bytes_moved = copies_.bytes();
    res.preemptions = sched_->preemptions();
    res.resizes = resizes_;
    res.controller_moves = controller_moves_;
    res.resize_failures = resize_failures_;
    res.cap = static_cast<std::int32_t>(current_.expert_cap);
    res.kv_blocks = kv_->capacity();
    if (pager_) {
      res.hit_rate = pager_->stats().hit_rate();
    } else {
      res.hit_rate = opt_.arm == arm_kind::full ? 1.0 : 0.0;
    }
    return res;
  }

 private:
  static double seconds_since(clock_type::time_point t) {
    return std::chrono::duration<double>(clock_type::now() - t).count();
  }

  // ---------------------------------------------------------------- memory plan per arm
  /// Sets `current_`, the split in force, and builds the arm's expert memory.
  bool plan_memory(arm_result& res) {
    const auto E = static_cast<std::uint64_t>(cfg_.experts);
    switch (opt_.arm) {
      case arm_kind::full:
      case arm_kind::static_offload: {
        // Every expert of every layer, or (static-offload) one layer's staging set: the split of
        // a one-layer model with every expert resident.
        const bool full = opt_.arm == arm_kind::full;
        wisp::alloc::model_spec resident = spec_;
        resident.layers = full ? resident.layers : 1;
        const wisp::byte_size eb = resident.expert_pool_bytes(E);
        if (eb <= budget_) {
          current_ = wisp::alloc::make_split(resident, budget_, E);
        }
        if (eb > budget_ || !floor_.admits(resident, current_)) {
          res.note = std::string("infeasible: ") + (full ? "all experts" : "one layer's experts") +
                     " need " + std::to_string(eb.count() >> 20) + " MiB plus a KV floor of " +
                     std::to_string(floor_.blocks(spec_.block_tokens)) + " blocks, budget " +
                     std::to_string(opt_.budget_bytes >> 20) + " MiB";
          return false;
        }
        make_tensors(full ? static_cast<std::size_t>(cfg_.layers) : 1, E);
        for (std::int32_t l = 0; full && l < cfg_.layers; ++l) {
          for (std::int32_t e = 0; e < cfg_.experts; ++e) {
            std::memcpy(tensors_[static_cast<std::size_t>(l)]->row(static_cast<std::size_t>(e)),
                        w_.master(l, e), cfg_.expert_bytes());
          }
        }
        identity_.resize(static_cast<std::size_t>(cfg_.experts));
        std::iota(identity_.begin(), identity_.end(), 0);
        break;
      }
      case arm_kind::pager:
      case arm_kind::pager_plan:
      case arm_kind::pager_dynamic: {
        try {
          if (opt_.arm == arm_kind::pager && opt_.cap > 0) {
            current_ =
                wisp::alloc::make_split(spec_, budget_, static_cast<std::uint64_t>(opt_.cap));
          } else if (opt_.arm == arm_kind::pager) {
            current_ = wisp::alloc::make_split(
                spec_, budget_, wisp::alloc::max_feasible_cap(spec_, budget_, floor_));
          } else {
            current_ = offline_plan().choice;
          }
        } catch (const wisp::error& e) {
          res.note = std::string("infeasible: ") + e.what();
          return false;
        }
        const auto cap = static_cast<std::int32_t>(current_.expert_cap);
        pager_ = std::make_unique<wisp::pager<Policy>>(wisp::pager_config{.layers = cfg_.layers,
                                                                          .experts = cfg_.experts,
                                                                          .top_k = cfg_.top_k,
                                                                          .capacity = cap,
                                                                          .max_tokens = 1024});
        make_tensors(static_cast<std::size_t>(cfg_.layers), static_cast<std::size_t>(cap));
        if (opt_.arm == arm_kind::pager_dynamic) {
          try {
            start_controller();
          } catch (const wisp::error& e) {
            res.note = std::string("infeasible: ") + e.what();
            return false;
          }
        }
        break;
      }
    }
    res.note = "cap " + std::to_string(current_.expert_cap) + ", " +
               std::to_string(current_.kv_blocks) + " KV blocks";
    return true;
  }

  /// KV blocks of a request's whole context (prompt + tokens to generate).
  [[nodiscard]] std::uint64_t context_blocks(const request& r) const noexcept {
    return blocks_for_tokens(
        r.prompt.size() + static_cast<std::uint64_t>(std::max(r.max_new_tokens, 0)),
        spec_.block_tokens);
  }

  /// The cost model's parameters: the copy engine's bandwidth, or when it is unthrottled the
  /// library's default bandwidth.
  [[nodiscard]] wisp::alloc::cost_params cost_params() const {
    wisp::alloc::cost_params p;
    if (opt_.bandwidth > 0) {
      p.bandwidth_bytes_per_second = opt_.bandwidth;
    }
    return p;
  }

  /// WiSP Eq. 7 from the routing trace's per-layer reuse profile and a working-set KV curve.
  wisp::alloc::configuration offline_plan() {
    wisp::reuse::miss_curve expert_curve;
    if (opt_.trace != nullptr) {
      expert_curve = wisp::reuse::miss_curve{
          wisp::reuse::profile_trace(*opt_.trace, wisp::reuse::reuse_scope::per_layer).histogram};
    }
    // KV working set: the blocks of the `max_running` longest sessions (those served at once).
    std::vector<std::uint64_t> blocks;
    for (const request& r : reqs_) {
      blocks.push_back(context_blocks(r));
    }
    std::sort(blocks.rbegin(), blocks.rend());
    std::uint64_t working = 0;
    for (std::size_t i = 0; i < blocks.size() && i < static_cast<std::size_t>(opt_.max_running);
         ++i) {
      working += blocks[i];
    }
    const auto rounds = static_cast<std::uint64_t>(reqs_.empty() ? 1 : reqs_[0].max_new_tokens);
    wisp::alloc::cost_model<> cost{
        spec_, expert_curve, wisp::alloc::working_set_kv_curve(working, rounds), cost_params()};
    return wisp::alloc::configure(cost, budget_, floor_);
  }

  void make_tensors(std::size_t count, std::size_t resident) {
    for (std::size_t i = 0; i < count; ++i) {
      tensors_.push_back(std::make_unique<wisp::virtual_expert_tensor<wisp::posix_vmm>>(
          vmm_pool_,
          wisp::expert_tensor_shape{static_cast<std::size_t>(cfg_.experts), cfg_.expert_bytes()}));
      tensors_.back()->resize_resident(resident);
    }
  }

  // ---------------------------------------------------------------- resizing (drained barriers)
  /// A forced cap change (`engine_options::forced_resizes`): the KV pool keeps its blocks.
  void force_resize(std::int32_t cap) {
    WISP_EXPECTS(pager_ != nullptr, "forced resizes need a pager arm, not ", arm_name(opt_.arm));
    // Throws on a cap outside [k, E] or one that does not fit beside the KV pool.
    const wisp::alloc::split to = wisp::alloc::make_split(
        spec_, budget_, static_cast<std::uint64_t>(std::max(cap, 0)), current_.kv_blocks);
    if (resize_experts(cap)) {
      current_ = to;
      ++resizes_;
      if (ctl_) {
        ctl_->set_cap(to.expert_cap);
      }
    } else {
      ++resize_failures_;
    }
    check_split();
  }

  /// Sets every layer's cap (pager and tensors); strong: on failure every layer, the one that
  /// failed included, is as before.
  bool resize_experts(std::int32_t cap) {
    const std::int32_t old = pager_->capacity(0);  // every layer's (check_split)
    std::int32_t l = 0;
    try {
      for (; l < cfg_.layers; ++l) {
        resize_layer(l, cap);
      }
    } catch (...) {
      // Layer l failed part-way (its tensor may have grown before its pager resize threw).
      for (std::int32_t u = l; u >= 0; --u) {
        resize_layer(u, old);
      }
      return false;
    }
    return true;
  }
  void resize_layer(std::int32_t l, std::int32_t cap) {
    auto& t = *tensors_[static_cast<std::size_t>(l)];
    if (static_cast<std::size_t>(cap) > t.resident_rows()) {
      t.resize_resident(static_cast<std::size_t>(cap));  // grow: map first
    }
    if (opt_.layer_fault && opt_.layer_fault(l, cap)) {
      WISP_FAIL(wisp::error, "injected fault resizing layer ", l, " to cap ", cap);
    }
    pager_->prepare(l, std::span<const std::int32_t>{}, 0, cfg_.top_k);  // drained: unprotect
    const wisp::resize_report rep = pager_->resize_layer(l, cap);
    for (const wisp::slot_move& m : rep.moves) {
      std::memcpy(t.row(static_cast<std::size_t>(m.to)), t.row(static_cast<std::size_t>(m.from)),
                  cfg_.expert_bytes());
    }
    t.resize_resident(static_cast<std::size_t>(cap));  // shrink: unmap the tail
  }

  /// After every resize attempt: each layer's pager cap and tensor rows, and the KV pool, are
  /// those of the split in force. @throws wisp::logic_error naming the layer that differs.
  void check_split() const {
    const auto cap = static_cast<std::int32_t>(current_.expert_cap);
    for (std::int32_t l = 0; l < cfg_.layers; ++l) {
      const std::size_t rows = tensors_[static_cast<std::size_t>(l)]->resident_rows();
      WISP_EXPECTS(pager_->capacity(l) == cap && rows == static_cast<std::size_t>(cap), "layer ", l,
                   " has pager cap ", pager_->capacity(l), " and ", rows,
                   " resident rows but the split in force has cap ", cap);
    }
    WISP_EXPECTS(kv_->capacity() == current_.kv_blocks, "the KV pool has ", kv_->capacity(),
                 " blocks but the split in force has ", current_.kv_blocks);
  }

  struct levers {
    runner* r;
    bool resize_experts(std::uint32_t cap) {
      if (r->opt_.lever_fault && r->opt_.lever_fault(wisp::alloc::pool::experts, cap)) {
        return false;
      }
      return r->resize_experts(static_cast<std::int32_t>(cap));
    }
    bool resize_kv(std::uint64_t blocks) {
      if (r->opt_.lever_fault && r->opt_.lever_fault(wisp::alloc::pool::kv, blocks)) {
        return false;
      }
      return r->kv_->resize(
          static_cast<std::size_t>(blocks),
          [this](std::int32_t from, std::int32_t to) { r->sched_->relocate(from, to); });
    }
  };
  static_assert(wisp::alloc::resize_levers<levers>);

  // ---------------------------------------------------------------- the online controller
  /// The controller starts at the offline plan's cap; one exact reuse-distance counter per layer
  /// (per-layer scope, keys = experts) and one over KV blocks (keys = (request, block index), so
  /// a block keeps its key when the pool compacts it or a preempted session recomputes it).
  void start_controller() {
    ctl_.emplace(spec_, budget_, floor_, cost_params(), opt_.controller, current_.expert_cap);
    for (std::int32_t l = 0; l < cfg_.layers; ++l) {
      expert_reuse_.emplace_back(static_cast<std::size_t>(cfg_.experts));
    }
    kv_key_base_.clear();
    std::uint64_t keys = 0;
    for (const request& r : reqs_) {
      kv_key_base_.push_back(keys);
      keys += context_blocks(r);
    }
    kv_reuse_.emplace(static_cast<std::size_t>(std::max<std::uint64_t>(keys, 1)));
  }

  /// Every block a forward's attention read, once per forward, into the KV stream.
  void record_kv_accesses(const batch_plan& plan) {
    for (const session* s : plan.sessions) {
      const auto i = static_cast<std::size_t>(s - sessions_.data());
      const std::uint64_t blocks =
          blocks_for_tokens(static_cast<std::uint64_t>(s->kv_len), spec_.block_tokens);
      for (std::uint64_t b = 0; b < blocks; ++b) {
        ctl_->record_kv(kv_reuse_->access(static_cast<std::uint32_t>(kv_key_base_[i] + b)));
      }
    }
    burst_peak_kv_ = std::max<std::uint64_t>(burst_peak_kv_, kv_->used());
  }

  /// Every (token, expert) access of layer `l`'s MoE, into the expert stream.
  void record_expert_accesses(std::int32_t l, std::span<const std::int32_t> ids) {
    auto& counter = expert_reuse_[static_cast<std::size_t>(l)];
    for (const std::int32_t e : ids) {
      ctl_->record_expert(counter.access(static_cast<std::uint32_t>(e)));
    }
  }

  /// A drained barrier (no forward in flight): close the controller's burst, clamp its proposal
  /// with the dual-resize law (KV >= max(floor, observed peak + headroom), D.8-D.9) and apply it
  /// shrinking first; commit only on success, else the previous split stands.
  void dynamic_barrier(std::int32_t forward, arm_result& res) {
    const wisp::alloc::controller_decision d = ctl_->end_burst();
    const std::uint64_t peak = std::max<std::uint64_t>(burst_peak_kv_, sched_->kv_demand());
    burst_peak_kv_ = 0;
    const wisp::alloc::split law =
        wisp::alloc::dual_resize_target(spec_, budget_, floor_, peak, opt_.dynamic_headroom);
    const std::uint32_t wanted = d.moves() ? d.next : current_.expert_cap;
    const std::uint32_t target = std::min(wanted, law.expert_cap);
    if (target == current_.expert_cap) {
      return;
    }
    const wisp::alloc::resize_plan plan = wisp::alloc::plan_transition(
        spec_, budget_, current_, wisp::alloc::make_split(spec_, budget_, target));
    levers l{this};
    const wisp::alloc::resize_outcome out = wisp::alloc::apply_resize(plan, l);
    resize_event ev;
    ev.forward = forward;
    ev.from_cap = static_cast<std::int32_t>(plan.from.expert_cap);
    ev.from_kv = plan.from.kv_blocks;
    ev.to_cap = static_cast<std::int32_t>(plan.to.expert_cap);
    ev.to_kv = plan.to.kv_blocks;
    ev.by_controller = d.moves() && target == d.next;
    ev.applied = out.applied;
    current_ = out.current;
    if (out.applied) {
      ctl_->set_cap(target);
      ++resizes_;
      controller_moves_ += ev.by_controller ? 1 : 0;
    } else {
      ++resize_failures_;
    }
    check_split();  // the engine holds the split apply_resize reports
    ev.cap_after = pager_->capacity(0);
    ev.kv_after = kv_->capacity();
    res.resize_log.push_back(ev);
  }

  // ---------------------------------------------------------------- one forward pass
  std::int32_t run_forward(batch_plan& plan) {
    const auto H = static_cast<std::size_t>(cfg_.hidden);
    const std::int32_t K = cfg_.top_k;
    rows_.clear();
    for (session* s : plan.sessions) {
      for (std::int32_t p = s->kv_len; p < s->len(); ++p) {
        rows_.push_back({s, p});
      }
    }
    const auto T = static_cast<std::int32_t>(rows_.size());
    const auto TS = static_cast<std::size_t>(T);
    x_.assign(TS * H, 0.0f);
    norm_.resize(TS * H);
    qkv_.resize(TS * 3 * H);
    attn_.resize(TS * H);
    moe_.resize(TS * H);
    ids_.resize(TS * static_cast<std::size_t>(K));
    gates_.resize(TS * static_cast<std::size_t>(K));
    for (std::size_t r = 0; r < TS; ++r) {
      const std::int32_t tok = rows_[r].s->tokens[static_cast<std::size_t>(rows_[r].pos)];
      const std::uint16_t* e = w_.embedding.data() + static_cast<std::size_t>(tok) * H;
      for (std::size_t i = 0; i < H; ++i) {
        x_[r * H + i] = bf16_to_float(e[i]);
      }
    }
    if (pager_) {
      pager_->begin_step();
    }
    for (std::int32_t l = 0; l < cfg_.layers; ++l) {
      attention(l, T);
      route(l, T);
      moe(l, T);
      for (std::size_t i = 0; i < TS * H; ++i) {
        x_[i] += moe_[i];
      }
    }
    for (session* s : plan.sessions) {
      s->kv_len = s->len();
    }
    // LM head on each session's last row; greedy.
    logits_.resize(static_cast<std::size_t>(cfg_.vocab));
    for (std::size_t r = 0; r < TS; ++r) {
      session* s = rows_[r].s;
      if (rows_[r].pos != s->len() - 1) {
        continue;
      }
      rms_norm(x_.data() + r * H, norm_.data(), cfg_.hidden);
      matvec_bf16(w_.lm_head.data(), norm_.data(), logits_.data(), cfg_.vocab, cfg_.hidden);
      const auto best = static_cast<std::int32_t>(std::max_element(logits_.begin(), logits_.end()) -
                                                  logits_.begin());
      s->logits_hash = fnv(s->logits_hash, logits_.data(), logits_.size() * sizeof(float));
      s->tokens.push_back(best);
      ++s->generated;
    }
    return T;
  }

  [[nodiscard]] float* kv_at(session* s, std::int32_t l, std::int32_t kv, std::int32_t pos) {
    const auto B = cfg_.block_tokens;
    float* blk = kv_->block(s->blocks[static_cast<std::size_t>(pos / B)]);
    return blk + ((static_cast<std::size_t>(l) * 2 + static_cast<std::size_t>(kv)) *
                      static_cast<std::size_t>(B) +
                  static_cast<std::size_t>(pos % B)) *
                     static_cast<std::size_t>(cfg_.hidden);
  }

  void rope(float* v, std::int32_t pos) const {
    const std::int32_t d = cfg_.head_dim();
    for (std::int32_t i = 0; i < d / 2; ++i) {  // the same rotation in every head
      const double theta = pos * rope_freq_[static_cast<std::size_t>(i)];
      const auto c = static_cast<float>(std::cos(theta));
      const auto sn = static_cast<float>(std::sin(theta));
      for (std::int32_t h = 0; h < cfg_.heads; ++h) {
        float* p = v + h * d + 2 * i;
        const float a = p[0], b = p[1];
        p[0] = a * c - b * sn;
        p[1] = a * sn + b * c;
      }
    }
  }

  void attention(std::int32_t l, std::int32_t T) {
    const auto H = static_cast<std::size_t>(cfg_.hidden);
    const auto& lw = w_.layers[static_cast<std::size_t>(l)];
    for (std::int32_t r = 0; r < T; ++r) {
      const std::size_t R = static_cast<std::size_t>(r);
      float* q = qkv_.data() + R * 3 * H;
      rms_norm(x_.data() + R * H, norm_.data() + R * H, cfg_.hidden);
      matvec_bf16(lw.wqkv.data(), norm_.data() + R * H, q, 3 * cfg_.hidden, cfg_.hidden);
      rope(q, rows_[R].pos);
      rope(q + H, rows_[R].pos);
      std::memcpy(kv_at(rows_[R].s, l, 0, rows_[R].pos), q + H, H * sizeof(float));
      std::memcpy(kv_at(rows_[R].s, l, 1, rows_[R].pos), q + 2 * H, H * sizeof(float));
    }
    const std::int32_t d = cfg_.head_dim();
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    for (std::int32_t r = 0; r < T; ++r) {
      const std::size_t R = static_cast<std::size_t>(r);
      const float* q = qkv_.data() + R * 3 * H;
      const std::int32_t n = rows_[R].pos + 1;
      scores_.resize(static_cast<std::size_t>(n));
      float* out = attn_.data() + R * H;
      std::fill(out, out + H, 0.0f);
      for (std::int32_t h = 0; h < cfg_.heads; ++h) {
        float mx = -INFINITY;
        for (std::int32_t p = 0; p < n; ++p) {
          const float* k = kv_at(rows_[R].s, l, 0, p) + h * d;
          float s = 0;
          for (std::int32_t i = 0; i < d; ++i) {
            s += q[h * d + i] * k[i];
          }
          scores_[static_cast<std::size_t>(p)] = s * scale;
          mx = std::max(mx, s * scale);
        }
        float sum = 0;
        for (std::int32_t p = 0; p < n; ++p) {
          float& s = scores_[static_cast<std::size_t>(p)];
          s = std::exp(s - mx);
          sum += s;
        }
        for (std::int32_t p = 0; p < n; ++p) {
          const float* v = kv_at(rows_[R].s, l, 1, p) + h * d;
          const float a = scores_[static_cast<std::size_t>(p)] / sum;
          for (std::int32_t i = 0; i < d; ++i) {
            out[h * d + i] += a * v[i];
          }
        }
      }
      matvec_bf16(lw.wo.data(), out, moe_.data() + R * H, cfg_.hidden, cfg_.hidden);
      for (std::size_t i = 0; i < H; ++i) {
        x_[R * H + i] += moe_[R * H + i];
      }
    }
  }

  void route(std::int32_t l, std::int32_t T) {
    const auto H = static_cast<std::size_t>(cfg_.hidden);
    const std::int32_t K = cfg_.top_k;
    const auto& lw = w_.layers[static_cast<std::size_t>(l)];
    rlogits_.resize(static_cast<std::size_t>(cfg_.experts));
    for (std::int32_t r = 0; r < T; ++r) {
      const std::size_t R = static_cast<std::size_t>(r);
      rms_norm(x_.data() + R * H, norm_.data() + R * H, cfg_.hidden);
      matvec_bf16(lw.router.data(), norm_.data() + R * H, rlogits_.data(), cfg_.experts,
                  cfg_.hidden);
      std::int32_t* ids = ids_.data() + R * static_cast<std::size_t>(K);
      route_topk(rlogits_, K, ids, probs_);
      if (opt_.routing == routing_source::trace && opt_.trace != nullptr) {
        const std::size_t step =
            (rows_[R].s->req.trace_offset + static_cast<std::uint64_t>(rows_[R].pos)) %
            opt_.trace->steps();
        for (std::int32_t j = 0; j < K; ++j) {
          ids[j] = opt_.trace->expert(step, l, j);
        }
      }
      gate_weights(probs_, ids, K, gates_.data() + R * static_cast<std::size_t>(K));
    }
  }

  wisp::fused_moe_args args(std::int32_t row_begin, std::int32_t rows,
                            const wisp::expert_tensor_view& view,
                            std::span<const std::int32_t> map) {
    const auto H = static_cast<std::size_t>(cfg_.hidden);
    const auto K = static_cast<std::size_t>(cfg_.top_k);
    const auto b = static_cast<std::size_t>(row_begin);
    const auto n = static_cast<std::size_t>(rows);
    return {std::span<const float>(norm_).subspan(b * H, n * H),
            std::span<const std::int32_t>(ids_).subspan(b * K, n * K),
            std::span<const float>(gates_).subspan(b * K, n * K),
            view,
            map,
            std::span<float>(moe_).subspan(b * H, n * H),
            rows,
            cfg_.top_k,
            cfg_.hidden};
  }

  void moe(std::int32_t l, std::int32_t T) {
    const std::int32_t K = cfg_.top_k;
    if (!pager_) {
      auto& t = *tensors_[opt_.arm == arm_kind::full ? static_cast<std::size_t>(l) : 0];
      if (opt_.arm == arm_kind::static_offload) {
        for (std::int32_t e = 0; e < cfg_.experts; ++e) {
          copies_.copy(t.row(static_cast<std::size_t>(e)), w_.master(l, e), cfg_.expert_bytes());
        }
        copies_.sync();
      }
      kernel_(args(0, T, t.view(), identity_));
      return;
    }
    auto& t = *tensors_[static_cast<std::size_t>(l)];
    const std::span<const std::int32_t> ids(ids_.data(), static_cast<std::size_t>(T) * K);
    if (ctl_) {
      record_expert_accesses(l, ids);
    }
    const auto groups = pager_->plan_token_groups(l, ids, T, K);
    if (groups.size() <= 1) {
      run_group(l, t, pager_->prepare(l, ids, T, K), 0, T);
      return;
    }
    for (const wisp::token_group& g : groups) {
      run_group(l, t, pager_->prepare(l, g), g.row_begin, g.rows());
    }
  }

  void run_group(std::int32_t l, wisp::virtual_expert_tensor<wisp::posix_vmm>& t,
                 const wisp::prepare_result& r, std::int32_t row_begin, std::int32_t rows) {
    for (const wisp::copy_op& op : r.copy_plan) {
      copies_.copy(t.row(static_cast<std::size_t>(op.slot)), w_.master(l, op.expert),
                   cfg_.expert_bytes());
    }
    copies_.sync();
    kernel_(args(row_begin, rows, t.view(), r.expert_map));
  }

  struct row {
    session* s;
    std::int32_t pos;
  };

  const model_weights& w_;
  model_config cfg_;
  engine_options opt_;
  const std::vector<request>& reqs_;
  wisp::alloc::model_spec spec_;
  wisp::byte_size budget_;
  wisp::alloc::admission_floor floor_;
  copy_engine copies_;
  cpu_reference_moe kernel_;
  wisp::page_pool<wisp::posix_vmm> vmm_pool_;
  std::vector<std::unique_ptr<wisp::virtual_expert_tensor<wisp::posix_vmm>>> tensors_;
  std::unique_ptr<wisp::pager<Policy>> pager_;
  std::unique_ptr<kv_block_pool> kv_;
  std::unique_ptr<scheduler> sched_;
  std::vector<session> sessions_;
  wisp::alloc::split current_{};  // the split in force (check_split)
  std::uint64_t resizes_ = 0;
  std::uint64_t controller_moves_ = 0;
  std::uint64_t resize_failures_ = 0;
  std::optional<wisp::alloc::split_controller> ctl_;               // pager+dynamic only
  std::vector<wisp::reuse::reuse_distance_counter> expert_reuse_;  // one per layer
  std::optional<wisp::reuse::reuse_distance_counter> kv_reuse_;
  std::vector<std::uint64_t> kv_key_base_;  // first KV key of each request
  std::uint64_t burst_peak_kv_ = 0;         // most KV blocks in use this burst
  std::vector<row> rows_;
  std::vector<float> x_, norm_, qkv_, attn_, moe_, gates_, scores_, logits_, rlogits_, probs_;
  std::vector<std::int32_t> ids_;
  std::vector<std::int32_t> identity_;  // full and static-offload: the expert map
  std::vector<double> rope_freq_;       // 10000^(-2i/d) for i in [0, d/2)
};

}  // namespace detail

/// Names accepted by `engine_options::policy`.
[[nodiscard]] inline std::vector<std::string_view> policy_names() {
  return {"lru", "least_stale", "lfu", "lfru", "fifo"};
}

/// @brief Runs one arm over `requests` and returns its measurements. The policy is chosen by name
/// here, at the edge; everything below is templated on it.
/// @throws wisp::logic_error on an unknown policy name.
[[nodiscard]] inline arm_result run_arm(const model_weights& w, const engine_options& opt,
                                        const std::vector<request>& requests) {
  if (opt.policy == "lru") {
    return detail::runner<wisp::lru>(w, opt, requests).run();
  }
  if (opt.policy == "least_stale") {
    return detail::runner<wisp::least_stale>(w, opt, requests).run();
  }
  if (opt.policy == "lfu") {
    return detail::runner<wisp::lfu>(w, opt, requests).run();
  }
  if (opt.policy == "lfru") {
    return detail::runner<wisp::lfru>(w, opt, requests).run();
  }
  if (opt.policy == "fifo") {
    return detail::runner<wisp::fifo>(w, opt, requests).run();
  }
  WISP_FAIL(wisp::logic_error, "unknown policy '", opt.policy,
            "' (valid: lru, least_stale, lfu, lfru, fifo)");
}

/// @brief The built-in synthetic routing trace for the model's shape (preset "default").
[[nodiscard]] inline wisp::trace::routing_trace default_trace(const model_config& c,
                                                              std::size_t steps = 4096,
                                                              std::uint64_t seed = 7) {
  wisp::trace::synthetic_config s = wisp::trace::synthetic_preset("default");
  s.layers = c.layers;
  s.experts = c.experts;
  s.top_k = c.top_k;
  s.working_set = std::max(c.top_k - 1, 1);
  return wisp::trace::make_synthetic_trace(s, steps, seed);
}

/// @brief Workloads: "chat" (the default demo) and "shift" (long-context turns alternating with
/// bursts of short tool calls). Deterministic in `seed`.
[[nodiscard]] inline std::vector<request> make_workload(std::string_view name,
                                                        const model_config& c,
                                                        std::int32_t sessions,
                                                        std::uint64_t seed = 3) {
  std::vector<request> out;
  std::uint64_t z = seed;
  auto next = [&z]() {
    z += 0x9E3779B97F4A7C15ull;
    std::uint64_t x = z;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  };
  auto add = [&](std::int32_t prompt, std::int32_t gen) {
    request r;
    r.id = static_cast<std::int32_t>(out.size());
    for (std::int32_t i = 0; i < prompt; ++i) {
      r.prompt.push_back(static_cast<std::int32_t>(next() % static_cast<std::uint64_t>(c.vocab)));
    }
    r.max_new_tokens = gen;
    r.trace_offset = next() % 1000000;
    out.push_back(std::move(r));
  };
  if (name == "shift") {
    for (std::int32_t i = 0; i < sessions; ++i) {
      if ((i / 4) % 2 == 0) {
        add(96 + static_cast<std::int32_t>(next() % 32), 16);  // long-context turn
      } else {
        add(8 + static_cast<std::int32_t>(next() % 8), 8);  // tool-call burst
      }
    }
    return out;
  }
  WISP_EXPECTS(name == "chat", "unknown workload '", name, "' (valid: chat, shift)");
  for (std::int32_t i = 0; i < sessions; ++i) {
    add(16 + static_cast<std::int32_t>(next() % 32), 24);
  }
  return out;
}

}  // namespace wisp_engine
