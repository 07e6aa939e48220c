#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Plot miss rate against total slots, one line per policy, from `wisp sim --csv` files.

Each panel is given as TITLE=FILE.csv; panels are laid out two per row.

Example (the figure in docs/policies.md):
    tools/plot_policies.py -o docs/img/policies_miss_rates.png \
        "ESFT, per-layer=esft_layer.csv" "ESFT, global=esft_global.csv" \
        "synthetic, per-layer=synth_layer.csv" "synthetic, global=synth_global.csv"

Needs matplotlib (Debian: apt-get install python3-matplotlib).
"""

import argparse
import csv
import sys


def read_runs(path):
    """Returns {policy: [(total_slots, miss_rate)]} from a `wisp sim --csv` file."""
    runs = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            runs.setdefault(row["policy"], []).append(
                (int(row["total_slots"]), 100.0 * float(row["miss_rate"])))
    if not runs:
        sys.exit(f"{path}: no rows (is it `wisp sim --csv` output?)")
    return runs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", required=True, help="PNG to write")
    parser.add_argument("panels", nargs="+", metavar="TITLE=FILE.csv")
    args = parser.parse_args()
    # Read every input first: a bad file is reported before anything else.
    panels = [(title, read_runs(path)) for title, _, path in (p.partition("=") for p in args.panels)]
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("matplotlib is missing: apt-get install python3-matplotlib")

    rows = (len(args.panels) + 1) // 2
    fig, axes = plt.subplots(rows, 2, figsize=(11, 4.2 * rows), squeeze=False, sharey=True)
    for ax, (title, runs) in zip(axes.flat, panels):
        for i, (policy, points) in enumerate(runs.items()):
            points.sort()
            # Policies that coincide would hide each other: shift each a little sideways.
            xs = [x * (1 + 0.012 * (i - len(runs) / 2)) for x, _ in points]
            style = "k--" if policy == "belady" else "-"
            ax.plot(xs, [y for _, y in points], style, marker="o", ms=4, label=policy)
        ax.set_title(title)
        ax.set_xscale("log", base=2)
        ax.set_xticks([x for x, _ in next(iter(runs.values()))])
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_xlabel("total expert slots")
        ax.set_ylabel("miss rate (%)")
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(args.panels):]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)


if __name__ == "__main__":
    main()
