# SPDX-License-Identifier: Apache-2.0
"""wisp for Hugging Face transformers: page the experts of a loaded MoE model through a device
budget of expert slots (:func:`page_experts`), record its routing in wisp's trace format
(:func:`record_routing`) and size the budget from that trace with wisp's miss curves (:func:`plan`).

transformers (>= 5) computes every MoE block's experts in one ``...Experts`` module whose weights
are ``[experts, ...]`` tensors and whose forward is chosen through transformers'
``ExpertsInterface`` (``config._experts_implementation``). :func:`page_experts` registers an
implementation named ``"wisp"`` there and selects it for the model: the model's experts modules keep
their class and their place, but their weights move to host masters (pinned when ``device`` is CUDA)
held by one :class:`wisp.integrations.torch.ExpertCache`, whose :class:`wisp.Pager` makes the
router's experts of each call resident in the device slots (copies on a side stream on CUDA). The
block then runs the implementation the model had before (``grouped_mm``, ``batched_mm``, ``eager``...)
over the slot buffers with the router's ids mapped to slots, so it computes only the call's
experts, from their slots. Attention, the KV cache, ``generate()`` and sampling are transformers'
own and untouched.

Usage::

    model = AutoModelForCausalLM.from_pretrained(name, dtype=torch.bfloat16)   # on the CPU
    page_experts(model, budget=32, device="cuda")     # 32 expert slots per MoE layer on the GPU
    model.generate(...)
    model.wisp_stats()                                # hits, misses, bytes, seconds per layer
    unpage_experts(model)

transformers and torch are optional dependencies of wisp (``pip install wisp[transformers]``);
importing this module needs them.
"""
import copy
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Union

import numpy as np
import torch

from .. import LogicError, ModelSpec, Plan, Trace, parse_byte_size
from .. import plan as _wisp_plan
from .torch import ExpertCache

try:
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "wisp.integrations.transformers needs transformers >= 5 (its ExpertsInterface): "
        "pip install 'wisp[transformers]'") from e

__all__ = ["SUPPORTED", "PagingStats", "RoutingRecorder", "page_experts", "unpage_experts",
           "record_routing", "model_spec", "plan"]

#: The experts classes wisp pages, by transformers family (the tested ones; any other MoE class is
#: refused by name).
SUPPORTED: Dict[str, str] = {
    "MixtralExperts": "mixtral",
    "Qwen2MoeExperts": "qwen2_moe",
    "Qwen3MoeExperts": "qwen3_moe",
    "OlmoeExperts": "olmoe",
    "DeepseekV2Experts": "deepseek_v2",
    "DeepseekV3Experts": "deepseek_v3",
    "GptOssExperts": "gpt_oss",
}

IMPLEMENTATION = "wisp"  # the name registered in transformers' ExpertsInterface


def _is_experts_module(module: torch.nn.Module) -> bool:
    """An MoE experts module: a class named ``...Experts`` (transformers' convention) with a
    ``num_experts`` or expert weights (``down_proj``, ``experts``), or one wisp pages."""
    return type(module).__name__.endswith("Experts") and any(
        hasattr(module, a) for a in ("num_experts", "down_proj", "experts", "_wisp_layer"))


def _experts_modules(model: torch.nn.Module) -> List[torch.nn.Module]:
    found = [m for m in model.modules() if _is_experts_module(m)]
    if not found:
        raise LogicError(
            f"page_experts: {type(model).__name__} has no MoE block (no ...Experts module); "
            f"supported experts classes: {', '.join(SUPPORTED)}")
    bad = sorted({type(m).__name__ for m in found} - set(SUPPORTED))
    if bad:
        raise LogicError(
            f"page_experts: {type(model).__name__} has unsupported MoE experts class(es) "
            f"{', '.join(bad)}; supported: {', '.join(f'{c} ({f})' for c, f in SUPPORTED.items())}")
    return found


def _weight_names(module: torch.nn.Module) -> List[str]:
    """The module's per-expert tensors in ExpertCache's order: w13, w2, then the biases (carried in
    ExpertCache's per-expert scale slots: any [experts, ...] tensor is copied alike)."""
    up = "gate_up_proj" if getattr(module, "has_gate", True) else "up_proj"
    names = [up, "down_proj"]
    if getattr(module, "has_bias", False):
        names += [up + "_bias", "down_proj_bias"]
    return names


