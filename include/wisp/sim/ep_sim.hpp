// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The expert-parallel simulator: a routing trace served by `ranks` GPUs under expert
/// parallelism, each rank paging its own physical experts into its own device slots over its own
/// link, replayed as a serving step sees it, for several arms with the same total device slots.
/// docs/expert_parallel.md has the model, the constants and the measured tables.
///
/// **The replay.** A batch of `batch` concurrent sequences drawn from the trace's sequences in
/// order: each step computes one token of each active sequence, and a finished sequence's place
/// goes to the next one. Each step runs every layer in order; a layer's call routes the step's
/// tokens (their recorded top-k), picks a rank for every (token, expert), and each rank prepares
/// the distinct experts it was sent in its pager: one pool of its slots over all its (layer, local
/// expert) keys (per-layer pools would hold fewer than top-k slots each at the budgets studied).
/// A rank sent more distinct experts than its slots prepares them in groups, resident ones first.
///
/// **The step-time model** (every arm alike). At each layer, rank `r` takes
/// `t_r = misses x link.copy_seconds(expert_bytes)` (copies on its own link, before the kernel)
/// `+ active x expert_seconds + pairs x token_seconds` (compute) `+ 2 x (a2a_latency +
/// tokens_received x hidden x activation_bytes / a2a_bandwidth)` (dispatch and combine; a token
/// goes once to each rank it is sent to). The layer ends when its slowest rank does (the combine
/// is a barrier), so a step takes `sum over layers of max_r t_r`; `slowest_rank_step_s` is its
/// mean over the steps.
///
/// **The arms** (`ep_arm`).
/// - `ep_lru`: vLLM's linear placement (no redundancy), `total_slots / ranks` slots per rank, LRU:
///   expert parallelism with a per-rank LRU expert cache, what a user can assemble today.
/// - `eplb_lru`: `eplb_placement` from the trace's load with `local_experts` rows per rank, the
///   same even slots, LRU, and vLLM's replica choice (pair `i` of a call takes replica
///   `i mod replicas`).
/// - `wisp`: `plan_placement` (placement and slot split) with the same rows, `policy` on each
///   rank, and the `replica_chooser` (`choose`, the whole call), told every rank's residency after
///   each call.
/// - `ep_policy`: `ep_lru` with `policy` instead of LRU: wisp's cache without its expert-parallel
///   part, to tell the two gains apart.
/// Both planned arms read the load of the whole trace (`ep_loads`), as a periodic rebalance would.
#pragma once

#include <wisp/cache/eviction_policy.hpp>
#include <wisp/cache/lru.hpp>
#include <wisp/cache/visit_policy.hpp>
#include <wisp/core/error.hpp>
#include <wisp/pager/pager.hpp>
#include <wisp/parallel/placement.hpp>
#include <wisp/parallel/planner.hpp>
#include <wisp/parallel/rank_pager.hpp>
#include <wisp/parallel/replica_choice.hpp>
#include <wisp/trace/routing_trace.hpp>
#include <wisp/transfer/timeline.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace wisp {

/// The simulator's arms (see the file comment).
enum class ep_arm : std::uint8_t { ep_lru, eplb_lru, wisp, ep_policy };

/// @brief The constants of the step-time model (see the file comment; docs/expert_parallel.md
/// names where the simulator's defaults come from).
struct ep_cost_model {
  link_model link{};                  ///< each rank's host-to-device link
  std::uint64_t expert_bytes = 0;     ///< bytes one expert copy moves
  double expert_seconds = 0.0;        ///< compute of one expert active on a rank in a call
  double token_seconds = 0.0;         ///< compute of one (token, expert) pair
  std::int32_t hidden = 0;            ///< hidden size: values one token sends per rank
  std::int32_t activation_bytes = 2;  ///< bytes per value sent (bf16)
  double a2a_bytes_per_second = 153e9;
  double a2a_latency_seconds = 0.0;  ///< per dispatch and per combine

