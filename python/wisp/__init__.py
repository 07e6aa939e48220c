# SPDX-License-Identifier: Apache-2.0
"""wisp: Mixture-of-Experts memory management, from Python.

The classes and functions come from the C++ library through a nanobind extension (``wisp._wisp``):
every rule runs in C++, on the same headers C++ users include. See docs/python.md.

- Paging: :class:`Pager` (``prepare(layer, topk_ids)`` -> expert map + copy plan),
  :class:`RerouteTable`; for torch engines, ``wisp.integrations.torch.ExpertCache``.
- Traces: :class:`Trace` (``.wtrace``, ESFT, JSONL, synthetic; accesses as numpy columns); the
  importers return an :class:`ImportedTrace` (a Trace with an :class:`ImportReport`).
- Reuse: :func:`profile`, :class:`MissCurve`, :func:`reuse_distances`,
  :class:`DecayedHistogram`, :class:`SampledReuseCounter`.
- Simulation: :func:`simulate`.
- Expert parallelism: :func:`plan_placement` (an :class:`EpPlan`: a :class:`Placement` and each
  rank's slots), :class:`ReplicaChooser`, :func:`ep_batches` (examples/ep_torch runs them on
  torch.distributed ranks).
- Allocation: :class:`ModelSpec`, :func:`plan`, :func:`minimum_budget`.
"""
from typing import Iterable, List, Optional, Sequence, Union

from .errors import Error, FormatError, InfeasibleError, LogicError, OutOfMemoryError
from ._wisp import (
    COLD,
    POLICIES,
    CacheStats,
    ColumnChunks,
    DecayedHistogram,
    EpPlan,
    ImportedTrace,
    ImportReport,
    MissCurve,
    ModelSpec,
    Pager,
    Placement,
    Plan,
    PrepareResult,
    ReplicaChooser,
    RerouteTable,
    ReuseHistogram,
    ReuseProfile,
    SampledReuseCounter,
    TokenGroup,
    Trace,
    __version__,
    minimum_budget,
    model_presets,
    parse_byte_size,
    plan,
    profile,
    reuse_distances,
)
from . import _wisp

__all__ = [
    "COLD", "POLICIES", "CacheStats", "ColumnChunks", "DecayedHistogram", "Error", "FormatError",
    "ImportReport", "ImportedTrace", "InfeasibleError", "LogicError", "MissCurve", "ModelSpec",
    "OutOfMemoryError", "Pager", "Plan", "PrepareResult", "RerouteTable", "ReuseHistogram",
    "ReuseProfile", "SampledReuseCounter", "TokenGroup", "Trace", "__version__", "minimum_budget",
    "model_presets", "parse_byte_size", "plan", "profile", "reuse_distances", "simulate",
    # expert parallelism
    "EpPlan", "Placement", "ReplicaChooser", "ep_batches", "plan_placement",
]


