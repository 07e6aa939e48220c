// SPDX-License-Identifier: Apache-2.0
// The GPU decode benchmark of one model (docs/cuda.md, "The decode benchmark"). Set-up: plan what
// fits, pin the masters (`pinned_host_store`, one per layer, in parallel; shrinking to the layers
// that fit when an allocation fails), allocate one device arena of expert rows that every arm
// shares, write random bf16 experts on the device and copy them to the masters. Reference: every
// layer's output of the verification tokens with all of a layer's experts resident (the GEMV
// kernel; checked against its host arithmetic, wisp::reference_fused_moe and the cuBLAS kernel),
// and each kernel's time per layer call; when a host arm runs, the host's expert kernel timed on
// the masters (its costs for pager+hybrid). Then per budget, interleaved repetitions of every arm:
// replay the history on the host (`decode_arms.hpp`), copy the rows the arm's state holds that the
// arena does not, run the warm-up tokens, time the timed ones (wall clock between two
// synchronisations), and in the first repetition compare the verification tokens' outputs with
// the reference, bit for bit (the host arms': within host_swiglu_tolerance). The host arms
// compute their experts on a thread pool beside the device's copies and kernel, and add the
// weighted sum to the layer's output on the device. nvcc only.
#pragma once

#include "cublas_moe.cuh"
#include "decode_arms.hpp"
#include "decode_model.hpp"
#include "decode_report.hpp"
#include "gemv_moe.cuh"
#include "gemv_moe.hpp"
#include "gpu_profile.cuh"
#include "gpu_support.cuh"

#include <wisp/core/error.hpp>
#include <wisp/core/executor.hpp>
#include <wisp/cuda/copy_engine.cuh>
#include <wisp/cuda/device_expert_map.cuh>
#include <wisp/cuda/device_pager.cuh>
#include <wisp/cuda/pinned_host_store.cuh>
#include <wisp/cuda/runtime.cuh>
#include <wisp/kernel/fused_moe.hpp>
#include <wisp/kernel/host_swiglu.hpp>
#include <wisp/kernel/reference_moe.hpp>
#include <wisp/pager/hybrid.hpp>
#include <wisp/transfer/copy_engine.hpp>
#include <wisp/transfer/row_layout.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace wisp::bench {

/// How a model is run.
struct decode_options {
  decode_window window;
  std::vector<double> budgets{0.25, 0.5};
  /// The arms that run, in `decode_arms` order whatever the order here (default: all).
  std::vector<decode_arm> arms{decode_arms.begin(), decode_arms.end()};
  std::int32_t repetitions = 5;
  std::int32_t max_layers = 0;  ///< run at most this many layers (0: the model's)
  std::uint64_t host_reserve = std::uint64_t{16} << 30;
  std::uint64_t device_reserve = std::uint64_t{2} << 30;
  bool cublas = true;  ///< also run the cuBLAS kernel (its figures, and two arms with it)
  std::int32_t pin_threads = 8;
  /// Threads of the host's expert kernel (the host arms), the caller's included (0: every core).
  std::int32_t host_threads = 0;
  std::filesystem::path traces_dir;
  std::string device;
  std::string smi_name;
  std::string command;
  std::string commit;
  double device_memory_gbps = 0;  ///< measured, to put the kernels' rates in proportion
  link_rates link;                ///< measured, to put the arms' copies in proportion
};

namespace detail {

using clock = std::chrono::steady_clock;

/// Pins `layers` layers of masters on up to `threads` threads; the prefix that succeeded, and
/// the first failure's message (empty when every layer was pinned).
struct pinned_masters {
  std::vector<cuda::pinned_host_store> layers;
  std::string failure;
};

inline pinned_masters pin_masters(std::int32_t layers, std::int32_t experts,
                                  const expert_row_layout& layout, std::int32_t threads) {
  std::vector<std::optional<cuda::pinned_host_store>> stores(static_cast<std::size_t>(layers));
  std::atomic<std::int32_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex m;
  std::int32_t failed_layer = layers;
  std::string failure;
  const auto work = [&] {
    WISP_CUDA_TRY(cudaSetDevice(0));
    while (!failed.load()) {
      const std::int32_t l = next.fetch_add(1);
      if (l >= layers) {
        return;
      }
      try {
        stores[static_cast<std::size_t>(l)].emplace(experts, layout);
      } catch (const std::exception& e) {
        const std::lock_guard lock(m);
        if (l < failed_layer) {
          failed_layer = l;
          failure = "pinning the masters of layer " + std::to_string(l) + " failed: " + e.what();
        }
        failed.store(true);
      }
    }
  };
  std::vector<std::thread> pool;
  std::exception_ptr thread_error;
  for (std::int32_t t = 0; t < std::max(1, threads); ++t) {
    pool.emplace_back([&] {
      try {
        work();
      } catch (...) {
        const std::lock_guard lock(m);
        thread_error = std::current_exception();
        failed.store(true);
      }
    });
  }
  for (std::thread& t : pool) {
    t.join();
  }
  if (thread_error) {
    std::rethrow_exception(thread_error);
  }
  pinned_masters out;
  out.failure = failure;
  for (auto& s : stores) {
    if (!s) {
      break;  // keep the prefix; later layers are freed with `stores`
    }
    out.layers.push_back(std::move(*s));
  }
  return out;
}

// out[o] = bf16(out[o] + partial[o]): the host's experts join a layer's output.
__global__ inline void add_partial_kernel(bf16* out, const float* partial, std::int32_t n) {
  for (std::int32_t i = static_cast<std::int32_t>(blockIdx.x * blockDim.x + threadIdx.x); i < n;
       i += static_cast<std::int32_t>(gridDim.x * blockDim.x)) {
    out[i] = to_bf16(to_float(out[i]) + partial[i]);
  }
}

}  // namespace detail

/// @brief One model on the GPU (see the file comment). Not copyable.
class model_bench {
 public:
  using log_fn = std::function<void(const std::string&)>;