  /// @throws wisp::logic_error naming the field if a value is out of range.
  void validate() const {
    link.validate();
    WISP_EXPECTS(std::isfinite(expert_seconds) && expert_seconds >= 0,
                 "ep_cost_model: expert_seconds must be finite and >= 0, got ", expert_seconds);
    WISP_EXPECTS(std::isfinite(token_seconds) && token_seconds >= 0,
                 "ep_cost_model: token_seconds must be finite and >= 0, got ", token_seconds);
    WISP_EXPECTS(hidden >= 0, "ep_cost_model: hidden must be >= 0, got ", hidden);
    WISP_EXPECTS(activation_bytes >= 1, "ep_cost_model: activation_bytes must be >= 1, got ",
                 activation_bytes);
    WISP_EXPECTS(std::isfinite(a2a_bytes_per_second) && a2a_bytes_per_second > 0,
                 "ep_cost_model: a2a_bytes_per_second must be finite and > 0, got ",
                 a2a_bytes_per_second);
    WISP_EXPECTS(std::isfinite(a2a_latency_seconds) && a2a_latency_seconds >= 0,
                 "ep_cost_model: a2a_latency_seconds must be finite and >= 0, got ",
                 a2a_latency_seconds);
  }
  /// @brief The model from hardware figures: an active expert reads its `expert_bytes` once at
  /// `memory_bytes_per_second`; a (token, expert) pair costs `2 x expert_params` FLOPs at `flops`
  /// (0 params: `expert_bytes / 2`, bf16 weights); the other fields as given.
  /// @throws wisp::logic_error naming the value if a rate is not finite and > 0.
  [[nodiscard]] static ep_cost_model from_hardware(link_model link, std::uint64_t expert_bytes,
                                                   std::uint64_t expert_params,
                                                   double memory_bytes_per_second, double flops,
                                                   std::int32_t hidden, double a2a_bytes_per_second,
                                                   double a2a_latency_seconds) {
    WISP_EXPECTS(std::isfinite(memory_bytes_per_second) && memory_bytes_per_second > 0,
                 "ep_cost_model: memory_bytes_per_second must be finite and > 0, got ",
                 memory_bytes_per_second);
    WISP_EXPECTS(std::isfinite(flops) && flops > 0,
                 "ep_cost_model: flops must be finite and > 0, got ", flops);
    const double params = expert_params > 0 ? static_cast<double>(expert_params)
                                            : static_cast<double>(expert_bytes) / 2.0;
    ep_cost_model m;
    m.link = link;
    m.expert_bytes = expert_bytes;
    m.expert_seconds = static_cast<double>(expert_bytes) / memory_bytes_per_second;
    m.token_seconds = 2.0 * params / flops;
    m.hidden = hidden;
    m.a2a_bytes_per_second = a2a_bytes_per_second;
    m.a2a_latency_seconds = a2a_latency_seconds;
    return m;
  }
  /// The costs the replica chooser and the planner weigh: the same link on every rank.
  [[nodiscard]] dispatch_costs dispatch(std::int32_t ranks) const {
    return {std::vector<double>(static_cast<std::size_t>(ranks), link.copy_seconds(expert_bytes)),
            expert_seconds, token_seconds};
  }
};

/// @brief What to simulate.
struct ep_sim_config {
  std::int32_t ranks = 1;        ///< G
  std::int32_t batch = 16;       ///< concurrent sequences B
  std::int32_t total_slots = 1;  ///< device slots over all ranks; every arm gets the same
  /// Rows (physical experts) per rank per layer of the planned arms; 0: `ceil(experts / ranks)`
  /// plus a quarter of it, rounded up (about 25% redundant experts).
  std::int32_t local_experts = 0;
  std::string policy = "decayed_frequency";  ///< the eviction policy of `wisp` and `ep_policy`
  ep_cost_model costs{};
  std::int32_t search_evaluations = 100000;  ///< the planner's search budget (`ep_plan_config`)
  double max_load_imbalance = 1.10;          ///< the planner's load bound (`ep_plan_config`)

