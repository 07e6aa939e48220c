#!/usr/bin/env bash
# Builds wisp::cuda's tests and benchmarks with nvcc for this machine's GPU, runs the tests with
# WISP_REQUIRE_GPU=1 (a test that would skip for want of a device fails instead), then the host's
# expert kernel beside the host's read bandwidth (and ggml's MUL_MAT_ID when its source was
# carried), then the GPU benchmark (wisp_cuda_gpu_bench: the device step, the device profile, the
# MoE decode arms on DeepSeek-V2-Lite and gpt-oss-20b, each routed by its real trace, the host
# arms computing experts on this host's cores), a budget sweep of a few arms on DeepSeek-V2-Lite
# at larger budgets (where fewer misses leave the per-layer host sync a larger share) and, if
# time is left, the host benchmark of the step.
# Needs nvcc, CMake >= 3.24, Ninja, GoogleTest and Google Benchmark; no network.
#
# Usage: scripts/gpu_check.sh       results go to $OUT if set, else build/gpu-check/out
# Environment:
#   CUDACXX            nvcc (default /usr/local/cuda/bin/nvcc)
#   CUDA_ARCHS         default: the GPU's compute capability from nvidia-smi (e.g. 90), else native
#   JOBS               build jobs (default: all cores)
#   TRACES_DIR         folder holding raw/esft_deepseek_v2_lite_intent and
#                      raw/gptoss20b_mmlu_pro_decode (default: .traces in the checkout if present,
#                      else ../shared/traces); without a trace its model is routed by the
#                      synthetic router and every file says so; .traces/raw.tar.xz and
#                      .peers/ggml-src.tar.xz are unpacked first when carried that way
#   GPU_CHECK_SECONDS  wall-clock budget of the whole script, build included (default 450); the
#                      benchmark stops starting repetitions so that the script ends within it
#   GPU_CHECK_COMMIT   the commit recorded in the results (default: git rev-parse, else unknown)
#   GPU_CHECK_SWEEP_SECONDS  time kept for the budget sweep (default 90; 0 skips it)
#   GPU_CHECK_SWEEP_BUDGETS  its budgets (default 0.75,0.9)
#   GPU_CHECK_SWEEP_ARMS     its arms (default wisp,wisp-graph,llama.cpp-cache)
#   GPU_CHECK_KERNEL_SECONDS time for the host expert kernel's measurement (default 90; 0 skips it)
#
# What comes back in $OUT (9 files; the device runner returns 8, so logs.tar.gz is left out
# unless a part is skipped): gpu_check.log (everything that matters, as it happens),
# <date>-<device>-device-step.json, -device-profile.json, -moe-<model>-<budget>.json (four;
# rewritten after every repetition, so a run cut short still leaves figures),
# -host-expert-kernel.json (the host's expert kernel beside its read bandwidth, and beside ggml's
# MUL_MAT_ID when .peers/ggml-src was carried) and logs.tar.gz (configure, build and test logs, the gtest XML, the benchmarks'
# full output, and the budget sweep's -moe-deepseek-v2-lite-<budget>.json files under sweep/).
set -uo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
budget=${GPU_CHECK_SECONDS:-450}
sweep_seconds=${GPU_CHECK_SWEEP_SECONDS:-90}
sweep_budgets=${GPU_CHECK_SWEEP_BUDGETS:-0.75,0.9}
sweep_arms=${GPU_CHECK_SWEEP_ARMS:-wisp,wisp-graph,llama.cpp-cache}

build=build/gpu-check
out=${OUT:-$build/out}
work=$build/logs  # everything that goes into logs.tar.gz
mkdir -p "$build" "$out" "$work"
nvcc=${CUDACXX:-/usr/local/cuda/bin/nvcc}
jobs=${JOBS:-$(nproc)}
log() { printf '==== [%4ds] %s\n' "$((SECONDS - started))" "$*" | tee -a "$out/gpu_check.log"; }
left() { echo $((budget - (SECONDS - started))); }
pack() { tar -czf "$out/logs.tar.gz" -C "$work" . 2>/dev/null || true; }
trap pack EXIT

