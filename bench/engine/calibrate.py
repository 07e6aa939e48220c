#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Calibration of the modelled engine (wisp-engine) against the GPU benchmark's decode arms.

For each measured configuration (one `...-moe-<model>-<budget>.json` of the GPU benchmark) this
runs `wisp-engine` as close to the benchmark's setting as the engine allows and compares each
arm's tokens/s ratio to `layer-offload`, modelled against measured:

- the routing: the benchmark's token stream (the trace's first `history + timed` steps, in the
  order the benchmark replays them), one session per token (2 steps: a 1-token prompt whose
  forward emits the session's one generated token), so every forward has one row (batch 1); the
  first `history` sessions are the engine's warm-up (the benchmark's history), the next `timed`
  are evaluated (its timed tokens). The engine counts the warm-up as the first 20% of the
  sessions, so filler sessions (never served) follow. Every token is at position 0 of its
  session (the position-aware policies see no positions);
- the shape: the model's layers, experts and top-k (from the trace), but small experts (hidden
  64, intermediate 512: 192 KiB) so that the CPU can compute every output. Every bandwidth of the
  profile (link, device memory, fused MoE, host memory, peaks) is scaled by small / real expert
  bytes and the latencies kept, so a copy, a fused-MoE launch and a host expert are charged
  exactly what the real expert would be charged;
- the profile: the measured H200 profile, its host memory rate replaced by the host kernel's
  rate measured in the same run (`host_kernel.expert_read_gbps`; `--host-rate profile` keeps the
  memcpy figure);
- the layouts: `--cap` = the benchmark's slots per layer; `layer-offload` given the bytes of one
  more layer (the engine keeps a staging layer, the benchmark reads over UVA), `cpu-moe-layers`
  and `cpu-experts` one more row per layer (the engine keeps 2k staging rows shared by the layers,
  the benchmark none), `static-hot` pinning `cap - k` as the benchmark does; `pager` and
  `pager+hybrid` run the benchmark's `wisp` policy.

A token's modelled time is the whole forward (1-row prefills and decodes alike). Standard library
only. Skips (exit 0) when a trace, the engine or the `wisp` CLI is missing.

    bench/engine/calibrate.py [--results DIR] [--traces DIR] [--engine BIN] [--wisp BIN]
                              [--host-rate kernel|profile] [--json OUT]
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PREFIX = "2026-12-04-nvidia-h200-host-arms"
CONFIGS = ["deepseek-v2-lite-0.25", "deepseek-v2-lite-0.5", "gpt-oss-20b-0.25", "gpt-oss-20b-0.5"]
# bench arm -> engine arm
ARMS = {"layer-offload": "layer-offload", "on-demand": "on-demand", "static-hot": "static-hot",
        "llama.cpp-cache": "llama.cpp-cache", "cpu-moe-layers": "cpu-moe-layers",
        "cpu-experts": "cpu-experts", "wisp": "pager", "pager+hybrid": "pager+hybrid"}
HIDDEN, INTERMEDIATE = 64, 512  # 192 KiB experts: 3 x 64 KiB granules
SMALL_BYTES = 3 * HIDDEN * INTERMEDIATE * 2
HOST_THREAD_GFLOPS = 64.0  # the engine's default; scaled like every rate
WTRACE_MAGIC = b"WTRC\r\n\x1a\n"


def read_wtrace(path):
    """(layers, experts, top_k, steps, ids: list of per-step tuples) of a complete .wtrace."""
    b = open(path, "rb").read()
    assert b[:8] == WTRACE_MAGIC, path
    _, flags, layers, experts, top_k, width = struct.unpack_from("<IIiiiI", b, 8)
    steps, seqs, _ = struct.unpack_from("<QQQ", b, 32)
    assert not flags & 2, "partial trace"
    off = 64 + 8 * seqs
    per = layers * top_k
    fmt = "B" if width == 1 else "<H"
    n = steps * per
    flat = struct.unpack_from(f"<{n}{fmt[-1]}", b, off)
    return layers, experts, top_k, [flat[i * per:(i + 1) * per] for i in range(steps)]