  /// @throws wisp::logic_error naming the value unless every count is positive, the costs are
  ///   valid, and `policy` is a built-in policy other than `belady` and `predicted_next_use`
  ///   (they need a future or a predictor per rank).
  void validate() const {
    WISP_EXPECTS(ranks >= 1, "ep_sim_config: ranks must be >= 1, got ", ranks);
    WISP_EXPECTS(batch >= 1, "ep_sim_config: batch must be >= 1, got ", batch);
    WISP_EXPECTS(local_experts >= 0, "ep_sim_config: local_experts must be >= 0, got ",
                 local_experts);
    WISP_EXPECTS(search_evaluations >= 0, "ep_sim_config: search_evaluations must be >= 0, got ",
                 search_evaluations);
    WISP_EXPECTS(max_load_imbalance >= 1,
                 "ep_sim_config: max_load_imbalance must be >= 1 (or infinity), got ",
                 max_load_imbalance);
    const std::string_view known = builtin_policy_name(policy);
    WISP_EXPECTS(!known.empty() && known != "belady" && known != "predicted_next_use",
                 "ep_sim_config: policy '", policy,
                 "' is not a built-in policy the ranks can run (belady and predicted_next_use "
                 "need a future or a predictor per rank)");
    costs.validate();
  }
  /// `local_experts`, or its default for `experts` logical experts.
  [[nodiscard]] std::int32_t local_experts_for(std::int32_t experts) const noexcept {
    if (local_experts > 0) {
      return local_experts;
    }
    const std::int32_t even = (experts + ranks - 1) / ranks;
    return even + (even + 3) / 4;
  }
};

/// What one rank did over the whole replay.
struct ep_rank_result {
  std::int32_t slots = 0;             ///< its device slots
  std::uint64_t misses = 0;           ///< expert copies over its link
  std::uint64_t hits = 0;             ///< active experts already resident
  std::uint64_t link_bytes = 0;       ///< misses x expert_bytes
  std::uint64_t pairs = 0;            ///< (token, expert) pairs it computed: its token load
  std::uint64_t tokens_received = 0;  ///< tokens dispatched to it (once per call each)
  double busy_seconds = 0.0;          ///< sum over layers and steps of its `t_r`
};

/// What one arm did.
struct ep_arm_result {
  std::string name;                   ///< "ep-lru", "eplb-lru", "wisp", "ep-" + policy
  std::string policy;                 ///< the ranks' eviction policy
  std::uint64_t steps = 0;            ///< serving steps (batches)
  std::uint64_t tokens = 0;           ///< tokens served (trace steps)
  double total_seconds = 0.0;         ///< sum over steps of the step time
  double slowest_rank_step_s = 0.0;   ///< total_seconds / steps
  double load_imbalance = 0.0;        ///< max / mean of the ranks' pairs (1 = even)
  double layer_load_imbalance = 0.0;  ///< mean over layers of max / mean pairs in the layer
  std::int32_t local_experts = 0;     ///< rows per rank per layer
  std::int32_t physical_experts = 0;  ///< replicas over all layers
  std::vector<ep_rank_result> ranks;
};

namespace detail {

/// The batched replay: for each serving step, the trace steps (tokens) it computes.
inline std::vector<std::vector<std::size_t>> ep_batches(const routing_trace& trace,
                                                        std::int32_t batch) {
  std::vector<std::size_t> starts;
  if (trace.steps() > 0 &&
      (trace.sequence_starts().empty() || trace.sequence_starts().front() != 0)) {
    starts.push_back(0);  // steps before the first marked start form a sequence of their own
  }
  starts.insert(starts.end(), trace.sequence_starts().begin(), trace.sequence_starts().end());
  starts.push_back(trace.steps());
  const std::size_t sequences = starts.size() - 1;
  struct lane {
    std::size_t next = 0;
    std::size_t end = 0;
  };
  std::vector<lane> lanes;
  std::size_t taken = 0;
  std::vector<std::vector<std::size_t>> out;
  while (true) {
    for (lane& l : lanes) {  // a finished lane takes the next sequence
      if (l.next == l.end && taken < sequences) {
        l = {starts[taken], starts[taken + 1]};
        ++taken;
      }
    }
    while (lanes.size() < static_cast<std::size_t>(batch) && taken < sequences) {
      lanes.push_back({starts[taken], starts[taken + 1]});
      ++taken;
    }
    std::vector<std::size_t> step;
    for (lane& l : lanes) {
      if (l.next < l.end) {
        step.push_back(l.next++);
      }
    }
    if (step.empty()) {
      return out;
    }
    out.push_back(std::move(step));
  }
}

}  // namespace detail

