# SPDX-License-Identifier: Apache-2.0
"""Expert parallelism from Python: Pager and ExpertCache on one EP rank take the engine's
expert_map (checked against a plain Pager over the rank's local rows, the global map composed by
hand), bad maps are refused naming the values, and simulate(ranks=...) agrees with
`wisp sim --ranks --json` and with its own accounting."""
import json

import numpy as np
import pytest

import wisp

EXPERTS, RANKS, LAYERS = 16, 4, 3


def linear_map(rank, experts=EXPERTS, ranks=RANKS):
    """vLLM's determine_expert_map(..., "linear"): contiguous blocks, remainder to the first."""
    base, extra = divmod(experts, ranks)
    local = base + (rank < extra)
    start = rank * base + min(rank, extra)
    m = np.full(experts, -1, dtype=np.int32)
    m[start:start + local] = np.arange(local, dtype=np.int32)
    return m


def test_pager_with_expert_map_matches_a_pager_over_local_rows():
    rng = np.random.default_rng(3)
    for rank in range(RANKS):
        m = linear_map(rank)
        rows = int((m >= 0).sum())
        ep = wisp.Pager(LAYERS, rows, 2, 3, scope="layer", expert_map=m, rank=rank)
        plain = wisp.Pager(LAYERS, rows, 2, 3, scope="layer")
        assert ep.rank == rank and plain.rank is None
        for _ in range(200):
            layer = int(rng.integers(LAYERS))
            ids = rng.integers(0, EXPERTS, size=(int(rng.integers(0, 4)), 2), dtype=np.int64)
            local = [int(m[e]) for e in ids.ravel() if m[e] >= 0]
            local = list(dict.fromkeys(local))  # distinct, first seen
            if len(local) > 3:
                continue
            got = ep.prepare(layer, ids)
            want = plain.prepare_experts(layer, np.array(local, dtype=np.int32))
            assert got.experts.tolist() == local
            assert got.copy_plan.tolist() == want.copy_plan.tolist()
            glob = np.full(EXPERTS, -1, dtype=np.int32)
            for row in local:
                glob[int(np.flatnonzero(m == row)[0])] = want.expert_map[row]
            assert got.expert_map.tolist() == glob.tolist()
            assert ep.expert_map(layer).tolist() == glob.tolist()
            for e in range(EXPERTS):
                assert ep.slot_of(layer, e) == (plain.slot_of(layer, int(m[e])) if m[e] >= 0 else -1)


def test_per_layer_maps_and_expert_groups_speak_global_ids():
    maps = np.stack([linear_map(1), np.roll(linear_map(1), 3), linear_map(1)])  # layer 1 differs
    ep = wisp.Pager(LAYERS, 4, 1, 2, expert_map=maps, rank=1)
    ids = np.array([[7], [4], [8], [5]], dtype=np.int32)  # layer 1 holds experts 7, 8, 9, 10
    groups = ep.plan_expert_groups(1, ids)
    assert sorted(np.concatenate(groups).tolist()) == [7, 8]
    r = ep.prepare_experts(1, groups[0])
    assert (r.expert_map >= 0).sum() == len(groups[0])
    with pytest.raises(wisp.LogicError, match="expert 4 of layer 1 is not held by rank 1"):
        ep.prepare_experts(1, np.array([4], dtype=np.int32))
    with pytest.raises(wisp.LogicError, match="plan_token_groups is not available"):
        ep.plan_token_groups(0, ids)


def test_bad_expert_maps_are_refused_naming_the_values():
    m = linear_map(0)
    dup = m.copy()
    dup[5] = 0
    with pytest.raises(wisp.LogicError, match="experts 0 and 5 both map to local id 0"):
        wisp.Pager(LAYERS, 4, 1, 2, expert_map=dup)
    high = m.copy()
    high[3] = 4
    with pytest.raises(wisp.LogicError, match=r"expert_map\[3\] = 4 is outside \[-1, local_experts = 4\)"):
        wisp.Pager(LAYERS, 4, 1, 2, expert_map=high)
    with pytest.raises(wisp.LogicError, match="expert_map has 2 rows for 3 layers"):
        wisp.Pager(LAYERS, 4, 1, 2, expert_map=np.stack([m, m]))
    ep = wisp.Pager(LAYERS, 4, 1, 2, expert_map=m)
    with pytest.raises(wisp.LogicError, match="is outside"):
        ep.prepare(0, np.array([[16]]))
    assert ep.stats().accesses == 0