def _top_k(module: torch.nn.Module) -> int:
    config = getattr(module, "config", None)
    k = getattr(config, "num_experts_per_tok", None)
    if not isinstance(k, int) or k < 1:
        raise LogicError(f"page_experts: {type(module).__name__}'s config has no num_experts_per_tok")
    return k


def _default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _same_device(a: torch.device, b: torch.device) -> bool:
    if a.type != b.type:
        return False
    if a.type != "cuda":
        return True
    current = torch.cuda.current_device() if torch.cuda.is_available() else 0
    return (a.index if a.index is not None else current) == (b.index if b.index is not None else current)


@dataclass
class PagingStats:
    """What the paged experts did, per MoE layer (index = the block's order in the model).

    ``hits``/``misses`` count distinct experts of each call (wisp's Pager counters), ``bytes`` the
    host-to-device bytes copied for the misses, ``seconds`` the host time spent in wisp per layer
    (the pager's bookkeeping and issuing the copies; on the CPU the copies themselves), ``calls``
    the expert calls (a prefill whose experts do not fit the budget is split into several)."""

    hits: np.ndarray
    misses: np.ndarray
    bytes: np.ndarray
    seconds: np.ndarray
    calls: np.ndarray
    capacity: int
    scope: str
    policy: str

    @property
    def hit_rate(self) -> float:
        """Hits over accesses, all layers (0 with no access)."""
        total = int(self.hits.sum() + self.misses.sum())
        return float(self.hits.sum()) / total if total else 0.0

    def as_dict(self) -> dict:
        """Totals and per-layer lists, JSON-ready."""
        return {
            "capacity": self.capacity, "scope": self.scope, "policy": self.policy,
            "hits": int(self.hits.sum()), "misses": int(self.misses.sum()),
            "bytes": int(self.bytes.sum()), "seconds": float(self.seconds.sum()),
            "hit_rate": self.hit_rate,
            "per_layer": {k: getattr(self, k).tolist()
                          for k in ("hits", "misses", "bytes", "seconds", "calls")},
        }


class _SlotView:
    """What the model's own experts implementation sees while paged: the experts module with its
    weights replaced by the slot buffers and ``num_experts`` by the slot count (every other
    attribute, ``_apply_gate`` and ``act_fn`` included, is the module's)."""

    def __init__(self, module: torch.nn.Module, weights: Dict[str, torch.Tensor], slots: int):
        self.__dict__.update(weights)
        self.num_experts = slots
        self._module = module

    def __getattr__(self, name):
        return getattr(self.__dict__["_module"], name)