/// @brief Pairs per call of every (layer, expert) in the batched replay of `trace`
/// (`[layers x experts]`): the load statistics the planned arms plan from. O(accesses).
/// @throws wisp::logic_error if `batch < 1`.
[[nodiscard]] inline std::vector<double> ep_loads(const routing_trace& trace, std::int32_t batch) {
  WISP_EXPECTS(batch >= 1, "ep_loads: batch must be >= 1, got ", batch);
  const auto& shape = trace.shape();
  std::vector<double> loads(static_cast<std::size_t>(shape.layers) * shape.experts, 0.0);
  const std::size_t steps = detail::ep_batches(trace, batch).size();
  if (steps == 0) {
    return loads;
  }
  trace.for_each_access([&](const access& a) {
    loads[static_cast<std::size_t>(a.layer) * shape.experts + a.expert] += 1.0;
  });
  for (double& l : loads) {
    l /= static_cast<double>(steps);
  }
  return loads;
}

namespace detail {

/// The placement an arm replays under, each rank's slots and the costs it is modelled with.
struct ep_arm_plan {
  dispatch_costs costs;
  expert_placement placement;
  std::vector<std::int32_t> slots;
};

/// Checks the dimensions of `arm`'s replay and plans its placement and slots: the even split,
/// unless the planner splits them.
inline ep_arm_plan plan_ep_arm(const routing_trace& trace, const ep_sim_config& config,
                               ep_arm arm) {
  const auto& shape = trace.shape();
  const std::int32_t g = config.ranks;
  const std::int32_t layers = shape.layers;
  const std::int32_t experts = shape.experts;
  const std::int32_t k = shape.top_k;
  const bool planned = arm == ep_arm::eplb_lru || arm == ep_arm::wisp;
  const std::int32_t local = planned ? config.local_experts_for(experts) : (experts + g - 1) / g;
  WISP_EXPECTS(std::int64_t{g} * local >= experts, "simulate_ep: ranks x local_experts = ", g,
               " x ", local, " is below experts = ", experts);
  WISP_EXPECTS(config.total_slots >= std::int64_t{g} * k, "simulate_ep: total_slots ",
               config.total_slots, " leaves a rank below top_k = ", k,
               " slots (it must be at least ranks x top_k = ", std::int64_t{g} * k, ")");
  WISP_EXPECTS(config.total_slots <= std::int64_t{g} * layers * local, "simulate_ep: total_slots ",
               config.total_slots, " exceeds ranks x layers x local_experts = ", g, " x ", layers,
               " x ", local, " (every row resident)");

  const dispatch_costs costs = config.costs.dispatch(g);
  std::vector<std::int32_t> slots(static_cast<std::size_t>(g), config.total_slots / g);
  for (std::int32_t r = 0; r < config.total_slots % g; ++r) {
    ++slots[static_cast<std::size_t>(r)];
  }
  std::optional<expert_placement> placement;
  if (!planned) {
    placement = expert_placement::linear(layers, experts, g);
  } else {
    const std::vector<double> loads = ep_loads(trace, config.batch);
    if (arm == ep_arm::eplb_lru) {
      placement = eplb_placement(loads, layers, experts, g, local);
    } else {
      ep_plan plan = plan_placement(loads, layers, experts,
                                    {g, local, config.total_slots, k, costs,
                                     config.search_evaluations, config.max_load_imbalance});
      placement = std::move(plan.placement);
      slots = std::move(plan.rank_slots);
    }
  }
  return {costs, std::move(*placement), std::move(slots)};
}

/// max / mean of `values` over `g` ranks (1 when they are all 0).
inline double pair_imbalance(std::span<const std::uint64_t> values, std::int32_t g) {
  std::uint64_t most_pairs = 0;
  std::uint64_t sum = 0;
  for (const std::uint64_t v : values) {
    most_pairs = std::max(most_pairs, v);
    sum += v;
  }
  return sum == 0 ? 1.0 : static_cast<double>(most_pairs) * g / static_cast<double>(sum);
}

/// One arm's replay: a pager per rank, the replica chooser of the wisp arm, and the buffers of a
/// layer, allocated once; `run_step` replays one batch, `finish` gives the result.
template <eviction_policy Policy>
class ep_arm_replay {
 public:
  ep_arm_replay(const routing_trace& trace, const ep_sim_config& config, ep_arm arm,
                const ep_arm_plan& plan)
      : trace_(trace),
        config_(config),
        arm_(arm),
        p_(plan.placement),
        g_(config.ranks),
        layers_(trace.shape().layers),
        k_(trace.shape().top_k),
        copy_seconds_(config.costs.link.copy_seconds(config.costs.expert_bytes)),
        a2a_token_seconds_(static_cast<double>(config.costs.hidden) *
                           config.costs.activation_bytes / config.costs.a2a_bytes_per_second) {
    const auto ug = static_cast<std::size_t>(g_);
    pagers_.reserve(ug);
    for (std::int32_t r = 0; r < g_; ++r) {
      pager_config pc;
      pc.layers = layers_;
      pc.experts = p_.local_experts();
      pc.top_k = k_;
      // A rank cannot use more slots than it has rows.
      pc.capacity = std::min(plan.slots[static_cast<std::size_t>(r)], layers_ * p_.local_experts());
      pc.scope = cache_scope::global;
      pagers_.emplace_back(pc);
    }
    if (arm == ep_arm::wisp) {
      chooser_.emplace(p_, plan.costs);
    }
    out_.policy = std::string(Policy::name);
    out_.local_experts = p_.local_experts();
    for (std::int32_t l = 0; l < layers_; ++l) {
      out_.physical_experts += p_.physical_experts(l);
    }
    out_.ranks.resize(ug);
    const auto most = static_cast<std::size_t>(config.batch) * k_;
    ids_.resize(most);
    targets_.resize(most);
    sent_.resize(ug);
    received_.resize(ug);
    pairs_.resize(ug);
    last_token_.resize(ug);
    slot_key_.resize(ug);
    for (std::size_t r = 0; r < ug; ++r) {
      out_.ranks[r].slots = pagers_[r].capacity(0);
      slot_key_[r].assign(static_cast<std::size_t>(pagers_[r].capacity(0)), -1);
    }
    layer_pairs_.assign(static_cast<std::size_t>(layers_) * g_, 0);
  }

