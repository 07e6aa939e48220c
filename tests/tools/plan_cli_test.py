#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""End-to-end tests of `wisp plan`: the split arithmetic recomputed here, independently.

Usage: plan_cli_test.py WISP_BINARY
"""
import json
import os
import tempfile
import unittest

import cli_support
from cli_support import wisp

GIB = 1 << 30

# Published config fields (the same numbers as data/models/*.json, recomputed here).
MODELS = {
    "qwen3-30b-a3b": dict(L=48, E=128, k=8, expert=3 * 2048 * 768 * 2, kv=48 * 2 * 4 * 128 * 2),
    "olmoe-1b-7b": dict(L=16, E=64, k=8, expert=3 * 2048 * 1024 * 2, kv=16 * 2 * 16 * 128 * 2),
    "mixtral-8x7b": dict(L=32, E=8, k=2, expert=3 * 4096 * 14336 * 2, kv=32 * 2 * 8 * 128 * 2),
    "deepseek-v2-lite": dict(L=26, E=64, k=6, expert=3 * 2048 * 1408 * 2, kv=27 * (512 + 64) * 2),
    "qwen1.5-moe-a2.7b": dict(L=24, E=60, k=4, expert=3 * 2048 * 1408 * 2, kv=24 * 2 * 16 * 128 * 2),
}


def plan_json(*args):
    return json.loads(wisp("plan", "--json", *args).stdout)


class PlanTest(unittest.TestCase):
    def test_json_shape_and_exact_arithmetic_for_every_preset(self):
        for name, m in MODELS.items():
            with self.subTest(model=name):
                budget = 24 * GIB + 12345
                out = plan_json("--model", name, "--budget", str(budget), "--concurrency", "2",
                                "--context", "4096")
                self.assertEqual(list(out), ["model", "layers", "experts", "top_k",
                                             "budget_bytes", "expert_slot_bytes",
                                             "cap_unit_bytes", "kv_bytes_per_token",
                                             "block_tokens", "kv_block_bytes", "floor",
                                             "feasible_caps", "expert_stream", "bandwidth_gbps",
                                             "recompute_s_per_token", "choice", "knobs",
                                             "sweep"])
                self.assertEqual((out["layers"], out["experts"], out["top_k"]),
                                 (m["L"], m["E"], m["k"]))
                self.assertEqual(out["cap_unit_bytes"], m["L"] * m["expert"])
                self.assertEqual(out["floor"], {"concurrency": 2, "context": 4096,
                                                "blocks": -(-2 * 4096 // 16)})
                self.assertEqual(out["model"], name)
                self.assertEqual(out["budget_bytes"], budget)
                self.assertEqual(out["expert_slot_bytes"], m["expert"])
                self.assertEqual(out["kv_bytes_per_token"], m["kv"])
                self.assertEqual(out["block_tokens"], 16)
                block = 16 * m["kv"]
                floor_blocks = -(-2 * 4096 // 16)
                choice = out["choice"]
                self.assertEqual(list(choice), ["expert_cap", "kv_blocks", "kv_tokens",
                                                "expert_bytes", "kv_bytes", "slack_bytes",
                                                "predicted_latency_s"])
                self.assertEqual(choice["slack_bytes"],
                                 budget - choice["expert_bytes"] - choice["kv_bytes"])
                self.assertEqual(out["knobs"], {"per_layer_expert_cap": choice["expert_cap"],
                                                "kv_cache_bytes": choice["kv_bytes"]})
                c = choice["expert_cap"]
                self.assertEqual(choice["expert_bytes"], c * m["L"] * m["expert"])
                self.assertEqual(choice["kv_blocks"], (budget - choice["expert_bytes"]) // block)
                self.assertEqual(choice["kv_bytes"], choice["kv_blocks"] * block)
                self.assertEqual(choice["kv_tokens"], choice["kv_blocks"] * 16)
                self.assertGreaterEqual(choice["kv_blocks"], floor_blocks)
                self.assertGreater(choice["predicted_latency_s"], 0)
                self.assertEqual([p["expert_cap"] for p in out["sweep"]],
                                 list(range(m["k"], m["E"] + 1)))
                for p in out["sweep"]:
                    experts = p["expert_cap"] * m["L"] * m["expert"]
                    blocks = (budget - experts) // block if experts <= budget else 0
                    self.assertEqual(p["kv_blocks"], blocks)
                    self.assertEqual(p["kv_tokens"], blocks * 16)
                    self.assertEqual(p["feasible"], experts <= budget and blocks >= floor_blocks)
                    self.assertEqual(p["fits"], experts <= budget)
                    self.assertEqual(list(p), ["expert_cap", "kv_blocks", "kv_tokens",
                                               "miss_rate", "fits", "feasible", "predicted_s"])

    def test_sweep_cap_and_size_suffixes(self):
        out = plan_json("--model", "olmoe-1b-7b", "--budget", "8GiB", "--concurrency", "4",
                        "--context", "8192", "--sweep-cap", "8,21,22")
        self.assertEqual(out["budget_bytes"], 8 * GIB)
        self.assertEqual([(p["expert_cap"], p["feasible"]) for p in out["sweep"]],
                         [(8, True), (21, True), (22, False)])
        # 8 GiB - 21 x 16 x 12 MiB = 4160 MiB = 2080 blocks of 2 MiB.
        self.assertEqual(out["choice"]["expert_cap"], 21)
        self.assertEqual(out["choice"]["kv_blocks"], 2080)
        self.assertEqual(plan_json("--model", "olmoe-1b-7b", "--budget", "1.5GiB",
                                   "--sweep-cap", "8")["budget_bytes"], 1536 << 20)

    def test_model_file(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "tiny.json")
            with open(path, "w") as f:
                json.dump({"name": "tiny", "layers": 2, "experts": 8, "top_k": 2,
                           "expert_bytes": 1000, "kv_bytes_per_token": 10}, f)
            # No synthetic preset of this shape: the command builds one.
            out = plan_json("--model", path, "--budget", "20000", "--sweep-cap", "2,8")
            self.assertEqual(out["model"], "tiny")
            self.assertEqual(out["sweep"][0]["kv_blocks"], (20000 - 2 * 2 * 1000) // 160)

    def test_text_output(self):
        proc = wisp("plan", "--model", "qwen3-30b-a3b", "--budget", "24GiB", "--concurrency", "4",
                    "--context", "8192", "--sweep-cap", "8,32")
        self.assertIn("engine knobs: per-layer expert cap", proc.stdout)
        self.assertIn("feasible caps [8, 49]", proc.stdout)

    def test_infeasible_states_the_smallest_budget(self):
        m = MODELS["olmoe-1b-7b"]
        smallest = 8 * 16 * m["expert"] + 2048 * 16 * m["kv"]
        proc = wisp("plan", "--model", "olmoe-1b-7b", "--budget", str(smallest - 1),
                    "--concurrency", "4", "--context", "8192", ok=False)
        self.assertEqual(proc.returncode, 1)
        self.assertIn(str(smallest - 1), proc.stderr)
        self.assertIn(str(smallest), proc.stderr)
        self.assertIn("32768 tokens", proc.stderr)
        ok = plan_json("--model", "olmoe-1b-7b", "--budget", str(smallest), "--concurrency", "4",
                       "--context", "8192", "--sweep-cap", "8")
        self.assertEqual(ok["choice"]["expert_cap"], 8)

    def test_bad_input(self):
        cases = [
            (["--model", "gpt-moe", "--budget", "8GiB"], "unknown model"),
            (["--model", "olmoe-1b-7b", "--budget", "1GiB"], "below the fixed cost"),
            (["--model", "olmoe-1b-7b", "--budget", "8GiB", "--sweep-cap", "7"], "outside [top_k"),
            (["--model", "olmoe-1b-7b", "--budget", "8GiB", "--sweep-cap", "65"], "outside [top_k"),
            (["--model", "olmoe-1b-7b", "--budget", "8GiB", "--bandwidth", "0"], "bandwidth"),
            (["--model", "olmoe-1b-7b", "--budget", "8 gigs"], "unknown unit"),
            (["--model", "olmoe-1b-7b", "--budget", "8GiB", "--concurrency", "4"], "together"),
            (["--model", "/nonexistent/m.json", "--budget", "8GiB"],
             "cannot open /nonexistent/m.json: No such file or directory"),
        ]
        for args, message in cases:
            with self.subTest(args=args):
                proc = wisp("plan", *args, ok=False)
                self.assertNotEqual(proc.returncode, 0)
                self.assertIn(message, proc.stderr)


if __name__ == "__main__":
    cli_support.main()
