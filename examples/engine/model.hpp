// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The example engine's model: a small decoder-only MoE transformer (token embedding,
/// RMSNorm, multi-head attention with RoPE over a paged KV cache, MoE FFN with a softmax top-k
/// router, LM head), bf16 weights generated from a seed, fp32 accumulation, and the CPU reference
/// fused-MoE kernel that models `wisp::fused_moe_kernel`.
///
/// Every per-token computation depends only on that token's row and its KV history, in a fixed
/// order, so a token's logits are the same bytes whatever batch it is computed in (prefill or
/// decode, alone or with other sessions) and whatever slot its experts occupy. That is what lets
/// the engine check that paging never changes the output.
#pragma once

#include "index.hpp"

#include <wisp/core/error.hpp>
#include <wisp/kernel/fused_moe.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace wisp_engine {

/// bf16 <-> fp32 (round to nearest even; no NaNs are generated here).
[[nodiscard]] inline float bf16_to_float(std::uint16_t b) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}
[[nodiscard]] inline std::uint16_t float_to_bf16(float f) noexcept {
  const auto u = std::bit_cast<std::uint32_t>(f);
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/// @brief Shape of the model. The defaults make expert weights 99% of the model's bytes (432 MiB
/// of experts of 864 KiB each, 4.75 MiB of dense weights), and one expert's copy over PCIe 4.0
/// about 5x the device time of one token's MoE on an RTX 4090, as for Qwen3-30B-A3B (9 MiB
/// experts, top-8): below that size a copy is mostly its fixed latency (docs/engine.md).
struct model_config {
  std::int32_t layers = 8;          ///< decoder layers, each with an MoE FFN
  std::int32_t experts = 64;        ///< routed experts per layer
  std::int32_t top_k = 6;           ///< experts per token
  std::int32_t hidden = 256;        ///< model width
  std::int32_t intermediate = 576;  ///< width of one expert's FFN
  std::int32_t heads = 4;           ///< attention heads (head_dim = hidden / heads)
  std::int32_t vocab = 512;
  std::int32_t block_tokens = 16;  ///< tokens per KV block
  std::uint64_t seed = 1;

  void validate() const {
    WISP_EXPECTS(layers >= 1 && experts >= 1 && top_k >= 1 && top_k <= experts && hidden >= 2 &&
                     intermediate >= 1 && heads >= 1 && hidden % heads == 0 &&
                     (hidden / heads) % 2 == 0 && vocab >= 2 && block_tokens >= 1,
                 "model_config: invalid shape (layers ", layers, ", experts ", experts, ", top_k ",
                 top_k, ", hidden ", hidden, ", intermediate ", intermediate, ", heads ", heads,
                 ", vocab ", vocab, ", block_tokens ", block_tokens, ")");
  }
  [[nodiscard]] std::int32_t head_dim() const noexcept { return hidden / heads; }
  /// bf16 bytes of one expert: gate [I x H], up [I x H], down [H x I].
  [[nodiscard]] std::size_t expert_bytes() const noexcept {
    return std::size_t{3} * idx(hidden) * idx(intermediate) * 2;
  }
  /// fp32 K and V of one token in every layer.
  [[nodiscard]] std::size_t kv_floats_per_token() const noexcept {
    return std::size_t{2} * idx(layers) * idx(hidden);
  }
  [[nodiscard]] std::size_t kv_bytes_per_token() const noexcept {
    return kv_floats_per_token() * sizeof(float);
  }
  /// Bytes of every expert of every layer.
  [[nodiscard]] std::size_t all_expert_bytes() const noexcept {
    return expert_bytes() * idx(experts) * idx(layers);
  }
};

namespace detail {
/// Uniform in [-scale, scale), a pure function of (seed, tensor, index).
[[nodiscard]] inline float uniform_weight(std::uint64_t seed, std::uint64_t tensor, std::uint64_t i,
                                          float scale) noexcept {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull ^ (tensor + 1) * 0xBF58476D1CE4E5B9ull ^
                    (i + 1) * 0x94D049BB133111EBull;
  z ^= z >> 30;
  z *= 0xBF58476D1CE4E5B9ull;
  z ^= z >> 27;
  z *= 0x94D049BB133111EBull;
  z ^= z >> 31;
  const double u = real(z >> 11) * (1.0 / 9007199254740992.0);  // [0, 1)
  return static_cast<float>((2.0 * u - 1.0) * scale);
}

inline void fill_bf16(std::vector<std::uint16_t>& w, std::size_t n, std::uint64_t seed,
                      std::uint64_t tensor, float scale) {
  w.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    w[i] = float_to_bf16(uniform_weight(seed, tensor, i, scale));
  }
}
}  // namespace detail