  /// Replays the batch of sequences `step`.
  void run_step(const std::vector<std::size_t>& step) {
    double step_seconds = 0.0;
    for (auto& pg : pagers_) {
      pg.begin_step();
    }
    for (std::int32_t l = 0; l < layers_; ++l) {
      route_layer(step, l);
      step_seconds += serve_layer(l);
    }
    out_.total_seconds += step_seconds;
    ++out_.steps;
    out_.tokens += step.size();
  }

  /// The result of the steps run so far.
  ep_arm_result finish() {
    out_.slowest_rank_step_s =
        out_.steps == 0 ? 0.0 : out_.total_seconds / static_cast<double>(out_.steps);
    std::vector<std::uint64_t> totals;
    for (const ep_rank_result& r : out_.ranks) {
      totals.push_back(r.pairs);
    }
    out_.load_imbalance = pair_imbalance(totals, g_);
    for (std::int32_t l = 0; l < layers_; ++l) {
      out_.layer_load_imbalance += pair_imbalance(std::span<const std::uint64_t>(layer_pairs_)
                                                      .subspan(static_cast<std::size_t>(l) * g_,
                                                               static_cast<std::size_t>(g_)),
                                                  g_) /
                                   layers_;
    }
    return out_;
  }

 private:
  /// Gathers the experts of `step` at layer `l`, chooses the rank serving each pair, and counts
  /// what each rank is sent: its local ids, tokens and pairs.
  void route_layer(const std::vector<std::size_t>& step, std::int32_t l) {
    std::int32_t tokens = 0;
    for (const std::size_t s : step) {
      if (trace_.has_layer(s, l)) {
        for (std::int32_t j = 0; j < k_; ++j) {
          ids_[static_cast<std::size_t>(tokens) * k_ + j] = trace_.expert(s, l, j);
        }
        ++tokens;
      }
    }
    const std::size_t n = static_cast<std::size_t>(tokens) * k_;
    if (arm_ == ep_arm::wisp) {
      chooser_->choose(l, std::span<const std::int32_t>(ids_.data(), n), tokens, k_,
                       std::span<std::int32_t>(targets_.data(), n));
    } else {
      for (std::size_t i = 0; i < n; ++i) {
        const auto reps = p_.replicas(l, ids_[i]);
        targets_[i] = reps[i % reps.size()].rank;  // vLLM: position mod replica count
      }
    }
    for (std::size_t r = 0; r < static_cast<std::size_t>(g_); ++r) {
      sent_[r].clear();
      received_[r] = 0;
      pairs_[r] = 0;
      last_token_[r] = -1;
    }
    for (std::size_t i = 0; i < n; ++i) {
      const auto r = static_cast<std::size_t>(targets_[i]);
      const std::int32_t lid = p_.expert_map(targets_[i], l)[static_cast<std::size_t>(ids_[i])];
      if (std::find(sent_[r].begin(), sent_[r].end(), lid) == sent_[r].end()) {
        sent_[r].push_back(lid);
      }
      ++pairs_[r];
      const auto token = static_cast<std::int64_t>(i / static_cast<std::size_t>(k_));
      if (last_token_[r] != token) {  // a token's pairs are contiguous
        last_token_[r] = token;
        ++received_[r];
      }
    }
  }

