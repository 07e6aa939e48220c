// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Prefetch policies (SpecMD §3.1.4) and the prefetch queue.
///
/// A prefetch policy turns a predictor's scores for a target layer into the experts to load ahead
/// of that layer's call:
///
/// - `prefetch_rule::top_k`: the `ceil(k x overfetch)` best-scored experts (SpecMD's top-k with an
///   overfetch factor: 1.5 loads 9 experts for a top-6 model);
/// - `prefetch_rule::percentile`: every expert scored above the `percentile`-th percentile of the
///   layer's scores, at most `limit` (SpecMD's score-based prefetch: the count adapts to how
///   peaked the prediction is).
///
/// The target is `distance` layers after the last routed one (1: the next layer, SpecMD's and
/// WiSP's choice), scored by any `routing_predictor` (the co-activation table by default).
///
/// `prefetch_queue` holds submitted prefetches until the link takes them, lowest priority first
/// out after every demand copy; `cancel_passed` drops the ones whose layer has started (or whose
/// pass has ended): a prefetch that did not start before its layer is useless, and the demand
/// copy takes over.
/// @code
/// wisp::prefetch_config cfg{.rule = wisp::prefetch_rule::top_k, .overfetch = 1.5};
/// predictor.score(pass, layer + 1, scores);
/// candidates.clear();
/// wisp::choose_prefetch(scores, /*top_k=*/6, cfg, scratch, candidates);
/// queue.submit(step, layer + 1, candidates);
/// @endcode
#pragma once

#include <wisp/core/enum_names.hpp>
#include <wisp/core/error.hpp>
#include <wisp/predict/routing_predictor.hpp>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace wisp {

/// How many experts a prefetch takes from the scores.
enum class prefetch_rule : std::uint8_t {
  none,        ///< no prefetch
  top_k,       ///< the ceil(k x overfetch) best
  percentile,  ///< all above a score percentile, at most `limit`
};

/// The rules' names: "none", "top-k", "percentile" (`to_string`, `from_string`).
template <>
struct enum_names<prefetch_rule> {
  static constexpr std::array<enum_name<prefetch_rule>, 3> values{
      {{prefetch_rule::none, "none"},
       {prefetch_rule::top_k, "top-k"},
       {prefetch_rule::percentile, "percentile"}}};
};

/// @brief A prefetch policy (see the file description).
struct prefetch_config {
  prefetch_rule rule = prefetch_rule::none;
  /// top_k: the multiplier m of the model's top-k (>= 0; 1 = exactly k).
  double overfetch = 1.0;
  /// percentile: the score percentile to exceed, in [0, 100] (SpecMD's default: 80).
  double percentile = 80.0;
  /// percentile: at most this many experts (>= 1).
  std::int32_t limit = 64;
  /// Target layer = last routed layer + distance (>= 1).
  std::int32_t distance = 1;

  /// @throws wisp::logic_error naming the field if a parameter is out of range.
  void validate() const {
    WISP_EXPECTS(std::isfinite(overfetch) && overfetch >= 0.0,
                 "prefetch_config: overfetch must be finite and >= 0, got ", overfetch);
    WISP_EXPECTS(percentile >= 0.0 && percentile <= 100.0,
                 "prefetch_config: percentile must be in [0, 100], got ", percentile);
    WISP_EXPECTS(limit >= 1, "prefetch_config: limit must be >= 1, got ", limit);
    WISP_EXPECTS(distance >= 1, "prefetch_config: distance must be >= 1, got ", distance);
  }
};

/// @brief Appends to `out` the experts `config` prefetches given one target layer's `scores`, best
/// first; returns how many. `top_k` is the model's k. O(E log E) for `percentile`, O(E x m k)
/// for `top_k`; `scratch` is reused (no allocation once large enough).
/// @throws wisp::logic_error on an invalid config or `top_k < 1`.
inline std::size_t choose_prefetch(std::span<const float> scores, std::int32_t top_k,
                                   const prefetch_config& config,
                                   std::vector<std::int32_t>& scratch,
                                   std::vector<std::int32_t>& out) {
  config.validate();
  WISP_EXPECTS(top_k >= 1, "choose_prefetch: top_k must be >= 1, got ", top_k);
  switch (config.rule) {
    case prefetch_rule::none:
      return 0;
    case prefetch_rule::top_k: {
      const auto wanted = static_cast<std::size_t>(
          std::min(std::ceil(top_k * config.overfetch), static_cast<double>(scores.size())));
      scratch.resize(wanted);
      select_top_k(scores, scratch);
      out.insert(out.end(), scratch.begin(), scratch.end());
      return wanted;
    }
    case prefetch_rule::percentile:
      return select_above_percentile(scores, config.percentile,
                                     static_cast<std::size_t>(config.limit), scratch, out);
  }
  return 0;
}

