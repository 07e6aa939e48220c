// SPDX-License-Identifier: Apache-2.0
// The host expert kernel (wisp::host_swiglu_kernel) beside the host's read bandwidth and, when
// built as the ggml peer (bench/peers/ggml, WISP_BENCH_WITH_GGML), beside ggml's CPU MUL_MAT_ID,
// all measured in one run, the arms interleaved round by round (issue 45, "Host kernel").
//
// One call = E experts (default 6: the routed experts of one layer) applied to the same R rows
// (tokens), R in 1, 4, 16, 64, for the shapes small (H 512, I 256), deepseek-v2-lite (H 2048,
// I 1408) and gpt-oss-20b (H 2880, I 2880; plain SwiGLU, no bias or clamp). The experts live in a
// pool of random bf16 rows larger than the last-level cache (4 x L3, at least 512 MiB; --pool-mib)
// and every call of every arm takes the next E of them, so a call reads its weights from DRAM as
// a decode step does. The arms:
//   wisp    host_swiglu_kernel over E tasks (one per expert, all on the same rows), on a
//           wisp::thread_pool of threads - 1 workers plus the caller;
//   stream  a STREAM-like read of the same bytes (E expert rows, contiguous) over the same
//           threads, each summing a contiguous slice with AVX-512 (or AVX2) integer adds: the
//           host's read bandwidth;
//   ggml    (peer build only) the graph llama.cpp's build_moe_ffn makes for an MoE FFN with
//           separate gate and up tensors: ggml_mul_mat_id(up), ggml_mul_mat_id(gate),
//           ggml_swiglu_split, ggml_mul_mat_id(down) over [H, I, n_pool] bf16 views of the same
//           pool, ids routing every row to the same E experts, ggml_graph_compute on the same
//           thread count (OpenMP threads in llama.cpp's default build). The gate-weight multiply
//           and the sum over experts that follow in llama.cpp are left out of both arms.
// Each round runs every (rows, arm) sample of the shape in a rotated order; a sample repeats the
// call until it lasts --sample-ms (the count fixed at warm-up) and records time per call. Per
// round: speedup = ggml / wisp and %stream = stream / wisp (the same bytes read). Reported: the
// median and min-max over rounds. Outputs are checked once per (shape, rows), outside the timing:
// the normwise error max|y - y_ref| / max|y_ref| per row against the fp32 element rules of
// <wisp/kernel/swiglu.hpp> (what reference_fused_moe computes for one expert of weight 1; first
// and last expert, rows 0, 7, 8 and R - 1) and against ggml's output (every expert and row).
//
//   wisp_kernel_bench [--threads N] [--rounds N] [--shapes a,b] [--rows 1,4] [--experts E]
//                     [--pool-mib M] [--sample-ms T] [--isa NAME] [--clock wall|cpu]
//                     [--spin-us U] [--json FILE|-]
// --spin-us U: the pool's idle threads look for work for U microseconds before they sleep
// (wisp::thread_pool_options::spin), as ggml's OpenMP threads spin between calls; 0 (default):
// they sleep at once, and every call wakes them.
// --clock cpu (with --threads 1) times the calling thread's CPU time instead of wall time: on a
// machine shared with other work it drops the time the thread was not scheduled.
// A plain main with its own timing loop rather than Google Benchmark: the figures are per-round
// ratios of arms run back to back. wisp's build links it like every bench/<area> binary (beside
// benchmark_main, whose main this one replaces); the peer build links no Google Benchmark at all.
// CI's smoke run passes --benchmark_filter=REGEX --benchmark_min_time=T (bench/CMakeLists.txt):
// then only the small shape runs, one round, over a small pool; REGEX selects the cases by name
// ("small/rows:1"). Threads default to all cores: quote only runs on an otherwise idle machine.
#include <wisp/core/bf16.hpp>
#include <wisp/core/executor.hpp>
#include <wisp/kernel/host_swiglu.hpp>
#include <wisp/kernel/swiglu.hpp>

#if defined(WISP_BENCH_WITH_GGML)
#include <ggml-cpu.h>
#include <ggml.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <latch>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define WISP_BENCH_X86 1
#include <immintrin.h>
#endif
#include <time.h>
#include <unistd.h>

namespace {

using clock_type = std::chrono::steady_clock;

struct named_shape {
  std::string name;
  wisp::swiglu_shape shape;
};

const std::vector<named_shape>& all_shapes() {
  static const std::vector<named_shape> shapes = {
      {"small", {.hidden = 512, .intermediate = 256}},
      {"deepseek-v2-lite", {.hidden = 2048, .intermediate = 1408}},
      {"gpt-oss-20b", {.hidden = 2880, .intermediate = 2880}},
  };
  return shapes;
}

struct options {
  std::int32_t threads = 0;
  std::int64_t spin_us = 0;
  std::int32_t rounds = 7;
  std::int32_t experts = 6;
  std::vector<std::string> shapes;
  std::vector<std::int32_t> rows = {1, 4, 16, 64};
  std::size_t pool_mib = 0;  // 0: 4 x L3, at least 512 MiB
  double sample_ms = 40.0;
  std::optional<wisp::host_isa> isa;
  std::string json;  // "" none, "-" stdout, else a file
  std::string filter;
  bool smoke = false;
  bool cpu_clock = false;  // --clock cpu: the calling thread's CPU time (one thread only)
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) {
      out.push_back(item);
    }
  }
  return out;
}

