#!/usr/bin/env bash
# wisp's main job: builds the optimised `wisp` tool and sizes a per-layer expert cache for the
# built-in synthetic routing trace (calibrated to a real DeepSeek-V2-Lite trace): the exact LRU
# miss curve from reuse distances, then the eviction policies replayed against Belady's bound.
# Usage: scripts/run.sh   (installs missing Debian packages when run as root)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh

cmake --preset release >/dev/null
cmake --build --preset release --target wisp_tool >/dev/null
wisp=build/release/bin/wisp

"$wisp" info
echo
"$wisp" reuse synthetic --scope layer
echo
"$wisp" sim synthetic --scope layer --capacity 8,16,32 --policy lru,least-stale,lfru,belady