/// sum_i row[i] x[i] over a bf16 row of `in` values, in one fixed order (8 running sums).
[[nodiscard]] inline float dot_bf16(const std::uint16_t* row, const float* x,
                                    std::int32_t in) noexcept {
  float acc[8] = {};
  std::int32_t i = 0;
  for (; i + 8 <= in; i += 8) {
    for (std::int32_t u = 0; u < 8; ++u) {
      acc[u] += bf16_to_float(row[i + u]) * x[i + u];
    }
  }
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < in; ++i) {
    s += bf16_to_float(row[i]) * x[i];
  }
  return s;
}

/// y[o] = sum_i W[o, i] x[i] for a row-major bf16 `[out x in]` matrix. Same order for every call.
inline void matvec_bf16(const std::uint16_t* w, const float* x, float* y, std::int32_t out,
                        std::int32_t in) noexcept {
  for (std::int32_t o = 0; o < out; ++o) {
    y[o] = dot_bf16(w + idx(o) * idx(in), x, in);
  }
}

/// `matvec_bf16` of one matrix for `n` vectors: `ys[v] = W xs[v]`, each row read once for all of
/// them (the matrix streams from memory once, not `n` times). Every `ys[v]` is the bytes
/// `matvec_bf16(w, xs[v], ...)` writes.
inline void matvec_bf16_many(const std::uint16_t* w, std::span<const float* const> xs,
                             std::span<float* const> ys, std::int32_t out,
                             std::int32_t in) noexcept {
  for (std::int32_t o = 0; o < out; ++o) {
    const std::uint16_t* row = w + idx(o) * idx(in);
    for (std::size_t v = 0; v < xs.size(); ++v) {
      ys[v][o] = dot_bf16(row, xs[v], in);
    }
  }
}

inline void rms_norm(const float* x, float* y, std::int32_t n) noexcept {
  double ss = 0;
  for (std::int32_t i = 0; i < n; ++i) {
    ss += static_cast<double>(x[i]) * x[i];
  }
  const auto inv = static_cast<float>(1.0 / std::sqrt(ss / n + 1e-6));
  for (std::int32_t i = 0; i < n; ++i) {
    y[i] = x[i] * inv;
  }
}

/// @brief The CPU reference fused-MoE kernel (SwiGLU experts in bf16, fp32 accumulation).
///
/// Models `wisp::fused_moe_kernel`: reads expert `e` from row `expert_map[e]` of `experts`, skips
/// hidden experts, overwrites `out`. It also runs in two stages, which is how the engine uses it:
/// `expert_outputs` writes each visible position's expert output `expert(x_t)` into a
/// `[tokens x k x hidden]` buffer, and `combine` sums every position in `j` order. A layer whose
/// experts are split over several launches (expert groups, or resident experts first while the
/// misses are copied) then produces the same bytes as one launch: a fused kernel that sums partial
/// outputs per launch would round differently for every grouping. The fused `operator()` runs the
/// same arithmetic in the same order. Owns scratch sized at construction (no allocation per call).
/// Not thread-safe (one kernel object per thread).
class cpu_reference_moe {
 public:
  cpu_reference_moe(std::int32_t hidden, std::int32_t intermediate)
      : hidden_(hidden),
        inter_(intermediate),
        act_(idx(intermediate) * 2),
        acc_(idx(hidden)),
        tmp_(idx(hidden)) {}

  /// The fused kernel of the `wisp::fused_moe_kernel` contract.
  void operator()(const wisp::fused_moe_args& a) {
    check(a);
    for (std::int32_t t = 0; t < a.tokens; ++t) {
      std::fill(acc_.begin(), acc_.end(), 0.0f);
      for (std::int32_t j = 0; j < a.top_k; ++j) {
        const std::size_t pos = idx(t) * a.top_k + j;
        if (expert(a, t, j, tmp_.data())) {
          accumulate(acc_.data(), a.topk_weights[pos], tmp_.data(), hidden_);
        }
      }
      std::memcpy(a.out.data() + idx(t) * hidden_, acc_.data(), acc_.size() * sizeof(float));
    }
  }