[[noreturn]] void usage_error(const std::string& what) {
  std::cerr << "wisp_kernel_bench: " << what
            << "\nusage: wisp_kernel_bench [--threads N] [--rounds N] [--shapes a,b] [--rows 1,4]"
               " [--experts E] [--pool-mib M] [--sample-ms T] [--isa NAME] [--clock wall|cpu]"
               " [--spin-us U]"
               " [--json FILE|-]\n";
  std::exit(2);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    if (const auto eq = arg.find('='); eq != std::string::npos && arg.rfind("--", 0) == 0) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (i + 1 < argc && arg != "--help") {
      value = argv[++i];
    }
    try {
      if (arg == "--threads") {
        o.threads = std::stoi(value);
      } else if (arg == "--spin-us") {
        o.spin_us = std::stoll(value);
      } else if (arg == "--rounds") {
        o.rounds = std::stoi(value);
      } else if (arg == "--experts") {
        o.experts = std::stoi(value);
      } else if (arg == "--shapes") {
        o.shapes = split(value);
      } else if (arg == "--rows") {
        o.rows.clear();
        for (const std::string& r : split(value)) {
          o.rows.push_back(std::stoi(r));
        }
      } else if (arg == "--pool-mib") {
        o.pool_mib = static_cast<std::size_t>(std::stoull(value));
      } else if (arg == "--sample-ms") {
        o.sample_ms = std::stod(value);
      } else if (arg == "--isa") {
        const auto isa = wisp::from_string<wisp::host_isa>(value);
        if (!isa) {
          usage_error("unknown --isa " + value);
        }
        o.isa = *isa;
      } else if (arg == "--clock") {
        if (value != "cpu" && value != "wall") {
          usage_error("--clock is cpu or wall, not " + value);
        }
        o.cpu_clock = value == "cpu";
      } else if (arg == "--json") {
        o.json = value;
      } else if (arg == "--benchmark_filter") {
        o.filter = value;
        o.smoke = true;
      } else if (arg == "--benchmark_min_time") {
        o.smoke = true;
      } else {
        usage_error("unknown argument " + arg);
      }
    } catch (const std::logic_error&) {
      usage_error("bad value '" + value + "' for " + arg);
    }
  }
  if (o.threads <= 0) {
    o.threads = static_cast<std::int32_t>(std::max(1u, std::thread::hardware_concurrency()));
  }
  if (o.shapes.empty()) {
    o.shapes = o.smoke ? std::vector<std::string>{"small"}
                       : std::vector<std::string>{"small", "deepseek-v2-lite", "gpt-oss-20b"};
  }
  if (o.smoke) {
    o.rounds = 1;
    o.sample_ms = 0.0;
    if (o.pool_mib == 0) {
      o.pool_mib = 16;
    }
  }
  if (o.rounds < 1 || o.experts < 1 ||
      std::any_of(o.rows.begin(), o.rows.end(), [](std::int32_t r) { return r < 1; })) {
    usage_error("--rounds, --experts and every --rows value must be >= 1");
  }
  if (o.cpu_clock && o.threads != 1) {
    usage_error("--clock cpu times the calling thread only: it needs --threads 1");
  }
  return o;
}

// The last-level cache of the whole machine: the L3 instances sysfs lists (one per CCX on an
// AMD EPYC), summed; else sysconf's figure; else 64 MiB.
std::size_t last_level_cache_bytes() {
  std::vector<std::string> seen;
  std::size_t total = 0;
  for (unsigned cpu = 0; cpu < 4096; ++cpu) {
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/cache/index3/";
    std::ifstream size_file(dir + "size");
    std::ifstream list_file(dir + "shared_cpu_list");
    std::string size;
    std::string list;
    if (!(size_file >> size) || !(list_file >> list)) {
      if (cpu >= std::thread::hardware_concurrency()) {
        break;
      }
      continue;
    }
    if (std::find(seen.begin(), seen.end(), list) != seen.end()) {
      continue;
    }
    seen.push_back(list);
    std::size_t bytes = std::strtoull(size.c_str(), nullptr, 10);
    if (size.back() == 'K') {
      bytes <<= 10;
    } else if (size.back() == 'M') {
      bytes <<= 20;
    }
    total += bytes;
  }
  long l3 = -1;
#if defined(_SC_LEVEL3_CACHE_SIZE)
  l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
  if (total > 0) {
    return total;
  }
  return l3 > 0 ? static_cast<std::size_t>(l3) : std::size_t{64} << 20;
}

// ---- the weight pool -----------------------------------------------------------------------

struct free_deleter {
  void operator()(void* p) const noexcept { std::free(p); }
};

