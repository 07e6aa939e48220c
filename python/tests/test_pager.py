# SPDX-License-Identifier: Apache-2.0
"""Pager from Python: results against a pure-Python LRU oracle and the C++ simulator, the
expert-map contract, zero-copy ids, lifetimes, groups, rerouting and bad input."""
import gc
import sys
import weakref

import numpy as np
import pytest

import wisp
from conftest import lru_calls, trace_calls

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(20260716)


def random_calls(n, experts, k, tokens=1):
    return [np.stack([RNG.choice(experts, size=k, replace=False) for _ in range(tokens)])
            for _ in range(n)]


def test_lru_matches_the_ordered_dict_oracle():
    calls = random_calls(2000, 32, 4, tokens=2)
    for capacity in (8, 12, 32):
        pager = wisp.Pager(1, 32, 4, capacity)
        for ids in calls:
            pager.prepare(0, ids)
        stats = pager.stats()
        assert (stats.hits, stats.misses) == lru_calls([c.ravel().tolist() for c in calls], capacity)


@pytest.mark.parametrize("policy", wisp.POLICIES)
@pytest.mark.parametrize("scope", ["layer", "global"])
def test_every_policy_agrees_with_the_simulator(small_trace, policy, scope):
    """Pager.prepare per (step, layer) call and wisp.simulate (another C++ path) count the same."""
    t = small_trace
    capacity = 6 if scope == "layer" else 20
    ids = t.ids()
    future = None
    if policy == "belady":
        calls = trace_calls(t, scope)
        future = [np.concatenate([list(dict.fromkeys(c)) for c in calls[cache]]).astype(np.int32)
                  for cache in sorted(calls)]
    pager = wisp.Pager(t.layers, t.experts, t.top_k, capacity, policy=policy, scope=scope,
                       future=future)
    assert pager.policy == policy and f"policy='{policy}'" in repr(pager)
    for step in range(t.steps):
        pager.begin_step()
        for layer in range(t.layers):
            r = pager.prepare(layer, ids[step, layer][None, :])
            assert r.hits + r.misses == t.top_k
    # The pager gives no token positions (every access is at position 0) and the simulator takes
    # them from the trace's sequences, so it replays the same routing as one sequence per step.
    unpositioned = wisp.Trace.from_arrays(ids, t.experts, sequence_starts=list(range(t.steps)))
    [row] = wisp.simulate(unpositioned, policy, capacity, scope)
    s = pager.stats()
    assert (s.hits, s.misses, s.collision_misses) == (row["hits"], row["misses"],
                                                      row["collision_misses"])


def test_expert_map_contract():
    pager = wisp.Pager(2, 16, 2, 4)
    pager.prepare(0, np.array([[1, 2]]))
    r = pager.prepare(0, np.array([[3, 1], [1, 5]]))
    assert r.experts.tolist() == [3, 1, 5]
    assert r.hits == 1 and r.misses == 2 and r.copy_plan.shape == (2, 2)
    assert r.copy_plan[:, 0].tolist() == [3, 5]  # misses in access order
    visible = {e for e in range(16) if r.expert_map[e] >= 0}
    assert visible == {1, 3, 5}  # exactly this call: 2 is resident but hidden
    assert pager.slot_of(0, 2) >= 0 and r.expert_map[2] == -1
    slots = [r.expert_map[e] for e in (1, 3, 5)]
    assert len(set(slots)) == 3 and all(0 <= s < 4 for s in slots)
    assert dict(r.copy_plan.tolist()) == {3: r.expert_map[3], 5: r.expert_map[5]}
    assert r.expert_map.dtype == np.int32 and r.copy_plan.dtype == np.int32
    assert pager.expert_map(1).tolist() == [-1] * 16  # other layers untouched


def test_out_receives_the_map_in_place():
    pager = wisp.Pager(1, 8, 2, 2)
    out = np.full(8, 7, dtype=np.int32)
    address = out.ctypes.data
    r = pager.prepare(0, np.array([[4, 6]]), out=out)
    assert out.ctypes.data == address and out.tolist() == r.expert_map.tolist()
    t = torch.full((8,), 7, dtype=torch.int32)
    r = pager.prepare(0, torch.tensor([[1, 6]]), out=t)
    assert t.tolist() == r.expert_map.tolist()
    with pytest.raises(TypeError):
        pager.prepare(0, np.array([[1, 2]]), out=np.zeros(8, dtype=np.int64))
    with pytest.raises(wisp.LogicError, match="holds 7 entries"):
        pager.prepare(0, np.array([[1, 2]]), out=np.zeros(7, dtype=np.int32))


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_ids_are_read_in_place(dtype):
    """The C++ pager sees the caller's own buffer: numpy arrays and torch CPU tensors."""
    pager = wisp.Pager(1, 64, 4, 8)
    a = np.array([[1, 2, 3, 4], [5, 6, 7, 8]], dtype=dtype)
    pager.prepare(0, a)
    assert pager._last_ids_address == a.ctypes.data
    t = torch.tensor([[9, 10, 11, 12]], dtype=getattr(torch, dtype))
    pager.prepare(0, t)
    assert pager._last_ids_address == t.data_ptr()
    view = np.arange(64, dtype=dtype).reshape(8, 8)[2:3, :4]  # a row slice: still contiguous
    pager.prepare(0, view)
    assert pager._last_ids_address == view.ctypes.data


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_non_contiguous_ids_give_the_same_result(dtype):
    base = np.arange(40, dtype=dtype).reshape(4, 10) % 16
    strided = base[:, ::3]  # [4, 4], column stride 3
    transposed = np.ascontiguousarray(base[:, :4].T).T  # Fortran order
    for weird in (strided, transposed, torch.from_numpy(base)[:, ::3]):
        a, b = wisp.Pager(1, 16, 4, 16), wisp.Pager(1, 16, 4, 16)
        ra = a.prepare(0, weird)
        rb = b.prepare(0, np.ascontiguousarray(np.asarray(weird)))
        assert ra.expert_map.tolist() == rb.expert_map.tolist()
        assert ra.copy_plan.tolist() == rb.copy_plan.tolist()
        assert a._last_ids_address != np.asarray(weird).ctypes.data  # gathered


