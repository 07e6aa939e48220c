// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The example serving engine: one arm's run, from its memory plan to its measurements.
///
/// The data flow, one file each: the model (model.hpp) and what it serves (workload.hpp); the
/// modelled device (device.hpp); the per-layer residency interface (residency.hpp) and its arms
/// (arm_full.hpp, arm_layer_offload.hpp, arm_on_demand.hpp, arm_static_hot.hpp,
/// arm_llama_cpp.hpp, arm_pager.hpp with pager_resize.hpp, arm_tiered.hpp, arm_hybrid.hpp with
/// `cpu-experts`, `cpu-moe-layers` and `pager+hybrid`); the dense math of a forward (forward.hpp);
/// the scheduler (scheduler.hpp); the serving loop (loop.hpp); repeated, interleaved runs and their
/// report (report.hpp). See docs/engine.md.
#pragma once

#include "arm_full.hpp"
#include "arm_hybrid.hpp"
#include "arm_layer_offload.hpp"
#include "arm_llama_cpp.hpp"
#include "arm_on_demand.hpp"
#include "arm_pager.hpp"
#include "arm_static_hot.hpp"
#include "arm_tiered.hpp"
#include "index.hpp"
#include "loop.hpp"
#include "workload.hpp"

#include <wisp/alloc/model_spec.hpp>
#include <wisp/cache/visit_policy.hpp>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace wisp_engine {

/// The model as wisp's allocator sees it.
[[nodiscard]] inline wisp::model_spec alloc_spec(const model_config& c) {
  return {"wisp-engine",
          c.layers,
          c.experts,
          c.top_k,
          wisp::byte_size{c.expert_bytes()},
          wisp::byte_size{c.kv_bytes_per_token()},
          static_cast<std::uint32_t>(c.block_tokens)};
}

/// Whether the pager arms run `Policy`: every built-in policy of wisp but `belady`, which needs
/// the future. In the pager's per-layer scope `predicted_next_use` evicts as `decayed_frequency`
/// does (its predictor term needs global scope), and `fld` and `least_stale` as `lru` does.
template <class Policy>
inline constexpr bool pager_arm_policy = !std::is_same_v<Policy, wisp::belady>;

/// Whether the pager arms run the built-in policy spelt `name`.
[[nodiscard]] inline bool is_pager_arm_policy(std::string_view name) {
  return !wisp::builtin_policy_name(name).empty() &&
         wisp::visit_policy(name,
                            []<class P>(std::type_identity<P>) { return pager_arm_policy<P>; });
}

/// Eviction policies of the pager arms, in `wisp::builtin_policy_names`' order.
[[nodiscard]] inline std::vector<std::string_view> policy_names() {
  std::vector<std::string_view> out;
  for (const std::string_view p : wisp::builtin_policy_names) {
    if (is_pager_arm_policy(p)) {
      out.push_back(p);
    }
  }
  return out;
}
/// The valid policy names, for messages.
[[nodiscard]] inline std::string policy_list() {
  std::string out;
  for (const std::string_view p : policy_names()) {
    out += std::string(p) + ", ";
  }
  return out + "or least-stale";
}
/// The policy's canonical name (`-` read as `_`, as `wisp::builtin_policy_name` does), or
/// nullopt when the pager arms do not run it.
[[nodiscard]] inline std::optional<std::string> canonical_policy(std::string_view name) {
  if (!is_pager_arm_policy(name)) {
    return std::nullopt;
  }
  return std::string(wisp::builtin_policy_name(name));
}

/// @brief The residency object of an arm. The policy is chosen by name here, at the edge.
/// @throws wisp::logic_error on an unknown policy name.
[[nodiscard]] inline std::unique_ptr<residency> make_residency(arm_kind arm,
                                                               std::string_view policy) {
  switch (arm) {
    case arm_kind::full:
      return std::make_unique<full_residency>();
    case arm_kind::layer_offload:
      return std::make_unique<layer_offload_residency>();
    case arm_kind::on_demand:
      return std::make_unique<on_demand_residency>();
    case arm_kind::static_hot:
      return std::make_unique<static_hot_residency>();
    case arm_kind::tiered:
      return std::make_unique<tiered_residency>();
    case arm_kind::llama_cpp_cache:
      return std::make_unique<llama_cpp_residency>();
    case arm_kind::cpu_experts:
      return std::make_unique<cpu_experts_residency>();
    case arm_kind::cpu_moe_layers:
      return std::make_unique<cpu_moe_layers_residency>();
    default:
      break;
  }
  if (!is_pager_arm_policy(policy)) {
    WISP_FAIL(wisp::logic_error, "unknown policy '", policy, "' (valid: ", policy_list(), ")");
  }
  return wisp::visit_policy(policy,
                            [arm]<class P>(std::type_identity<P>) -> std::unique_ptr<residency> {
                              if constexpr (pager_arm_policy<P>) {
                                switch (arm) {
                                  case arm_kind::pager_plan:
                                    return std::make_unique<planned_pager_residency<P>>();
                                  case arm_kind::pager_dynamic:
                                    return std::make_unique<dynamic_pager_residency<P>>();
                                  case arm_kind::pager_prefetch:
                                    return std::make_unique<prefetch_pager_residency<P>>();
                                  case arm_kind::pager_zip:
                                    return std::make_unique<zip_pager_residency<P>>();
                                  case arm_kind::pager_hybrid:
                                    return std::make_unique<hybrid_pager_residency<P>>();
                                  default:
                                    return std::make_unique<pager_residency<P>>();
                                }
                              } else {
                                return nullptr;  // not reached: refused above
                              }
                            });
}

