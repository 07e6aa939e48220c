// SPDX-License-Identifier: Apache-2.0
// Pager (wisp::pager<Policy> behind one type for every built-in policy), PrepareResult, token and
// expert groups, RerouteTable.
#include "arrays.hpp"
#include "bindings.hpp"
#include "errors.hpp"

#include <wisp/cache/visit_policy.hpp>
#include <wisp/pager/pager.hpp>
#include <wisp/pager/reroute_table.hpp>
#include <wisp/parallel/rank_pager.hpp>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace wisp_python {
namespace {

namespace core = wisp;  // pager, policies, cache_stats, reroute_table

// A pager of any built-in policy: one alternative per type of `builtin_policy_types`, the list
// `visit_policy` (and so `make`) selects from.
template <class... P>
using pager_variant = std::variant<core::pager<P>...>;
using any_pager = core::builtin_policy_types::apply<pager_variant>;

std::int32_t to_int32(std::int64_t value, const char* what) {
  WISP_EXPECTS(value >= 0 && value <= std::numeric_limits<std::int32_t>::max(), what, " = ", value,
               " does not fit the pager's int32 sizes");
  return static_cast<std::int32_t>(value);
}

// A 1-D id array as int32 (int64 values outside int32 would wrap into valid-looking ids).
std::span<const std::int32_t> int32_ids(const int_matrix& m, std::vector<std::int32_t>& scratch,
                                        const char* what) {
  if (!m.wide && m.contiguous()) {
    return m.span<std::int32_t>();
  }
  with_values(m, [&](const auto& values) {
    scratch.resize(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
      WISP_EXPECTS(values[i] >= std::numeric_limits<std::int32_t>::min() &&
                       values[i] <= std::numeric_limits<std::int32_t>::max(),
                   what, "[", i, "] = ", values[i], " is outside int32");
      scratch[i] = static_cast<std::int32_t>(values[i]);
    }
  });
  return scratch;
}

// What one prepare did, copied out of the pager's buffers: a result stays valid whatever the
// pager does next, and after it is gone. One allocation: [map | plan pairs | experts].
struct prepare_snapshot {
  std::int32_t layer = 0;
  std::int32_t hits = 0;
  std::int32_t misses = 0;
  std::int32_t map_size = 0;
  std::int32_t distinct = 0;
  std::unique_ptr<std::int32_t[]> data;

  explicit prepare_snapshot(const core::prepare_result& r)
      : layer(r.layer),
        hits(r.hits),
        misses(r.misses),
        map_size(static_cast<std::int32_t>(r.expert_map.size())),
        distinct(static_cast<std::int32_t>(r.experts.size())),
        data(new std::int32_t[r.expert_map.size() + 2 * r.copy_plan.size() + r.experts.size()]) {
    static_assert(sizeof(core::copy_op) == 2 * sizeof(std::int32_t));
    std::int32_t* out = data.get();
    out = std::copy(r.expert_map.begin(), r.expert_map.end(), out);
    for (const core::copy_op& op : r.copy_plan) {
      *out++ = op.expert;
      *out++ = op.slot;
    }
    std::copy(r.experts.begin(), r.experts.end(), out);
  }
  [[nodiscard]] const std::int32_t* map() const { return data.get(); }
  [[nodiscard]] const std::int32_t* plan() const { return data.get() + map_size; }
  [[nodiscard]] const std::int32_t* experts() const { return plan() + 2 * misses; }
};

struct token_group_view {
  std::int32_t row_begin = 0;
  std::int32_t row_end = 0;
  numpy_array experts;
};

class python_pager {
  // Calls f(pager, ids, tokens, k) with `topk_ids` as a span of its own element type.
  template <class F>
  decltype(auto) with_batch(array_like topk_ids, F&& f) {
    const int_matrix ids = int_matrix_from(topk_ids, "topk_ids");
    const std::int32_t tokens = to_int32(ids.rows, "tokens (rows of topk_ids)");
    const std::int32_t k = to_int32(ids.cols, "k (columns of topk_ids)");
    return std::visit(
        [&](auto& pager) {
          return ids.wide ? f(pager, id_span(ids, scratch64_), tokens, k)
                          : f(pager, id_span(ids, scratch32_), tokens, k);
        },
        pager_);
  }

