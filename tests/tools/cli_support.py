# SPDX-License-Identifier: Apache-2.0
"""What the CLI tests share: running the wisp binary (given as the first argument) and finding the
real ESFT trace.

Usage in a test file: `from cli_support import ESFT, need_esft, wisp` and, at the end,
`if __name__ == "__main__": cli_support.main()`.
"""
import os
import subprocess
import sys
import unittest

WISP = None  # the binary under test, set by main()
ESFT = os.path.join(os.environ.get("WISP_TEST_TRACES_DIR", os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "traces")),
    "raw", "esft_deepseek_v2_lite_intent")


def need_esft(test):
    """Skips `test` without the ESFT trace, or fails it when WISP_REQUIRE_TRACES is set (CI)."""
    if os.path.isdir(ESFT):
        return
    if os.environ.get("WISP_REQUIRE_TRACES", "0") not in ("", "0"):
        test.fail(f"ESFT trace not found at {ESFT} (WISP_REQUIRE_TRACES is set)")
    test.skipTest(f"ESFT trace not found at {ESFT}")


def wisp(*args, ok=True, env=None):
    """Runs `wisp ARGS`; with ok=True a non-zero exit fails the test with its stderr."""
    proc = subprocess.run([WISP, *args], capture_output=True, text=True, timeout=300, env=env)
    if ok and proc.returncode != 0:
        raise AssertionError(f"wisp {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
    return proc


def main():
    """Takes the binary from the command line, then runs the calling module's tests."""
    global WISP
    WISP = sys.argv.pop(1)
    unittest.main(module="__main__", verbosity=2)
