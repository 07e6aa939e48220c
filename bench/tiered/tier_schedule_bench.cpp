// SPDX-License-Identifier: Apache-2.0
// The cache-affinity schedule (Algorithm 1) run for real on compressed BF16 tensors, against the
// makespan estimate of Algorithm 3: one I/O thread reads the chunks a call lacks from the host
// masters (a copy paced to the link rate: the store behind the link is modelled, every byte is
// really moved), L decode threads Huffman-decode E-chunks into exponents, one recovery thread
// joins SM chunks and exponents into BF16 tensors. Each resource runs its operations in the order
// and on the thread the schedule gives, each starting as soon as its inputs are done. Every
// recovered tensor is checked bit for bit against its source.
//
//   BM_tier_schedule/<pattern F.C.S.E>/link_gbps/threads
// counters: measured_us (wall time of one call, the mean of the run), estimate_us (Algorithm 3
// with u, v from the link rate and the profiled c), simulated_us (Algorithm 1's event simulation
// with the profiled decode and recovery times), error = measured / estimate - 1. c and r are
// profiled once as the run meets them: one thread decoding a whole call into its own buffers.
// Execution on the device is out of scope (no GPU): the makespan ends at the last recovery. Tensors
// are 2048 x 288 slices of the bench's weights (real when present, Gaussian otherwise; the label
// says which), n = 3 per expert, k = 6 experts per call, K = 8 E-chunks. L + 2 threads run at once:
// quote L only up to the idle cores minus 2. Run with --benchmark_repetitions=5
// --benchmark_enable_random_interleaving=true and quote the median and min-max of `error`.
#include "../../tests/compress/real_weights.hpp"

#include <wisp/compress/bf16.hpp>
#include <wisp/compress/compressed_bf16.hpp>
#include <wisp/compress/huffman.hpp>
#include <wisp/core/bf16.hpp>
#include <wisp/tiered/affinity_scheduler.hpp>
#include <wisp/tiered/tier_model.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <latch>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

constexpr std::uint32_t k_chunks = 8;
constexpr std::uint32_t n_tensors = 3;
constexpr std::int32_t top_k = 6;
constexpr std::uint64_t tensor_elements = 2048 * 288;

// The k x n source tensors of a call and their compressed records, made once.
struct sources {
  std::vector<std::vector<wisp::bf16>> values;
  std::vector<wisp::compressed_bf16> records;
  std::string label;
};

const sources& call_sources() {
  static const sources s = [] {
    sources out;
    std::vector<wisp::bf16> pool;
    if (const auto path = wisp::test::real_weights_file(WISP_BENCH_SOURCE_DIR)) {
      for (const auto& m : wisp::test::real_matrices(wisp::test::read_file(*path),
                                                     [](const std::string&) { return true; })) {
        pool.insert(pool.end(), m.values.begin(), m.values.end());
      }
      out.label = "real weights (" + path->filename().string() + ")";
    }
    if (pool.size() < tensor_elements) {
      std::mt19937_64 rng(1);
      std::normal_distribution<float> normal(0.0f, 0.04f);
      pool.resize(tensor_elements * top_k * n_tensors);
      for (wisp::bf16& v : pool) {
        v = wisp::to_bf16(normal(rng));
      }
      out.label = "WEIGHTS ABSENT: Gaussian stand-in";
    }
    for (std::size_t t = 0; t < top_k * n_tensors; ++t) {
      const std::size_t at = (t * tensor_elements) % (pool.size() - tensor_elements + 1);
      out.values.emplace_back(pool.begin() + static_cast<std::ptrdiff_t>(at),
                              pool.begin() + static_cast<std::ptrdiff_t>(at + tensor_elements));
      out.records.push_back(
          wisp::compressed_bf16::compress(out.values.back(), wisp::huffman_coder{}, k_chunks));
    }
    return out;
  }();
  return s;
}

// One tensor's device-side buffers: the staged SM chunk and E-chunks, exponents, the result.
struct tensor_buffers {
  std::vector<std::uint8_t> sm;
  std::vector<std::vector<std::uint8_t>> e;
  std::vector<std::uint8_t> exponents;
  std::vector<wisp::bf16> out;
};

// Yields while waiting, so that on a machine with fewer cores than threads the decoders run.
void wait_until(clock_type::time_point t) {
  while (clock_type::now() < t) {
    std::this_thread::yield();
  }
}

// Copies `from` into `to` and holds the I/O thread until bytes / link seconds have passed.
void paced_read(std::span<const std::uint8_t> from, std::vector<std::uint8_t>& to,
                double link_bytes_per_second) {
  const auto start = clock_type::now();
  std::memcpy(to.data(), from.data(), from.size());
  wait_until(start + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(
                         static_cast<double>(from.size()) / link_bytes_per_second)));
}

