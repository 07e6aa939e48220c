# SPDX-License-Identifier: Apache-2.0
"""Expert parallelism on torch.distributed with wisp's rank pagers (docs/ep_torch.md).

Launch with torchrun (one process per rank; gloo on the CPU, NCCL where GPUs are present):

    torchrun --standalone --nproc-per-node 2 examples/ep_torch/ep_torch.py --trace esft \\
        --out ep.json

Every rank, from the same arguments and without talking to the others:

1. reads the routing trace (the router's ids and gate weights of every token and layer) and
   plans with ``wisp.plan_placement`` the placement and device slots that ``wisp sim --ranks G``
   replays under; its ``expert_map`` of every layer is vLLM's EP map;
2. builds, from a seed, the SwiGLU experts of its local rows (fp32, ``--model-hidden`` x
   ``--model-intermediate``): a logical expert's weights depend only on (seed, layer, expert), so
   every replica and the single-process reference see the same weights;
3. serves the trace's serving steps (``wisp.ep_batches``: ``--batch`` concurrent sequences). Each
   rank owns a contiguous share of each step's tokens (their hidden states); at each layer every
   rank runs the same ``ReplicaChooser.choose`` over the step's ids, so all agree on the rank of
   every (token, expert) pair; each rank prepares its pairs in its ``ExpertCache`` (its pager,
   one pool of ``rank_slots[rank]`` slots over its (layer, row) keys), publishes what its copies
   made resident and evicted (an all-gather of a few ints), sends each token once to each rank
   computing one of its pairs (``all_to_all_single``), computes its experts from the slots the
   map names, and sends the weighted partial sums back (a second ``all_to_all_single``); the owner
   adds them to the residual.

Bad input is refused on every rank, with the values, before the process group exists (so no rank
waits on a collective): a plan for another rank count, an engine ``expert_map`` that disagrees with
the placement, a trace whose ids fall outside the plan's experts. The process group has a timeout
(``--timeout``), so a rank that fails mid-step ends the run instead of leaving the others waiting.

Writes (``--out``) one JSON document: per rank and per layer, hits, misses, link bytes, pairs,
tokens received and all-to-all bytes; per rank the wall time of each step and of its parts; the
largest difference from the reference; and the simulator's arm for the same trace and plan.
"""
import argparse
import datetime
import json
import os
import pathlib
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

import wisp
from wisp.integrations.torch import ExpertCache

HERE = pathlib.Path(__file__).resolve().parent
TRACES = pathlib.Path(os.environ.get("WISP_TEST_TRACES_DIR") or
                      HERE.parents[2] / "shared" / "traces")
# The shared traces and the total device slots of docs/expert_parallel.md (a third resident).
NAMED_TRACES = {
    "esft": ("raw/esft_deepseek_v2_lite_intent", 555),
    "gpt-oss": ("raw/gptoss20b_mmlu_pro_decode/routing.jsonl", 256),
}


