# SPDX-License-Identifier: Apache-2.0
"""Baseline for bench/python: a faithful port of vLLM's CachedWeightProvider (PR #37190, newest
expert_map revision) on torch tensors, as /work/shared/design/ANCHORS.md §1a describes it:

- ``unique_ids = topk_ids.unique().tolist()`` (the device-to-host sync of every call);
- more unique ids than the capacity raises RuntimeError;
- a hit updates the policy (LRU: ``move_to_end``; LFRU: ``clock += 1; freq += 1; last = clock``);
- a miss takes ``free_slots.pop()`` or evicts, skipping every id of the request (LRU: the least
  recently used; LFRU: the lowest ``freq / (clock - last + 1)``), then copies w13 and w2 of the
  expert into the slot with ``copy_(..., non_blocking=True)`` and records it;
- the expert map is rebuilt in a host mirror (``fill_(-1)``, one write per requested id) and
  copied to the persistent device map.

One provider per layer, as vLLM builds them.
"""
from collections import OrderedDict

import torch


class CachedWeightProvider:
    def __init__(self, capacity, w13_weight, w2_weight, policy="lru", device="cpu"):
        self.capacity = capacity
        self.policy = policy
        pin = torch.cuda.is_available()
        self._w13 = w13_weight.pin_memory() if pin else w13_weight
        self._w2 = w2_weight.pin_memory() if pin else w2_weight
        experts = w13_weight.shape[0]
        self.buf_w13 = torch.empty((capacity,) + tuple(w13_weight.shape[1:]),
                                   dtype=w13_weight.dtype, device=device)
        self.buf_w2 = torch.empty((capacity,) + tuple(w2_weight.shape[1:]),
                                  dtype=w2_weight.dtype, device=device)
        self._lru = OrderedDict()  # LRU: id -> slot; LFRU: id -> [slot, freq, last]
        self._free_slots = list(range(capacity))
        self._clock = 0
        self._mapping_host = torch.full((experts,), -1, dtype=torch.int32)
        if pin:
            self._mapping_host = self._mapping_host.pin_memory()
        self._mapping = torch.full((experts,), -1, dtype=torch.int32, device=device)
        self.hits = 0
        self.misses = 0

    def _slot(self, eid):
        entry = self._lru[eid]
        return entry if self.policy == "lru" else entry[0]

    def _victim(self, needed):
        if self.policy == "lru":
            return next(k for k in self._lru if k not in needed)
        clock = self._clock
        return min((k for k in self._lru if k not in needed),
                   key=lambda k: self._lru[k][1] / (clock - self._lru[k][2] + 1))

    def prepare(self, topk_ids, unique_ids=None):
        if unique_ids is None:
            unique_ids = topk_ids.unique().tolist()
        if len(unique_ids) > self.capacity:
            raise RuntimeError(
                f"CachedWeightProvider: {len(unique_ids)} unique experts requested but "
                f"--moe-expert-cache-size={self.capacity}. Set --moe-expert-cache-size >= "
                f"{len(unique_ids)}.")
        needed = set(unique_ids)
        lru = self._lru
        for eid in unique_ids:
            if eid in lru:
                if self.policy == "lru":
                    lru.move_to_end(eid)
                else:
                    self._clock += 1
                    entry = lru[eid]
                    entry[1] += 1
                    entry[2] = self._clock
                self.hits += 1
                continue
            if self._free_slots:
                slot = self._free_slots.pop()
            else:
                victim = self._victim(needed)
                slot = self._slot(victim)
                del lru[victim]
            self.buf_w13[slot].copy_(self._w13[eid], non_blocking=True)
            self.buf_w2[slot].copy_(self._w2[eid], non_blocking=True)
            if self.policy == "lru":
                lru[eid] = slot
            else:
                self._clock += 1
                lru[eid] = [slot, 1, self._clock]
            self.misses += 1
        mapping = self._mapping_host
        mapping.fill_(-1)
        for eid in unique_ids:
            mapping[eid] = self._slot(eid)
        self._mapping.copy_(mapping)  # blocking: the mirror is rewritten by the next call
        return self._mapping
