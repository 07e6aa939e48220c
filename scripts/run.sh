#!/usr/bin/env bash
# wisp's main job: the example serving engine in the regime wisp is for, a GPU too small for the
# model. A small MoE transformer (8 layers x 64 experts, top-6, 864 KiB bf16 experts) serves 16
# chat sessions (after 4 warm-up sessions) under a 148 MiB device budget that holds a third of
# each layer's experts, on a modelled RTX 4090 (the rtx-4090 device profile: compute charged by
# its roofline, every expert copy over PCIe 4.0 at 25 GB/s + 10 us; one miss's copy is ~5x one
# token's MoE, as for Qwen3-30B-A3B on that card); the outputs are still computed by the CPU and
# checked byte for byte. Arms: full residency (infeasible at this budget, so also run at the
# smallest budget where it fits, as an upper bound), layer offload, on-demand copies, static
# pinned hot experts, llama.cpp's expert cache, hot experts on the GPU with the rest computed by
# the host (cpu-experts), llama.cpp's --n-cpu-moe (the first layers' experts computed by the host:
# cpu-moe-layers), the wisp pager per eviction policy, sized by the offline configurator,
# with dynamic resizing, with predictor-driven prefetch, paging compressed experts, the
# compression-aware pools, and the pager with hybrid misses (copied or computed by the host); each
# 5 times, interleaved. It prints median [min-max] figures, each wisp arm against the strongest
# baseline, and checks every arm produced the same bytes.
# Usage: scripts/run.sh [wisp-engine options, e.g. --workload shift --repeat 3 --json]
#        (installs missing Debian packages when run as root)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh

cmake --preset release >/dev/null
cmake --build --preset release --target wisp-engine wisp_tool >/dev/null

if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  echo "wisp: a GPU is present, but wisp-engine models the device; the GPU's own measurement is" \
    "scripts/gpu_check.sh" >&2
else
  echo "wisp: no GPU here: wisp-engine models the device (its profile's roofline and link)" >&2
fi
build/release/examples/engine/wisp-engine "$@"
