# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures. The suite runs against the *installed* package (scripts/test.sh installs the
wheel into a fresh venv and runs pytest from outside the source tree); set WISP_CLI to the `wisp`
binary to compare with the command line. The real ESFT trace is read from ../shared/traces (or
$WISP_TEST_TRACES_DIR): tests that need it skip when it is absent, unless WISP_REQUIRE_TRACES is set
(to anything but "" or "0"), and then they fail, as the C++ tests do (tests/support/traces.hpp)."""
import collections
import os
import pathlib
import subprocess

import numpy as np
import pytest

import wisp

REPO = pathlib.Path(__file__).resolve().parents[2]
TRACES = pathlib.Path(os.environ.get("WISP_TEST_TRACES_DIR") or REPO.parent / "shared" / "traces")
ESFT = TRACES / "raw" / "esft_deepseek_v2_lite_intent"


def traces_required():
    return os.environ.get("WISP_REQUIRE_TRACES", "") not in ("", "0")


def need_trace(path):
    """``path`` if it exists; otherwise skips the test, or fails it when traces are required."""
    if not path.exists():
        message = f"trace not found at {path}"
        if traces_required():
            pytest.fail(f"{message} (WISP_REQUIRE_TRACES is set)")
        pytest.skip(message)
    return path


@pytest.fixture(scope="session")
def esft_dir():
    return need_trace(ESFT)


@pytest.fixture(scope="session")
def esft(esft_dir):
    return wisp.Trace.import_esft(esft_dir)


@pytest.fixture(scope="session")
def small_trace():
    """A synthetic trace small enough for pure-Python oracles."""
    return wisp.Trace.synthetic(steps=300, seed=7, layers=4, experts=16, top_k=3, working_set=4)


@pytest.fixture(scope="session")
def cli():
    path = os.environ.get("WISP_CLI")
    if not path:
        pytest.skip("WISP_CLI is not set (path of the `wisp` command)")
    def run(*args):
        proc = subprocess.run([path, *map(str, args)], capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout
    return run


def lru_calls(calls, capacity):
    """Oracle: per-call protected LRU over an OrderedDict. `calls` is a list of id lists; the
    distinct ids of a call are accessed in first-seen order and none of them can be evicted by
    another miss of the same call. Returns (hits, misses)."""
    cache = collections.OrderedDict()
    hits = misses = 0
    for ids in calls:
        needed = list(dict.fromkeys(ids))
        protected = set(needed)
        for key in needed:
            if key in cache:
                cache.move_to_end(key)
                hits += 1
                continue
            misses += 1
            if len(cache) == capacity:
                victim = next(k for k in cache if k not in protected)
                del cache[victim]
            cache[key] = True
    return hits, misses


def trace_calls(trace, scope):
    """The (step, layer) calls of a trace in canonical order: per-layer keys are experts; global
    keys are layer * experts + expert. Returns {cache: [ids of each call]}."""
    ids = trace.ids()
    out = collections.defaultdict(list)
    for step in range(ids.shape[0]):
        for layer in range(ids.shape[1]):
            row = ids[step, layer].tolist()
            if scope == "global":
                out[0].append([layer * trace.experts + e for e in row])
            else:
                out[layer].append(row)
    return out
