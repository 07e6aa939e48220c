#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""End-to-end tests of `wisp predict` and `wisp sim --timeline`, checked against independent
Python computations on a small trace written here.

Usage: predict_cli_test.py WISP_BINARY
"""
import json
import os
import tempfile
import unittest

import cli_support
from cli_support import wisp


def top_k(scores, k):
    """Indices of the k best scores; equal scores go to the smaller index."""
    return sorted(range(len(scores)), key=lambda j: (-scores[j], j))[:k]


class PredictCliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        # Layer l routes layer 0's experts shifted by l: co-activation determines it.
        cls.layers, cls.experts, cls.k, cls.tokens = 3, 8, 2, 40
        cls.steps = []
        rows = []
        for t in range(cls.tokens):
            a = (t * 3) % cls.experts
            b = (t * 5 + 1) % cls.experts
            if a == b:
                b = (b + 1) % cls.experts
            step = [[(a + l) % cls.experts, (b + l) % cls.experts] for l in range(cls.layers)]
            cls.steps.append(step)
            for layer, ids in enumerate(step):
                rows.append({"layer": layer, "experts": ids, "token_idx": t})
        jsonl = os.path.join(cls.tmp.name, "shift.jsonl")
        with open(jsonl, "w") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
        cls.wtrace = os.path.join(cls.tmp.name, "shift.wtrace")
        wisp("trace", "import", "--format", "jsonl", "--experts", str(cls.experts), jsonl,
             "-o", cls.wtrace)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def baseline(self, name, distance, k):
        """Online precision/recall of the frequency or previous-token predictor."""
        counts = [[0] * self.experts for _ in range(self.layers)]
        hits = predictions = 0
        for s, step in enumerate(self.steps):
            for target in range(distance, self.layers):
                if name == "frequency":
                    scores = [c / s if s else 0.0 for c in counts[target]]
                else:
                    previous = self.steps[s - 1][target] if s else []
                    scores = [1.0 if j in previous else 0.0 for j in range(self.experts)]
                hits += len(set(top_k(scores, k)) & set(step[target]))
                predictions += 1
            for layer, ids in enumerate(step):
                for e in ids:
                    counts[layer][e] += 1
        return hits / (k * predictions), hits / (self.k * predictions)

    def test_json_shape_and_baselines_match_an_independent_computation(self):
        out = json.loads(wisp("predict", self.wtrace, "--json", "--distance", "1,2", "--k",
                              "2,3").stdout)
        results = out["results"]
        self.assertEqual(len(results), 3 * 2 * 2)
        for r in results:
            self.assertEqual(set(r), {"predictor", "distance", "k", "precision", "recall"})
        by = {(r["predictor"], r["distance"], r["k"]): r for r in results}
        for name in ("frequency", "previous-token"):
            for d in (1, 2):
                for k in (2, 3):
                    precision, recall = self.baseline(name, d, k)
                    self.assertAlmostEqual(by[(name, d, k)]["precision"], precision, places=9)
                    self.assertAlmostEqual(by[(name, d, k)]["recall"], recall, places=9)
        # The shifted routing is determined by layer 0: co-activation finds it, the others cannot.
        for d in (1, 2):
            coactivation = by[("coactivation", d, 2)]["precision"]
            self.assertGreaterEqual(coactivation, 0.9)
            self.assertGreater(coactivation, by[("frequency", d, 2)]["precision"])

    def test_right_size_caps_are_valid_and_saved_tables_load_back(self):
        table = os.path.join(self.tmp.name, "table.coact")
        out = json.loads(wisp("predict", self.wtrace, "--json", "--predictor", "coactivation",
                              "--right-size", "0.2", "--users", "1", "--save", table).stdout)
        users = out["right_size"]
        self.assertEqual(len(users), 1)
        self.assertEqual(users[0]["learn_steps"] + users[0]["check_steps"], self.tokens)
        for u in users:
            self.assertEqual(len(u["layer_caps"]), self.layers)
            self.assertTrue(all(self.k <= c <= self.experts for c in u["layer_caps"]))
            self.assertEqual(u["slots"], sum(u["layer_caps"]))
            self.assertEqual(u["max_cap"], max(u["layer_caps"]))
            self.assertTrue(all(0.0 <= m <= 0.2 + 1e-9 or c == self.experts
                                for m, c in zip(u["predicted_miss_ratio"], u["layer_caps"])))
        with open(table, "rb") as f:
            self.assertEqual(f.read(8), b"WISPCOA1")

    def test_timeline_without_overlap_is_the_serial_model(self):
        common = ["--scope", "layer", "--capacity", "2,3", "--policy", "lru,least_stale",
                  "--expert-bytes", "1000", "--bandwidth-gbps", "1e-6", "--miss-latency-us",
                  "1e6", "--json"]
        serial = json.loads(wisp("sim", self.wtrace, *common).stdout)["results"]
        timeline = json.loads(wisp("sim", self.wtrace, "--timeline", *common).stdout)["results"]
        by = {(r["policy"], r["capacity"]): r for r in serial}
        self.assertEqual(len(timeline), len(serial))
        for r in timeline:
            s = by[(r["policy"], r["capacity"])]
            self.assertEqual(r["misses"], s["misses"])
            self.assertAlmostEqual(r["stall_s"], s["stall_s"], places=6)
            self.assertAlmostEqual(r["stall_s"], 2.0 * r["misses"], places=6)  # 1 s + 1000 B / 1000 B/s
            self.assertAlmostEqual(r["tpot_ms"], 1e3 * r["total_s"] / self.tokens, places=6)

    def test_timeline_prefetch_rows_and_accounting(self):
        out = json.loads(wisp("sim", self.wtrace, "--timeline", "--scope", "layer", "--capacity",
                              "3", "--policy", "least_stale,belady", "--expert-bytes", "1000",
                              "--bandwidth-gbps", "1e-6", "--compute-us", "0,5e6",
                              "--prefetch", "none,top-k,percentile", "--overfetch", "1,2",
                              "--json").stdout)["results"]
        # belady runs demand-only: 2 compute values x (4 settings for least_stale + 1 for belady)
        self.assertEqual(len(out), 2 * (4 + 1))
        for r in out:
            self.assertLessEqual(r["prefetches_useful"], r["prefetches"])
            self.assertEqual(r["wasted_prefetch_bytes"],
                             1000 * (r["prefetches"] - r["prefetches_useful"]))
            self.assertEqual(r["demand_copies"], r["misses"])
            if r["prefetch"] == "none":
                self.assertEqual(r["prefetches"], 0)
            if r["compute_us"] == 0:  # the link is never idle before a layer: all cancelled
                self.assertEqual(r["prefetches"], 0)
        # With a whole copy of compute per layer the shifted routing is prefetched in time.
        slow = [r for r in out if r["compute_us"] > 0 and r["prefetch"] == "top-k x1"]
        self.assertGreater(slow[0]["prefetch_precision"], 0.5)

    def test_timeline_hybrid_splits_misses_between_the_link_and_the_host(self):
        common = ["--timeline", "--scope", "layer", "--capacity", "3", "--policy", "lru",
                  "--expert-bytes", "1000", "--bandwidth-gbps", "1e-6", "--compute-us", "1e5",
                  "--json"]
        fetch = json.loads(wisp("sim", self.wtrace, *common).stdout)["results"][0]
        # A host far slower than the link computes nothing: the run is fetch's.
        slow = json.loads(wisp("sim", self.wtrace, *common, "--miss-policy", "hybrid",
                               "--host-gbps", "1e-9").stdout)["results"][0]
        self.assertEqual(slow["miss_policy"], "hybrid")
        self.assertEqual(slow["host_experts"], 0)
        for key in ("hits", "misses", "stall_s", "total_s"):
            self.assertAlmostEqual(slow[key], fetch[key], places=9, msg=key)
        # A host far faster than the link (1 s per copy) takes misses; every routed expert of a
        # call is then a hit, a copy or a host expert, and the host's time is charged.
        fast = json.loads(wisp("sim", self.wtrace, *common, "--miss-policy", "hybrid",
                               "--host-gbps", "1").stdout)["results"][0]
        self.assertGreater(fast["host_experts"], 0)
        self.assertGreater(fast["host_busy_s"], 0)
        self.assertEqual(fast["hits"] + fast["misses"] + fast["host_experts"], fetch["accesses"])
        self.assertEqual(fast["demand_copies"], fast["misses"])
        self.assertLess(fast["total_s"], fetch["total_s"])

    def test_bad_input_exits_nonzero_with_a_message(self):
        for args, message in (
                (("predict", self.wtrace, "--predictor", "oracle"), "unknown predictor 'oracle'"),
                (("predict", self.wtrace, "--distance", "3"), "distance 3"),
                (("predict", self.wtrace, "--right-size", "2"), "--right-size"),
                (("predict", self.wtrace, "--right-size", "0.1", "--users", "2"),
                 "--users 2 exceeds the trace's 1 sequences"),
                (("sim", self.wtrace, "--timeline", "--capacity", "2"), "--bandwidth-gbps"),
                (("sim", self.wtrace, "--timeline", "--capacity", "2", "--bandwidth-gbps", "1",
                  "--prefetch", "oracle"), "unknown rule 'oracle'"),
                (("sim", self.wtrace, "--timeline", "--capacity", "2", "--bandwidth-gbps", "1",
                  "--miss-policy", "hybrid", "--host-gbps", "0"), "--host-gbps"),
                (("sim", self.wtrace, "--timeline", "--capacity", "2", "--bandwidth-gbps", "1",
                  "--miss-policy", "cpu"), "--miss-policy")):
            proc = wisp(*args, ok=False)
            self.assertNotEqual(proc.returncode, 0, args)
            self.assertIn(message, proc.stderr, args)


if __name__ == "__main__":
    cli_support.main()
