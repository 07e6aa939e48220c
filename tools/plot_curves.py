#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Plot miss-ratio curves written by `wisp reuse ... --csv` into one PNG.

Each curve is given as LABEL=FILE.csv[:SCALE]. SCALE multiplies the capacity column before
plotting: with `--scope layer` a capacity is slots *per layer*, so SCALE=26 (the layer count) puts
a per-layer curve on the same total-slot axis as a global one. `--normalize N` divides the x axis
by N (e.g. 1664 = all experts of all layers, giving the fraction of experts resident).

Example:
    wisp reuse TRACE --scope global --csv --capacities $(seq -s, 1 1664) > global.csv
    wisp reuse TRACE --scope layer  --csv --capacities $(seq -s, 1 64)   > layer.csv
    tools/plot_curves.py -o curves.png --normalize 1664 \
        "global LRU=global.csv" "per-layer LRU=layer.csv:26"

Needs matplotlib (Debian: apt-get install python3-matplotlib).
"""

import argparse
import csv
import sys


def read_curve(path):
    """Returns (capacities, miss_ratios) from a `wisp reuse --csv` file."""
    capacities, ratios = [], []
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            if not {"capacity", "miss_ratio"} <= set(reader.fieldnames or []):
                sys.exit(f"{path}: expected `wisp reuse --csv` output (columns capacity and "
                         f"miss_ratio), got {reader.fieldnames}")
            for row in reader:
                try:
                    capacities.append(float(row["capacity"]))
                    ratios.append(float(row["miss_ratio"]))
                except (TypeError, ValueError) as e:
                    sys.exit(f"{path}:{reader.line_num}: {e}")
    except OSError as e:
        sys.exit(f"{path}: {e.strerror}")
    if not capacities:
        sys.exit(f"{path}: no data rows")
    return capacities, ratios


def parse_spec(spec):
    """LABEL=FILE[:SCALE] -> (label, file, scale)."""
    if "=" not in spec:
        sys.exit(f"curve '{spec}' is not LABEL=FILE[:SCALE]")
    label, rest = spec.split("=", 1)
    scale = 1.0
    if ":" in rest:
        path, scale_text = rest.rsplit(":", 1)
        try:
            scale = float(scale_text)
        except ValueError:
            path, scale = rest, 1.0
    else:
        path = rest
    return label, path, scale


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("curves", nargs="+", help="LABEL=FILE.csv[:SCALE]")
    parser.add_argument("-o", "--output", required=True, help="PNG to write")
    parser.add_argument("--title", default="LRU miss-ratio curves")
    parser.add_argument("--normalize", type=float, default=None,
                        help="divide the x axis by this (e.g. total keys)")
    parser.add_argument("--xlabel", default=None)
    parser.add_argument("--logx", action="store_true", help="logarithmic x axis")
    parser.add_argument("--styles", default="-",
                        help="comma-separated matplotlib line styles, one per curve, cycled "
                             "(e.g. '-,-,--,--')")
    args = parser.parse_args()
    curves = []  # read every input first: a bad file is reported before anything else
    for spec in args.curves:
        label, path, scale = parse_spec(spec)
        curves.append((label, scale, *read_curve(path)))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("matplotlib is missing: apt-get install python3-matplotlib")

    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    styles = args.styles.split(",")
    for i, (label, scale, capacities, ratios) in enumerate(curves):
        xs = [c * scale for c in capacities]
        if args.normalize:
            xs = [x / args.normalize for x in xs]
        ax.plot(xs, ratios, styles[i % len(styles)], label=label, linewidth=1.8)

    if args.xlabel:
        xlabel = args.xlabel
    elif args.normalize:
        xlabel = f"cache size (fraction of {args.normalize:g} keys)"
    else:
        xlabel = "cache size (slots)"
    ax.set_xlabel(xlabel)
    ax.set_ylabel("miss ratio")
    ax.set_title(args.title)
    if args.logx:
        ax.set_xscale("log")
    ax.set_ylim(0, 1.02)
    ax.set_xlim(left=0 if not args.logx else None)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.output)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
