# SPDX-License-Identifier: Apache-2.0
"""wisp for engines that hold expert weights in torch tensors: :class:`ExpertCache`, a vLLM-style
expert weight provider (``CachedWeightProvider``) whose bookkeeping is wisp's :class:`~wisp.Pager`.

Host masters stay in (pinned, when CUDA is available) host memory; ``capacity`` device slots per
layer are allocated once; ``prepare(layer, topk_ids)`` makes the call's experts resident, issues
the copies of the misses in copy-plan order (on CUDA with ``copy_(..., non_blocking=True)`` on the
current stream; on the CPU as row memcpys, where ``copy_`` has no asynchrony to offer), and
updates a persistent ``expert_map`` tensor **in place** (its address never changes, so a captured
graph sees the new map). The fused-MoE kernel then reads
``buf_w13[layer][expert_map[e]]`` for every expert ``e`` whose map entry is >= 0 (vLLM's expert-map
convention: -1 means "not in this call").

torch is an optional dependency of wisp; importing this module needs it.
"""
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence

import numpy as np
import torch

from .. import LogicError, Pager

__all__ = ["ExpertCache", "ExpertWeightResult"]


@dataclass
class ExpertWeightResult:
    """Device-resident expert weights ready for a fused-MoE kernel (vLLM's ExpertWeightResult):
    the layer's slot buffers and its expert map (int32[experts], slot or -1)."""

    w1: torch.Tensor
    w2: torch.Tensor
    expert_map: torch.Tensor
    w1_scale: Optional[torch.Tensor] = None
    w2_scale: Optional[torch.Tensor] = None


def _host_master(t: Optional[torch.Tensor], pin: bool) -> Optional[torch.Tensor]:
    if t is None:
        return None
    t = t.detach().to("cpu").contiguous()
    return t.pin_memory() if pin else t


def _byte_rows(t: torch.Tensor) -> np.ndarray:
    """A [rows, bytes] uint8 numpy view of a contiguous CPU tensor (any dtype, bf16 included)."""
    return t.reshape(t.shape[0], -1).view(torch.uint8).numpy()


def _cpu_ids(topk_ids: torch.Tensor) -> np.ndarray:
    """The ids as a numpy view (zero-copy for CPU tensors; one device-to-host copy otherwise,
    the sync vLLM's ``unique().tolist()`` also pays)."""
    if topk_ids.device.type != "cpu":
        topk_ids = topk_ids.cpu()
    return topk_ids.numpy()


