// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The dense part of one forward pass over a batch of session rows: embeddings,
/// attention with RoPE over the paged KV cache, the router (or a routing trace's ids with the
/// router's gate weights), the ordered combine of the MoE positions, and the LM head.
///
/// The MoE itself is not here: the loop runs it through a residency arm's launches of
/// `cpu_reference_moe::expert_outputs` into `positions`, then calls `combine`.
#pragma once

#include "device.hpp"
#include "index.hpp"
#include "model.hpp"
#include "scheduler.hpp"

#include <wisp/kernel/fused_moe.hpp>
#include <wisp/trace/routing_trace.hpp>
#include <wisp/vmm/virtual_expert_tensor.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace wisp_engine {

inline std::uint64_t fnv(std::uint64_t h, const void* p, std::size_t n) noexcept {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) {
    h = (h ^ b[i]) * 1099511628211ull;
  }
  return h;
}

/// @brief Activations of one forward and the dense math on them. Not thread-safe.
class dense_forward {
 public:
  /// `trace`: route by its ids (request offset + position is the step); null: the router's.
  dense_forward(const model_weights& w, const wisp::routing_trace* trace)
      : w_(w), cfg_(w.cfg), trace_(trace), kernel_(w.cfg.hidden, w.cfg.intermediate) {
    const std::int32_t d = cfg_.head_dim();
    for (std::int32_t i = 0; i < d / 2; ++i) {
      rope_freq_.push_back(std::pow(10000.0, -2.0 * i / d));
    }
  }

  /// Lays out the rows of `plan` (positions `[kv_len, len)` of each session), zeroes the state.
  void begin(const batch_plan& plan, kv_block_pool& kv) {
    kv_ = &kv;
    rows_.clear();
    row_positions_.clear();
    for (session* s : plan.sessions) {
      for (std::int32_t p = s->kv_len; p < s->len(); ++p) {
        rows_.push_back({s, p});
        row_positions_.push_back(static_cast<std::uint32_t>(p));
      }
    }
    history_ = 0;
    for (const row& r : rows_) {
      history_ += idx(r.pos) + 1;
    }
    const std::size_t T = rows_.size(), H = hidden(), K = topk();
    x_.assign(T * H, 0.0f);
    norm_.resize(T * H);
    qkv_.resize(T * 3 * H);
    attn_.resize(T * H);
    moe_.resize(T * H);
    ids_.resize(T * K);
    gates_.resize(T * K);
    positions_.resize(T * K * H);
  }
  [[nodiscard]] std::int32_t tokens() const noexcept { return count(rows_); }
  /// Each row's token position in its session, in row order (`tokens()` entries).
  [[nodiscard]] std::span<const std::uint32_t> row_positions() const noexcept {
    return row_positions_;
  }

  // What each op reads and computes, for a device profile's roofline (device.hpp). Weights are
  // BF16 (2 bytes), activations and KV fp32 (4 bytes), as the engine holds them.
  [[nodiscard]] op_work embed_work() const noexcept {
    return {tokens(), real(rows_.size() * hidden()) * (2 + 4), 0};
  }
  /// Layer norm, QKV, RoPE, attention over every row's KV history, the output projection and the
  /// router: the layer's dense weights, the K and V read, the activations.
  [[nodiscard]] op_work attention_work() const noexcept {
    const double H = real(cfg_.hidden), T = real(rows_.size()), E = real(cfg_.experts);
    const double weights = 4 * H * H + E * H;
    const double history = real(history_);
    return {tokens(), 2 * weights + 2 * H * 4 * (history + T) + 4 * H * T * 4,
            2 * T * weights + 4 * H * history};
  }
  /// The ordered sum of `k` positions per row and the residual.
  [[nodiscard]] op_work combine_work() const noexcept {
    const double H = real(cfg_.hidden), T = real(rows_.size()), K = real(cfg_.top_k);
    return {tokens(), 4 * H * T * (K + 2), 2 * H * T * K};
  }
  /// The LM head on the rows (at most one per session emits; charged for every row).
  [[nodiscard]] op_work head_work() const noexcept {
    const double H = real(cfg_.hidden), T = real(rows_.size()), V = real(cfg_.vocab);
    return {tokens(), 2 * V * H + 4 * H * T, 2 * T * V * H};
  }
  /// A fused-MoE launch (or the host's share) computing `positions` positions of `experts`
  /// distinct experts: every expert's weights read once, two FLOPs per weight per position.
  [[nodiscard]] op_work moe_work(std::int64_t experts, std::int64_t positions) const noexcept {
    const double bytes = real(cfg_.expert_bytes());
    return {positions, real(experts) * bytes + 2 * real(cfg_.hidden) * real(positions),
            real(positions) * bytes};
  }
  [[nodiscard]] std::span<const std::int32_t> ids() const noexcept { return ids_; }