def test_results_outlive_the_pager_and_later_prepares():
    pager = wisp.Pager(1, 8, 2, 2)
    r = pager.prepare(0, np.array([[1, 2]]))
    m, plan, experts = r.expert_map, r.copy_plan, r.experts
    before = (m.tolist(), plan.tolist(), experts.tolist())
    pager.prepare(0, np.array([[3, 4]]))  # evicts 1 and 2, rewrites the pager's buffers
    assert (m.tolist(), plan.tolist(), experts.tolist()) == before
    alive = weakref.ref(pager)
    del pager
    gc.collect()
    assert alive() is None  # results do not keep the pager alive: they own their data
    del r
    gc.collect()
    assert (m.tolist(), plan.tolist(), experts.tolist()) == before  # arrays keep the result
    assert not m.flags.writeable
    with pytest.raises(ValueError):
        m[0] = 5


def test_result_refcounts_are_balanced():
    pager = wisp.Pager(1, 8, 2, 2)
    ids = np.array([[1, 2]])
    ids_refs = sys.getrefcount(ids)
    r = pager.prepare(0, ids)
    assert sys.getrefcount(ids) == ids_refs  # ids are not retained
    r_refs = sys.getrefcount(r)
    arrays = [r.expert_map, r.copy_plan, r.experts]
    assert sys.getrefcount(r) == r_refs + 3  # each array holds its result
    del arrays
    gc.collect()
    assert sys.getrefcount(r) == r_refs
    t = torch.tensor([[3, 4]])
    t_refs = sys.getrefcount(t)
    pager.prepare(0, t)
    gc.collect()
    assert sys.getrefcount(t) == t_refs


def greedy_token_groups(rows, capacity):
    """Oracle: extend each group while its union fits (greedy is optimal for contiguous groups)."""
    groups, start, union = [], 0, set()
    for i, row in enumerate(rows):
        if len(union | set(row)) > capacity:
            groups.append((start, i, sorted(union)))
            start, union = i, set()
        union |= set(row)
    if rows:
        groups.append((start, len(rows), sorted(union)))
    return groups


def test_groups_split_a_wide_batch():
    pager = wisp.Pager(1, 16, 2, 3)
    ids = np.array([[0, 1], [2, 3], [4, 5], [1, 0], [0, 4]])
    with pytest.raises(wisp.LogicError, match="plan_token_groups"):
        pager.prepare(0, ids)
    groups = pager.plan_token_groups(0, ids)
    assert [(g.row_begin, g.row_end, g.experts.tolist()) for g in groups] == \
        greedy_token_groups(ids.tolist(), 3)
    for g in groups:
        r = pager.prepare_experts(0, g.experts)
        assert sorted(r.experts.tolist()) == g.experts.tolist()
    expert_groups = pager.plan_expert_groups(0, ids)
    assert sorted(np.concatenate(expert_groups).tolist()) == [0, 1, 2, 3, 4, 5]
    assert len(expert_groups) == 2 and all(len(g) <= 3 for g in expert_groups)
    with pytest.raises(wisp.LogicError, match="one token"):
        wisp.Pager(1, 16, 2, 2).plan_token_groups(0, np.array([[0, 1, 2]]))


def test_invalidate_resize_and_stats():
    pager = wisp.Pager(2, 8, 2, 4)
    r = pager.prepare(1, np.array([[3, 5]]))
    assert pager.invalidate(1, 3) and not pager.invalidate(1, 3)
    assert pager.expert_map(1)[3] == -1 and r.expert_map[3] >= 0  # the result is a snapshot
    report = pager.resize_layer(1, 2)
    assert report["evicted"].tolist() == [] and report["moves"].shape[1] == 3
    assert pager.capacity(1) == 2 and pager.capacity(0) == 4
    assert pager.stats(1).misses == 2 and pager.stats().accesses == 2
    with pytest.raises(wisp.LogicError, match="resize_pool"):
        pager.resize_pool(4)


