# SPDX-License-Identifier: Apache-2.0
"""Reuse profiles, simulation and budget plans: against pure-Python oracles, and the same numbers
as the `wisp` command on the same trace."""
import collections
import json
import threading
import time

import numpy as np
import pytest

import wisp
from conftest import lru_calls, trace_calls


def stack_distances(keys):
    """Oracle: LRU stack distance of every access by a list scan (0 for cold)."""
    stack, out = [], []
    for k in keys:
        if k in stack:
            d = len(stack) - stack.index(k)
            stack.remove(k)
        else:
            d = 0
        stack.append(k)
        out.append(d)
    return out


def key_space(trace, scope):
    """Keys of one cache: a cache holds at most this many."""
    return trace.experts * (trace.layers if scope == "global" else 1)


def call_stack_distances(calls):
    """Oracle for granularity 'call': each key's distance in the stack as it was before its call
    (0 for cold), then the call's keys become most recent in call order."""
    stack, out = [], []
    for keys in calls:
        before = list(stack)
        for k in keys:
            out.append(len(before) - before.index(k) if k in before else 0)
        for k in keys:
            if k in stack:
                stack.remove(k)
            stack.append(k)
    return out


@pytest.mark.parametrize("scope", ["layer", "global"])
def test_distances_and_curve_match_the_oracle(small_trace, scope):
    """Granularity 'access': textbook per-access LRU."""
    t = small_trace
    cols = t.columns()
    d = wisp.reuse_distances(t, scope, "access")
    if scope == "global":
        expected = stack_distances((cols["layer"] * t.experts + cols["expert"]).tolist())
    else:
        expected = [0] * len(t)
        for layer in range(t.layers):
            at = np.flatnonzero(cols["layer"] == layer)
            for i, dist in zip(at, stack_distances(cols["expert"][at].tolist())):
                expected[i] = dist
    assert np.where(d == wisp.COLD, 0, d).tolist() == expected
    curve = wisp.profile(t, scope, "access").curve
    keys = cols["layer"] * t.experts + cols["expert"]
    for capacity in (1, 3, 8):
        if scope == "global":
            misses = lru_calls([[k] for k in keys.tolist()], capacity)[1]
        else:
            misses = sum(lru_calls([[e] for e in cols["expert"][cols["layer"] == l].tolist()],
                                   capacity)[1] for l in range(t.layers))
        assert curve.misses(capacity) == misses
    values = curve.values()
    assert values[0] == len(t) and values[-1] == curve.cold
    assert np.allclose(curve.miss_ratios(), values / len(t))
    target = curve.capacity_for_hit_ratio(0.5)
    assert curve.hit_ratio(target) >= 0.5 and (target == 0 or curve.hit_ratio(target - 1) < 0.5)
    capacities = list(range(1, min(curve.max_capacity + 1, key_space(t, scope)) + 1))
    rows = wisp.simulate(t, "lru", capacities, scope, protect_calls=False)
    assert [r["misses"] for r in rows] == [curve.misses(c) for c in capacities]


@pytest.mark.parametrize("scope", ["layer", "global"])
def test_call_granular_distances_and_curve_match_the_oracle(small_trace, scope):
    """Granularity 'call' (the default): a (step, layer) request's experts are one call, so the
    curve is the protected LRU of the pager and simulate(..., 'lru') at every capacity >= top_k."""
    t = small_trace
    d = wisp.reuse_distances(t, scope)
    assert np.array_equal(d, wisp.reuse_distances(t, scope, "call"))
    cols = t.columns()
    expected = [0] * len(t)
    calls = trace_calls(t, scope)
    for cache, cache_calls in calls.items():
        at = np.arange(len(t)) if scope == "global" else np.flatnonzero(cols["layer"] == cache)
        for i, dist in zip(at, call_stack_distances(cache_calls)):
            expected[i] = dist
    assert np.where(d == wisp.COLD, 0, d).tolist() == expected
    curve = wisp.profile(t, scope).curve
    assert np.array_equal(curve.values(), wisp.profile(t, scope, "call").curve.values())
    capacities = list(range(t.top_k, min(curve.max_capacity + 1, key_space(t, scope)) + 1))
    rows = wisp.simulate(t, "lru", capacities, scope)
    assert [r["misses"] for r in rows] == [curve.misses(c) for c in capacities]
    for capacity in (t.top_k, t.top_k + 2):
        oracle = sum(lru_calls(c, capacity)[1] for c in calls.values())
        assert curve.misses(capacity) == oracle
    # The two granularities differ on this trace: per-access LRU evicts a call's own experts.
    access = wisp.profile(t, scope, "access").curve
    assert any(access.misses(c) > curve.misses(c) for c in capacities)
    with pytest.raises(wisp.LogicError, match="granularity must be 'call' or 'access', got 'step'"):
        wisp.profile(t, scope, "step")
    with pytest.raises(wisp.LogicError, match="granularity must be 'call' or 'access'"):
        wisp.reuse_distances(t, scope, granularity="step")