  void embed() {
    const std::size_t H = hidden();
    for (std::size_t r = 0; r < rows_.size(); ++r) {
      const std::int32_t tok = rows_[r].s->tokens[idx(rows_[r].pos)];
      const std::uint16_t* e = w_.embedding.data() + idx(tok) * H;
      for (std::size_t i = 0; i < H; ++i) {
        x_[r * H + i] = bf16_to_float(e[i]);
      }
    }
  }

  /// Attention of layer `l` (writes the rows' K and V into their blocks), then its routing.
  void attention_and_route(std::int32_t l) {
    attention(l);
    route(l);
  }

  /// Stage 1 of the MoE for one launch (see `cpu_reference_moe::expert_outputs`).
  std::int64_t expert_outputs(const wisp::expert_tensor_view& rows,
                              std::span<const std::int32_t> map) {
    const wisp::fused_moe_args a{norm_, ids_,     gates_,     rows,       map,
                                 moe_,  tokens(), cfg_.top_k, cfg_.hidden};
    return kernel_.expert_outputs(a, positions_);
  }

  /// Stage 2: the ordered sum of every position, added to the residual stream.
  void combine() {
    kernel_.combine(gates_, positions_, moe_, tokens(), cfg_.top_k);
    for (std::size_t i = 0; i < x_.size(); ++i) {
      x_[i] += moe_[i];
    }
  }

  /// Marks every session's positions computed; LM head and greedy token on each session's last
  /// row. @returns the rows that emitted a token.
  std::int32_t head() {
    const std::size_t H = hidden();
    std::int32_t emitted = 0;
    logits_.resize(idx(cfg_.vocab));
    for (std::size_t r = 0; r < rows_.size(); ++r) {
      session* s = rows_[r].s;
      if (rows_[r].pos != s->len() - 1) {
        continue;
      }
      rms_norm(x_.data() + r * H, norm_.data(), cfg_.hidden);
      matvec_bf16(w_.lm_head.data(), norm_.data(), logits_.data(), cfg_.vocab, cfg_.hidden);
      const auto best = static_cast<std::int32_t>(std::max_element(logits_.begin(), logits_.end()) -
                                                  logits_.begin());
      s->logits_hash = fnv(s->logits_hash, logits_.data(), logits_.size() * sizeof(float));
      s->kv_len = s->len();
      s->tokens.push_back(best);
      ++s->generated;
      ++emitted;
    }
    return emitted;
  }

 private:
  struct row {
    session* s;
    std::int32_t pos;
  };
  [[nodiscard]] std::size_t hidden() const noexcept { return idx(cfg_.hidden); }
  [[nodiscard]] std::size_t topk() const noexcept { return idx(cfg_.top_k); }

  [[nodiscard]] float* kv_at(session* s, std::int32_t l, std::int32_t kv, std::int32_t pos) {
    const auto B = idx(cfg_.block_tokens);
    const auto p = idx(pos);
    float* blk = kv_->block(s->blocks[p / B]);
    return blk + (idx(l * 2 + kv) * B + p % B) * hidden();
  }

