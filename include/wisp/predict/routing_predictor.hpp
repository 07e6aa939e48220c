// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The `routing_predictor` concept, the forward pass it predicts from (`routing_pass`) and
/// the selections every consumer of scores shares (`select_top_k`, `select_above_percentile`).
///
/// A predictor scores every expert of a *target* layer from the layers of the current forward
/// pass observed so far (0 .. observed-1) and from what it learned of earlier passes; a higher
/// score means "more likely routed". The distance to the target is `target - observed + 1`: 1 for
/// the next layer. Once a pass is complete the caller hands it to `learn`: evaluation is online
/// (predict, then learn), as a server would run it.
/// @code
/// wisp::routing_pass pass({.layers = 26, .experts = 64, .top_k = 6});
/// std::vector<float> scores(64);
/// std::array<std::int32_t, 6> next{};
/// for (std::int32_t l = 0; l < 26; ++l) {
///   pass.observe(l, router_topk(l));                       // layer l's ids are now known
///   if (l + 1 < 26) {
///     predictor.score(pass, l + 1, scores);                // the next layer's experts
///     wisp::select_top_k(scores, next);                    // the 6 most likely
///   }
/// }
/// predictor.learn(pass);
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/trace/routing_trace.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace wisp {

/// @brief The routing of one forward pass as it unfolds: the top-k ids of layers
/// `0 .. observed() - 1`, layers observed in order.
///
/// Owns `layers x top_k` ids sized at construction; `observe` and `clear` never allocate. Not
/// thread-safe (one writer; const reads may run concurrently).
class routing_pass {
 public:
  /// An empty pass of shape {1 layer, 1 expert, top-1}.
  routing_pass() : routing_pass(moe_shape{1, 1, 1}) {}
  /// @throws wisp::logic_error if `shape` is invalid (see `moe_shape::validate`).
  explicit routing_pass(const moe_shape& shape) : shape_(shape) {
    shape_.validate();
    ids_.assign(shape_.ids_per_step(), 0);
  }

  /// Starts a new pass: nothing observed. O(1).
  void clear() noexcept { observed_ = 0; }

  /// @brief Records the `top_k` ids `ids` of `layer`, which must be the next layer of the pass.
  /// O(top_k).
  /// @throws wisp::logic_error, leaving the pass unchanged, if `layer != observed()`,
  ///   `ids.size() != top_k` or an id is outside `[0, experts)`.
  void observe(std::int32_t layer, std::span<const std::int32_t> ids) {
    WISP_EXPECTS(layer == observed_, "routing_pass::observe: layer ", layer,
                 " given but the next layer of the pass is ", observed_, " (of ", shape_.layers,
                 ")");
    WISP_EXPECTS(observed_ < shape_.layers, "routing_pass::observe: all ", shape_.layers,
                 " layers already observed; clear() starts the next pass");
    WISP_EXPECTS(ids.size() == static_cast<std::size_t>(shape_.top_k),
                 "routing_pass::observe: ", ids.size(), " ids for layer ", layer, " but top_k is ",
                 shape_.top_k);
    for (std::size_t j = 0; j < ids.size(); ++j) {
      WISP_EXPECTS(ids[j] >= 0 && ids[j] < shape_.experts, "routing_pass::observe: layer ", layer,
                   " id ", j, " = ", ids[j], " is outside [0, experts = ", shape_.experts, ")");
    }
    std::copy(ids.begin(), ids.end(), ids_.begin() + offset(layer));
    ++observed_;
  }

  /// Clears the pass and observes every layer of step `step` of `trace` (same shape). O(L x k).
  /// @throws wisp::logic_error on a shape mismatch or an out-of-range step.
  void assign(const routing_trace& trace, std::size_t step) {
    WISP_EXPECTS(trace.shape() == shape_, "routing_pass::assign: trace shape (", trace.shape(),
                 ") differs from the pass shape (", shape_, ")");
    WISP_EXPECTS(step < trace.steps(), "routing_pass::assign: step ", step, " of ", trace.steps());
    for (std::int32_t l = 0; l < shape_.layers; ++l) {
      for (std::int32_t j = 0; j < shape_.top_k; ++j) {
        ids_[offset(l) + static_cast<std::size_t>(j)] = trace.expert(step, l, j);
      }
    }
    observed_ = shape_.layers;
  }

  /// Number of layers observed so far (the next layer to observe).
  [[nodiscard]] std::int32_t observed() const noexcept { return observed_; }
  /// True once every layer is observed.
  [[nodiscard]] bool complete() const noexcept { return observed_ == shape_.layers; }
  [[nodiscard]] const moe_shape& shape() const noexcept { return shape_; }
  /// The ids of observed layer `layer` (unchecked: `layer < observed()`). O(1).
  [[nodiscard]] std::span<const std::int32_t> experts(std::int32_t layer) const noexcept {
    return {ids_.data() + offset(layer), static_cast<std::size_t>(shape_.top_k)};
  }

 private:
  [[nodiscard]] std::size_t offset(std::int32_t layer) const noexcept {
    return static_cast<std::size_t>(layer) * static_cast<std::size_t>(shape_.top_k);
  }

  moe_shape shape_;
  std::vector<std::int32_t> ids_;  // [layers x top_k], first observed_ rows valid
  std::int32_t observed_ = 0;
};

/// @brief A routing predictor: scores the experts of a target layer from a partly observed pass,
/// and learns from complete passes.
///
/// - `score(pass, target, scores)`: writes one score per expert of layer `target` into `scores`
///   (`scores.size() == experts`), using only `pass.observed()` layers (`target >=
///   pass.observed()`) and what was learned before; higher = more likely routed. Const: a
///   predictor may be shared by readers.
/// - `learn(pass)`: folds a complete pass into the predictor.
///
/// Models: `coactivation_predictor`, `frequency_predictor`, `previous_token_predictor`,
/// `personal_predictor`. A user's own predictor (a learned gate look-ahead, say) only needs these
/// two members.
template <class P>
concept routing_predictor = requires(P& predictor, const P& cpredictor, const routing_pass& pass,
                                     std::int32_t target, std::span<float> scores) {
  { cpredictor.score(pass, target, scores) } -> std::same_as<void>;
  predictor.learn(pass);
};

/// @brief The indices of the `out.size()` largest `scores`, best first; equal scores go to the
/// smaller index. O(n x out.size()) for the small k this serves (a top-k of 6 to 16 over 64 to
/// 256 experts): one pass that compares each score with the worst kept one, held in a register,
/// and inserts the few that beat it into a sorted buffer. No allocation for `k <= 32` (a larger
/// k allocates its buffer of kept scores).
/// @throws wisp::logic_error if `out.size() > scores.size()`.
inline void select_top_k(std::span<const float> scores, std::span<std::int32_t> out) {
  WISP_EXPECTS(out.size() <= scores.size(), "select_top_k: k = ", out.size(), " exceeds the ",
               scores.size(), " scores");
  const std::size_t k = out.size();
  if (k == 0) {
    return;
  }
  constexpr std::size_t local = 32;  // kept values live on the stack for k up to this
  std::array<float, local> kept_values;
  std::vector<float> wide;  // only for k > local
  if (k > local) {
    wide.resize(k);
  }
  float* value = k > local ? wide.data() : kept_values.data();
  std::int32_t* index = out.data();
  // Inserts score i into the sorted `filled` first entries (the last one drops off when full).
  const auto insert = [&](std::size_t i, std::size_t filled) {
    const float s = scores[i];
    std::size_t pos = filled < k ? filled : k - 1;
    while (pos > 0 && s > value[pos - 1]) {  // strict: ties keep the smaller index, seen first
      value[pos] = value[pos - 1];
      index[pos] = index[pos - 1];
      --pos;
    }
    value[pos] = s;
    index[pos] = static_cast<std::int32_t>(i);
  };
  for (std::size_t i = 0; i < k; ++i) {  // fill with the first k
    insert(i, i);
  }
  // Then keep only what beats the worst kept score.
  float worst = value[k - 1];
  for (std::size_t i = k; i < scores.size(); ++i) {
    if (scores[i] > worst) [[unlikely]] {
      insert(i, k);
      worst = value[k - 1];
    }
  }
}

/// @brief Appends to `out` the indices whose score is strictly above the `percentile`-th
/// percentile of `scores` (nearest-rank, in [0, 100]), best first, at most `limit` of them (SpecMD
/// §3.1.4's score-based prefetch: the count adapts to the score distribution). Returns how many.
/// O(n log n); `scratch` is resized to n (no allocation once it is large enough).
/// @throws wisp::logic_error if `percentile` is outside [0, 100].
inline std::size_t select_above_percentile(std::span<const float> scores, double percentile,
                                           std::size_t limit, std::vector<std::int32_t>& scratch,
                                           std::vector<std::int32_t>& out) {
  WISP_EXPECTS(percentile >= 0.0 && percentile <= 100.0,
               "select_above_percentile: percentile must be in [0, 100], got ", percentile);
  const std::size_t n = scores.size();
  if (n == 0 || limit == 0) {
    return 0;
  }
  scratch.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    scratch[i] = static_cast<std::int32_t>(i);
  }
  std::sort(scratch.begin(), scratch.end(), [&](std::int32_t a, std::int32_t b) {
    const float sa = scores[static_cast<std::size_t>(a)];
    const float sb = scores[static_cast<std::size_t>(b)];
    return sa > sb || (sa == sb && a < b);
  });
  // Nearest rank: the threshold is the value of rank ceil(p/100 * n) in ascending order.
  const auto rank = static_cast<std::size_t>(std::max(1.0, std::ceil(percentile / 100.0 * n)));
  const float threshold = scores[static_cast<std::size_t>(scratch[n - rank])];
  std::size_t added = 0;
  for (std::size_t i = 0; i < n && added < limit; ++i) {
    if (!(scores[static_cast<std::size_t>(scratch[i])] > threshold)) {
      break;
    }
    out.push_back(scratch[i]);
    ++added;
  }
  return added;
}

}  // namespace wisp