class Refused(Exception):
    """Bad input, found before any collective."""


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", default="esft",
                   help="'esft', 'gpt-oss' (the shared traces), a .wtrace file or an ESFT folder")
    p.add_argument("--sequences", type=int, default=0,
                   help="replay only the first N sequences of the trace (0: all)")
    p.add_argument("--tokens", type=int, default=0,
                   help="keep only the first N tokens of each of those sequences (0: all)")
    p.add_argument("--save-trace", type=pathlib.Path,
                   help="rank 0 writes the trace it replayed (.wtrace), for `wisp sim --ranks`")
    p.add_argument("--capacity", type=int, default=0,
                   help="device slots over all ranks (default: the trace's figure in "
                        "docs/expert_parallel.md, else a third of the experts)")
    p.add_argument("--batch", type=int, default=16, help="concurrent sequences per step")
    p.add_argument("--local-experts", type=int, default=0,
                   help="rows per rank per layer (0: ceil(E / G) plus a quarter)")
    p.add_argument("--policy", default="decayed_frequency", help="each rank's eviction policy")
    p.add_argument("--model-hidden", type=int, default=128)
    p.add_argument("--model-intermediate", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bandwidth-gbps", type=float, default=50.0,
                   help="each rank's modelled host-to-device link (planner, chooser, link time)")
    p.add_argument("--miss-latency-us", type=float, default=10.0)
    p.add_argument("--steps", type=int, default=0, help="serve only the first N steps (0: all)")
    p.add_argument("--check-steps", type=int, default=2,
                   help="steps whose every layer is compared with the single-process reference")
    p.add_argument("--backend", default="auto", choices=["auto", "gloo", "nccl"])
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds a collective may wait for the other ranks")
    p.add_argument("--plan", type=pathlib.Path,
                   help="an .npz written by --save-plan (else every rank plans from the trace)")
    p.add_argument("--save-plan", type=pathlib.Path)
    p.add_argument("--expert-map", type=pathlib.Path,
                   help="the engine's EP maps, int[ranks, layers, experts] (.npy): checked "
                        "against the placement before anything runs")
    p.add_argument("--compare", action="store_true",
                   help="rank 0 also runs the simulator (wisp.simulate) on the same trace and plan")
    p.add_argument("--out", type=pathlib.Path, help="JSON results (written by rank 0)")
    p.add_argument("--fail-rank", type=int, default=-1, help=argparse.SUPPRESS)  # tests
    p.add_argument("--fail-step", type=int, default=-1, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def load_trace(spec: str, sequences: int, tokens: int = 0):
    """The trace and its default total slots."""
    path, slots = pathlib.Path(spec), 0
    for name, (rel, named_slots) in NAMED_TRACES.items():  # a shared trace given by its path
        if path.exists() and path.resolve() == (TRACES / rel).resolve():
            slots = named_slots
    if spec in NAMED_TRACES:
        rel, slots = NAMED_TRACES[spec]
        path = TRACES / rel
        if not path.exists():
            raise Refused(f"trace {spec!r} not found at {path} (set WISP_TEST_TRACES_DIR)")
    if path.is_dir():
        trace = wisp.Trace.import_esft(path)
    elif path.suffix == ".jsonl":
        trace = wisp.Trace.import_jsonl(path, group_key="request")
    elif path.exists():
        trace = wisp.Trace.read(path)
    else:
        raise Refused(f"--trace {spec!r}: no such file or folder")
    starts = [int(s) for s in trace.sequence_starts] + [trace.steps]
    if starts[0] != 0:
        starts.insert(0, 0)
    spans = list(zip(starts[:-1], starts[1:]))
    if sequences > 0:
        spans = spans[:sequences]
    if tokens > 0:
        spans = [(a, min(b, a + tokens)) for a, b in spans]
    keep = np.concatenate([np.arange(a, b) for a, b in spans]) if spans else np.arange(0)
    if len(keep) < trace.steps:  # the first tokens of the first sequences
        lengths = np.array([b - a for a, b in spans])
        trace = wisp.Trace.from_arrays(
            trace.ids()[keep], trace.experts, trace.weights()[keep] if trace.has_weights else None,
            np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.uint64))
    if not slots:
        slots = trace.layers * trace.experts // 3
    return trace, slots


def expert_weights(seed, layer, expert, hidden, inter):
    """The SwiGLU weights of logical expert (layer, expert): w13 [2I, H], w2 [H, I], fp32."""
    g = torch.Generator().manual_seed((seed * 1_000_003 + layer) * 100_003 + expert)
    w13 = torch.randn(2 * inter, hidden, generator=g) / hidden ** 0.5
    w2 = torch.randn(hidden, inter, generator=g) / inter ** 0.5
    return w13, w2


