#!/usr/bin/env bash
# wisp's main job: builds the optimised `wisp` tool and shows what it does.
# Usage: scripts/run.sh   (installs missing Debian packages when run as root)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh

cmake --preset release >/dev/null
cmake --build --preset release --target wisp_tool >/dev/null
wisp=build/release/bin/wisp

"$wisp" info