// `experts` expert rows of `shape`, back to back, 2 MiB aligned, filled with random bf16 whose
// scale keeps every dot product near unit size (uniform, variance 1 / fan-in).
struct weight_pool {
  wisp::swiglu_shape shape;
  std::size_t experts = 0;
  std::unique_ptr<wisp::bf16[], free_deleter> data;

  weight_pool(wisp::swiglu_shape s, std::size_t n, std::int32_t threads) : shape(s), experts(n) {
    const std::size_t bytes = shape.row_bytes() * experts;
    const std::size_t align = std::size_t{2} << 20;
    data.reset(
        static_cast<wisp::bf16*>(std::aligned_alloc(align, (bytes + align - 1) / align * align)));
    if (!data) {
      throw std::bad_alloc();
    }
    std::vector<std::thread> fill;
    for (std::int32_t t = 0; t < threads; ++t) {
      fill.emplace_back([this, t, threads] {
        for (std::size_t e = static_cast<std::size_t>(t); e < experts;
             e += static_cast<std::size_t>(threads)) {
          fill_row(e);
        }
      });
    }
    for (std::thread& t : fill) {
      t.join();
    }
  }

  [[nodiscard]] const wisp::bf16* row(std::size_t e) const noexcept {
    return data.get() + e * 3 * shape.matrix_values();
  }

 private:
  void fill_row(std::size_t e) noexcept {
    std::uint64_t s = 0x9e3779b97f4a7c15ull * (e + 1);
    const std::size_t m = shape.matrix_values();
    wisp::bf16* w = data.get() + e * 3 * m;
    for (std::size_t part = 0; part < 3; ++part) {
      const float fan_in = static_cast<float>(part < 2 ? shape.hidden : shape.intermediate);
      const float scale = std::sqrt(3.0f / fan_in) / static_cast<float>(1u << 23);
      for (std::size_t i = 0; i < m; ++i) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        const auto u = static_cast<std::int32_t>(s >> 40) - (1 << 23);  // [-2^23, 2^23)
        w[part * m + i] = wisp::to_bf16(static_cast<float>(u) * scale);
      }
    }
  }
};

// ---- running work on the bench's threads ---------------------------------------------------

// Runs f(0..threads) with f(0) on the caller and the rest on the pool; returns when all are done.
template <class F>
void on_threads(wisp::any_executor& ex, std::int32_t threads, const F& f) {
  std::latch done(threads - 1);
  for (std::int32_t t = 1; t < threads; ++t) {
    ex.execute([&f, &done, t] {
      f(t);
      done.count_down();
    });
  }
  f(0);
  done.wait();
}

// ---- the STREAM-like read ------------------------------------------------------------------

#if defined(WISP_BENCH_X86)
__attribute__((target("avx512f"))) std::uint64_t read_avx512(const std::byte* p,
                                                             std::size_t n) noexcept {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  std::size_t i = 0;
  for (; i + 256 <= n; i += 256) {
    a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + i));
    a1 = _mm512_add_epi64(a1, _mm512_load_si512(p + i + 64));
    a2 = _mm512_add_epi64(a2, _mm512_load_si512(p + i + 128));
    a3 = _mm512_add_epi64(a3, _mm512_load_si512(p + i + 192));
  }
  // Through memory: g++ 12's _mm512_reduce_add_epi64 trips -Wuninitialized.
  alignas(64) std::uint64_t lanes[8];
  _mm512_store_si512(lanes, _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
  std::uint64_t s = 0;
  for (const std::uint64_t l : lanes) {
    s += l;
  }
  for (; i < n; ++i) {
    s += static_cast<std::uint64_t>(p[i]);
  }
  return s;
}

__attribute__((target("avx2"))) std::uint64_t read_avx2(const std::byte* p,
                                                        std::size_t n) noexcept {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  std::size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  alignas(32) std::uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                     _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
  std::uint64_t s = lanes[0] + lanes[1] + lanes[2] + lanes[3];
  for (; i < n; ++i) {
    s += static_cast<std::uint64_t>(p[i]);
  }
  return s;
}
#endif

std::uint64_t read_scalar(const std::byte* p, std::size_t n) noexcept {
  std::uint64_t s = 0;
  for (std::size_t i = 0; i + 8 <= n; i += 8) {
    std::uint64_t v;
    std::memcpy(&v, p + i, 8);
    s += v;
  }
  return s;
}

using read_fn = std::uint64_t (*)(const std::byte*, std::size_t) noexcept;

read_fn best_read() {
#if defined(WISP_BENCH_X86)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) {
    return &read_avx512;
  }
  if (__builtin_cpu_supports("avx2")) {
    return &read_avx2;
  }
#endif
  return &read_scalar;
}

// ---- the arms ------------------------------------------------------------------------------

enum class arm { wisp, stream, ggml };

