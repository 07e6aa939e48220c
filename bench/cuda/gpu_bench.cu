// SPDX-License-Identifier: Apache-2.0
// wisp_cuda_gpu_bench: the GPU benchmark of wisp::cuda (docs/cuda.md). In order:
// 1. the device pager step per layer in a CUDA graph (block, warp, automatic, an empty node, the
//    levers) -> <out>/<prefix>device-step.json;
// 2. the link: one expert row from pinned memory by DMA and by the wisp-graph arm's copy kernel
//    (in every decode file); with --write-profile FILE, the device profile wisp-engine --device
//    reads, from measurements;
// 3. the MoE part of decode on real-shaped models (DeepSeek-V2-Lite routed by ESFT, Qwen3-30B-A3B
//    by the synthetic router), masters in pinned memory, every arm at each budget, interleaved
//    repetitions -> <out>/<prefix>moe-<model>-<budget>.json, rewritten after every repetition.
// Tables go to stdout. Exit status: 0 when everything ran and every check passed, 1 when an arm,
// a kernel or a check failed (the files say which), 2 when the benchmark could not run.
//
//   wisp_cuda_gpu_bench --out-dir OUT --write-profile OUT/device-profile.json --deadline-s 300
#include "decode_model.hpp"
#include "decode_report.hpp"
#include "decode_run.cuh"
#include "device_step.cuh"
#include "gpu_profile.cuh"

#include <wisp/cuda/runtime.cuh>
#include <wisp/transfer/device_profile.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;
namespace wb = wisp::bench;

constexpr std::string_view usage = R"(usage: wisp_cuda_gpu_bench [options]
  --models LIST          deepseek-v2-lite,gpt-oss-20b (default), qwen3-30b-a3b, or tiny
  --budgets LIST         fractions of each layer's experts (default 0.25,0.5); one JSON file
                         per (model, budget)
  --arms LIST            the arms that run (default all): layer-offload, on-demand, static-hot,
                         llama.cpp-cache, cpu-moe-layers, cpu-experts, wisp, pager+hybrid,
                         wisp-graph, all-resident
  --host-threads N       threads of the host arms' expert kernel (default: every core)
  --history N --warmup N --timed N --verify N
                         the token window (default 4096, 4, 64, 2; see docs/cuda.md)
  --repetitions N        interleaved repetitions of every arm (default 5)
  --max-layers N         run at most N layers of each model (default: all)
  --deadline-s S         stop starting repetitions after S seconds (default: none)
  --out-dir DIR          where the JSON files go (default .)
  --file-prefix P        prefix of their names (e.g. 2026-11-27-nvidia-h100-80gb-hbm3-)
  --write-profile FILE   measure and write the device profile (JSON)
  --traces DIR           the traces folder holding raw/esft_deepseek_v2_lite_intent and
                         raw/gptoss20b_mmlu_pro_decode
  --commit C --smi-name NAME   recorded in every file
  --host-reserve-gib G --device-reserve-gib G   memory left to others (default 16, 2)
  --no-cublas            skip the cuBLAS kernel
  --no-device-step       skip the device-step timing (unless --write-profile needs it)
  --no-decode            skip the decode benchmark
)";

struct options {
  std::vector<std::string> models{"deepseek-v2-lite", "gpt-oss-20b"};
  wb::decode_options decode;
  double deadline_s = 0;
  std::filesystem::path out_dir = ".";
  std::string prefix;
  std::string profile;
  bool device_step = true;
  bool run_decode = true;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) {
      out.push_back(item);
    }
  }
  return out;
}

template <class T>
T number(const std::string& flag, const std::string& v) {
  std::istringstream in(v);
  T out{};
  in >> out;
  WISP_EXPECTS(in && in.peek() == std::char_traits<char>::eof(), "option ", flag,
               ": not a number: '", v, "'");
  return out;
}

