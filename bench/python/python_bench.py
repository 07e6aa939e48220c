#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Benchmarks of wisp's Python package. Each figure is measured against its baseline in the same
run, the two sides interleaved pass by pass, and reported as the median and min-max over the
repetitions (run it with the installed package: scripts/venv.sh, then pip install .).

- pager: ``Pager.prepare`` from Python (numpy int64 [1, 8] ids, top-8 of 128 experts, capacity
  32, 8 layers, LRU, result arrays read) against the pure-Python OrderedDict bookkeeping of
  bench/pager/vllm_reference.py on the same stream; with ``--cpp-bench``, the C++ benchmark of
  the same stream (wisp_pager_bench, BM_prepare/lru) gives the share of a call that is binding.
- expert_cache: ``ExpertCache.prepare`` with torch CPU tensors and 1x1 experts against
  vllm_provider.py, a faithful port of vLLM's CachedWeightProvider on torch, LRU, same stream
  (rows sorted, so that vLLM's ``unique()`` order is wisp's first-seen order); hits and misses
  must be identical.
- trace: ``Trace.import_esft`` (+ ``write``) and ``import_esft`` + ``simulate`` against the
  ``wisp`` command (``--cli``: ``wisp trace import`` and ``wisp sim``) on the ESFT trace.

usage: python_bench.py [--reps N] [--only pager,expert_cache,trace] [--cli PATH]
                       [--cpp-bench PATH] [--esft DIR]
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import wisp

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "pager"))
import vllm_reference as ref  # noqa: E402  (the stream and the pure-Python baseline)

ESFT = HERE.parents[2] / "shared" / "traces" / "raw" / "esft_deepseek_v2_lite_intent"


def summary(values, unit=""):
    return (f"median {statistics.median(values):.3g}{unit} "
            f"(min {min(values):.3g}, max {max(values):.3g})")


def interleave(reps, *passes):
    """Runs the passes in turn `reps` times (after one untimed warm-up each); seconds per pass."""
    for p in passes:
        p()
    times = [[] for _ in passes]
    for _ in range(reps):
        for t, p in zip(times, passes):
            start = time.perf_counter()
            p()
            t.append(time.perf_counter() - start)
    return times


def bench_pager(reps, cpp_bench):
    stream = ref.make_stream()
    layers = [layer for layer, _ in stream]
    ids = [np.array([row], dtype=np.int64) for _, row in stream]
    pager = wisp.Pager(ref.LAYERS, ref.EXPERTS, ref.TOP_K, ref.CAPACITY)
    providers = [ref.CachedWeightProvider(ref.EXPERTS, ref.CAPACITY) for _ in range(ref.LAYERS)]

    def run_wisp():
        for layer, a in zip(layers, ids):
            if layer == 0:
                pager.begin_step()
            r = pager.prepare(layer, a)
            r.expert_map, r.copy_plan  # the arrays a caller reads

    def run_reference():
        for layer, row in stream:
            providers[layer].prepare(row)

    cpp_ns = []

    def run_cpp():  # the C++ benchmark of the same stream, in the same interleaving
        out = subprocess.run([cpp_bench, "--benchmark_filter=^BM_prepare/lru$",
                              "--benchmark_format=json", "--benchmark_min_time=0.2"],
                             capture_output=True, text=True, check=True).stdout
        cpp_ns.append(json.loads(out)["benchmarks"][0]["real_time"])

    passes = (run_wisp, run_reference) + ((run_cpp,) if cpp_bench else ())
    wisp_s, ref_s = interleave(reps, *passes)[:2]
    n = len(stream)
    wisp_ns = [1e9 * s / n for s in wisp_s]
    ref_ns = [1e9 * s / n for s in ref_s]
    print(f"pager: {n} calls per pass, {reps} interleaved passes")
    print(f"  Pager.prepare (numpy int64, result arrays): {summary(wisp_ns, ' ns')}")
    print(f"  OrderedDict reference (vllm_reference.py):  {summary(ref_ns, ' ns')}")
    print(f"  speedup: {summary([r / w for r, w in zip(ref_ns, wisp_ns)], 'x')}")
    s = pager.stats()
    ref_hits = sum(p.hits for p in providers)
    ref_total = ref_hits + sum(p.misses for p in providers)
    print(f"  hit rate: wisp {s.hits / s.accesses:.4f} (first-seen order), reference "
          f"{ref_hits / ref_total:.4f} (sorted unique order)")
    if cpp_bench:
        cpp_ns = cpp_ns[1:]  # the warm-up run
        share = [(w - c) / w for w, c in zip(wisp_ns, cpp_ns)]
        print(f"  C++ BM_prepare/lru, same stream: {summary(cpp_ns, ' ns')}; binding share of a "
              f"Python call: {summary([100 * x for x in share], '%')}")