// One (shape, rows) case: its inputs, outputs and what each arm needs between calls.
struct bench_case {
  std::int32_t rows = 0;
  std::vector<float> x;  // rows x H, shared by the E experts (one token each row)
  std::vector<float> y;  // E x rows x H: wisp's outputs, task e at e * rows * H
  std::vector<wisp::host_expert_task> tasks;
  std::int64_t calls[3] = {1, 1, 1};  // calls per sample, per arm
  std::vector<double> seconds[3];     // per round: seconds per call, per arm
  double err_ref = -1.0;
  double err_ggml = -1.0;
#if defined(WISP_BENCH_WITH_GGML)
  ggml_context* ctx = nullptr;  // inputs, ids, intermediates and the graph
  ggml_cgraph* graph = nullptr;
  ggml_tensor* ids = nullptr;      // [E, rows] i32
  ggml_tensor* out = nullptr;      // [H, E, rows] f32
  std::vector<std::uint8_t> work;  // the plan's work buffer
#endif
};

struct shape_bench {
  const named_shape& ns;
  const options& opt;
  wisp::any_executor& ex;
  weight_pool pool;
  wisp::host_swiglu_kernel kernel;
  read_fn read = best_read();
  std::size_t cursor = 0;  // the next call's first expert (a multiple of E)
  std::atomic<std::uint64_t> sink{0};
#if defined(WISP_BENCH_WITH_GGML)
  ggml_context* wctx = nullptr;  // the pool as a tensor and its gate, up and down views
  ggml_tensor* gate = nullptr;
  ggml_tensor* up = nullptr;
  ggml_tensor* down = nullptr;
#endif

  shape_bench(const named_shape& s, const options& o, wisp::any_executor& e, std::size_t experts)
      : ns(s),
        opt(o),
        ex(e),
        pool(s.shape, experts, o.threads),
        kernel(s.shape, {.threads = o.threads, .isa = o.isa}, e) {
#if defined(WISP_BENCH_WITH_GGML)
    const ggml_init_params p{
        .mem_size = 8 * ggml_tensor_overhead(), .mem_buffer = nullptr, .no_alloc = true};
    wctx = ggml_init(p);
    const auto h = static_cast<std::int64_t>(s.shape.hidden);
    const auto in = static_cast<std::int64_t>(s.shape.intermediate);
    const auto n = static_cast<std::int64_t>(pool.experts);
    ggml_tensor* all = ggml_new_tensor_1d(wctx, GGML_TYPE_BF16, n * 3 * h * in);
    all->data = pool.data.get();
    const std::size_t row = s.shape.row_bytes();
    const std::size_t matrix = s.shape.matrix_values() * sizeof(wisp::bf16);
    gate = ggml_view_3d(wctx, all, h, in, n, static_cast<std::size_t>(h) * 2, row, 0);
    up = ggml_view_3d(wctx, all, h, in, n, static_cast<std::size_t>(h) * 2, row, matrix);
    down = ggml_view_3d(wctx, all, in, h, n, static_cast<std::size_t>(in) * 2, row, 2 * matrix);
#endif
  }
  shape_bench(const shape_bench&) = delete;
  shape_bench& operator=(const shape_bench&) = delete;
  ~shape_bench() {
#if defined(WISP_BENCH_WITH_GGML)
    ggml_free(wctx);
#endif
  }

  [[nodiscard]] std::size_t call_bytes() const noexcept {
    return static_cast<std::size_t>(opt.experts) * ns.shape.row_bytes();
  }

  std::size_t next_first_expert() noexcept {
    const std::size_t first = cursor;
    cursor += static_cast<std::size_t>(opt.experts);
    if (cursor + static_cast<std::size_t>(opt.experts) > pool.experts) {
      cursor = 0;
    }
    return first;
  }