class _Paged:
    """The state page_experts attaches to a model (``model._wisp_paged``)."""

    def __init__(self, model, modules, budget, policy, scope, device):
        self.model = model
        self.modules = modules
        self.device = device
        self.scope = scope
        self.policy = policy
        first = modules[0]
        self.names = _weight_names(first)
        self.top_k = _top_k(first)
        self.experts = int(first.num_experts)
        layers = len(modules)
        for i, m in enumerate(modules):
            if type(m) is not type(first) or _weight_names(m) != self.names or any(
                    tuple(getattr(m, n).shape) != tuple(getattr(first, n).shape) for n in self.names):
                raise LogicError(
                    f"page_experts: MoE layer {i} ({type(m).__name__}) differs in expert weights "
                    f"from layer 0 ({type(first).__name__}); wisp pages models whose MoE layers "
                    "are alike")
        self.expert_bytes = sum(getattr(first, n)[0].numel() * getattr(first, n).element_size()
                                for n in self.names)
        self.capacity = _capacity(budget, scope, layers, self.experts, self.top_k, self.expert_bytes)
        for m in modules:
            for n in self.names:
                d = getattr(m, n).device
                if d.type not in ("cpu",) and not _same_device(d, device):
                    raise LogicError(
                        f"page_experts: {type(m).__name__}.{n} is on {d}, not on the host or "
                        f"device={device}")
        # Host masters [layers, experts, ...] (ExpertCache pins them on CUDA) and the slots: every
        # allocation happens before the model is touched, so a failure leaves it as it was.
        stacked = [torch.stack([getattr(m, n).detach().to("cpu") for m in modules])
                   for n in self.names]
        self.cache = ExpertCache(self.capacity, *stacked, top_k=self.top_k, policy=policy,
                                 scope=scope, device=device)
        del stacked
        self.slots = self.cache.capacity
        cuda = device.type == "cuda"
        self.copy_stream = torch.cuda.Stream(device=device) if cuda else None
        self.views = []
        for layer, m in enumerate(modules):
            r = self.cache.result(layer)
            buffers = [r.w1, r.w2, r.w1_scale, r.w2_scale][:len(self.names)]
            self.views.append(_SlotView(m, dict(zip(self.names, buffers)), self.slots))
        self.inner = []
        for m in modules:
            implementation = m.config._experts_implementation
            if implementation == IMPLEMENTATION:
                raise LogicError(f"page_experts: {type(self.model).__name__} is already paged by wisp")
            self.inner.append(ALL_EXPERTS_FUNCTIONS.get_interface(
                implementation or "eager", type(m).forward.__wrapped__))
        self.hits = np.zeros(layers, np.int64)
        self.misses = np.zeros(layers, np.int64)
        self.seconds = np.zeros(layers, np.float64)
        self.calls = np.zeros(layers, np.int64)
        self.saved = []     # (module, name, parameter) of the weights moved to the masters
        self.configs = []   # (experts module, its own config) to restore
        self.moved_rest = False
        self.hook = None

    # ------------------------------------------------------------------ the experts forward

    def forward(self, layer: int, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                top_k_weights: torch.Tensor) -> torch.Tensor:
        start = time.perf_counter()
        ids = top_k_index if top_k_index.device.type == "cpu" else top_k_index.cpu()
        cache = self.cache
        if ids.numel() <= self.slots:
            groups = None
        else:  # a prefill whose experts may not fit: contiguous row groups that do
            groups = [(g.row_begin, g.row_end) for g in cache.plan_token_groups(layer, ids)]
            if len(groups) == 1:
                groups = None
        view, inner = self.views[layer], self.inner[layer]
        if groups is None:
            expert_map = self._prepare(layer, ids)
            slots = expert_map[top_k_index].to(top_k_index.dtype)
            self.seconds[layer] += time.perf_counter() - start
            return inner(view, hidden_states, slots, top_k_weights)
        outputs = []
        for begin, end in groups:
            t0 = time.perf_counter()
            expert_map = self._prepare(layer, ids[begin:end])
            slots = expert_map[top_k_index[begin:end]].to(top_k_index.dtype)
            self.seconds[layer] += time.perf_counter() - t0
            outputs.append(inner(view, hidden_states[begin:end], slots, top_k_weights[begin:end]))
        return torch.cat(outputs)

    def _prepare(self, layer: int, ids: torch.Tensor) -> torch.Tensor:
        cache = self.cache
        if self.copy_stream is None:
            expert_map = cache.prepare(layer, ids)
        else:
            # The copies run on the side stream once the kernels that read the slots so far are
            # done; the block's kernels wait for them.
            compute = torch.cuda.current_stream(self.device)
            self.copy_stream.wait_stream(compute)
            with torch.cuda.stream(self.copy_stream):
                expert_map = cache.prepare(layer, ids)
            compute.wait_stream(self.copy_stream)
        result = cache.last_prepare
        self.hits[layer] += result.hits
        self.misses[layer] += result.misses
        self.calls[layer] += 1
        return expert_map

    def stats(self) -> PagingStats:
        return PagingStats(self.hits.copy(), self.misses.copy(), self.misses * self.expert_bytes,
                           self.seconds.copy(), self.calls.copy(), self.slots, self.scope,
                           self.policy)


