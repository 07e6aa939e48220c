// SPDX-License-Identifier: Apache-2.0
// The cache-affinity scheduler: every schedule checked for feasibility by an independent checker
// (precedences, one operation at a time per resource, durations), and Theorem 3.1 verified on
// thousands of random small instances against the exact optimum of an exhaustive branch-and-bound
// search, itself checked against plain enumeration of every dispatch order on tiny instances.
#include "support/enum_names.hpp"
#include "support/expect_error.hpp"

#include <wisp/tiered/affinity_scheduler.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <optional>
#include <random>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using wisp::layer_expert;
using wisp::residency;
using wisp::tier_costs;

// ------------------------------------------------------------------ the DAG, written from the
// rules

enum resource { io = 0, dec = 1, rec = 2, gpu = 3 };
struct node {
  resource res;
  double duration;
  std::vector<int> preds;
};

std::vector<node> dag_of(const std::vector<layer_expert>& experts, const tier_costs& p) {
  std::vector<node> g;
  for (const layer_expert& x : experts) {
    std::vector<int> exec_preds;
    if (x.where != residency::full) {
      for (std::uint32_t t = 0; t < x.tensors; ++t) {
        std::vector<int> recover_preds;
        if (x.where == residency::e || x.where == residency::miss) {
          g.push_back({io, p.sm_read, {}});
          recover_preds.push_back(static_cast<int>(g.size()) - 1);
        }
        for (std::uint32_t j = 0; j < p.e_chunks; ++j) {
          std::vector<int> decode_preds;
          if (x.where == residency::sm || x.where == residency::miss) {
            g.push_back({io, p.e_read, {}});
            decode_preds.push_back(static_cast<int>(g.size()) - 1);
          }
          g.push_back({dec, p.decode, decode_preds});
          recover_preds.push_back(static_cast<int>(g.size()) - 1);
        }
        g.push_back({rec, p.recover, recover_preds});
        exec_preds.push_back(static_cast<int>(g.size()) - 1);
      }
    }
    g.push_back({gpu, x.execute_seconds, exec_preds});
  }
  return g;
}

// ------------------------------------------------------------------ exact optimum

// Branch and bound over semi-active schedules generated in order of start time (ties by node
// id), each decode on an explicit thread (threads with equal free times are interchangeable).
// Complete: an optimal semi-active schedule, dispatched in its own start order with its own
// thread choices, is one of the generated sequences.
class optimum {
 public:
  optimum(const std::vector<node>& g, std::uint32_t threads, double upper)
      : g_(g), threads_(threads), best_(upper) {
    finish_.assign(g.size(), -1.0);
    succs_.resize(g.size());
    for (std::size_t i = 0; i < g.size(); ++i) {
      for (const int q : g[i].preds) {
        succs_[static_cast<std::size_t>(q)].push_back(static_cast<int>(i));
      }
    }
    tail_.assign(g.size(), 0.0);
    for (std::size_t i = g.size(); i-- > 0;) {  // preds have lower ids
      double after = 0.0;
      for (const int s : succs_[i]) {
        after = std::max(after, tail_[static_cast<std::size_t>(s)]);
      }
      tail_[i] = g[i].duration + after;
    }
    free_.assign(3, 0.0);
    thread_free_.assign(threads, 0.0);
  }
  double solve() {
    search(0, 0.0, -1);
    return best_;
  }
  std::uint64_t nodes() const { return nodes_; }

 private:
  double lower_bound(double s_last) const {
    std::array<double, 4> work{};
    double lb = 0.0;
    for (std::size_t i = 0; i < g_.size(); ++i) {
      if (finish_[i] >= 0.0) {
        lb = std::max(lb, finish_[i]);
        continue;
      }
      work[g_[i].res] += g_[i].duration;
      double head = s_last;
      for (const int q : g_[i].preds) {
        head = std::max(head, std::max(finish_[static_cast<std::size_t>(q)], 0.0));
      }
      lb = std::max(lb, head + tail_[i]);
    }
    for (const resource r : {io, rec, gpu}) {
      lb = std::max(lb, std::max(free_[r == io ? 0 : r == rec ? 1 : 2], s_last) + work[r]);
    }
    double threads = work[dec];
    for (const double f : thread_free_) {
      threads += std::max(f, s_last);
    }
    return std::max(lb, threads / threads_);
  }