  /// @throws wisp::out_of_memory when not even one layer fits; wisp::cuda_error;
  ///   wisp::logic_error on bad options.
  model_bench(const decode_model& model, const decode_options& o, log_fn log)
      : options_(o), log_(std::move(log)), full_(model) {
    o.window.validate();
    const decode_routing routing = load_decode_routing(model, o.traces_dir, o.window.tokens());
    log_(model.name + ": routing: " + routing.source);
    allocate(model);
    routing_ = first_layers(routing, shape().layers);
    fill_masters();
    upload_inputs();
    gemv_.emplace(model_.expert, 1, model_.shape.top_k, compute_.get());
    if (options_.cublas) {
      try {
        cublas_.emplace(model_.expert, 1, model_.shape.top_k, compute_.get());
      } catch (const std::exception& e) {
        drop_cublas(e.what());
      }
    }
    engine_.emplace(compute_.get());
    maps_.emplace(shape().layers, shape().experts, 2);
    reference();
    if (std::any_of(o.arms.begin(), o.arms.end(), computes_on_host)) {
      try {
        start_host();
      } catch (const std::exception& e) {  // the other arms still run
        host_.reset();
        host_error_ = e.what();
        log_("  the host side did not start: " + host_error_);
      }
    }
  }

  [[nodiscard]] const memory_plan& plan() const noexcept { return plan_; }
  [[nodiscard]] const moe_shape& shape() const noexcept { return model_.shape; }

  /// @brief Every arm at `fraction` of each layer's experts: interleaved repetitions until
  /// `options.repetitions` or `deadline` (at least one), calling `progress` after each.
  config_report run_budget(double fraction, detail::clock::time_point deadline,
                           const std::function<void(const config_report&)>& progress) {
    config_report r = header(fraction);
    const std::int32_t c = r.capacity;
    const std::int32_t staging = shape().top_k;  // one token's call
    const policy_choice choice = choose_wisp_policy(routing_, c, options_.window.history);
    r.wisp_policy = std::string(choice.name);
    const graph_policy graph = graph_policy_for(choice.name);
    r.wisp_graph_policy = cuda::step_policy_name(graph.policy);
    r.wisp_graph_policy_note = graph.note;
    for (std::size_t i = 0; i < wisp_policy_names.size(); ++i) {
      r.policy_misses.emplace_back(std::string(wisp_policy_names[i]), choice.misses[i]);
    }
    const std::vector<std::uint64_t> counts = expert_counts(routing_, 0, options_.window.history);
    budget_ = {c, staging, choice.name, graph.policy, counts};

    struct unit {
      decode_arm arm;
      bool cublas;
      arm_report* report;
      double seconds = 0;
    };
    const auto selected = [&](decode_arm a) {
      return std::find(options_.arms.begin(), options_.arms.end(), a) != options_.arms.end();
    };
    for (const decode_arm a : decode_arms) {
      if (selected(a)) {
        r.arms.push_back(new_report(a));
      }
    }
    if (cublas_) {
      for (const decode_arm a : {decode_arm::wisp, decode_arm::all_resident}) {
        if (selected(a)) {
          r.cublas_arms.push_back(new_report(a));
        }
      }
    }
    std::vector<unit> units;
    for (arm_report& a : r.arms) {
      units.push_back({a.arm, false, &a});
    }
    for (arm_report& a : r.cublas_arms) {
      units.push_back({a.arm, true, &a});
    }
    for (unit& u : units) {
      if (computes_on_host(u.arm) && !host_) {
        u.report->skipped = "the host side did not start: " + host_error_;
      }
    }
    if (!plan_.all_resident) {
      for (unit& u : units) {
        if (u.arm == decode_arm::all_resident) {
          u.report->skipped = "does not fit in device memory: " + plan_.note;
        }
      }
    }
    for (std::int32_t rep = 0; rep < options_.repetitions; ++rep) {
      double last = 0;
      for (const unit& u : units) {
        last += u.seconds;
      }
      if (rep > 0 && detail::clock::now() + std::chrono::duration<double>(last) > deadline) {
        r.truncated = "ran " + std::to_string(rep) + " of " + std::to_string(options_.repetitions) +
                      " repetitions: the time given to this configuration ran out";
        break;
      }
      for (std::size_t i = 0; i < units.size(); ++i) {
        unit& u = units[(i + static_cast<std::size_t>(rep)) % units.size()];
        if (!u.report->skipped.empty() || !u.report->error.empty()) {
          continue;
        }
        const auto begin = detail::clock::now();
        try {
          run_unit(u.arm, u.cublas, *u.report, rep == 0);
        } catch (const std::exception& e) {
          u.report->error = e.what();
          log_(std::string(arm_name(u.arm)) + (u.cublas ? " (cuBLAS)" : "") + ": " + e.what());
          recover();
        }
        u.seconds = std::chrono::duration<double>(detail::clock::now() - begin).count();
      }
      progress(r);
    }
    graph_.reset();
    graph_pager_.reset();
    return r;
  }

 private:
  struct budget_state {
    std::int32_t capacity = 0;
    std::int32_t staging = 0;
    std::string_view policy;
    cuda::step_policy graph_policy = cuda::step_policy::lru;
    std::vector<std::uint64_t> counts;
  };

  // ---- set-up ----------------------------------------------------------------------------------

  void allocate(const decode_model& model) {
    decode_model run = model;
    if (options_.max_layers > 0 && options_.max_layers < run.shape.layers) {
      run.shape.layers = options_.max_layers;
    }
    std::size_t free = 0;
    std::size_t total = 0;
    WISP_CUDA_TRY(cudaMemGetInfo(&free, &total));
    memory_request request{run, options_.budgets, detail::host_available_bytes(),
                           options_.host_reserve, free, options_.device_reserve,
                           // kernels' scratch, the cuBLAS zero row and workspace, routing buffers
                           2 * run.expert_bytes() + (std::uint64_t{128} << 20)};
    plan_ = plan_memory(request);
    const expert_row_layout layout({run.expert_bytes()});
    for (int attempt = 0;; ++attempt) {
      WISP_EXPECTS(attempt < 8, "allocation did not converge");
      log_(run.name + ": pinning " + std::to_string(plan_.layers) + " layers of masters (" +
           std::to_string(plan_.host_bytes >> 20) + " MiB), device arena of " +
           std::to_string(plan_.arena_rows) + " rows (" + std::to_string(plan_.device_bytes >> 20) +
           " MiB)" + (plan_.note.empty() ? "" : ": " + plan_.note));
      if (static_cast<std::int32_t>(masters_.size()) < plan_.layers) {
        masters_.clear();
        const auto begin = detail::clock::now();
        detail::pinned_masters pinned =
            detail::pin_masters(plan_.layers, run.shape.experts, layout, options_.pin_threads);
        log_("  pinned " + std::to_string(pinned.layers.size()) + " layers in " +
             std::to_string(std::chrono::duration<double>(detail::clock::now() - begin).count()) +
             " s");
        masters_ = std::move(pinned.layers);
        if (!pinned.failure.empty()) {
          WISP_CUDA_TRY(cudaMemGetInfo(&free, &total));
          plan_ = plan_after_failure(request, plan_, static_cast<std::int32_t>(masters_.size()),
                                     free, pinned.failure);
          continue;
        }
      }
      masters_.erase(masters_.begin() + plan_.layers, masters_.end());
      try {
        arena_ = detail::device_array<std::byte>(plan_.arena_rows * run.expert_bytes(),
                                                 "the device arena: cudaMalloc");
        break;
      } catch (const out_of_memory& e) {
        WISP_CUDA_TRY(cudaMemGetInfo(&free, &total));
        plan_ = plan_after_failure(
            request, plan_, plan_.layers, free,
            std::string(e.what()) + " (" + std::to_string(free >> 20) + " MiB free)");
      }
    }
    run.shape.layers = plan_.layers;
    model_ = run;
    mirror_.emplace(static_cast<std::int64_t>(plan_.arena_rows), model_.shape);
  }