  void prepare(bench_case& c, std::int32_t rows) {
    const auto h = static_cast<std::size_t>(ns.shape.hidden);
    const auto e = static_cast<std::size_t>(opt.experts);
    c.rows = rows;
    c.x.resize(static_cast<std::size_t>(rows) * h);
    std::uint64_t s = 12345u + static_cast<std::uint64_t>(rows);
    for (float& v : c.x) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      v = static_cast<float>(static_cast<std::int32_t>(s >> 40) - (1 << 23)) *
          (1.7320508f / static_cast<float>(1 << 23));
    }
    c.y.assign(e * static_cast<std::size_t>(rows) * h, 0.0f);
    c.tasks.resize(e);
    for (std::size_t t = 0; t < e; ++t) {
      c.tasks[t] = {.weights = pool.row(t),
                    .x = c.x.data(),
                    .y = c.y.data() + t * static_cast<std::size_t>(rows) * h,
                    .rows = rows};
    }
#if defined(WISP_BENCH_WITH_GGML)
    const auto hh = static_cast<std::int64_t>(h);
    const auto ee = static_cast<std::int64_t>(e);
    const std::size_t inter = static_cast<std::size_t>(ns.shape.intermediate) * e *
                              static_cast<std::size_t>(rows) * sizeof(float);
    const std::size_t mem = 64 * ggml_tensor_overhead() + ggml_graph_overhead() +
                            c.x.size() * sizeof(float) + e * static_cast<std::size_t>(rows) * 4 +
                            3 * inter + c.y.size() * sizeof(float) + (1u << 20);
    c.ctx = ggml_init({.mem_size = mem, .mem_buffer = nullptr, .no_alloc = false});
    ggml_tensor* cur = ggml_new_tensor_3d(c.ctx, GGML_TYPE_F32, hh, 1, rows);
    std::memcpy(cur->data, c.x.data(), c.x.size() * sizeof(float));
    c.ids = ggml_new_tensor_2d(c.ctx, GGML_TYPE_I32, ee, rows);
    // As llama.cpp's build_moe_ffn (separate gate and up tensors, LLM_FFN_SILU, gated).
    ggml_tensor* u = ggml_mul_mat_id(c.ctx, up, cur, c.ids);    // [I, E, rows]
    ggml_tensor* g = ggml_mul_mat_id(c.ctx, gate, cur, c.ids);  // [I, E, rows]
    ggml_tensor* act = ggml_swiglu_split(c.ctx, g, u);
    c.out = ggml_mul_mat_id(c.ctx, down, act, c.ids);  // [H, E, rows]
    c.graph = ggml_new_graph(c.ctx);
    ggml_build_forward_expand(c.graph, c.out);
    ggml_cplan plan = ggml_graph_plan(c.graph, opt.threads, nullptr);
    c.work.resize(plan.work_size + 64);
#endif
  }

  void release(bench_case& c) {
#if defined(WISP_BENCH_WITH_GGML)
    ggml_free(c.ctx);
    c.ctx = nullptr;
#else
    (void)c;
#endif
  }

  void run_wisp(bench_case& c, std::size_t first) {
    for (std::size_t t = 0; t < c.tasks.size(); ++t) {
      c.tasks[t].weights = pool.row(first + t);
    }
    kernel(c.tasks);
  }

  void run_stream(std::size_t first) {
    const auto* base = reinterpret_cast<const std::byte*>(pool.row(first));
    const std::size_t bytes = call_bytes();
    const auto threads = static_cast<std::size_t>(opt.threads);
    // Slices of whole 256-byte blocks (aligned: the pool and every row are 64-byte aligned).
    const std::size_t blocks = bytes / 256;
    std::atomic<std::uint64_t> total{0};
    on_threads(ex, opt.threads, [&](std::int32_t t) {
      const std::size_t b0 = blocks * static_cast<std::size_t>(t) / threads;
      const std::size_t b1 = blocks * (static_cast<std::size_t>(t) + 1) / threads;
      std::size_t n = (b1 - b0) * 256;
      if (static_cast<std::size_t>(t) + 1 == threads) {
        n = bytes - b0 * 256;
      }
      total.fetch_add(read(base + b0 * 256, n), std::memory_order_relaxed);
    });
    sink.fetch_add(total.load(), std::memory_order_relaxed);
  }

#if defined(WISP_BENCH_WITH_GGML)
  void run_ggml(bench_case& c, std::size_t first) {
    auto* ids = static_cast<std::int32_t*>(c.ids->data);
    for (std::int32_t r = 0; r < c.rows; ++r) {
      for (std::int32_t e = 0; e < opt.experts; ++e) {
        ids[r * opt.experts + e] = static_cast<std::int32_t>(first) + e;
      }
    }
    ggml_cplan plan = ggml_graph_plan(c.graph, opt.threads, nullptr);
    plan.work_data = c.work.data();
    if (ggml_graph_compute(c.graph, &plan) != GGML_STATUS_SUCCESS) {
      throw std::runtime_error("ggml_graph_compute failed");
    }
  }
