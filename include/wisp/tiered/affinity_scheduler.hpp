// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The cache-affinity scheduler (ZipMoE, seeds/001 §3.3 and Appendix A): the operations a
/// layer call needs given where its experts are cached, ordered into blocks and run over one I/O
/// thread, L decode threads, one recovery stream and the expert execution.
///
/// **Tasks.** Each tensor of each requested expert that is not in F is one task (a DAG): an SM
/// chunk read (duration u) when the SM chunk is not cached (E-hit or miss), K E-chunk reads (v
/// each) when the E-chunks are not cached (S-hit or miss), K decodes (c each; decode j needs
/// E-chunk read j), and one recovery (r; needs the SM chunk and every decode). An expert executes
/// (its `execute_seconds`) once all its tasks are recovered; F experts execute at once. Reads run
/// on the one I/O thread, decodes on any of the L threads, recoveries on the recovery stream, and
/// executions one at a time.
///
/// **Algorithm 1.** Type-I tasks read their SM chunk (E-hits and misses), Type-II tasks do not
/// (C- and S-hits). Each type is sorted by non-increasing execution time with the tensors of one
/// expert kept together; an expert's tensors form one unit. A block starts with the first
/// remaining Type-I unit; the next unit of `(Type-II..., Type-I...)` is inserted at the earliest
/// position of the block that adds no idle time to the decode threads (the block simulated alone),
/// else right after the last Type-II unit of the block with at least its execution time (the last
/// such Type-I unit when the block holds no Type-II unit; the end when none qualifies). A block is
/// closed when it is compute-dominant: its l-th earliest decode thread finishes at least `l x v`
/// after its I/O for every l in [1, min(L, K)] (the decode threads stay busy while the next block
/// loads its first l E-chunks), or when no unit is left. Blocks run in order; within a block the
/// I/O thread loads E-chunks before SM chunks, each kind in block order.
///
/// **Execution** (`run_blocks`): every resource is work-conserving and takes the ready operation
/// of highest priority (block order, then position in the block, then chunk), as Appendix A
/// describes; the result is an exact event simulation of that policy.
/// @code
/// std::vector<wisp::layer_expert> call = {{.expert = 3, .where = wisp::residency::miss,
///                                          .tensors = 3, .execute_seconds = 1e-4}, ...};
/// wisp::tier_costs p{.sm_read = 1e-3, .e_read = 8e-5, .decode = 2e-4, .threads = 6,
///                     .e_chunks = 8};
/// wisp::affinity_schedule s = wisp::schedule_layer(call, p);
/// // s.makespan, s.blocks, s.ops (start, finish and thread of every operation)
/// @endcode
#pragma once

#include <wisp/core/enum_names.hpp>
#include <wisp/core/error.hpp>
#include <wisp/tiered/tier_model.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <vector>