  // Random experts on the device, copied to the masters: in the all-resident layout when the
  // arena holds it (the arena then already is the all-resident arm's), else layer by layer
  // through rows [0, experts).
  void fill_masters() {
    const auto begin = detail::clock::now();
    const std::int32_t e = shape().experts;
    const std::size_t row = row_bytes();
    for (std::int32_t l = 0; l < shape().layers; ++l) {
      const std::int64_t base = plan_.all_resident ? static_cast<std::int64_t>(l) * e : 0;
      std::byte* at = arena_.data() + static_cast<std::size_t>(base) * row;
      detail::launch_fill(at, row, model_.expert, l, 0, e, compute_.get());
      WISP_CUDA_TRY(cudaMemcpyAsync(masters_[static_cast<std::size_t>(l)].row(0).data(), at,
                                    static_cast<std::size_t>(e) * row, cudaMemcpyDeviceToHost,
                                    compute_.get()));
      for (std::int32_t x = 0; x < e; ++x) {
        mirror_->load({base + x, l, x});
      }
    }
    WISP_CUDA_TRY(cudaStreamSynchronize(compute_.get()));
    log_("  wrote " + std::to_string(static_cast<double>(model_.model_bytes()) / (1u << 30)) +
         " GiB of experts in " +
         std::to_string(std::chrono::duration<double>(detail::clock::now() - begin).count()) +
         " s");
  }

  void upload_inputs() {
    const std::int32_t layers = shape().layers;
    const std::int32_t h = model_.expert.hidden;
    const std::size_t k = static_cast<std::size_t>(shape().top_k);
    hidden_host_.resize(static_cast<std::size_t>(layers) * static_cast<std::size_t>(h));
    for (std::int32_t l = 0; l < layers; ++l) {
      for (std::int32_t i = 0; i < h; ++i) {
        hidden_host_[static_cast<std::size_t>(l) * static_cast<std::size_t>(h) +
                     static_cast<std::size_t>(i)] = hidden_value(l, static_cast<std::uint64_t>(i));
      }
    }
    const decode_window& w = options_.window;
    const std::int32_t device_tokens = w.tokens() - w.first_device_token();
    const std::size_t per_token = routing_.per_token();
    const std::size_t from = routing_.offset(w.first_device_token(), 0);
    const std::size_t n = static_cast<std::size_t>(device_tokens) * per_token;
    hidden_ = detail::device_array<bf16>(hidden_host_.size());
    out_ = detail::device_array<bf16>(hidden_host_.size());
    window_ids_ = detail::device_array<std::int32_t>(n);
    window_weights_ = detail::device_array<float>(n);
    ids_ = detail::device_array<std::int32_t>(per_token);
    weights_ = detail::device_array<float>(per_token);
    identity_ = detail::device_array<std::int32_t>(static_cast<std::size_t>(shape().experts));
    host_ids_.emplace(k);
    std::vector<std::int32_t> identity(static_cast<std::size_t>(shape().experts));
    for (std::size_t i = 0; i < identity.size(); ++i) {
      identity[i] = static_cast<std::int32_t>(i);
    }
    WISP_CUDA_TRY(cudaMemcpy(hidden_.data(), hidden_host_.data(),
                             hidden_host_.size() * sizeof(bf16), cudaMemcpyHostToDevice));
    WISP_CUDA_TRY(cudaMemcpy(window_ids_.data(), routing_.ids.data() + from,
                             n * sizeof(std::int32_t), cudaMemcpyHostToDevice));
    WISP_CUDA_TRY(cudaMemcpy(window_weights_.data(), routing_.weights.data() + from,
                             n * sizeof(float), cudaMemcpyHostToDevice));
    WISP_CUDA_TRY(cudaMemcpy(identity_.data(), identity.data(),
                             identity.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice));
    WISP_CUDA_TRY(cudaDeviceSynchronize());
  }

  // ---- the reference -------------------------------------------------------------------------

  // Every layer's output of the verification tokens, each layer computed with all its experts
  // resident (identity map); the kernels timed and checked on layer 0.
  void reference() {
    const auto begin = detail::clock::now();
    const decode_window& w = options_.window;
    const std::int32_t layers = shape().layers;
    const std::int32_t e = shape().experts;
    const std::int32_t k = shape().top_k;
    const std::size_t h = static_cast<std::size_t>(model_.expert.hidden);
    const std::size_t per_token = static_cast<std::size_t>(layers) * h;
    detail::device_array<bf16> ref(static_cast<std::size_t>(w.verify) * per_token);
    std::optional<detail::device_array<bf16>> cub;
    if (cublas_) {
      cub.emplace(static_cast<std::size_t>(w.verify) * per_token);
    }
    kernel_report gemv;
    gemv.name = "gemv";
    kernel_report cublas;
    cublas.name = "cublas";
    gemv.expert_bytes_per_call = cublas.expert_bytes_per_call =
        static_cast<double>(k) * static_cast<double>(row_bytes());
    for (std::int32_t l = 0; l < layers; ++l) {
      const std::int64_t base = plan_.all_resident ? static_cast<std::int64_t>(l) * e : 0;
      arena_mirror target(mirror_->rows(), shape());
      for (std::int32_t x = 0; x < e; ++x) {
        target.load({base + x, l, x});
      }
      materialise(target);
      const expert_tensor_view rows{arena_.data() + static_cast<std::size_t>(base) * row_bytes(),
                                    static_cast<std::size_t>(e), row_bytes()};
      for (std::int32_t v = 0; v < w.verify; ++v) {
        const std::int32_t t = w.first_verified() + v;
        (*gemv_)(args(l, t, rows, identity_.data(),
                      ref.data() + (static_cast<std::size_t>(v) * layers + l) * h));
        if (cublas_) {
          try {
            (*cublas_)(args(l, t, rows, identity_.data(),
                            cub->data() + (static_cast<std::size_t>(v) * layers + l) * h));
          } catch (const std::exception& x) {
            drop_cublas(x.what());
          }
        }
      }
      if (l == 0) {
        time_kernels(rows, gemv, cublas);
      }
    }
    WISP_CUDA_TRY(cudaStreamSynchronize(compute_.get()));
    reference_.resize(static_cast<std::size_t>(w.verify) * per_token);
    WISP_CUDA_TRY(cudaMemcpy(reference_.data(), ref.data(), reference_.size() * sizeof(bf16),
                             cudaMemcpyDeviceToHost));
    check_gemv(gemv);
    if (cublas_ && cub) {
      std::vector<bf16> got(reference_.size());
      WISP_CUDA_TRY(
          cudaMemcpy(got.data(), cub->data(), got.size() * sizeof(bf16), cudaMemcpyDeviceToHost));
      const closeness c = compare_close(reference_, got);
      cublas.ok = c.within(kernel_tolerance);
      cublas.check = "against the GEMV kernel, every layer of " + std::to_string(w.verify) +
                     " tokens: " + c.describe(kernel_tolerance);
    } else {
      cublas.error = cublas_error_;
    }
    kernels_ = {gemv};
    if (options_.cublas) {
      kernels_.push_back(cublas);
    }
    log_("  reference outputs and kernel figures in " +
         std::to_string(std::chrono::duration<double>(detail::clock::now() - begin).count()) +
         " s");
  }