def test_expert_cache_on_an_ep_rank():
    torch = pytest.importorskip("torch")
    from wisp.integrations.torch import ExpertCache

    rank, m = 2, linear_map(2)
    rows = int((m >= 0).sum())
    g = torch.Generator().manual_seed(1)
    w13 = torch.randn(1, rows, 8, 4, generator=g)
    w2 = torch.randn(1, rows, 4, 4, generator=g)
    cache = ExpertCache(2, w13, w2, top_k=1, expert_map=torch.tensor(m), rank=rank, device="cpu")
    ids = torch.tensor([[8], [0], [9], [8]])  # experts 8 and 9 live here; 0 on rank 0
    emap = cache.prepare(0, ids)
    assert emap.shape == (EXPERTS,)
    assert int(emap[0]) == -1
    for e in (8, 9):
        slot = int(emap[e])
        assert torch.equal(cache.buf_w13[0, slot], w13[0, int(m[e])])
        assert torch.equal(cache.buf_w2[0, slot], w2[0, int(m[e])])
    out = cache.run(0, ids, lambda res, rows_, first: torch.zeros(4, 1), split="expert")
    assert out.shape == (4, 1)
    with pytest.raises(wisp.LogicError, match="split='expert' only"):
        cache.run(0, ids, lambda res, rows_, first: torch.zeros(4, 1), split="token")


def test_simulate_ranks_accounting(small_trace):
    rows = wisp.simulate(small_trace, capacities=[24, 40], ranks=4, batch=4, expert_bytes=1000,
                         bandwidth_gbps=1.0, miss_latency_us=5, hidden=64)
    assert [r["name"] for r in rows] == ["ep-lru", "eplb-lru", "wisp", "ep-decayed_frequency"] * 2
    for r in rows:
        assert r["ranks"] == 4 and len(r["misses"]) == 4
        assert int(r["slots"].sum()) == r["total_slots"]
        assert (r["link_bytes"] == 1000 * r["misses"]).all()
        assert int(r["token_load"].sum()) == small_trace.access_count
        load = r["token_load"]
        assert r["load_imbalance"] == pytest.approx(load.max() / load.mean())
        assert r["slowest_rank_step_s"] * r["steps"] >= r["busy_s"].max() * (1 - 1e-12)
    assert rows[0]["x_ep_lru"] == 1.0 and rows[1]["x_eplb_lru"] == 1.0
    with pytest.raises(wisp.LogicError, match="give one policy"):
        wisp.simulate(small_trace, ["lru", "fifo"], [24], ranks=4, expert_bytes=1,
                      bandwidth_gbps=1)
    with pytest.raises(wisp.LogicError, match="total_slots 4 leaves a rank below top_k = 3"):
        wisp.simulate(small_trace, capacities=[4], ranks=4, expert_bytes=1, bandwidth_gbps=1)


def test_simulate_ranks_matches_the_cli(cli, esft_dir, esft):
    args = ["--ranks", 8, "--capacity", 555, "--expert-bytes", 17301504, "--bandwidth-gbps", 50,
            "--miss-latency-us", 10, "--hidden", 2048, "--json"]
    out = json.loads(cli("sim", esft_dir, *args))
    rows = wisp.simulate(esft, capacities=[555], ranks=8, expert_bytes=17301504,
                         bandwidth_gbps=50, miss_latency_us=10, hidden=2048)
    assert out["ranks"] == 8
    for cli_arm, row in zip(out["arms"], rows):
        assert cli_arm["name"] == row["name"]
        assert cli_arm["slowest_rank_step_s"] == pytest.approx(row["slowest_rank_step_s"])
        assert cli_arm["misses"] == row["misses"].tolist()
        assert cli_arm["link_bytes"] == row["link_bytes"].tolist()
