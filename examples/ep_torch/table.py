# SPDX-License-Identifier: Apache-2.0
"""Markdown tables of ep_torch.py's --out files run with --compare (docs/ep_torch.md):
every rank's counts against `wisp sim --ranks`'s `wisp` arm, and each run's balance and cost.

    python examples/ep_torch/table.py esft-2.json esft-4.json ...
"""
import json
import sys

COUNTS = ("slots", "hits", "misses", "link_bytes", "token_load", "tokens_received")


def main(paths):
    docs = [json.load(open(p)) for p in paths]
    print("| trace | G | rank | " + " | ".join(COUNTS) + " | equal to the simulator |")
    print("|---|---|---|" + "---|" * len(COUNTS) + "---|")
    for d in docs:
        for r in d["ranks_results"]:
            i = r["rank"]
            same = all(r[k] == d["sim"][k][i] for k in COUNTS)
            print(f"| {d['trace']} | {d['ranks']} | {i} | " +
                  " | ".join(f"{r[k]:,}" for k in COUNTS) + f" | {'yes' if same else 'NO'} |")
    print()
    print("| trace | G | steps | load imbalance (sim) | step ms, median per rank | bookkeeping % "
          "per rank | bookkeeping us per step | all-to-all MB per rank | modelled link s per rank "
          "| max abs error (max abs ref) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for d in docs:
        rs = d["ranks_results"]
        checked = d["check_steps"]

        def median_ms(r):
            walls = sorted(r["step_wall_s"][checked:] or r["step_wall_s"])
            return 1e3 * walls[len(walls) // 2]

        def book(r):
            p = r["parts_s"]
            return p["choose"] + p["prepare"] + p["residency"]

        pct = [100 * book(r) / (r["serve_s"] - r["parts_s"]["reference"]) for r in rs]
        print(f"| {d['trace']} | {d['ranks']} | {d['steps']} | {d['load_imbalance']:.4f} "
              f"({d['sim']['load_imbalance']:.4f}) | "
              + ", ".join(f"{median_ms(r):.1f}" for r in rs) + " | "
              + ", ".join(f"{p:.2f}" for p in pct) + " | "
              + ", ".join(f"{1e6 * book(r) / r['steps']:.0f}" for r in rs) + " | "
              + ", ".join(f"{r['a2a_bytes_sent'] / 1e6:.1f}" for r in rs) + " | "
              + ", ".join(f"{r['modelled_link_s']:.3f}" for r in rs) + " | "
              + f"{max(r['max_abs_error'] for r in rs):.1e} "
              f"({max(r['max_abs_reference'] for r in rs):.1f}) |")


if __name__ == "__main__":
    main(sys.argv[1:])
