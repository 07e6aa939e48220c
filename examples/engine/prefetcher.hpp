// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Predictor-driven next-layer prefetch for the `pager+prefetch` arm: a routing predictor
/// (any `wisp::routing_predictor`; the arm uses WiSP's `wisp::coactivation_predictor`) scores
/// layer `l + 1` from the routing of layers `0 .. l` of every token of the batch,
/// `wisp::choose_prefetch` picks the candidates, and `wisp::pager::prefetch` loads them into the
/// cache.
///
/// Demand first, on a link without priorities: the loop's link is in order, so a prefetch that
/// is still on it when the next layer's call arrives delays that call's own copies (WiSP's
/// negative result). The prefetcher therefore issues only the copies that **end** within the
/// link's idle time while layer `l` computes (`link_window`): it never delays a demand copy, and
/// prefetches only where the link would otherwise sit idle. The warm-up teaches the table (and
/// prefetches nothing); every served forward is learned after it runs (predict, then learn).
#pragma once

#include "device.hpp"
#include "index.hpp"
#include "model.hpp"
#include "residency.hpp"

#include <wisp/pager/pager.hpp>
#include <wisp/predict/coactivation.hpp>
#include <wisp/predict/prefetch.hpp>
#include <wisp/predict/routing_predictor.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace wisp_engine {

/// @brief Next-layer prefetch over one pager, scored by `Predictor` (of the model's shape; see
/// the file comment). Not thread-safe.
template <wisp::routing_predictor Predictor>
class next_layer_prefetcher {
 public:
  /// `config.rule`'s count is per batch: `k x tokens` experts times the overfetch for `top_k`.
  /// @throws wisp::logic_error on an invalid config.
  next_layer_prefetcher(const model_config& c, const wisp::prefetch_config& config,
                        Predictor predictor)
      : shape_{c.layers, c.experts, c.top_k},
        table_(std::move(predictor)),
        config_(config),
        sum_(idx(c.experts)),
        scores_(idx(c.experts)),
        used_(idx(c.layers) * idx(c.experts), 0) {
    config_.validate();
  }

  /// Learns every token of the warm-up (one pass per step of `tokens`).
  void learn(const wisp::routing_trace& tokens) {
    wisp::routing_pass pass(shape_);
    for (std::size_t s = 0; s < tokens.steps(); ++s) {
      pass.assign(tokens, s);
      table_.learn(pass);
    }
  }

  /// A forward of `tokens` rows starts: the previous forward's passes are learned first.
  void begin_forward(std::int32_t tokens) {
    for (std::size_t r = 0; r < rows_; ++r) {
      if (passes_[r].complete()) {
        table_.learn(passes_[r]);
      }
    }
    rows_ = idx(tokens);
    while (passes_.size() < rows_) {
      passes_.emplace_back(shape_);
    }
    for (std::size_t r = 0; r < rows_; ++r) {
      passes_[r].clear();
    }
  }

  /// Layer `layer`'s routing (`[tokens x k]`), in layer order. Counts the prefetched experts the
  /// call uses (`useful`).
  void observe(std::int32_t layer, std::span<const std::int32_t> ids) {
    const auto k = idx(shape_.top_k);
    for (std::size_t r = 0; r < rows_; ++r) {
      passes_[r].observe(layer, ids.subspan(r * k, k));
    }
    std::uint8_t* used = used_.data() + offset(layer);
    for (const std::int32_t e : ids) {
      useful_ += used[e] == 1 ? 1 : 0;
      used[e] = 2;  // counted once
    }
    std::fill(used, used + shape_.experts, std::uint8_t{0});
  }

  /// @brief The prefetch copies of `target` (the layer after the last observed one) that end by
  /// `window.end` on the link, each `copy_seconds` long: the candidates best first, the resident
  /// ones kept (a prefetch does not evict them) and the others loaded until the window is full.
  /// Empty for a batch whose experts are about every expert (a prefill streams them anyway).
  template <class Policy>
  std::span<const row_copy> prefetch(wisp::pager<Policy>& pager, std::int32_t target,
                                     const link_window& window, double copy_seconds) {
    copies_.clear();
    const std::int64_t routed = static_cast<std::int64_t>(rows_) * shape_.top_k;
    if (rows_ == 0 || routed >= shape_.experts || window.end <= window.start) {
      return copies_;
    }
    const auto room = static_cast<std::int64_t>((window.end - window.start) / copy_seconds);
    if (room < 1) {
      return copies_;
    }
    std::fill(sum_.begin(), sum_.end(), 0.0f);
    for (std::size_t r = 0; r < rows_; ++r) {
      table_.score(passes_[r], target, scores_);
      for (std::size_t e = 0; e < sum_.size(); ++e) {
        sum_[e] += scores_[e];  // the expected number of rows routed to e
      }
    }
    candidates_.clear();
    wisp::choose_prefetch(sum_, static_cast<std::int32_t>(routed), config_, scratch_, candidates_);
    std::size_t n = 0;  // candidates passed on: every one up to the room-th missing one
    for (std::int64_t missing = 0; n < candidates_.size(); ++n) {
      if (pager.slot_of(target, candidates_[n]) < 0) {
        if (missing == room) {
          break;
        }
        ++missing;
      }
    }
    const wisp::prefetch_result p = pager.prefetch(target, std::span(candidates_).first(n));
    std::uint8_t* used = used_.data() + offset(target);
    for (const wisp::copy_op& op : p.copy_plan) {
      copies_.push_back({.tensor = target, .row = op.slot, .expert = op.expert, .prefetch = true});
      used[op.expert] = 1;
    }
    return copies_;
  }

  /// Prefetched experts that the call they were loaded for did use.
  [[nodiscard]] std::uint64_t useful() const noexcept { return useful_; }

 private:
  [[nodiscard]] std::size_t offset(std::int32_t layer) const noexcept {
    return idx(layer) * idx(shape_.experts);
  }

  wisp::moe_shape shape_;
  Predictor table_;
  wisp::prefetch_config config_;
  std::vector<wisp::routing_pass> passes_;  // one per row of the forward
  std::size_t rows_ = 0;
  std::vector<float> sum_, scores_;
  std::vector<std::int32_t> candidates_, scratch_;
  std::vector<std::uint8_t> used_;  // [layers x experts]: 1 = prefetched for the next call
  std::vector<row_copy> copies_;
  std::uint64_t useful_ = 0;
};

}  // namespace wisp_engine
