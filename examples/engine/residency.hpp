// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The one interface every residency arm implements: where a layer's experts are, which
/// copies a layer needs and which kernel launches run it. The serving loop (loop.hpp) calls it per
/// layer; everything else (timing, copies on the link, real bytes, outputs) is the loop's.
///
/// An arm is a class derived from `residency` (a virtual interface: the CLI picks arms by name at
/// run time, and the loop is compiled once instead of once per arm and policy). Per forward:
///
/// ```
/// begin_forward(row_positions, warm)       // once
/// ahead(0, window)                         // copies of layer 0 known before its routing
/// for each layer l:
///   launches = layer(l, ids, tokens)       // after the router: the launches of l's MoE
///   ahead(l + 1, window)                   // after l's launches; on the link while l computes
///                                          // (double buffering, or a prefetch) wherever its
///                                          // rows are free
/// between_forwards(...)                    // a drained barrier (resizes)
/// ...
/// finish(result)                           // after the last forward
/// ```
///
/// Rules the loop checks or relies on:
/// - every `(token, j)` position of the layer is visible in exactly one launch (the loop throws
///   otherwise), and a launch's visible experts are in the rows its map names once its copies and
///   every earlier copy into those rows have landed;
/// - rows are the arm's own (`device::add_tensor` in `setup`); the loop orders a copy after every
///   launch that read its destination row, so an arm may reuse rows freely;
/// - spans returned stay valid until the next call on the arm.
///
/// To add an arm: derive from `residency`, reserve memory in `setup` (return the KV blocks left),
/// return launches from `layer`, add it to `make_residency` (engine.hpp) and to `arm_kind`.
/// A host launch (`moe_launch::host`) computes its experts on the host queue from the masters,
/// beside the device's launches; the layer's combine waits for it.
#pragma once

#include "device.hpp"
#include "index.hpp"
#include "model.hpp"
#include "options.hpp"
#include "scheduler.hpp"

#include <wisp/alloc/model_spec.hpp>
#include <wisp/alloc/split.hpp>
#include <wisp/alloc/units.hpp>
#include <wisp/core/error.hpp>
#include <wisp/core/ids.hpp>
#include <wisp/trace/routing_trace.hpp>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <vector>

namespace wisp_engine {

/// @brief One launch of a layer's fused-MoE kernel: the experts visible through `expert_map`,
/// read from rows of tensor `tensor`, after `copies` (issued in order on the link). A **host**
/// launch (`host`) is computed by the host from the masters: `expert_map` shows each of its experts
/// at its own id, `tensor` is unused and there are no copies.
struct moe_launch {
  std::int32_t tensor = 0;
  std::span<const std::int32_t> expert_map;  ///< `int32[E]`: row of each visible expert, or -1
  std::span<const row_copy> copies;
  bool host = false;
};

/// @brief The routing the warm-up sessions produced, forward by forward.
struct warmup_log {
  struct forward {
    std::vector<std::uint32_t> row_positions;  ///< each row's position in its session
    std::vector<std::int32_t> ids;             ///< `[layers x tokens x k]`
    /// The forward's rows, one per position.
    [[nodiscard]] std::int32_t tokens() const { return count(row_positions); }
    [[nodiscard]] std::span<const std::int32_t> layer(std::int32_t l, std::int32_t k) const {
      const std::size_t n = idx(tokens()) * idx(k);
      return std::span<const std::int32_t>(ids).subspan(idx(l) * n, n);
    }
  };
  std::vector<forward> forwards;
  std::vector<request> sessions;  ///< the warm-up sessions themselves
  /// One step per token row, in forward order (for reuse profiles).
  wisp::routing_trace tokens{wisp::moe_shape{1, 1, 1}};
};

/// @brief The link's time while a layer computes, as `ahead` sees it: its copies start no earlier
/// than `start` (the link is busy before), and the layer's kernels end at `end`. A copy that
/// starts after `end` delays the next layer's own copies; one that ends by `end` never does.
struct link_window {
  double start = 0;
  double end = 0;
};

/// @brief What an arm may use to plan its memory.
struct arm_context {
  const model_config& model;
  const engine_options& options;
  wisp::model_spec spec;                 ///< the model as wisp's allocator sees it
  wisp::byte_size budget;                ///< experts + KV
  wisp::admission_floor floor;           ///< KV every arm keeps (max_running longest sessions)
  const std::vector<request>& requests;  ///< the evaluated sessions (sizes only)
  const warmup_log& warmup;
  device& dev;
  const zip_masters* zip = nullptr;  ///< pager+zip: the compressed masters
};

/// @brief The memory an arm took. `rows` is per layer (or the resident layers of layer-offload).
struct memory_plan {
  std::uint64_t kv_blocks = 0;
  std::int32_t rows = 0;
  std::string note;
};

/// @brief What the loop hands an arm at a drained barrier (no forward in flight).
struct barrier_context {
  std::int32_t forwards = 0;  ///< forwards done
  const batch_plan& batch;    ///< the forward just done
  const std::vector<session>& sessions;
  kv_block_pool& kv;
  scheduler& sched;
  arm_result& result;
};

/// @brief The per-layer residency interface (see the file comment).
class residency {
 public:
  residency() = default;
  residency(const residency&) = delete;
  residency& operator=(const residency&) = delete;
  virtual ~residency() = default;