namespace wisp {

/// @deprecated The scheduler's durations are `tier_costs`.
using schedule_params [[deprecated("use wisp::tier_costs")]] = tier_costs;

/// @brief One requested expert of a layer call.
struct layer_expert {
  std::int32_t expert = 0;  ///< id (reported back, not interpreted)
  residency where = residency::miss;
  std::uint32_t tensors = 1;     ///< n
  double execute_seconds = 0.0;  ///< p: its execution once recovered
};

/// @brief What an operation is.
enum class op_kind : std::uint8_t { sm_read, e_read, decode, recover, execute };
/// "sm_read", "e_read", "decode", "recover", "execute" (`to_string`, `from_string`).
template <>
struct enum_names<op_kind> {
  static constexpr std::array<enum_name<op_kind>, 5> values{{{op_kind::sm_read, "sm_read"},
                                                             {op_kind::e_read, "e_read"},
                                                             {op_kind::decode, "decode"},
                                                             {op_kind::recover, "recover"},
                                                             {op_kind::execute, "execute"}}};
};

/// @brief One scheduled operation.
struct scheduled_op {
  op_kind kind = op_kind::execute;
  std::int32_t task = -1;    ///< index into `affinity_schedule::tasks`; -1 for an execution
  std::int32_t expert = -1;  ///< index into the call's experts
  std::uint32_t chunk = 0;   ///< E-chunk index (reads and decodes)
  std::int32_t thread = -1;  ///< decode thread, -1 elsewhere
  double start = 0.0;
  double finish = 0.0;
};

/// @brief One tensor of one expert that needs work.
struct layer_task {
  std::int32_t expert = 0;  ///< index into the call's experts
  std::uint32_t tensor = 0;
  residency where = residency::miss;
  /// Type-I: the SM chunk must be read (E-hit or miss).
  [[nodiscard]] constexpr bool type_one() const noexcept {
    return where == residency::e || where == residency::miss;
  }
  [[nodiscard]] constexpr bool reads_sm() const noexcept { return type_one(); }
  [[nodiscard]] constexpr bool reads_e() const noexcept {
    return where == residency::sm || where == residency::miss;
  }
};

/// @brief A schedule: the blocks (task indices in priority order), every operation's times, the
/// makespan (the last operation's finish).
struct affinity_schedule {
  std::vector<layer_task> tasks;
  std::vector<std::vector<std::int32_t>> blocks;
  std::vector<scheduled_op> ops;
  double makespan = 0.0;
  double io_seconds = 0.0;  ///< when the I/O thread finished
};

namespace detail {

// The tasks of a call, experts in call order, tensors in order.
inline std::vector<layer_task> tasks_of(std::span<const layer_expert> experts) {
  std::vector<layer_task> tasks;
  for (std::size_t x = 0; x < experts.size(); ++x) {
    WISP_EXPECTS(experts[x].tensors >= 1 && std::isfinite(experts[x].execute_seconds) &&
                     experts[x].execute_seconds >= 0.0,
                 "schedule_layer: expert ", experts[x].expert, " has ", experts[x].tensors,
                 " tensors and execution time ", experts[x].execute_seconds,
                 " (need >= 1 and >= 0)");
    if (experts[x].where == residency::full) {
      continue;
    }
    for (std::uint32_t t = 0; t < experts[x].tensors; ++t) {
      tasks.push_back({static_cast<std::int32_t>(x), t, experts[x].where});
    }
  }
  return tasks;
}

// Work-conserving list scheduling on `machines` identical machines: each op (given in priority
// order, with its release time and duration) starts on the machine that frees first, at the
// earliest moment the op is released, taking the highest-priority released op. Writes starts
// and machines; returns the machines' finish times.
struct list_job {
  double release = 0.0;
  double duration = 0.0;
  double start = 0.0;
  std::int32_t machine = -1;
};
inline std::vector<double> list_schedule(std::vector<list_job>& jobs, std::uint32_t machines) {
  std::vector<double> free(machines, 0.0);
  std::vector<bool> done(jobs.size(), false);
  for (std::size_t placed = 0; placed < jobs.size(); ++placed) {
    const auto m =
        static_cast<std::size_t>(std::min_element(free.begin(), free.end()) - free.begin());
    double now = free[m];
    std::size_t pick = jobs.size();
    double earliest = std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < jobs.size(); ++j) {
      if (!done[j]) {
        earliest = std::min(earliest, jobs[j].release);
        if (pick == jobs.size() && jobs[j].release <= now) {
          pick = j;
        }
      }
    }
    if (pick == jobs.size()) {  // idle until the first release, then the best released op
      now = earliest;
      for (std::size_t j = 0; j < jobs.size(); ++j) {
        if (!done[j] && jobs[j].release <= now) {
          pick = j;
          break;
        }
      }
    }
    done[pick] = true;
    jobs[pick].start = now;
    jobs[pick].machine = static_cast<std::int32_t>(m);
    free[m] = now + jobs[pick].duration;
  }
  return free;
}

// What `run_blocks` reports about a block alone (block construction uses it).
struct block_profile {
  double idle = 0.0;                  // decode threads' idle time before their last finish
  double io_finish = 0.0;             // I/O thread finish
  std::vector<double> thread_finish;  // per decode thread, ascending
};

}  // namespace detail