def _capacity(budget, scope, layers, experts, top_k, expert_bytes) -> int:
    """The slot count of ``budget``: an int is slots (per layer, or in the pool for scope
    'global'); a byte size (int bytes given as a str such as '8GiB') is divided by one expert's
    bytes (and, per layer, by the layers)."""
    if scope not in ("layer", "global"):
        raise LogicError(f"page_experts: scope must be 'layer' or 'global', got {scope!r}")
    if isinstance(budget, str):
        size = parse_byte_size(budget)
        capacity = size // (expert_bytes * (layers if scope == "layer" else 1))
        what = f"budget={budget!r} ({size} bytes; one expert is {expert_bytes} bytes)"
    elif isinstance(budget, (int, np.integer)) and not isinstance(budget, bool):
        capacity = int(budget)
        what = f"budget={capacity} slots"
    else:
        raise LogicError(f"page_experts: budget must be a slot count (int) or a byte size (str), "
                         f"got {budget!r}")
    most = experts if scope == "layer" else layers * experts
    unit = "per layer" if scope == "layer" else f"in the pool of {layers} layers"
    if capacity < top_k:
        raise LogicError(
            f"page_experts: {what} gives {capacity} expert slots {unit}, below one call's "
            f"experts (top_k={top_k})")
    if capacity > most:
        raise LogicError(
            f"page_experts: {what} gives {capacity} expert slots {unit}, more than the "
            f"{most} experts there are")
    return capacity


def _wisp_experts_forward(self, hidden_states, top_k_index, top_k_weights):
    """transformers' ExpertsInterface entry "wisp": the paged experts of ``self``'s layer."""
    paged, layer = self._wisp_layer
    return paged.forward(layer, hidden_states, top_k_index, top_k_weights)


ALL_EXPERTS_FUNCTIONS.register(IMPLEMENTATION, _wisp_experts_forward)


def _begin_step(model, args, kwargs):
    model._wisp_paged.cache.pager.begin_step()


def page_experts(
    model: torch.nn.Module,
    budget: Union[int, str],
    *,
    policy: str = "lru",
    scope: str = "layer",
    device: Union[str, torch.device, None] = None,
) -> torch.nn.Module:
    """Pages the experts of every MoE block of ``model`` (a loaded transformers model) through
    a device budget of expert slots, in place; returns the model.

    Args:
        model: a transformers model whose MoE experts classes are in :data:`SUPPORTED`.
        budget: expert slots per MoE layer (``scope="layer"``) or in one pool over all layers
            (``"global"``), between ``top_k`` and the experts there are; or a byte size such as
            ``"12GiB"`` for the slots (divided by one expert's bytes, and per layer by the layers).
            :func:`plan` proposes one.
        policy: a wisp eviction policy (``wisp.POLICIES``).
        scope: ``"layer"`` or ``"global"``.
        device: where the slots and the rest of the model live; default CUDA when available, else
            the CPU. The model's other parameters must be on ``device`` or on the CPU (a model
            loaded on the host: they are moved to ``device``); its expert weights on the CPU or
            ``device``.

    The expert weights move to host masters (pinned on CUDA), out of the model's parameters; the
    slot buffers are allocated once; every MoE block then pages its router's experts through
    wisp's Pager (copies on a side stream on CUDA) and computes them from their slots with the
    experts implementation the model had. Adds ``model.wisp_stats()`` (a :class:`PagingStats`).

    Raises :class:`wisp.LogicError`, leaving the model unchanged, for a budget below ``top_k`` or
    above the experts, a model without MoE block or with an unsupported experts class, a model on
    another device, or a model already paged.
    """
    if getattr(model, "_wisp_paged", None) is not None:
        raise LogicError(f"page_experts: {type(model).__name__} is already paged by wisp "
                         "(unpage_experts first)")
    device = torch.device(device) if device is not None else _default_device()
    modules = _experts_modules(model)
    expert_params = {id(p) for m in modules for p in m.parameters(recurse=False)}
    rest = {t.device for t in list(model.parameters()) + list(model.buffers())
            if id(t) not in expert_params}
    others = sorted(str(d) for d in rest if not _same_device(d, device) and d.type != "cpu")
    if others:
        raise LogicError(f"page_experts: {type(model).__name__} has parameters on {', '.join(others)}; "
                         f"device={device} (the model must be on {device} or on the CPU)")
    paged = _Paged(model, modules, budget, policy, scope, device)
    # Commit: nothing below raises on valid input.
    for layer, m in enumerate(modules):
        for n in paged.names:
            paged.saved.append((m, n, m._parameters.pop(n)))
        m._wisp_layer = (paged, layer)
    for m in modules:
        # Each experts module dispatches on its own config's implementation: it gets a shallow
        # copy that selects "wisp", so the model's config (maybe shared with other models) and
        # its sub-configs stay as they are.
        paged.configs.append((m, m.config))
        own = copy.copy(m.config)
        own.__dict__["_experts_implementation_internal"] = IMPLEMENTATION
        m.config = own
    if any(not _same_device(d, device) for d in rest):
        model.to(device)
        paged.moved_rest = True
    paged.hook = model.register_forward_pre_hook(_begin_step, with_kwargs=True)
    model._wisp_paged = paged
    model.wisp_stats = paged.stats
    return model