  /// Stage 1: for every position `(t, j)` whose expert is visible, writes `expert(x_t)` to
  /// `positions[(t * k + j) * hidden ...]`; other positions are not touched. `a.out` is unused.
  /// An expert's positions are computed together (its weights read once for all of them), each
  /// with the arithmetic of the fused kernel, so the bytes are the same.
  /// @returns the number of positions written.
  std::int64_t expert_outputs(const wisp::fused_moe_args& a, std::span<float> positions) {
    check(a);
    WISP_EXPECTS(positions.size() == a.topk_ids.size() * idx(hidden_),
                 "cpu_reference_moe: positions holds ", positions.size(), " values, need ",
                 a.topk_ids.size() * idx(hidden_));
    // The visible positions grouped by slot, in position order within a slot.
    first_.assign(a.experts.rows, -1);
    next_.assign(a.topk_ids.size(), -1);
    last_.assign(a.experts.rows, -1);
    std::int64_t written = 0;
    for (std::int32_t p = 0; p < count(a.topk_ids); ++p) {
      const std::int32_t slot = at(a.expert_map, at(a.topk_ids, p));
      if (slot < 0) {
        continue;
      }
      (at(last_, slot) < 0 ? at(first_, slot) : at(next_, at(last_, slot))) = p;
      at(last_, slot) = p;
      ++written;
    }
    const std::size_t mat = idx(hidden_) * idx(inter_);
    for (std::size_t slot = 0; slot < first_.size(); ++slot) {
      xs_.clear();
      ys_.clear();
      for (std::int32_t p = first_[slot]; p >= 0; p = at(next_, p)) {
        xs_.push_back(a.hidden.data() + idx(p / a.top_k) * idx(hidden_));
        ys_.push_back(positions.data() + idx(p) * idx(hidden_));
      }
      if (xs_.empty()) {
        continue;
      }
      const auto* w = reinterpret_cast<const std::uint16_t*>(a.experts.row(slot));
      batch_.resize(xs_.size() * 2 * idx(inter_));
      gates_.clear();
      ups_.clear();
      for (std::size_t v = 0; v < xs_.size(); ++v) {
        gates_.push_back(batch_.data() + v * 2 * idx(inter_));
        ups_.push_back(gates_.back() + inter_);
      }
      matvec_bf16_many(w, xs_, gates_, inter_, hidden_);
      matvec_bf16_many(w + mat, xs_, ups_, inter_, hidden_);
      for (std::size_t v = 0; v < xs_.size(); ++v) {
        swiglu(gates_[v], ups_[v]);
      }
      acts_.assign(gates_.begin(), gates_.end());
      matvec_bf16_many(w + 2 * mat, acts_, ys_, hidden_, inter_);
    }
    return written;
  }

  /// Stage 2: `out[t] = sum_j weights[t, j] * positions[t, j]`, in `j` order, for `tokens` rows.
  void combine(std::span<const float> weights, std::span<const float> positions,
               std::span<float> out, std::int32_t tokens, std::int32_t k) {
    for (std::int32_t t = 0; t < tokens; ++t) {
      std::fill(acc_.begin(), acc_.end(), 0.0f);
      for (std::int32_t j = 0; j < k; ++j) {
        const std::size_t pos = idx(t) * k + j;
        accumulate(acc_.data(), weights[pos], positions.data() + pos * hidden_, hidden_);
      }
      std::memcpy(out.data() + idx(t) * hidden_, acc_.data(), acc_.size() * sizeof(float));
    }
  }

