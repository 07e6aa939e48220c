#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""End-to-end tests of the `wisp` command: its outputs checked against independent computations.

Usage: cli_test.py WISP_BINARY
"""
import collections
import json
import os
import subprocess
import sys
import tempfile
import unittest

WISP = None


def wisp(*args, ok=True):
    proc = subprocess.run([WISP, *args], capture_output=True, text=True, timeout=300)
    if ok and proc.returncode != 0:
        raise AssertionError(f"wisp {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
    return proc


def lru_misses(stream, capacity):
    """Oracle: an LRU cache simulated with an OrderedDict."""
    cache, misses = collections.OrderedDict(), 0
    for key in stream:
        if key in cache:
            cache.move_to_end(key)
        else:
            misses += 1
            cache[key] = True
            if len(cache) > capacity:
                cache.popitem(last=False)
    return misses


def protected_lru_misses(calls, capacity):
    """Oracle for `wisp sim --policy lru`: LRU where the experts of one call (a (step, layer)
    request) cannot evict each other, as in vLLM's provider."""
    cache, misses = collections.OrderedDict(), 0
    for call in calls:
        for key in call:
            if key in cache:
                cache.move_to_end(key)
                continue
            misses += 1
            if len(cache) >= capacity:
                victim = next(k for k in cache if k not in call)
                del cache[victim]
            cache[key] = True
    return misses


class CliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        # A small JSONL trace written here, so the expected curve is computed independently.
        cls.layers, cls.experts, cls.k, cls.tokens = 3, 8, 2, 40
        rows, cls.stream = [], []
        for t in range(cls.tokens):
            for layer in range(cls.layers):
                ids = [(t * 3 + layer) % cls.experts, (t * 5 + 2 * layer + 1) % cls.experts]
                if ids[0] == ids[1]:
                    ids[1] = (ids[1] + 1) % cls.experts
                rows.append({"layer": layer, "experts": ids, "token_idx": t})
        for row in sorted(rows, key=lambda r: (r["token_idx"], r["layer"])):
            cls.stream += [(row["layer"], e) for e in row["experts"]]
        cls.jsonl = os.path.join(cls.tmp.name, "small.jsonl")
        with open(cls.jsonl, "w") as f:
            for row in reversed(rows):  # the importer must sort
                f.write(json.dumps(row) + "\n")
        cls.wtrace = os.path.join(cls.tmp.name, "small.wtrace")
        wisp("trace", "import", "--format", "jsonl", "--experts", str(cls.experts), cls.jsonl,
             "-o", cls.wtrace)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_reuse_json_matches_lru_oracle_in_both_scopes(self):
        caps = [1, 2, 3, 5, 8]
        for scope in ("global", "layer"):
            out = json.loads(wisp("reuse", self.wtrace, "--scope", scope, "--capacities",
                                  ",".join(map(str, caps)), "--json").stdout)
            self.assertEqual(out["scope"], scope)
            self.assertEqual(out["accesses"], len(self.stream))
            for point in out["miss_curve"]:
                c = point["capacity"]
                if scope == "global":
                    expected = lru_misses(self.stream, c)
                else:
                    expected = sum(lru_misses([e for (l, e) in self.stream if l == layer], c)
                                   for layer in range(self.layers))
                self.assertEqual(point["misses"], expected, f"{scope} capacity {c}")
                self.assertAlmostEqual(point["miss_ratio"], expected / len(self.stream))

    def test_sim_lru_matches_protected_lru_oracle_and_belady_bounds_all(self):
        calls = [self.stream[i:i + self.k] for i in range(0, len(self.stream), self.k)]
        for scope, caps in (("global", [2, 4, 9]), ("layer", [2, 3, 5])):
            out = json.loads(wisp("sim", self.wtrace, "--scope", scope, "--capacity",
                                  ",".join(map(str, caps)), "--json").stdout)
            by = {(r["policy"], r["capacity"]): r for r in out["results"]}
            self.assertEqual({p for p, _ in by},
                             {"lru", "fifo", "lfu", "lfru", "fld", "least-stale",
                              "decayed-frequency", "predicted-next-use", "belady"})
            for c in caps:
                if scope == "global":
                    expected = protected_lru_misses(calls, c)
                else:
                    expected = sum(protected_lru_misses(
                        [call for call in calls if call[0][0] == layer], c)
                        for layer in range(self.layers))
                lru = by[("lru", c)]
                self.assertEqual(lru["misses"], expected, f"{scope} capacity {c}")
                self.assertEqual(lru["hits"] + lru["misses"], len(self.stream))
                for (policy, cap), r in by.items():
                    if cap == c:
                        self.assertLessEqual(by[("belady", c)]["misses"], r["misses"], policy)

    def test_sim_rejects_unknown_policy_and_capacity_below_k(self):
        proc = wisp("sim", self.wtrace, "--policy", "mru", "--capacity", "4", ok=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("least-stale", proc.stderr)
        proc = wisp("sim", self.wtrace, "--capacity", "1", ok=False)
        self.assertNotEqual(proc.returncode, 0)

    def test_reuse_csv_has_header_and_rows(self):
        lines = wisp("reuse", self.wtrace, "--capacities", "2,4", "--csv").stdout.split()
        self.assertEqual(lines[0], "capacity,misses,miss_ratio")
        self.assertEqual([l.split(",")[0] for l in lines[1:]], ["2", "4"])

    def test_synth_is_deterministic_and_stats_reports_the_shape(self):
        a, b = (os.path.join(self.tmp.name, n) for n in ("a.wtrace", "b.wtrace"))
        wisp("trace", "synth", "--steps", "50", "--seed", "7", "-o", a)
        wisp("trace", "synth", "--steps", "50", "--seed", "7", "-o", b)
        with open(a, "rb") as fa, open(b, "rb") as fb:
            self.assertEqual(fa.read(), fb.read())
        stats = json.loads(wisp("trace", "stats", a, "--json").stdout)
        self.assertEqual(stats["steps"], 50)

    def test_bad_input_exits_nonzero_with_a_message(self):
        bad = os.path.join(self.tmp.name, "bad.wtrace")
        with open(self.wtrace, "rb") as f:
            data = f.read()
        with open(bad, "wb") as f:
            f.write(data[: len(data) // 2])
        proc = wisp("reuse", bad, ok=False)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("wisp:", proc.stderr)
        proc = wisp("trace", "synth", "--preset", "no-such-model", "-o", bad, ok=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("default", proc.stderr)  # lists the valid presets


if __name__ == "__main__":
    WISP = sys.argv.pop(1)
    unittest.main(verbosity=2)
