#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""End-to-end tests of `wisp-engine` (examples/engine/main.cpp): the --json comparison on a small
shape, the identical rule, and errors on bad input. Usage: engine_cli_test.py PATH/TO/wisp-engine"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

ENGINE = None
# A small shape: 2 layers x 8 experts (top-2), 3 KiB experts; 160 KiB holds the KV floor (16 blocks
# of 8 KiB) and 5 of the 8 experts per layer, so full does not fit and runs once more as the upper
# bound.
SMALL = ["--layers", "2", "--experts", "8", "--top-k", "2", "--hidden", "32", "--intermediate",
         "16", "--sessions", "4", "--budget", "160KiB"]
FIGURES = ("decode_tok_s", "prefill_tok_s", "ttft_s", "tpot_s", "stall_s")


def run(*args):
    return subprocess.run([ENGINE, *args], capture_output=True, text=True, timeout=300)


class EngineJson(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        p = run(*SMALL, "--repeat", "3", "--policies", "lru,least-stale", "--json")
        cls.stderr = p.stderr
        cls.returncode = p.returncode
        cls.doc = json.loads(p.stdout)

    def test_exit_code_and_identical(self):
        self.assertEqual(self.returncode, 0, self.stderr)
        self.assertIs(self.doc["identical"], True)

    def test_every_arm_once_in_order(self):
        names = [(a["name"], a.get("policy"), a["upper_bound"]) for a in self.doc["arms"]]
        self.assertEqual(names, [
            ("full", None, False), ("full", None, True), ("layer-offload", None, False),
            ("on-demand", None, False), ("static-hot", None, False),
            ("llama.cpp-cache", None, False), ("cpu-experts", None, False),
            ("cpu-moe-layers", None, False), ("pager", "lru", False), ("pager", "least_stale", False),
            ("pager+plan", "lru", False), ("pager+dynamic", "lru", False),
            ("pager+prefetch", "lru", False), ("pager+zip", "lru", False),
            ("tiered", None, False), ("pager+hybrid", "lru", False)])

    def test_the_device_is_the_consumer_preset_with_its_ratio(self):
        d = self.doc["device"]
        self.assertEqual(d["name"], "rtx-4090")
        for key in ("source", "device_memory_gbps", "peak_bf16_tflops", "h2d_gbps",
                    "copy_latency_us", "launch_us", "host_memory_gbps", "host_threads",
                    "host_thread_gflops", "miss_copy_s", "token_moe_s", "miss_to_moe"):
            self.assertIn(key, d)
        self.assertEqual(d["host_compute"], "roofline")
        self.assertAlmostEqual(d["miss_to_moe"], d["miss_copy_s"] / d["token_moe_s"], places=4)
        self.assertEqual(d["reference"]["model"], "Qwen3-30B-A3B")
        self.assertAlmostEqual(d["reference"]["miss_to_moe"], 4.91, places=2)

    def test_modelled_times_do_not_spread(self):
        # Every timed figure comes from the profile's model, not from this machine's clock.
        for arm in self.doc["arms"]:
            if arm["feasible"]:
                for key in FIGURES:
                    self.assertEqual(arm[key]["min"], arm[key]["max"], (arm["name"], key))

    def test_host_and_llama_arms_report_their_own_figures(self):
        arms = {(a["name"], a.get("policy")): a for a in self.doc["arms"]}
        for key in (("cpu-experts", None), ("cpu-moe-layers", None), ("pager+hybrid", "lru")):
            arm = arms[key]
            self.assertGreaterEqual(arm["host_positions"], arm["host_experts"])
            self.assertEqual(len(arm["host_compute_s"]["runs"]), 3)
            self.assertEqual(arm["host_compute_s"]["median"] > 0, arm["host_experts"] > 0)
        llama = arms[("llama.cpp-cache", None)]
        self.assertLessEqual(llama["upload_runs"], llama["expert_copies"])
        self.assertGreaterEqual(llama["bypassed_calls"], 0)
        for arm in self.doc["arms"]:
            if arm["feasible"] and arm["name"] not in ("cpu-experts", "cpu-moe-layers",
                                                       "pager+hybrid"):
                self.assertNotIn("host_experts", arm)

    def test_full_is_infeasible_and_its_upper_bound_is_not(self):
        full, bound = self.doc["arms"][0], self.doc["arms"][1]
        self.assertFalse(full["feasible"])
        self.assertIn("infeasible", full["note"])
        self.assertTrue(bound["feasible"])
        self.assertGreater(bound["budget_bytes"], full["budget_bytes"])
        self.assertEqual(bound["hit_rate"], 1)
        self.assertEqual(bound["bytes_moved"], 0)

    def test_figures_have_median_min_max_and_every_run(self):
        for arm in self.doc["arms"]:
            if not arm["feasible"]:
                continue
            for key in FIGURES:
                f = arm[key]
                self.assertEqual(len(f["runs"]), 3, (arm["name"], key))
                self.assertEqual(f["min"], min(f["runs"]))
                self.assertEqual(f["max"], max(f["runs"]))
                self.assertEqual(f["median"], sorted(f["runs"])[1])
            self.assertGreater(arm["decode_tok_s"]["median"], 0)
            self.assertGreater(arm["prefill_tok_s"]["median"], 0)

    def test_every_feasible_arm_has_the_same_digest(self):
        digests = {a["output_digest"] for a in self.doc["arms"] if a["feasible"]}
        self.assertEqual(len(digests), 1)

    def test_strongest_baseline_is_the_fastest_unpaged_arm_at_the_budget(self):
        base = [a for a in self.doc["arms"] if a["feasible"] and not a["upper_bound"]
                and not a["name"].startswith("pager") and a["name"] != "tiered"]
        best = max(base, key=lambda a: a["decode_tok_s"]["median"])
        self.assertEqual(self.doc["strongest_baseline"], best["name"])
        for arm in self.doc["arms"]:
            if arm["name"].startswith("pager") or arm["name"] == "tiered":
                self.assertEqual(len(arm["decode_vs_baseline"]["runs"]), 3)
        self.assertIn(self.doc["best_pager_policy"], ("lru", "least_stale"))

    def test_pager_arms_report_the_belady_bound(self):
        for arm in self.doc["arms"]:
            if arm["name"] == "pager":
                self.assertLessEqual(arm["belady_copies"], arm["expert_copies"])
            elif arm["feasible"]:
                self.assertNotIn("belady_copies", arm)

    def test_only_the_prefetch_arm_prefetches(self):
        for arm in self.doc["arms"]:
            if arm["name"] == "pager+prefetch":
                self.assertLessEqual(arm["prefetch_useful"], arm["prefetch_copies"])
            elif arm["feasible"]:
                self.assertNotIn("prefetch_copies", arm)

    def test_zip_makes_the_pagers_copies_with_fewer_bytes(self):
        arms = {(a["name"], a.get("policy")): a for a in self.doc["arms"]}
        pager, zip_arm = arms[("pager", "lru")], arms[("pager+zip", "lru")]
        self.assertEqual(zip_arm["expert_copies"], pager["expert_copies"])
        self.assertEqual(zip_arm["raw_bytes"], pager["bytes_moved"])
        self.assertLess(zip_arm["bytes_moved"], pager["bytes_moved"])
        self.assertEqual(zip_arm["decode_gbps"], 100)
        self.assertEqual(len(zip_arm["host_decode_s"]["runs"]), 3)
        for arm in self.doc["arms"]:
            if arm["feasible"] and arm["name"] not in ("pager+zip", "tiered"):
                self.assertNotIn("decode_s", arm)
                self.assertEqual(arm["raw_bytes"], arm["bytes_moved"])

    def test_tiered_takes_the_pagers_memory_and_finds_every_expert_once(self):
        arms = {(a["name"], a.get("policy")): a for a in self.doc["arms"]}
        pager, tiered = arms[("pager", "lru")], arms[("tiered", None)]
        self.assertEqual((tiered["rows"], tiered["kv_blocks"]), (pager["rows"], pager["kv_blocks"]))
        self.assertEqual(sum(tiered["tier_hits"]), tiered["expert_accesses"])
        self.assertEqual(tiered["expert_copies"], sum(tiered["tier_hits"][2:]))
        self.assertEqual(len(tiered["tier_sizes"]), 4)
        self.assertEqual(len(tiered["decode_vs_baseline"]["runs"]), 3)
        for arm in self.doc["arms"]:
            if arm["feasible"] and arm["name"] != "tiered":
                self.assertNotIn("tier_hits", arm)

    def test_caching_arms_move_fewer_bytes_than_on_demand(self):
        arms = {(a["name"], a.get("policy")): a for a in self.doc["arms"]}
        on_demand = arms[("on-demand", None)]["bytes_moved"]
        self.assertEqual(arms[("on-demand", None)]["hit_rate"], 0)
        for key in (("static-hot", None), ("pager", "lru")):
            self.assertLess(arms[key]["bytes_moved"], on_demand, key)
            self.assertGreater(arms[key]["hit_rate"], 0, key)


class EngineCommandLine(unittest.TestCase):
    def test_identical_cannot_be_checked_with_paged_arms_only(self):
        p = run(*SMALL, "--repeat", "1", "--arms", "pager", "--policies", "lru", "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        doc = json.loads(p.stdout)
        self.assertIsNone(doc["identical"])
        self.assertIsNone(doc["strongest_baseline"])
        t = run(*SMALL, "--repeat", "1", "--arms", "pager", "--policies", "lru")
        self.assertIn("could not check", t.stdout)

    def test_table_names_the_strongest_baseline(self):
        p = run(*SMALL, "--repeat", "1", "--arms", "on-demand,pager", "--policies", "fifo")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("outputs identical across arms: yes", p.stdout)
        self.assertIn("decode tok/s vs the strongest baseline, on-demand", p.stdout)
        self.assertIn("pager fifo", p.stdout)

    def test_bad_input_exits_2_and_names_it(self):
        for args, message in ((["--arms", "static-offload"], "unknown arm 'static-offload'"),
                              (["--repeat", "0"], "--repeat: '0'"),
                              (["--routing", "trace", "/nonexistent.wtrace"], "nonexistent"),
                              (["--routing", "trace", "/nonexistent.wtrace", "--layers", "2"],
                               "nonexistent"),
                              (["--tiers", "1,2,3"], "--tiers: need four sizes"),
                              (["--device", "gtx-280"], "unknown device profile 'gtx-280'"),
                              (["--bogus"], "unknown option '--bogus'")):
            p = run(*args)
            self.assertEqual(p.returncode, 2, args)
            self.assertIn(message, p.stderr, args)

    def test_a_bad_profile_file_is_refused_before_anything_runs(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "gpu.json")
            with open(path, "w") as f:
                json.dump({"name": "lab", "device_memory_gbps": 900, "peak_bf16_tflops": 100,
                           "h2d_gbps": 20, "copy_latency_us": -8, "launch_us": 3,
                           "host_memory_gbps": 50, "host_threads": 8}, f)
            p = run(*SMALL, "--device", path, "--json")
            self.assertEqual(p.returncode, 2)
            self.assertEqual(p.stdout, "")
            self.assertIn('"copy_latency_us" must be > 0, got -8', p.stderr)
            self.assertNotIn("forward", p.stderr)  # nothing was served

    def test_device_host_keeps_the_cpu_timed_engine(self):
        p = run(*SMALL, "--device", "host", "--repeat", "1", "--arms", "on-demand,pager",
                "--policies", "lru", "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        doc = json.loads(p.stdout)
        self.assertEqual(doc["device"], {"name": "host", "h2d_gbps": 25, "copy_latency_us": 10})
        self.assertIs(doc["identical"], True)

    def test_help_names_every_arm_and_policy(self):
        p = run("--help")
        self.assertEqual(p.returncode, 0)
        self.assertIn("--repeat N", p.stdout)
        help_text = p.stdout.replace("\n", " ").replace(" ", "")
        for name in ("full", "layer-offload", "on-demand", "static-hot", "llama.cpp-cache",
                     "cpu-experts", "cpu-moe-layers", "pager+plan", "pager+dynamic", "pager+prefetch",
                     "pager+zip", "tiered", "pager+hybrid", "rtx-4090", "h100-pcie", "lru", "fifo",
                     "lfu_history", "lfru", "fld", "least_stale", "least-stale",
                     "decayed_frequency", "predicted_next_use"):
            self.assertIn(name, help_text)
        bad = run("--policies", "nope")
        for name in ("lfu_history", "decayed_frequency", "predicted_next_use"):
            self.assertIn(name, bad.stderr)


if __name__ == "__main__":
    ENGINE = sys.argv.pop(1)
    unittest.main()