// Buffers for every source tensor, with every chunk staged (what the pools hold is never read
// again; what a call reads is overwritten by its reads).
std::vector<tensor_buffers> staged_buffers() {
  const sources& src = call_sources();
  std::vector<tensor_buffers> buf(src.records.size());
  for (std::size_t t = 0; t < buf.size(); ++t) {
    const wisp::compressed_bf16& z = src.records[t];
    const auto sm = z.chunk_bytes(z.sm_chunk());
    buf[t].sm.assign(sm.begin(), sm.end());
    for (std::uint32_t j = 0; j < k_chunks; ++j) {
      const auto e = z.chunk_bytes(z.e_chunk(j));
      buf[t].e.emplace_back(e.begin(), e.end());
    }
    buf[t].exponents.assign(tensor_elements, 0);
    buf[t].out.assign(tensor_elements, wisp::bf16{});
  }
  return buf;
}

struct profiled {
  double decode = 0.0;   // c: one E-chunk, one thread
  double recover = 0.0;  // r: one tensor
};

// c and r as the run meets them: one thread decodes every E-chunk of a whole call into the
// call's own buffers, then recovers every tensor; the median of 5 passes, per chunk and tensor.
profiled profile_constants() {
  const sources& src = call_sources();
  const wisp::coder_set coders = wisp::core_coders();
  std::vector<tensor_buffers> buf = staged_buffers();
  std::vector<double> dec;
  std::vector<double> rec;
  wisp::huffman_table_cache tables;
  for (int pass = 0; pass < 5; ++pass) {
    const auto t0 = clock_type::now();
    for (std::size_t t = 0; t < buf.size(); ++t) {
      for (std::uint32_t j = 0; j < k_chunks; ++j) {
        const wisp::chunk_ref& r = src.records[t].e_chunk(j);
        wisp::decode_e_chunk(r, buf[t].e[j], std::span(buf[t].exponents).subspan(r.first, r.count),
                             coders, tables, false);
      }
    }
    const auto t1 = clock_type::now();
    for (tensor_buffers& b : buf) {
      wisp::recover_bf16(b.sm, b.exponents, b.out);
    }
    const auto t2 = clock_type::now();
    dec.push_back(std::chrono::duration<double>(t1 - t0).count() /
                  static_cast<double>(buf.size() * k_chunks));
    rec.push_back(std::chrono::duration<double>(t2 - t1).count() / static_cast<double>(buf.size()));
  }
  std::sort(dec.begin(), dec.end());
  std::sort(rec.begin(), rec.end());
  return {dec[dec.size() / 2], rec[rec.size() / 2]};
}

// Each resource's operations of a schedule, in schedule order.
struct resource_queues {
  std::vector<const wisp::scheduled_op*> io;
  std::vector<std::vector<const wisp::scheduled_op*>> dec;  // per decode thread
  std::vector<const wisp::scheduled_op*> rec;
};

resource_queues queues_of(const wisp::affinity_schedule& s, std::uint32_t threads) {
  resource_queues q;
  q.dec.resize(threads);
  for (const wisp::scheduled_op& op : s.ops) {
    switch (op.kind) {
      case wisp::op_kind::sm_read:
      case wisp::op_kind::e_read:
        q.io.push_back(&op);
        break;
      case wisp::op_kind::decode:
        q.dec[static_cast<std::size_t>(op.thread)].push_back(&op);
        break;
      case wisp::op_kind::recover:
        q.rec.push_back(&op);
        break;
      case wisp::op_kind::execute:
        break;
    }
  }
  auto by_start = [](const auto* a, const auto* b) { return a->start < b->start; };
  std::stable_sort(q.io.begin(), q.io.end(), by_start);
  std::stable_sort(q.rec.begin(), q.rec.end(), by_start);
  for (auto& d : q.dec) {
    std::stable_sort(d.begin(), d.end(), by_start);
  }
  return q;
}

// Clears what the call reads and every output, so that an operation run before its inputs
// cannot go unnoticed (the outputs are compared with the sources afterwards).
void clear_call_buffers(const wisp::affinity_schedule& s, std::vector<tensor_buffers>& buf,
                        const std::vector<std::int32_t>& source_of_task) {
  for (std::size_t t = 0; t < s.tasks.size(); ++t) {
    tensor_buffers& b = buf[static_cast<std::size_t>(source_of_task[t])];
    if (s.tasks[t].reads_sm()) {
      std::fill(b.sm.begin(), b.sm.end(), std::uint8_t{0});
    }
    if (s.tasks[t].reads_e()) {
      for (std::vector<std::uint8_t>& e : b.e) {
        std::fill(e.begin(), e.end(), std::uint8_t{0});
      }
    }
    std::fill(b.out.begin(), b.out.end(), wisp::bf16{});
  }
}