/// How the device of a run charges compute (device.hpp).
[[nodiscard]] inline compute_charges charges_of(const engine_options& o) {
  return {o.device, o.clock, o.host_measured, o.host_thread_flops};
}

/// The smallest budget where `full` fits: every expert plus the KV floor of `max_running`
/// sessions of the longest evaluated context.
[[nodiscard]] inline std::uint64_t full_fit_budget(const model_config& c, const workload& w,
                                                   std::int32_t max_running) {
  return c.all_expert_bytes() +
         workload_floor(w.evaluated, max_running).bytes(alloc_spec(c)).count();
}

/// @brief Serves the warm-up sessions once, every expert resident, and records their routing.
[[nodiscard]] inline warmup_log record_warmup(const model_weights& w, const workload& wl,
                                              const engine_options& opt) {
  warmup_log log;
  log.sessions = wl.warmup;
  log.tokens = wisp::routing_trace(wisp::moe_shape{w.cfg.layers, w.cfg.experts, w.cfg.top_k});
  engine_options o = opt;
  o.arm = arm_kind::full;
  const wisp::model_spec spec = alloc_spec(w.cfg);
  const wisp::admission_floor floor = workload_floor(wl.warmup, o.max_running);
  device dev(w, o.link, charges_of(o));
  full_residency arm;
  const warmup_log none;
  const arm_context ctx{
      w.cfg, o,         spec, wisp::byte_size{w.cfg.all_expert_bytes() + floor.bytes(spec).count()},
      floor, wl.warmup, none, dev};
  const memory_plan m = arm.setup(ctx);
  serving_loop loop(w, o, dev, arm, opt.routing == routing_source::trace ? &wl.trace : nullptr,
                    &log);
  arm_result ignored;
  loop.serve(wl.warmup, m.kv_blocks, ignored);
  return log;
}

/// @brief Runs one arm (`opt.arm`, `opt.policy`) over `wl.evaluated` after replaying `warmup`.
/// An arm that does not fit the budget comes back `feasible = false` with the reason in `note`.
/// @throws wisp::logic_error on an unknown policy, forced resizes for an arm that is not a pager
///   arm, a forced cap that does not fit, or an invalid `--cap` / `--hot`.
[[nodiscard]] inline arm_result run_arm(const model_weights& w, const engine_options& opt,
                                        const workload& wl, const warmup_log& warmup) {
  WISP_EXPECTS(opt.forced_resizes.empty() || is_pager(opt.arm),
               "forced resizes need a pager arm, not ", arm_name(opt.arm));
  arm_result res;
  res.name = std::string(arm_name(opt.arm));
  res.budget = opt.budget_bytes;
  std::unique_ptr<residency> arm = make_residency(opt.arm, opt.policy);
  if (is_pager(opt.arm)) {
    res.policy = *canonical_policy(opt.policy);
  }
  const bool compressed = opt.arm == arm_kind::pager_zip || opt.arm == arm_kind::tiered;
  if (compressed) {
    res.decode_rate = opt.decode_bytes_per_second;
  }
  std::shared_ptr<const zip_masters> zip = opt.zip;
  if (compressed && !zip) {
    zip = std::make_shared<const zip_masters>(w);
  }
  device dev(w, opt.link, charges_of(opt));
  const wisp::model_spec spec = alloc_spec(w.cfg);
  const arm_context ctx{w.cfg,
                        opt,
                        spec,
                        wisp::byte_size{opt.budget_bytes},
                        workload_floor(wl.evaluated, opt.max_running),
                        wl.evaluated,
                        warmup,
                        dev,
                        zip.get()};
  memory_plan m;
  try {
    m = arm->setup(ctx);
  } catch (const wisp::infeasible_error& e) {
    res.feasible = false;
    res.note = std::string("infeasible: ") + e.what();
    return res;
  }
  res.cap = m.rows;
  res.note = m.note;
  serving_loop loop(w, opt, dev, *arm, opt.routing == routing_source::trace ? &wl.trace : nullptr);
  loop.replay(warmup);
  loop.serve(wl.evaluated, m.kv_blocks, res);
  return res;
}

}  // namespace wisp_engine