def simulate(
    trace: Trace,
    policies: Union[str, Iterable[str]] = POLICIES,
    capacities: Union[int, Iterable[int]] = (),
    scope: str = "layer",
    *,
    expert_bytes: int = 0,
    bandwidth_gbps: float = 0.0,
    miss_latency_us: float = 0.0,
    protect_calls: bool = True,
    as_frame: bool = False,
    ranks: Optional[int] = None,
    batch: int = 16,
    local_experts: int = 0,
    hidden: int = 0,
    a2a_gbps: float = 153.0,
    a2a_latency_us: float = 10.0,
    hbm_gbps: float = 3350.0,
    tflops: float = 989.0,
    expert_params: int = 0,
):
    """Replays ``trace`` through each policy at each capacity (one C++ call; releases the GIL).

    ``policies`` are names of ``POLICIES`` (``"least-stale"`` is accepted too) or the hindsight
    references ``"hindsight_frequency"`` and ``"hindsight_reuse"``, which know the trace's
    statistics in advance (docs/policies.md); they are never in the default.

    Every (step, layer) request is one call whose experts cannot evict each other (unless
    ``protect_calls`` is False). ``capacities`` are slots per layer (scope ``"layer"``) or in
    total (``"global"``). The stall model is serial: ``stall_s = misses x (miss_latency_us +
    expert_bytes / bandwidth)``.

    Returns one dict per (capacity, policy), capacity-major, with the counters ``wisp sim --json``
    prints (``policy, scope, capacity, total_slots, accesses, hits, misses, miss_rate,
    collision_misses, evictions, bytes_moved, stall_s``) plus ``per_layer_misses`` (uint64 array).
    With ``as_frame=True``, a pandas DataFrame of the same rows (pandas must be installed).

    With ``ranks=G``, the expert-parallel simulator (``wisp sim --ranks``, docs/expert_parallel.md):
    ``capacities`` are total slots over all ranks, ``policies`` one policy for the wisp arm (default
    ``"decayed_frequency"``), ``bandwidth_gbps`` and ``miss_latency_us`` each rank's link (both
    needed with ``expert_bytes``); ``batch`` concurrent sequences, ``local_experts`` rows per rank
    of the planned arms (0: about 25% redundant), ``hidden``, ``a2a_gbps`` and ``a2a_latency_us``
    the all-to-all, ``hbm_gbps``, ``tflops`` and ``expert_params`` the compute. Returns one dict
    per (capacity, arm) in the order ep-lru, eplb-lru, wisp, ep-POLICY, with the fields of
    ``wisp sim --ranks --json``'s arms (per-rank ``slots, misses, hits, link_bytes, token_load,
    tokens_received`` as uint64 arrays, ``busy_s`` as float64).
    """
    names = [policies] if isinstance(policies, str) else list(policies)
    caps = [capacities] if isinstance(capacities, int) else list(capacities)
    if not caps:
        raise LogicError("simulate: give at least one capacity")
    if ranks is not None:
        if policies is POLICIES:
            names = ["decayed_frequency"]
        if len(names) != 1:
            raise LogicError(f"simulate(ranks=...): give one policy, got {names}")
        rows = _wisp._simulate_ranks(
            trace, ranks, batch, caps, local_experts, names[0], expert_bytes, bandwidth_gbps,
            miss_latency_us, hidden, a2a_gbps, a2a_latency_us, hbm_gbps, tflops, expert_params)
        return _frame(rows) if as_frame else rows
    rows: List[dict] = _wisp._simulate(
        trace, names, caps, scope, expert_bytes, bandwidth_gbps, miss_latency_us, protect_calls
    )
    return _frame(rows) if as_frame else rows


def plan_placement(
    trace: Trace,
    ranks: int,
    total_slots: int,
    *,
    arm: str = "wisp",
    batch: int = 16,
    local_experts: int = 0,
    expert_bytes: int = 0,
    bandwidth_gbps: float = 0.0,
    miss_latency_us: float = 0.0,
    hidden: int = 0,
    a2a_gbps: float = 153.0,
    a2a_latency_us: float = 10.0,
    hbm_gbps: float = 3350.0,
    tflops: float = 989.0,
    expert_params: int = 0,
) -> EpPlan:
    """The plan that arm ``arm`` of ``simulate(trace, capacities=[total_slots], ranks=ranks,
    ...)`` (``wisp sim --ranks``) replays under, for live ranks to run the same one.

    ``arm="wisp"``: ``plan_placement`` (wisp/parallel/planner.hpp) from the load of ``trace``'s
    serving steps (:func:`ep_batches`), with its split of the ``total_slots`` device slots;
    ``"eplb-lru"``: EPLB's placement, even slots; ``"ep-lru"``: vLLM's linear placement, even slots.
    The keywords are :func:`simulate`'s (the costs the planner and the :class:`ReplicaChooser`
    weigh; ``expert_bytes`` and ``bandwidth_gbps`` are required). Deterministic: every rank
    calling it with the same trace and arguments gets the same plan, without talking to the
    others. Raises :class:`LogicError` naming the values as :func:`simulate` does (for example
    ``total_slots`` below ``ranks x top_k``). Releases the GIL while planning (about a second on
    26 x 64 experts and 8 ranks).
    """
    return _wisp._plan_placement(
        trace, ranks, total_slots, batch, local_experts, arm, expert_bytes, bandwidth_gbps,
        miss_latency_us, hidden, a2a_gbps, a2a_latency_us, hbm_gbps, tflops, expert_params)


def ep_batches(trace: Trace, batch: int = 16) -> List["numpy.ndarray"]:
    """The serving steps of ``wisp sim --ranks``: ``batch`` concurrent sequences drawn from the
    trace's sequences in order, each step one token of each active sequence, a finished
    sequence's place taken by the next. Returns one int64 array of trace steps (tokens) per
    serving step, in order."""
    return _wisp._ep_batches(trace, batch)


def _frame(rows: List[dict]):
    try:
        import pandas
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("simulate(as_frame=True) needs pandas: pip install pandas") from e
    return pandas.DataFrame(rows)