  void time_kernels(const expert_tensor_view& rows, kernel_report& gemv, kernel_report& cublas) {
    const decode_window& w = options_.window;
    const std::int32_t calls = std::max(1, w.tokens() - w.first_device_token() - w.verify);
    const auto time = [&](auto& kernel) {
      return time_moe_calls(kernel, compute_.get(), rows, identity_.data(), shape().experts,
                            hidden_.data(), out_.data(), window_ids_.data(), window_weights_.data(),
                            routing_.per_token(), calls, shape().top_k);
    };
    gemv.us_per_call = time(*gemv_);
    if (cublas_) {
      try {
        cublas.us_per_call = time(*cublas_);
      } catch (const std::exception& e) {
        drop_cublas(e.what());
      }
    }
  }

  // The cuBLAS kernel failed: report why, run without it.
  void drop_cublas(const std::string& why) {
    cublas_error_ = why;
    log_("cuBLAS kernel dropped: " + why);
    cublas_.reset();
    recover();
  }

  // The GEMV kernel's layer-0 output of the first verification token against its host arithmetic
  // (bit for bit) and wisp::reference_fused_moe (within the tolerance), both on the pinned masters.
  void check_gemv(kernel_report& gemv) {
    const std::int32_t t = options_.window.first_verified();
    const std::size_t h = static_cast<std::size_t>(model_.expert.hidden);
    std::vector<std::int32_t> identity(static_cast<std::size_t>(shape().experts));
    for (std::size_t i = 0; i < identity.size(); ++i) {
      identity[i] = static_cast<std::int32_t>(i);
    }
    std::vector<bf16> host(h);
    std::vector<bf16> oracle(h);
    const std::size_t at = routing_.offset(t, 0);
    const auto k = static_cast<std::size_t>(shape().top_k);
    const basic_fused_moe_args<bf16> a{{hidden_host_.data(), h},
                                       {routing_.ids.data() + at, k},
                                       {routing_.weights.data() + at, k},
                                       masters_[0].host_view(),
                                       identity,
                                       host,
                                       1,
                                       shape().top_k,
                                       model_.expert.hidden};
    gemv_moe_host(model_.expert)(a);
    basic_fused_moe_args<bf16> b = a;
    b.out = oracle;
    reference_fused_moe(model_.expert)(b);
    const std::span<const bf16> device(reference_.data(), h);  // token 0 of the reference, layer 0
    const output_check exact = compare_outputs(host, device);
    const closeness close = compare_close(oracle, device);
    gemv.ok = exact.equal() && close.within(kernel_tolerance);
    gemv.check = "layer 0, token " + std::to_string(t) +
                 ": against its host arithmetic: " + exact.describe(1, model_.expert.hidden) +
                 "; against wisp::reference_fused_moe: " + close.describe(kernel_tolerance);
  }

  // ---- the host's experts ---------------------------------------------------------------------

  // What the host arms compute with: `wisp::host_swiglu_kernel` on a `wisp::thread_pool` of
  // threads - 1 workers and the driver's thread (the workers spin `host_spin` between a layer's
  // call and the next, as ggml's OpenMP threads do, rather than being woken one by one by each
  // call), pinned buffers for the layer's input and routing
  // weights (read back with the ids) and for the host's weighted sum (uploaded, then added to the
  // layer's output by `add_partial_kernel`).
  static constexpr std::chrono::microseconds host_spin{2000};  // longer than a layer's call
  struct host_side {
    host_side(const decode_model& m, std::int32_t threads)
        : pool(static_cast<std::uint32_t>(std::max(1, threads - 1)), {.spin = host_spin}),
          kernel(m.expert, {.threads = threads}, pool.executor()),
          input(static_cast<std::size_t>(m.expert.hidden),
                "the host's layer input: cudaMallocHost"),
          weights(static_cast<std::size_t>(m.shape.top_k), "the host's routing weights"),
          partial(static_cast<std::size_t>(m.expert.hidden), "the host's partial sum"),
          partial_device(static_cast<std::size_t>(m.expert.hidden)),
          x(static_cast<std::size_t>(m.expert.hidden)),
          y(static_cast<std::size_t>(m.shape.top_k) * static_cast<std::size_t>(m.expert.hidden)) {}
    thread_pool pool;
    host_swiglu_kernel kernel;
    detail::pinned_array<bf16> input;
    detail::pinned_array<float> weights;
    detail::pinned_array<float> partial;
    detail::device_array<float> partial_device;
    std::vector<float> x;  // the input in fp32
    std::vector<float> y;  // one output row per host expert
    std::vector<host_expert_task> tasks;
  };

