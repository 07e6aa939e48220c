// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `wisp::routing_trace`: an in-memory record of MoE routing decisions (which
/// `top_k` of `experts` experts every MoE layer chose for every forward step), stored compactly and
/// replayed in one canonical order.
///
/// A trace is a sequence of *steps* (one token's forward pass through every MoE layer). Each step
/// holds `layers x top_k` expert ids, row-major by layer, in the order the router produced them,
/// and optionally one gate weight per id. Sequence boundaries (prompts, ESFT lines, JSONL groups)
/// are recorded as the step indices where sequences begin.
///
/// **Partial steps.** A routing log may lack some layers of a token (a recorder dropped them).
/// `append_partial_step` keeps such a token with the layers that were recorded: its missing
/// (step, layer) *rows* are skipped by every replay, `has_layer` says which they are and
/// `complete()` is false. Traces built from complete steps only never pay for this.
///
/// **Canonical replay order** (the order of `for_each_access` and `accesses()`): for each step,
/// for each layer 0..layers-1 that the step holds, the `top_k` ids as recorded. For the ESFT trace
/// this is exactly the order of shared/traces/SOURCES.md (line, token, layer, id).
///
/// **Memory.** Ids are stored as `uint8_t` when `experts <= 256` and as `uint16_t` otherwise
/// (`experts <= 65536`), so a step costs `layers * top_k` bytes (or twice that). Gate weights,
/// when present, are stored as IEEE-754 `float` (`4 * layers * top_k` bytes per step): the
/// importers read decimal text and round-tripping it exactly is worth more than halving the
/// weight storage with bf16, and a trace with weights is typically a few MB. Sequence starts cost
/// 8 bytes per sequence. The ESFT trace (8,222 steps x 26 layers x top-6) takes 1.28 MB of ids
/// and 5.1 MB of weights.
///
/// @code
/// wisp::routing_trace t({.layers = 2, .experts = 8, .top_k = 2});
/// t.begin_sequence();
/// const std::int32_t ids[] = {0, 5, 3, 1};      // layer 0: {0,5}, layer 1: {3,1}
/// t.append_step(ids);
/// t.for_each_access([](wisp::access a) { /* (0,0,0) (0,0,5) (0,1,3) (0,1,1) */ });
/// @endcode
///
/// Thread-safety: const member functions may be called concurrently; mutation needs exclusive
/// access (the usual standard-library rules).
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/core/ids.hpp>
#include <wisp/core/shape.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <ostream>
#include <span>
#include <vector>

namespace wisp {

/// @brief One (step, layer, expert) activation, as visited in canonical order.
struct access {
  std::uint32_t step = 0;   ///< Forward step (token) index.
  std::int32_t layer = 0;   ///< MoE layer, 0-based.
  std::int32_t expert = 0;  ///< Expert id in `[0, experts)`.

  friend constexpr bool operator==(const access&, const access&) = default;
};

/// @brief An append-only, memory-compact routing trace. See the file comment for layout and order.
///
/// Copyable and movable (a value type); copies are deep.
class routing_trace {
 public:
  /// Largest number of steps a trace can hold (`access::step` is 32-bit).
  static constexpr std::size_t max_steps = std::numeric_limits<std::uint32_t>::max();

  /// @brief An empty trace of the given shape.
  /// @throws wisp::logic_error if the shape is invalid (see `moe_shape::validate`).
  explicit routing_trace(moe_shape shape) : shape_(shape) {
    shape_.validate();
    wide_ = shape_.experts > 256;
  }

  /// The trace's dimensions.
  [[nodiscard]] const moe_shape& shape() const noexcept { return shape_; }
  /// Number of steps (forward passes, i.e. tokens) recorded. O(1).
  [[nodiscard]] std::size_t steps() const noexcept { return steps_; }
  /// Number of (step, layer, expert) activations: `top_k` per row held, so
  /// `(steps * layers - missing_rows()) * top_k`. O(1).
  [[nodiscard]] std::size_t access_count() const noexcept {
    return (steps_ * static_cast<std::size_t>(shape_.layers) - missing_rows_) *
           static_cast<std::size_t>(shape_.top_k);
  }
  /// True when every step holds every layer (no partial step was appended). O(1).
  [[nodiscard]] bool complete() const noexcept { return missing_rows_ == 0; }
  /// Number of (step, layer) rows that partial steps lack. O(1).
  [[nodiscard]] std::size_t missing_rows() const noexcept { return missing_rows_; }
  /// @brief Whether `step` holds layer `layer` (always, unless it was appended as a partial
  /// step). O(1). @throws wisp::logic_error if an index is out of range.
  [[nodiscard]] bool has_layer(std::size_t step, std::int32_t layer) const {
    (void)index_of(step, layer, 0);
    return row_present(step * static_cast<std::size_t>(shape_.layers) +
                       static_cast<std::size_t>(layer));
  }
  /// Whether gate weights are recorded. Decided by the first appended step. O(1).
  [[nodiscard]] bool has_weights() const noexcept { return has_weights_; }
  /// Bytes used per stored id: 1 when `experts <= 256`, else 2.
  [[nodiscard]] std::size_t id_bytes() const noexcept { return wide_ ? 2 : 1; }

