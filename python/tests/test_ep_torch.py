# SPDX-License-Identifier: Apache-2.0
"""Expert parallelism on live ranks (examples/ep_torch, docs/ep_torch.md): the Python surface it
uses (plan_placement, ReplicaChooser, ep_batches, Pager.prepare(targets=)) against oracles
written from the docs, and two gloo ranks under torchrun whose every count equals the
simulator's and whose outputs equal a single-process reference. Bad input ends every rank
before any collective; a rank failing mid-step ends the run."""
import collections
import importlib.util
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import wisp

from conftest import ESFT, REPO, TRACES, need_trace

torch = pytest.importorskip("torch", reason="torch is not installed: the ep_torch example needs it")

EXAMPLE = REPO / "examples" / "ep_torch" / "ep_torch.py"
GPTOSS = TRACES / "raw" / "gptoss20b_mmlu_pro_decode" / "routing.jsonl"
COSTS = dict(expert_bytes=98304, bandwidth_gbps=50.0, miss_latency_us=10.0, hidden=128)


def example():
    spec = importlib.util.spec_from_file_location("ep_torch", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def torchrun(ranks, *args, timeout=120):
    """Runs the example on `ranks` gloo ranks; returns (exit code, stdout + stderr, seconds)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
         str(ranks), str(EXAMPLE), "--backend", "gloo", *map(str, args)],
        capture_output=True, text=True, timeout=timeout, env=env)
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start


# ------------------------------------------------------------------ the Python surface


def test_plan_placement_is_the_simulators_plan(small_trace):
    plan = wisp.plan_placement(small_trace, 4, 40, **COSTS)
    again = wisp.plan_placement(small_trace, 4, 40, **COSTS)
    p = plan.placement
    assert (p.ranks, p.layers, p.experts) == (4, small_trace.layers, small_trace.experts)
    assert (p.expert_maps() == again.placement.expert_maps()).all()  # deterministic
    assert int(plan.rank_slots.sum()) == 40
    sim = next(a for a in wisp.simulate(small_trace, capacities=[40], ranks=4, **COSTS)
               if a["name"] == "wisp")
    assert plan.rank_slots.tolist() == sim["slots"].tolist()
    assert sum(p.physical_experts(l) for l in range(p.layers)) == sim["physical_experts"]
    assert p.local_experts == sim["local_experts"]
    for layer in range(p.layers):  # every expert has a replica; maps and replicas agree
        for e in range(p.experts):
            reps = p.replicas(layer, e)
            assert len(reps) >= 1
            for rank, local in reps.tolist():
                assert p.expert_map(rank, layer)[e] == local == p.rank_maps(rank)[layer, e]
    # the copy of one expert: latency + bytes / bandwidth
    assert plan.copy_seconds.tolist() == pytest.approx([10e-6 + 98304 / 50e9] * 4)
    linear = wisp.plan_placement(small_trace, 4, 40, arm="ep-lru", **COSTS).placement
    assert (linear.expert_maps() == wisp.Placement.linear(4, 16, 4).expert_maps()).all()
    with pytest.raises(wisp.LogicError, match="total_slots 4 leaves a rank below top_k = 3"):
        wisp.plan_placement(small_trace, 4, 4, **COSTS)
    with pytest.raises(wisp.LogicError, match="arm must be 'wisp', 'eplb-lru' or 'ep-lru', got 'x'"):
        wisp.plan_placement(small_trace, 4, 40, arm="x", **COSTS)


def test_ep_batches_follow_the_documented_lanes(small_trace):
    starts = [0, 5, 9, 30, 31, 200]
    trace = wisp.Trace.from_arrays(small_trace.ids(), small_trace.experts,
                                   sequence_starts=np.array(starts, dtype=np.uint64))
    # Oracle: `batch` lanes; each step takes the next token of every active lane; a finished
    # lane takes the next sequence before the step.
    bounds = list(zip(starts, starts[1:] + [trace.steps]))
    lanes, queue, want = [], collections.deque(bounds), []
    while True:
        lanes = [l if l[0] < l[1] or not queue else list(queue.popleft()) for l in lanes]
        while len(lanes) < 3 and queue:
            lanes.append(list(queue.popleft()))
        step = []
        for lane in lanes:
            if lane[0] < lane[1]:
                step.append(lane[0])
                lane[0] += 1
        if not step:
            break
        want.append(step)
    got = [s.tolist() for s in wisp.ep_batches(trace, 3)]
    assert got == want
    assert sorted(sum(got, [])) == list(range(trace.steps))


def test_replica_chooser_reads_ids_in_place_and_picks_replicas(small_trace):
    plan = wisp.plan_placement(small_trace, 4, 40, **COSTS)
    p = plan.placement
    ids = np.ascontiguousarray(small_trace.ids()[:16, 1, :])
    chooser = wisp.ReplicaChooser(plan)
    targets = chooser.choose(1, ids)
    assert chooser._last_ids_address == ids.ctypes.data  # no copy
    assert targets.shape == ids.shape and targets.dtype == np.int32
    for (t, j), rank in np.ndenumerate(targets):
        assert rank in p.replicas(1, int(ids[t, j]))[:, 0]
    # torch int64, in place; a strided view is gathered; an `out` array is filled
    for form in (torch.from_numpy(ids.astype(np.int64)), torch.from_numpy(ids)):
        c = wisp.ReplicaChooser(plan)
        assert (c.choose(1, form) == targets).all()
        assert c._last_ids_address == form.data_ptr()
    wide = np.zeros((16, 6), dtype=np.int32)
    wide[:, ::2] = ids
    out = np.empty_like(targets)
    assert wisp.ReplicaChooser(plan).choose(1, wide[:, ::2], out=out) is out
    assert (out == targets).all()
    with pytest.raises(wisp.LogicError, match="out must be a C-contiguous int32 numpy array"):
        wisp.ReplicaChooser(plan).choose(1, ids, out=np.empty((16, 6), np.int32)[:, ::2])
    # one replica per expert: the chooser can only send each pair to its holder
    linear = wisp.Placement.linear(small_trace.layers, 16, 4)
    only = wisp.ReplicaChooser(linear, [1e-5] * 4, 1e-6, 1e-9).choose(1, ids)
    assert (only == ids // 4).all()
    with pytest.raises(wisp.LogicError, match="16"):
        chooser.choose(1, np.array([[16, 0, 1]], dtype=np.int32))
    assert chooser.resident(0, 0, 0) is False
    chooser.set_resident(0, 0, 0, True)
    assert chooser.resident(0, 0, 0) is True


def lru_rank_oracle(calls, capacity):
    """Oracle for one rank in global scope: an LRU over (layer, row) keys whose call's distinct
    rows are accessed resident ones first, then the others, each in first-seen order (the order
    docs/ep_torch.md and docs/expert_parallel.md give). Returns [(hits, misses, [copied rows])]."""
    cache = collections.OrderedDict()
    out = []
    for layer, rows in calls:
        rows = list(dict.fromkeys(rows))
        order = [r for r in rows if (layer, r) in cache] + [r for r in rows if (layer, r) not in cache]
        hits, copied = 0, []
        for r in order:
            key = (layer, r)
            if key in cache:
                cache.move_to_end(key)
                hits += 1
                continue
            if len(cache) == capacity:
                victim = next(k for k in cache if not (k[0] == layer and k[1] in rows))
                del cache[victim]
            cache[key] = True
            copied.append(r)
        out.append((hits, len(copied), copied))
    return out


def test_pager_with_targets_prepares_resident_experts_first():
    layers, experts, ranks, rank = 3, 12, 2, 1
    rng = np.random.default_rng(5)
    maps = np.full((layers, ranks, experts), -1, dtype=np.int32)
    for layer in range(layers):  # experts 0..7 on rank 0, 4..11 on rank 1 (4..7 replicated)
        maps[layer, 0, :8] = np.arange(8)
        maps[layer, 1, 4:] = rng.permutation(8)
    placement = wisp.Placement.from_expert_maps(maps, 8)
    pager = wisp.Pager(layers, 8, 2, 6, scope="global", expert_map=placement.rank_maps(rank),
                       rank=rank)
    calls, results = [], []
    for _ in range(300):
        layer = int(rng.integers(layers))
        ids = np.stack([rng.choice(experts, 2, replace=False) for _ in range(3)]).astype(np.int32)
        targets = np.where(ids >= 8, 1, np.where(ids < 4, 0, rng.integers(0, 2, ids.shape)))
        targets = targets.astype(np.int32)
        mine = [int(maps[layer, rank, e]) for e, t in zip(ids.ravel(), targets.ravel()) if t == rank]
        if len(set(mine)) > 6:
            continue
        calls.append((layer, mine))
        results.append(pager.prepare(layer, ids, targets=targets))
    for r, (hits, misses, copied) in zip(results, lru_rank_oracle(calls, 6)):
        assert (r.hits, r.misses) == (hits, misses)
        assert r.copy_plan[:, 0].tolist() == copied
    with pytest.raises(wisp.LogicError, match="sends expert 0 of layer 0 to rank 1, which holds no"):
        pager.prepare(0, np.array([[0, 9]], dtype=np.int32), targets=np.array([[1, 1]], np.int32))
    with pytest.raises(wisp.LogicError, match="targets holds 1 ranks for 2"):
        pager.prepare(0, np.array([[5, 9]], dtype=np.int32), targets=np.array([1], np.int32))
    with pytest.raises(wisp.LogicError, match="targets .* need an expert_map"):
        wisp.Pager(1, 4, 1, 2).prepare(0, np.array([[1]]), targets=np.array([[0]]))


def test_check_expert_map_names_the_first_disagreement():
    p = wisp.Placement.linear(3, 8, 2)
    p.check_expert_map(1, p.rank_maps(1))
    p.check_expert_map(1, p.expert_map(1, 0))  # one map for every layer
    bad = p.rank_maps(1)
    bad[2, 5] = -1
    with pytest.raises(wisp.LogicError, match="rank 1: expert_map disagrees with the placement "
                                              "at layer 2, expert 5: it holds -1, the placement 1"):
        p.check_expert_map(1, bad)
    with pytest.raises(wisp.LogicError, match="shape 2 x 8 but the placement has 3 layers"):
        p.check_expert_map(1, bad[:2])


# ------------------------------------------------------------------ live ranks


def run_and_compare(tmp_path, trace_path, sequences, tokens, capacity, cli=None):
    out, saved = tmp_path / "ep.json", tmp_path / "replayed.wtrace"
    code, log, seconds = torchrun(2, "--trace", trace_path, "--sequences", sequences, "--tokens",
                                  tokens, "--capacity", capacity, "--check-steps", 1000,
                                  "--out", out, "--save-trace", saved)
    assert code == 0, log[-3000:]
    doc = json.loads(out.read_text())
    trace = wisp.Trace.read(saved)
    # the simulator, in this process, on the trace the ranks replayed
    sim = next(a for a in wisp.simulate(trace, "decayed_frequency", [capacity], ranks=2, **COSTS)
               if a["name"] == "wisp")
    assert doc["expert_bytes"] == COSTS["expert_bytes"] and doc["steps"] == sim["steps"]
    for r in doc["ranks_results"]:
        i = r["rank"]
        for key in ("slots", "hits", "misses", "link_bytes", "token_load", "tokens_received"):
            assert r[key] == int(sim[key][i]), (key, i)
        assert (r["cache_hits"], r["cache_misses"], r["cache_link_bytes"]) == (
            r["hits"], r["misses"], r["link_bytes"])
        # every checked layer output equals the single-process reference (fp32)
        assert r["max_abs_error"] <= 1e-5 * max(1.0, r["max_abs_reference"])
        assert r["max_abs_reference"] > 0
    assert doc["load_imbalance"] == pytest.approx(sim["load_imbalance"], rel=0.02)
    if cli is not None:  # and `wisp sim --ranks 2 --json` on the same trace
        arms = json.loads(cli("sim", saved, "--ranks", 2, "--capacity", capacity, "--expert-bytes",
                              COSTS["expert_bytes"], "--hidden", COSTS["hidden"],
                              "--bandwidth-gbps", 50, "--miss-latency-us", 10, "--json"))["arms"]
        arm = next(a for a in arms if a["name"] == "wisp")
        for key in ("misses", "hits", "link_bytes"):
            assert arm[key] == [r[key] for r in doc["ranks_results"]], key
    return seconds


def test_two_gloo_ranks_count_what_the_simulator_counts(tmp_path):
    """Both shared traces, prefixes of 16 sequences: exact counts, reference outputs."""
    seconds = run_and_compare(tmp_path, need_trace(ESFT), 16, 6, 555)
    seconds += run_and_compare(tmp_path, need_trace(GPTOSS), 16, 6, 256)
    assert seconds < 60


def test_the_cli_counts_the_same(tmp_path, cli):
    run_and_compare(tmp_path, need_trace(ESFT), 8, 4, 555, cli=cli)


def test_bad_input_ends_every_rank_before_any_collective(tmp_path):
    ep = example()
    trace, _ = ep.load_trace(str(need_trace(ESFT)), 8, 4)
    plan = wisp.plan_placement(trace, 2, 555, **COSTS)
    maps = np.stack([plan.placement.rank_maps(r) for r in range(2)])
    e = int(np.flatnonzero(maps[1, 3] >= 0)[0])
    held, maps[1, 3, e] = maps[1, 3, e], -1  # the engine's map of rank 1 drops a row
    np.save(tmp_path / "maps.npy", maps)
    code, log, seconds = torchrun(2, "--trace", ESFT, "--sequences", 8, "--tokens", 4,
                                  "--expert-map", tmp_path / "maps.npy", "--timeout", 30)
    assert code != 0 and seconds < 30
    for rank in (0, 1):
        assert (f"rank {rank} of 2: refused: rank 1: expert_map disagrees with the placement at "
                f"layer 3, expert {e}: it holds -1, the placement {held}") in log
    # in process, without torchrun: a plan for 4 ranks, a plan for another trace's experts
    ep.Plan.of(wisp.plan_placement(trace, 4, 555, **COSTS)).save(tmp_path / "four.npz")
    args = ep.parse_args(["--trace", str(ESFT), "--sequences", "8", "--tokens", "4",
                          "--plan", str(tmp_path / "four.npz")])
    assert ep.load_trace(str(ESFT), 8, 4)[1] == 555  # docs/expert_parallel.md's slots
    with pytest.raises(ep.Refused, match="the plan is for 4 ranks but the group has 2"):
        ep.prepare_rank(args, 0, 2)
    small = wisp.Trace.synthetic(steps=50, seed=1, layers=26, experts=32, top_k=6)
    ep.Plan.of(wisp.plan_placement(small, 2, 400, **COSTS)).save(tmp_path / "other.npz")
    args.plan = tmp_path / "other.npz"
    with pytest.raises(ep.Refused, match="the plan has 26 layers x 32 experts but the trace "
                                         "26 x 64: its ids would fall outside the plan"):
        ep.prepare_rank(args, 1, 2)


def test_a_rank_failing_mid_step_ends_the_run(tmp_path):
    code, log, seconds = torchrun(2, "--trace", need_trace(ESFT), "--sequences", 8, "--tokens", 4,
                                  "--fail-rank", 1, "--fail-step", 2, "--timeout", 20)
    assert code != 0
    assert "rank 1: injected failure at step 2" in log
    assert seconds < 60