  // Starts the host side and measures its kernel on this model's experts, read from the pinned
  // masters (each call on another layer's experts, so none is in the caches): the hybrid split's
  // costs and the arms' ceilings come from these figures.
  void start_host() {
    const std::int32_t threads =
        options_.host_threads > 0
            ? options_.host_threads
            : static_cast<std::int32_t>(std::max(1u, std::thread::hardware_concurrency()));
    host_.emplace(model_, threads);
    const std::int32_t k = shape().top_k;
    const std::size_t h = static_cast<std::size_t>(model_.expert.hidden);
    constexpr std::int32_t wide = 16;  // rows of the FLOP-bound measurement
    std::vector<float> x(static_cast<std::size_t>(wide) * h);
    for (std::size_t i = 0; i < x.size(); ++i) {
      x[i] = to_float(hidden_host_[i % hidden_host_.size()]);
    }
    std::vector<float> y(static_cast<std::size_t>(k) * wide * h);
    std::int32_t next_layer = 0;
    const auto time = [&](std::int32_t experts, std::int32_t rows) {
      std::vector<double> us;
      for (std::int32_t rep = 0; rep < 7; ++rep) {
        const std::int32_t l = next_layer++ % shape().layers;
        std::vector<host_expert_task> tasks;
        for (std::int32_t e = 0; e < experts; ++e) {
          tasks.push_back(
              {reinterpret_cast<const bf16*>(masters_[static_cast<std::size_t>(l)].row(e).data()),
               x.data(), y.data() + static_cast<std::size_t>(e) * wide * h, rows});
        }
        const auto begin = detail::clock::now();
        host_->kernel(tasks);
        us.push_back(
            std::chrono::duration<double, std::micro>(detail::clock::now() - begin).count());
      }
      return summarize(us);
    };
    (void)time(k, 1);  // wakes the pool and grows the scratch
    host_figures& f = host_figures_;
    f.threads = threads;
    f.isa = std::string(to_string(host_->kernel.isa()));
    f.call_us = time(k, 1);
    f.one_expert_us = time(1, 1);
    f.wide_call_us = time(k, wide);
    f.experts_per_call = k;
    f.wide_rows = wide;
    f.row_bytes = row_bytes();
    const double expert_s = f.call_us.median * 1e-6 / k;
    const double latency_s = options_.link.dma_latency_us * 1e-6;
    costs_ = {
        .copy_seconds =
            static_cast<double>(row_bytes()) / (std::max(options_.link.dma_gbps, 1e-3) * 1e9) +
            latency_s,
        .expert_seconds = expert_s,
        .position_seconds = f.wide_call_us.median * 1e-6 / (static_cast<double>(k) * wide),
        // a call's fixed cost: the pool's start and the transfers of its input and output
        .call_seconds = std::max(0.0, f.one_expert_us.median * 1e-6 - expert_s) + 2 * latency_s};
    costs_.validate();
    log_("  host kernel (" + f.isa + ", " + std::to_string(threads) + " threads): " +
         std::to_string(f.call_us.median) + " us for " + std::to_string(k) + " experts at 1 row (" +
         std::to_string(f.gbps()) + " GB/s), " + std::to_string(f.one_expert_us.median) +
         " us for 1, " + std::to_string(f.wide_call_us.median) + " us for " + std::to_string(k) +
         " at " + std::to_string(wide) + " rows");
  }

  // The host's share of `layer`: every expert of `experts` on the layer's input (read back with
  // the ids), weighted by the routing and summed, then added to the layer's output on the
  // device (after the kernel's combine, in stream order). Returns the positions it computed.
  std::int64_t host_moe(std::int32_t layer, std::span<const std::int32_t> experts,
                        std::span<const std::int32_t> ids) {
    host_side& hs = *host_;
    const std::size_t h = static_cast<std::size_t>(model_.expert.hidden);
    for (std::size_t i = 0; i < h; ++i) {
      hs.x[i] = to_float(hs.input.data()[i]);
    }
    hs.tasks.clear();
    for (std::size_t j = 0; j < experts.size(); ++j) {
      hs.tasks.push_back({reinterpret_cast<const bf16*>(
                              masters_[static_cast<std::size_t>(layer)].row(experts[j]).data()),
                          hs.x.data(), hs.y.data() + j * h, 1});
    }
    hs.kernel(hs.tasks);
    float* partial = hs.partial.data();
    std::fill(partial, partial + h, 0.0f);
    std::int64_t positions = 0;
    for (std::size_t p = 0; p < ids.size(); ++p) {
      const auto j = static_cast<std::size_t>(std::find(experts.begin(), experts.end(), ids[p]) -
                                              experts.begin());
      if (j == experts.size()) {
        continue;  // the device's
      }
      ++positions;
      const float w = hs.weights.data()[p];
      const float* y = hs.y.data() + j * h;
      for (std::size_t o = 0; o < h; ++o) {
        partial[o] += w * y[o];
      }
    }
    WISP_CUDA_TRY(cudaMemcpyAsync(hs.partial_device.data(), partial, h * sizeof(float),
                                  cudaMemcpyHostToDevice, compute_.get()));
    detail::add_partial_kernel<<<static_cast<unsigned>((h + 255) / 256), 256, 0, compute_.get()>>>(
        out_.data() + static_cast<std::size_t>(layer) * h, hs.partial_device.data(),
        static_cast<std::int32_t>(h));
    WISP_CUDA_TRY(cudaGetLastError());
    return positions;
  }

  // ---- the arms ------------------------------------------------------------------------------

  arm_report new_report(decode_arm a) const {
    arm_report r;
    r.arm = a;
    r.timed_tokens = options_.window.timed;
    r.layers = shape().layers;
    r.row_bytes = row_bytes();
    return r;
  }