  /// @brief Reserves storage for `steps` steps in total (weights only if already known present).
  /// @throws std::bad_alloc, std::length_error from the underlying vectors.
  void reserve(std::size_t steps) {
    const std::size_t n = steps * shape_.ids_per_step();
    if (wide_) {
      ids16_.reserve(n);
    } else {
      ids8_.reserve(n);
    }
    if (has_weights_) {
      weights_.reserve(n);
    }
  }

  /// @brief Appends one step.
  ///
  /// @param ids `layers x top_k` expert ids, row-major by layer, each in `[0, experts)` and
  ///        distinct within a layer's row.
  /// @param weights empty, or one finite gate weight per id. The first step decides whether the
  ///        trace has weights; every later step must agree.
  /// @throws wisp::logic_error on a size mismatch, an id out of range, a duplicate id within a
  ///         row, a non-finite weight, weights presence differing from earlier steps, or more than
  ///         `max_steps` steps. Strong guarantee: on any exception the trace is unchanged.
  /// Complexity: O(layers * top_k) for small `top_k` (<= 32), O(layers * top_k log top_k)
  /// otherwise; amortised O(1) allocations.
  void append_step(std::span<const std::int32_t> ids, std::span<const float> weights = {}) {
    append(ids, weights, {});
  }

  /// @brief Appends one step that lacks some layers: `present[l] != 0` for the layers recorded.
  ///
  /// `ids` and `weights` are laid out as for `append_step` (`layers x top_k`); the rows of the
  /// missing layers are ignored (not validated, not stored). The missing rows are skipped by every
  /// replay and counted by `missing_rows()`.
  /// @throws wisp::logic_error as `append_step` (for the rows present), if `present` does not hold
  ///         one entry per layer, or if it marks no layer present. Strong guarantee.
  /// Complexity: as `append_step`, plus O(steps * layers) once, at the first partial step.
  void append_partial_step(std::span<const std::int32_t> ids, std::span<const std::uint8_t> present,
                           std::span<const float> weights = {}) {
    WISP_EXPECTS(present.size() == static_cast<std::size_t>(shape_.layers),
                 "append_partial_step needs one presence flag per layer (", shape_.layers,
                 "), got ", present.size());
    WISP_EXPECTS(std::any_of(present.begin(), present.end(), [](std::uint8_t p) { return p != 0; }),
                 "step ", steps_, " holds no layer at all");
    append(ids, weights, present);
  }

  /// @brief The `j`-th expert chosen at `layer` in `step`. O(1).
  /// @throws wisp::logic_error if an index is out of range or the step lacks the layer.
  [[nodiscard]] std::int32_t expert(std::size_t step, std::int32_t layer, std::int32_t j) const {
    const std::size_t i = present_index_of(step, layer, j);
    return wide_ ? static_cast<std::int32_t>(ids16_[i]) : static_cast<std::int32_t>(ids8_[i]);
  }

  /// @brief Strongly typed form of `expert(step, layer, j)` for API edges.
  /// @throws wisp::logic_error if an index is out of range.
  [[nodiscard]] expert_id expert(std::size_t step, layer_id layer, std::int32_t j) const {
    return expert_id{expert(step, layer.value(), j)};
  }

  /// @brief The gate weight of `expert(step, layer, j)`. O(1).
  /// @throws wisp::logic_error if the trace has no weights, an index is out of range or the step
  ///         lacks the layer.
  [[nodiscard]] float weight(std::size_t step, std::int32_t layer, std::int32_t j) const {
    WISP_EXPECTS(has_weights_, "this routing trace has no gate weights");
    return weights_[present_index_of(step, layer, j)];
  }