  void search(std::size_t placed, double s_last, int last) {
    ++nodes_;
    if (placed == g_.size()) {
      best_ = std::min(best_, *std::max_element(finish_.begin(), finish_.end()));
      return;
    }
    if (lower_bound(s_last) >= best_ - 1e-12) {
      return;
    }
    for (std::size_t i = 0; i < g_.size(); ++i) {
      if (finish_[i] >= 0.0) {
        continue;
      }
      double ready = 0.0;
      bool available = true;
      for (const int q : g_[i].preds) {
        available &= finish_[static_cast<std::size_t>(q)] >= 0.0;
        ready = std::max(ready, finish_[static_cast<std::size_t>(q)]);
      }
      if (!available) {
        continue;
      }
      auto try_start = [&](double& machine_free) {
        const double start = std::max(ready, machine_free);
        if (start < s_last || (start == s_last && static_cast<int>(i) < last)) {
          return;
        }
        const double saved = machine_free;
        machine_free = start + g_[i].duration;
        finish_[i] = machine_free;
        search(placed + 1, start, static_cast<int>(i));
        finish_[i] = -1.0;
        machine_free = saved;
      };
      if (g_[i].res == dec) {
        for (std::size_t l = 0; l < thread_free_.size(); ++l) {
          if (std::find(thread_free_.begin(), thread_free_.begin() + static_cast<std::ptrdiff_t>(l),
                        thread_free_[l]) == thread_free_.begin() + static_cast<std::ptrdiff_t>(l)) {
            try_start(thread_free_[l]);
          }
        }
      } else {
        try_start(free_[g_[i].res == io ? 0 : g_[i].res == rec ? 1 : 2]);
      }
    }
  }

  const std::vector<node>& g_;
  std::uint32_t threads_;
  double best_;
  std::vector<double> finish_;
  std::vector<std::vector<int>> succs_;
  std::vector<double> tail_;
  std::vector<double> free_;  // io, rec, gpu
  std::vector<double> thread_free_;
  std::uint64_t nodes_ = 0;
};

// Every topological order, every thread for every decode, no pruning: the oracle of the oracle.
double enumerate_all(const std::vector<node>& g, std::uint32_t threads) {
  std::vector<double> finish(g.size(), -1.0);
  std::array<double, 3> free{};
  std::vector<double> thread_free(threads, 0.0);
  double best = INFINITY;
  auto rec_search = [&](auto& self, std::size_t placed) -> void {
    if (placed == g.size()) {
      best = std::min(best, *std::max_element(finish.begin(), finish.end()));
      return;
    }
    for (std::size_t i = 0; i < g.size(); ++i) {
      if (finish[i] >= 0.0) {
        continue;
      }
      double ready = 0.0;
      bool ok = true;
      for (const int q : g[i].preds) {
        ok &= finish[static_cast<std::size_t>(q)] >= 0.0;
        ready = std::max(ready, finish[static_cast<std::size_t>(q)]);
      }
      if (!ok) {
        continue;
      }
      auto go = [&](double& m) {
        const double saved = m;
        m = std::max(ready, m) + g[i].duration;
        finish[i] = m;
        self(self, placed + 1);
        finish[i] = -1.0;
        m = saved;
      };
      if (g[i].res == dec) {
        for (double& t : thread_free) {
          go(t);
        }
      } else {
        go(free[g[i].res == io ? 0 : g[i].res == rec ? 1 : 2]);
      }
    }
  };
  rec_search(rec_search, 0);
  return best;
}

// ------------------------------------------------------------------ feasibility

