#!/usr/bin/env bash
# Runs examples/ep_torch on G local ranks with torchrun (gloo on the CPU, NCCL with GPUs).
# Usage: examples/ep_torch/launch.sh G [ep_torch.py options...]   (docs/ep_torch.md)
# e.g.   examples/ep_torch/launch.sh 2 --trace esft --compare --out ep.json
set -euo pipefail
ranks=${1:?usage: launch.sh G [options]}
shift
exec torchrun --standalone --nproc-per-node "$ranks" "$(dirname "$0")/ep_torch.py" "$@"