options parse(int argc, char** argv) {
  options o;
#ifdef WISP_BENCH_TRACES_DIR
  o.decode.traces_dir = WISP_BENCH_TRACES_DIR;
#endif
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    std::string value;
    const auto eq = flag.find('=');
    const bool has_eq = eq != std::string::npos;
    if (has_eq) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    }
    const auto next = [&]() -> std::string {
      if (has_eq) {
        return value;
      }
      WISP_EXPECTS(i + 1 < argc, "option ", flag, " needs a value");
      return argv[++i];
    };
    if (flag == "--help" || flag == "-h") {
      std::cout << usage;
      std::exit(0);
    } else if (flag == "--models") {
      o.models = split(next());
    } else if (flag == "--budgets") {
      o.decode.budgets.clear();
      for (const std::string& b : split(next())) {
        o.decode.budgets.push_back(number<double>(flag, b));
      }
    } else if (flag == "--arms") {
      o.decode.arms.clear();
      for (const std::string& a : split(next())) {
        const wb::decode_arm arm = wb::arm_named(a);
        if (std::find(o.decode.arms.begin(), o.decode.arms.end(), arm) == o.decode.arms.end()) {
          o.decode.arms.push_back(arm);
        }
      }
    } else if (flag == "--history") {
      o.decode.window.history = number<std::int32_t>(flag, next());
    } else if (flag == "--warmup") {
      o.decode.window.warmup = number<std::int32_t>(flag, next());
    } else if (flag == "--timed") {
      o.decode.window.timed = number<std::int32_t>(flag, next());
    } else if (flag == "--verify") {
      o.decode.window.verify = number<std::int32_t>(flag, next());
    } else if (flag == "--repetitions") {
      o.decode.repetitions = number<std::int32_t>(flag, next());
    } else if (flag == "--host-threads") {
      o.decode.host_threads = number<std::int32_t>(flag, next());
      WISP_EXPECTS(o.decode.host_threads >= 1, "--host-threads must be >= 1, got ",
                   o.decode.host_threads);
    } else if (flag == "--max-layers") {
      o.decode.max_layers = number<std::int32_t>(flag, next());
    } else if (flag == "--deadline-s") {
      o.deadline_s = number<double>(flag, next());
    } else if (flag == "--out-dir") {
      o.out_dir = next();
    } else if (flag == "--file-prefix") {
      o.prefix = next();
    } else if (flag == "--write-profile") {
      o.profile = next();
    } else if (flag == "--traces") {
      o.decode.traces_dir = next();
    } else if (flag == "--commit") {
      o.decode.commit = next();
    } else if (flag == "--smi-name") {
      o.decode.smi_name = next();
    } else if (flag == "--host-reserve-gib") {
      o.decode.host_reserve = static_cast<std::uint64_t>(number<double>(flag, next()) * (1u << 30));
    } else if (flag == "--device-reserve-gib") {
      o.decode.device_reserve =
          static_cast<std::uint64_t>(number<double>(flag, next()) * (1u << 30));
    } else if (flag == "--no-cublas") {
      o.decode.cublas = false;
    } else if (flag == "--no-device-step") {
      o.device_step = false;
    } else if (flag == "--no-decode") {
      o.run_decode = false;
    } else {
      WISP_FAIL(wisp::logic_error, "unknown option '", flag, "'\n", usage);
    }
  }
  WISP_EXPECTS(o.decode.repetitions >= 1, "--repetitions must be >= 1, got ", o.decode.repetitions);
  WISP_EXPECTS(!o.decode.budgets.empty(), "--budgets is empty");
  WISP_EXPECTS(!o.decode.arms.empty(), "--arms is empty");
  for (const double b : o.decode.budgets) {
    WISP_EXPECTS(b > 0 && b <= 1, "--budgets: ", b, " is not in (0, 1]");
  }
  o.decode.window.validate();
  for (const std::string& m : o.models) {
    (void)wb::decode_model_named(m);  // names checked before anything runs
  }
  return o;
}

// Writes `text` to `path` through a temporary file, so a reader never sees half a file.
void write_file(const std::filesystem::path& path, const std::string& text) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    WISP_EXPECTS(out.good(), "cannot write ", tmp.string());
    out << text;
    out.flush();
    WISP_EXPECTS(out.good(), "writing ", tmp.string(), " failed");
  }
  std::filesystem::rename(tmp, path);
}

std::string budget_label(double b) {
  std::ostringstream o;
  o << b;
  return o.str();
}

void log_line(const std::string& s) {
  std::cout << s << std::endl;
}

// Seconds to pin and fill a model's masters, for sharing the time between the configurations:
// about 2.5 GB/s for pinning (zeroing) and copying together, a conservative guess.
double setup_seconds(const wb::decode_model& m) {
  return static_cast<double>(m.model_bytes()) / 2.5e9 + 5.0;
}

}  // namespace

