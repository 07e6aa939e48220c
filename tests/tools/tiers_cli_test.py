#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""End-to-end tests of `wisp tiers`: byte arithmetic, hit accounting and Algorithm 3 on the
reported patterns recomputed here, independently.

Usage: tiers_cli_test.py WISP_BINARY
"""
import json
import math
import unittest

import cli_support
from cli_support import ESFT, need_esft, wisp


N = 2048 * 1408  # the default tensor elements
TENSORS = 3
K_CHUNKS = 8
RATIO = 0.33


def tiers_json(*args):
    return json.loads(wisp("tiers", "--json", *args).stdout)


def pool_bytes():
    sm = TENSORS * N
    e = math.ceil(RATIO * sm)
    return {"F": 2 * sm, "C": sm + e, "S": sm, "E": e}


def algorithm_3(h, k, link, threads, decode_gbps=2.28):
    """The makespan estimate of a hit pattern (h_F, h_C, h_S, h_E), written from its formula."""
    u = N / link
    v = RATIO * N / K_CHUNKS / link
    c = 2 * N / K_CHUNKS / (decode_gbps * 1e9)
    m = k - sum(h)
    n_sm = TENSORS * (h[3] + m)
    n_e = TENSORS * K_CHUNKS * (h[2] + m)
    n_d = TENSORS * K_CHUNKS * (k - h[0])
    return max(n_sm * u + n_e * v, (n_e * v + n_d * c) / threads)


class TiersTest(unittest.TestCase):
    def test_synthetic_replay_accounting(self):
        out = tiers_json("synthetic", "--budget-experts", "16", "--link-gbps", "3.5,25",
                         "--threads", "2,8")
        k, experts, layers = out["top_k"], out["experts"], out["layers"]
        self.assertEqual(out["budget_experts"], 16)
        self.assertEqual([(r["link_gbps"], r["threads"]) for r in out["results"]],
                         [(3.5, 2), (3.5, 8), (25, 2), (25, 8)])
        size = pool_bytes()
        covered = 0
        for r in out["results"]:
            with self.subTest(link=r["link_gbps"], threads=r["threads"]):
                pools = r["pools"]
                used = sum(pools[p] * size[p] for p in "FCSE")
                self.assertEqual(r["bytes_used"], used)
                self.assertLessEqual(used, 16 * size["F"])
                self.assertLessEqual(sum(pools.values()), experts)
                calls = r["calls"]
                self.assertEqual(calls, out["steps"] * layers)
                misses = r["misses"]
                hits = r["pool_hits"]
                self.assertEqual(sum(hits) + misses, calls * k)
                sm, e = TENSORS * round(N), TENSORS * round(RATIO * N)
                self.assertAlmostEqual(r["bytes_read_per_call"],
                                       ((hits[3] + misses) * sm + (hits[2] + misses) * e) / calls,
                                       delta=1e-6 * size["F"])
                self.assertEqual(r["plain_capacity"], 16)
                self.assertAlmostEqual(r["plain_bytes_read_per_call"],
                                       (calls * k - r["plain_hits"]) * size["F"] / calls,
                                       delta=1e-6 * size["F"])
                self.assertAlmostEqual(r["speedup"],
                                       r["plain_ms_per_call"] / r["scheduled_ms_per_call"])
                self.assertGreaterEqual(r["pattern_distance"], 0.0)
                self.assertLessEqual(r["pattern_distance"], 1.0)
                # Each reported pattern is a pattern of k, and the model's probabilities are ones.
                seen = 0.0
                for p in r["top_patterns"]:
                    self.assertEqual(len(p["h"]), 4)
                    self.assertLessEqual(sum(p["h"]), k)
                    self.assertGreater(p["observed"], 0.0)
                    self.assertLessEqual(p["model"], 1.0)
                    seen += p["observed"]
                self.assertLessEqual(seen, 1.0 + 1e-9)
                # Algorithm 3 on the replay is the frequency-weighted mean of per-pattern
                # estimates: exact when the top patterns cover every call, and never above the
                # all-miss pattern's.
                estimates = [algorithm_3(p["h"], k, r["link_gbps"] * 1e9, r["threads"])
                             for p in r["top_patterns"]]
                if seen > 1.0 - 1e-9:
                    covered += 1
                    mean = sum(p["observed"] * t for p, t in zip(r["top_patterns"], estimates))
                    self.assertAlmostEqual(r["estimated_ms_per_call"], 1e3 * mean, places=6)
                self.assertLessEqual(r["estimated_ms_per_call"],
                                     1e3 * algorithm_3([0, 0, 0, 0], k, r["link_gbps"] * 1e9,
                                                       r["threads"]) + 1e-9)
        self.assertGreater(covered, 0)
        # A faster link never makes the chosen plan's expectation worse.
        by = {(r["link_gbps"], r["threads"]): r for r in out["results"]}
        for threads in (2, 8):
            self.assertLessEqual(by[(25, threads)]["expected_ms_per_call"],
                                 by[(3.5, threads)]["expected_ms_per_call"])

    def test_only_full_pool_is_the_plain_cache(self):
        out = tiers_json("synthetic", "--budget-experts", "8", "--pools", "F", "--link-gbps",
                         "10", "--threads", "4")
        r = out["results"][0]
        self.assertEqual(r["pools"], {"F": 8, "C": 0, "S": 0, "E": 0})
        self.assertEqual(r["pool_hits"][0], r["plain_hits"])
        self.assertEqual(r["pool_hits"][1:], [0, 0, 0])
        self.assertAlmostEqual(r["bytes_read_per_call"] / r["plain_bytes_read_per_call"],
                               (1 + RATIO) / 2, places=3)

    def test_plan_only_matches_the_replay_plan(self):
        full = tiers_json("synthetic", "--budget-experts", "12", "--link-gbps", "8")
        plan = tiers_json("synthetic", "--budget-experts", "12", "--link-gbps", "8",
                          "--plan-only")
        a, b = full["results"][0], plan["results"][0]
        self.assertEqual(a["pools"], b["pools"])
        self.assertEqual(a["expected_ms_per_call"], b["expected_ms_per_call"])
        self.assertNotIn("scheduled_ms_per_call", b)

    def test_text_output(self):
        out = wisp("tiers", "synthetic", "--budget-experts", "16", "--plan-only").stdout
        self.assertIn("budget 16 full experts per layer", out)
        self.assertRegex(out, r"F\d+ C\d+ S\d+ E\d+")

    def test_esft_trace(self):
        need_esft(self)
        out = tiers_json(ESFT, "--budget-experts", "16", "--link-gbps", "3.5", "--threads", "8")
        self.assertEqual((out["layers"], out["experts"], out["top_k"]), (26, 64, 6))
        r = out["results"][0]
        self.assertEqual(sum(r["pool_hits"]) + r["misses"], r["calls"] * 6)

    def test_bad_input(self):
        cases = [
            (["synthetic", "--pools", "FX"], "'X' is not a pool"),
            (["synthetic", "--pools", ""], "--pools is empty"),
            (["synthetic", "--budget-experts", "65"], "--budget-experts 65 is more than"),
            (["synthetic", "--budget-experts", "0"], "--budget-experts"),
            (["synthetic", "--link-gbps", "0"], "--link-gbps"),
            (["synthetic", "--threads", "-1"], "--threads"),
            (["/nonexistent/t.wtrace"], "/nonexistent/t.wtrace"),
        ]
        for args, message in cases:
            with self.subTest(args=args):
                proc = wisp("tiers", *args, ok=False)
                self.assertNotEqual(proc.returncode, 0)
                self.assertIn(message, proc.stderr)


if __name__ == "__main__":
    cli_support.main()