#endif

  void run(arm a, bench_case& c) {
    const std::size_t first = next_first_expert();
    switch (a) {
      case arm::wisp:
        run_wisp(c, first);
        break;
      case arm::stream:
        run_stream(first);
        break;
      case arm::ggml:
#if defined(WISP_BENCH_WITH_GGML)
        run_ggml(c, first);
#endif
        break;
    }
  }

  // Seconds per call over `calls` calls: wall time, or with --clock cpu the calling thread's CPU
  // time (one thread: the time the scheduler gave it, so other processes' load drops out).
  double sample(arm a, bench_case& c, std::int64_t calls) {
    // The other arm's threads (wisp's spinning pool, ggml's OpenMP threads) stop looking for
    // work before this one starts: no arm is timed beside another's spinning threads.
    std::this_thread::sleep_for(std::chrono::microseconds(opt.spin_us) +
                                std::chrono::milliseconds(1));
    const double t0 = now();
    for (std::int64_t i = 0; i < calls; ++i) {
      run(a, c);
    }
    return (now() - t0) / static_cast<double>(calls);
  }

  [[nodiscard]] double now() const noexcept {
    if (opt.cpu_clock) {
      timespec t{};
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
      return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
    }
    return std::chrono::duration<double>(clock_type::now().time_since_epoch()).count();
  }

  // Warm-up (two calls, the second timed) and the calls per sample.
  void calibrate(arm a, bench_case& c) {
    run(a, c);
    const double once = sample(a, c, 1);
    const auto i = static_cast<std::size_t>(a);
    c.calls[i] = std::max<std::int64_t>(
        1, static_cast<std::int64_t>(std::ceil(opt.sample_ms * 1e-3 / std::max(once, 1e-7))));
  }

  // The output checks (see the file comment): wisp's outputs of the call on experts `first...`.
  void check(bench_case& c) {
    const std::size_t first = next_first_expert();
    run_wisp(c, first);
    const auto h = static_cast<std::size_t>(ns.shape.hidden);
    const auto rows = static_cast<std::size_t>(c.rows);
    std::vector<std::size_t> check_rows = {0, 7, 8, rows - 1};
    std::erase_if(check_rows, [&](std::size_t r) { return r >= rows; });
    std::sort(check_rows.begin(), check_rows.end());
    check_rows.erase(std::unique(check_rows.begin(), check_rows.end()), check_rows.end());
    std::vector<float> act(static_cast<std::size_t>(ns.shape.intermediate));
    double worst = 0.0;
    for (const std::size_t t : {std::size_t{0}, c.tasks.size() - 1}) {
      const wisp::bf16* w = pool.row(first + t);
      for (const std::size_t r : check_rows) {
        const float* x = c.x.data() + r * h;
        for (std::int32_t i = 0; i < ns.shape.intermediate; ++i) {
          act[static_cast<std::size_t>(i)] = wisp::swiglu_activation(w, x, ns.shape, i);
        }
        double diff = 0.0;
        double norm = 0.0;
        const float* y = c.tasks[t].y + r * h;
        for (std::int32_t o = 0; o < ns.shape.hidden; ++o) {
          const float ref = wisp::swiglu_output(w, act.data(), ns.shape, o);
          diff = std::max(diff, std::fabs(static_cast<double>(y[o]) - ref));
          norm = std::max(norm, std::fabs(static_cast<double>(ref)));
        }
        worst = std::max(worst, diff / std::max(norm, 1e-30));
      }
    }
    c.err_ref = worst;
#if defined(WISP_BENCH_WITH_GGML)
    run_ggml(c, first);
    const auto e = static_cast<std::size_t>(opt.experts);
    const auto* out = static_cast<const float*>(c.out->data);
    worst = 0.0;
    for (std::size_t t = 0; t < e; ++t) {
      for (std::size_t r = 0; r < rows; ++r) {
        const float* y = c.tasks[t].y + r * h;
        const float* g = out + (r * e + t) * h;
        double diff = 0.0;
        double norm = 0.0;
        for (std::size_t o = 0; o < h; ++o) {
          diff = std::max(diff, std::fabs(static_cast<double>(y[o]) - g[o]));
          norm = std::max(norm, std::fabs(static_cast<double>(g[o])));
        }
        worst = std::max(worst, diff / std::max(norm, 1e-30));
      }
    }
    c.err_ggml = worst;
#endif
  }
};

// ---- statistics and output -----------------------------------------------------------------

struct stats {
  double median = 0.0, min = 0.0, max = 0.0;
};

stats summarise(std::vector<double> v) {
  if (v.empty()) {
    return {};
  }
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  const double med = n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  return {med, v.front(), v.back()};
}

template <class F>
stats over_rounds(std::size_t rounds, const F& f) {
  std::vector<double> v;
  for (std::size_t r = 0; r < rounds; ++r) {
    v.push_back(f(r));
  }
  return summarise(std::move(v));
}

std::string fmt(const char* format, double a) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, a);
  return buf;
}

// "median [min-max]"
std::string range(const char* format, const stats& s) {
  return fmt(format, s.median) + " [" + fmt(format, s.min) + "-" + fmt(format, s.max) + "]";
}

std::string json_stats(const stats& s) {
  std::ostringstream o;
  o.precision(6);
  o << "{\"median\": " << s.median << ", \"min\": " << s.min << ", \"max\": " << s.max << "}";
  return o.str();
}

struct case_result {
  std::string shape;
  wisp::swiglu_shape dims;
  std::int32_t rows = 0;
  double bytes = 0.0;
  double flops = 0.0;
  stats ms[3];
  stats gbps[3];    // weight bytes / time
  stats speedup;    // ggml / wisp, per round
  stats of_stream;  // stream / wisp, per round (the fraction of the read bandwidth wisp reaches)
  double err_ref = -1.0, err_ggml = -1.0;
};

}  // namespace