int main(int argc, char** argv) {
  const auto start = clock_type::now();
  options o;
  try {
    o = parse(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
  std::string command = "wisp_cuda_gpu_bench";
  for (int i = 1; i < argc; ++i) {
    command += " ";
    command += argv[i];
  }
  o.decode.command = command;
  if (wisp::cuda::device_count() == 0) {
    std::cerr << "wisp_cuda_gpu_bench: no CUDA device on this machine\n";
    return 2;
  }
  // No deadline: the end of time (GCC's -O3 warns about an optional time point).
  const bool has_deadline = o.deadline_s > 0;
  const clock_type::time_point deadline =
      has_deadline ? start + std::chrono::duration_cast<clock_type::duration>(
                                 std::chrono::duration<double>(o.deadline_s))
                   : clock_type::time_point::max();
  int status = 0;
  try {
    WISP_CUDA_TRY(cudaSetDevice(0));
    cudaDeviceProp prop{};
    WISP_CUDA_TRY(cudaGetDeviceProperties(&prop, 0));
    o.decode.device = prop.name;
    std::filesystem::create_directories(o.out_dir);
    log_line("device: " + o.decode.device + " (nvidia-smi: " + o.decode.smi_name + "), " +
             std::to_string(prop.multiProcessorCount) + " SMs, " +
             std::to_string(prop.totalGlobalMem >> 20) + " MiB; commit " + o.decode.commit);

    // A part that fails is reported and the next one runs, unless the device is broken.
    const auto attempt = [&status](const std::string& part, const auto& run) {
      try {
        run();
      } catch (const std::exception& e) {
        std::cerr << "wisp_cuda_gpu_bench: " << part << " failed: " << e.what() << std::endl;
        status = 1;
        (void)cudaGetLastError();
        WISP_CUDA_TRY(cudaDeviceSynchronize());  // throws (ending the run) if the device is broken
      }
    };

    // 1. The device step.
    std::optional<wb::device_step_report> step;
    attempt("the device step", [&] {
      if (!o.device_step && o.profile.empty()) {
        return;
      }
      step = wb::time_device_step({});
      step->device = o.decode.device;
      step->smi_name = o.decode.smi_name;
      step->command = command;
      step->commit = o.decode.commit;
      write_file(o.out_dir / (o.prefix + "device-step.json"), wb::to_json(*step));
      for (const auto& [name, s] : step->forms) {
        std::printf("device step %-20s %8.3f us per layer (%.3f-%.3f)\n", name.c_str(), s.median,
                    s.min, s.max);
      }
    });

    // 2. The device profile.
    wb::summary device_memory;
    attempt("the device memory measurement",
            [&] { device_memory = wb::measure_device_memory_gbps(); });
    o.decode.device_memory_gbps = device_memory.median;
    // Both ways the arms copy one DeepSeek-V2-Lite expert row over the link: DMA and the
    // wisp-graph arm's copy kernel (reported in every decode file beside each other).
    const std::size_t link_row = wb::decode_model_named("deepseek-v2-lite").expert_bytes();
    std::optional<wb::link_figures> dma;
    attempt("the link measurement", [&] {
      dma = wb::measure_h2d(link_row);
      const wb::link_figures uva = wb::measure_uva_copy_kernel(link_row);
      o.decode.link = {link_row, dma->gbps.median, uva.gbps.median, dma->latency_us.median};
      std::printf(
          "link, one %.2f MiB row from pinned memory: DMA %.2f GB/s (%.2f-%.2f), UVA copy "
          "kernel %.2f GB/s (%.2f-%.2f)\n",
          static_cast<double>(link_row) / (1 << 20), dma->gbps.median, dma->gbps.min, dma->gbps.max,
          uva.gbps.median, uva.gbps.min, uva.gbps.max);
    });
    attempt("the device profile", [&] {
      if (o.profile.empty()) {
        return;
      }
      WISP_EXPECTS(step.has_value(),
                   "the profile's launch_us comes from the device step, which failed");
      wb::profile_measurements m;
      m.device = o.decode.device;
      m.smi_name = o.decode.smi_name;
      m.commit = o.decode.commit;
      m.command = command;
      WISP_EXPECTS(dma.has_value(),
                   "the profile's h2d_gbps comes from the link measurement, "
                   "which failed");
      const wb::decode_model deepseek = wb::decode_model_named("deepseek-v2-lite");
      m.h2d_gbps = dma->gbps.median;
      m.copy_latency_us = dma->latency_us.median;
      m.device_memory_gbps = device_memory.median;
      m.launch_us = step->form("empty_node").median;
      const wb::decode_routing routing = wb::routing_from_trace(
          wisp::make_synthetic_trace(wisp::synthetic_preset("deepseek-v2-lite"), 64,
                                     wb::decode_routing_seed),
          64, "synthetic deepseek-v2-lite");
      m.moe_gbps = wb::measure_moe_gbps(deepseek, routing).median;
      m.moe_source =
          "DeepSeek-V2-Lite's shape (H 2048, I 1408, top-6 of 64, batch 1, synthetic routing)";
      try {
        m.peak_bf16_tflops = wb::measure_bf16_tflops().median;
        m.peak_source = "cuBLAS cublasGemmEx 8192^3, bf16 inputs, fp32 accumulate, median of 10";
      } catch (const std::exception& e) {
        const auto sheet = wb::datasheet_bf16_tflops(o.decode.device);
        WISP_EXPECTS(sheet.has_value(), "no cuBLAS measurement (", e.what(),
                     ") and no datasheet figure for ", o.decode.device);
        m.peak_bf16_tflops = sheet->first;
        m.peak_source = std::string(sheet->second) + " (cuBLAS failed: " + e.what() + ")";
      }
      m.host_threads = static_cast<std::int32_t>(std::max(1u, std::thread::hardware_concurrency()));
      m.host_memory_gbps = wb::measure_host_memcpy_gbps(m.host_threads).median;
      const wisp::device_profile profile = wb::measured_profile(m);
      write_file(o.profile, wisp::to_json(profile) + "\n");
      std::printf(
          "profile: h2d %.2f GB/s, copy latency %.2f us, device memory %.1f GB/s, launch "
          "%.2f us, moe %.1f GB/s, bf16 %.0f TFLOP/s, host %.1f GB/s on %d threads\n",
          m.h2d_gbps, m.copy_latency_us, m.device_memory_gbps, m.launch_us, m.moe_gbps,
          m.peak_bf16_tflops, m.host_memory_gbps, m.host_threads);
    });

    // 3. The decode benchmark, model by model, sharing the time left.
    if (o.run_decode) {
      std::vector<wb::decode_model> models;
      for (const std::string& name : o.models) {
        models.push_back(wb::decode_model_named(name));
      }
      for (std::size_t mi = 0; mi < models.size(); ++mi) {
        const wb::decode_model& model = models[mi];
        double later_setup = 0;
        double weight_left = 0;
        for (std::size_t j = mi; j < models.size(); ++j) {
          later_setup += j > mi ? setup_seconds(models[j]) : 0.0;
          weight_left += static_cast<double>(models[j].model_bytes()) *
                         static_cast<double>(o.decode.budgets.size());
        }
        if (has_deadline &&
            clock_type::now() + std::chrono::duration_cast<clock_type::duration>(
                                    std::chrono::duration<double>(setup_seconds(model))) >=
                deadline) {
          log_line(model.name + ": skipped, out of time");
          status = 1;
          continue;
        }
        attempt("model " + model.name, [&] {
          std::optional<wb::model_bench> bench;
          try {
            bench.emplace(model, o.decode, log_line);
          } catch (const wisp::out_of_memory& e) {
            log_line(model.name + ": does not fit: " + e.what());
            status = 1;
            return;
          }
          for (std::size_t bi = 0; bi < o.decode.budgets.size(); ++bi) {
            const double fraction = o.decode.budgets[bi];
            auto config_deadline = clock_type::time_point::max();
            if (has_deadline) {
              const double left =
                  std::chrono::duration<double>(deadline - clock_type::now()).count() - later_setup;
              const double share = static_cast<double>(model.model_bytes()) / weight_left;
              weight_left -= static_cast<double>(model.model_bytes());
              config_deadline = clock_type::now() +
                                std::chrono::duration_cast<clock_type::duration>(
                                    std::chrono::duration<double>(std::max(0.0, left * share)));
            }
            const std::filesystem::path file = o.out_dir / (o.prefix + "moe-" + model.name + "-" +
                                                            budget_label(fraction) + ".json");
            const wb::config_report r = bench->run_budget(
                fraction, config_deadline,
                [&](const wb::config_report& partial) { write_file(file, wb::to_json(partial)); });
            write_file(file, wb::to_json(r));
            std::cout << wb::to_table(r) << std::flush;
            for (const auto& a : r.arms) {
              if (!a.error.empty() || (a.skipped.empty() && !a.output_ok)) {
                status = 1;
              }
            }
            for (const auto& a : r.cublas_arms) {
              if (!a.error.empty() || (a.skipped.empty() && !a.output_ok)) {
                status = 1;
              }
            }
            for (const auto& k : r.kernels) {
              if (!k.ok) {
                status = 1;
              }
            }
          }
        });
      }
    }
  } catch (const std::exception& e) {
    std::cerr << "wisp_cuda_gpu_bench: " << e.what() << "\n";
    return 2;
  }
  log_line("finished in " +
           std::to_string(std::chrono::duration<double>(clock_type::now() - start).count()) +
           " s, status " + std::to_string(status));
  return status;
}
