#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds bench/kernel/host_expert_bench.cpp against ggml's CPU backend (WISP_BENCH_WITH_GGML) as a
# benchmark-only peer: ggml comes from llama.cpp's public source as vendored by the pinned
# llama-cpp-python sdist on PyPI (the only index CI and the device machine reach; no git clone).
# Nothing of it is copied into the repository or linked into wisp's own targets.
#
#   bench/peers/ggml/build.sh [--src PATH] [--build DIR] [--jobs N] [--pack DIR]
#
#   --src PATH   offline: the pinned sdist (.tar.gz, its sha256 is checked), an extracted sdist
#                (holding vendor/llama.cpp) or a llama.cpp source root (holding ggml/)
#   --build DIR  build folder (default build/peers/ggml); the sdist is downloaded to DIR/download
#                and extracted to DIR/src, both reused by later runs
#   --jobs N     parallel compile jobs (default: all cores)
#   --pack DIR   only copy ggml/ and a VERSION file into DIR (about 25 MB, for a machine without
#                PyPI: the sdist itself, 77 MB, is over the device runner's 64 MiB carry limit),
#                then exit; there, build.sh --src DIR
#
# Then: DIR/wisp_ggml_peer_bench [--threads N] [--rounds N] [--json FILE] (see the bench's header).
# ggml is built as llama.cpp's default Linux CPU build (see CMakeLists.txt here): GGML_NATIVE,
# OpenMP, llamafile sgemm, no BLAS, static libraries.
set -euo pipefail

version=0.3.36  # llama-cpp-python; vendors ggml-org/llama.cpp@0c1e57098 (its CHANGELOG)
sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
sdist_name=llama_cpp_python-${version}.tar.gz

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
src=""
build="$root/build/peers/ggml"
jobs=$(nproc)
pack=""
while (($#)); do
  case "$1" in
    --src) src=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --pack) pack=$2; shift 2 ;;
    -h | --help) sed -n '3,21p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$build"
build=$(cd "$build" && pwd)

check_sha() {  # check_sha FILE: the pinned sdist, or exit naming both hashes
  local got
  got=$(sha256sum "$1" | cut -d' ' -f1)
  if [[ $got != "$sha256" ]]; then
    echo "build.sh: $1 has sha256 $got, expected $sha256 (llama-cpp-python $version)" >&2
    exit 1
  fi
}

extract() {  # extract SDIST: into $build/src, once
  check_sha "$1"
  if [[ ! -d "$build/src/llama_cpp_python-$version/vendor/llama.cpp/ggml" ]]; then
    rm -rf "$build/src" && mkdir -p "$build/src"
    tar -xzf "$1" -C "$build/src"
  fi
  llama="$build/src/llama_cpp_python-$version/vendor/llama.cpp"
}

llama=""
if [[ -n $src ]]; then
  if [[ -f $src ]]; then
    extract "$(cd "$(dirname "$src")" && pwd)/$(basename "$src")"
  elif [[ -f $src/vendor/llama.cpp/ggml/CMakeLists.txt ]]; then
    llama=$(cd "$src/vendor/llama.cpp" && pwd)
  elif [[ -f $src/ggml/CMakeLists.txt ]]; then
    llama=$(cd "$src" && pwd)
  else
    echo "build.sh: --src $src is neither the sdist nor a folder holding ggml/ or vendor/llama.cpp/ggml/" >&2
    exit 2
  fi
else
  if [[ ! -f "$build/download/$sdist_name" ]]; then
    mkdir -p "$build/download"
    # --no-binary: the source distribution (vendor/llama.cpp is only in it); --no-deps: nothing else.
    python3 -m pip download --quiet --no-deps --no-binary :all: -d "$build/download" \
      "llama-cpp-python==$version"
  fi
  extract "$build/download/$sdist_name"
fi

# What the source is, for the bench's output: the sdist's version and the llama.cpp commit its
# CHANGELOG names for that version (when the source is one).
what="llama.cpp at $llama"
changelog="$llama/../../CHANGELOG.md"
if [[ -f $llama/VERSION ]]; then  # a --pack copy
  what=$(cat "$llama/VERSION")
elif [[ -f $changelog ]]; then
  v=$(sed -n 's/^## \[\([0-9.]*\)\]$/\1/p' "$changelog" | head -1)
  commit=$(awk -v v="## [$v]" '$0 == v {f = 1; next} f && /llama.cpp@/ {sub(/.*llama.cpp@/, ""); print; exit}' "$changelog")
  what="llama-cpp-python $v (ggml-org/llama.cpp@$commit)"
fi
echo "build.sh: ggml from $what"
if [[ -n $pack ]]; then
  rm -rf "$pack" && mkdir -p "$pack"
  cp -r "$llama/ggml" "$pack/ggml"
  echo "$what" >"$pack/VERSION"
  echo "build.sh: packed ggml into $pack ($(du -sh "$pack" | cut -f1)); build there with --src $pack"
  exit 0
fi

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
start=$(date +%s)
cmake -S "$here" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DWISP_GGML_SOURCE_DIR="$llama" -DWISP_GGML_PEER_VERSION="$what" >"$build/configure.log"
cmake --build "$build" --parallel "$jobs" --target ggml ggml-cpu ggml-base >"$build/ggml-build.log"
mid=$(date +%s)
cmake --build "$build" --parallel "$jobs" --target wisp_ggml_peer_bench
end=$(date +%s)
echo "build.sh: ggml configured and built in $((mid - start)) s, the bench in $((end - mid)) s"
echo "build.sh: $build/wisp_ggml_peer_bench"