  /// @brief Marks the next appended step as the start of a sequence. Calling it again before
  /// appending has no further effect. O(1), no allocation (the start is recorded on append).
  void begin_sequence() noexcept { pending_sequence_ = true; }

  /// @brief Step indices where sequences begin, strictly increasing, each `< steps()`.
  /// Steps before the first start (if any) belong to no marked sequence. O(1).
  [[nodiscard]] std::span<const std::size_t> sequence_starts() const noexcept {
    return sequence_starts_;
  }

  /// @brief Calls `f(access)` for every activation in canonical order (step, layer, then the
  /// `top_k` ids as recorded). O(access_count()), no allocation; the id width is dispatched once.
  template <class F>
  void for_each_access(F&& f) const {
    if (wide_) {
      visit_all(ids16_.data(), f);
    } else {
      visit_all(ids8_.data(), f);
    }
  }

  /// @brief Calls `f(step, layer, ids)` for every (step, layer) request in canonical order, `ids`
  /// being that layer's `top_k` expert ids as recorded (a `std::span<const std::int32_t>` valid
  /// during the call of `f`). One call of an engine's MoE layer: what the pager and the
  /// call-granular reuse distances take. O(access_count()); one allocation of `top_k` ids.
  template <class F>
  void for_each_call(F&& f) const {
    std::vector<std::int32_t> ids(static_cast<std::size_t>(shape_.top_k));
    if (wide_) {
      visit_calls(ids16_.data(), ids, f);
    } else {
      visit_calls(ids8_.data(), ids, f);
    }
  }

  class access_iterator;
  class access_range;

  /// @brief A forward range over every activation in canonical order (same as
  /// `for_each_access`). The range refers to this trace: appending invalidates it. O(1).
  [[nodiscard]] access_range accesses() const noexcept;

  /// Traces are equal when shape, rows held, ids, weights (bitwise float equality) and sequence
  /// starts are (the ignored ids of missing rows do not count).
  friend bool operator==(const routing_trace& a, const routing_trace& b) noexcept {
    return a.shape_ == b.shape_ && a.steps_ == b.steps_ && a.has_weights_ == b.has_weights_ &&
           a.missing_rows_ == b.missing_rows_ && a.present_ == b.present_ && a.ids8_ == b.ids8_ &&
           a.ids16_ == b.ids16_ && a.weights_ == b.weights_ &&
           a.sequence_starts_ == b.sequence_starts_;
  }

 private:
  template <class Id, class F>
  void visit_all(const Id* p, F& f) const {
    const std::int32_t layers = shape_.layers;
    const std::int32_t k = shape_.top_k;
    const auto steps = static_cast<std::uint32_t>(steps_);
    const std::uint8_t* present = present_.empty() ? nullptr : present_.data();
    for (std::uint32_t s = 0; s < steps; ++s) {
      for (std::int32_t l = 0; l < layers; ++l) {
        if (present != nullptr && *present++ == 0) {
          p += k;
          continue;
        }
        for (std::int32_t j = 0; j < k; ++j) {
          f(access{s, l, static_cast<std::int32_t>(*p++)});
        }
      }
    }
  }

  template <class Id, class F>
  void visit_calls(const Id* p, std::vector<std::int32_t>& ids, F& f) const {
    const std::int32_t layers = shape_.layers;
    const auto steps = static_cast<std::uint32_t>(steps_);
    const std::uint8_t* present = present_.empty() ? nullptr : present_.data();
    for (std::uint32_t s = 0; s < steps; ++s) {
      for (std::int32_t l = 0; l < layers; ++l) {
        if (present != nullptr && *present++ == 0) {
          p += ids.size();
          continue;
        }
        for (std::int32_t& id : ids) {
          id = static_cast<std::int32_t>(*p++);
        }
        f(s, l, std::span<const std::int32_t>(ids));
      }
    }
  }

  [[nodiscard]] bool row_present(std::size_t row) const noexcept {
    return present_.empty() || present_[row] != 0;
  }

  // index_of for a row the step holds.
  [[nodiscard]] std::size_t present_index_of(std::size_t step, std::int32_t layer,
                                             std::int32_t j) const {
    const std::size_t i = index_of(step, layer, j);
    WISP_EXPECTS(row_present(i / static_cast<std::size_t>(shape_.top_k)), "step ", step,
                 " has no record for layer ", layer);
    return i;
  }