void expect_feasible(const std::vector<layer_expert>& experts, const tier_costs& p,
                     const wisp::affinity_schedule& s) {
  const double eps = 1e-9;
  using wisp::op_kind;
  std::vector<double> recovered(s.tasks.size(), -1.0);
  std::vector<double> exec_ready(experts.size(), 0.0);
  std::vector<int> executed(experts.size(), 0);
  std::size_t expected_ops = 0;
  for (std::size_t t = 0; t < s.tasks.size(); ++t) {
    const auto& task = s.tasks[t];
    double sm = 0.0;
    std::vector<double> e_read(p.e_chunks, 0.0);
    std::vector<double> decoded(p.e_chunks, -1.0);
    int sm_reads = 0;
    int e_reads = 0;
    int recovers = 0;
    for (const auto& op : s.ops) {
      if (op.task != static_cast<std::int32_t>(t)) {
        continue;
      }
      if (op.kind == op_kind::sm_read) {
        sm = op.finish;
        ++sm_reads;
        EXPECT_NEAR(op.finish - op.start, p.sm_read, eps);
      } else if (op.kind == op_kind::e_read) {
        e_read[op.chunk] = op.finish;
        ++e_reads;
        EXPECT_NEAR(op.finish - op.start, p.e_read, eps);
      }
    }
    for (const auto& op : s.ops) {
      if (op.task != static_cast<std::int32_t>(t)) {
        continue;
      }
      if (op.kind == op_kind::decode) {
        EXPECT_GE(op.start, e_read[op.chunk] - eps) << "decode before its E-chunk";
        EXPECT_NEAR(op.finish - op.start, p.decode, eps);
        EXPECT_TRUE(op.thread >= 0 && op.thread < static_cast<std::int32_t>(p.threads));
        decoded[op.chunk] = op.finish;
      }
    }
    for (const auto& op : s.ops) {
      if (op.task == static_cast<std::int32_t>(t) && op.kind == op_kind::recover) {
        ++recovers;
        EXPECT_GE(op.start, sm - eps);
        for (const double d : decoded) {
          EXPECT_GE(d, 0.0) << "a decode is missing";
          EXPECT_GE(op.start, d - eps) << "recovery before a decode";
        }
        EXPECT_NEAR(op.finish - op.start, p.recover, eps);
        recovered[t] = op.finish;
      }
    }
    EXPECT_EQ(sm_reads, task.reads_sm() ? 1 : 0);
    EXPECT_EQ(e_reads, task.reads_e() ? static_cast<int>(p.e_chunks) : 0);
    EXPECT_EQ(recovers, 1);
    const auto x = static_cast<std::size_t>(task.expert);
    exec_ready[x] = std::max(exec_ready[x], recovered[t]);
    expected_ops += static_cast<std::size_t>(sm_reads + e_reads + recovers) + p.e_chunks;
  }
  for (const auto& op : s.ops) {
    if (op.kind == op_kind::execute) {
      const auto x = static_cast<std::size_t>(op.expert);
      ++executed[x];
      EXPECT_GE(op.start, exec_ready[x] - eps) << "execution before recovery";
      EXPECT_NEAR(op.finish - op.start, experts[x].execute_seconds, eps);
    }
  }
  for (const int e : executed) {
    EXPECT_EQ(e, 1);
  }
  EXPECT_EQ(s.ops.size(), expected_ops + experts.size());
  // One operation at a time on the I/O thread, each decode thread, the stream and the GPU.
  auto no_overlap = [&](auto&& same_resource) {
    std::vector<std::pair<double, double>> spans;
    for (const auto& op : s.ops) {
      if (same_resource(op)) {
        spans.emplace_back(op.start, op.finish);
      }
    }
    std::sort(spans.begin(), spans.end());
    for (std::size_t i = 1; i < spans.size(); ++i) {
      EXPECT_GE(spans[i].first, spans[i - 1].second - eps) << "overlap";
    }
  };
  no_overlap(
      [](const auto& op) { return op.kind == op_kind::sm_read || op.kind == op_kind::e_read; });
  no_overlap([](const auto& op) { return op.kind == op_kind::recover; });
  no_overlap([](const auto& op) { return op.kind == op_kind::execute; });
  for (std::uint32_t l = 0; l < p.threads; ++l) {
    no_overlap([&](const auto& op) {
      return op.kind == op_kind::decode && op.thread == static_cast<std::int32_t>(l);
    });
  }
  double last = 0.0;
  for (const auto& op : s.ops) {
    last = std::max(last, op.finish);
  }
  EXPECT_DOUBLE_EQ(s.makespan, last);
}

// ------------------------------------------------------------------ instances

struct instance {
  std::vector<layer_expert> experts;
  tier_costs params;
};

instance random_instance(std::mt19937_64& rng, std::size_t max_nodes) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (;;) {
    instance in;
    in.params.threads = 1 + static_cast<std::uint32_t>(rng() % 3);
    in.params.e_chunks = 1 + static_cast<std::uint32_t>(rng() % 2);
    in.params.sm_read = 0.5 + 1.5 * unit(rng);
    in.params.e_read = (0.3 + 0.5 * unit(rng)) * in.params.sm_read / in.params.e_chunks;
    in.params.decode = 0.05 + 2.0 * unit(rng);
    in.params.recover = 0.2 * unit(rng);
    const int experts = 1 + static_cast<int>(rng() % 3);
    for (int x = 0; x < experts; ++x) {
      in.experts.push_back({x, static_cast<residency>(rng() % 5),
                            1 + static_cast<std::uint32_t>(rng() % 2), 0.1 + 2.0 * unit(rng)});
    }
    if (dag_of(in.experts, in.params).size() <= max_nodes) {
      return in;
    }
  }
}