namespace detail {

// When each task's SM chunk and each of its E-chunks (task x K + chunk) have landed.
struct io_times {
  std::vector<double> sm_ready;
  std::vector<double> e_ready;
};

// The I/O thread's operations: per block, its E-chunks then its SM chunks, back to back from 0.
inline io_times schedule_io(affinity_schedule& s, const tier_costs& p) {
  const std::uint32_t k = p.e_chunks;
  io_times t{std::vector<double>(s.tasks.size(), 0.0),
             std::vector<double>(s.tasks.size() * k, 0.0)};
  double io = 0.0;
  for (const auto& b : s.blocks) {
    for (const std::int32_t task : b) {
      const layer_task& x = s.tasks[static_cast<std::size_t>(task)];
      for (std::uint32_t j = 0; x.reads_e() && j < k; ++j) {
        s.ops.push_back({op_kind::e_read, task, x.expert, j, -1, io, io + p.e_read});
        io += p.e_read;
        t.e_ready[static_cast<std::size_t>(task) * k + j] = io;
      }
    }
    for (const std::int32_t task : b) {
      const layer_task& x = s.tasks[static_cast<std::size_t>(task)];
      if (x.reads_sm()) {
        s.ops.push_back({op_kind::sm_read, task, x.expert, 0, -1, io, io + p.sm_read});
        io += p.sm_read;
        t.sm_ready[static_cast<std::size_t>(task)] = io;
      }
    }
  }
  s.io_seconds = io;
  return t;
}

// The decodes over the L threads, tasks in priority order `order`; returns when each task's
// recovery may start (its SM chunk and every decode done).
inline std::vector<double> schedule_decodes(affinity_schedule& s,
                                            const std::vector<std::int32_t>& order,
                                            const io_times& io, const tier_costs& p) {
  const std::uint32_t k = p.e_chunks;
  std::vector<list_job> decodes;
  for (const std::int32_t t : order) {
    for (std::uint32_t j = 0; j < k; ++j) {
      decodes.push_back({io.e_ready[static_cast<std::size_t>(t) * k + j], p.decode});
    }
  }
  (void)list_schedule(decodes, p.threads);
  std::vector<double> recover_ready(io.sm_ready);
  for (std::size_t i = 0; i < decodes.size(); ++i) {
    const std::int32_t t = order[i / k];
    const list_job& d = decodes[i];
    s.ops.push_back({op_kind::decode, t, s.tasks[static_cast<std::size_t>(t)].expert,
                     static_cast<std::uint32_t>(i % k), d.machine, d.start, d.start + d.duration});
    recover_ready[static_cast<std::size_t>(t)] =
        std::max(recover_ready[static_cast<std::size_t>(t)], d.start + d.duration);
  }
  return recover_ready;
}

// The recoveries on one stream, then the executions one at a time: F experts first, then each
// expert once all its tensors are recovered.
inline void schedule_recoveries_and_executions(affinity_schedule& s,
                                               std::span<const layer_expert> experts,
                                               const std::vector<std::int32_t>& order,
                                               const std::vector<double>& recover_ready,
                                               const tier_costs& p) {
  std::vector<list_job> recoveries;
  for (const std::int32_t t : order) {
    recoveries.push_back({recover_ready[static_cast<std::size_t>(t)], p.recover});
  }
  (void)list_schedule(recoveries, 1);
  std::vector<double> expert_ready(experts.size(), 0.0);
  std::vector<std::uint32_t> recovered(experts.size(), 0);
  std::vector<std::int32_t> expert_order;
  for (std::size_t x = 0; x < experts.size(); ++x) {
    if (experts[x].where == residency::full) {
      expert_order.push_back(static_cast<std::int32_t>(x));
    }
  }
  for (std::size_t i = 0; i < order.size(); ++i) {
    const layer_task& t = s.tasks[static_cast<std::size_t>(order[i])];
    const list_job& r = recoveries[i];
    s.ops.push_back({op_kind::recover, order[i], t.expert, 0, -1, r.start, r.start + r.duration});
    const auto x = static_cast<std::size_t>(t.expert);
    expert_ready[x] = std::max(expert_ready[x], r.start + r.duration);
    if (++recovered[x] == experts[x].tensors) {
      expert_order.push_back(t.expert);
    }
  }
  std::vector<list_job> runs;
  for (const std::int32_t x : expert_order) {
    runs.push_back({expert_ready[static_cast<std::size_t>(x)],
                    experts[static_cast<std::size_t>(x)].execute_seconds});
  }
  (void)list_schedule(runs, 1);
  for (std::size_t i = 0; i < runs.size(); ++i) {
    s.ops.push_back({op_kind::execute, -1, expert_order[i], 0, -1, runs[i].start,
                     runs[i].start + runs[i].duration});
  }
}

}  // namespace detail

