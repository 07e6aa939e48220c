#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The `wisp` command never wraps or guesses: bad numbers, options that do not apply, an output
that would overwrite its input, empty and over-long traces are refused with plain messages; the
preset lists agree everywhere; machine output carries what the text shows.

Usage: strict_cli_test.py WISP_BINARY
"""
import json
import os
import pty
import re
import select
import subprocess
import tempfile
import unittest

import cli_support
from cli_support import wisp


class StrictCliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.trace = cls.path("small.wtrace")  # olmoe-1b-7b's shape, for every command and plan
        wisp("trace", "synth", "--preset", "olmoe-1b-7b", "--steps", "40", "-o", cls.trace)
        cls.qwen3 = cls.path("qwen3.wtrace")
        wisp("trace", "synth", "--preset", "qwen3-30b-a3b", "--steps", "20", "-o", cls.qwen3)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    @classmethod
    def path(cls, name):
        return os.path.join(cls.tmp.name, name)

    def refused(self, *args, message):
        proc = wisp(*args, ok=False)
        self.assertNotEqual(proc.returncode, 0, f"accepted: wisp {' '.join(args)}")
        self.assertIn(message, proc.stderr, f"wisp {' '.join(args)}")
        # A user-facing error names no source file of wisp and no 308-digit bound.
        self.assertNotRegex(proc.stderr, r"\.(hpp|inl|cpp):\d+")
        self.assertNotIn("17976931348623157", proc.stderr)
        return proc

    def test_negative_numbers_never_wrap_in_unsigned_options(self):
        cases = [
            ("reuse", self.trace, "--capacities", "-1"),
            ("sim", self.trace, "--capacity", "16", "--expert-bytes", "-1"),
            ("plan", "--model", "olmoe-1b-7b", "--budget", "8GiB", "--concurrency", "-1",
             "--context", "4096"),
            ("plan", "--model", "olmoe-1b-7b", "--budget", "8GiB", "--concurrency", "1",
             "--context", "-4096"),
            ("trace", "synth", "--steps", "-5", "-o", self.path("n.wtrace")),
            ("trace", "synth", "--seed", "-1", "-o", self.path("n.wtrace")),
            ("trace", "stats", self.trace, "--window", "-1"),
            ("evaluate", "--rounds", "-3"),
            ("evaluate", "--seed", "-1"),
            ("sim", self.trace, "--capacity", "16", "--jobs", "-2"),
        ]
        for args in cases:
            with self.subTest(args=args):
                self.refused(*args, message="must be a whole number")

    def test_zero_experts_or_top_k_are_refused_not_defaulted(self):
        jsonl = self.path("zero.jsonl")
        with open(jsonl, "w") as f:
            f.write('{"layer": 0, "experts": [1, 2], "token_idx": 0}\n')
        self.refused("trace", "import", "--format", "jsonl", "--experts", "0", jsonl, "-o",
                     self.path("z.wtrace"), message="--experts: must be a whole number in [1, ")
        self.refused("trace", "import", "--format", "esft", "--top-k", "0", self.tmp.name, "-o",
                     self.path("z.wtrace"), message="--top-k: must be a whole number in [1, ")

    def test_options_that_do_not_apply_are_refused(self):
        jsonl = self.path("one.jsonl")
        with open(jsonl, "w") as f:
            f.write('{"layer": 0, "experts": [1, 2], "token_idx": 0}\n')
        self.refused("trace", "import", "--format", "jsonl", "--top-k", "2", jsonl, "-o",
                     self.path("o.wtrace"), message="--top-k applies to --format esft only")
        self.refused("trace", "import", "--format", "esft", "--group-key", "g", self.tmp.name,
                     "-o", self.path("o.wtrace"), message="--group-key applies to --format jsonl")
        self.refused("sim", self.trace, "--capacity", "16", "--miss-latency-us", "3", "--json",
                     "--csv", message="excludes")

    def test_output_equal_to_input_is_refused_and_the_input_kept(self):
        jsonl = self.path("keep.jsonl")
        text = '{"layer": 0, "experts": [1, 2], "token_idx": 0}\n'
        with open(jsonl, "w") as f:
            f.write(text)
        self.refused("trace", "import", "--format", "jsonl", jsonl, "-o", jsonl,
                     message="would overwrite its input")
        self.refused("trace", "import", "--format", "jsonl", jsonl, "-o",
                     os.path.join(self.tmp.name, ".", "keep.jsonl"),
                     message="would overwrite its input")
        with open(jsonl) as f:
            self.assertEqual(f.read(), text)

    def test_trailing_bytes_after_a_wtrace_are_a_format_error(self):
        extra = self.path("extra.wtrace")
        with open(self.trace, "rb") as f, open(extra, "wb") as g:
            g.write(f.read() + b"tail")
        self.refused("reuse", extra, message="4 unexpected bytes after the trace")

    def test_empty_traces_are_refused_by_commands_that_replay_them(self):
        empty = self.path("empty.wtrace")
        wisp("trace", "synth", "--steps", "0", "-o", empty)
        self.assertEqual(json.loads(wisp("trace", "stats", empty, "--json").stdout)["steps"], 0)
        for args in (("reuse", empty), ("sim", empty, "--capacity", "8"),
                     ("plan", "--model", "olmoe-1b-7b", "--budget", "8GiB", "--trace", empty)):
            with self.subTest(args=args):
                self.refused(*args, message="holds no accesses")

    def test_bandwidth_without_expert_bytes_says_no_stall_is_modelled(self):
        proc = wisp("sim", self.trace, "--capacity", "16", "--policy", "lru",
                    "--bandwidth-gbps", "25", "--csv")
        self.assertIn("without --expert-bytes", proc.stderr)
        self.assertIn("no transfer stall", proc.stderr)
        quiet = wisp("sim", self.trace, "--capacity", "16", "--policy", "lru",
                     "--bandwidth-gbps", "25", "--expert-bytes", "1000", "--csv")
        self.assertEqual(quiet.stderr, "")

    def test_errors_name_the_os_reason_and_no_source_path(self):
        self.refused("reuse", "/nonexistent/x.wtrace",
                     message="/nonexistent/x.wtrace: No such file or directory")
        self.refused("trace", "synth", "--preset", "gpt-9", "-o", self.path("g.wtrace"),
                     message="unknown synthetic preset 'gpt-9'")
        self.refused("sim", self.trace, "--capacity", "16", "--policy", "mru",
                     message="unknown policy 'mru'")

    def test_bounds_read_as_words_not_308_digits(self):
        for args in (("sim", self.trace, "--capacity", "16", "--bandwidth-gbps", "-1"),
                     ("trace", "stats", self.trace, "--window", "0"),
                     ("evaluate", "--recompute", "0")):
            with self.subTest(args=args):
                proc = self.refused(*args, message="must be a")
                self.assertLess(len(proc.stderr), 300, proc.stderr)

    def test_budgets_print_gib_beside_bytes(self):
        proc = self.refused("plan", "--model", "olmoe-1b-7b", "--budget", "1GiB",
                            "--concurrency", "1", "--context", "1024",
                            message="1073741824 B (1.00 GiB)")
        self.assertRegex(proc.stderr, r"smallest budget that works is \d+ B \(\d+\.\d\d GiB\)")
        text = wisp("plan", "--model", "olmoe-1b-7b", "--budget", "8GiB", "--concurrency", "2",
                    "--context", "4096", "--sweep-cap", "8", "--trace", self.trace).stdout
        self.assertRegex(text, r"KV cache bytes \d+ B \(\d+\.\d\d GiB\)")

    def test_presets_and_synthetic_sources_agree_in_every_subcommand(self):
        synthetic = ["default", "qwen3-30b-a3b", "olmoe-1b-7b", "mixtral-8x7b",
                     "deepseek-v2-lite", "qwen1.5-moe-a2.7b", "uniform"]
        models = synthetic[1:-1]
        listed = ", ".join(synthetic)
        for command in (("trace", "synth"), ("trace", "stats"), ("reuse",), ("sim",), ("plan",)):
            with self.subTest(command=command):
                self.assertIn(listed, re.sub(r"\s+", " ", wisp(*command, "--help").stdout))
        for command in (("plan",), ("evaluate",)):
            with self.subTest(command=command):
                self.assertIn(", ".join(models), re.sub(r"\s+", " ", wisp(*command, "--help").stdout))
        out = json.loads(wisp("reuse", "synthetic:qwen1.5-moe-a2.7b", "--scope", "layer",
                              "--capacities", "4,60", "--json").stdout)
        self.assertEqual((out["layers"], out["experts"], out["top_k"]), (24, 60, 4))
        stats = json.loads(wisp("trace", "stats", "synthetic:mixtral-8x7b", "--json").stdout)
        self.assertEqual((stats["layers"], stats["experts"]), (32, 8))
        self.refused("sim", "synthetic:gpt-9", "--capacity", "8", message="unknown synthetic preset")
        table = wisp("evaluate", "--model", "qwen1.5-moe-a2.7b", "--budget", "20GiB",
                     "--rounds", "4", "--recompute", "2e-4").stdout
        self.assertIn("qwen1.5-moe-a2.7b", table)

    def test_one_spelling_per_policy(self):
        help_text = re.sub(r"\s+", " ", wisp("sim", "--help").stdout)
        self.assertIn("lru, fifo, lfu, lfu_history, lfru, fld, least_stale, decayed_frequency, "
                      "predicted_next_use, reuse_probability, learned_belady, belady", help_text)
        self.assertNotIn("least-stale", help_text)
        out = json.loads(wisp("sim", self.trace, "--capacity", "16", "--json").stdout)
        self.assertEqual([r["policy"] for r in out["results"]],
                         ["lru", "fifo", "lfu", "lfu_history", "lfru", "fld", "least_stale",
                          "decayed_frequency", "predicted_next_use", "reuse_probability",
                          "learned_belady", "belady"])
        # The engine's spelling elsewhere is accepted as the same policy.
        dashed = json.loads(wisp("sim", self.trace, "--capacity", "16", "--policy", "least-stale",
                                 "--json").stdout)["results"]
        self.assertEqual(dashed[0]["policy"], "least_stale")
        self.assertEqual(dashed[0]["misses"], out["results"][6]["misses"])

    def test_sim_jobs_give_identical_results(self):
        args = ("sim", self.trace, "--capacity", "8,16,40,64,300", "--scope", "global", "--json")
        one = json.loads(wisp(*args, "--jobs", "1").stdout)
        for jobs in ("2", "3"):
            self.assertEqual(json.loads(wisp(*args, "--jobs", jobs).stdout), one, jobs)
        self.assertEqual(json.loads(wisp(*args).stdout), one)  # default: every core
        self.refused(*args, "--jobs", "0", message="--jobs: must be a whole number in [1, ")

    def test_plan_warns_without_a_floor_prints_no_nan_and_its_json_sweep_is_complete(self):
        proc = wisp("plan", "--model", "olmoe-1b-7b", "--budget", "8GiB", "--sweep-cap", "8,60",
                    "--trace", self.trace)
        self.assertIn("no admission floor", proc.stderr)
        self.assertNotIn("nan", proc.stdout.lower())
        with_floor = wisp("plan", "--model", "olmoe-1b-7b", "--budget", "8GiB", "--concurrency",
                          "2", "--context", "4096", "--sweep-cap", "8", "--trace", self.trace)
        self.assertEqual(with_floor.stderr, "")
        out = json.loads(wisp("plan", "--model", "olmoe-1b-7b", "--budget", "8GiB",
                              "--concurrency", "2", "--context", "4096", "--sweep-cap", "8,21,60",
                              "--trace", self.trace, "--json").stdout)
        sweep = {p["expert_cap"]: p for p in out["sweep"]}
        self.assertGreater(sweep[8]["miss_rate"], sweep[21]["miss_rate"])
        self.assertGreater(sweep[8]["predicted_s"], 0)
        self.assertIsNone(sweep[60]["predicted_s"])  # does not fit: no prediction, no NaN
        self.assertFalse(sweep[60]["fits"])
        full = json.loads(wisp("plan", "--model", "olmoe-1b-7b", "--budget", "8GiB",
                               "--concurrency", "2", "--context", "4096", "--trace", self.trace,
                               "--json").stdout)
        self.assertEqual(full["choice"]["predicted_latency_s"],
                         min(p["predicted_s"] for p in full["sweep"] if p["feasible"]))

    def test_evaluate_json(self):
        out = json.loads(wisp("evaluate", "--rounds", "6", "--recompute", "2e-4,2e-3",
                              "--json").stdout)
        self.assertEqual(out["model"], "olmoe-1b-7b")
        self.assertEqual([t["recompute_s_per_token"] for t in out["tables"]], [2e-4, 2e-3])
        for table in out["tables"]:
            self.assertEqual([w["workload"] for w in table["workloads"]],
                             ["long-context", "mixed", "tool-burst", "shift long->tool",
                              "shift tool->long"])
            for workload in table["workloads"]:
                arms = {a["arm"]: a for a in workload["arms"]}
                self.assertEqual(arms["oracle"]["x_oracle"], 1.0)
                for a in arms.values():
                    self.assertAlmostEqual(a["x_oracle"], a["seconds"] / arms["oracle"]["seconds"])

    def test_model_file_with_quantised_experts(self):
        path = self.path("q4.json")
        with open(path, "w") as f:
            json.dump({"name": "qwen3-q4", "config": {
                "moe_layers": 48, "attention_layers": 48, "experts": 128, "top_k": 8,
                "hidden_size": 2048, "moe_intermediate_size": 768, "attention": "gqa",
                "num_key_value_heads": 4, "head_dim": 128, "dtype_bytes": 2, "weight_bits": 4,
                "group_size": 128}}, f)
        out = json.loads(wisp("plan", "--model", path, "--budget", "24GiB", "--concurrency", "4",
                              "--context", "8192", "--sweep-cap", "8", "--trace", self.qwen3,
                              "--json").stdout)
        self.assertEqual(out["expert_slot_bytes"], 3 * (2048 * 768 // 2 + 2048 * 768 // 128 * 2))

    def test_info_lists_the_components(self):
        text = wisp("info").stdout
        for part in ("trace", "reuse", "cache", "pager", "vmm", "alloc", "sim", "transfer",
                     "kernel", "least_stale", "lfu_history", "qwen1.5-moe-a2.7b", ".wtrace"):
            self.assertIn(part, text)
        self.assertIn("wisp::cuda", text)

    def test_progress_only_on_a_terminal_with_an_eta(self):
        # 5,120 accesses, 2 capacities x 8 policies (belady twice): past the first 2^16 at which
        # the bar looks at the clock.
        args = [cli_support.WISP, "sim", self.trace, "--capacity", "16,32"]
        env = dict(os.environ, WISP_PROGRESS_DELAY_MS="0")  # draw at once, not after a second

        def stderr_on_a_terminal(extra):
            """Runs wisp with stderr on a pseudo-terminal (stdout a pipe); returns what it wrote
            there."""
            master, slave = pty.openpty()
            proc = subprocess.Popen(args + extra, stdout=subprocess.DEVNULL, stderr=slave,
                                    env=env)
            os.close(slave)
            seen = b""
            while True:
                if select.select([master], [], [], 0.2)[0]:
                    try:
                        chunk = os.read(master, 4096)
                    except OSError:  # the terminal closed with the process
                        break
                    if not chunk:
                        break
                    seen += chunk
                elif proc.poll() is not None:
                    break
            os.close(master)
            self.assertEqual(proc.wait(), 0)
            return seen

        # stderr a pipe: silent.
        self.assertEqual(wisp(*args[1:], "--csv", env=env).stderr, "")
        # stderr a terminal: a bar with an eta once the run passes a second.
        self.assertIn(b"eta", stderr_on_a_terminal([]))
        # --csv to a pipe while stderr is a terminal: silent again.
        self.assertEqual(stderr_on_a_terminal(["--csv"]), b"")


if __name__ == "__main__":
    cli_support.main()
