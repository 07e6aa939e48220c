#!/usr/bin/env bash
# wisp's main job: the example serving engine. A small MoE transformer (8 layers x 64 experts,
# top-6, bf16 weights) serves 16 chat sessions on the CPU under a 48 MiB device budget that holds
# half its experts, once per arm: full residency (infeasible at this budget), static offload,
# the wisp pager, the pager sized by the offline configurator, and the pager with dynamic
# resizing. It prints a comparison table and checks every arm produced the same bytes.
# Usage: scripts/run.sh [wisp-engine options, e.g. --workload shift --policy least_stale --json]
#        (installs missing Debian packages when run as root)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh

cmake --preset release >/dev/null
cmake --build --preset release --target wisp-engine wisp_tool >/dev/null

build/release/examples/engine/wisp-engine "$@"