def write_wtrace(path, layers, experts, top_k, steps, seq_len):
    """Writes `steps` (per-step id tuples) as sequences of `seq_len` steps, no gate weights."""
    width = 1 if experts <= 256 else 2
    starts = list(range(0, len(steps), seq_len))
    ids = b"".join(struct.pack(f"<{len(s)}{'B' if width == 1 else 'H'}", *s) for s in steps)
    payload = struct.pack(f"<{len(starts)}Q", *starts) + ids
    head = WTRACE_MAGIC + struct.pack("<IIiiiIQQQ", 1, 0, layers, experts, top_k, width,
                                      len(steps), len(starts), len(payload))
    head += struct.pack("<I", zlib.crc32(head)) + struct.pack("<I", 0)
    with open(path, "wb") as f:
        f.write(head + payload + struct.pack("<I", zlib.crc32(payload)))


def import_trace(wisp, model, traces, out):
    """The benchmark's routing of `model` as a .wtrace (its importer, its order), or None."""
    if model == "deepseek-v2-lite":
        src, args = os.path.join(traces, "raw", "esft_deepseek_v2_lite_intent"), ["--format", "esft"]
    else:
        src = os.path.join(traces, "raw", "gptoss20b_mmlu_pro_decode", "routing.jsonl")
        args = ["--format", "jsonl", "--group-key", "request"]
    if not os.path.exists(src):
        return None
    subprocess.run([wisp, "trace", "import", src, *args, "-o", out], check=True,
                   stdout=subprocess.DEVNULL)
    return out


def run_engine(engine, common, extra):
    p = subprocess.run([engine, *common, *extra, "--json"], check=True, capture_output=True,
                       text=True)
    return json.loads(p.stdout)["arms"]


def token_seconds(arm):
    """Modelled seconds per token over every forward (here each is a 1-row prompt)."""
    d, p = arm["decode_tokens"], arm["prefill_tokens"]
    seconds = sum(n / arm[f]["median"] for n, f in ((d, "decode_tok_s"), (p, "prefill_tok_s"))
                  if n > 0)
    return seconds / (d + p)


