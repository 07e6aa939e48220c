// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief What one arm's run is given (`engine_options`) and what it measures (`arm_result`).
#pragma once

#include "device.hpp"
#include "index.hpp"
#include "zip_masters.hpp"

#include <wisp/alloc/controller.hpp>
#include <wisp/alloc/resize.hpp>
#include <wisp/alloc/split.hpp>
#include <wisp/predict/prefetch.hpp>
#include <wisp/transfer/device_profile.hpp>
#include <wisp/transfer/timeline.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace wisp_engine {

/// The residency arms. Every arm serves the same sessions at the same budget with the same bytes.
enum class arm_kind : std::uint8_t {
  full,             ///< every expert resident
  layer_offload,    ///< whole layers resident, the others streamed (vLLM `--cpu-offload-gb`)
  on_demand,        ///< no cache: each call copies exactly its routed experts
  static_hot,       ///< per layer, the warm-up's most frequent experts pinned, misses staged
  llama_cpp_cache,  ///< llama.cpp's expert cache: one global LRU pool, sorted merged uploads
  cpu_experts,      ///< the warm-up's hottest experts resident, the others computed by the host
  cpu_moe_layers,   ///< llama.cpp `--n-cpu-moe`: the first layers' experts computed by the host
  pager,            ///< `wisp::pager<Policy>` at the largest cap that leaves the KV floor
  pager_plan,       ///< the pager at the cap and KV blocks of `wisp::configure`
  pager_dynamic,    ///< `pager_plan`, then the online controller resizes at drained barriers
  pager_prefetch,   ///< `pager`, plus predictor-driven next-layer prefetch in the link's idle time
  pager_zip,        ///< `pager` paging compressed experts, decoded on the device
  tiered,           ///< compression-aware F/C/S/E pools per layer, reads and decodes scheduled
  pager_hybrid      ///< `pager`, each miss copied or computed by the host (`miss_policy::hybrid`)
};
inline constexpr std::string_view arm_names[] = {
    "full",           "layer-offload",  "on-demand", "static-hot",  "llama.cpp-cache",
    "cpu-experts",    "cpu-moe-layers", "pager",     "pager+plan",  "pager+dynamic",
    "pager+prefetch", "pager+zip",      "tiered",    "pager+hybrid"};

[[nodiscard]] inline std::string_view arm_name(arm_kind a) noexcept {
  return arm_names[static_cast<std::size_t>(a)];
}
[[nodiscard]] inline std::optional<arm_kind> parse_arm(std::string_view s) noexcept {
  const auto* it = std::find(std::begin(arm_names), std::end(arm_names), s);
  if (it == std::end(arm_names)) {
    return std::nullopt;
  }
  return static_cast<arm_kind>(it - std::begin(arm_names));
}
/// Every arm's name, for messages: "full, layer-offload, ..., pager+hybrid".
[[nodiscard]] inline std::string arm_list() {
  std::string out;
  for (const std::string_view a : arm_names) {
    out += (out.empty() ? "" : ", ") + std::string(a);
  }
  return out;
}
/// Whether the arm computes experts on the host (and so reports host compute).
[[nodiscard]] constexpr bool computes_on_host(arm_kind a) noexcept {
  return a == arm_kind::cpu_experts || a == arm_kind::cpu_moe_layers || a == arm_kind::pager_hybrid;
}
/// Whether wisp places the arm's experts (`wisp::pager` or the tiered pools); the others are the
/// baselines.
[[nodiscard]] constexpr bool is_wisp_arm(arm_kind a) noexcept {
  return a >= arm_kind::pager;
}
/// Whether the arm pages through `wisp::pager` (and so runs an eviction policy of `--policy`).
[[nodiscard]] constexpr bool is_pager(arm_kind a) noexcept {
  return is_wisp_arm(a) && a != arm_kind::tiered;
}