def unpage_experts(model: torch.nn.Module) -> torch.nn.Module:
    """Undoes :func:`page_experts`: the expert weights are parameters again (on the device they
    had, with the masters' values), the experts implementation is the one the model had, and a
    model that was moved from the CPU is moved back. Returns the model."""
    paged = getattr(model, "_wisp_paged", None)
    if paged is None:
        raise LogicError(f"unpage_experts: {type(model).__name__} is not paged by wisp")
    paged.hook.remove()
    if paged.moved_rest:
        model.to("cpu")
    masters = paged.cache._masters
    index = {n: i for i, n in enumerate(paged.names)}
    for m, n, parameter in paged.saved:
        layer = m._wisp_layer[1]
        parameter.data = masters[index[n]][layer].to(parameter.device, copy=True)
        m._parameters[n] = parameter
    for m in paged.modules:
        del m._wisp_layer
    for m, config in paged.configs:
        m.config = config
    del model._wisp_paged
    del model.wisp_stats
    return model


# ---------------------------------------------------------------------- routing traces and sizing


class RoutingRecorder:
    """Records the router's top-k ids of every MoE layer, one trace step per token (rows of a
    call in order), a sequence starting at every forward with an empty KV cache. Use through
    :func:`record_routing`; :meth:`trace` gives a :class:`wisp.Trace` (``.write(path)`` for a
    ``.wtrace`` file)."""

    def __init__(self, model: torch.nn.Module):
        self.modules = _experts_modules(model)
        self.experts = int(self.modules[0].num_experts)
        self._layer = {id(m): i for i, m in enumerate(self.modules)}
        self._pending: List[Optional[np.ndarray]] = [None] * len(self.modules)
        self._steps: List[np.ndarray] = []   # [tokens, layers, k] per forward
        self._starts: List[int] = []
        self._tokens = 0
        self._handles = []
        self._model = model

    def _on_experts(self, module, args, kwargs):
        ids = args[1] if len(args) > 1 else next(iter(
            v for k, v in kwargs.items() if k in ("top_k_index", "router_indices")))
        layer = self._layer[id(module)]
        rows = ids.detach().to("cpu", torch.int32).numpy()
        previous = self._pending[layer]
        # A split call (several calls of one layer in a forward) appends its rows.
        self._pending[layer] = rows if previous is None else np.concatenate([previous, rows])

    def _on_model(self, model, args, kwargs):
        self._flush()
        cache = kwargs.get("cache", kwargs.get("past_key_values"))  # transformers >= 5.2: cache
        if cache is None or (hasattr(cache, "get_seq_length") and cache.get_seq_length() == 0):
            self._starts.append(self._tokens)

    def _flush(self):
        if all(p is None for p in self._pending):
            return
        if any(p is None for p in self._pending) or len({p.shape for p in self._pending}) != 1:
            raise LogicError("record_routing: a forward did not route the same tokens through "
                             "every MoE layer")
        block = np.stack(self._pending, axis=1)
        self._steps.append(block)
        self._tokens += block.shape[0]
        self._pending = [None] * len(self.modules)

    def __enter__(self):
        for m in self.modules:
            self._handles.append(m.register_forward_pre_hook(self._on_experts, with_kwargs=True))
        self._handles.append(self._model.register_forward_pre_hook(self._on_model, with_kwargs=True))
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        self._handles = []
        self._flush()
        return False

    def trace(self) -> Trace:
        """The recorded routing as a :class:`wisp.Trace` (steps = tokens)."""
        self._flush()
        if not self._steps:
            raise LogicError("record_routing: nothing recorded (run the model inside the block)")
        ids = np.ascontiguousarray(np.concatenate(self._steps), dtype=np.int32)
        starts = sorted(set(self._starts) | {0})
        return Trace.from_arrays(ids, self.experts, sequence_starts=starts)