/// @brief Runs blocks of tasks (indices into `tasks`) under the work-conserving priority policy
/// of the file description and returns every operation's times. O(ops^2) (list scheduling by a
/// scan). Blocks may hold a subset of the tasks (block construction simulates a block alone);
/// only experts with all their tasks scheduled (and F experts) execute.
/// @throws wisp::logic_error on invalid params or a task index out of range.
inline affinity_schedule run_blocks(std::span<const layer_expert> experts,
                                    std::vector<layer_task> tasks,
                                    std::vector<std::vector<std::int32_t>> blocks,
                                    const tier_costs& p) {
  p.validate();
  affinity_schedule s;
  s.tasks = std::move(tasks);
  s.blocks = std::move(blocks);
  std::vector<std::int32_t> order;  // tasks in priority order
  for (const auto& b : s.blocks) {
    for (const std::int32_t t : b) {
      WISP_EXPECTS(t >= 0 && static_cast<std::size_t>(t) < s.tasks.size(), "run_blocks: task ", t,
                   " is outside [0, ", s.tasks.size(), ")");
      order.push_back(t);
    }
  }
  const detail::io_times io = detail::schedule_io(s, p);
  const std::vector<double> recover_ready = detail::schedule_decodes(s, order, io, p);
  detail::schedule_recoveries_and_executions(s, experts, order, recover_ready, p);
  for (const scheduled_op& op : s.ops) {
    s.makespan = std::max(s.makespan, op.finish);
  }
  return s;
}

namespace detail {

inline block_profile profile_block(std::span<const layer_expert> experts,
                                   const std::vector<layer_task>& tasks,
                                   const std::vector<std::int32_t>& block, const tier_costs& p) {
  const affinity_schedule s = run_blocks(experts, tasks, {block}, p);
  block_profile out;
  out.io_finish = s.io_seconds;
  out.thread_finish.assign(p.threads, 0.0);
  std::vector<double> busy(p.threads, 0.0);
  for (const scheduled_op& op : s.ops) {
    if (op.kind == op_kind::decode) {
      const auto l = static_cast<std::size_t>(op.thread);
      out.thread_finish[l] = std::max(out.thread_finish[l], op.finish);
      busy[l] += op.finish - op.start;
    }
  }
  for (std::size_t l = 0; l < p.threads; ++l) {
    out.idle += out.thread_finish[l] - busy[l];
  }
  std::sort(out.thread_finish.begin(), out.thread_finish.end());
  return out;
}

inline bool compute_dominant(const block_profile& b, const tier_costs& p) {
  const std::uint32_t lanes = std::min(p.threads, p.e_chunks);
  for (std::uint32_t l = 1; l <= lanes; ++l) {
    if (b.thread_finish[l - 1] - b.io_finish < l * p.e_read) {
      return false;
    }
  }
  return true;
}

}  // namespace detail

