// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief `host_swiglu_kernel`: SwiGLU bf16 experts computed by the host's cores, for the experts
/// an engine leaves in host memory (llama.cpp `--n-cpu-moe`, KTransformers, wisp's
/// `miss_policy::hybrid`), a few rows (tokens) each.
///
/// **What it computes.** For each task (one expert row in the `swiglu_shape` layout: gate
/// `[I x H]`, up `[I x H]`, down `[H x I]`) and each of its `rows` inputs `x_r` (`H` floats):
///
///     act[r][i] = bf16(swiglu(gate_i . bf16(x_r), up_i . bf16(x_r)))
///     y[r][o]   = down_o . act[r]
///
/// The activations are rounded to bf16 before each matrix product and every product is a
/// bf16 x bf16 one accumulated in fp32: what ggml's CPU `MUL_MAT_ID` and the GPUs' bf16 tensor
/// cores compute, and what lets the AVX-512 BF16 path (`vdpbf16ps`, two multiply-adds per lane)
/// run at twice the fp32 FMA rate. It is **not** bit-equal to `reference_fused_moe` (fp32
/// activations, index-order sums): the rounding of `x` and `act` and the order of the sums give
/// a normwise error `max|y - y_ref| / max|y_ref|` below `host_swiglu_tolerance` (1/64; tests/kernel
/// measures the bound on random and trained-like weights). The ISAs compute the same products and
/// differ only in the order of the fp32 sums.
///
/// **Speed.** One row reads each weight once (memory bound: the host's read bandwidth), each
/// weight row from start to end before the next, the order hardware prefetchers follow best;
/// more rows reuse two weight rows (gate and up, or two of down) from L1 over blocks of 8 rows,
/// so the cost per row falls until the FMA or `vdpbf16ps` rate binds. `bench/kernel` measures it
/// beside a STREAM-like read over the same threads, and `bench/peers/ggml` beside ggml's
/// `MUL_MAT_ID`.
///
/// **Threads.** A call runs in three phases: the inputs to bf16 (a row per item), gate/up, then
/// down (items of 16 intermediate or 32 output rows of every task). `threads - 1` tasks go to the
/// executor once per call and the calling thread works too; each thread takes the next item of
/// its phase and waits (yielding) for the phase to finish before the next. No wisp thread is ever
/// started.
/// @code
/// wisp::thread_pool pool(7);
/// wisp::host_swiglu_kernel kernel({.hidden = 2048, .intermediate = 1408},
///                                 {.threads = 8}, pool.executor());
/// std::vector<wisp::host_expert_task> tasks = {{.weights = expert3, .x = x, .y = y, .rows = 1}};
/// kernel(tasks);          // y[0..H) = expert 3 of x
/// @endcode
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/enum_names.hpp>
#include <wisp/core/error.hpp>
#include <wisp/core/executor.hpp>
#include <wisp/kernel/bf16.hpp>
#include <wisp/kernel/swiglu.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <latch>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define WISP_HOST_SWIGLU_X86 1
#include <immintrin.h>
#endif