def calibrate(cfg, bench, profile, args, tmp):
    shape, window = bench["shape"], bench["window"]
    L, E, k = shape["model_layers"], shape["experts"], shape["top_k"]
    cap = bench["capacity_per_layer"]
    history, timed = window["history"], window["timed"]
    wt = import_trace(args.wisp, bench["model"], args.traces, os.path.join(tmp, "full.wtrace"))
    if wt is None:
        return None
    layers, experts, top_k, steps = read_wtrace(wt)
    assert (layers, experts, top_k) == (L, E, k), (cfg, layers, experts, top_k)
    # One session per benchmark token: 2 steps, the token's and a copy the engine never routes
    # (a 2-step sequence is a 1-token prompt whose forward emits its one generated token). The
    # warm-up is all / 5 sessions: `history` of them, so filler sessions (never served) follow.
    tokens = steps[:history + timed] + [steps[history + i % timed] for i in range(4 * history
                                                                                   - timed)]
    stream = [s for t in tokens for s in (t, t)]
    trace = os.path.join(tmp, cfg + ".wtrace")
    write_wtrace(trace, L, E, k, stream, 2)

    s = SMALL_BYTES / shape["expert_bytes"]  # every rate scaled by small / real expert bytes
    prof = dict(profile)
    if args.host_rate == "kernel":
        prof["host_memory_gbps"] = bench["host_kernel"]["expert_read_gbps"]
    for key in ("device_memory_gbps", "peak_bf16_tflops", "h2d_gbps", "host_memory_gbps",
                "moe_gbps"):
        prof[key] = prof[key] * s
    prof["name"] = f"{profile['name']}-scaled-{cfg}"
    prof["source"] = f"{PREFIX}-device-profile.json, rates x {s:.6g} (192 KiB experts)"
    pfile = os.path.join(tmp, cfg + "-profile.json")
    json.dump(prof, open(pfile, "w"))

    margin = 2 << 20  # the KV of one 2-token session, with room
    rows = lambda n: str(n * SMALL_BYTES + margin)
    common = ["--device", pfile, "--routing", "trace", trace, "--hidden", str(HIDDEN),
              "--intermediate", str(INTERMEDIATE), "--max-running", "1",
              "--sessions", str(timed), "--repeat", "1",
              "--host-thread-gflops", str(HOST_THREAD_GFLOPS * s)]
    pol = bench["wisp_policy"]
    resident_layers = cap * L // E
    out = run_engine(args.engine, common, [
        "--arms", "on-demand,static-hot,llama.cpp-cache,pager,pager+hybrid", "--cap", str(cap),
        "--budget", rows(cap * L), "--hot", str(cap - k), "--policies", pol, "--policy", pol])
    out += run_engine(args.engine, common, [
        "--arms", "layer-offload", "--budget", rows((resident_layers + 1) * E)])
    out += run_engine(args.engine, common, [
        "--arms", "cpu-moe-layers,cpu-experts", "--cap", str(cap + 1),
        "--budget", rows((cap + 1) * L)])
    by_name = {a["name"]: a for a in out}
    base_model = token_seconds(by_name["layer-offload"])
    base_meas = bench["arms"]["layer-offload"]["decode_tok_s"]["median"]
    rowsout = []
    for arm, eng in ARMS.items():
        a, m = by_name[eng], bench["arms"][arm]
        modelled = base_model / token_seconds(a)
        measured = m["decode_tok_s"]["median"] / base_meas
        rowsout.append({"arm": arm, "engine_arm": eng, "modelled_ratio": modelled,
                        "measured_ratio": measured, "error": abs(modelled / measured - 1),
                        "modelled_tok_s": 1 / token_seconds(a),
                        "measured_tok_s": m["decode_tok_s"]["median"],
                        "modelled_hit_rate": a["hit_rate"], "measured_hit_rate": m["hit_rate"],
                        "modelled_host_experts_per_token": a.get("host_experts", 0) / timed,
                        "measured_host_experts_per_token": m["host_experts_per_token"],
                        "note": a.get("note", "")})
    return {"config": cfg, "host_memory_gbps": prof["host_memory_gbps"] / s, "arms": rowsout}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--traces", default=os.environ.get("WISP_TRACES", "/work/shared/traces"))
    ap.add_argument("--engine",
                    default=os.path.join(ROOT, "build", "release", "examples", "engine",
                                         "wisp-engine"))
    ap.add_argument("--wisp", default=os.path.join(ROOT, "build", "release", "bin", "wisp"))
    ap.add_argument("--host-rate", choices=["kernel", "profile"], default="kernel")
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args()
    for b in (args.engine, args.wisp):
        if not os.access(b, os.X_OK):
            print(f"calibrate: skipped: {b} is not built", file=sys.stderr)
            return 0
    profile = json.load(open(os.path.join(args.results, PREFIX + "-device-profile.json")))
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for cfg in CONFIGS:
            bench = json.load(open(os.path.join(args.results, f"{PREFIX}-moe-{cfg}.json")))
            r = calibrate(cfg, bench, profile, args, tmp)
            if r is None:
                print(f"calibrate: skipped: the trace of {bench['model']} is missing under "
                      f"{args.traces}", file=sys.stderr)
                return 0
            results.append(r)
    print(f"host rate: {args.host_rate}; ratio = tok/s / layer-offload's; "
          "error = |modelled / measured - 1|")
    print(f"{'arm':16s}" + "".join(f"{c:>26s}" for c in CONFIGS))
    for i, arm in enumerate(ARMS):
        cells = [r["arms"][i] for r in results]
        print(f"{arm:16s}" + "".join(
            f"{c['modelled_ratio']:8.2f} {c['measured_ratio']:6.2f} {100 * c['error']:7.1f}%  "
            for c in cells))
    if args.json:
        json.dump({"host_rate": args.host_rate, "configs": results}, open(args.json, "w"),
                  indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