  void run_unit(decode_arm arm, bool use_cublas, arm_report& report, bool verify) {
    const std::int32_t c = budget_.capacity;
    const auto with_kernel = [&](auto& rule) {
      if (use_cublas) {
        run_rule(rule, *cublas_, report, verify, false);
      } else {
        run_rule(rule, *gemv_, report, verify, true);
      }
    };
    switch (arm) {
      case decode_arm::layer_offload: {
        offload_rule rule(shape(), c);
        report.notes = std::to_string(rule.resident_layers()) + " of " +
                       std::to_string(shape().layers) +
                       " layers resident (the last); the others' kernels read the routed experts "
                       "from pinned memory (UVA)";
        with_kernel(rule);
        return;
      }
      case decode_arm::on_demand: {
        on_demand_rule rule(shape(), budget_.staging);
        report.notes = std::to_string(budget_.staging) + " staging rows shared by every layer";
        with_kernel(rule);
        return;
      }
      case decode_arm::static_hot: {
        static_hot_rule rule(shape(), c, budget_.staging, budget_.counts);
        report.notes = std::to_string(c - budget_.staging) +
                       " experts per layer pinned (the most routed over the history), " +
                       std::to_string(budget_.staging) + " staging rows per layer";
        with_kernel(rule);
        return;
      }
      case decode_arm::llama_cpp_cache: {
        llama_rule rule(shape(), c);
        report.notes = "llama_cpp_cache: one global LRU pool of " +
                       std::to_string(static_cast<std::int64_t>(c) * shape().layers) +
                       " slots, misses in ascending expert order, a host sync per layer";
        with_kernel(rule);
        return;
      }
      case decode_arm::cpu_moe_layers: {
        cpu_moe_layers_rule rule(shape(), c);
        report.notes =
            "the first " + std::to_string(rule.host_layers()) + " of " +
            std::to_string(shape().layers) + " layers' experts computed by the host (--n-cpu-moe " +
            std::to_string(rule.host_layers()) + "), the others resident; " + host_note();
        with_kernel(rule);
        return;
      }
      case decode_arm::cpu_experts: {
        cpu_experts_rule rule(shape(), c, budget_.counts);
        report.notes = std::to_string(c) +
                       " experts per layer resident (the most routed over the history), every "
                       "other routed expert computed by the host; " +
                       host_note();
        with_kernel(rule);
        return;
      }
      case decode_arm::pager_hybrid:
        visit_wisp_policy(budget_.policy, [&]<class P>(std::type_identity<P>) {
          hybrid_pager_rule<P> rule(shape(), c, costs_);
          report.notes = "pager<" + std::string(P::name) + ">, " + std::to_string(c) +
                         " slots per layer, each miss copied or computed by the host "
                         "(hybrid_splitter; copy " +
                         std::to_string(costs_.copy_seconds * 1e6) + " us, host " +
                         std::to_string(costs_.expert_seconds * 1e6) + " us per expert + " +
                         std::to_string(costs_.call_seconds * 1e6) +
                         " us per call, measured at set-up, then following the timed host "
                         "calls); " +
                         host_note();
          with_kernel(rule);
          report.notes +=
              "; host per expert at the end: " + std::to_string(rule.cost().expert_seconds * 1e6) +
              " us";
        });
        return;
      case decode_arm::wisp:
        visit_wisp_policy(budget_.policy, [&]<class P>(std::type_identity<P>) {
          pager_rule<P> rule(shape(), c);
          report.notes = "pager<" + std::string(P::name) +
                         "> (the fewest misses over the history), " + std::to_string(c) +
                         " slots per layer, a host sync per layer";
          with_kernel(rule);
        });
        return;
      case decode_arm::wisp_graph:
        report.notes =
            "device_pager (" +
            std::string(c <= cuda::warp_step_limit && shape().top_k <= cuda::warp_step_limit
                            ? "warp"
                            : "block") +
            " step), " + std::to_string(c) +
            " slots per layer; step, copy kernel and MoE kernels of every layer in one "
            "CUDA graph per token; no host sync";
        run_graph(report, verify);
        return;
      case decode_arm::all_resident: {
        all_resident_rule rule(shape());
        report.notes = "every expert resident (" + std::to_string(plan_.arena_rows) + " rows)";
        with_kernel(rule);
        return;
      }
    }
  }

  [[nodiscard]] std::string host_note() const {
    return "host kernel " + host_figures_.isa + " on " + std::to_string(host_figures_.threads) +
           " threads beside the device's launches, a host sync per layer";
  }

  // Routes token `t`: its ids and weights, for every layer, where a router would leave them.
  void route(std::int32_t t) {
    const std::size_t n = routing_.per_token();
    const std::int32_t first = options_.window.first_device_token();
    WISP_EXPECTS(t >= first && t < options_.window.tokens(), "route: token ", t,
                 " is outside the device window [", first, ", ", options_.window.tokens(), ")");
    const std::size_t at = static_cast<std::size_t>(t - first) * n;
    WISP_CUDA_TRY(cudaMemcpyAsync(ids_.data(), window_ids_.data() + at, n * sizeof(std::int32_t),
                                  cudaMemcpyDeviceToDevice, compute_.get()));
    WISP_CUDA_TRY(cudaMemcpyAsync(weights_.data(), window_weights_.data() + at, n * sizeof(float),
                                  cudaMemcpyDeviceToDevice, compute_.get()));
  }

  // The kernel's arguments for `layer` of token `t` (ids from the window) or of the routed token.
  basic_fused_moe_args<bf16> args(std::int32_t layer, std::int32_t t,
                                  const expert_tensor_view& rows, const std::int32_t* map,
                                  bf16* out) const {
    const std::size_t k = static_cast<std::size_t>(shape().top_k);
    const std::size_t h = static_cast<std::size_t>(model_.expert.hidden);
    const std::size_t at =
        t < 0 ? static_cast<std::size_t>(layer) * k
              : static_cast<std::size_t>(t - options_.window.first_device_token()) *
                        routing_.per_token() +
                    static_cast<std::size_t>(layer) * k;
    const std::int32_t* ids = t < 0 ? ids_.data() + at : window_ids_.data() + at;
    const float* weights = t < 0 ? weights_.data() + at : window_weights_.data() + at;
    return {{hidden_.data() + static_cast<std::size_t>(layer) * h, h},
            {ids, k},
            {weights, k},
            rows,
            {map, static_cast<std::size_t>(shape().experts)},
            {out, h},
            1,
            shape().top_k,
            model_.expert.hidden};
  }
  basic_fused_moe_args<bf16> routed_args(std::int32_t layer, const expert_tensor_view& rows,
                                         const std::int32_t* map) const {
    return args(layer, -1, rows, map,
                out_.data() + static_cast<std::size_t>(layer) *
                                  static_cast<std::size_t>(model_.expert.hidden));
  }

  [[nodiscard]] expert_tensor_view arena_view(std::int64_t first, std::int64_t rows) const {
    return {arena_.data() + static_cast<std::size_t>(first) * row_bytes(),
            static_cast<std::size_t>(rows), row_bytes()};
  }
  [[nodiscard]] expert_tensor_view view_of(std::int32_t layer, const layer_call& c) const {
    return c.masters ? masters_[static_cast<std::size_t>(layer)].device_view()
                     : arena_view(c.first_row, c.rows);
  }

  // Copies the rows `target` fills whose content differs (per layer, batched by copy_engine).
  void materialise(const arena_mirror& target) {
    const std::vector<std::vector<copy_op>> plans = mirror_->copies_to(target);
    const expert_tensor_view all = arena_view(0, mirror_->rows());
    for (std::size_t l = 0; l < plans.size(); ++l) {
      if (!plans[l].empty()) {
        (void)engine_->copy({masters_[l].host_view(), all, row_bytes()}, plans[l],
                            engine_->consumer_event());
      }
    }
    engine_->synchronize();
    mirror_->take_from(target);
  }