  void rope(float* v, std::int32_t pos) const {
    const std::int32_t d = cfg_.head_dim();
    for (std::int32_t i = 0; i < d / 2; ++i) {  // the same rotation in every head
      const double theta = pos * rope_freq_[idx(i)];
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

  void attention(std::int32_t l) {
    const std::size_t H = hidden();
    const auto& lw = w_.layers[idx(l)];
    for (std::size_t r = 0; r < rows_.size(); ++r) {
      float* q = qkv_.data() + r * 3 * H;
      rms_norm(x_.data() + r * H, norm_.data() + r * H, cfg_.hidden);
      matvec_bf16(lw.wqkv.data(), norm_.data() + r * H, q, 3 * cfg_.hidden, cfg_.hidden);
      rope(q, rows_[r].pos);
      rope(q + H, rows_[r].pos);
      std::memcpy(kv_at(rows_[r].s, l, 0, rows_[r].pos), q + H, H * sizeof(float));
      std::memcpy(kv_at(rows_[r].s, l, 1, rows_[r].pos), q + 2 * H, H * sizeof(float));
    }
    const std::int32_t d = cfg_.head_dim();
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    for (std::size_t r = 0; r < rows_.size(); ++r) {
      const float* q = qkv_.data() + r * 3 * H;
      const std::int32_t n = rows_[r].pos + 1;
      scores_.resize(idx(n));
      float* const scores = scores_.data();
      float* out = attn_.data() + r * H;
      std::fill(out, out + H, 0.0f);
      for (std::int32_t h = 0; h < cfg_.heads; ++h) {
        float mx = -INFINITY;
        for (std::int32_t p = 0; p < n; ++p) {
          const float* k = kv_at(rows_[r].s, l, 0, p) + h * d;
          float s = 0;
          for (std::int32_t i = 0; i < d; ++i) {
            s += q[h * d + i] * k[i];
          }
          scores[p] = s * scale;
          mx = std::max(mx, s * scale);
        }
        float sum = 0;
        for (std::int32_t p = 0; p < n; ++p) {
          float& s = scores[p];
          s = std::exp(s - mx);
          sum += s;
        }
        for (std::int32_t p = 0; p < n; ++p) {
          const float* v = kv_at(rows_[r].s, l, 1, p) + h * d;
          const float a = scores[p] / sum;
          for (std::int32_t i = 0; i < d; ++i) {
            out[h * d + i] += a * v[i];
          }
        }
      }
      matvec_bf16(lw.wo.data(), out, moe_.data() + r * H, cfg_.hidden, cfg_.hidden);
      for (std::size_t i = 0; i < H; ++i) {
        x_[r * H + i] += moe_[r * H + i];
      }
    }
  }

  void route(std::int32_t l) {
    const std::size_t H = hidden(), K = topk();
    const auto& lw = w_.layers[idx(l)];
    rlogits_.resize(idx(cfg_.experts));
    for (std::size_t r = 0; r < rows_.size(); ++r) {
      rms_norm(x_.data() + r * H, norm_.data() + r * H, cfg_.hidden);
      matvec_bf16(lw.router.data(), norm_.data() + r * H, rlogits_.data(), cfg_.experts,
                  cfg_.hidden);
      std::int32_t* ids = ids_.data() + r * K;
      route_topk(rlogits_, cfg_.top_k, ids, probs_);
      if (trace_ != nullptr) {
        const std::size_t step =
            (rows_[r].s->req.trace_offset + idx(rows_[r].pos)) % trace_->steps();
        for (std::int32_t j = 0; j < cfg_.top_k; ++j) {
          ids[j] = trace_->expert(step, l, j);
        }
      }
      gate_weights(probs_, ids, cfg_.top_k, gates_.data() + r * K);
    }
  }

  const model_weights& w_;
  model_config cfg_;
  const wisp::routing_trace* trace_;
  cpu_reference_moe kernel_;
  kv_block_pool* kv_ = nullptr;
  std::vector<row> rows_;
  std::vector<std::uint32_t> row_positions_;  // rows_[r].pos, as the arms read them
  std::vector<float> x_, norm_, qkv_, attn_, moe_, gates_, scores_, logits_, rlogits_, probs_;
  std::vector<float> positions_;  // [T x k x H] expert outputs of the MoE positions
  std::vector<std::int32_t> ids_;
  std::vector<double> rope_freq_;
  std::size_t history_ = 0;  // KV positions the rows' attention reads, per layer
};

}  // namespace wisp_engine
