# SPDX-License-Identifier: Apache-2.0
"""wisp.integrations.torch.ExpertCache against a port of vLLM's expert-cache provider tests
(tests/kernels/moe/test_expert_lru_cache.py, newest expert_map revision of PR #37190), on CPU
tensors (CUDA when available). Adaptations: weights are [layers, experts, ...] and prepare takes
the layer; over-capacity calls raise wisp.LogicError (a ValueError) instead of RuntimeError;
invalidating an id outside [0, experts) is an error rather than a no-op; the LRU/LFRU victim
tests run for both policies, each with its own expected victim."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import wisp  # noqa: E402
from wisp.integrations.torch import ExpertCache  # noqa: E402

HIDDEN, INTERMEDIATE = 16, 32
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def weights(experts, dtype=torch.float16, scales=False):
    g = torch.Generator().manual_seed(experts)
    w13 = torch.randn(1, experts, 2 * INTERMEDIATE, HIDDEN, generator=g).to(dtype)
    w2 = torch.randn(1, experts, HIDDEN, INTERMEDIATE, generator=g).to(dtype)
    if not scales:
        return w13, w2
    return w13, w2, torch.rand(1, experts, 1, generator=g), torch.rand(1, experts, 1, generator=g)


def topk(ids, dtype=torch.int32):
    return torch.tensor([ids], dtype=dtype)


def make(capacity, experts=8, policy="lru", **kw):
    w13, w2 = weights(experts)
    return ExpertCache(capacity, w13, w2, policy=policy, **kw), w13, w2


def resident(cache):
    return {e for e in range(cache.pager.experts) if cache.pager.slot_of(0, e) >= 0}


def check_slots(cache, w13, w2, experts):
    """Every expert's slot (through the map) holds that expert's bytes."""
    m = cache.expert_map[0].cpu()
    for e in experts:
        slot = int(m[e])
        assert slot >= 0
        assert torch.equal(cache.buf_w13[0, slot].cpu(), w13[0, e])
        assert torch.equal(cache.buf_w2[0, slot].cpu(), w2[0, e])


@pytest.mark.parametrize("experts", [8, 64])
@pytest.mark.parametrize("capacity", [1, 4])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cold_miss_and_warm_hit(experts, capacity, dtype):
    w13, w2 = weights(experts, dtype)
    cache = ExpertCache(capacity, w13, w2, device=DEVICE)
    ids = list(range(capacity))
    m = cache.prepare(0, topk(ids))
    assert (cache.misses, cache.hits) == (len(ids), 0)
    assert m.shape == (experts,) and m.dtype == torch.int32
    r = cache.result(0)
    assert r.w1.data_ptr() == cache.buf_w13[0].data_ptr() and r.expert_map.data_ptr() == m.data_ptr()
    check_slots(cache, w13, w2, ids)
    cache.prepare(0, topk(ids))
    assert (cache.misses, cache.hits) == (len(ids), len(ids))


@pytest.mark.parametrize("experts", [8, 64])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cache_full_equals_num_experts(experts, dtype):
    w13, w2 = weights(experts, dtype)
    cache = ExpertCache(experts, w13, w2, device=DEVICE)
    cache.prepare(0, topk(list(range(experts))))
    assert cache.misses == experts
    assert sorted(cache.pager.slot_of(0, e) for e in range(experts)) == list(range(experts))  # no free slot
    cache.prepare(0, topk(list(range(experts))))
    assert cache.hits == experts


@pytest.mark.parametrize("capacity", [1, 4])
def test_expert_map_points_at_slots(capacity):
    cache, _, _ = make(capacity, device=DEVICE)
    ids = [5, 2, 7, 0][:capacity]
    m = cache.prepare(0, topk(ids)).cpu().tolist()
    for e in range(8):
        assert m[e] == (cache.pager.slot_of(0, e) if e in ids else -1)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_accepts_either_topk_dtype(dtype):
    cache, _, _ = make(4, device=DEVICE)
    assert cache.prepare(0, topk([1, 3], dtype)).dtype == torch.int32


@pytest.mark.parametrize("policy, victim", [("lfru", 1), ("lru", 0)])
def test_lfru_prefers_evicting_low_frequency(policy, victim):
    cache, w13, w2 = make(2, policy=policy, device=DEVICE)
    cache.prepare(0, topk([0, 1]))
    for _ in range(4):
        cache.prepare(0, topk([0]))
    cache.prepare(0, topk([1]))
    cache.prepare(0, topk([2]))
    assert resident(cache) == {0, 1, 2} - {victim}
    check_slots(cache, w13, w2, [2])


@pytest.mark.parametrize("policy", ["lfru", "lru"])
def test_lfru_evicts_stale_high_freq_expert(policy):
    cache, _, _ = make(2, policy=policy, device=DEVICE)
    for _ in range(11):
        cache.prepare(0, topk([0]))
    for _ in range(51):
        cache.prepare(0, topk([1]))
    cache.prepare(0, topk([2]))  # LFRU scores: 0 -> 11/52 ~ 0.2, 1 -> 51/1
    assert resident(cache) == {1, 2}


def test_capacity_one_always_evicts():
    cache, _, _ = make(1, device=DEVICE)
    for e in range(5):
        cache.prepare(0, topk([e]))
    assert (cache.misses, cache.hits) == (5, 0)
    assert resident(cache) == {4}


def test_gpu_buffer_correct_after_eviction():
    cache, w13, w2 = make(4, device=DEVICE)
    cache.prepare(0, topk([0, 1, 2, 3]))
    slot0 = cache.pager.slot_of(0, 0)
    cache.prepare(0, topk([1, 2, 3]))
    cache.prepare(0, topk([7]))
    assert cache.pager.slot_of(0, 7) == slot0 and cache.pager.slot_of(0, 0) == -1
    check_slots(cache, w13, w2, [7])


def test_scale_lifecycle():
    w13, w2, s13, s2 = weights(8, scales=True)
    cache = ExpertCache(4, w13, w2, s13, s2, device=DEVICE)
    assert cache.buf_w13_scale.device.type == DEVICE and cache.buf_w2_scale is not None
    for ids in ([3, 6], [0, 1], [3, 6, 0], [7]):
        cache.prepare(0, topk(ids))
    assert resident(cache) == {0, 3, 6, 7}  # 1 was the least recently used
    slot = cache.pager.slot_of(0, 7)
    assert torch.equal(cache.buf_w13_scale[0, slot].cpu(), s13[0, 7])
    assert torch.equal(cache.buf_w2_scale[0, slot].cpu(), s2[0, 7])
    r = cache.result(0)
    assert r.w1_scale.data_ptr() == cache.buf_w13_scale[0].data_ptr()


def test_no_scales_when_not_provided():
    cache, _, _ = make(4, device=DEVICE)
    cache.prepare(0, topk([1]))
    r = cache.result(0)
    assert cache.buf_w13_scale is None and cache.buf_w2_scale is None
    assert r.w1_scale is None and r.w2_scale is None


def test_invalidate_frees_slot():
    cache, w13, w2 = make(2, device=DEVICE)
    cache.prepare(0, topk([0, 1]))
    slot = cache.pager.slot_of(0, 1)
    assert cache.invalidate(0, 1)
    assert 1 not in resident(cache) and int(cache.expert_map[0, 1]) == -1
    cache.prepare(0, topk([5]))  # takes the freed slot: nothing evicted
    assert cache.pager.slot_of(0, 5) == slot and resident(cache) == {0, 5}
    check_slots(cache, w13, w2, [5])


def test_invalidate_noop_when_absent():
    cache, _, _ = make(2, device=DEVICE)
    cache.prepare(0, topk([0]))
    assert cache.invalidate(0, 6) is False and resident(cache) == {0}
    with pytest.raises(wisp.LogicError, match="expert 99"):
        cache.invalidate(0, 99)


def test_overflow_raises():
    cache, _, _ = make(2, device=DEVICE)
    with pytest.raises(wisp.LogicError, match="routes to 4 experts but capacity is 2"):
        cache.prepare(0, topk([0, 1, 2, 3]))
    with pytest.raises(wisp.LogicError, match="4 distinct experts requested but capacity is 2"):
        cache.prepare(0, torch.tensor([[0, 1], [2, 3]]))
    assert cache.misses == 0 and resident(cache) == set()


def test_cpu_backing_is_pinned():
    cache, _, _ = make(2)
    for master in cache._masters:
        assert master.device.type == "cpu"
        assert master.is_pinned() == torch.cuda.is_available()


def test_batch_experts_survive_intra_batch_eviction():
    cache, w13, w2 = make(4, policy="lfru", device=DEVICE)
    for _ in range(50):
        cache.prepare(0, topk([0, 1, 2, 3]))
    m = cache.prepare(0, topk([4, 5, 6, 7])).cpu()
    assert all(int(m[e]) >= 0 for e in (4, 5, 6, 7))
    check_slots(cache, w13, w2, [4, 5, 6, 7])


def test_single_group_when_experts_fit():
    cache, _, _ = make(4, device=DEVICE)
    assert [g.tolist() for g in cache.plan_expert_groups(0, topk([3, 1, 0, 2]))] == [[0, 1, 2, 3]]


def test_groups_partition_all_experts():
    cache, _, _ = make(3, device=DEVICE)
    groups = cache.plan_expert_groups(0, torch.arange(8).reshape(4, 2))
    flat = sorted(e for g in groups for e in g.tolist())
    assert flat == list(range(8)) and all(len(g) <= 3 for g in groups) and len(groups) == 3


def test_group_count_is_independent_of_token_count():
    cache, _, _ = make(3, device=DEVICE)
    few = torch.arange(8).reshape(4, 2)
    many = few.repeat(50, 1)
    assert len(cache.plan_expert_groups(0, few)) == len(cache.plan_expert_groups(0, many)) == 3


def test_expert_map_hides_other_groups():
    cache, w13, w2 = make(3, device=DEVICE)
    for group in cache.plan_expert_groups(0, torch.arange(8).reshape(4, 2)):
        m = cache.prepare_experts(0, group).cpu()
        assert {e for e in range(8) if int(m[e]) >= 0} == set(group.tolist())
        check_slots(cache, w13, w2, group.tolist())


def moe_rows(result, ids, rows):
    """A stand-in fused-MoE kernel: per row, the sum over its experts of their first w13 row,
    read through the expert map (experts mapped to -1 contribute nothing)."""
    out = torch.zeros(len(ids[rows]), HIDDEN, dtype=torch.float32)
    m = result.expert_map.cpu()
    for i, row in enumerate(ids[rows].tolist()):
        for e in row:
            slot = int(m[e])
            if slot >= 0:
                out[i] += result.w1[slot, 0].float().cpu()
    return out


def test_group_execution_covers_every_pair():
    cache, w13, _ = make(3, device=DEVICE)
    ids = torch.tensor([[0, 1], [2, 3], [4, 5], [6, 7]])
    seen, firsts = [], []

    def run(result, rows, first):
        m = result.expert_map.cpu()
        seen.extend(e for e in range(8) if int(m[e]) >= 0)
        firsts.append(first)
        return moe_rows(result, ids, rows)

    out = cache.run(0, ids, run, split="expert")
    assert sorted(seen) == list(range(8)) and firsts == [True] + [False] * (len(firsts) - 1)
    expected = torch.stack([w13[0, row, 0].float().sum(0) for row in ids.tolist()])
    assert out.shape == (4, HIDDEN) and torch.allclose(out, expected)


def test_token_split_single_chunk_when_batch_fits():
    cache, _, _ = make(4, device=DEVICE)
    [group] = cache.plan_token_groups(0, torch.tensor([[0, 1], [2, 3], [1, 2]]))
    assert (group.row_begin, group.row_end, group.experts.tolist()) == (0, 3, [0, 1, 2, 3])


def test_token_split_covers_every_row_once():
    cache, w13, _ = make(3, device=DEVICE)
    ids = torch.tensor([[0, 1], [1, 2], [3, 4], [4, 0], [5, 6], [6, 7], [7, 5]])
    groups = cache.plan_token_groups(0, ids)
    assert groups[0].row_begin == 0 and groups[-1].row_end == len(ids)
    for a, b in zip(groups, groups[1:]):
        assert a.row_end == b.row_begin
    for g in groups:
        assert g.experts.tolist() == sorted(set(ids[g.row_begin:g.row_end].ravel().tolist()))
        assert len(g.experts) <= 3
    out = cache.run(0, ids, lambda r, rows, first: moe_rows(r, ids, rows), split="token")
    expected = torch.stack([w13[0, row, 0].float().sum(0) for row in ids.tolist()])
    assert torch.equal(out, expected)  # the token split is exact


def test_token_split_rejects_single_row_over_capacity():
    cache, _, _ = make(2, device=DEVICE)
    with pytest.raises(wisp.LogicError, match="one token .* routes to 3 experts"):
        cache.plan_token_groups(0, torch.tensor([[0, 1, 2]]))


@pytest.mark.parametrize("split", ["token", "expert"])
def test_both_splits_reach_every_expert(split):
    cache, _, _ = make(2, device=DEVICE)
    ids = torch.tensor([[0, 1], [2, 3], [4, 5]])
    loaded = set()
    cache.run(0, ids, lambda r, rows, first: loaded.update(
        e for e in range(8) if int(r.expert_map[e]) >= 0) or torch.zeros(1), split=split)
    assert loaded == set(range(6))


def test_expert_map_is_updated_in_place():
    cache, _, _ = make(4, device=DEVICE)
    address = cache.expert_map.data_ptr()
    m1 = cache.prepare(0, topk([1, 2]))
    m2 = cache.prepare(0, topk([3]))
    assert m1.data_ptr() == m2.data_ptr() == address
    assert int(m1[1]) == -1 and int(m1[3]) >= 0  # the same tensor shows the new call


def test_global_scope_shares_one_pool_between_layers():
    w13 = torch.randn(2, 8, 4, 4)
    w2 = torch.randn(2, 8, 4, 4)
    cache = ExpertCache(3, w13, w2, scope="global", device=DEVICE)
    cache.prepare(0, topk([1, 2]))
    m = cache.prepare(1, topk([1])).cpu()
    slot = int(m[1])
    assert cache.buf_w13.shape == (3, 4, 4) and torch.equal(cache.buf_w13[slot].cpu(), w13[1, 1])
    assert cache.misses == 3
