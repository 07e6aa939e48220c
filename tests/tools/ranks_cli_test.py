#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""End-to-end tests of `wisp sim --ranks G`: a tiny replay computed by hand, the JSON's shape and
accounting on ESFT (per-rank arrays, the same total slots in every arm, wisp's arm against the
baselines), and bad options refused naming the values.

Usage: ranks_cli_test.py WISP_BINARY
"""
import json
import os
import tempfile
import unittest

import cli_support
from cli_support import ESFT, need_esft, wisp

MODEL = ["--expert-bytes", "17301504", "--bandwidth-gbps", "50", "--miss-latency-us", "10",
         "--hidden", "2048"]


def tiny_trace(folder):
    """One layer, 4 experts, top-1: one request routing to experts 0, 1, 0."""
    jsonl = os.path.join(folder, "tiny.jsonl")
    with open(jsonl, "w") as f:
        for t, e in enumerate([0, 1, 0]):
            f.write(json.dumps({"request": 0, "token_idx": t, "layer": 0, "experts": [e],
                                "weights": [1.0]}) + "\n")
    out = os.path.join(folder, "tiny.wtrace")
    wisp("trace", "import", "--format", "jsonl", "--group-key", "request", "--experts", "4",
         jsonl, "-o", out)
    return out


class RanksTest(unittest.TestCase):
    def test_tiny_replay_computed_by_hand(self):
        # 2 ranks, linear placement: rank 0 holds experts 0 and 1. A copy of 1000 B at 0.001 GB/s
        # takes 1 ms; an active expert reads its 1000 B at 0.01 GB/s (0.1 ms); a token costs
        # 2 x 5000 FLOPs at 0.001 TFLOPS (0.01 ms); the all-to-all moves 100 x 2 B at 0.001 GB/s
        # (0.2 ms) each way after 0.05 ms. Rank 0 takes 1.61 ms per miss, 0.61 per hit; with one
        # slot per rank all three tokens miss, with two on rank 0 the third hits.
        with tempfile.TemporaryDirectory() as folder:
            trace = tiny_trace(folder)
            common = ["--ranks", "2", "--batch", "1", "--expert-bytes", "1000",
                      "--bandwidth-gbps", "0.001", "--hbm-gbps", "0.01", "--tflops", "0.001",
                      "--expert-params", "5000", "--hidden", "100", "--a2a-gbps", "0.001",
                      "--a2a-latency-us", "50", "--policy", "lru", "--json"]
            for capacity, seconds in (("2", 1.61e-3), ("3", (1.61e-3 * 2 + 0.61e-3) / 3)):
                out = json.loads(wisp("sim", trace, "--capacity", capacity, *common).stdout)
                arm = out["arms"][0]
                self.assertEqual(arm["name"], "ep-lru")
                self.assertEqual(arm["steps"], 3)
                self.assertAlmostEqual(arm["slowest_rank_step_s"], seconds, delta=1e-12)
                self.assertEqual(arm["misses"][1], 0)
                self.assertEqual(arm["token_load"], [3, 0])
                self.assertEqual(arm["link_bytes"][0], 1000 * arm["misses"][0])
                self.assertAlmostEqual(out["model"]["copy_us"], 1000.0)

    def test_esft_arms_report_per_rank_figures(self):
        need_esft(self)
        out = json.loads(wisp("sim", ESFT, "--ranks", "8", "--capacity", "555", *MODEL,
                              "--json").stdout)
        self.assertEqual(out["ranks"], 8)
        arms = {a["name"]: a for a in out["arms"]}
        self.assertEqual(list(arms), ["ep-lru", "eplb-lru", "wisp", "ep-decayed_frequency"])
        for name, a in arms.items():
            with self.subTest(arm=name):
                for key in ("misses", "link_bytes", "token_load", "slots", "busy_s"):
                    self.assertEqual(len(a[key]), 8)
                self.assertEqual(sum(a["slots"]), 555)
                self.assertEqual(sum(a["token_load"]), out["accesses"])
                self.assertEqual(a["link_bytes"], [17301504 * m for m in a["misses"]])
                mean = sum(a["token_load"]) / 8
                self.assertAlmostEqual(a["load_imbalance"], max(a["token_load"]) / mean)
                # Each layer waits for its slowest rank: the step is at least any rank's own sum.
                self.assertGreaterEqual(a["slowest_rank_step_s"] * a["steps"],
                                        max(a["busy_s"]) * (1 - 1e-12))
        wisp_arm = arms["wisp"]
        self.assertLessEqual(wisp_arm["slowest_rank_step_s"],
                             0.75 * arms["ep-lru"]["slowest_rank_step_s"])
        self.assertLessEqual(wisp_arm["slowest_rank_step_s"],
                             0.85 * arms["eplb-lru"]["slowest_rank_step_s"])
        self.assertLessEqual(wisp_arm["load_imbalance"], 1.15)
        self.assertAlmostEqual(wisp_arm["x_ep_lru"], wisp_arm["slowest_rank_step_s"]
                               / arms["ep-lru"]["slowest_rank_step_s"])

    def test_bad_options_are_refused_naming_the_values(self):
        def refused(*args):
            proc = wisp("sim", "synthetic", *args, ok=False)
            self.assertNotEqual(proc.returncode, 0)
            return proc.stderr
        self.assertIn("--capacity 40 is out of range for --ranks 8", refused(
            "--ranks", "8", "--capacity", "40", *MODEL))
        self.assertIn("give --expert-bytes > 0 and --bandwidth-gbps > 0", refused(
            "--ranks", "8", "--capacity", "555"))
        self.assertIn("--policy 'belady' cannot run on the ranks", refused(
            "--ranks", "8", "--capacity", "555", "--policy", "belady", *MODEL))
        self.assertIn("one --policy", refused(
            "--ranks", "8", "--capacity", "555", "--policy", "lru,fifo", *MODEL))
        self.assertIn("--scope layer is not available", refused(
            "--ranks", "8", "--capacity", "555", "--scope", "layer", *MODEL))
        self.assertIn("--ranks and --timeline", refused(
            "--ranks", "8", "--capacity", "555", "--timeline", *MODEL))
        self.assertIn("cannot hold the 64 experts", refused(
            "--ranks", "4", "--capacity", "555", "--local-experts", "8", *MODEL))


if __name__ == "__main__":
    cli_support.main()