[[ -x $nvcc ]] || { log "gpu_check: nvcc not found at $nvcc (set CUDACXX)"; exit 1; }
cuda_root=$(cd "$(dirname "$nvcc")/.." && pwd)
{
  "$nvcc" --version
  nvidia-smi || echo "nvidia-smi failed"
  nproc
  grep -m1 'model name' /proc/cpuinfo
  free -g
} >"$work/machine.txt" 2>&1
smi_name=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null | head -n 1 || true)
capability=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader -i 0 2>/dev/null | head -n 1 |
  tr -d ' .' || true)
archs=${CUDA_ARCHS:-${capability:-native}}
slug=$(printf '%s' "${smi_name:-unknown-device}" | tr 'A-Z' 'a-z' | sed -E 's/[^a-z0-9]+/-/g; s/^-+|-+$//g')
prefix="$(date -u +%Y-%m-%d)-$slug-"
commit=${GPU_CHECK_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
if [[ $commit != unknown && -z ${GPU_CHECK_COMMIT:-} ]] && [[ -n $(git status --porcelain 2>/dev/null) ]]; then
  commit="$commit (with uncommitted changes)"
fi
# The carried inputs may come compressed (the device runner's 64 MiB carry limit): unpack them.
[[ -f .traces/raw.tar.xz && ! -d .traces/raw ]] && tar -xJf .traces/raw.tar.xz -C .traces
[[ -f .peers/ggml-src.tar.xz && ! -d .peers/ggml-src ]] && tar -xJf .peers/ggml-src.tar.xz -C .peers
if [[ -z ${TRACES_DIR:-} ]]; then
  if [[ -d .traces/raw ]]; then TRACES_DIR=$PWD/.traces; else TRACES_DIR=$PWD/../shared/traces; fi
fi
log "device: ${smi_name:-unknown} (compute capability ${capability:-?}), architectures $archs, commit $commit"
log "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
for trace in esft_deepseek_v2_lite_intent gptoss20b_mmlu_pro_decode; do
  if [[ -e $TRACES_DIR/raw/$trace ]]; then
    log "trace: $TRACES_DIR/raw/$trace"
  else
    log "WARNING: no $trace under $TRACES_DIR: its model is routed by the synthetic router" \
      "(copy ../shared/traces/raw into .traces/raw and carry it)"
  fi
done

# CCCL's CMake package: wherever the toolkit keeps it (lib/cmake, lib64/cmake, targets/...). If
# the toolkit has the headers but no package, a minimal one over the headers stands in.
cccl_config=$(find -L "$cuda_root" -name cccl-config.cmake -path '*/cccl/*' 2>/dev/null | head -n 1 ||
  true)
if [[ -n $cccl_config ]]; then
  cccl_dir=$(dirname "$cccl_config")
else
  thrust_version=$(find -L "$cuda_root/include" -path '*/thrust/version.h' 2>/dev/null | head -n 1 ||
    true)
  [[ -n $thrust_version ]] || { log "gpu_check: no CCCL under $cuda_root"; exit 1; }
  cccl_include=$(dirname "$thrust_version")
  cccl_include=$(dirname "$cccl_include")
  cccl_dir=$PWD/$build/cccl-fallback
  mkdir -p "$cccl_dir"
  cat >"$cccl_dir/cccl-config.cmake" <<EOF
# Written by scripts/gpu_check.sh: the toolkit ships CCCL's headers without its CMake package.
if(NOT TARGET CCCL::CCCL)
  add_library(CCCL::CCCL INTERFACE IMPORTED)
  set_target_properties(CCCL::CCCL PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "$cccl_include")
endif()
set(CCCL_VERSION "headers of $cuda_root")
EOF
fi
log "CCCL package: $cccl_dir"

log "configure (nvcc $nvcc)"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=g++ \
  -DWISP_ENABLE_CUDA=ON -DWISP_CUDA_USE_NVCC=ON -DCCCL_THRUST_DEVICE_SYSTEM=CUDA \
  -DCCCL_DIR="$cccl_dir" -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES="$archs" \
  -DWISP_BUILD_TESTS=ON -DWISP_BUILD_BENCHMARKS=ON -DWISP_BUILD_TOOLS=OFF \
  -DWISP_BUILD_EXAMPLES=OFF -DWISP_INSTALL=OFF -DWISP_TRACES_DIR="$TRACES_DIR" \
  >"$work/configure.log" 2>&1 || { tail -n 40 "$work/configure.log" | tee -a "$out/gpu_check.log"; exit 1; }

log "build wisp_cuda_gpu_bench, wisp_cuda_test, wisp_cuda_bench ($jobs jobs)"
build_start=$SECONDS
gpu_bench=$build/bench/cuda/wisp_cuda_gpu_bench
tests=$build/tests/cuda/wisp_cuda_test
host_bench=$build/bench/cuda/wisp_cuda_bench
rm -f "$gpu_bench" "$tests" "$host_bench"  # never run a binary left by an earlier build
# Keep going past a failed target: the benchmark runs even if a test fails to build.
cmake --build "$build" -j "$jobs" --target wisp_cuda_gpu_bench wisp_cuda_test wisp_cuda_bench \
  wisp_kernel_bench -- -k 0 \
  >"$work/build.log" 2>&1 || { log "BUILD FAILED (see logs.tar.gz: build.log)"; grep -E 'error|FAILED' "$work/build.log" | head -n 40 >>"$out/gpu_check.log"; }
log "built in $((SECONDS - build_start)) s"
[[ -x $gpu_bench ]] || { log "wisp_cuda_gpu_bench did not build: nothing to measure"; exit 1; }

status=0
if [[ -x $tests ]]; then
  log "tests (WISP_REQUIRE_GPU=1)"
  WISP_REQUIRE_GPU=1 WISP_TEST_TRACES_DIR="$TRACES_DIR" timeout 240 "$tests" \
    --gtest_output="xml:$work/wisp_cuda_test.xml" >"$work/wisp_cuda_test.log" 2>&1 || status=1
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]' "$work/wisp_cuda_test.log" |
    tee -a "$out/gpu_check.log" || true
  [[ $status -eq 0 ]] || { log "TESTS FAILED (see logs.tar.gz: wisp_cuda_test.log)"; tail -n 80 "$work/wisp_cuda_test.log" >>"$out/gpu_check.log"; }