  template <class Id>
  std::span<const Id> id_span(const int_matrix& ids, std::vector<Id>& scratch) {
    std::span<const Id> span;
    if (ids.contiguous()) {
      span = ids.span<Id>();  // the caller's buffer itself
    } else {
      ids.gather(scratch);  // reuses its capacity: no allocation once grown
      span = scratch;
    }
    last_ids_address_ = reinterpret_cast<std::uintptr_t>(span.data());
    return span;
  }

  // `positions` as the pager reads them: None (none), an integer (the whole call's) or a 1-D
  // array (one per row); each in [0, 2^32).
  std::span<const std::uint32_t> positions_from(const nb::object& positions) {
    positions_.clear();
    if (positions.is_none()) {
      return positions_;
    }
    const auto checked = [](std::int64_t value, std::size_t i) {
      WISP_EXPECTS(value >= 0 && value <= std::numeric_limits<std::uint32_t>::max(), "positions[",
                   i, "] = ", value, " is outside [0, 2^32)");
      return static_cast<std::uint32_t>(value);
    };
    if (!nb::hasattr(positions, "__len__")) {  // an int, or a numpy integer scalar
      positions_.push_back(checked(nb::cast<std::int64_t>(positions), 0));
      return positions_;
    }
    with_values(int_vector_from(positions, "positions"), [&](const auto& values) {
      for (std::size_t i = 0; i < values.size(); ++i) {
        positions_.push_back(checked(static_cast<std::int64_t>(values[i]), i));
      }
    });
    return positions_;
  }

 public:
  python_pager(std::int32_t layers, std::int32_t experts, std::int32_t top_k, std::int32_t capacity,
               std::string_view policy, std::string_view scope,
               std::optional<std::vector<std::int32_t>> layer_capacities, std::int32_t max_tokens,
               std::optional<std::vector<array_like>> future,
               const std::optional<array_like>& expert_map, std::int32_t rank)
      : pager_(make(layers, experts, top_k, capacity, policy_name(policy),
                    core::cache_scope_from_string(scope), std::move(layer_capacities), max_tokens,
                    std::move(future))) {
    if (expert_map) {
      ep_.emplace(rank_map(*expert_map, rank, layers, experts));
      global_.assign(static_cast<std::size_t>(ep_->experts()), -1);
    }
  }

  prepare_snapshot prepare(std::int32_t layer, array_like topk_ids,
                           const std::optional<array_like>& out, const nb::object& positions,
                           const std::optional<array_like>& targets) {
    nb::ndarray<> out_holder;
    std::span<std::int32_t> map_out;
    if (out) {
      map_out = writable_int32(*out, static_cast<std::size_t>(map_size()), "out", out_holder);
    }
    const std::span<const std::uint32_t> token_positions = positions_from(positions);
    WISP_EXPECTS(!ep_ || token_positions.empty(),
                 "Pager.prepare: positions are not supported with an expert_map (got ",
                 token_positions.size(), ")");
    WISP_EXPECTS(!targets || ep_,
                 "Pager.prepare: targets (the rank of each pair) need an expert_map");
    const core::prepare_result r =
        with_batch(topk_ids, [&](auto& pager, auto ids, std::int32_t tokens, std::int32_t k) {
          if (targets) {  // a dispatched call: this rank's pairs, in the simulator's order
            const std::span<const std::int32_t> ranks = target_span(*targets, ids.size());
            const auto locals = ep_->select(layer, ids, ranks, tokens, k);
            rows_.assign(locals.begin(), locals.end());
            core::order_resident_first(pager, layer, std::span<std::int32_t>(rows_));
            return to_global(pager.prepare_experts(layer, rows_));
          }
          if (ep_) {  // the rank's rows of the call, then the global map
            return to_global(pager.prepare_experts(layer, ep_->select(layer, ids, tokens, k)));
          }
          return pager.prepare(layer, ids, tokens, k, token_positions);
        });
    if (!map_out.empty()) {
      std::copy(r.expert_map.begin(), r.expert_map.end(), map_out.begin());
    }
    return prepare_snapshot(r);
  }

