// SPDX-License-Identifier: Apache-2.0
// The router of the GPU graph test's toy model, as one host/device rule: logits are bf16 router
// rows dotted with the token (fma chains), the k largest win (ties to the lower expert, best
// first), and their softmax (exp_portable) is the gate weight. The same bits on host and device.
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/kernel/bf16.hpp>
#include <wisp/kernel/swiglu.hpp>

#include <cstdint>

namespace wisp::cuda::testing {

inline constexpr std::int32_t max_toy_experts = 64;

WISP_HOST_DEVICE inline void route_token(const bf16* router, const float* x, std::int32_t experts,
                                         std::int32_t hidden, std::int32_t k, std::int32_t* ids,
                                         float* weights) {
  float logits[max_toy_experts];
  for (std::int32_t e = 0; e < experts; ++e) {
    logits[e] = swiglu_dot(router + static_cast<std::size_t>(e) * static_cast<std::size_t>(hidden),
                           x, hidden);
  }
  for (std::int32_t j = 0; j < k; ++j) {
    std::int32_t best = -1;
    for (std::int32_t e = 0; e < experts; ++e) {
      bool taken = false;
      for (std::int32_t i = 0; i < j; ++i) {
        taken = taken || ids[i] == e;
      }
      if (!taken && (best < 0 || logits[e] > logits[best])) {
        best = e;
      }
    }
    ids[j] = best;
  }
  const float top = logits[ids[0]];
  float sum = 0.0f;
  for (std::int32_t j = 0; j < k; ++j) {
    weights[j] = wisp::detail::exp_portable(wisp::detail::add_rn(logits[ids[j]], -top));
    sum = wisp::detail::add_rn(sum, weights[j]);
  }
  for (std::int32_t j = 0; j < k; ++j) {
    weights[j] = wisp::detail::div_rn(weights[j], sum);
  }
}

}  // namespace wisp::cuda::testing