def rms_norm(x):
    """The experts' input: each token's hidden state at unit RMS (keeps 26 residual layers of
    random experts from growing without bound)."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6)


def swiglu(x, w13, w2):
    h = x @ w13.T
    inter = w2.shape[1]
    return (torch.nn.functional.silu(h[:, :inter]) * h[:, inter:]) @ w2.T


class Plan:
    """What a rank needs of a plan: the placement, each rank's slots, the chooser's costs."""

    def __init__(self, placement, rank_slots, copy_seconds, expert_seconds, token_seconds):
        self.placement = placement
        self.rank_slots = np.asarray(rank_slots, dtype=np.int32)
        self.copy_seconds = np.asarray(copy_seconds, dtype=np.float64)
        self.expert_seconds = float(expert_seconds)
        self.token_seconds = float(token_seconds)

    @classmethod
    def of(cls, p):
        return cls(p.placement, p.rank_slots, p.copy_seconds, p.expert_seconds, p.token_seconds)

    def save(self, path):
        np.savez(path, maps=self.placement.expert_maps(), local_experts=self.placement.local_experts,
                 rank_slots=self.rank_slots, copy_seconds=self.copy_seconds,
                 expert_seconds=self.expert_seconds, token_seconds=self.token_seconds)

    @classmethod
    def load(cls, path):
        z = np.load(path)
        return cls(wisp.Placement.from_expert_maps(z["maps"], int(z["local_experts"])),
                   z["rank_slots"], z["copy_seconds"], z["expert_seconds"], z["token_seconds"])

    def chooser(self):
        return wisp.ReplicaChooser(self.placement, self.copy_seconds.tolist(),
                                   self.expert_seconds, self.token_seconds)


def sim_kwargs(args, trace, expert_bytes):
    """The simulator's constants for this run: the model's real expert bytes and hidden size."""
    return dict(batch=args.batch, local_experts=args.local_experts, expert_bytes=expert_bytes,
                bandwidth_gbps=args.bandwidth_gbps, miss_latency_us=args.miss_latency_us,
                hidden=args.model_hidden)


def prepare_rank(args, rank, world):
    """Everything a rank checks and builds before the process group exists. Raises Refused."""
    trace, default_slots = load_trace(args.trace, args.sequences, args.tokens)
    capacity = args.capacity or default_slots
    expert_bytes = 3 * args.model_hidden * args.model_intermediate * 4  # w13 + w2, fp32
    if args.plan:
        plan = Plan.load(args.plan)
    else:
        try:
            plan = Plan.of(wisp.plan_placement(trace, world, capacity,
                                               **sim_kwargs(args, trace, expert_bytes)))
        except wisp.LogicError as e:
            raise Refused(f"plan_placement(ranks={world}, total_slots={capacity}): {e}") from None
    p = plan.placement
    if p.ranks != world:
        raise Refused(f"the plan is for {p.ranks} ranks but the group has {world} "
                      f"(WORLD_SIZE={world})")
    if (p.layers, p.experts) != (trace.layers, trace.experts):
        raise Refused(f"the plan has {p.layers} layers x {p.experts} experts but the trace "
                      f"{trace.layers} x {trace.experts}: its ids would fall outside the plan")
    ids = trace.ids()
    if ids.size and (int(ids.max()) >= p.experts or int(ids.min()) < 0):
        raise Refused(f"trace ids span [{int(ids.min())}, {int(ids.max())}], outside "
                      f"[0, experts = {p.experts})")
    if args.expert_map:
        maps = np.load(args.expert_map)
        if maps.ndim != 3 or maps.shape[0] != world:
            raise Refused(f"--expert-map has shape {maps.shape}, want (ranks = {world}, "
                          f"layers, experts)")
        try:  # every rank's map, so that every rank refuses, not only the one it names
            for r in range(world):
                p.check_expert_map(r, maps[r])
        except wisp.LogicError as e:
            raise Refused(str(e)) from None
    return trace, plan, capacity, expert_bytes


def build_cache(args, plan, rank, trace, device):
    """The rank's ExpertCache over its local rows, built from the seed."""
    p, h, i = plan.placement, args.model_hidden, args.model_intermediate
    maps = p.rank_maps(rank)
    w13 = torch.zeros(p.layers, p.local_experts, 2 * i, h)
    w2 = torch.zeros(p.layers, p.local_experts, h, i)
    for layer in range(p.layers):
        for expert in np.flatnonzero(maps[layer] >= 0):
            a, b = expert_weights(args.seed, layer, int(expert), h, i)
            w13[layer, maps[layer, expert]] = a
            w2[layer, maps[layer, expert]] = b
    policy = args.policy
    return ExpertCache(int(plan.rank_slots[rank]), w13, w2, top_k=trace.top_k, policy=policy,
                       scope="global", device=device, expert_map=maps, rank=rank)


