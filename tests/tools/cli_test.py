#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""End-to-end tests of the `wisp` command: its outputs checked against independent computations.

Usage: cli_test.py WISP_BINARY
"""
import collections
import json
import os
import pty
import subprocess
import sys
import tempfile
import threading
import unittest

import cli_support
from cli_support import ESFT, need_esft, wisp


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

    def test_reuse_per_access_matches_lru_oracle_in_both_scopes(self):
        caps = [1, 2, 3, 5, 8]
        for scope in ("global", "layer"):
            out = json.loads(wisp("reuse", self.wtrace, "--scope", scope, "--granularity",
                                  "access", "--capacities", ",".join(map(str, caps)),
                                  "--json").stdout)
            self.assertEqual(out["scope"], scope)
            self.assertEqual(out["granularity"], "access")
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
                self.assertAlmostEqual(point["hit_ratio"], 1 - expected / len(self.stream))

    def calls(self):
        return [self.stream[i:i + self.k] for i in range(0, len(self.stream), self.k)]

    def test_reuse_per_call_is_the_default_and_equals_sim_lru_at_every_capacity(self):
        for scope, top in (("layer", self.experts), ("global", self.layers * self.experts)):
            caps = list(range(self.k, top + 1))
            arg = ",".join(map(str, caps))
            curve = json.loads(wisp("reuse", self.wtrace, "--scope", scope, "--capacities", arg,
                                    "--json").stdout)
            self.assertEqual(curve["granularity"], "call")
            sim = json.loads(wisp("sim", self.wtrace, "--scope", scope, "--capacity", arg,
                                  "--policy", "lru", "--json").stdout)
            by_capacity = {r["capacity"]: r["misses"] for r in sim["results"]}
            for point in curve["miss_curve"]:
                c = point["capacity"]
                if scope == "global":
                    oracle = protected_lru_misses(self.calls(), c)
                else:
                    oracle = sum(protected_lru_misses(
                        [call for call in self.calls() if call[0][0] == layer], c)
                        for layer in range(self.layers))
                self.assertEqual(point["misses"], oracle, f"{scope} capacity {c}")
                self.assertEqual(point["misses"], by_capacity[c], f"{scope} capacity {c}")

    def test_reuse_per_call_equals_sim_lru_on_esft(self):
        need_esft(self)
        for scope, caps in (("layer", "6,8,32"), ("global", "208,832")):
            curve = json.loads(wisp("reuse", ESFT, "--scope", scope, "--capacities", caps,
                                    "--json").stdout)
            sim = json.loads(wisp("sim", ESFT, "--scope", scope, "--capacity", caps, "--policy",
                                  "lru", "--json").stdout)
            self.assertEqual([p["misses"] for p in curve["miss_curve"]],
                             [r["misses"] for r in sim["results"]], scope)
        access = json.loads(wisp("reuse", ESFT, "--scope", "layer", "--granularity", "access",
                                 "--capacities", "8", "--json").stdout)
        self.assertEqual(access["miss_curve"][0]["misses"], 939182)

    def test_esft_top_k_that_does_not_fit_is_refused(self):
        need_esft(self)
        out = os.path.join(self.tmp.name, "k1.wtrace")
        proc = wisp("trace", "import", "--format", "esft", "--top-k", "1", ESFT, "-o", out,
                    ok=False)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("top-6 routing", proc.stderr)
        self.assertFalse(os.path.exists(out))

    def test_import_skips_or_keeps_incomplete_tokens_and_reports_them(self):
        gappy = os.path.join(self.tmp.name, "gappy.jsonl")
        with open(self.jsonl) as f, open(gappy, "w") as g:
            for row in map(json.loads, f):
                if not (row["token_idx"] in (4, 9) and row["layer"] == 1):
                    g.write(json.dumps(row) + "\n")
        out = os.path.join(self.tmp.name, "gappy.wtrace")
        proc = wisp("trace", "import", "--format", "jsonl", gappy, "-o", out, ok=False)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("has no record for layer 1", proc.stderr)
        skip = wisp("trace", "import", "--format", "jsonl", "--on-incomplete", "skip", gappy,
                    "-o", out).stdout
        self.assertIn(f"{self.tokens - 2} steps", skip)
        self.assertIn("incomplete: 2 tokens in 1 sequences lacked 2 (token, layer) records; "
                      "dropped 2 tokens (4 records)", skip)
        stats = json.loads(wisp("trace", "stats", out, "--json").stdout)
        self.assertEqual(stats["accesses"], (self.tokens - 2) * self.layers * self.k)
        keep = wisp("trace", "import", "--format", "jsonl", "--on-incomplete", "keep", gappy,
                    "-o", out).stdout
        self.assertIn("kept 2 tokens with the layers present", keep)
        stats = json.loads(wisp("trace", "stats", out, "--json").stdout)
        self.assertEqual(stats["steps"], self.tokens)
        self.assertEqual(stats["accesses"], (self.tokens * self.layers - 2) * self.k)
        self.assertEqual(stats["missing_rows"], 2)
        self.assertIn("missing    2 (step, layer) rows", wisp("trace", "stats", out).stdout)

    def test_sim_lru_matches_protected_lru_oracle_and_belady_bounds_all(self):
        calls = [self.stream[i:i + self.k] for i in range(0, len(self.stream), self.k)]
        for scope, caps in (("global", [2, 4, 9]), ("layer", [2, 3, 5])):
            out = json.loads(wisp("sim", self.wtrace, "--scope", scope, "--capacity",
                                  ",".join(map(str, caps)), "--json").stdout)
            by = {(r["policy"], r["capacity"]): r for r in out["results"]}
            self.assertEqual({p for p, _ in by},
                             {"lru", "fifo", "lfu", "lfu_history", "lfru", "fld", "least_stale",
                              "decayed_frequency", "predicted_next_use", "reuse_probability",
                              "learned_belady", "belady"})
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
        self.assertIn("least_stale", proc.stderr)
        proc = wisp("sim", self.wtrace, "--capacity", "1", ok=False)
        self.assertNotEqual(proc.returncode, 0)

    def test_sim_runs_the_hindsight_references_only_when_named(self):
        names = ("hindsight_frequency", "hindsight_reuse")
        for scope in ("global", "layer"):
            out = json.loads(wisp("sim", self.wtrace, "--scope", scope, "--capacity", "3",
                                  "--policy", ",".join(names) + ",belady", "--json").stdout)
            by = {r["policy"]: r for r in out["results"]}
            self.assertEqual(set(by), set(names) | {"belady"})
            for name in names:
                self.assertEqual(by[name]["hits"] + by[name]["misses"], len(self.stream))
                self.assertLessEqual(by["belady"]["misses"], by[name]["misses"], name)
        proc = wisp("sim", self.wtrace, "--capacity", "3", "--policy", "hindsight_reuse",
                    "--timeline", ok=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("hindsight reference", proc.stderr)
        proc = wisp("sim", self.wtrace, "--policy", "mru", "--capacity", "4", ok=False)
        self.assertIn("hindsight_frequency, hindsight_reuse", proc.stderr)

    def test_sim_on_a_terminal_gives_the_counts_of_json(self):
        """With a progress bar (stderr on a terminal) the replay still reads the trace's token
        positions: position-aware policies count as with --json."""
        need_esft(self)
        args = ["sim", ESFT, "--policy", "reuse_probability,hindsight_frequency", "--scope",
                "layer", "--capacity", "16"]
        want = {r["policy"]: r["misses"]
                for r in json.loads(wisp(*args, "--json").stdout)["results"]}
        leader, follower = pty.openpty()
        bar = []  # what the progress bar draws, read so that the terminal never fills up

        def drain():
            try:
                while chunk := os.read(leader, 4096):
                    bar.append(chunk)
            except OSError:  # the follower side closed
                pass

        reader = threading.Thread(target=drain)
        reader.start()
        try:
            proc = subprocess.run([cli_support.WISP, *args], stdout=subprocess.PIPE,
                                  stderr=follower, text=True, timeout=300,
                                  env=dict(os.environ, WISP_PROGRESS_DELAY_MS="0"))
        finally:
            os.close(follower)
            reader.join(timeout=10)
            os.close(leader)
        self.assertEqual(proc.returncode, 0)
        self.assertTrue(bar, "no progress bar: stderr was not a terminal")
        got = {line.split()[0]: int(line.split()[4]) for line in proc.stdout.splitlines()
               if line.split() and line.split()[0] in want}
        self.assertEqual(got, want)

    def test_reuse_csv_has_header_and_rows(self):
        lines = wisp("reuse", self.wtrace, "--capacities", "2,4", "--csv").stdout.split()
        self.assertEqual(lines[0], "capacity,misses,miss_ratio,hit_ratio")
        self.assertEqual([l.split(",")[0] for l in lines[1:]], ["2", "4"])

    def test_plot_scripts_read_the_csv_and_fail_politely_without_matplotlib(self):
        tools = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools")
        no_matplotlib = os.path.join(self.tmp.name, "no_matplotlib", "matplotlib")
        os.makedirs(no_matplotlib, exist_ok=True)
        with open(os.path.join(no_matplotlib, "__init__.py"), "w") as f:
            f.write("raise ImportError('matplotlib is not installed here')\n")
        env = dict(os.environ, PYTHONPATH=os.path.dirname(no_matplotlib))
        curve = os.path.join(self.tmp.name, "curve.csv")
        with open(curve, "w") as f:
            f.write(wisp("reuse", self.wtrace, "--csv").stdout)
        runs = os.path.join(self.tmp.name, "runs.csv")
        with open(runs, "w") as f:
            f.write(wisp("sim", self.wtrace, "--capacity", "4", "--csv").stdout)
        for script, arg in (("plot_curves.py", f"LRU={curve}"), ("plot_policies.py", f"sim={runs}")):
            proc = subprocess.run([sys.executable, os.path.join(tools, script), "-o",
                                   os.path.join(self.tmp.name, "x.png"), arg],
                                  capture_output=True, text=True, env=env, timeout=60)
            self.assertEqual(proc.returncode, 1, script)
            self.assertEqual(proc.stderr.strip(),
                             "matplotlib is missing: apt-get install python3-matplotlib", script)

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
    cli_support.main()
