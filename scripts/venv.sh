#!/usr/bin/env bash
# Creates wisp's Python virtual environment and installs into it the PyPI packages that the Python
# tests, benchmarks and measurements use: every scripts/requirements/*.txt, or only the files given.
# Idempotent: an existing venv is reused, and pip's own cache (~/.cache/pip unless PIP_CACHE_DIR says
# otherwise) keeps re-runs, from any checkout, offline.
# Prints the venv's path on stdout (progress goes to stderr).
# A file may carry extra pip options on a line `# pip-options: ...` (e.g. --no-deps, which pip does
# not accept inside a requirements file).
# Usage: scripts/venv.sh [REQUIREMENTS_FILE...]    (venv: $WISP_VENV, default build/venv)
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${WISP_VENV:-$PWD/build/venv}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 \
  PIP_NO_INPUT=1 PYTHONNOUSERSITE=1

if [[ ! -x "$venv/bin/python" ]]; then
  echo "wisp: creating the Python venv $venv" >&2
  /usr/bin/python3 -m venv "$venv" >&2
fi

files=("$@")
if ((${#files[@]} == 0)); then
  shopt -s nullglob
  files=(scripts/requirements/*.txt)
fi
for f in "${files[@]}"; do
  read -r -a options <<<"$(sed -n 's/^# pip-options: //p' "$f")"
  "$venv/bin/python" -m pip install -q "${options[@]}" -r "$f" >&2
done
echo "$venv"