int main(int argc, char** argv) {
  const options opt = parse(argc, argv);
#if defined(WISP_BENCH_WITH_GGML)
  constexpr bool with_ggml = true;
  ggml_cpu_init();
#else
  constexpr bool with_ggml = false;
#endif
  const std::regex filter(opt.filter.empty() ? "." : opt.filter);
  const std::size_t llc = last_level_cache_bytes();
  const std::size_t pool_bytes =
      opt.pool_mib > 0 ? opt.pool_mib << 20 : std::max(4 * llc, std::size_t{512} << 20);

  std::optional<wisp::thread_pool> threads;
  wisp::any_executor ex;
  if (opt.threads > 1) {
    threads.emplace(static_cast<std::uint32_t>(opt.threads - 1),
                    wisp::thread_pool_options{.spin = std::chrono::microseconds(opt.spin_us)});
    ex = threads->executor();
  }
  const wisp::host_isa isa = opt.isa.value_or(wisp::best_host_isa());
  std::cout << "wisp host expert kernel: " << opt.threads << " threads (idle spin " << opt.spin_us
            << " us), isa " << wisp::to_string(isa) << ", " << opt.experts << " experts per call, "
            << opt.rounds << " rounds, " << (opt.cpu_clock ? "CPU" : "wall") << " time, pool "
            << (pool_bytes >> 20) << " MiB (L3 " << (llc >> 20) << " MiB), peer: "
#if defined(WISP_BENCH_WITH_GGML)
            << "ggml, " << WISP_GGML_PEER_VERSION
#else
            << "none (build bench/peers/ggml for ggml)"
#endif
            << "\n";

  std::vector<case_result> results;
  bool matched = false;
  for (const std::string& name : opt.shapes) {
    const auto it = std::find_if(all_shapes().begin(), all_shapes().end(),
                                 [&](const named_shape& s) { return s.name == name; });
    if (it == all_shapes().end()) {
      usage_error("unknown shape " + name + " (small, deepseek-v2-lite, gpt-oss-20b)");
    }
    std::vector<std::int32_t> rows;
    for (const std::int32_t r : opt.rows) {
      if (std::regex_search(name + "/rows:" + std::to_string(r), filter)) {
        rows.push_back(r);
      }
    }
    if (rows.empty()) {
      continue;
    }
    matched = true;
    const std::size_t e = static_cast<std::size_t>(opt.experts);
    std::size_t experts = std::max(pool_bytes / it->shape.row_bytes() / e, std::size_t{2}) * e;
    shape_bench bench(*it, opt, ex, experts);
    std::vector<bench_case> cases(rows.size());
    std::vector<arm> arms = {arm::wisp, arm::stream};
    if (with_ggml) {
      arms.push_back(arm::ggml);
    }
    for (std::size_t i = 0; i < rows.size(); ++i) {
      bench.prepare(cases[i], rows[i]);
      bench.check(cases[i]);
      for (const arm a : arms) {
        bench.calibrate(a, cases[i]);
      }
    }
    // Rounds: every (rows, arm) sample once, in an order rotated by one each round.
    std::vector<std::pair<std::size_t, arm>> order;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      for (const arm a : arms) {
        order.emplace_back(i, a);
      }
    }
    for (std::int32_t round = 0; round < opt.rounds; ++round) {
      for (std::size_t k = 0; k < order.size(); ++k) {
        const auto& [i, a] = order[(k + static_cast<std::size_t>(round)) % order.size()];
        bench_case& c = cases[i];
        c.seconds[static_cast<std::size_t>(a)].push_back(
            bench.sample(a, c, c.calls[static_cast<std::size_t>(a)]));
      }
    }
    for (bench_case& c : cases) {
      case_result r;
      r.shape = name;
      r.dims = it->shape;
      r.rows = c.rows;
      r.bytes = static_cast<double>(bench.call_bytes());
      r.flops =
          6.0 * static_cast<double>(it->shape.matrix_values()) * static_cast<double>(e) * c.rows;
      const auto rounds = static_cast<std::size_t>(opt.rounds);
      for (const arm a : arms) {
        const auto& s = c.seconds[static_cast<std::size_t>(a)];
        r.ms[static_cast<std::size_t>(a)] =
            over_rounds(rounds, [&](std::size_t k) { return s[k] * 1e3; });
        r.gbps[static_cast<std::size_t>(a)] =
            over_rounds(rounds, [&](std::size_t k) { return r.bytes / s[k] * 1e-9; });
      }
      const auto& w = c.seconds[0];
      r.of_stream = over_rounds(rounds, [&](std::size_t k) { return c.seconds[1][k] / w[k]; });
      if (with_ggml) {
        r.speedup = over_rounds(rounds, [&](std::size_t k) { return c.seconds[2][k] / w[k]; });
      }
      r.err_ref = c.err_ref;
      r.err_ggml = c.err_ggml;
      results.push_back(r);
      bench.release(c);
    }
  }
  if (!matched) {
    std::cout << "Failed to match any benchmarks against regex: " << opt.filter << "\n";
    return 1;
  }

  // The human table: median [min-max] over rounds.
  std::cout << "\nper call (" << opt.experts << " experts x rows), median [min-max] over "
            << opt.rounds << " rounds; GB/s = expert weight bytes / time\n";
  for (const case_result& r : results) {
    std::cout << "\n"
              << r.shape << " (H " << r.dims.hidden << ", I " << r.dims.intermediate << ") rows "
              << r.rows << ": " << fmt("%.1f", r.bytes / 1048576.0) << " MiB of weights\n";
    std::cout << "  wisp    " << range("%.3f", r.ms[0]) << " ms  " << range("%.1f", r.gbps[0])
              << " GB/s  " << fmt("%.1f", r.flops / (r.ms[0].median * 1e-3) * 1e-9) << " GFLOP/s\n";
    std::cout << "  stream  " << range("%.3f", r.ms[1]) << " ms  " << range("%.1f", r.gbps[1])
              << " GB/s\n";
    if (with_ggml) {
      std::cout << "  ggml    " << range("%.3f", r.ms[2]) << " ms  " << range("%.1f", r.gbps[2])
                << " GB/s  " << fmt("%.1f", r.flops / (r.ms[2].median * 1e-3) * 1e-9)
                << " GFLOP/s\n";
      std::cout << "  wisp/ggml speedup " << range("%.2f", r.speedup) << "x\n";
    }
    std::cout << "  wisp of stream "
              << range("%.0f",
                       {r.of_stream.median * 100, r.of_stream.min * 100, r.of_stream.max * 100})
              << " %\n";
    std::cout << "  error vs fp32 reference " << fmt("%.2e", r.err_ref);
    if (with_ggml) {
      std::cout << ", vs ggml " << fmt("%.2e", r.err_ggml);
    }
    std::cout << " (tolerance " << fmt("%.2e", wisp::host_swiglu_tolerance) << ")\n";
  }
  // The targets, where this run has the figures (medians over rounds).
  std::cout << "\ntargets (medians):\n";
  for (const case_result& r : results) {
    if (r.rows == 1) {
      std::cout << "  " << r.shape << " rows 1: wisp at " << fmt("%.0f", r.of_stream.median * 100)
                << " % of the read bandwidth (target >= 60 %): "
                << (r.of_stream.median >= 0.6 ? "met" : "NOT met") << "\n";
    }
    if (with_ggml && (r.rows == 1 || r.rows == 16)) {
      std::cout << "  " << r.shape << " rows " << r.rows << ": wisp/ggml "
                << fmt("%.2f", r.speedup.median)
                << "x (target >= 1.0x): " << (r.speedup.median >= 1.0 ? "met" : "NOT met") << "\n";
    }
  }
  bool ok = true;
  for (const case_result& r : results) {
    ok = ok && r.err_ref >= 0.0 && r.err_ref <= wisp::host_swiglu_tolerance;
  }
  std::cout << "outputs within tolerance of the fp32 reference: " << (ok ? "yes" : "NO") << "\n";

  if (!opt.json.empty()) {
    std::ostringstream j;
    j << "{\n  \"bench\": \"wisp_kernel_bench\",\n  \"threads\": " << opt.threads
      << ",\n  \"spin_us\": " << opt.spin_us << ",\n  \"clock\": \""
      << (opt.cpu_clock ? "cpu" : "wall") << "\""
      << ",\n  \"isa\": \"" << wisp::to_string(isa)
      << "\",\n  \"experts_per_call\": " << opt.experts << ",\n  \"rounds\": " << opt.rounds
      << ",\n  \"pool_mib\": " << (pool_bytes >> 20) << ",\n  \"l3_mib\": " << (llc >> 20)
      << ",\n  \"peer\": "
#if defined(WISP_BENCH_WITH_GGML)
      << "\"ggml: " << WISP_GGML_PEER_VERSION << "\""
#else
      << "null"
#endif
      << ",\n  \"tolerance\": " << wisp::host_swiglu_tolerance << ",\n  \"cases\": [";
    for (std::size_t k = 0; k < results.size(); ++k) {
      const case_result& r = results[k];
      j << (k ? "," : "") << "\n    {\"shape\": \"" << r.shape
        << "\", \"hidden\": " << r.dims.hidden << ", \"intermediate\": " << r.dims.intermediate
        << ", \"rows\": " << r.rows << ", \"weight_bytes\": " << std::fixed << r.bytes
        << std::defaultfloat << ",\n     \"wisp_ms\": " << json_stats(r.ms[0])
        << ", \"wisp_gbps\": " << json_stats(r.gbps[0])
        << ",\n     \"stream_ms\": " << json_stats(r.ms[1])
        << ", \"stream_gbps\": " << json_stats(r.gbps[1])
        << ",\n     \"wisp_of_stream\": " << json_stats(r.of_stream);
      if (with_ggml) {
        j << ",\n     \"ggml_ms\": " << json_stats(r.ms[2])
          << ", \"ggml_gbps\": " << json_stats(r.gbps[2])
          << ",\n     \"speedup_vs_ggml\": " << json_stats(r.speedup)
          << ", \"error_vs_ggml\": " << r.err_ggml;
      }
      j << ",\n     \"error_vs_reference\": " << r.err_ref << "}";
    }
    j << "\n  ]\n}\n";
    if (opt.json == "-") {
      std::cout << j.str();
    } else {
      std::ofstream(opt.json) << j.str();
    }
  }
  return ok ? 0 : 1;
}
