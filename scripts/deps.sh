#!/usr/bin/env bash
# Installs the Debian packages wisp's build, tests, benchmarks and tools need.
# Called by scripts/run.sh and scripts/test.sh; safe to run on its own.
# As root it installs what is missing; otherwise it prints the exact command and fails.
set -euo pipefail

wisp_packages=(
  cmake ninja-build g++ clang git python3 python3-venv python3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev
  pkgconf libzstd-dev liblz4-dev
  ccache
)

missing=()
for pkg in "${wisp_packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if ((${#missing[@]} > 0)); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "wisp: missing Debian packages. Run as root:" >&2
    echo "  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
  fi
  echo "wisp: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