  prepare_snapshot prepare_experts(std::int32_t layer, array_like experts) {
    const int_matrix ids = int_vector_from(experts, "experts");
    std::span<const std::int32_t> span = int32_ids(ids, scratch32_, "experts");
    last_ids_address_ = reinterpret_cast<std::uintptr_t>(span.data());
    if (ep_) {
      span = local_rows(layer, span);
    }
    const core::prepare_result r = std::visit(
        [&](auto& pager) {
          const core::prepare_result local = pager.prepare_experts(layer, span);
          return ep_ ? to_global(local) : local;
        },
        pager_);
    return prepare_snapshot(r);
  }

  std::vector<token_group_view> plan_token_groups(std::int32_t layer, array_like topk_ids) {
    WISP_EXPECTS(!ep_,
                 "plan_token_groups is not available with an expert_map (rows routed to other "
                 "ranks have no local id); split with plan_expert_groups");
    std::vector<token_group_view> out;
    for (const core::token_group& g :
         with_batch(topk_ids, [&](auto&pager, auto ids, std::int32_t tokens, std::int32_t k) {
           return pager.plan_token_groups(layer, ids, tokens, k);
         })) {
      out.push_back({g.row_begin, g.row_end, numpy_copy(g.experts)});
    }
    return out;
  }

  std::vector<numpy_array> plan_expert_groups(std::int32_t layer, array_like topk_ids) {
    std::vector<numpy_array> out;
    if (ep_) {  // groups of the rank's rows, handed back as global ids
      for (const core::expert_group& g :
           with_batch(topk_ids, [&](auto&pager, auto ids, std::int32_t tokens, std::int32_t k) {
             const auto locals = ep_->select(layer, ids, tokens, k);
             return pager.plan_expert_groups(layer, locals,
                                             static_cast<std::int32_t>(locals.size()), 1);
           })) {
        std::vector<std::int32_t> global;
        for (const std::int32_t local : g.experts) {
          global.push_back(ep_->logical_of(layer, local));
        }
        out.push_back(numpy_copy(std::span<const std::int32_t>(global)));
      }
      return out;
    }
    for (const core::expert_group& g :
         with_batch(topk_ids, [&](auto&pager, auto ids, std::int32_t tokens, std::int32_t k) {
           return pager.plan_expert_groups(layer, ids, tokens, k);
         })) {
      out.push_back(numpy_copy(g.experts));
    }
    return out;
  }

  void reserve_tokens(std::int32_t tokens, std::int32_t k) {
    std::visit([&](auto& pager) { pager.reserve_tokens(tokens, k); }, pager_);
  }
  void begin_step() {
    std::visit([](auto& pager) { pager.begin_step(); }, pager_);
  }
  [[nodiscard]] std::uint32_t step() const {
    return std::visit([](const auto& pager) { return pager.step(); }, pager_);
  }
  bool invalidate(std::int32_t layer, std::int32_t expert) {
    const std::int32_t row = ep_ ? ep_->local_of(layer, expert) : expert;
    return row >= 0 &&
           std::visit([&](auto& pager) { return pager.invalidate(layer, row); }, pager_);
  }
  core::resize_report resize_layer(std::int32_t layer, std::int32_t capacity) {
    return std::visit([&](auto& pager) { return pager.resize_layer(layer, capacity); }, pager_);
  }
  core::resize_report resize_pool(std::int32_t capacity) {
    return std::visit([&](auto& pager) { return pager.resize_pool(capacity); }, pager_);
  }
  [[nodiscard]] std::int32_t layers() const {
    return std::visit([](const auto& pager) { return pager.layers(); }, pager_);
  }
  [[nodiscard]] std::int32_t experts() const {
    return std::visit([](const auto& pager) { return pager.experts(); }, pager_);
  }
  [[nodiscard]] std::int32_t top_k() const {
    return std::visit([](const auto& pager) { return pager.top_k(); }, pager_);
  }
  [[nodiscard]] std::string_view scope() const {
    return core::to_string(std::visit([](const auto& pager) { return pager.scope(); }, pager_));
  }
  /// The library's name of the policy the pager runs (that of its type, not of the argument).
  [[nodiscard]] std::string_view policy() const {
    return std::visit(
        [](const auto& pager) { return std::remove_cvref_t<decltype(pager)>::policy_type::name; },
        pager_);
  }
  [[nodiscard]] std::int32_t capacity(std::int32_t layer) const {
    return std::visit([&](const auto& pager) { return pager.capacity(layer); }, pager_);
  }
  [[nodiscard]] std::int32_t slot_of(std::int32_t layer, std::int32_t expert) const {
    const std::int32_t row = ep_ ? ep_->local_of(layer, expert) : expert;
    return row < 0
               ? -1
               : std::visit([&](const auto& pager) { return pager.slot_of(layer, row); }, pager_);
  }
  [[nodiscard]] numpy_array expert_map(std::int32_t layer) const {
    const std::span<const std::int32_t> local =
        std::visit([&](const auto& pager) { return pager.expert_map(layer); }, pager_);
    if (!ep_) {
      return numpy_copy(local);
    }
    std::vector<std::int32_t> visible;
    for (std::size_t row = 0; row < local.size(); ++row) {
      if (local[row] >= 0) {
        visible.push_back(static_cast<std::int32_t>(row));
      }
    }
    std::vector<std::int32_t> global(static_cast<std::size_t>(ep_->experts()));
    ep_->to_global(layer, visible, local, global);
    return numpy_copy(std::span<const std::int32_t>(global));
  }
  /// The rank of the expert map, or None without one.
  [[nodiscard]] std::optional<std::int32_t> rank() const {
    return ep_ ? std::optional<std::int32_t>(ep_->rank()) : std::nullopt;
  }
  [[nodiscard]] core::cache_stats stats(std::optional<std::int32_t> layer) const {
    return std::visit(
        [&](const auto& pager) { return layer ? pager.stats(*layer) : pager.stats(); }, pager_);
  }
  [[nodiscard]] std::uintptr_t last_ids_address() const { return last_ids_address_; }