else
  log "TESTS NOT BUILT"; status=1
fi

# run_bench LABEL NAME SECONDS ARGS...: the GPU benchmark with ARGS (and the traces, commit and
# device name) under `timeout SECONDS`, its output in $work/NAME.txt and the log; a non-zero exit
# (a part or a check failed: the JSON files' error and output_check fields say which) is logged
# under LABEL and fails the script.
run_bench() {
  local label=$1 name=$2 seconds=$3
  shift 3
  timeout "$seconds" "$gpu_bench" "$@" --traces "$TRACES_DIR" --commit "$commit" \
    --smi-name "${smi_name:-unknown}" 2>&1 | tee "$work/$name.txt" | tee -a "$out/gpu_check.log"
  local rc=${PIPESTATUS[0]}
  if [[ $rc -ne 0 ]]; then
    log "$label FAILED OR A CHECK FAILED (exit $rc; see the JSON files' error and output_check fields)"
    status=1
  fi
}

# The host's expert kernel beside its read bandwidth and ggml's MUL_MAT_ID, on this host's
# cores (issue 45's host-kernel targets): built against ggml when its source was carried
# (bench/peers/ggml/build.sh --pack .peers/ggml-src on a machine with PyPI), else wisp and the
# read only, the pool's idle threads spinning 2 ms between calls as ggml's OpenMP threads spin
# (the host arms' pool does the same). JSON in $out. It runs before the GPU benchmark, with its own time limits
# (GPU_CHECK_KERNEL_SECONDS, default 90, for the measurement), so the GPU's figures get the rest.
kernel_seconds=${GPU_CHECK_KERNEL_SECONDS:-90}
kernel_json="$out/${prefix}host-expert-kernel.json"
if ((kernel_seconds <= 0)); then
  log "host expert kernel skipped (GPU_CHECK_KERNEL_SECONDS=$kernel_seconds)"