// One real run of a schedule: the done flags per (task, kind, chunk) and the loop of each
// resource's thread, which waits on the flags of its operations' inputs.
class real_run {
 public:
  real_run(const wisp::affinity_schedule& s, std::vector<tensor_buffers>& buf,
           const std::vector<std::int32_t>& source_of_task, double link)
      : buf_(buf),
        source_of_task_(source_of_task),
        link_(link),
        sm_done_(s.tasks.size()),
        e_done_(s.tasks.size() * k_chunks),
        decoded_(s.tasks.size()) {
    for (std::size_t t = 0; t < s.tasks.size(); ++t) {
      sm_done_[t] = s.tasks[t].reads_sm() ? 0 : 1;
      for (std::uint32_t j = 0; j < k_chunks; ++j) {
        e_done_[t * k_chunks + j] = s.tasks[t].reads_e() ? 0 : 1;
      }
      decoded_[t] = 0;
    }
  }

  // The I/O thread: each read paced to the link rate, then its flag raised.
  void read(const std::vector<const wisp::scheduled_op*>& ops) {
    for (const wisp::scheduled_op* op : ops) {
      const auto t = static_cast<std::size_t>(op->task);
      const wisp::compressed_bf16& z = record(op->task);
      if (op->kind == wisp::op_kind::sm_read) {
        paced_read(z.chunk_bytes(z.sm_chunk()), buf_[source(t)].sm, link_);
        sm_done_[t].store(1, std::memory_order_release);
        sm_done_[t].notify_all();
      } else {
        paced_read(z.chunk_bytes(z.e_chunk(op->chunk)), buf_[source(t)].e[op->chunk], link_);
        auto& flag = e_done_[t * k_chunks + op->chunk];
        flag.store(1, std::memory_order_release);
        flag.notify_all();
      }
    }
  }

  // A decode thread: each E-chunk once it is read; the last of a tensor's chunks wakes recovery.
  void decode(const std::vector<const wisp::scheduled_op*>& ops,
              wisp::huffman_table_cache& tables) {
    for (const wisp::scheduled_op* op : ops) {
      const auto t = static_cast<std::size_t>(op->task);
      e_done_[t * k_chunks + op->chunk].wait(0, std::memory_order_acquire);
      const wisp::chunk_ref& r = record(op->task).e_chunk(op->chunk);
      wisp::decode_e_chunk(r, buf_[source(t)].e[op->chunk],
                           std::span(buf_[source(t)].exponents).subspan(r.first, r.count), coders_,
                           tables, false);
      if (decoded_[t].fetch_add(1, std::memory_order_acq_rel) + 1 == k_chunks) {
        decoded_[t].notify_all();
      }
    }
  }

  // The recovery thread: each tensor once its SM chunk is read and its exponents decoded.
  void recover(const std::vector<const wisp::scheduled_op*>& ops) {
    for (const wisp::scheduled_op* op : ops) {
      const auto t = static_cast<std::size_t>(op->task);
      sm_done_[t].wait(0, std::memory_order_acquire);
      for (std::uint32_t d = decoded_[t].load(std::memory_order_acquire); d != k_chunks;
           d = decoded_[t].load(std::memory_order_acquire)) {
        decoded_[t].wait(d, std::memory_order_acquire);
      }
      wisp::recover_bf16(buf_[source(t)].sm, buf_[source(t)].exponents, buf_[source(t)].out);
    }
  }

 private:
  std::size_t source(std::size_t task) const {
    return static_cast<std::size_t>(source_of_task_[task]);
  }
  const wisp::compressed_bf16& record(std::int32_t task) const {
    return call_sources().records[source(static_cast<std::size_t>(task))];
  }

  std::vector<tensor_buffers>& buf_;
  const std::vector<std::int32_t>& source_of_task_;
  double link_;
  const wisp::coder_set coders_ = wisp::core_coders();
  // 32-bit flags: the width futexes wait on directly (no proxy wait table).
  std::vector<std::atomic<std::uint32_t>> sm_done_;
  std::vector<std::atomic<std::uint32_t>> e_done_;
  std::vector<std::atomic<std::uint32_t>> decoded_;
};

