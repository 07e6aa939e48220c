// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `reroute_table`: ExpertWeave's ESFT expert map (§4.1, §4.3). Serving several
/// expert-specialised fine-tuned adapters over one base MoE model, every adapter's fine-tuned
/// experts live as extra rows of the same expert tensor; the router still emits base expert ids,
/// so each token's top-k ids are rerouted through `table[adapter][expert] -> row` before the
/// kernel (and before the pager, which then pages tensor rows).
///
/// Rows `[0, experts)` are the base model's experts (row e = expert e); adapter experts live at
/// rows `[experts, rows)`. An untuned (adapter, expert) pair maps to the base row. Adapter id -1
/// is the base model.
/// @code
/// wisp::reroute_table table(/*adapters=*/2, /*experts=*/64, /*rows=*/64 + 2 * 8);
/// table.assign(/*adapter=*/1, /*expert=*/13, /*row=*/72);     // adapter 1's version of expert 13
/// std::vector<std::int32_t> aid = {-1, 1};                    // token 0: base, token 1: adapter 1
/// table.apply(topk, /*tokens=*/2, /*k=*/6, aid, rerouted);    // rerouted[i] in [0, rows)
/// wisp::pager<wisp::lru> pager({.layers = 1, .experts = table.rows(), .top_k = 6,
///                                .capacity = 16});
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/core/topk.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace wisp {

/// @brief `[adapters x experts] -> row` table of one MoE layer, with batched rerouting.
///
/// Invariants (checked by `assign`): every entry is its base row or a row in `[experts, rows)`;
/// an adapter row belongs to at most one (adapter, expert) pair. Memory O(adapters x experts +
/// rows). Not thread-safe for writers; `apply` and queries are const.
class reroute_table {
 public:
  /// An identity table: every adapter uses the base experts.
  /// @throws wisp::logic_error if `adapters < 0`, `experts < 1`, `rows < experts` or
  ///   `adapters * experts` overflows int32; std::bad_alloc.
  reroute_table(std::int32_t adapters, std::int32_t experts, std::int32_t rows)
      : adapters_(adapters), experts_(experts), rows_(rows) {
    WISP_EXPECTS(adapters >= 0, "reroute_table: adapters must be >= 0, got ", adapters);
    WISP_EXPECTS(experts >= 1, "reroute_table: experts must be >= 1, got ", experts);
    WISP_EXPECTS(rows >= experts, "reroute_table: rows ", rows, " must be >= experts ", experts,
                 " (rows [0, experts) are the base model's)");
    WISP_EXPECTS(static_cast<std::int64_t>(adapters) * experts <= INT32_MAX,
                 "reroute_table: adapters * experts = ",
                 static_cast<std::int64_t>(adapters) * experts, " overflows int32");
    table_.resize(static_cast<std::size_t>(adapters) * static_cast<std::size_t>(experts));
    for (std::size_t i = 0; i < table_.size(); ++i) {
      table_[i] = static_cast<std::int32_t>(i % static_cast<std::size_t>(experts));
    }
    owner_.assign(static_cast<std::size_t>(rows - experts), -1);
  }

  /// Points (adapter, expert) at `row`: its fine-tuned copy (`row >= experts`) or back to the base
  /// row (`row == expert`), releasing any adapter row it held. O(1).
  /// @throws wisp::logic_error (table unchanged) if `adapter` is outside `[0, adapters)`, `expert`
  ///   outside `[0, experts)`, `row` outside `[0, rows)`, `row` is another base expert's row, or
  ///   `row` already belongs to a different (adapter, expert) pair.
  void assign(std::int32_t adapter, std::int32_t expert, std::int32_t row) {
    WISP_EXPECTS(adapter >= 0 && adapter < adapters_, "reroute_table::assign: adapter ", adapter,
                 " is outside [0, adapters = ", adapters_, ")");
    WISP_EXPECTS(expert >= 0 && expert < experts_, "reroute_table::assign: expert ", expert,
                 " is outside [0, experts = ", experts_, ")");
    WISP_EXPECTS(row >= 0 && row < rows_, "reroute_table::assign: row ", row,
                 " is outside [0, rows = ", rows_, ")");
    WISP_EXPECTS(row >= experts_ || row == expert, "reroute_table::assign: row ", row,
                 " is base expert ", row, "'s row; adapter ", adapter, "'s expert ", expert,
                 " must map to its own base row ", expert, " or to an adapter row in [", experts_,
                 ", ", rows_, ")");
    const std::int32_t pair = adapter * experts_ + expert;
    if (row >= experts_) {
      const std::int32_t owner = owner_[static_cast<std::size_t>(row - experts_)];
      WISP_EXPECTS(owner == -1 || owner == pair, "reroute_table::assign: row ", row,
                   " already holds adapter ", owner / experts_, "'s expert ", owner % experts_,
                   "; cannot also hold adapter ", adapter, "'s expert ", expert);
    }
    std::int32_t& entry = table_[static_cast<std::size_t>(pair)];
    if (entry >= experts_) {
      owner_[static_cast<std::size_t>(entry - experts_)] = -1;
    }
    entry = row;
    if (row >= experts_) {
      owner_[static_cast<std::size_t>(row - experts_)] = pair;
    }
  }

  /// The row serving `expert` for `adapter` (-1 = base model: `expert`). O(1).
  /// @throws wisp::logic_error if `adapter` is outside `[-1, adapters)` or `expert` outside
  ///   `[0, experts)`.
  [[nodiscard]] std::int32_t row(std::int32_t adapter, std::int32_t expert) const {
    WISP_EXPECTS(adapter >= -1 && adapter < adapters_, "reroute_table::row: adapter ", adapter,
                 " is outside [-1, adapters = ", adapters_, ")");
    WISP_EXPECTS(expert >= 0 && expert < experts_, "reroute_table::row: expert ", expert,
                 " is outside [0, experts = ", experts_, ")");
    return adapter < 0 ? expert : table_[static_cast<std::size_t>(adapter * experts_ + expert)];
  }

  /// @brief Batched rerouting: `out[t*k + j] = row(adapter_ids[t], topk_ids[t*k + j])`.
  ///
  /// `out` may be `topk_ids` itself (in place). Everything is validated before anything is
  /// written. O(tokens x k), no allocation.
  /// @throws wisp::logic_error (nothing written) on a malformed shape, `adapter_ids.size() !=
  ///   tokens`, `out.size() != topk_ids.size()`, an adapter id outside `[-1, adapters)` or an
  ///   expert id outside `[0, experts)`.
  void apply(std::span<const std::int32_t> topk_ids, std::int32_t tokens, std::int32_t k,
             std::span<const std::int32_t> adapter_ids, std::span<std::int32_t> out) const {
    apply_impl(topk_ids, tokens, k, adapter_ids, out);
  }
  /// @copydoc apply
  void apply(std::span<const std::int64_t> topk_ids, std::int32_t tokens, std::int32_t k,
             std::span<const std::int32_t> adapter_ids, std::span<std::int64_t> out) const {
    apply_impl(topk_ids, tokens, k, adapter_ids, out);
  }

  [[nodiscard]] std::int32_t adapters() const noexcept { return adapters_; }
  [[nodiscard]] std::int32_t experts() const noexcept { return experts_; }
  /// Rows of the expert tensor: the key space a pager over rerouted ids needs.
  [[nodiscard]] std::int32_t rows() const noexcept { return rows_; }
  /// The table, row-major `[adapters x experts]` (e.g. to upload for a device reroute kernel).
  [[nodiscard]] std::span<const std::int32_t> table() const noexcept { return table_; }

 private:
  template <topk_id Id>
  void apply_impl(std::span<const Id> ids, std::int32_t tokens, std::int32_t k,
                  std::span<const std::int32_t> adapter_ids, std::span<Id> out) const {
    detail::check_topk_shape("reroute_table::apply", ids.size(), tokens, k);
    WISP_EXPECTS(adapter_ids.size() == static_cast<std::size_t>(tokens),
                 "reroute_table::apply: ", adapter_ids.size(), " adapter ids for ", tokens,
                 " tokens");
    WISP_EXPECTS(out.size() == ids.size(), "reroute_table::apply: output holds ", out.size(),
                 " ids for ", ids.size(), " inputs");
    for (std::size_t t = 0; t < adapter_ids.size(); ++t) {
      WISP_EXPECTS(adapter_ids[t] >= -1 && adapter_ids[t] < adapters_,
                   "reroute_table::apply: adapter_ids[", t, "] = ", adapter_ids[t],
                   " is outside [-1, adapters = ", adapters_, ")");
    }
    detail::check_topk_ids("reroute_table::apply", ids, k, experts_);
    const auto uk = static_cast<std::size_t>(k);
    for (std::size_t t = 0; t < adapter_ids.size(); ++t) {
      const std::int32_t adapter = adapter_ids[t];
      if (adapter < 0) {
        for (std::size_t j = t * uk; j < (t + 1) * uk; ++j) {
          out[j] = ids[j];
        }
        continue;
      }
      const std::int32_t* entry =
          table_.data() + static_cast<std::size_t>(adapter) * static_cast<std::size_t>(experts_);
      for (std::size_t j = t * uk; j < (t + 1) * uk; ++j) {
        out[j] = static_cast<Id>(entry[static_cast<std::size_t>(ids[j])]);
      }
    }
  }

  std::int32_t adapters_ = 0;
  std::int32_t experts_ = 1;
  std::int32_t rows_ = 1;
  std::vector<std::int32_t> table_;  // [adapters x experts] -> row
  std::vector<std::int32_t> owner_;  // adapter row - experts -> adapter * experts + expert, or -1
};

/// @brief What `write_routes` reads from a layer's adapter layout: `wisp::adapter_layout` models
/// it (ExpertWeave's padded rows: adapter `a`'s fine-tuned experts at rows `offset(a) + j`).
template <class L>
concept adapter_rows = requires(const L& layout, std::int32_t adapter) {
  { layout.shape().adapters } -> std::convertible_to<std::int32_t>;
  { layout.shape().base_experts } -> std::convertible_to<std::int32_t>;
  { layout.tensor().max_rows() } -> std::convertible_to<std::size_t>;
  { layout.adapter_experts(adapter) } -> std::convertible_to<std::span<const std::int32_t>>;
  { layout.offset(adapter) } -> std::convertible_to<std::size_t>;
};

/// @brief Writes the ESFT expert map of one layer's `layout` into `table`: every (adapter,
/// expert) pair points at its loaded adapter row or at the base row. O(N * M).
/// @throws wisp::logic_error (table unchanged) unless the table has the layout's N adapters,
///   M experts and M + N * Emax rows.
/// @code
/// wisp::reroute_table table(4, 64, static_cast<std::int32_t>(layer.tensor().max_rows()));
/// wisp::write_routes(layer, table);  // after layer.load_adapter(...) / unload_adapter(...)
/// @endcode
template <adapter_rows L>
void write_routes(const L& layout, reroute_table& table) {
  const std::int32_t adapters = layout.shape().adapters;
  const std::int32_t experts = layout.shape().base_experts;
  WISP_EXPECTS(table.adapters() == adapters && table.experts() == experts &&
                   static_cast<std::size_t>(table.rows()) == layout.tensor().max_rows(),
               "write_routes: table is [", table.adapters(), " x ", table.experts(), "] over ",
               table.rows(), " rows; the layout is [", adapters, " x ", experts, "] over ",
               layout.tensor().max_rows(), " rows");
  for (std::int32_t a = 0; a < adapters; ++a) {  // release every adapter row first
    for (std::int32_t e = 0; e < experts; ++e) {
      table.assign(a, e, e);
    }
  }
  for (std::int32_t a = 0; a < adapters; ++a) {
    const std::span<const std::int32_t> list = layout.adapter_experts(a);
    for (std::size_t j = 0; j < list.size(); ++j) {
      table.assign(a, list[j], static_cast<std::int32_t>(layout.offset(a) + j));
    }
  }
}

}  // namespace wisp