  /// Reserves the arm's rows on `ctx.dev` and fills what starts resident (untimed).
  /// @throws wisp::infeasible_error when the arm does not fit the budget beside the KV floor.
  virtual memory_plan setup(const arm_context& ctx) = 0;
  /// A forward starts: `row_positions` holds each row's token position in its session, in row
  /// order (the forward has `row_positions.size()` rows; the view is valid until the forward's
  /// last `layer` call); `warm` during the warm-up replay (copies untimed).
  virtual void begin_forward(std::span<const std::uint32_t> /*row_positions*/, bool /*warm*/) {}
  /// Copies of `layer` that do not depend on its routing (or predict it), issued one layer early,
  /// during `window` (both 0 in the warm-up replay, where copies are untimed).
  virtual std::span<const row_copy> ahead(std::int32_t /*layer*/, const link_window& /*window*/) {
    return {};
  }
  /// The launches of `layer`'s MoE for `ids` (`[tokens x k]`, row-major).
  virtual std::span<const moe_launch> layer(std::int32_t layer, std::span<const std::int32_t> ids,
                                            std::int32_t tokens) = 0;
  /// Whether the last `layer` call needed the routing on the host (a host sync: the ids read back
  /// before the copies and launches could be issued). An arm whose layer runs entirely on the
  /// device (every expert resident, or a whole-layer copy issued ahead) says no.
  [[nodiscard]] virtual bool host_sync(std::int32_t /*layer*/) const { return true; }
  /// After every evaluated forward, at a drained barrier.
  virtual void between_forwards(barrier_context& /*ctx*/) {}
  /// After the last forward: figures only the arm knows.
  virtual void finish(arm_result& /*result*/) {}
};

/// KV blocks that fit beside `expert_rows` rows of experts in the budget.
/// @throws wisp::infeasible_error naming the arm, the rows and the floor when the floor does not
///   fit beside them.
[[nodiscard]] inline std::uint64_t kv_blocks_beside(const arm_context& ctx, std::string_view arm,
                                                    std::uint64_t expert_rows) {
  const std::uint64_t experts = expert_rows * ctx.spec.expert_bytes.count();
  const std::uint64_t block = ctx.spec.kv_block_bytes().count();
  const std::uint64_t floor = ctx.floor.blocks(ctx.spec.block_tokens);
  const std::uint64_t budget = ctx.budget.count();
  if (experts > budget || (budget - experts) / block < floor) {
    WISP_FAIL(wisp::infeasible_error, arm, ": ", expert_rows, " expert rows need ",
              wisp::format_bytes(experts), " plus a KV floor of ", floor, " blocks (",
              wisp::format_bytes(floor * block), "), budget ", wisp::format_bytes(budget));
  }
  return (budget - experts) / block;
}

/// Expert rows that fit in the budget beside the KV floor (0 when the floor alone does not fit).
[[nodiscard]] inline std::uint64_t rows_beside_floor(const arm_context& ctx) {
  const std::uint64_t floor = ctx.floor.bytes(ctx.spec).count();
  const std::uint64_t budget = ctx.budget.count();
  return budget < floor ? 0 : (budget - floor) / ctx.spec.expert_bytes.count();
}

/// The per-layer cap of the `pager` and `static-hot` arms: `--cap`, or the largest that leaves
/// the KV floor. @throws wisp::infeasible_error when not even `k` rows per layer fit.
[[nodiscard]] inline std::int32_t budget_cap(const arm_context& ctx) {
  if (ctx.options.cap > 0) {
    return ctx.options.cap;
  }
  return wisp::max_feasible_cap(ctx.spec, ctx.budget, ctx.floor);
}

/// Builds the launch that shows exactly `experts` (distinct) at `rows` in `map` (size E, reset).
inline void show_only(std::span<std::int32_t> map, std::span<const std::int32_t> experts,
                      std::span<const std::int32_t> rows) {
  std::fill(map.begin(), map.end(), -1);
  for (std::size_t i = 0; i < experts.size(); ++i) {
    at(map, experts[i]) = rows[i];
  }
}

/// Layer `l`'s experts, most routed (per token) in the warm-up first, ties to the lower id: the
/// hot set `static-hot` pins and `cpu-experts` keeps resident.
[[nodiscard]] inline std::vector<std::int32_t> experts_by_frequency(const warmup_log& w,
                                                                    std::int32_t l, std::int32_t E,
                                                                    std::int32_t K) {
  std::vector<std::uint64_t> counts(idx(E), 0);
  for (const auto& f : w.forwards) {
    for (const std::int32_t e : f.layer(l, K)) {
      ++at(counts, e);
    }
  }
  std::vector<std::int32_t> order(idx(E));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::int32_t a, std::int32_t b) { return at(counts, a) > at(counts, b); });
  return order;
}

/// The distinct experts of `ids` in first-seen order, into `out` (`seen` is scratch of size E).
inline void distinct_experts(std::span<const std::int32_t> ids, std::vector<std::uint8_t>& seen,
                             std::vector<std::int32_t>& out) {
  out.clear();
  for (const std::int32_t e : ids) {
    if (at(seen, e) == 0) {
      at(seen, e) = 1;
      out.push_back(e);
    }
  }
  for (const std::int32_t e : out) {
    at(seen, e) = 0;
  }
}

}  // namespace wisp_engine