namespace wisp {

/// @brief The instruction sets `host_swiglu_kernel` has code for, in increasing speed.
enum class host_isa : std::uint8_t {
  scalar,       ///< portable C++ (the compiler may vectorise it)
  avx2,         ///< AVX2 + FMA: bf16 widened to fp32, 8 lanes
  avx512,       ///< AVX-512 F/BW: bf16 widened to fp32, 16 lanes
  avx512_bf16,  ///< AVX-512 BF16: `vdpbf16ps`, 32 bf16 products per instruction
};

template <>
struct enum_names<host_isa> {
  static constexpr std::array<enum_name<host_isa>, 4> values{
      {{host_isa::scalar, "scalar"},
       {host_isa::avx2, "avx2"},
       {host_isa::avx512, "avx512"},
       {host_isa::avx512_bf16, "avx512_bf16"}}};
};

/// Whether this CPU runs `isa`'s code (checked at run time with `__builtin_cpu_supports`). O(1).
[[nodiscard]] inline bool host_isa_supported(host_isa isa) noexcept {
#if defined(WISP_HOST_SWIGLU_X86)
  __builtin_cpu_init();
  switch (isa) {
    case host_isa::scalar:
      return true;
    case host_isa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case host_isa::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
    case host_isa::avx512_bf16:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512bf16");
  }
  return false;
#else
  return isa == host_isa::scalar;
#endif
}

/// The fastest `host_isa` this CPU runs. O(1).
[[nodiscard]] inline host_isa best_host_isa() noexcept {
  for (const host_isa isa : {host_isa::avx512_bf16, host_isa::avx512, host_isa::avx2}) {
    if (host_isa_supported(isa)) {
      return isa;
    }
  }
  return host_isa::scalar;
}

/// The normwise error `host_swiglu_kernel` guarantees against `reference_fused_moe`'s expert
/// output on the same inputs: `max_o |y[o] - y_ref[o]| <= host_swiglu_tolerance * max_o
/// |y_ref[o]|` per row (the rounding of the activations to bf16; see the file comment).
inline constexpr float host_swiglu_tolerance = 1.0f / 64.0f;

/// @brief One expert applied to `rows` input rows: `y[r * H + o] = expert(x[r * H ..])[o]`.
struct host_expert_task {
  const bf16* weights = nullptr;  ///< the expert's row (`swiglu_shape::row_bytes()` bytes)
  const float* x = nullptr;       ///< `rows x H` inputs, row-major
  float* y = nullptr;             ///< `rows x H` outputs, overwritten (must not overlap `x`)
  std::int32_t rows = 1;          ///< >= 1
};

/// @brief How a `host_swiglu_kernel` runs.
struct host_swiglu_options {
  std::int32_t threads = 1;  ///< threads computing, the caller's included (>= 1)
  /// The code path; empty: `best_host_isa()`.
  std::optional<host_isa> isa = std::nullopt;
};

namespace detail {

inline constexpr std::int32_t host_block_rows = 8;       // input rows per register block
inline constexpr std::int32_t host_up_item_rows = 16;    // intermediate rows per gate/up work item
inline constexpr std::int32_t host_down_item_rows = 32;  // output rows per down work item

/// `oa[r * os] = a . x_r`, `ob[r * os] = b . x_r` for `r < rows` (`x_r = x + r * xs`, `n`
/// values each): two weight rows against a block of input rows, fp32 sums.
using dot2_fn = void (*)(const bf16* a, const bf16* b, const bf16* x, std::size_t xs,
                         std::int32_t n, std::int32_t rows, float* oa, float* ob, std::size_t os);

inline void dot2_scalar(const bf16* a, const bf16* b, const bf16* x, std::size_t xs, std::int32_t n,
                        std::int32_t rows, float* oa, float* ob, std::size_t os) noexcept {
  for (std::int32_t r = 0; r < rows; ++r) {
    const bf16* xr = x + static_cast<std::size_t>(r) * xs;
    float sa = 0.0f;
    float sb = 0.0f;
    for (std::int32_t i = 0; i < n; ++i) {
      const float xi = to_float(xr[i]);
      sa += to_float(a[i]) * xi;
      sb += to_float(b[i]) * xi;
    }
    oa[static_cast<std::size_t>(r) * os] = sa;
    ob[static_cast<std::size_t>(r) * os] = sb;
  }
}

#if defined(WISP_HOST_SWIGLU_X86)

// g++ 12's intrinsics initialise their undefined vectors from themselves, which -Wuninitialized
// reports in every function that inlines them.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// `dot2` over blocks of at most `host_block_rows` input rows, for an ISA's `Block<NR>::run` (NR
// input rows against the two weight rows: the vector part, then the scalar tail).
template <template <std::size_t> class Block>
inline void dot2_blocks(const bf16* a, const bf16* b, const bf16* x, std::size_t xs, std::int32_t n,
                        std::int32_t rows, float* oa, float* ob, std::size_t os) noexcept {
  for (std::int32_t r = 0; r < rows; r += host_block_rows) {
    const bf16* xr = x + static_cast<std::size_t>(r) * xs;
    float* ar = oa + static_cast<std::size_t>(r) * os;
    float* br = ob + static_cast<std::size_t>(r) * os;
    switch (std::min(host_block_rows, rows - r)) {
      case 1: {  // one weight row after the other: one stream the prefetcher follows
        float twin = 0.0f;
        Block<1>::run(a, a, xr, xs, n, ar, &twin, os);
        Block<1>::run(b, b, xr, xs, n, br, &twin, os);
        break;
      }
      case 2:
        Block<2>::run(a, b, xr, xs, n, ar, br, os);
        break;
      case 3:
        Block<3>::run(a, b, xr, xs, n, ar, br, os);
        break;
      case 4:
        Block<4>::run(a, b, xr, xs, n, ar, br, os);
        break;
      case 5:
        Block<5>::run(a, b, xr, xs, n, ar, br, os);
        break;
      case 6:
        Block<6>::run(a, b, xr, xs, n, ar, br, os);
        break;
      case 7:
        Block<7>::run(a, b, xr, xs, n, ar, br, os);
        break;
      default:
        Block<8>::run(a, b, xr, xs, n, ar, br, os);
        break;
    }
  }
}

// The scalar tail of a block: values [from, n).
template <std::size_t NR>
inline void dot2_tail(const bf16* a, const bf16* b, const bf16* x, std::size_t xs,
                      std::int32_t from, std::int32_t n, float* sa, float* sb) noexcept {
  for (std::int32_t i = from; i < n; ++i) {
    const float ai = to_float(a[i]);
    const float bi = to_float(b[i]);
    for (std::size_t r = 0; r < NR; ++r) {
      const float xi = to_float(x[r * xs + static_cast<std::size_t>(i)]);
      sa[r] += ai * xi;
      sb[r] += bi * xi;
    }
  }
}

#define WISP_TARGET_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define WISP_TARGET_AVX512 __attribute__((target("avx512f,avx512bw")))
#define WISP_TARGET_AVX2 __attribute__((target("avx2,fma")))

template <std::size_t NR>
struct block_avx512_bf16 {
  WISP_TARGET_AVX512BF16 static void run(const bf16* a, const bf16* b, const bf16* x,
                                         std::size_t xs, std::int32_t n, float* oa, float* ob,
                                         std::size_t os) noexcept {
    __m512 acc_a[NR];
    __m512 acc_b[NR];
    for (std::size_t r = 0; r < NR; ++r) {
      acc_a[r] = _mm512_setzero_ps();
      acc_b[r] = _mm512_setzero_ps();
    }
    std::int32_t i = 0;
    for (; i + 32 <= n; i += 32) {
      const __m512i wa = _mm512_loadu_si512(a + i);
      const __m512i wb = _mm512_loadu_si512(b + i);
      for (std::size_t r = 0; r < NR; ++r) {
        const __m512i xv = _mm512_loadu_si512(x + r * xs + static_cast<std::size_t>(i));
        acc_a[r] = _mm512_dpbf16_ps(acc_a[r], (__m512bh)wa, (__m512bh)xv);
        acc_b[r] = _mm512_dpbf16_ps(acc_b[r], (__m512bh)wb, (__m512bh)xv);
      }
    }
    float sa[NR];
    float sb[NR];
    for (std::size_t r = 0; r < NR; ++r) {
      sa[r] = _mm512_reduce_add_ps(acc_a[r]);
      sb[r] = _mm512_reduce_add_ps(acc_b[r]);
    }
    dot2_tail<NR>(a, b, x, xs, i, n, sa, sb);
    for (std::size_t r = 0; r < NR; ++r) {
      oa[r * os] = sa[r];
      ob[r * os] = sb[r];
    }
  }
};

// 16 bf16 at p widened to fp32 (a bf16 is the upper half of its float).
WISP_TARGET_AVX512 inline __m512 widen16(const bf16* p) noexcept {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

template <std::size_t NR>
struct block_avx512 {
  WISP_TARGET_AVX512 static void run(const bf16* a, const bf16* b, const bf16* x, std::size_t xs,
                                     std::int32_t n, float* oa, float* ob,
                                     std::size_t os) noexcept {
    __m512 acc_a[NR];
    __m512 acc_b[NR];
    for (std::size_t r = 0; r < NR; ++r) {
      acc_a[r] = _mm512_setzero_ps();
      acc_b[r] = _mm512_setzero_ps();
    }
    std::int32_t i = 0;
    for (; i + 16 <= n; i += 16) {
      const __m512 wa = widen16(a + i);
      const __m512 wb = widen16(b + i);
      for (std::size_t r = 0; r < NR; ++r) {
        const __m512 xv = widen16(x + r * xs + static_cast<std::size_t>(i));
        acc_a[r] = _mm512_fmadd_ps(wa, xv, acc_a[r]);
        acc_b[r] = _mm512_fmadd_ps(wb, xv, acc_b[r]);
      }
    }
    float sa[NR];
    float sb[NR];
    for (std::size_t r = 0; r < NR; ++r) {
      sa[r] = _mm512_reduce_add_ps(acc_a[r]);
      sb[r] = _mm512_reduce_add_ps(acc_b[r]);
    }
    dot2_tail<NR>(a, b, x, xs, i, n, sa, sb);
    for (std::size_t r = 0; r < NR; ++r) {
      oa[r * os] = sa[r];
      ob[r * os] = sb[r];
    }
  }
};

// 8 bf16 at p widened to fp32.
WISP_TARGET_AVX2 inline __m256 widen8(const bf16* p) noexcept {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

WISP_TARGET_AVX2 inline float sum8(__m256 v) noexcept {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

template <std::size_t NR>
struct block_avx2 {
  WISP_TARGET_AVX2 static void run(const bf16* a, const bf16* b, const bf16* x, std::size_t xs,
                                   std::int32_t n, float* oa, float* ob, std::size_t os) noexcept {
    __m256 acc_a[NR];
    __m256 acc_b[NR];
    for (std::size_t r = 0; r < NR; ++r) {
      acc_a[r] = _mm256_setzero_ps();
      acc_b[r] = _mm256_setzero_ps();
    }
    std::int32_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m256 wa = widen8(a + i);
      const __m256 wb = widen8(b + i);
      for (std::size_t r = 0; r < NR; ++r) {
        const __m256 xv = widen8(x + r * xs + static_cast<std::size_t>(i));
        acc_a[r] = _mm256_fmadd_ps(wa, xv, acc_a[r]);
        acc_b[r] = _mm256_fmadd_ps(wb, xv, acc_b[r]);
      }
    }
    float sa[NR];
    float sb[NR];
    for (std::size_t r = 0; r < NR; ++r) {
      sa[r] = sum8(acc_a[r]);
      sb[r] = sum8(acc_b[r]);
    }
    dot2_tail<NR>(a, b, x, xs, i, n, sa, sb);
    for (std::size_t r = 0; r < NR; ++r) {
      oa[r * os] = sa[r];
      ob[r * os] = sb[r];
    }
  }
};

#undef WISP_TARGET_AVX512BF16
#undef WISP_TARGET_AVX512
#undef WISP_TARGET_AVX2

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // WISP_HOST_SWIGLU_X86

[[nodiscard]] inline dot2_fn dot2_for(host_isa isa) noexcept {
#if defined(WISP_HOST_SWIGLU_X86)
  switch (isa) {
    case host_isa::avx512_bf16:
      return &dot2_blocks<block_avx512_bf16>;
    case host_isa::avx512:
      return &dot2_blocks<block_avx512>;
    case host_isa::avx2:
      return &dot2_blocks<block_avx2>;
    case host_isa::scalar:
      break;
  }
#else
  (void)isa;
#endif
  return &dot2_scalar;
}

}  // namespace detail

/// @brief SwiGLU bf16 experts on the host's cores (see the file comment for what it computes,
/// its error bound and its threads).
///
/// Cost of a call: every task's `3 x H x I` weights read once per 8 of its rows, `6 x H x I`
/// FLOPs per row; three phases, each ending when its last item is done, and `threads - 1`
/// submissions to the executor. Its scratch (the inputs and activations in bf16, the tasks' row
/// offsets) grows to the largest call seen and is kept: a call no larger than an earlier one
/// allocates nothing of its own (a `thread_pool` allocates one `std::function` per submission).
/// Not thread-safe: one call at a time per object (its threads are the executor's and the
/// caller's). The executor must outlive the kernel.
class host_swiglu_kernel {
 public:
  /// @throws wisp::logic_error naming the value on an invalid shape, `threads < 1`, or an ISA
  ///   this CPU does not run.
  explicit host_swiglu_kernel(swiglu_shape shape, host_swiglu_options options = {},
                              any_executor executor = {})
      : shape_(shape),
        threads_(options.threads),
        isa_(options.isa.value_or(best_host_isa())),
        executor_(std::move(executor)) {
    shape_.validate();
    WISP_EXPECTS(threads_ >= 1, "host_swiglu_kernel: threads must be >= 1, got ", threads_);
    WISP_EXPECTS(host_isa_supported(isa_), "host_swiglu_kernel: this CPU does not run the ",
                 to_string(isa_), " code (best: ", to_string(best_host_isa()), ")");
    dot2_ = detail::dot2_for(isa_);
  }

  /// The code path every call runs.
  [[nodiscard]] host_isa isa() const noexcept { return isa_; }
  /// Threads computing a call, the caller's included.
  [[nodiscard]] std::int32_t threads() const noexcept { return threads_; }
  /// The experts' shape.
  [[nodiscard]] const swiglu_shape& shape() const noexcept { return shape_; }

  /// @brief Computes every task (see the file comment); returns when all outputs are written.
  /// @throws wisp::logic_error naming the task (nothing written) if a task has a null pointer,
  ///   weights not 2-byte aligned or `rows < 1`; std::bad_alloc if the scratch cannot grow.
  void operator()(std::span<const host_expert_task> tasks) {
    std::size_t total_rows = 0;
    for (std::size_t t = 0; t < tasks.size(); ++t) {
      const host_expert_task& task = tasks[t];
      WISP_EXPECTS(task.weights != nullptr && task.x != nullptr && task.y != nullptr,
                   "host_swiglu_kernel: task ", t, " has a null weights, x or y pointer");
      WISP_EXPECTS(reinterpret_cast<std::uintptr_t>(task.weights) % alignof(bf16) == 0,
                   "host_swiglu_kernel: task ", t, "'s weights are not 2-byte aligned");
      WISP_EXPECTS(task.rows >= 1, "host_swiglu_kernel: task ", t, " has ", task.rows,
                   " rows, need >= 1");
      total_rows += static_cast<std::size_t>(task.rows);
    }
    const auto h = static_cast<std::size_t>(shape_.hidden);
    const auto in = static_cast<std::size_t>(shape_.intermediate);
    if (xb_.size() < total_rows * h) {
      xb_.resize(total_rows * h);
      act_.resize(total_rows * in);
    }
    first_row_.resize(tasks.size() + 1);
    first_row_[0] = 0;
    for (std::size_t t = 0; t < tasks.size(); ++t) {
      first_row_[t + 1] = first_row_[t] + static_cast<std::size_t>(tasks[t].rows);
    }
    const std::size_t up_items = (in + detail::host_up_item_rows - 1) / detail::host_up_item_rows;
    const std::size_t down_items =
        (h + detail::host_down_item_rows - 1) / detail::host_down_item_rows;
    run_phases({total_rows, up_items * tasks.size(), down_items * tasks.size()},
               [&](std::size_t phase, std::size_t item) {
                 if (phase == 0) {  // one input row to bf16
                   const auto t = static_cast<std::size_t>(
                       std::upper_bound(first_row_.begin(), first_row_.end(), item) -
                       first_row_.begin() - 1);
                   const float* x = tasks[t].x + (item - first_row_[t]) * h;
                   bf16* xb = xb_.data() + item * h;
                   for (std::size_t v = 0; v < h; ++v) {
                     xb[v] = to_bf16(x[v]);
                   }
                 } else if (phase == 1) {
                   up_item(tasks[item / up_items], item / up_items,
                           static_cast<std::int32_t>(item % up_items) * detail::host_up_item_rows);
                 } else {
                   down_item(
                       tasks[item / down_items], item / down_items,
                       static_cast<std::int32_t>(item % down_items) * detail::host_down_item_rows);
                 }
               });
  }

 private:
  // act rows [i0, i0 + 16) of task t: gate and up against its inputs, then swiglu.
  void up_item(const host_expert_task& task, std::size_t t, std::int32_t i0) noexcept {
    const auto h = static_cast<std::size_t>(shape_.hidden);
    const auto in = static_cast<std::size_t>(shape_.intermediate);
    const bf16* gate = task.weights;
    const bf16* up = task.weights + shape_.matrix_values();
    const std::int32_t i1 = std::min(shape_.intermediate, i0 + detail::host_up_item_rows);
    std::array<float, detail::host_block_rows> g{};
    std::array<float, detail::host_block_rows> u{};
    for (std::int32_t r0 = 0; r0 < task.rows; r0 += detail::host_block_rows) {
      const std::int32_t nr = std::min(detail::host_block_rows, task.rows - r0);
      const std::size_t row = first_row_[t] + static_cast<std::size_t>(r0);
      for (std::int32_t i = i0; i < i1; ++i) {
        const auto ii = static_cast<std::size_t>(i);
        dot2_(gate + ii * h, up + ii * h, xb_.data() + row * h, h, shape_.hidden, nr, g.data(),
              u.data(), 1);
        for (std::int32_t r = 0; r < nr; ++r) {
          const auto ri = static_cast<std::size_t>(r);
          act_[(row + ri) * in + ii] = to_bf16(swiglu(g[ri], u[ri]));
        }
      }
    }
  }

  // y rows [o0, o0 + 32) of task t: down against its activations, two output rows at a time.
  void down_item(const host_expert_task& task, std::size_t t, std::int32_t o0) const noexcept {
    const auto h = static_cast<std::size_t>(shape_.hidden);
    const auto in = static_cast<std::size_t>(shape_.intermediate);
    const bf16* down = task.weights + 2 * shape_.matrix_values();
    const std::int32_t o1 = std::min(shape_.hidden, o0 + detail::host_down_item_rows);
    for (std::int32_t r0 = 0; r0 < task.rows; r0 += detail::host_block_rows) {
      const std::int32_t nr = std::min(detail::host_block_rows, task.rows - r0);
      const bf16* act = act_.data() + (first_row_[t] + static_cast<std::size_t>(r0)) * in;
      float* y = task.y + static_cast<std::size_t>(r0) * h;
      std::int32_t o = o0;
      for (; o + 1 < o1; o += 2) {
        const auto oo = static_cast<std::size_t>(o);
        dot2_(down + oo * in, down + (oo + 1) * in, act, in, shape_.intermediate, nr, y + oo,
              y + oo + 1, h);
      }
      if (o < o1) {  // an odd last row, paired with itself
        const auto oo = static_cast<std::size_t>(o);
        std::array<float, detail::host_block_rows> last{};
        std::array<float, detail::host_block_rows> twin{};
        dot2_(down + oo * in, down + oo * in, act, in, shape_.intermediate, nr, last.data(),
              twin.data(), 1);
        for (std::int32_t r = 0; r < nr; ++r) {
          y[static_cast<std::size_t>(r) * h + oo] = last[static_cast<std::size_t>(r)];
        }
      }
    }
  }

  // Runs f(p, i) for every item i < n[p] of phase p = 0, 1, 2, each phase after the one before
  // it, on `threads_` threads: the caller's and threads_ - 1 executor tasks, submitted once per
  // call. A thread takes the next item of its phase, then waits for the phase's last item to be
  // done before the next phase; only running threads take items, so a task the executor runs
  // late (or on the caller, as an inline executor does) never blocks the others. A task the
  // executor cannot take leaves its share to the others, so no failure is possible after
  // validation.
  template <class F>
  void run_phases(const std::array<std::size_t, 3>& n, const F& f) {
    const std::size_t workers =
        std::min(*std::max_element(n.begin(), n.end()), static_cast<std::size_t>(threads_));
    if (workers <= 1) {
      for (std::size_t p = 0; p < n.size(); ++p) {
        for (std::size_t i = 0; i < n[p]; ++i) {
          f(p, i);
        }
      }
      return;
    }
    std::array<std::atomic<std::size_t>, 3> next{};
    std::array<std::atomic<std::size_t>, 3> done{};
    const auto work = [&] {
      for (std::size_t p = 0; p < n.size(); ++p) {
        while (p > 0 && done[p - 1].load(std::memory_order_acquire) < n[p - 1]) {
          std::this_thread::yield();
        }
        for (std::size_t i = next[p].fetch_add(1, std::memory_order_relaxed); i < n[p];
             i = next[p].fetch_add(1, std::memory_order_relaxed)) {
          f(p, i);
          done[p].fetch_add(1, std::memory_order_release);
        }
      }
    };
    std::latch finished(static_cast<std::ptrdiff_t>(workers - 1));
    std::size_t submitted = 0;
    try {
      for (; submitted + 1 < workers; ++submitted) {
        executor_.execute([&] {
          work();
          finished.count_down();
        });
      }
    } catch (...) {  // the executor took no more: the running threads do their share
      finished.count_down(static_cast<std::ptrdiff_t>(workers - 1 - submitted));
    }
    work();
    finished.wait();
  }

  swiglu_shape shape_;
  std::int32_t threads_;
  host_isa isa_;
  any_executor executor_;
  detail::dot2_fn dot2_ = nullptr;
  std::vector<bf16> xb_;                // every task's inputs in bf16, [rows x H]
  std::vector<bf16> act_;               // their activations in bf16, [rows x I]
  std::vector<std::size_t> first_row_;  // task t's rows start at first_row_[t]
};

}  // namespace wisp