/// @brief One queued prefetch: load `expert` of layer `layer` for pass `step`.
struct prefetch_request {
  std::uint32_t step = 0;
  std::int32_t layer = 0;
  std::int32_t expert = 0;
  friend constexpr bool operator==(const prefetch_request&, const prefetch_request&) = default;
};

/// @brief Prefetches waiting for the link, first in first out, each (layer, expert) at most once.
///
/// A ring buffer of `layers x experts` entries sized at construction: `submit`, `pop` and
/// `cancel_passed` never allocate. `submit` is O(experts submitted), `pop` O(1), `cancel_passed`
/// O(queued). Not thread-safe.
class prefetch_queue {
 public:
  /// @throws wisp::logic_error if `layers` or `experts` is not positive.
  prefetch_queue(std::int32_t layers, std::int32_t experts) : layers_(layers), experts_(experts) {
    WISP_EXPECTS(layers >= 1 && experts >= 1,
                 "prefetch_queue: needs layers >= 1 and experts >= 1, got ", layers, " and ",
                 experts);
    const auto n = static_cast<std::size_t>(layers) * static_cast<std::size_t>(experts);
    ring_.resize(n);
    queued_.assign(n, 0);
  }

  /// Queues `experts` of `layer` for pass `step`, skipping those already queued. Returns how many
  /// were added. @throws wisp::logic_error, adding nothing, on an out-of-range layer or expert.
  std::size_t submit(std::uint32_t step, std::int32_t layer,
                     std::span<const std::int32_t> experts) {
    WISP_EXPECTS(layer >= 0 && layer < layers_, "prefetch_queue::submit: layer ", layer,
                 " is outside [0, ", layers_, ")");
    for (const std::int32_t e : experts) {
      WISP_EXPECTS(e >= 0 && e < experts_, "prefetch_queue::submit: expert ", e, " is outside [0, ",
                   experts_, ")");
    }
    std::size_t added = 0;
    for (const std::int32_t e : experts) {
      char& queued = queued_[index(layer, e)];
      if (queued != 0) {
        continue;
      }
      queued = 1;
      ring_[(head_ + size_) % ring_.size()] = prefetch_request{step, layer, e};
      ++size_;
      ++added;
    }
    return added;
  }

  /// @brief Drops every request whose layer has started: pass before `step`, or pass `step` and
  /// layer `<= layer`. Keeps the others in order. Returns how many were dropped.
  std::size_t cancel_passed(std::uint32_t step, std::int32_t layer) noexcept {
    std::size_t kept = 0;
    const std::size_t n = size_;
    for (std::size_t i = 0; i < n; ++i) {
      const prefetch_request r = ring_[(head_ + i) % ring_.size()];
      if (r.step < step || (r.step == step && r.layer <= layer)) {
        queued_[index(r.layer, r.expert)] = 0;
      } else {
        ring_[(head_ + kept++) % ring_.size()] = r;
      }
    }
    size_ = kept;
    return n - kept;
  }

  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// The oldest request. Precondition: `!empty()`.
  [[nodiscard]] const prefetch_request& front() const noexcept { return ring_[head_]; }
  /// Removes the oldest request. Precondition: `!empty()`.
  void pop() noexcept {
    const prefetch_request& r = ring_[head_];
    queued_[index(r.layer, r.expert)] = 0;
    head_ = (head_ + 1) % ring_.size();
    --size_;
  }
  /// Drops everything. O(queued).
  void clear() noexcept {
    while (!empty()) {
      pop();
    }
  }

 private:
  [[nodiscard]] std::size_t index(std::int32_t layer, std::int32_t expert) const noexcept {
    return static_cast<std::size_t>(layer) * static_cast<std::size_t>(experts_) +
           static_cast<std::size_t>(expert);
  }

  std::int32_t layers_;
  std::int32_t experts_;
  std::vector<prefetch_request> ring_;
  std::vector<char> queued_;  // [layers x experts]: the request is in the ring
  std::size_t head_ = 0;
  std::size_t size_ = 0;
};

}  // namespace wisp