  /// Rank `r` pages in what it was sent at layer `l`, resident experts first, a pager's width at
  /// a time; the chooser learns each change of residency. Returns the misses.
  std::int32_t page_rank(std::int32_t r, std::int32_t l) {
    const auto ur = static_cast<std::size_t>(r);
    pager<Policy>& pg = pagers_[ur];
    std::vector<std::int32_t>& list = sent_[ur];
    std::int32_t misses = 0;
    order_resident_first(pg, l, std::span<std::int32_t>(list));
    const auto width = static_cast<std::size_t>(pg.capacity(0));
    for (std::size_t first = 0; first < list.size(); first += width) {
      const prepare_result res = pg.prepare_experts(
          l,
          std::span<const std::int32_t>(list.data() + first, std::min(width, list.size() - first)));
      misses += res.misses;
      for (const copy_op& op : res.copy_plan) {  // the slot's previous key was evicted
        std::int64_t& key = slot_key_[ur][static_cast<std::size_t>(op.slot)];
        if (chooser_ && key >= 0) {
          chooser_->set_resident(r, static_cast<std::int32_t>(key / p_.local_experts()),
                                 static_cast<std::int32_t>(key % p_.local_experts()), false);
        }
        key = std::int64_t{l} * p_.local_experts() + op.expert;
        if (chooser_) {
          chooser_->set_resident(r, l, op.expert, true);
        }
      }
    }
    if (!list.empty()) {
      pg.end_call(l);
    }
    return misses;
  }