  // append_step / append_partial_step; `present` empty = every layer.
  void append(std::span<const std::int32_t> ids, std::span<const float> weights,
              std::span<const std::uint8_t> present) {
    const std::size_t n = shape_.ids_per_step();
    WISP_EXPECTS(ids.size() == n, "append_step needs layers*top_k = ", n, " ids, got ", ids.size());
    WISP_EXPECTS(weights.empty() || weights.size() == n, "append_step needs 0 or ", n,
                 " weights, got ", weights.size());
    const bool with_weights = !weights.empty();
    WISP_EXPECTS(steps_ == 0 || with_weights == has_weights_, "step ", steps_,
                 (with_weights ? " has weights but earlier steps do not"
                               : " has no weights but earlier steps do"));
    WISP_EXPECTS(steps_ < max_steps, "routing_trace is full (", max_steps, " steps)");
    const auto k = static_cast<std::size_t>(shape_.top_k);
    const auto layers = static_cast<std::size_t>(shape_.layers);
    auto held = [&](std::size_t row) { return present.empty() || present[row] != 0; };
    std::size_t missing = 0;
    for (std::size_t row = 0; row < layers; ++row) {
      if (!held(row)) {
        ++missing;
        continue;
      }
      validate_row(ids.subspan(row * k, k), row);
      for (std::size_t i = row * k; i < (row + 1) * k && with_weights; ++i) {
        WISP_EXPECTS(std::isfinite(weights[i]), "step ", steps_, " weight ", i,
                     " is not finite: ", weights[i]);
      }
    }
    // Reserve everything first: after this point nothing throws (trivial types, no reallocation).
    const std::size_t total = (steps_ + 1) * n;
    auto grow = [](auto& v, std::size_t want) {
      if (v.capacity() < want) {
        v.reserve(std::max(want, v.capacity() * 2));
      }
    };
    if (wide_) {
      grow(ids16_, total);
    } else {
      grow(ids8_, total);
    }
    if (with_weights) {
      grow(weights_, total);
    }
    if (pending_sequence_) {
      grow(sequence_starts_, sequence_starts_.size() + 1);
    }
    const bool track_rows = !present_.empty() || missing != 0;
    if (track_rows) {
      grow(present_, (steps_ + 1) * layers);
    }
    // A missing row stores the ids 0..k-1 and zero weights: never read, so they need no meaning.
    for (std::size_t i = 0; i < n; ++i) {
      const std::int32_t id = held(i / k) ? ids[i] : static_cast<std::int32_t>(i % k);
      if (wide_) {
        ids16_.push_back(static_cast<std::uint16_t>(id));
      } else {
        ids8_.push_back(static_cast<std::uint8_t>(id));
      }
      if (with_weights) {
        weights_.push_back(held(i / k) ? weights[i] : 0.0f);
      }
    }
    if (track_rows) {
      present_.resize(steps_ * layers, 1);  // the complete steps before the first partial one
      for (std::size_t row = 0; row < layers; ++row) {
        present_.push_back(held(row) ? 1 : 0);
      }
    }
    if (pending_sequence_) {
      sequence_starts_.push_back(steps_);
      pending_sequence_ = false;
    }
    has_weights_ = with_weights;
    missing_rows_ += missing;
    ++steps_;
  }

  [[nodiscard]] std::size_t index_of(std::size_t step, std::int32_t layer, std::int32_t j) const {
    WISP_EXPECTS(step < steps_, "step ", step, " out of range (", steps_, " steps)");
    WISP_EXPECTS(layer >= 0 && layer < shape_.layers, "layer ", layer, " out of range (",
                 shape_.layers, " layers)");
    WISP_EXPECTS(j >= 0 && j < shape_.top_k, "rank ", j, " out of range (top_k ", shape_.top_k,
                 ")");
    return (step * static_cast<std::size_t>(shape_.layers) + static_cast<std::size_t>(layer)) *
               static_cast<std::size_t>(shape_.top_k) +
           static_cast<std::size_t>(j);
  }