def serve(args, rank, world, trace, plan, cache, device):
    """Serves the trace; returns this rank's measurements."""
    p = plan.placement
    layers, k, hidden = p.layers, trace.top_k, args.model_hidden
    local = p.local_experts
    chooser = plan.chooser()
    all_ids = trace.ids()
    all_w = torch.from_numpy(trace.weights()) if trace.has_weights else None
    x0 = torch.randn(trace.steps, hidden, generator=torch.Generator().manual_seed(args.seed))
    batches = wisp.ep_batches(trace, args.batch)
    if args.steps:
        batches = batches[:args.steps]
    slot_key = np.full(int(plan.rank_slots[rank]), -1, dtype=np.int64)  # for evictions
    most = local  # copies of one call: at most the rank's rows of the layer
    stats = {key: np.zeros(layers, dtype=np.int64) for key in
             ("hits", "misses", "link_bytes", "pairs", "tokens_received", "a2a_bytes_sent")}
    parts = {key: 0.0 for key in ("choose", "prepare", "residency", "all_gather", "dispatch",
                                  "compute", "combine", "reference")}
    step_wall = []
    max_err = max_ref = 0.0
    reference = {}  # (layer, expert) -> weights, for the checked steps
    events = torch.full((1 + 2 * most,), -1, dtype=torch.int64)
    gathered = [torch.empty_like(events) for _ in range(world)]
    for s, steps in enumerate(batches):
        if s == args.fail_step and rank == args.fail_rank:
            raise RuntimeError(f"rank {rank}: injected failure at step {s} (--fail-step)")
        t_step = time.perf_counter()
        cache.pager.begin_step()
        n = len(steps)
        bounds = [n * r // world for r in range(world + 1)]  # rank r owns tokens [b_r, b_r+1)
        mine = slice(bounds[rank], bounds[rank + 1])
        steps_t = torch.from_numpy(np.asarray(steps, dtype=np.int64))
        x = x0[steps_t[mine]].to(device)
        reference_s = 0.0
        ids_step = np.ascontiguousarray(all_ids[steps])  # [n, layers, k]
        w_step = all_w[steps_t] if all_w is not None else torch.full((n, layers, k), 1.0 / k)
        check = s < args.check_steps
        for layer in range(layers):
            ids = np.ascontiguousarray(ids_step[:, layer, :])
            t0 = time.perf_counter()
            targets = chooser.choose(layer, ids)
            t1 = time.perf_counter()
            emap = cache.prepare(layer, ids, targets=targets)
            t2 = time.perf_counter()
            # Publish this call's residency changes; every rank applies every rank's.
            r = cache.last_prepare
            plan_rows = r.copy_plan
            events.fill_(-1)
            events[0] = len(plan_rows)
            for j, (row, slot) in enumerate(plan_rows.tolist()):
                events[1 + 2 * j] = slot_key[slot]
                slot_key[slot] = layer * local + row
                events[2 + 2 * j] = slot_key[slot]
            t2a = time.perf_counter()
            dist.all_gather(gathered, events.to(device) if device.type != "cpu" else events)
            t2b = time.perf_counter()
            for src, ev in enumerate(gathered):
                ev = ev.tolist()
                for j in range(ev[0]):
                    old, new = ev[1 + 2 * j], ev[2 + 2 * j]
                    if old >= 0:
                        chooser.set_resident(src, old // local, old % local, False)
                    chooser.set_resident(src, new // local, new % local, True)
            t3 = time.perf_counter()
            # Dispatch: each of my tokens once to every rank computing one of its pairs.
            on = torch.from_numpy(targets)  # [n, k]
            sends = [(on[mine] == d).any(dim=1).nonzero().flatten() for d in range(world)]
            counts = torch.stack([(on[bounds[src]:bounds[src + 1]] == rank).any(dim=1).sum()
                                  for src in range(world)]).tolist()
            xn = rms_norm(x)
            send = torch.cat([xn[idx] for idx in sends])
            recv = torch.empty(sum(counts), hidden, device=device)
            dist.all_to_all_single(recv, send, counts, [len(i) for i in sends])
            t4 = time.perf_counter()
            # Compute my pairs: the received tokens in (source, token) order.
            got = torch.cat([bounds[src] + (on[bounds[src]:bounds[src + 1]] == rank).any(dim=1)
                             .nonzero().flatten() for src in range(world)])
            pair_rows, pair_cols = (on[got] == rank).nonzero(as_tuple=True)
            experts = torch.from_numpy(ids[got.numpy()])[pair_rows, pair_cols].long()
            slots = emap.cpu()[experts]
            gate = w_step[got, layer][pair_rows, pair_cols].to(device)
            partial = torch.zeros(len(got), hidden, device=device)
            w13 = cache.buf_w13
            w2 = cache.buf_w2
            for slot in torch.unique(slots).tolist():
                sel = (slots == slot).nonzero().flatten()
                rows = pair_rows[sel].to(device)
                y = swiglu(recv[rows], w13[slot], w2[slot]) * gate[sel.to(device), None]
                partial.index_add_(0, rows, y)
            t5 = time.perf_counter()
            # Combine: partial sums back to the owners, added in rank order.
            back = torch.empty(len(send), hidden, device=device)
            dist.all_to_all_single(back, partial, [len(i) for i in sends], counts)
            out = x.clone()
            offset = 0
            for idx in sends:
                out.index_add_(0, idx.to(device), back[offset:offset + len(idx)])
                offset += len(idx)
            t6 = time.perf_counter()
            if check:  # the single-process reference: every pair of my tokens, full weights
                ref = x.clone()
                my_ids = ids[mine]
                for t in range(my_ids.shape[0]):
                    for j in range(k):
                        key = (layer, int(my_ids[t, j]))
                        if key not in reference:
                            reference[key] = [w.to(device) for w in expert_weights(
                                args.seed, layer, key[1], hidden, args.model_intermediate)]
                        a, b = reference[key]
                        ref[t] += (swiglu(rms_norm(x[t:t + 1]), a, b)[0] *
                                   w_step[bounds[rank] + t, layer, j].to(device))
                if len(ref):
                    max_err = max(max_err, float((out - ref).abs().max()))
                    max_ref = max(max_ref, float(ref.abs().max()))
            x = out
            t7 = time.perf_counter()
            reference_s += t7 - t6
            stats["hits"][layer] += r.hits
            stats["misses"][layer] += r.misses
            stats["pairs"][layer] += len(pair_rows)
            stats["tokens_received"][layer] += len(got)
            stats["a2a_bytes_sent"][layer] += (len(send) + len(partial)) * hidden * 4
            parts["residency"] += (t2a - t2) + (t3 - t2b)  # the chooser's bookkeeping
            for key, a, b in (("choose", t0, t1), ("prepare", t1, t2), ("all_gather", t2a, t2b),
                              ("dispatch", t3, t4), ("compute", t4, t5), ("combine", t5, t6),
                              ("reference", t6, t7)):
                parts[key] += b - a
        step_wall.append(time.perf_counter() - t_step - reference_s)
    stats["link_bytes"] = stats["misses"] * cache.expert_bytes
    return {
        "rank": rank,
        "slots": int(plan.rank_slots[rank]),
        "per_layer": {key: v.tolist() for key, v in stats.items()},
        "hits": int(stats["hits"].sum()), "misses": int(stats["misses"].sum()),
        "link_bytes": int(stats["link_bytes"].sum()), "token_load": int(stats["pairs"].sum()),
        "tokens_received": int(stats["tokens_received"].sum()),
        "a2a_bytes_sent": int(stats["a2a_bytes_sent"].sum()),
        "cache_hits": cache.hits, "cache_misses": cache.misses, "cache_link_bytes": cache.link_bytes,
        "modelled_link_s": int(stats["misses"].sum()) * float(plan.copy_seconds[rank]),
        "steps": len(batches),
        "step_wall_s": step_wall,
        "parts_s": parts,
        "max_abs_error": max_err,
        "max_abs_reference": max_ref,
    }


def bookkeeping_s(result):
    """Seconds of a rank's replica choice and pager bookkeeping: choose, prepare (with the
    CPU copies of its misses) and the residency updates (not the all-gather's wait)."""
    parts = result["parts_s"]
    return parts["choose"] + parts["prepare"] + parts["residency"]


def timed_steps(result, checked):
    """Median wall seconds of a rank's steps after the checked ones."""
    walls = result["step_wall_s"][checked:] or result["step_wall_s"]
    return float(np.median(walls))


def main(argv=None):
    args = parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    backend = args.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    device = torch.device(f"cuda:{local_rank}" if backend == "nccl" else "cpu")
    torch.set_num_threads(1)
    try:
        trace, plan, capacity, expert_bytes = prepare_rank(args, rank, world)
    except Refused as e:  # before any collective: every rank says why and leaves
        print(f"ep_torch: rank {rank} of {world}: refused: {e}", file=sys.stderr, flush=True)
        return 2
    if args.save_plan and rank == 0:
        plan.save(args.save_plan)
    if args.save_trace and rank == 0:
        trace.write(args.save_trace)
    if backend == "nccl":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=args.timeout))
    try:
        cache = build_cache(args, plan, rank, trace, device)
        dist.barrier()
        t0 = time.perf_counter()
        result = serve(args, rank, world, trace, plan, cache, device)
        result["serve_s"] = time.perf_counter() - t0
        results = [None] * world
        dist.all_gather_object(results, result)
    finally:
        dist.destroy_process_group()
    if rank != 0:
        return 0
    doc = {"trace": args.trace, "sequences": args.sequences, "ranks": world, "backend": backend,
           "batch": args.batch, "total_slots": capacity, "policy": args.policy,
           "expert_bytes": expert_bytes, "hidden": args.model_hidden,
           "intermediate": args.model_intermediate, "steps": results[0]["steps"],
           "check_steps": args.check_steps, "ranks_results": results}
    pairs = np.array([r["token_load"] for r in results], dtype=np.float64)
    doc["load_imbalance"] = float(pairs.max() / pairs.mean()) if pairs.sum() else 1.0
    if args.compare:
        arms = wisp.simulate(trace, args.policy, [capacity], ranks=world,
                             **sim_kwargs(args, trace, expert_bytes))
        sim = next(a for a in arms if a["name"] == "wisp")
        doc["sim"] = {key: (v.tolist() if isinstance(v, np.ndarray) else v)
                      for key, v in sim.items()}
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1))
    report(doc)
    return 0