  void synchronize() {
    WISP_CUDA_TRY(cudaStreamSynchronize(compute_.get()));
    engine_->synchronize();
  }

  // One token through every layer, as `rule` decides on the host.
  template <class Rule, class Kernel>
  void forward(Rule& rule, Kernel& kernel, std::int32_t t, std::vector<char>& map_ready,
               call_totals* totals) {
    const std::size_t k = static_cast<std::size_t>(shape().top_k);
    route(t);
    rule.begin_token(routing_.position_of(t));
    for (std::int32_t l = 0; l < shape().layers; ++l) {
      std::span<const std::int32_t> ids = routing_.ids_of(t, l);
      if constexpr (Rule::ids_on_host) {  // the router ran on the GPU: read its ids back
        WISP_CUDA_TRY(
            cudaMemcpyAsync(host_ids_->data(), ids_.data() + static_cast<std::size_t>(l) * k,
                            k * sizeof(std::int32_t), cudaMemcpyDeviceToHost, compute_.get()));
        if constexpr (host_compute_v<Rule>) {  // and what the host computes with: input, weights
          const std::size_t h = static_cast<std::size_t>(model_.expert.hidden);
          WISP_CUDA_TRY(cudaMemcpyAsync(host_->input.data(),
                                        hidden_.data() + static_cast<std::size_t>(l) * h,
                                        h * sizeof(bf16), cudaMemcpyDeviceToHost, compute_.get()));
          WISP_CUDA_TRY(cudaMemcpyAsync(host_->weights.data(),
                                        weights_.data() + static_cast<std::size_t>(l) * k,
                                        k * sizeof(float), cudaMemcpyDeviceToHost, compute_.get()));
        }
        WISP_CUDA_TRY(cudaStreamSynchronize(compute_.get()));
        const std::span<const std::int32_t> read(host_ids_->data(), k);
        WISP_EXPECTS(std::equal(read.begin(), read.end(), ids.begin()), "token ", t, " layer ", l,
                     ": the ids read back from the device differ from the routing");
        ids = read;
      }
      const layer_call c = rule.call(l, ids);
      mirror_->apply(l, c);
      const expert_tensor_view rows = view_of(l, c);
      if (!c.copies.empty()) {
        engine_->wait(
            engine_->copy({masters_[static_cast<std::size_t>(l)].host_view(), rows, row_bytes()},
                          c.copies, engine_->consumer_event()));
      }
      if (!Rule::static_map || map_ready[static_cast<std::size_t>(l)] == 0) {
        (void)maps_->upload(l, c.map, engine_->stream());
        map_ready[static_cast<std::size_t>(l)] = 1;
      }
      kernel(routed_args(l, rows, maps_->acquire(l, compute_.get())));
      maps_->release(l, compute_.get());
      if constexpr (host_compute_v<Rule>) {  // beside the device's copies and kernel
        if (!c.host.empty()) {
          const auto begin = detail::clock::now();
          const std::int64_t positions = host_moe(l, c.host, ids);
          const double seconds =
              std::chrono::duration<double>(detail::clock::now() - begin).count();
          if constexpr (requires { rule.observe_host(1, 1, 0.0); }) {
            rule.observe_host(static_cast<std::int32_t>(c.host.size()), positions, seconds);
          }
          if (totals != nullptr) {
            totals->host_seconds += seconds;
          }
        }
      }
      if (totals != nullptr) {
        *totals += c;
      }
    }
  }

  // Every layer's output of the verification tokens, after running them.
  template <class Forward>
  std::vector<bf16> verify_outputs(Forward&& forward_token) {
    const decode_window& w = options_.window;
    const std::size_t per_token =
        static_cast<std::size_t>(shape().layers) * static_cast<std::size_t>(model_.expert.hidden);
    std::vector<bf16> got(static_cast<std::size_t>(w.verify) * per_token);
    for (std::int32_t v = 0; v < w.verify; ++v) {
      forward_token(w.first_verified() + v);
      synchronize();
      WISP_CUDA_TRY(cudaMemcpy(got.data() + static_cast<std::size_t>(v) * per_token, out_.data(),
                               per_token * sizeof(bf16), cudaMemcpyDeviceToHost));
    }
    return got;
  }

  // Bit for bit when `exact`, else within `tolerance` of the GEMV reference.
  void record_check(arm_report& report, const std::vector<bf16>& got, bool exact,
                    double tolerance = kernel_tolerance) {
    if (exact) {
      const output_check c = compare_outputs(reference_, got);
      report.output_ok = c.equal();
      report.output_check = c.describe(shape().layers, model_.expert.hidden);
    } else {
      const closeness c = compare_close(reference_, got);
      report.output_ok = c.within(tolerance);
      report.output_check = "against the GEMV reference: " + c.describe(tolerance);
    }
  }

  void record_totals(arm_report& report, const call_totals& totals) {
    if (report.tok_s.size() > 1 &&
        (totals.hits != report.totals.hits || totals.misses != report.totals.misses)) {
      report.notes += "; REPETITIONS DIFFER in hits/misses";
    }
    report.totals = totals;
  }

  template <class Rule, class Kernel>
  void run_rule(Rule& rule, Kernel& kernel, arm_report& report, bool verify, bool exact) {
    const decode_window& w = options_.window;
    arena_mirror target = preloaded(rule, mirror_->rows(), shape());
    (void)replay(rule, target, routing_, 0, w.first_device_token());
    materialise(target);
    std::vector<char> map_ready(static_cast<std::size_t>(shape().layers), 0);
    for (std::int32_t t = w.first_device_token(); t < w.first_timed(); ++t) {
      forward(rule, kernel, t, map_ready, nullptr);
    }
    synchronize();
    call_totals totals;
    const auto begin = detail::clock::now();
    for (std::int32_t t = w.first_timed(); t < w.first_verified(); ++t) {
      forward(rule, kernel, t, map_ready, &totals);
    }
    synchronize();
    const double seconds = std::chrono::duration<double>(detail::clock::now() - begin).count();
    report.tok_s.push_back(w.timed / seconds);
    record_totals(report, totals);
    if (verify) {
      // The host's experts round their activations to bf16 (`host_swiglu_tolerance`).
      constexpr bool host = host_compute_v<Rule>;
      record_check(report, verify_outputs([&](std::int32_t t) {
                     forward(rule, kernel, t, map_ready, nullptr);
                   }),
                   exact && !host, host ? host_swiglu_tolerance : kernel_tolerance);
    }
  }