def record_routing(model: torch.nn.Module) -> RoutingRecorder:
    """A context manager recording ``model``'s routing (paged or not)::

        with record_routing(model) as rec:
            model.generate(**inputs, max_new_tokens=64)
        rec.trace().write("routing.wtrace")
    """
    return RoutingRecorder(model)


def model_spec(model: torch.nn.Module, name: Optional[str] = None) -> ModelSpec:
    """The :class:`wisp.ModelSpec` of a transformers MoE model: its MoE layers, experts, top_k,
    one expert's bytes (every per-expert tensor, biases included) and the KV bytes per token of
    its attention layers (``2 x layers x key-value heads x head_dim x element size``)."""
    modules = _experts_modules(model)
    first = modules[0]
    paged = getattr(model, "_wisp_paged", None)
    if paged is not None:  # the weights are the masters'
        expert_bytes = paged.expert_bytes
    else:
        expert_bytes = sum(getattr(first, n)[0].numel() * getattr(first, n).element_size()
                           for n in _weight_names(first))
    config = first.config
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    if hasattr(config, "qk_nope_head_dim"):  # multi-head latent attention caches k and v widths
        head_dim = (config.qk_nope_head_dim + config.qk_rope_head_dim + config.v_head_dim) / 2
    element = model.get_input_embeddings().weight.element_size() if hasattr(
        model, "get_input_embeddings") else next(model.parameters()).element_size()
    kv = int(2 * config.num_hidden_layers * heads * head_dim * element)
    return ModelSpec(name or type(model).__name__, len(modules), int(first.num_experts),
                     _top_k(first), int(expert_bytes), max(kv, 1))


def _resident_bytes(model: torch.nn.Module) -> int:
    """Bytes of the parameters and buffers that stay on the device (everything but the experts)."""
    skip = {id(p) for m in _experts_modules(model) for p in m.parameters(recurse=False)}
    return sum(t.numel() * t.element_size() for t in list(model.parameters()) + list(model.buffers())
               if id(t) not in skip)


def plan(model: torch.nn.Module, device_bytes: Union[int, str], trace: Trace, *,
         concurrency: int = 1, context: int = 4096, bandwidth_gbps: float = 25.0) -> Plan:
    """Proposes the expert budget of ``model`` for ``device_bytes`` of device memory from a
    recorded routing ``trace`` (:func:`record_routing`), with wisp's planner (:func:`wisp.plan`:
    the per-layer LRU miss curve of the trace against the KV cache of ``concurrency`` sequences
    of ``context`` tokens). The model's non-expert weights, which stay on the device, are taken
    out of ``device_bytes`` first. ``plan(...).choice["expert_cap"]`` is the ``budget`` (slots
    per layer) to give :func:`page_experts` with ``scope="layer"``.

    Raises :class:`wisp.LogicError` when the weights alone exceed ``device_bytes`` or the trace
    does not match the model, and :class:`wisp.InfeasibleError` when no budget fits."""
    spec = model_spec(model)
    if (trace.layers, trace.experts, trace.top_k) != (spec.layers, spec.experts, spec.top_k):
        raise LogicError(
            f"plan: the trace has {trace.layers} layers x {trace.experts} experts, top_k "
            f"{trace.top_k}; {type(model).__name__} has {spec.layers} x {spec.experts}, top_k "
            f"{spec.top_k}")
    total = parse_byte_size(device_bytes) if isinstance(device_bytes, str) else int(device_bytes)
    resident = _resident_bytes(model)
    if resident >= total:
        raise LogicError(f"plan: device_bytes={total} does not hold the model's {resident} bytes "
                         "of non-expert weights")
    return _wisp_plan(spec, total - resident, trace, concurrency=concurrency, context=context,
                      bandwidth_gbps=bandwidth_gbps)