 private:
  static any_pager make(std::int32_t layers, std::int32_t experts, std::int32_t top_k,
                        std::int32_t capacity, std::string_view policy, core::cache_scope scope,
                        std::optional<std::vector<std::int32_t>> layer_capacities,
                        std::int32_t max_tokens, std::optional<std::vector<array_like>> future) {
    const core::pager_config config{
        .layers = layers,
        .experts = experts,
        .top_k = top_k,
        .capacity = capacity,
        .layer_capacities = layer_capacities.value_or(std::vector<std::int32_t>{}),
        .scope = scope,
        .max_tokens = max_tokens};
    WISP_EXPECTS(future.has_value() == (policy == "belady"),
                 policy == "belady"
                     ? "belady needs `future`: each cache's sequence of keys (per-layer scope: one "
                       "array per layer of the distinct experts of its calls, in first-seen order; "
                       "global scope: one array of layer * experts + expert keys)"
                     : "`future` is only for policy='belady'");
    return core::visit_policy(policy, [&]<class P>(std::type_identity<P>) -> any_pager {
      if constexpr (std::is_same_v<P, core::belady>) {
        std::vector<std::vector<std::int32_t>> keys;
        for (const array_like& seq : *future) {
          std::vector<std::int32_t> scratch;
          const auto span = int32_ids(int_vector_from(seq, "future[i]"), scratch, "future[i]");
          keys.emplace_back(span.begin(), span.end());
        }
        const std::size_t caches =
            scope == core::cache_scope::global ? 1u : static_cast<std::size_t>(std::max(layers, 0));
        WISP_EXPECTS(keys.size() == caches, "future holds ", keys.size(), " sequences for ", caches,
                     " caches (", core::to_string(scope), " scope)");
        return any_pager(std::in_place_type<core::pager<core::belady>>, config,
                         [&keys](std::int32_t cache) {
                           const auto& k = keys[static_cast<std::size_t>(cache)];
                           return core::belady(std::span<const core::cache_key>(k));
                         });
      } else {
        return any_pager(std::in_place_type<core::pager<P>>, config);
      }
    });
  }

  // The ids of the call and of `prepare_result`s: global experts with an expert map.
  [[nodiscard]] std::int32_t map_size() const { return ep_ ? ep_->experts() : experts(); }