class ExpertCache:
    """Expert weights of ``layers`` MoE layers paged into ``capacity`` device slots per layer.

    Args:
        capacity: slots per layer (``scope="layer"``) or in the shared pool (``"global"``);
            at least ``top_k`` and at most the number of experts (vLLM: ``--moe-expert-cache-size``).
        w13_weight, w2_weight: host masters, ``[layers, experts, ...]`` (any trailing shape).
        w13_scale, w2_scale: optional per-expert scales, ``[layers, experts, ...]``.
        top_k: the model's k (every call's distinct experts must fit the capacity); default
            ``capacity``, i.e. the only check is the capacity itself.
        policy: a wisp eviction policy (``wisp.POLICIES``); vLLM's are ``"lru"`` and ``"lfru"``.
        scope: ``"layer"`` (one cache per layer, buffers ``[layers, capacity, ...]``) or
            ``"global"`` (one pool over every layer's experts, buffers ``[capacity, ...]``).
        device: where the slots live; default CUDA when available, else CPU.
        expert_map: on an expert-parallel rank, the engine's EP map (vLLM's ``expert_map``:
            ``int[global experts]``, global id -> local row or -1, or ``int[layers, global
            experts]``); the weights are then the rank's local rows ``[layers, local experts,
            ...]``, ``prepare`` takes the router's global ids and the persistent ``expert_map``
            is ``int32[layers, global experts]`` (-1 for every expert this rank does not compute).
            ``run`` splits by expert only.
        rank: the rank the map belongs to (for messages).

    ``prepare`` is not thread-safe (one engine thread per cache, like vLLM's provider).
    """

    def __init__(
        self,
        capacity: int,
        w13_weight: torch.Tensor,
        w2_weight: torch.Tensor,
        w13_scale: Optional[torch.Tensor] = None,
        w2_scale: Optional[torch.Tensor] = None,
        *,
        top_k: Optional[int] = None,
        policy: str = "lru",
        scope: str = "layer",
        device: Optional[torch.device] = None,
        expert_map=None,
        rank: int = 0,
    ):
        if w13_weight.dim() < 2 or w2_weight.dim() < 2:
            raise LogicError("ExpertCache: weights must be [layers, experts, ...] tensors")
        layers, experts = int(w13_weight.shape[0]), int(w13_weight.shape[1])
        for name, t in (("w2_weight", w2_weight), ("w13_scale", w13_scale), ("w2_scale", w2_scale)):
            if t is not None and tuple(t.shape[:2]) != (layers, experts):
                raise LogicError(
                    f"ExpertCache: {name} has leading shape {tuple(t.shape[:2])}, "
                    f"w13_weight has {(layers, experts)}")
        self.device = torch.device(device) if device is not None else torch.device(
            "cuda" if torch.cuda.is_available() else "cpu")
        cuda = self.device.type == "cuda"
        self.capacity = capacity
        if isinstance(expert_map, torch.Tensor):
            expert_map = expert_map.detach().to("cpu").numpy()
        self._pager = Pager(layers, experts, top_k if top_k is not None else capacity, capacity,
                            policy=policy, scope=scope, expert_map=expert_map, rank=rank)
        # The map's width: the global experts with an EP map, the local rows otherwise.
        map_experts = len(self._pager.expert_map(0))
        self._global = scope == "global"
        masters = [_host_master(t, cuda) for t in (w13_weight, w2_weight, w13_scale, w2_scale)]
        self._masters = [m for m in masters if m is not None]
        slots = (capacity,) if self._global else (layers, capacity)
        self._buffers = [torch.empty(slots + tuple(m.shape[2:]), dtype=m.dtype, device=self.device)
                         for m in self._masters]
        self._has_scales = (w13_scale is not None, w2_scale is not None)
        #: The :class:`wisp.PrepareResult` of the latest prepare (its hits, misses, copy plan).
        self.last_result = None
        # The persistent map: updated in place, never reallocated. The pager writes each call's
        # map straight into a host mirror row (pinned on CUDA), which is then copied to the device.
        self._map_host = torch.full((layers, map_experts), -1, dtype=torch.int32)
        if cuda:
            self._map_host = self._map_host.pin_memory()
            self._map_copied = [None] * layers  # event of each row's last host-to-device copy
        self._map_host_np = self._map_host.numpy()
        self.expert_map = self._map_host if not cuda else self._map_host.to(self.device)
        self._map_rows = list(self.expert_map)  # per-layer views, made once
        # On the CPU a copy is a row memcpy: numpy byte views of the masters and the slots do it
        # without torch's per-call dispatch (copy_ has no asynchrony to offer there).
        self._cpu_rows = None if cuda else [
            [(_byte_rows(m[layer]), _byte_rows(b if self._global else b[layer]))
             for m, b in zip(self._masters, self._buffers)] for layer in range(layers)]

    # ------------------------------------------------------------------ vLLM provider surface

    @property
    def buf_w13(self) -> torch.Tensor:
        return self._buffers[0]

    @property
    def buf_w2(self) -> torch.Tensor:
        return self._buffers[1]

    @property
    def buf_w13_scale(self) -> Optional[torch.Tensor]:
        return self._buffers[2] if self._has_scales[0] else None

    @property
    def buf_w2_scale(self) -> Optional[torch.Tensor]:
        return self._buffers[2 + self._has_scales[0]] if self._has_scales[1] else None

    @property
    def hits(self) -> int:
        return self._pager.stats().hits

    @property
    def misses(self) -> int:
        return self._pager.stats().misses

    @property
    def pager(self) -> Pager:
        """The pager doing the bookkeeping (stats, slot_of, begin_step, resize_layer...)."""
        return self._pager

    def prepare(self, layer: int, topk_ids: torch.Tensor) -> torch.Tensor:
        """Makes exactly the experts of ``topk_ids`` ([tokens, k], int32 or int64) resident in
        ``layer``'s slots and returns the layer's persistent expert map (int32[experts]: slot or
        -1), updated in place. The misses' copies are queued on the current stream before this
        returns (on CUDA; done, on the CPU). Raises :class:`wisp.LogicError` (nothing changed) when the call has more
        distinct experts than the capacity: split it with :meth:`plan_token_groups` /
        :meth:`plan_expert_groups`, or use :meth:`run`."""
        return self._apply(layer, self._pager.prepare(layer, _cpu_ids(topk_ids),
                                                      out=self._map_row(layer)))

    def prepare_experts(self, layer: int, experts) -> torch.Tensor:
        """Makes exactly ``experts`` (one group of a split) resident and visible."""
        if isinstance(experts, torch.Tensor):
            experts = _cpu_ids(experts)
        result = self._pager.prepare_experts(layer, np.asarray(experts))
        self._map_row(layer)[:] = result.expert_map
        return self._apply(layer, result)

    def result(self, layer: int) -> ExpertWeightResult:
        """The layer's buffers and persistent map, as vLLM's provider returns them."""

        def of_layer(buffer: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
            return buffer if buffer is None or self._global else buffer[layer]

        return ExpertWeightResult(of_layer(self.buf_w13), of_layer(self.buf_w2),
                                  self.expert_map[layer], of_layer(self.buf_w13_scale),
                                  of_layer(self.buf_w2_scale))

    def invalidate(self, layer: int, expert: int) -> bool:
        """Drops ``expert`` of ``layer`` from the cache (its slot is free again) and hides it from
        the layer's map. No-op if absent; returns whether it was resident."""
        was = self._pager.invalidate(layer, expert)
        self._map_row(layer)[expert] = -1
        self._publish_map(layer)
        return was

    def plan_token_groups(self, layer: int, topk_ids: torch.Tensor):
        """The fewest contiguous row groups whose expert unions fit the capacity."""
        return self._pager.plan_token_groups(layer, _cpu_ids(topk_ids))

    def plan_expert_groups(self, layer: int, topk_ids: torch.Tensor) -> List[np.ndarray]:
        """The batch's distinct experts in ceil(union / capacity) groups, resident ones first."""
        return self._pager.plan_expert_groups(layer, _cpu_ids(topk_ids))

    def run(self, layer: int, topk_ids: torch.Tensor,
            fn: Callable[[ExpertWeightResult, slice, bool], torch.Tensor],
            split: str = "token") -> torch.Tensor:
        """Runs ``fn(result, rows, first)`` for a batch, splitting it when its experts do not fit
        (vLLM's ``run_with_expert_cache``). ``split="token"``: one call per row group, outputs
        concatenated along dim 0 (identical to the uncached layer). ``split="expert"``: the whole
        batch once per expert group with the map hiding the other groups, outputs summed in fp32
        (each expert loaded at most once). ``first`` is True only for the first call (add shared
        experts there)."""
        if split == "token" and self._pager.rank is not None:
            raise LogicError("ExpertCache.run: with an expert_map, split='expert' only (rows routed "
                             "to other ranks have no local row)")
        if split == "token":
            outputs = []
            for i, group in enumerate(self.plan_token_groups(layer, topk_ids)):
                self.prepare_experts(layer, group.experts)
                outputs.append(fn(self.result(layer), slice(group.row_begin, group.row_end),
                                  i == 0))
            return torch.cat(outputs) if outputs else fn(self.result(layer), slice(0, 0), True)
        if split == "expert":
            total = None
            for i, group in enumerate(self.plan_expert_groups(layer, topk_ids)):
                self.prepare_experts(layer, group)
                out = fn(self.result(layer), slice(None), i == 0).float()
                total = out if total is None else total + out
            return total if total is not None else fn(self.result(layer), slice(None), True)
        raise LogicError(f"ExpertCache.run: split must be 'token' or 'expert', got {split!r}")

    # ------------------------------------------------------------------ internals

    def _map_row(self, layer: int) -> np.ndarray:
        """The host mirror row the pager writes; waits for its previous device copy, which may
        still be reading it."""
        if self.device.type == "cuda" and self._map_copied[layer] is not None:
            self._map_copied[layer].synchronize()
        return self._map_host_np[layer]

    def _publish_map(self, layer: int) -> None:
        if self.device.type == "cuda":
            self.expert_map[layer].copy_(self._map_host[layer], non_blocking=True)
            event = torch.cuda.Event()
            event.record()
            self._map_copied[layer] = event

    def _apply(self, layer: int, result) -> torch.Tensor:
        self.last_result = result
        if result.misses:
            if self._cpu_rows is not None:
                rows = self._cpu_rows[layer]
                for expert, slot in result.copy_plan.tolist():
                    for master, buffer in rows:
                        buffer[slot] = master[expert]
            else:
                for expert, slot in result.copy_plan.tolist():
                    for master, buffer in zip(self._masters, self._buffers):
                        dst = buffer[slot] if self._global else buffer[layer, slot]
                        dst.copy_(master[layer, expert], non_blocking=True)
        self._publish_map(layer)
        return self._map_rows[layer]