def test_decayed_histogram_with_unit_bins_is_exact(small_trace):
    d = wisp.reuse_distances(small_trace, "layer").astype(np.int64)
    h = wisp.DecayedHistogram(wisp.DecayedHistogram.unit_edges(small_trace.experts), 1.0)
    h.record_many(d)
    h.end_burst()
    curve = wisp.profile(small_trace, "layer").curve
    warm = len(d) - curve.cold
    for c in (1, 4, 8):
        assert h.hits(c) == pytest.approx(warm - (curve.misses(c) - curve.cold))
    before = h.bins.tolist()
    with pytest.raises(wisp.LogicError, match="distance 0"):
        h.record_many(np.array([3, 0]))
    h.end_burst()
    assert np.allclose(h.bins, before)  # nothing of the failed batch was recorded


def test_shards_at_rate_one_is_exact(small_trace):
    t = small_trace
    cols = t.columns()
    keys = cols["layer"] * t.experts + cols["expert"]
    c = wisp.SampledReuseCounter(t.layers * t.experts, rate=1.0, adjust=False)
    c.access(keys)
    exact = wisp.profile(t, "global", "access").curve  # SHARDS sees single accesses
    est = c.estimate(20)
    assert np.allclose(est[1:], [exact.miss_ratio(cap) for cap in range(1, 21)])
    with pytest.raises(wisp.LogicError, match="key_space"):
        c.access(np.array([0, 10**6]))
    assert c.accesses == len(t)


@pytest.mark.parametrize("scope", ["layer", "global"])
def test_simulate_lru_matches_the_oracle(small_trace, scope):
    capacity = 5 if scope == "layer" else 24
    [row] = wisp.simulate(small_trace, ["lru"], [capacity], scope, expert_bytes=100,
                          bandwidth_gbps=1.0)
    calls = trace_calls(small_trace, scope)
    hits = misses = 0
    for cache_calls in calls.values():
        h, m = lru_calls(cache_calls, capacity)
        hits, misses = hits + h, misses + m
    assert (row["hits"], row["misses"]) == (hits, misses)
    assert row["bytes_moved"] == 100 * misses
    assert row["stall_s"] == pytest.approx(misses * 100 / 1e9)


@pytest.mark.parametrize("scope", ["layer", "global"])
def test_simulate_hindsight_references_agree_with_the_cli(cli, tmp_path, small_trace, scope):
    names = ["hindsight_frequency", "hindsight_reuse", "belady"]
    capacity = 5 if scope == "layer" else 24
    rows = {r["policy"]: r for r in wisp.simulate(small_trace, names, [capacity], scope)}
    trace = tmp_path / "t.wtrace"
    small_trace.write(trace)
    out = json.loads(cli("sim", trace, "--policy", ",".join(names), "--capacity", str(capacity),
                         "--scope", scope, "--json"))["results"]
    for cli_row in out:
        row = rows[cli_row["policy"]]
        assert (row["hits"], row["misses"]) == (cli_row["hits"], cli_row["misses"])
        assert rows["belady"]["misses"] <= row["misses"]
    with pytest.raises(wisp.LogicError, match="unknown policy 'hindsight'"):
        wisp.simulate(small_trace, "hindsight", [capacity], scope)


def test_simulate_as_frame(small_trace):
    pandas = pytest.importorskip("pandas")
    frame = wisp.simulate(small_trace, ["lru", "fifo"], [4, 8], as_frame=True)
    assert isinstance(frame, pandas.DataFrame) and len(frame) == 4