  // An engine's EP map: int[experts] (every layer alike) or int[layers, experts].
  static core::rank_expert_map rank_map(const array_like& map, std::int32_t rank,
                                        std::int32_t layers, std::int32_t rows) {
    const nb::object a = nb::module_::import_("numpy").attr("asarray")(map);
    const auto ndim = nb::cast<int>(a.attr("ndim"));
    WISP_EXPECTS(ndim == 1 || ndim == 2,
                 "expert_map must be int[experts] or int[layers, experts], "
                 "got ",
                 ndim, " dimensions");
    const int_matrix m =
        ndim == 1 ? int_vector_from(a, "expert_map") : int_matrix_from(a, "expert_map");
    WISP_EXPECTS(m.ndim == 1 || m.rows == layers, "expert_map has ", m.rows, " rows for ", layers,
                 " layers (give int[experts] or int[layers, experts])");
    const std::int64_t experts = m.ndim == 1 ? m.rows : m.cols;
    std::vector<std::int32_t> maps;
    with_values(m, [&](const auto& values) {
      for (std::int32_t l = 0; l < (m.ndim == 1 ? layers : 1); ++l) {
        for (std::size_t i = 0; i < values.size(); ++i) {
          WISP_EXPECTS(values[i] >= -1 && values[i] <= std::numeric_limits<std::int32_t>::max(),
                       "expert_map[", i, "] = ", values[i], " is not a local id or -1");
          maps.push_back(static_cast<std::int32_t>(values[i]));
        }
      }
    });
    return {rank, layers, to_int32(experts, "experts (columns of expert_map)"), rows, maps};
  }
  // `targets` as int32 (read in place when contiguous int32), with as many entries as the ids.
  std::span<const std::int32_t> target_span(const array_like& targets, std::size_t pairs) {
    const nb::object a = nb::module_::import_("numpy").attr("asarray")(targets);
    const int_matrix m = nb::cast<int>(a.attr("ndim")) == 1 ? int_vector_from(targets, "targets")
                                                            : int_matrix_from(targets, "targets");
    WISP_EXPECTS(static_cast<std::size_t>(m.rows * m.cols) == pairs,
                 "Pager.prepare: targets holds ", m.rows * m.cols, " ranks for ", pairs,
                 " (token, expert) pairs");
    return int32_ids(m, targets_, "targets");
  }
  // Global ids -> the rank's rows; an expert the rank does not hold is an error.
  std::span<const std::int32_t> local_rows(std::int32_t layer, std::span<const std::int32_t> ids) {
    rows_.clear();
    for (const std::int32_t e : ids) {
      const std::int32_t row = ep_->local_of(layer, e);
      WISP_EXPECTS(row >= 0, "expert ", e, " of layer ", layer, " is not held by rank ",
                   ep_->rank(), " (its expert_map holds -1)");
      rows_.push_back(row);
    }
    return rows_;
  }
  // A local prepare_result with the global map in place of the local one (views global_).
  core::prepare_result to_global(core::prepare_result r) {
    ep_->to_global(r.layer, r.experts, r.expert_map, global_);
    r.expert_map = global_;
    return r;
  }

  any_pager pager_;
  std::optional<core::rank_expert_map> ep_;  // the engine's EP map, if given
  std::vector<std::int32_t> global_;         // the last prepare's global map
  std::vector<std::int32_t> rows_;           // prepare_experts' ids as local rows
  std::vector<std::int32_t> targets_;        // gathered targets of non-contiguous arrays
  std::vector<std::int32_t> scratch32_;      // gathered ids of non-contiguous arrays
  std::vector<std::int64_t> scratch64_;
  std::vector<std::uint32_t> positions_;  // the last prepare's token positions
  std::uintptr_t last_ids_address_ = 0;   // the ids the last prepare handed to C++ (for tests)
};

nb::typed<nb::dict, nb::str, numpy_array> resize_report_dict(const core::resize_report& r) {
  nb::typed<nb::dict, nb::str, numpy_array> d;
  d["evicted"] = numpy_copy(std::span<const core::cache_key>(r.evicted));
  std::vector<std::int32_t> moves;
  moves.reserve(3 * r.moves.size());
  for (const core::slot_move& mv : r.moves) {
    moves.insert(moves.end(), {mv.key, mv.from, mv.to});
  }
  d["moves"] = numpy_copy(moves.data(), {static_cast<std::int64_t>(r.moves.size()), 3});
  return d;
}

}  // namespace

