#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Plot modelled TPOT and stall against per-layer compute time, one line per policy and prefetch
setting, from a `wisp sim --timeline --csv` file with several --compute-us values.

The crossover, where a prefetch line drops below its `none` line, is the compute per layer at
which prefetch starts to pay.

Example (the figure in docs/prefetch.md):
    wisp sim esft --timeline --scope layer --capacity 8 --policy least_stale \
        --expert-bytes 17301504 --bandwidth-gbps 50 --miss-latency-us 10 \
        --compute-us 50,75,100,125,150,200,300,400,800,1600,3200 \
        --prefetch none,top-k,percentile --csv > sweep.csv
    tools/plot_timeline.py -o docs/img/prefetch_crossover.png sweep.csv

Needs matplotlib (Debian: apt-get install python3-matplotlib).
"""

import argparse
import csv
import sys


def read_runs(path):
    """Returns {(policy, capacity, prefetch): [(compute_us, tpot_ms, stall_s)]}."""
    runs = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            try:
                key = (row["policy"], row["capacity"], row["prefetch"])
                point = (float(row["compute_us"]), float(row["tpot_ms"]), float(row["stall_s"]))
            except KeyError as missing:
                sys.exit(f"{path}: no column {missing} (is it `wisp sim --timeline --csv` output?)")
            runs.setdefault(key, []).append(point)
    if not runs:
        sys.exit(f"{path}: no rows (is it `wisp sim --timeline --csv` output?)")
    return runs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", required=True, help="PNG to write")
    parser.add_argument("csv", help="`wisp sim --timeline --csv` output")
    args = parser.parse_args()
    runs = read_runs(args.csv)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("matplotlib is missing: apt-get install python3-matplotlib")

    fig, (tpot, stall) = plt.subplots(1, 2, figsize=(11, 4.2))
    for (policy, capacity, prefetch), points in runs.items():
        points.sort()
        xs = [x for x, _, _ in points]
        style = "k-" if prefetch == "none" else "-"
        label = f"{policy} @ {capacity}, prefetch {prefetch}"
        tpot.plot(xs, [y for _, y, _ in points], style, marker="o", ms=3, label=label)
        stall.plot(xs, [s for _, _, s in points], style, marker="o", ms=3, label=label)
    for ax, what in ((tpot, "modelled TPOT (ms)"), (stall, "stall (s, whole trace)")):
        ax.set_xscale("log")
        ax.set_xlabel("compute per layer (us)")
        ax.set_ylabel(what)
        ax.grid(True, which="both", alpha=0.3)
    tpot.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)


if __name__ == "__main__":
    main()