def test_cli_reuse_and_sim_agree(cli, esft_dir, esft):
    for scope, granularity in (("layer", "call"), ("global", "call"), ("layer", "access")):
        out = json.loads(cli("reuse", esft_dir, "--scope", scope, "--granularity", granularity,
                             "--capacities", "6,16,64", "--json"))
        assert out["granularity"] == granularity
        curve = wisp.profile(esft, scope, granularity).curve
        assert out["accesses"] == curve.accesses and out["cold_misses"] == curve.cold
        for point in out["miss_curve"]:
            assert point["misses"] == curve.misses(point["capacity"])
    out = json.loads(cli("sim", esft_dir, "--policy", "lru,least-stale,belady", "--capacity",
                         "8,16", "--scope", "layer", "--json", "--expert-bytes", "1000",
                         "--bandwidth-gbps", "10"))["results"]
    rows = wisp.simulate(esft, ["lru", "least-stale", "belady"], [8, 16], "layer",
                         expert_bytes=1000, bandwidth_gbps=10)
    for cli_row, row in zip(out, rows):
        for key in ("capacity", "accesses", "hits", "misses", "collision_misses", "evictions",
                    "bytes_moved", "total_slots"):
            assert cli_row[key] == row[key], key
        assert cli_row["stall_s"] == pytest.approx(row["stall_s"])


def test_cli_plan_agrees(cli, tmp_path, small_trace):
    spec = {"name": "tiny", "layers": 4, "experts": 16, "top_k": 3, "expert_bytes": 1 << 20,
            "kv_bytes_per_token": 4096, "block_tokens": 16}
    model = tmp_path / "tiny.json"
    model.write_text(json.dumps(spec))
    trace = tmp_path / "t.wtrace"
    small_trace.write(trace)
    out = json.loads(cli("plan", "--model", model, "--budget", "64MiB", "--trace", trace,
                         "--concurrency", "2", "--context", "1024", "--json"))
    p = wisp.plan(wisp.ModelSpec.read_json(model), "64MiB", small_trace, concurrency=2,
                  context=1024)
    for key in ("expert_cap", "kv_blocks", "kv_tokens", "expert_bytes", "kv_bytes"):
        assert out["choice"][key] == p.choice[key]
    assert out["choice"]["predicted_latency_s"] == pytest.approx(p.predicted_seconds)
    assert [(s["expert_cap"], s["feasible"]) for s in out["sweep"]] == \
        [(s["expert_cap"], s["feasible"]) for s in p.sweep]


def test_plan_choice_is_the_cheapest_feasible_sweep_point(small_trace):
    spec = wisp.ModelSpec("tiny", 4, 16, 3, 1 << 20, 4096)
    p = wisp.plan(spec, 48 << 20, small_trace, concurrency=2, context=1024)
    feasible = [s for s in p.sweep if s["feasible"]]
    best = min(feasible, key=lambda s: (s["predicted_seconds"], s["expert_cap"]))
    assert p.choice["expert_cap"] == best["expert_cap"] == p.knobs["per_layer_expert_cap"]
    assert p.choice["expert_bytes"] + p.choice["kv_bytes"] + p.choice["slack"] == 48 << 20
    with pytest.raises(wisp.InfeasibleError) as e:
        wisp.plan(spec, 1 << 20, small_trace, concurrency=2, context=1024)
    assert e.value.minimum_budget == wisp.minimum_budget(spec, 2, 1024) == 3 * 4 * (1 << 20) + \
        2 * 1024 * 4096
    assert isinstance(e.value, ValueError)
    with pytest.raises(wisp.LogicError, match="trace has"):
        wisp.plan("qwen3-30b-a3b", "80GiB", small_trace)
    assert wisp.parse_byte_size("1.5 GiB") == 3 << 29
    assert "qwen3-30b-a3b" in wisp.model_presets()


def test_long_calls_release_the_gil():
    """A second Python thread keeps running while simulate replays a trace in C++."""
    trace = wisp.Trace.synthetic()
    ticks = []
    done = threading.Event()

    def count():
        while not done.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    worker = threading.Thread(target=count)
    worker.start()
    time.sleep(0.05)
    before = len(ticks)
    start = time.perf_counter()
    wisp.simulate(trace, ["lfru", "belady"], [8, 16, 32], "global")
    end = time.perf_counter()
    done.set()
    worker.join()
    during = [t for t in ticks[before:] if start < t < end]
    # Holding the GIL would stall the thread for the whole call (about a second): not one tick.
    assert end - start > 0.2 and len(during) >= 20