/// Where routing comes from: the model's router, or the workload's routing trace.
enum class routing_source : std::uint8_t { model, trace };

/// @brief Settings of one arm's run.
struct engine_options {
  arm_kind arm = arm_kind::pager;
  std::uint64_t budget_bytes = 48ull << 20;  ///< device budget: resident experts + KV
  wisp::link_model link{};                   ///< the host-to-device link (25 GB/s, 10 us)
  /// The modelled GPU: compute charged by its roofline (device.hpp); nullopt (`--device host`):
  /// compute charged by the host's thread CPU time.
  std::optional<wisp::device_profile> device;
  /// cpu-experts, cpu-moe-layers, pager+hybrid: host experts charged by their measured CPU time
  /// instead of the profile's host roofline (`--host-compute measured`).
  bool host_measured = false;
  /// The profile's host: FLOP/s of one thread (`--host-thread-gflops`, see docs/engine.md).
  double host_thread_flops = 64e9;
  /// pager+hybrid: the rate of the reuse value estimator (`wisp::reuse_value_estimator`).
  double value_rate = 0.25;
  std::string policy = "lru";  ///< pager eviction policy
  /// pager+prefetch: how many of the predictor's best experts a batch prefetches (`top_k`:
  /// `k x tokens x overfetch`), at most what fits the link's idle time.
  wisp::prefetch_config prefetch{.rule = wisp::prefetch_rule::top_k};
  /// pager+zip and tiered: the device's decode rate, BF16 bytes written per second (per decode
  /// thread for tiered).
  double decode_bytes_per_second = 100e9;
  /// tiered: decode threads L (the pager+zip decode queue is one).
  std::uint32_t decode_threads = 1;
  /// tiered: the pools per layer (F, C, S, E experts) instead of the planner's.
  std::optional<std::array<std::int32_t, 4>> tiers;
  /// pager+zip and tiered: the compressed masters (built once per process and shared by its runs;
  /// `run_arm` builds them when absent).
  std::shared_ptr<const zip_masters> zip;
  std::int32_t cap = 0;   ///< per-layer rows of the caching arms (0 = from the budget)
  std::int32_t hot = -1;  ///< static-hot: pinned experts per layer (-1 = chosen on the warm-up)
  std::int32_t max_running = 4;  ///< sessions decoded together
  routing_source routing = routing_source::trace;
  std::int32_t dynamic_burst = 4;      ///< pager+dynamic: forwards between barriers
  std::uint64_t dynamic_headroom = 1;  ///< pager+dynamic: KV blocks kept above the observed peak
  /// pager+dynamic: the online controller's tuning. Decay 0 (only the last burst counts): the
  /// shift workload's phases last about two bursts, and a KV miss (a block's recompute) costs
  /// hundreds of expert misses, so any remembered long-context burst pins the split; the law's
  /// clamp (KV >= observed peak + headroom) already protects KV when long turns return.
  wisp::controller_config controller{.decay = 0.0};
  /// Tests: compute durations from a model instead of the host clock.
  compute_clock clock;
  /// Tests: called before every resize lever pull of `pager+dynamic` (including the undo of a
  /// rollback) with the pool and its requested size; returning true makes that pull fail with the
  /// pool unchanged.
  std::function<bool(wisp::pool, std::uint64_t)> lever_fault;
  /// Tests: forced per-layer cap changes `(forwards done, cap)` for the pager arms, made at the
  /// drained barrier after that many forwards (>= 1), each counted in `arm_result::resizes` or,
  /// when it fails and is rolled back, `resize_failures`; the KV pool keeps its blocks.
  /// @throws wisp::logic_error (from `run_arm`) for another arm, or a cap outside `[k, E]` or that
  /// does not fit the budget beside the KV blocks.
  std::vector<std::pair<std::int32_t, std::int32_t>> forced_resizes;
  /// Tests: called whenever a per-layer expert resize (forced, dynamic and their rollbacks) grows
  /// the layer's tensor, with the layer and the new row count; returning true makes that grow
  /// throw `wisp::out_of_memory` inside `wisp::resize_layer_rows`, as an exhausted device would.
  std::function<bool(std::int32_t, std::size_t)> layer_fault;
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

/// @brief What one arm's run measured. Times come from the modelled device's timeline.
struct arm_result {
  std::string name;
  std::string policy;  ///< pager arms: the eviction policy
  bool feasible = true;
  bool upper_bound = false;  ///< `full` at the smallest budget where it fits (more memory)
  std::uint64_t budget = 0;  ///< the budget it ran at
  std::string note;          ///< why infeasible, or the memory the arm used
  double decode_tok_s = 0, prefill_tok_s = 0, ttft_s = 0, tpot_s = 0;
  /// 1 - (expert_copies + host_experts) / expert_accesses (distinct experts routed per call): the
  /// share found resident.
  double hit_rate = 0;
  double seconds = 0;             ///< modelled time of the whole run
  double stall_seconds = 0;       ///< compute-queue time spent waiting for copies
  std::uint64_t bytes_moved = 0;  ///< bytes over the link
  std::uint64_t raw_bytes = 0;    ///< BF16 bytes of the experts copied (bytes_moved unless zip)
  std::uint64_t expert_copies = 0, expert_accesses = 0;  ///< copies a call or schedule needed
  std::uint64_t prefetch_copies = 0;  ///< pager+prefetch: predicted experts copied
  /// cpu-experts, cpu-moe-layers, pager+hybrid: (call, expert) pairs the host computed, their
  /// positions, and the host queue's busy time (modelled, or measured with `--host-compute
  /// measured`).
  std::uint64_t host_experts = 0, host_positions = 0;
  double host_seconds = 0;
  /// llama.cpp-cache: uploads once consecutive rows merge, and calls that bypassed the cache.
  std::uint64_t upload_runs = 0, bypassed_calls = 0;
  std::uint64_t prefetch_useful = 0;  ///< of those, the ones the next call used
  double decode_rate = 0;             ///< pager+zip, tiered: the device's decode rate, bytes/s
  double decode_seconds = 0;          ///< pager+zip, tiered: modelled decode time (all threads)
  double host_decode_seconds = 0;  ///< pager+zip, tiered: thread CPU time of the real host decodes
  std::uint64_t host_decoded_bytes = 0;  ///< pager+zip, tiered: BF16 bytes those decodes wrote
  /// tiered: the pools per layer (F, C, S, E experts) and the evaluated calls' experts found in
  /// F, C, S, E or nowhere (misses).
  std::array<std::int32_t, 4> tier_sizes{};
  std::array<std::uint64_t, 5> tier_hits{};
  /// `pager` at a fixed cap: the copies of Belady's offline optimum on the same calls at the same
  /// cap (a bound on what any eviction policy could save); -1 elsewhere.
  std::int64_t belady_copies = -1;
  std::uint64_t preemptions = 0, decode_tokens = 0, prefill_tokens = 0;
  std::uint64_t resizes = 0;  ///< successful resizes (forced, and applied pager+dynamic attempts)
  std::int32_t cap = 0;       ///< expert rows per layer (pager, static-hot) or resident layers
  std::uint64_t kv_blocks = 0;
  std::uint64_t output_digest = 0;
  std::vector<std::vector<std::int32_t>> outputs;  ///< generated tokens per request
  std::vector<std::uint64_t> logits_hashes;        ///< per request
  std::vector<std::string> rejected;               ///< rejection messages
  std::uint64_t controller_moves = 0;    ///< pager+dynamic: applied resizes the controller proposed
  std::uint64_t resize_failures = 0;     ///< resizes (forced or pager+dynamic) rolled back
  std::vector<resize_event> resize_log;  ///< pager+dynamic: every attempt
};

}  // namespace wisp_engine