  // wisp-graph: the device pager under the device policy closest to wisp's (`graph_policy_for`),
  // warmed by the host step's replay of the history, and one captured graph per token (step,
  // copy kernel, MoE kernel of every layer).
  void run_graph(arm_report& report, bool verify) {
    const decode_window& w = options_.window;
    const std::int32_t c = budget_.capacity;
    device_step_rule rule(shape(), c, budget_.graph_policy);
    arena_mirror target = preloaded(rule, mirror_->rows(), shape());
    (void)replay(rule, target, routing_, 0, w.first_device_token());
    materialise(target);
    if (!graph_pager_) {
      graph_pager_ = std::make_unique<cuda::device_pager>(
          cuda::pager_state_config{.layers = shape().layers,
                                   .experts = shape().experts,
                                   .capacity = c,
                                   .policy = budget_.graph_policy});
    }
    graph_pager_->load(rule.state());
    const std::size_t k = static_cast<std::size_t>(shape().top_k);
    if (!graph_.ready()) {
      graph_.capture(compute_.get(), [&] {
        for (std::int32_t l = 0; l < shape().layers; ++l) {
          const expert_tensor_view rows = arena_view(static_cast<std::int64_t>(l) * c, c);
          graph_pager_->step(l, ids_.data() + static_cast<std::size_t>(l) * k, shape().top_k,
                             compute_.get());
          graph_pager_->copy(l, masters_[static_cast<std::size_t>(l)].device_view(), rows,
                             row_bytes(), compute_.get());
          (*gemv_)(routed_args(l, rows, graph_pager_->map(l)));
        }
      });
    }
    const auto token = [&](std::int32_t t) {
      route(t);
      graph_.launch(compute_.get());
    };
    // The host follows what the device decided (the same step), after the fact.
    const auto follow = [&](std::int32_t begin, std::int32_t end) {
      return replay(rule, *mirror_, routing_, begin, end);
    };
    for (std::int32_t t = w.first_device_token(); t < w.first_timed(); ++t) {
      token(t);
    }
    synchronize();
    (void)follow(w.first_device_token(), w.first_timed());
    const call_totals before = device_totals();
    const auto begin = detail::clock::now();
    for (std::int32_t t = w.first_timed(); t < w.first_verified(); ++t) {
      token(t);
    }
    synchronize();
    const double seconds = std::chrono::duration<double>(detail::clock::now() - begin).count();
    report.tok_s.push_back(w.timed / seconds);
    const call_totals host = follow(w.first_timed(), w.first_verified());
    const call_totals after = device_totals();
    record_totals(report, host);
    if (after.hits - before.hits != host.hits || after.misses - before.misses != host.misses) {
      throw logic_error("wisp-graph: the device pager's counters (" +
                        std::to_string(after.hits - before.hits) + " hits, " +
                        std::to_string(after.misses - before.misses) +
                        " misses) differ from the host step's (" + std::to_string(host.hits) +
                        ", " + std::to_string(host.misses) + ")");
    }
    if (verify) {
      const std::vector<bf16> got = verify_outputs(token);
      (void)follow(w.first_verified(), w.tokens());
      record_check(report, got, true);
    }
  }

  [[nodiscard]] call_totals device_totals() const {
    call_totals t;
    for (std::int32_t l = 0; l < shape().layers; ++l) {
      const cuda::pager_layer_info info = graph_pager_->read_info(l, compute_.get());
      t.hits += info.total_hits;
      t.misses += info.total_misses;
    }
    return t;
  }

  // After a failed arm: clear the sticky-free error, check the device still works, and forget
  // what the arena holds (a copy may have stopped half way).
  void recover() {
    (void)cudaGetLastError();
    const cudaError_t status = cudaDeviceSynchronize();
    if (status != cudaSuccess) {
      throw cuda_error(static_cast<int>(status),
                       std::string("the device failed and cannot continue: ") +
                           cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
    }
    if (mirror_) {
      mirror_->clear();
    }
    graph_.reset();
  }

  config_report header(double fraction) const {
    config_report r;
    r.model = full_.name;
    r.budget_fraction = fraction;
    r.device = options_.device;
    r.smi_name = options_.smi_name;
    r.command = options_.command;
    r.commit = options_.commit;
    r.shape = full_;
    r.memory = plan_;
    r.capacity = budget_capacity(shape(), fraction);
    r.window = options_.window;
    r.routing = routing_.source;
    r.repetitions = options_.repetitions;
    r.device_memory_gbps = options_.device_memory_gbps;
    r.link = options_.link;
    r.kernels = kernels_;
    r.host = host_figures_;
    return r;
  }

  [[nodiscard]] std::size_t row_bytes() const noexcept { return model_.expert_bytes(); }

  decode_options options_;
  log_fn log_;
  decode_model full_;   // the model as asked
  decode_model model_;  // the layers that run
  memory_plan plan_;
  decode_routing routing_;
  detail::cuda_stream compute_;
  std::vector<cuda::pinned_host_store> masters_;
  detail::device_array<std::byte> arena_;
  std::optional<arena_mirror> mirror_;
  std::vector<bf16> hidden_host_;
  detail::device_array<bf16> hidden_;
  detail::device_array<bf16> out_;
  detail::device_array<std::int32_t> window_ids_;  // tokens [first device token, end) x layers x k
  detail::device_array<float> window_weights_;
  detail::device_array<std::int32_t> ids_;  // the routed token: layers x k
  detail::device_array<float> weights_;
  detail::device_array<std::int32_t> identity_;
  std::optional<detail::pinned_array<std::int32_t>> host_ids_;
  std::optional<gemv_fused_moe> gemv_;
  std::optional<cublas_fused_moe> cublas_;
  std::string cublas_error_;
  std::optional<cuda::copy_engine> engine_;
  std::optional<cuda::device_expert_map> maps_;
  std::vector<bf16> reference_;  // [verify x layers x H]
  std::vector<kernel_report> kernels_;
  budget_state budget_;
  std::unique_ptr<cuda::device_pager> graph_pager_;
  detail::cuda_graph graph_;
  std::optional<host_side> host_;  // when a host arm runs
  std::string host_error_;         // why it did not start, when it did not
  host_figures host_figures_;
  hybrid_cost_model costs_;  // pager+hybrid's, from the measured link and host
};

}  // namespace wisp::bench