// One declarative table of the module's pager bindings (long, but a list reads best whole).
void bind_pager(nb::module_& m) {
  nb::class_<core::cache_stats>(m, "CacheStats",
                                "Counters of a cache (or summed over caches): accesses, hits, "
                                "misses, evictions and collision misses (a miss on a key evicted "
                                "earlier in the same step).")
      .def_ro("accesses", &core::cache_stats::accesses)
      .def_ro("hits", &core::cache_stats::hits)
      .def_ro("misses", &core::cache_stats::misses)
      .def_ro("evictions", &core::cache_stats::evictions)
      .def_ro("collision_misses", &core::cache_stats::collision_misses)
      .def_prop_ro("hit_rate", &core::cache_stats::hit_rate, "hits / accesses (0 with no access)")
      .def(
          "__eq__", [](const core::cache_stats& a, const core::cache_stats& b) { return a == b; },
          nb::is_operator())
      .def("__repr__", [](const core::cache_stats& s) {
        return "CacheStats(accesses=" + std::to_string(s.accesses) +
               ", hits=" + std::to_string(s.hits) + ", misses=" + std::to_string(s.misses) +
               ", evictions=" + std::to_string(s.evictions) +
               ", collision_misses=" + std::to_string(s.collision_misses) + ")";
      });

  nb::class_<prepare_snapshot>(
      m, "PrepareResult",
      "What one Pager.prepare did. A value: its arrays are read-only and stay valid whatever the "
      "pager does next, and after the pager is gone.")
      .def_ro("layer", &prepare_snapshot::layer)
      .def_ro("hits", &prepare_snapshot::hits,
              "distinct experts of the call that were resident (hits + misses == len(experts))")
      .def_ro("misses", &prepare_snapshot::misses,
              "distinct experts that were not (== len(copy_plan))")
      .def_prop_ro(
          "expert_map",
          [](nb::handle self) {
            const auto& s = nb::cast<const prepare_snapshot&>(self);
            return numpy_view(s.map(), {s.map_size}, self);
          },
          "int32[experts]: the slot of every expert of this call, -1 for every other expert "
          "(also for resident experts the call did not request)")
      .def_prop_ro(
          "copy_plan",
          [](nb::handle self) {
            const auto& s = nb::cast<const prepare_snapshot&>(self);
            return numpy_view(s.plan(), {s.misses, 2}, self);
          },
          "int32[misses, 2]: (expert, slot) rows in access order; copy each expert's host master "
          "into its slot before the kernel runs")
      .def_prop_ro(
          "experts",
          [](nb::handle self) {
            const auto& s = nb::cast<const prepare_snapshot&>(self);
            return numpy_view(s.experts(), {s.distinct}, self);
          },
          "int32[distinct]: the distinct experts of the call in first-seen order")
      .def("__repr__", [](const prepare_snapshot& s) {
        return "PrepareResult(layer=" + std::to_string(s.layer) +
               ", hits=" + std::to_string(s.hits) + ", misses=" + std::to_string(s.misses) + ")";
      });

  nb::class_<token_group_view>(m, "TokenGroup",
                               "Rows [row_begin, row_end) of a batch and the sorted distinct "
                               "experts they route to.")
      .def_ro("row_begin", &token_group_view::row_begin)
      .def_ro("row_end", &token_group_view::row_end)
      .def_ro("experts", &token_group_view::experts, "int32 array, sorted ascending")
      .def("__repr__", [](const token_group_view& g) {
        return "TokenGroup(rows=" + std::to_string(g.row_begin) + ":" + std::to_string(g.row_end) +
               ", experts=" + nb::str(g.experts).c_str() + ")";
      });

  nb::class_<python_pager>(
      m, "Pager", nb::is_weak_referenceable(),
      "Per-layer expert paging (wisp::pager<Policy>): prepare(layer, topk_ids) makes exactly the "
      "experts of a call resident and visible, and returns the expert map and the copy plan for an "
      "unmodified fused-MoE kernel.\n\n"
      "policy is one of wisp.POLICIES ('least-stale' is accepted too) with the library's default "
      "parameters (decayed_frequency and predicted_next_use: a half-life of 256 forward passes; "
      "predicted_next_use estimates next uses from decayed routing rates, no routing predictor "
      "attached; reuse_probability and learned_belady read the token positions given to "
      "prepare); scope is 'layer' (one cache per layer, capacity = slots per "
      "layer) or 'global' (one pool over (layer, expert) keys). belady needs `future`: each "
      "cache's key sequence.\n\n"
      "On an expert-parallel rank, pass the engine's EP map: expert_map (vLLM's expert_map: "
      "int[global experts], global id -> local row or -1, or one per layer as int[layers, global "
      "experts]) and rank; `experts` is then the rank's local rows. prepare takes the router's "
      "global ids, pages the rank's rows of the call and returns a global expert map (-1 for "
      "every expert the rank does not compute); copy plans name local rows; prepare_experts, "
      "slot_of, invalidate, expert_map and plan_expert_groups speak global ids; "
      "plan_token_groups is not available. "
      "Not thread-safe: one thread at a time (calls hold the GIL).")
      .def(nb::init<std::int32_t, std::int32_t, std::int32_t, std::int32_t, std::string_view,
                    std::string_view, std::optional<std::vector<std::int32_t>>, std::int32_t,
                    std::optional<std::vector<array_like>>, const std::optional<array_like>&,
                    std::int32_t>(),
           nb::arg("layers"), nb::arg("experts"), nb::arg("top_k"), nb::arg("capacity"),
           nb::arg("policy") = "lru", nb::arg("scope") = "layer",
           nb::arg("layer_capacities") = nb::none(), nb::arg("max_tokens") = 0,
           nb::arg("future") = nb::none(), nb::arg("expert_map").none() = nb::none(),
           nb::arg("rank") = 0)
      .def("prepare", &python_pager::prepare, nb::arg("layer"), nb::arg("topk_ids"),
           nb::arg("out").none() = nb::none(), nb::arg("positions").none() = nb::none(),
           nb::arg("targets").none() = nb::none(),
           "Makes exactly the experts of topk_ids ([tokens, k], int32 or int64, numpy or torch "
           "CPU, any strides) of `layer` resident and visible; O(tokens x k).\n\n"
           "C-contiguous ids are read in place; other layouts are gathered once into a buffer the "
           "pager reuses. `out`, if given, is a writable int32[experts] array (numpy or torch CPU) "
           "that receives the expert map in place. `positions`, if given, are the token positions "
           "that position-aware policies read (reuse_probability, learned_belady): an int for "
           "the whole call (decode at batch 1) or a 1-D array with one per row (each distinct "
           "expert then carries the position of the first row routed to it; not with an "
           "expert_map). Raises LogicError (nothing changed) on a bad layer, shape, id or "
           "position count, or a call with more distinct experts than the capacity (split it "
           "with plan_token_groups / "
           "plan_expert_groups).\n\n"
           "With an expert_map, `targets` (int32 [tokens, k], the rank computing each pair: "
           "ReplicaChooser.choose's output) keeps only this rank's pairs, prepared as the "
           "expert-parallel simulator does (order_resident_first: resident experts first, then "
           "first seen), so a live rank counts what `wisp sim --ranks` counts; a pair sent here "
           "whose expert the rank holds no replica of is refused.")
      .def("prepare_experts", &python_pager::prepare_experts, nb::arg("layer"), nb::arg("experts"),
           "Makes exactly `experts` (1-D, duplicates allowed) of `layer` visible: one group of a "
           "split. Same semantics and errors as prepare over [len(experts), 1] ids.")
      .def("plan_token_groups", &python_pager::plan_token_groups, nb::arg("layer"),
           nb::arg("topk_ids"),
           "The fewest contiguous row groups of the batch whose expert unions fit the layer's "
           "capacity (token split). Does not touch the cache.")
      .def("plan_expert_groups", &python_pager::plan_expert_groups, nb::arg("layer"),
           nb::arg("topk_ids"),
           "The batch's distinct experts in ceil(union / capacity) groups, resident experts first "
           "(expert split). Does not touch the cache.")
      .def("reserve_tokens", &python_pager::reserve_tokens, nb::arg("tokens"), nb::arg("k"),
           "Grows the group planner so batches of tokens x k ids plan without allocation.")
      .def("begin_step", &python_pager::begin_step,
           "Starts the next forward pass (step + 1); Least-Stale and collision counts use it.")
      .def_prop_ro("step", &python_pager::step)
      .def("invalidate", &python_pager::invalidate, nb::arg("layer"), nb::arg("expert"),
           "Drops `expert` of `layer` from its cache and hides it from the layer's map; returns "
           "whether it was resident.")
      .def(
          "resize_layer",
          [](python_pager& p, std::int32_t layer, std::int32_t capacity) {
            return resize_report_dict(p.resize_layer(layer, capacity));
          },
          nb::arg("layer"), nb::arg("capacity"),
          "Per-layer scope: changes the layer's slot count. Returns {'evicted': int32[n], "
          "'moves': int32[m, 3] of (expert, from_slot, to_slot)}: copy each move's bytes before "
          "freeing slots >= capacity. Strong guarantee.")
      .def(
          "resize_pool",
          [](python_pager& p, std::int32_t capacity) {
            return resize_report_dict(p.resize_pool(capacity));
          },
          nb::arg("capacity"),
          "Global scope: changes the pool's slot count; keys are layer * experts + expert.")
      .def_prop_ro("layers", &python_pager::layers)
      .def_prop_ro("experts", &python_pager::experts)
      .def_prop_ro("top_k", &python_pager::top_k)
      .def_prop_ro("scope", &python_pager::scope)
      .def_prop_ro("policy", &python_pager::policy)
      .def_prop_ro("rank", &python_pager::rank,
                   "The expert-parallel rank whose expert_map the pager took, or None.")
      .def("capacity", &python_pager::capacity, nb::arg("layer"),
           "Slots available to `layer` (the pool's in global scope).")
      .def("slot_of", &python_pager::slot_of, nb::arg("layer"), nb::arg("expert"),
           "Slot of `expert` of `layer` if resident (visible or not), else -1.")
      .def("expert_map", &python_pager::expert_map, nb::arg("layer"),
           "A copy of the layer's current map (as its last prepare left it).")
      .def("stats", &python_pager::stats, nb::arg("layer") = nb::none(),
           "Counters of the cache serving `layer`, or summed over every cache.")
      .def_prop_ro("_last_ids_address", &python_pager::last_ids_address,
                   "Address of the ids the last prepare handed to C++ (tests prove zero copy).")
      .def("__repr__", [](const python_pager& p) {
        return "Pager(layers=" + std::to_string(p.layers()) +
               ", experts=" + std::to_string(p.experts()) + ", top_k=" + std::to_string(p.top_k()) +
               ", policy='" + std::string(p.policy()) + "', scope='" + std::string(p.scope()) +
               "')";
      });

  nb::class_<core::reroute_table>(
      m, "RerouteTable",
      "ExpertWeave's [adapters x experts] -> row table: adapter fine-tuned experts live as extra "
      "rows [experts, rows) of one expert tensor; adapter id -1 is the base model.")
      .def(nb::init<std::int32_t, std::int32_t, std::int32_t>(), nb::arg("adapters"),
           nb::arg("experts"), nb::arg("rows"))
      .def("assign", &core::reroute_table::assign, nb::arg("adapter"), nb::arg("expert"),
           nb::arg("row"))
      .def("row", &core::reroute_table::row, nb::arg("adapter"), nb::arg("expert"))
      .def(
          "apply",
          [](const core::reroute_table& t, array_like topk_ids, array_like adapter_ids) {
            const int_matrix ids = int_matrix_from(topk_ids, "topk_ids");
            std::vector<std::int32_t> adapters_scratch;
            const auto adapters = int32_ids(int_vector_from(adapter_ids, "adapter_ids"),
                                            adapters_scratch, "adapter_ids");
            const std::int32_t tokens = to_int32(ids.rows, "tokens (rows of topk_ids)");
            const std::int32_t k = to_int32(ids.cols, "k (columns of topk_ids)");
            return with_values(ids, [&](const auto& values) {
              using Id = typename std::decay_t<decltype(values)>::value_type;
              Id* out = nullptr;
              numpy_array a = numpy_empty<Id>({ids.rows, ids.cols}, out);
              t.apply(std::span<const Id>(values), tokens, k, adapters,
                      std::span<Id>(out, values.size()));
              return a;
            });
          },
          nb::arg("topk_ids"), nb::arg("adapter_ids"),
          "Reroutes [tokens, k] ids: out[t, j] = row(adapter_ids[t], topk_ids[t, j]). Returns a "
          "new array of the ids' dtype.")
      .def_prop_ro("adapters", &core::reroute_table::adapters)
      .def_prop_ro("experts", &core::reroute_table::experts)
      .def_prop_ro("rows", &core::reroute_table::rows)
      .def_prop_ro(
          "table",
          [](const core::reroute_table& t) {
            return numpy_copy(t.table().data(), {t.adapters(), t.experts()});
          },
          "A copy of the table, int32[adapters, experts].");
}

}  // namespace wisp_python