TEST(AffinityScheduler, BranchAndBoundEqualsEveryDispatchOrderOnTinyInstances) {
  std::mt19937_64 rng(11);
  for (int i = 0; i < 150; ++i) {
    const instance in = random_instance(rng, 7);
    const auto g = dag_of(in.experts, in.params);
    const double alg = wisp::schedule_layer(in.experts, in.params).makespan;
    const double opt = optimum(g, in.params.threads, INFINITY).solve();
    EXPECT_NEAR(opt, enumerate_all(g, in.params.threads), 1e-9) << "instance " << i;
    EXPECT_LE(opt, alg + 1e-9);
  }
}

TEST(AffinityScheduler, SchedulesAreFeasible) {
  std::mt19937_64 rng(12);
  for (int i = 0; i < 300; ++i) {
    instance in = random_instance(rng, 60);
    in.params.threads = 1 + static_cast<std::uint32_t>(rng() % 6);
    in.params.e_chunks = 1 + static_cast<std::uint32_t>(rng() % 8);
    expect_feasible(in.experts, in.params, wisp::schedule_layer(in.experts, in.params));
  }
}

TEST(AffinityScheduler, TheoremThreeOneHoldsOnThousandsOfRandomInstances) {
  std::mt19937_64 rng(13);
  std::vector<double> ratios;
  for (int i = 0; i < 2000; ++i) {
    const instance in = random_instance(rng, 13);
    const auto s = wisp::schedule_layer(in.experts, in.params);
    const double opt =
        optimum(dag_of(in.experts, in.params), in.params.threads, s.makespan).solve();
    ASSERT_GT(opt, 0.0);
    const double ratio = s.makespan / opt;
    EXPECT_LE(ratio, 3.0 - 1.0 / in.params.threads + 1e-9) << "instance " << i;
    ratios.push_back(ratio);
  }
  std::sort(ratios.begin(), ratios.end());
  double mean = 0.0;
  for (const double r : ratios) {
    mean += r / static_cast<double>(ratios.size());
  }
  const double p99 = ratios[ratios.size() * 99 / 100];
  std::cout << "ALG/OPT over " << ratios.size() << " instances: mean " << mean << ", p99 " << p99
            << ", max " << ratios.back() << ", optimal in "
            << std::count_if(ratios.begin(), ratios.end(), [](double r) { return r < 1 + 1e-9; })
            << '\n';
  EXPECT_GE(ratios.front(), 1.0 - 1e-9);
}

TEST(AffinityScheduler, BlocksCoverEveryTaskOnceWithTypeOneBases) {
  std::mt19937_64 rng(14);
  for (int i = 0; i < 200; ++i) {
    const instance in = random_instance(rng, 60);
    const auto s = wisp::schedule_layer(in.experts, in.params);
    std::vector<int> seen(s.tasks.size(), 0);
    for (const auto& b : s.blocks) {
      ASSERT_FALSE(b.empty());
      for (const std::int32_t t : b) {
        ++seen[static_cast<std::size_t>(t)];
      }
    }
    for (const int n : seen) {
      EXPECT_EQ(n, 1);
    }
    // A block's base is Type-I while any Type-I task is left unscheduled.
    std::size_t type_one_left = 0;
    for (const auto& t : s.tasks) {
      type_one_left += t.type_one() ? 1 : 0;
    }
    for (const auto& b : s.blocks) {
      bool base_one = false;
      for (const std::int32_t t : b) {
        base_one |= s.tasks[static_cast<std::size_t>(t)].type_one();
      }
      if (type_one_left > 0) {
        EXPECT_TRUE(base_one);
      }
      for (const std::int32_t t : b) {
        type_one_left -= s.tasks[static_cast<std::size_t>(t)].type_one() ? 1 : 0;
      }
    }
  }
}

TEST(AffinityScheduler, BadParametersAreRefused) {
  const std::vector<layer_expert> call{{.expert = 1, .where = residency::miss, .tensors = 0}};
  wisp::test::expect_error([&] { (void)wisp::schedule_layer(call, {.threads = 1}); },
                           "expert 1 has 0 tensors");
  wisp::test::expect_error([&] { (void)wisp::schedule_layer({}, {.decode = -1.0}); }, "got -1");
  wisp::test::expect_error([&] { (void)wisp::schedule_layer({}, {.threads = 0}); }, "threads 0");
}

TEST(OpKindNames, ToStringAndFromStringAreInverse) {
  wisp::test::expect_names<wisp::op_kind>({{wisp::op_kind::sm_read, "sm_read"},
                                           {wisp::op_kind::e_read, "e_read"},
                                           {wisp::op_kind::decode, "decode"},
                                           {wisp::op_kind::recover, "recover"},
                                           {wisp::op_kind::execute, "execute"}});
  EXPECT_EQ(wisp::from_string<wisp::op_kind>("read"), std::nullopt);
}

}  // namespace