  /// Every rank serves what `route_layer` sent it at layer `l`; returns the slowest rank's
  /// modelled seconds.
  double serve_layer(std::int32_t l) {
    double layer_seconds = 0.0;
    for (std::int32_t r = 0; r < g_; ++r) {
      const auto ur = static_cast<std::size_t>(r);
      const std::int32_t misses = page_rank(r, l);
      const auto active = static_cast<std::int32_t>(sent_[ur].size());
      const double t = misses * copy_seconds_ + active * config_.costs.expert_seconds +
                       pairs_[ur] * config_.costs.token_seconds +
                       2 * (config_.costs.a2a_latency_seconds + received_[ur] * a2a_token_seconds_);
      ep_rank_result& rr = out_.ranks[ur];
      rr.misses += static_cast<std::uint64_t>(misses);
      rr.hits += static_cast<std::uint64_t>(active - misses);
      rr.link_bytes += static_cast<std::uint64_t>(misses) * config_.costs.expert_bytes;
      rr.pairs += static_cast<std::uint64_t>(pairs_[ur]);
      rr.tokens_received += static_cast<std::uint64_t>(received_[ur]);
      rr.busy_seconds += t;
      layer_pairs_[static_cast<std::size_t>(l) * g_ + ur] += static_cast<std::uint64_t>(pairs_[ur]);
      layer_seconds = std::max(layer_seconds, t);
    }
    return layer_seconds;
  }

  const routing_trace& trace_;
  const ep_sim_config& config_;
  ep_arm arm_;
  const expert_placement& p_;
  std::int32_t g_;
  std::int32_t layers_;
  std::int32_t k_;
  double copy_seconds_;       // one expert's copy over the link
  double a2a_token_seconds_;  // one token's activation over the all-to-all
  std::vector<pager<Policy>> pagers_;
  std::optional<replica_chooser> chooser_;
  ep_arm_result out_;
  std::vector<std::int32_t> ids_;                    // the layer's experts, k per token
  std::vector<std::int32_t> targets_;                // the rank serving each pair
  std::vector<std::vector<std::int32_t>> sent_;      // per rank: local ids
  std::vector<std::int32_t> received_;               // per rank: tokens
  std::vector<std::int32_t> pairs_;                  // per rank
  std::vector<std::int64_t> last_token_;             // per rank
  std::vector<std::vector<std::int64_t>> slot_key_;  // per rank and slot: its key, for residency
  std::vector<std::uint64_t> layer_pairs_;           // per layer and rank
};

template <eviction_policy Policy>
ep_arm_result run_ep_arm(const routing_trace& trace, const ep_sim_config& config, ep_arm arm,
                         const std::vector<std::vector<std::size_t>>& batches) {
  const ep_arm_plan plan = plan_ep_arm(trace, config, arm);
  ep_arm_replay<Policy> replay(trace, config, arm, plan);
  for (const std::vector<std::size_t>& step : batches) {
    replay.run_step(step);
  }
  return replay.finish();
}

}  // namespace detail

/// @brief Replays `trace` under `arm` (see the file comment). O(accesses x replicas + steps x
/// layers x ranks x local_experts) plus the planner; allocates its state once. Deterministic.
/// Separate calls may run in parallel.
/// @throws wisp::logic_error, naming the values, on an invalid config, `total_slots` below
///   `ranks x top_k` (a rank below top-k slots) or above what the ranks' rows can hold, or
///   `ranks x local_experts < experts`.
[[nodiscard]] inline ep_arm_result simulate_ep(const routing_trace& trace,
                                               const ep_sim_config& config, ep_arm arm) {
  config.validate();
  const auto batches = detail::ep_batches(trace, config.batch);
  ep_arm_result out = arm == ep_arm::ep_lru || arm == ep_arm::eplb_lru
                          ? detail::run_ep_arm<lru>(trace, config, arm, batches)
                          : visit_policy(config.policy, [&]<class P>(std::type_identity<P>) {
                              return detail::run_ep_arm<P>(trace, config, arm, batches);
                            });
  switch (arm) {
    case ep_arm::ep_lru:
      out.name = "ep-lru";
      break;
    case ep_arm::eplb_lru:
      out.name = "eplb-lru";
      break;
    case ep_arm::wisp:
      out.name = "wisp";
      break;
    case ep_arm::ep_policy:
      out.name = "ep-" + out.policy;
      break;
  }
  return out;
}

}  // namespace wisp