def bench_expert_cache(reps):
    import torch

    from vllm_provider import CachedWeightProvider
    from wisp.integrations.torch import ExpertCache

    torch.set_num_threads(1)
    stream = [(layer, sorted(row)) for layer, row in ref.make_stream()]
    ids = [torch.tensor([row], dtype=torch.int64) for _, row in stream]
    layers = [layer for layer, _ in stream]
    w13 = torch.randn(ref.LAYERS, ref.EXPERTS, 1, 1)
    w2 = torch.randn(ref.LAYERS, ref.EXPERTS, 1, 1)
    cache = ExpertCache(ref.CAPACITY, w13, w2, top_k=ref.TOP_K, device="cpu")
    providers = [CachedWeightProvider(ref.CAPACITY, w13[l], w2[l]) for l in range(ref.LAYERS)]

    def run_wisp():
        for layer, t in zip(layers, ids):
            cache.prepare(layer, t)

    def run_vllm():
        for layer, t in zip(layers, ids):
            providers[layer].prepare(t)

    wisp_s, vllm_s = interleave(reps, run_wisp, run_vllm)
    n = len(stream)
    wisp_us = [1e6 * s / n for s in wisp_s]
    vllm_us = [1e6 * s / n for s in vllm_s]
    hits = sum(p.hits for p in providers)
    misses = sum(p.misses for p in providers)
    print(f"expert_cache: {n} calls per pass, {reps} interleaved passes, torch CPU, 1x1 experts")
    print(f"  ExpertCache.prepare:               {summary(wisp_us, ' us')}")
    print(f"  vLLM CachedWeightProvider (port):  {summary(vllm_us, ' us')}")
    print(f"  speedup: {summary([v / w for v, w in zip(vllm_us, wisp_us)], 'x')}")
    same = (cache.hits, cache.misses) == (hits, misses)
    print(f"  hits/misses: wisp {cache.hits}/{cache.misses}, vLLM {hits}/{misses} "
          f"({'identical' if same else 'DIFFERENT'})")
    if not same:
        raise SystemExit("expert_cache: hits/misses differ from the vLLM port")


def bench_trace(reps, cli, esft):
    if not cli:
        print("trace: skipped (give --cli, the wisp command)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        out_cli = pathlib.Path(tmp) / "cli.wtrace"
        out_py = pathlib.Path(tmp) / "py.wtrace"
        sim_args = ["--policy", "lru", "--capacity", "16", "--scope", "layer", "--json"]
        rows = {}

        def cli_import():
            subprocess.run([cli, "trace", "import", str(esft), "--format", "esft", "-o",
                            str(out_cli)], check=True, capture_output=True)

        def py_import():
            wisp.Trace.import_esft(esft).write(out_py)

        def cli_sim():
            rows["cli"] = json.loads(subprocess.run([cli, "sim", str(esft), *sim_args],
                                                    check=True, capture_output=True,
                                                    text=True).stdout)["results"][0]

        def py_sim():
            rows["py"] = wisp.simulate(wisp.Trace.import_esft(esft), "lru", 16, "layer")[0]

        cli_i, py_i, cli_s, py_s = interleave(reps, cli_import, py_import, cli_sim, py_sim)
        assert out_cli.read_bytes() == out_py.read_bytes(), "the .wtrace files differ"
        assert rows["cli"]["misses"] == rows["py"]["misses"]
    print(f"trace: ESFT ({esft.name}), {reps} interleaved runs (the CLI's include process start)")
    print(f"  import + write: wisp CLI {summary(cli_i, ' s')}, Python {summary(py_i, ' s')}, "
          f"Python/CLI {summary([p / c for p, c in zip(py_i, cli_i)])}")
    print(f"  import + sim lru@16: wisp CLI {summary(cli_s, ' s')}, Python {summary(py_s, ' s')}, "
          f"Python/CLI {summary([p / c for p, c in zip(py_s, cli_s)])}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--only", default="pager,expert_cache,trace")
    parser.add_argument("--cli", help="the wisp command (build/release/bin/wisp)")
    parser.add_argument("--cpp-bench", help="wisp_pager_bench (build/release/bench/...)")
    parser.add_argument("--esft", type=pathlib.Path, default=ESFT)
    args = parser.parse_args()
    only = set(args.only.split(","))
    print(f"wisp {wisp.__version__} from {pathlib.Path(wisp.__file__).parent}")
    if "pager" in only:
        bench_pager(args.reps, args.cpp_bench)
    if "expert_cache" in only:
        bench_expert_cache(args.reps)
    if "trace" in only:
        if args.esft.is_dir():
            bench_trace(args.reps, args.cli, args.esft)
        else:
            print(f"trace: skipped (ESFT trace absent: {args.esft})")


if __name__ == "__main__":
    main()
