#!/usr/bin/env bash
# Builds wisp::cuda's tests and benchmarks with nvcc for this machine's GPU, runs the tests with
# WISP_REQUIRE_GPU=1 (a test that would skip for want of a device fails instead) and runs the GPU
# benchmark. Needs nvcc, CMake >= 3.24, Ninja, GoogleTest and Google Benchmark; no network.
#
# Usage: scripts/gpu_check.sh            logs and results go to $OUT if set, else build/gpu-check/out
# Environment: CUDACXX (nvcc, default /usr/local/cuda/bin/nvcc), CUDA_ARCHS (default native),
#              JOBS (default: all cores).
set -euo pipefail
cd "$(dirname "$0")/.."

build=build/gpu-check
out=${OUT:-$build/out}
mkdir -p "$build" "$out"
nvcc=${CUDACXX:-/usr/local/cuda/bin/nvcc}
archs=${CUDA_ARCHS:-native}
jobs=${JOBS:-$(nproc)}
log() { printf '==== %s\n' "$*" | tee -a "$out/gpu_check.log"; }

[[ -x $nvcc ]] || { echo "gpu_check: nvcc not found at $nvcc (set CUDACXX)" >&2; exit 1; }
cuda_root=$(cd "$(dirname "$nvcc")/.." && pwd)
{
  "$nvcc" --version
  nvidia-smi || echo "nvidia-smi failed"
} >"$out/machine.txt" 2>&1

# CCCL's CMake package: wherever the toolkit keeps it (lib/cmake, lib64/cmake, targets/...). If
# the toolkit has the headers but no package, a minimal one over the headers stands in.
cccl_config=$(find -L "$cuda_root" -name cccl-config.cmake -path '*/cccl/*' 2>/dev/null | head -n 1 ||
  true)
if [[ -n $cccl_config ]]; then
  cccl_dir=$(dirname "$cccl_config")
else
  thrust_version=$(find -L "$cuda_root/include" -path '*/thrust/version.h' 2>/dev/null | head -n 1 ||
    true)
  [[ -n $thrust_version ]] || { echo "gpu_check: no CCCL under $cuda_root" >&2; exit 1; }
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

log "configure (nvcc $nvcc, architectures $archs)"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=g++ \
  -DWISP_ENABLE_CUDA=ON -DWISP_CUDA_USE_NVCC=ON -DCCCL_THRUST_DEVICE_SYSTEM=CUDA \
  -DCCCL_DIR="$cccl_dir" -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES="$archs" \
  -DWISP_BUILD_TESTS=ON -DWISP_BUILD_BENCHMARKS=ON -DWISP_BUILD_TOOLS=OFF \
  -DWISP_BUILD_EXAMPLES=OFF -DWISP_INSTALL=OFF >"$out/configure.log" 2>&1 ||
  { tail -n 40 "$out/configure.log"; exit 1; }

log "build wisp_cuda_test, wisp_cuda_gpu_bench, wisp_cuda_bench"
start=$SECONDS
cmake --build "$build" -j "$jobs" --target wisp_cuda_test wisp_cuda_gpu_bench wisp_cuda_bench \
  >"$out/build.log" 2>&1 || { tail -n 60 "$out/build.log"; exit 1; }
log "built in $((SECONDS - start)) s"

status=0
log "tests (WISP_REQUIRE_GPU=1)"
WISP_REQUIRE_GPU=1 "$build/tests/cuda/wisp_cuda_test" --gtest_output="xml:$out/wisp_cuda_test.xml" \
  >"$out/wisp_cuda_test.log" 2>&1 || status=1
grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/wisp_cuda_test.log" | tee -a "$out/gpu_check.log" || true
[[ $status -eq 0 ]] || { log "TESTS FAILED (see wisp_cuda_test.log)"; tail -n 80 "$out/wisp_cuda_test.log"; }

log "GPU benchmark"
bench_args=(--benchmark_repetitions=5 --benchmark_enable_random_interleaving=true
  --benchmark_report_aggregates_only=true)
if "$build/bench/cuda/wisp_cuda_gpu_bench" "${bench_args[@]}" \
  --benchmark_out="$out/gpu_bench.json" --benchmark_out_format=json >"$out/gpu_bench.txt" 2>&1; then
  cat "$out/gpu_bench.txt" | tee -a "$out/gpu_check.log"
  if grep -q '"error_occurred": true' "$out/gpu_bench.json"; then
    log "GPU BENCHMARK REPORTED AN ERROR"
    status=1
  fi
else
  log "GPU BENCHMARK FAILED"; tail -n 40 "$out/gpu_bench.txt"; status=1
fi

log "host benchmark of the device pager step (same machine, for the record)"
"$build/bench/cuda/wisp_cuda_bench" "${bench_args[@]}" --benchmark_out="$out/host_bench.json" \
  --benchmark_out_format=json >"$out/host_bench.txt" 2>&1 || status=1
tee -a "$out/gpu_check.log" <"$out/host_bench.txt"

[[ $status -eq 0 ]] && log "gpu_check: OK" || log "gpu_check: FAILED"
exit "$status"
