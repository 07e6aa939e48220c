// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Device-side gather of routed expert ids through an expert map: `slot[i] = map[id[i]]`.
///
/// This is what a fused-MoE kernel that takes slot indices (instead of an `expert_map`) needs after
/// the pager has placed the experts. `remap_topk` is written against Thrust, so it runs on any
/// Thrust device system: CUDA on a GPU, or CPP/OMP on the host (how CI tests it without a GPU).
/// `wisp::cuda::launch_remap` (`<wisp/cuda/kernels.cuh>`) is the plain kernel over the same
/// rule, checked against `remap_topk` on a GPU.
/// @code
/// thrust::device_vector<std::int32_t> map(E, -1), ids = ..., slots(ids.size());
/// wisp::cuda::remap_topk(thrust::device, ids.begin(), ids.end(),
///                        thrust::raw_pointer_cast(map.data()), E, slots.begin());
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/core/topk.hpp>

#include <thrust/transform.h>

#include <cstdint>

namespace wisp::cuda {

/// Slot value of an expert that is not resident (the vLLM/EP convention: kernels drop it).
inline constexpr std::int32_t not_resident = -1;
/// Slot value written for an expert id outside `[0, experts)`: distinct from `not_resident`, so a
/// caller can detect a corrupt router output instead of silently dropping the token's expert.
inline constexpr std::int32_t invalid_expert = -2;

/// @brief Maps one expert id (`int32` or `int64`) to its slot. Trivially copyable; usable in
/// kernels (the element rule of `remap_topk` and of the remap kernel in `<wisp/cuda/kernels.cuh>`).
struct expert_to_slot {
  const std::int32_t* map;
  std::int32_t experts;

  template <topk_id Id>
  WISP_HOST_DEVICE std::int32_t operator()(Id id) const noexcept {
    return (id >= 0 && id < experts) ? map[id] : invalid_expert;
  }
};

/// @brief Writes `map[id]` for every routed id in `[first, last)` to `out`.
///
/// @param policy  a Thrust execution policy (`thrust::device`, `thrust::cuda::par.on(stream)`,
///                `thrust::host`, ...); `map` must be readable by that system.
/// @param map     `int32[experts]`: the slot of each resident expert, `not_resident` otherwise.
/// @return the end of the output range.
/// @throws wisp::logic_error if `experts` is negative or `map` is null while the range is not
///         empty. Ids outside `[0, experts)` yield `invalid_expert`; they never read out of bounds.
/// Complexity: one pass, O(last - first). Thread safety: as the underlying Thrust algorithm.
template <class Policy, class InputIt, class OutputIt>
OutputIt remap_topk(const Policy& policy, InputIt first, InputIt last, const std::int32_t* map,
                    std::int32_t experts, OutputIt out) {
  WISP_EXPECTS(experts >= 0, "experts must be >= 0, got ", experts);
  WISP_EXPECTS(map != nullptr || first == last, "expert map is null");
  return thrust::transform(policy, first, last, out, expert_to_slot{map, experts});
}

}  // namespace wisp::cuda