/// @brief Algorithm 1: builds the blocks of a layer call and runs them (see the file
/// description). O(units^2 x simulation) where a unit is an expert's tasks.
/// @throws wisp::logic_error on invalid params or an expert with no tensors or a negative or
///   non-finite execution time.
inline affinity_schedule schedule_layer(std::span<const layer_expert> experts,
                                        const tier_costs& p) {
  p.validate();
  std::vector<layer_task> tasks = detail::tasks_of(experts);
  // Units: one expert's tasks. sigma_I and sigma_II by non-increasing execution time (stable).
  std::vector<std::vector<std::int32_t>> type_one;
  std::vector<std::vector<std::int32_t>> type_two;
  for (std::size_t t = 0; t < tasks.size(); ++t) {
    auto& units = tasks[t].type_one() ? type_one : type_two;
    if (tasks[t].tensor == 0) {
      units.emplace_back();
    }
    units.back().push_back(static_cast<std::int32_t>(t));
  }
  auto exec_of = [&](const std::vector<std::int32_t>& unit) {
    return experts[static_cast<std::size_t>(tasks[static_cast<std::size_t>(unit[0])].expert)]
        .execute_seconds;
  };
  auto by_exec = [&](const auto& a, const auto& b) { return exec_of(a) > exec_of(b); };
  std::stable_sort(type_one.begin(), type_one.end(), by_exec);
  std::stable_sort(type_two.begin(), type_two.end(), by_exec);
  std::vector<std::vector<std::int32_t>> queue;  // U = (sigma_II, sigma_I), consumed from the front
  std::size_t next_one = 0;
  std::size_t next_two = 0;
  std::vector<std::vector<std::int32_t>> blocks;
  while (next_one < type_one.size() || next_two < type_two.size()) {
    // The block's units, as (unit, is type I).
    std::vector<std::pair<std::vector<std::int32_t>, bool>> block;
    if (next_one < type_one.size()) {
      block.emplace_back(type_one[next_one++], true);
    } else {
      block.emplace_back(type_two[next_two++], false);
    }
    auto flatten = [](const auto& units) {
      std::vector<std::int32_t> out;
      for (const auto& [unit, one] : units) {
        out.insert(out.end(), unit.begin(), unit.end());
      }
      return out;
    };
    auto profile = [&](const auto& units) {
      return detail::profile_block(experts, tasks, flatten(units), p);
    };
    detail::block_profile now = profile(block);
    while (!detail::compute_dominant(now, p) &&
           (next_one < type_one.size() || next_two < type_two.size())) {
      const bool one = next_two >= type_two.size();
      const std::vector<std::int32_t>& unit = one ? type_one[next_one++] : type_two[next_two++];
      bool placed = false;
      for (std::size_t pos = 0; pos <= block.size() && !placed; ++pos) {
        auto trial = block;
        trial.insert(trial.begin() + static_cast<std::ptrdiff_t>(pos), {unit, one});
        const detail::block_profile tp = profile(trial);
        if (tp.idle <= now.idle + 1e-12 * (1.0 + now.idle)) {
          block = std::move(trial);
          now = tp;
          placed = true;
        }
      }
      if (placed) {
        continue;
      }
      const bool any_two =
          std::any_of(block.begin(), block.end(), [](const auto& u) { return !u.second; });
      std::size_t pos = block.size();
      for (std::size_t i = 0; i < block.size(); ++i) {
        if (block[i].second != any_two && exec_of(block[i].first) >= exec_of(unit)) {
          pos = i + 1;
        }
      }
      block.insert(block.begin() + static_cast<std::ptrdiff_t>(pos), {unit, one});
      now = profile(block);
    }
    blocks.push_back(flatten(block));
  }
  return run_blocks(experts, std::move(tasks), std::move(blocks), p);
}

}  // namespace wisp