  void validate_row(std::span<const std::int32_t> r, std::size_t layer) const {
    for (const std::int32_t id : r) {
      WISP_EXPECTS(id >= 0 && id < shape_.experts, "step ", steps_, " layer ", layer,
                   ": expert id ", id, " out of range [0, ", shape_.experts, ")");
    }
    if (r.size() <= 32) {
      // Iterators, not indices: g++ 12 at -O3 warns (-Warray-bounds) on the indexed form when a
      // caller's row has one element.
      for (auto id = r.begin(); id != r.end(); ++id) {
        WISP_EXPECTS(std::find(r.begin(), id, *id) == id, "step ", steps_, " layer ", layer,
                     ": expert ", *id, " chosen twice");
      }
    } else {
      std::vector<std::int32_t> sorted(r.begin(), r.end());
      std::sort(sorted.begin(), sorted.end());
      const auto dup = std::adjacent_find(sorted.begin(), sorted.end());
      WISP_EXPECTS(dup == sorted.end(), "step ", steps_, " layer ", layer, ": expert ",
                   (dup == sorted.end() ? 0 : *dup), " chosen twice");
    }
  }

  moe_shape shape_;
  bool wide_ = false;
  bool has_weights_ = false;
  bool pending_sequence_ = false;
  std::size_t steps_ = 0;
  std::size_t missing_rows_ = 0;
  std::vector<std::uint8_t> present_;  // steps x layers flags once a partial step came, else empty
  std::vector<std::uint8_t> ids8_;     // used when experts <= 256
  std::vector<std::uint16_t> ids16_;   // used when experts > 256
  std::vector<float> weights_;
  std::vector<std::size_t> sequence_starts_;
};

/// @brief Forward iterator over a trace's activations in canonical order. Dereferencing yields an
/// `access` by value.
class routing_trace::access_iterator {
 public:
  using iterator_concept = std::forward_iterator_tag;
  using iterator_category = std::input_iterator_tag;  // reference is a prvalue
  using value_type = access;
  using difference_type = std::ptrdiff_t;
  using reference = access;

  access_iterator() = default;

  [[nodiscard]] access operator*() const noexcept {
    const std::int32_t e =
        wide_ ? static_cast<std::int32_t>(ids16_[pos_]) : static_cast<std::int32_t>(ids8_[pos_]);
    return access{step_, layer_, e};
  }
  access_iterator& operator++() noexcept {
    ++pos_;
    if (++j_ == k_) {
      j_ = 0;
      next_row();
      skip_missing_rows();
    }
    return *this;
  }
  access_iterator operator++(int) noexcept {
    access_iterator old = *this;
    ++*this;
    return old;
  }
  friend bool operator==(const access_iterator& a, const access_iterator& b) noexcept {
    return a.pos_ == b.pos_;
  }

 private:
  friend class routing_trace;

  void next_row() noexcept {
    if (++layer_ == layers_) {
      layer_ = 0;
      ++step_;
    }
  }
  // Moves past the rows a partial step lacks (a no-op for a complete trace).
  void skip_missing_rows() noexcept {
    while (present_ != nullptr && pos_ < end_ &&
           present_[pos_ / static_cast<std::size_t>(k_)] == 0) {
      pos_ += static_cast<std::size_t>(k_);
      next_row();
    }
  }

  const std::uint8_t* ids8_ = nullptr;
  const std::uint16_t* ids16_ = nullptr;
  const std::uint8_t* present_ = nullptr;  // row flags, or null when every row is held
  std::size_t end_ = 0;                    // one past the last stored id
  bool wide_ = false;
  std::size_t pos_ = 0;
  std::uint32_t step_ = 0;
  std::int32_t layer_ = 0;
  std::int32_t j_ = 0;
  std::int32_t layers_ = 1;
  std::int32_t k_ = 1;
};

/// @brief The range returned by `routing_trace::accesses()`: a cheap view (pointer + sizes).
class routing_trace::access_range {
 public:
  [[nodiscard]] access_iterator begin() const noexcept { return first_; }
  [[nodiscard]] access_iterator end() const noexcept {
    access_iterator last = first_;
    last.pos_ = first_.end_;
    return last;
  }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }

 private:
  friend class routing_trace;
  access_iterator first_;
  std::size_t size_ = 0;
};

inline routing_trace::access_range routing_trace::accesses() const noexcept {
  access_range r;
  if (wide_) {
    r.first_.ids16_ = ids16_.data();
    r.first_.wide_ = true;
  } else {
    r.first_.ids8_ = ids8_.data();
  }
  r.first_.layers_ = shape_.layers;
  r.first_.k_ = shape_.top_k;
  r.first_.present_ = present_.empty() ? nullptr : present_.data();
  r.first_.end_ = steps_ * shape_.ids_per_step();
  r.first_.skip_missing_rows();
  r.size_ = access_count();
  return r;
}

}  // namespace wisp
