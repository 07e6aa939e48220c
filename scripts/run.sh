#!/usr/bin/env bash
# wisp's main job: the example serving engine. A small MoE transformer (8 layers x 64 experts,
# top-6, bf16 weights) serves 16 chat sessions (after 4 warm-up sessions) on the CPU under a 48 MiB
# device budget that holds half its experts, on a modelled device (compute timed on the CPU, every
# expert copy costed on a 25 GB/s link that overlaps compute). Arms: full residency (infeasible at
# this budget, so also run at the smallest budget where it fits, as an upper bound), layer
# offload, on-demand copies, static pinned hot experts, the wisp pager per eviction policy, the
# pager sized by the offline configurator, with dynamic resizing, with predictor-driven prefetch,
# and paging compressed experts; each 5 times, interleaved. It prints median [min-max] figures,
# each pager arm against the strongest baseline, and checks every arm produced the same bytes.
# Usage: scripts/run.sh [wisp-engine options, e.g. --workload shift --repeat 3 --json]
#        (installs missing Debian packages when run as root)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh

cmake --preset release >/dev/null
cmake --build --preset release --target wisp-engine wisp_tool >/dev/null

build/release/examples/engine/wisp-engine "$@"