 private:
  void check(const wisp::fused_moe_args& a) const {
    WISP_EXPECTS(a.hidden_dim == hidden_, "cpu_reference_moe: hidden_dim ", a.hidden_dim,
                 " but the kernel was built for ", hidden_);
  }
  static void accumulate(float* acc, float weight, const float* y, std::int32_t n) noexcept {
    for (std::int32_t o = 0; o < n; ++o) {
      acc[o] += weight * y[o];
    }
  }
  /// `y = expert(x_t)` for position (t, j) if its expert is visible. @returns whether it was.
  bool expert(const wisp::fused_moe_args& a, std::int32_t t, std::int32_t j, float* y) {
    const std::int32_t e = a.topk_ids[idx(t) * a.top_k + j];
    const std::int32_t slot = a.expert_map[idx(e)];
    if (slot < 0) {
      return false;
    }
    const std::size_t mat = idx(hidden_) * idx(inter_);
    const float* x = a.hidden.data() + idx(t) * hidden_;
    const auto* w = reinterpret_cast<const std::uint16_t*>(a.experts.row(idx(slot)));
    float* gate = act_.data();
    float* up = act_.data() + inter_;
    matvec_bf16(w, x, gate, inter_, hidden_);
    matvec_bf16(w + mat, x, up, inter_, hidden_);
    swiglu(gate, up);
    matvec_bf16(w + 2 * mat, gate, y, hidden_, inter_);
    return true;
  }
  /// gate[i] = silu(gate[i]) * up[i].
  void swiglu(float* gate, const float* up) const noexcept {
    for (std::int32_t i = 0; i < inter_; ++i) {
      const float g = gate[i];
      gate[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
  }

  std::int32_t hidden_;
  std::int32_t inter_;
  std::vector<float> act_;
  std::vector<float> acc_;
  std::vector<float> tmp_;
  // expert_outputs' scratch: positions linked per slot, one slot's vectors and activations
  std::vector<std::int32_t> first_, next_, last_;
  std::vector<const float*> xs_, acts_;
  std::vector<float*> ys_, gates_, ups_;
  std::vector<float> batch_;
};
static_assert(wisp::fused_moe_kernel<cpu_reference_moe>);

/// @brief Dense weights (everything but the experts) and the host masters of every expert.
struct model_weights {
  model_config cfg;
  std::vector<std::uint16_t> embedding;  ///< [vocab x H]
  std::vector<std::uint16_t> lm_head;    ///< [vocab x H]
  struct layer {
    std::vector<std::uint16_t> wqkv;     ///< [3H x H]
    std::vector<std::uint16_t> wo;       ///< [H x H]
    std::vector<std::uint16_t> router;   ///< [E x H]
    std::vector<std::uint16_t> experts;  ///< host master: [E x expert_bytes/2]
  };
  std::vector<layer> layers;

  /// Generates every tensor from `cfg.seed`. O(parameters).
  explicit model_weights(const model_config& c) : cfg(c) {
    cfg.validate();
    const auto H = idx(cfg.hidden);
    const auto I = idx(cfg.intermediate);
    const auto V = idx(cfg.vocab);
    const auto E = idx(cfg.experts);
    const float sh = 1.0f / std::sqrt(static_cast<float>(H));
    const float si = 1.0f / std::sqrt(static_cast<float>(I));
    detail::fill_bf16(embedding, V * H, cfg.seed, 0, 1.0f);
    detail::fill_bf16(lm_head, V * H, cfg.seed, 1, sh);
    layers.resize(idx(cfg.layers));
    for (std::size_t l = 0; l < layers.size(); ++l) {
      const std::uint64_t base = 16 * (l + 1);
      detail::fill_bf16(layers[l].wqkv, 3 * H * H, cfg.seed, base + 0, sh);
      detail::fill_bf16(layers[l].wo, H * H, cfg.seed, base + 1, sh);
      detail::fill_bf16(layers[l].router, E * H, cfg.seed, base + 2, 4.0f * sh);
      auto& ex = layers[l].experts;
      ex.resize(E * 3 * H * I);
      for (std::size_t e = 0; e < E; ++e) {
        std::uint16_t* p = ex.data() + e * 3 * H * I;
        for (std::size_t i = 0; i < 3 * H * I; ++i) {
          const float scale = i < 2 * H * I ? sh : si;
          p[i] = float_to_bf16(detail::uniform_weight(cfg.seed, base + 3 + e * 4, i, scale));
        }
      }
    }
  }
  /// Host master bytes of expert `e` of layer `l`.
  [[nodiscard]] const std::byte* master(std::int32_t l, std::int32_t e) const noexcept {
    return reinterpret_cast<const std::byte*>(layers[idx(l)].experts.data()) +
           idx(e) * cfg.expert_bytes();
  }
};

/// Router: softmax over `E` logits into `probs`, then the top-k ids (ties to the lower id).
inline void route_topk(std::span<const float> logits, std::int32_t k, std::int32_t* ids,
                       std::vector<float>& probs) {
  const auto E = count(logits);
  probs.assign(logits.begin(), logits.end());
  const float mx = *std::max_element(probs.begin(), probs.end());
  double sum = 0;
  for (float& p : probs) {
    p = std::exp(p - mx);
    sum += p;
  }
  for (float& p : probs) {
    p = static_cast<float>(p / sum);
  }
  for (std::int32_t j = 0; j < k; ++j) {
    std::int32_t best = -1;
    for (std::int32_t e = 0; e < E; ++e) {
      bool taken = false;
      for (std::int32_t q = 0; q < j; ++q) {
        taken = taken || ids[q] == e;
      }
      if (!taken && (best < 0 || probs[idx(e)] > probs[idx(best)])) {
        best = e;
      }
    }
    ids[j] = best;
  }
}

/// Renormalised router probabilities of the given ids (used for both routing sources).
inline void gate_weights(const std::vector<float>& probs, const std::int32_t* ids, std::int32_t k,
                         float* weights) noexcept {
  float s = 0;
  for (std::int32_t j = 0; j < k; ++j) {
    s += probs[idx(ids[j])];
  }
  for (std::int32_t j = 0; j < k; ++j) {
    weights[j] = probs[idx(ids[j])] / s;
  }
}

}  // namespace wisp_engine