def report(doc):
    """A table per rank: measured, and the simulator's figure where it has one."""
    sim = doc.get("sim")
    print(f"{doc['trace']}: {doc['ranks']} ranks ({doc['backend']}), {doc['steps']} steps of "
          f"batch {doc['batch']}, {doc['total_slots']} slots, policy {doc['policy']}")
    print("rank | slots | hits | misses | link bytes | pairs | tokens recv | step ms (median) "
          "| bookkeeping % | max |err|")
    for r in doc["ranks_results"]:
        i = r["rank"]
        row = []
        for key in ("slots", "hits", "misses", "link_bytes", "token_load", "tokens_received"):
            mark = "" if sim is None else (" =" if sim[key][i] == r[key] else f" (sim {sim[key][i]})")
            row.append(f"{r[key]}{mark}")
        parts = r["parts_s"]
        served = r["serve_s"] - parts["reference"]
        overhead = 100 * bookkeeping_s(r) / served
        print(f"{i} | " + " | ".join(row) +
              f" | {1e3 * timed_steps(r, doc['check_steps']):.2f} | {overhead:.2f} | "
              f"{r['max_abs_error']:.2e}")
    line = f"load imbalance (max / mean pairs): {doc['load_imbalance']:.4f}"
    if sim is not None:
        line += f"; simulator {sim['load_imbalance']:.4f}"
    print(line)


if __name__ == "__main__":
    sys.exit(main())
