// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Umbrella header: the whole core of wisp (everything under include/wisp/, no CUDA).
///
/// Standard library only. Including single headers instead keeps compile times down; the
/// `headers.umbrella_is_complete` test keeps this list in step with the tree.
///
/// Left out on purpose (experiment harnesses, not library API; include them directly):
///   <wisp/sim/split_evaluation.hpp>
#pragma once

// clang-format off
#include <wisp/version.hpp>
#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/core/enum_names.hpp>
#include <wisp/core/executor.hpp>
#include <wisp/core/bf16.hpp>
#include <wisp/core/expert_tensor_view.hpp>
#include <wisp/core/ids.hpp>
#include <wisp/core/model.hpp>
#include <wisp/core/scope.hpp>
#include <wisp/core/shape.hpp>
#include <wisp/core/topk.hpp>

#include <wisp/trace/routing_trace.hpp>
#include <wisp/trace/wtrace.hpp>
#include <wisp/trace/esft.hpp>
#include <wisp/trace/import.hpp>
#include <wisp/trace/jsonl.hpp>
#include <wisp/trace/synthetic.hpp>

#include <wisp/reuse/reuse_distance.hpp>
#include <wisp/reuse/histogram.hpp>
#include <wisp/reuse/histogram_io.hpp>
#include <wisp/reuse/scoped_counter.hpp>
#include <wisp/reuse/decayed_histogram.hpp>
#include <wisp/reuse/shards.hpp>
#include <wisp/reuse/trace_profile.hpp>

#include <wisp/cache/eviction_policy.hpp>
#include <wisp/cache/lru.hpp>
#include <wisp/cache/fifo.hpp>
#include <wisp/cache/lfu.hpp>
#include <wisp/cache/lfru.hpp>
#include <wisp/cache/least_stale.hpp>
#include <wisp/cache/fld.hpp>
#include <wisp/cache/belady.hpp>
#include <wisp/cache/decayed_frequency.hpp>
#include <wisp/cache/predicted_next_use.hpp>
#include <wisp/cache/reuse_probability.hpp>
#include <wisp/cache/log_bins.hpp>
#include <wisp/cache/learned_belady.hpp>
#include <wisp/cache/visit_policy.hpp>
#include <wisp/cache/policies.hpp>
#include <wisp/cache/slot_cache.hpp>
#include <wisp/cache/per_layer_cache.hpp>

#include <wisp/pager/group_planner.hpp>
#include <wisp/pager/types.hpp>
#include <wisp/pager/pager.hpp>
#include <wisp/pager/resize_layer_rows.hpp>
#include <wisp/pager/reroute_table.hpp>
#include <wisp/pager/host_expert_store.hpp>
#include <wisp/pager/miss_policy.hpp>
#include <wisp/pager/llama_cpp_cache.hpp>
#include <wisp/pager/hybrid.hpp>

#include <wisp/predict/routing_predictor.hpp>
#include <wisp/predict/coactivation.hpp>
#include <wisp/predict/baselines.hpp>
#include <wisp/predict/personal.hpp>
#include <wisp/predict/evaluate.hpp>
#include <wisp/predict/right_size.hpp>
#include <wisp/predict/prefetch.hpp>

#include <wisp/vmm/vmm_backend.hpp>
#include <wisp/vmm/posix_vmm.hpp>
#include <wisp/vmm/page_pool.hpp>
#include <wisp/vmm/expert_tensor_view.hpp>
#include <wisp/vmm/virtual_expert_tensor.hpp>
#include <wisp/vmm/adapter_layout.hpp>

#include <wisp/kernel/bf16.hpp>
#include <wisp/kernel/swiglu.hpp>
#include <wisp/kernel/fused_moe.hpp>
#include <wisp/kernel/reference_moe.hpp>
#include <wisp/kernel/host_swiglu.hpp>

#include <wisp/alloc/model_spec.hpp>
#include <wisp/alloc/model_file.hpp>
#include <wisp/alloc/units.hpp>
#include <wisp/alloc/split.hpp>
#include <wisp/alloc/cost_model.hpp>
#include <wisp/alloc/configurator.hpp>
#include <wisp/alloc/controller.hpp>
#include <wisp/alloc/resize.hpp>
#include <wisp/alloc/kv_workload.hpp>

#include <wisp/parallel/placement.hpp>
#include <wisp/parallel/rank_pager.hpp>
#include <wisp/parallel/replica_choice.hpp>
#include <wisp/parallel/planner.hpp>

#include <wisp/sim/simulate.hpp>
#include <wisp/sim/trace_sim.hpp>
#include <wisp/sim/hindsight.hpp>
#include <wisp/sim/timeline_sim.hpp>
#include <wisp/sim/ep_sim.hpp>

#include <wisp/transfer/timeline.hpp>
#include <wisp/transfer/row_layout.hpp>
#include <wisp/transfer/copy_engine.hpp>
#include <wisp/transfer/device_profile.hpp>

#include <wisp/compress/bf16.hpp>
#include <wisp/compress/exponent_coder.hpp>
#include <wisp/compress/huffman_code.hpp>
#include <wisp/compress/huffman_lane.hpp>
#include <wisp/compress/huffman.hpp>
#include <wisp/compress/compressed_bf16.hpp>
#include <wisp/compress/safetensors.hpp>
#include <wisp/compress/archive.hpp>
#include <wisp/compress/expert_store.hpp>

#include <wisp/tiered/tier_model.hpp>
#include <wisp/tiered/tiered_cache.hpp>
#include <wisp/tiered/affinity_scheduler.hpp>
#include <wisp/sim/tiered_sim.hpp>
// clang-format on