@pytest.mark.parametrize("policy", ["reuse_probability", "learned_belady"])
@pytest.mark.parametrize("scope", ["layer", "global"])
def test_positions_make_the_pager_serve_as_the_simulator_replays(small_trace, policy, scope):
    """With each call's token position (steps since its sequence began), a position-aware policy
    in the Pager decides as wisp.simulate, which takes positions from the trace's sequences."""
    ids = small_trace.ids()
    starts = list(range(0, small_trace.steps, 37))
    t = wisp.Trace.from_arrays(ids, small_trace.experts, sequence_starts=starts)
    capacity = 6 if scope == "layer" else 20
    pager = wisp.Pager(t.layers, t.experts, t.top_k, capacity, policy=policy, scope=scope)
    for step in range(t.steps):
        pager.begin_step()
        position = step - max(s for s in starts if s <= step)
        for layer in range(t.layers):
            row = ids[step, layer][None, :]
            # An int or a numpy integer for the call, or one per row: the same position each way.
            positions = (position, np.int64(position), np.array([position]))[step % 3]
            pager.prepare(layer, row, positions=positions)
    [row] = wisp.simulate(t, policy, capacity, scope)
    s = pager.stats()
    assert (s.hits, s.misses) == (row["hits"], row["misses"])


@pytest.mark.parametrize("positions, match", [
    (np.array([1, 2, 3]), "positions"),  # neither 1 nor one per row (2 rows)
    (-1, "positions\\[0\\] = -1"),
    (np.array([0, 2**32]), "positions\\[1\\] = 4294967296"),
])
def test_bad_positions_raise_and_change_nothing(positions, match):
    pager = wisp.Pager(1, 16, 2, 4, policy="learned_belady")
    pager.prepare(0, np.array([[1, 2]]))
    before = (pager.stats(), pager.expert_map(0).tolist())
    with pytest.raises(wisp.LogicError, match=match):
        pager.prepare(0, np.array([[3, 4], [5, 6]]), positions=positions)
    assert (pager.stats(), pager.expert_map(0).tolist()) == before


@pytest.mark.parametrize("bad, error", [
    (np.array([1, 2]), wisp.LogicError),                   # 1-D
    (np.zeros((1, 2, 2), dtype=np.int64), wisp.LogicError),  # 3-D
    (np.array([[1.0, 2.0]]), TypeError),                  # float
    (np.array([[1, 2]], dtype=np.int16), TypeError),      # another integer width
    (np.array([[1, -2]]), wisp.LogicError),               # negative id
    (np.array([[1, 99]]), wisp.LogicError),               # id >= experts
    ([[1, 2]], TypeError),                                # not an array
])
def test_bad_ids_raise_and_change_nothing(bad, error):
    pager = wisp.Pager(1, 16, 2, 4)
    pager.prepare(0, np.array([[1, 2]]))
    before = (pager.stats(), pager.expert_map(0).tolist())
    with pytest.raises(error):
        pager.prepare(0, bad)
    assert (pager.stats(), pager.expert_map(0).tolist()) == before


def test_huge_shapes_are_refused():
    pager = wisp.Pager(1, 16, 2, 4)
    huge = np.lib.stride_tricks.as_strided(np.zeros(1, dtype=np.int32), shape=(2**31, 2),
                                           strides=(0, 0))
    with pytest.raises(wisp.LogicError, match="does not fit"):
        pager.prepare(0, huge)


def test_constructor_errors_name_the_values():
    with pytest.raises(wisp.LogicError, match="capacity 2 of layer 0"):
        wisp.Pager(1, 16, 4, 2)
    with pytest.raises(wisp.LogicError, match="unknown policy 'mru'"):
        wisp.Pager(1, 16, 4, 4, policy="mru")
    with pytest.raises(wisp.LogicError, match="belady needs `future`"):
        wisp.Pager(1, 16, 4, 4, policy="belady")
    assert wisp.Pager(1, 16, 4, 4, policy="least-stale").policy == "least_stale"
    assert wisp.Pager(1, 16, 4, 4, policy="lfu-history").policy == "lfu_history"  # '-' is '_'


def test_reroute_table():
    table = wisp.RerouteTable(2, 8, 8 + 4)
    table.assign(1, 3, 9)
    ids = np.array([[3, 4], [3, 5]], dtype=np.int64)
    out = table.apply(ids, np.array([-1, 1], dtype=np.int32))
    assert out.dtype == np.int64 and out.tolist() == [[3, 4], [9, 5]]
    assert table.row(1, 3) == 9 and table.table.shape == (2, 8)
    with pytest.raises(wisp.LogicError, match="already holds"):
        table.assign(0, 2, 9)


def test_positions_are_refused_on_an_expert_parallel_rank():
    pager = wisp.Pager(1, 4, 2, 4, expert_map=np.array([0, 1, 2, 3, -1, -1, -1, -1]), rank=0)
    with pytest.raises(wisp.LogicError, match="positions are not supported with an expert_map"):
        pager.prepare(0, np.array([[0, 1]]), positions=3)
    assert pager.stats().misses == 0
    assert pager.prepare(0, np.array([[0, 1]])).misses == 2
