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
    ImportedTrace,
    ImportReport,
    MissCurve,
    ModelSpec,
    Pager,
    Plan,
    PrepareResult,
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
):
    """Replays ``trace`` through each policy at each capacity (one C++ call; releases the GIL).

    Every (step, layer) request is one call whose experts cannot evict each other (unless
    ``protect_calls`` is False). ``capacities`` are slots per layer (scope ``"layer"``) or in
    total (``"global"``). The stall model is serial: ``stall_s = misses x (miss_latency_us +
    expert_bytes / bandwidth)``.

    Returns one dict per (capacity, policy), capacity-major, with the counters ``wisp sim --json``
    prints (``policy, scope, capacity, total_slots, accesses, hits, misses, miss_rate,
    collision_misses, evictions, bytes_moved, stall_s``) plus ``per_layer_misses`` (uint64 array).
    With ``as_frame=True``, a pandas DataFrame of the same rows (pandas must be installed).
    """
    names = [policies] if isinstance(policies, str) else list(policies)
    caps = [capacities] if isinstance(capacities, int) else list(capacities)
    if not caps:
        raise LogicError("simulate: give at least one capacity")
    rows: List[dict] = _wisp._simulate(
        trace, names, caps, scope, expert_bytes, bandwidth_gbps, miss_latency_us, protect_calls
    )
    if not as_frame:
        return rows
    try:
        import pandas
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("simulate(as_frame=True) needs pandas: pip install pandas") from e
    return pandas.DataFrame(rows)