// Runs `s` for real once; returns its wall-clock makespan.
double run_for_real(const wisp::affinity_schedule& s, std::vector<tensor_buffers>& buf,
                    const std::vector<std::int32_t>& source_of_task, double link,
                    std::uint32_t threads) {
  const resource_queues q = queues_of(s, threads);
  real_run run(s, buf, source_of_task, link);
  clear_call_buffers(s, buf, source_of_task);
  // The clock starts once every worker is up and waiting (thread start-up is not timed).
  std::latch ready(static_cast<std::ptrdiff_t>(threads) + 2);
  std::latch go(1);
  clock_type::time_point start;
  clock_type::time_point finish;
  std::vector<std::jthread> workers;
  workers.emplace_back([&] {
    ready.count_down();
    go.wait();
    run.read(q.io);
  });
  for (std::uint32_t l = 0; l < threads; ++l) {
    workers.emplace_back([&, l] {
      wisp::huffman_table_cache tables;  // this decode thread's
      ready.count_down();
      go.wait();
      run.decode(q.dec[l], tables);
    });
  }
  workers.emplace_back([&] {
    ready.count_down();
    go.wait();
    run.recover(q.rec);
    finish = clock_type::now();
  });
  ready.wait();
  start = clock_type::now();
  go.count_down();
  workers.clear();
  return std::chrono::duration<double>(finish - start).count();
}

void BM_tier_schedule(benchmark::State& state) {
  const wisp::hit_pattern h{
      {static_cast<std::int32_t>(state.range(0)), static_cast<std::int32_t>(state.range(1)),
       static_cast<std::int32_t>(state.range(2)), static_cast<std::int32_t>(state.range(3))}};
  const double link = static_cast<double>(state.range(4)) * 1e9;
  const auto threads = static_cast<std::uint32_t>(state.range(5));
  const sources& src = call_sources();
  static const profiled prof = profile_constants();
  const double sm_bytes = static_cast<double>(tensor_elements);
  double e_bytes = 0.0;
  for (const wisp::compressed_bf16& z : src.records) {
    for (std::uint32_t j = 0; j < k_chunks; ++j) {
      e_bytes += static_cast<double>(z.e_chunk(j).bytes);
    }
  }
  e_bytes /= static_cast<double>(src.records.size() * k_chunks);
  const wisp::tier_costs p{.sm_read = sm_bytes / link,
                           .e_read = e_bytes / link,
                           .decode = prof.decode,
                           .threads = threads,
                           .e_chunks = k_chunks,
                           .tensors = n_tensors,
                           .recover = prof.recover};
  std::vector<wisp::layer_expert> call;
  for (std::size_t pool = 0; pool <= wisp::tier_count; ++pool) {
    const std::int32_t count = pool < wisp::tier_count ? h.hits[pool] : top_k - h.total();
    for (std::int32_t i = 0; i < count; ++i) {
      call.push_back({static_cast<std::int32_t>(call.size()), static_cast<wisp::residency>(pool),
                      n_tensors, 0.0});
    }
  }
  const wisp::affinity_schedule s = wisp::schedule_layer(call, p);
  // The sources of each task (one source tensor per task: expert x n + tensor).
  std::vector<tensor_buffers> buf = staged_buffers();
  std::vector<std::int32_t> source_of_task;
  for (const wisp::layer_task& task : s.tasks) {
    source_of_task.push_back(static_cast<std::int32_t>(task.expert * n_tensors + task.tensor));
  }
  double measured = 0.0;
  std::int64_t runs = 0;
  for (auto _ : state) {
    const double m = run_for_real(s, buf, source_of_task, link, threads);
    state.SetIterationTime(m);
    measured += m;
    ++runs;
  }
  for (const std::int32_t id : source_of_task) {
    if (buf[static_cast<std::size_t>(id)].out != src.values[static_cast<std::size_t>(id)]) {
      state.SkipWithError("a recovered tensor differs from its source");
      return;
    }
  }
  const double estimate = wisp::estimate_makespan(p, top_k, h);
  const double mean = measured / static_cast<double>(std::max<std::int64_t>(runs, 1));
  state.counters["measured_us"] = 1e6 * mean;
  state.counters["estimate_us"] = 1e6 * estimate;
  state.counters["simulated_us"] = 1e6 * s.makespan;
  state.counters["error"] = estimate > 0.0 ? mean / estimate - 1.0 : 0.0;
  state.counters["decode_us"] = 1e6 * prof.decode;
  state.counters["recover_us"] = 1e6 * prof.recover;
  state.SetLabel(src.label);
}

void tier_schedule_args(benchmark::internal::Benchmark* b) {
  for (const std::vector<std::int64_t>& h : std::vector<std::vector<std::int64_t>>{
           {0, 0, 0, 0}, {0, 6, 0, 0}, {0, 0, 6, 0}, {0, 0, 0, 6}, {1, 2, 2, 1}, {2, 2, 1, 0}}) {
    for (const std::int64_t link : {3, 25}) {
      for (const std::int64_t threads : {1, 2, 4, 8}) {
        b->Args({h[0], h[1], h[2], h[3], link, threads});
      }
    }
  }
}

BENCHMARK(BM_tier_schedule)
    ->Apply(tier_schedule_args)
    ->ArgNames({"F", "C", "S", "E", "link_gbps", "L"})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