elif [[ -d .peers/ggml-src ]] && (($(left) > 150)); then
  log "host expert kernel beside ggml (building the peer from .peers/ggml-src)"
  if timeout 150 bench/peers/ggml/build.sh --src .peers/ggml-src \
    --build "$build/peers-ggml" >"$work/ggml_peer_build.log" 2>&1; then
    timeout "$kernel_seconds" "$build/peers-ggml/wisp_ggml_peer_bench" --threads "$(nproc)" \
      --spin-us 2000 --rounds 5 --shapes deepseek-v2-lite,gpt-oss-20b --rows 1,4,16,64 --json "$kernel_json" \
      2>&1 | tee "$work/host_expert_kernel.txt" | grep -E 'speedup|of stream|target|NOT' \
      >>"$out/gpu_check.log" || status=1
  else
    log "ggml peer did not build (see logs.tar.gz: ggml_peer_build.log)"; status=1
  fi
elif [[ -x $build/bench/wisp_kernel_bench ]] && (($(left) > 40)); then
  log "host expert kernel beside the read bandwidth (no .peers/ggml-src: ggml not measured)"
  timeout "$kernel_seconds" "$build/bench/wisp_kernel_bench" --threads "$(nproc)" --spin-us 2000 --rounds 5 \
    --shapes deepseek-v2-lite,gpt-oss-20b --rows 1,4,16,64 --json "$kernel_json" 2>&1 |
    tee "$work/host_expert_kernel.txt" | grep -E 'of stream|target' >>"$out/gpu_check.log" || status=1
else
  log "host expert kernel skipped (not built, or out of time)"
fi

# The GPU benchmark gets what is left, less a margin for the host benchmark and packing and the
# time kept for the sweep (which gets whatever the benchmark leaves).
deadline=$(($(left) - 40 - sweep_seconds))
if ((deadline < 60)); then deadline=60; fi
log "GPU benchmark (deadline ${deadline} s for starting repetitions)"
# 32 timed tokens per repetition: both models, both budgets and the cuBLAS arms, 5 repetitions,
# fit the budget (an H200 took 140 s for all of it at 16 tokens); the default 64 is for runs of
# one model (docs/cuda.md).
run_bench "GPU BENCHMARK" gpu_bench $((deadline + 45)) --timed 32 --out-dir "$out" \
  --file-prefix "$prefix" --write-profile "$out/${prefix}device-profile.json" --deadline-s "$deadline"

# The budget sweep: DeepSeek-V2-Lite only, a few arms, its own files (one per budget). Skipped
# when too little time is left to pin the masters and run one repetition.
sweep_deadline=$(($(left) - 40))
if ((sweep_seconds > 0)) && ((sweep_deadline >= 45)); then
  log "budget sweep: deepseek-v2-lite at $sweep_budgets, arms $sweep_arms (deadline ${sweep_deadline} s)"
  run_bench "BUDGET SWEEP" gpu_bench_sweep $((sweep_deadline + 30)) --models deepseek-v2-lite \
    --budgets "$sweep_budgets" --arms "$sweep_arms" --timed 32 --no-device-step --no-cublas \
    --out-dir "$work/sweep" --file-prefix "$prefix" --deadline-s "$sweep_deadline"
else
  log "budget sweep skipped (GPU_CHECK_SWEEP_SECONDS=$sweep_seconds, ${sweep_deadline} s left for it)"
fi

if [[ -x $host_bench ]] && (($(left) > 30)); then
  log "host benchmark of the device pager step (same machine, for the record)"
  timeout $(($(left) - 10)) "$host_bench" --benchmark_repetitions=5 \
    --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true \
    --benchmark_out="$work/host_bench.json" --benchmark_out_format=json \
    >"$work/host_bench.txt" 2>&1 || status=1
  grep -E '_median|_cv' "$work/host_bench.txt" >>"$out/gpu_check.log" || true
else
  log "host benchmark skipped (not built, or out of time)"
fi

[[ $status -eq 0 ]] && log "gpu_check: OK" || log "gpu_check: FAILED"
exit "$status"
