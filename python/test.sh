#!/usr/bin/env bash
# The Python package's CI step: builds the wheel from the repository root (`pip wheel .`),
# installs it into a fresh venv holding the pinned packages of scripts/requirements/python.txt,
# checks that the committed type stubs (python/wisp/_wisp.pyi) match the built extension, and runs
# python/tests against the installed wheel from outside the source tree.
# Usage: python/test.sh [PYTEST_ARGS...]   (WISP_CLI: the `wisp` binary the tests compare with)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=$root/build/python
rm -rf "$out/venv" "$out/dist"
mkdir -p "$out"
venv=$(WISP_VENV="$out/venv" scripts/venv.sh scripts/requirements/python.txt)
py="$venv/bin/python"

"$py" -m pip wheel --quiet --no-deps --wheel-dir "$out/dist" .
"$py" -m pip install --quiet --no-deps "$out"/dist/wisp-*.whl

"$py" -m nanobind.stubgen --quiet --module wisp._wisp --output-file "$out/_wisp.pyi"
if ! diff -u python/wisp/_wisp.pyi "$out/_wisp.pyi"; then
  echo "wisp: python/wisp/_wisp.pyi is stale; after reviewing the diff above run:" >&2
  echo "  cp build/python/_wisp.pyi python/wisp/_wisp.pyi" >&2
  exit 1
fi

cd "$out"  # not the source tree: `import wisp` must find the installed wheel
WISP_INSTALLED_PREFIX="$venv" "$py" -m pytest -p no:cacheprovider "$root/python/tests" "$@"
