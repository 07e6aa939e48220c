from collections.abc import Sequence
import os
from typing import Annotated, overload

import numpy
import numpy.typing
from numpy.typing import NDArray


POLICIES: tuple = ...

class CacheStats:
    """
    Counters of a cache (or summed over caches): accesses, hits, misses, evictions and collision misses (a miss on a key evicted earlier in the same step).
    """

    @property
    def accesses(self) -> int: ...

    @property
    def hits(self) -> int: ...

    @property
    def misses(self) -> int: ...

    @property
    def evictions(self) -> int: ...

    @property
    def collision_misses(self) -> int: ...

    @property
    def hit_rate(self) -> float:
        """hits / accesses (0 with no access)"""

    def __eq__(self, arg: CacheStats, /) -> bool: ...

    def __repr__(self) -> str: ...

class PrepareResult:
    """
    What one Pager.prepare did. A value: its arrays are read-only and stay valid whatever the pager does next, and after the pager is gone.
    """

    @property
    def layer(self) -> int: ...

    @property
    def hits(self) -> int:
        """
        distinct experts of the call that were resident (hits + misses == len(experts))
        """

    @property
    def misses(self) -> int:
        """distinct experts that were not (== len(copy_plan))"""

    @property
    def expert_map(self) -> numpy.typing.NDArray:
        """
        int32[experts]: the slot of every expert of this call, -1 for every other expert (also for resident experts the call did not request)
        """

    @property
    def copy_plan(self) -> numpy.typing.NDArray:
        """
        int32[misses, 2]: (expert, slot) rows in access order; copy each expert's host master into its slot before the kernel runs
        """

    @property
    def experts(self) -> numpy.typing.NDArray:
        """int32[distinct]: the distinct experts of the call in first-seen order"""

    def __repr__(self) -> str: ...

class TokenGroup:
    """
    Rows [row_begin, row_end) of a batch and the sorted distinct experts they route to.
    """

    @property
    def row_begin(self) -> int: ...

    @property
    def row_end(self) -> int: ...

    @property
    def experts(self) -> numpy.typing.NDArray:
        """int32 array, sorted ascending"""

    def __repr__(self) -> str: ...

class Pager:
    """
    Per-layer expert paging (wisp::pager<Policy>): prepare(layer, topk_ids) makes exactly the experts of a call resident and visible, and returns the expert map and the copy plan for an unmodified fused-MoE kernel.

    policy is one of wisp.POLICIES ('least-stale' is accepted too) with the library's default parameters (decayed_frequency and predicted_next_use: a half-life of 256 forward passes; predicted_next_use estimates next uses from decayed routing rates, no routing predictor attached; reuse_probability and learned_belady read the token positions given to prepare); scope is 'layer' (one cache per layer, capacity = slots per layer) or 'global' (one pool over (layer, expert) keys). belady needs `future`: each cache's key sequence.

    On an expert-parallel rank, pass the engine's EP map: expert_map (vLLM's expert_map: int[global experts], global id -> local row or -1, or one per layer as int[layers, global experts]) and rank; `experts` is then the rank's local rows. prepare takes the router's global ids, pages the rank's rows of the call and returns a global expert map (-1 for every expert the rank does not compute); copy plans name local rows; prepare_experts, slot_of, invalidate, expert_map and plan_expert_groups speak global ids; plan_token_groups is not available. Not thread-safe: one thread at a time (calls hold the GIL).
    """

    def __init__(self, layers: int, experts: int, top_k: int, capacity: int, policy: str = 'lru', scope: str = 'layer', layer_capacities: Sequence[int] | None = None, max_tokens: int = 0, future: Sequence[numpy.typing.ArrayLike] | None = None, expert_map: numpy.typing.ArrayLike | None = None, rank: int = 0) -> None: ...

    def prepare(self, layer: int, topk_ids: numpy.typing.ArrayLike, out: numpy.typing.ArrayLike | None = None, positions: object | None = None, targets: numpy.typing.ArrayLike | None = None) -> PrepareResult:
        """
        Makes exactly the experts of topk_ids ([tokens, k], int32 or int64, numpy or torch CPU, any strides) of `layer` resident and visible; O(tokens x k).

        C-contiguous ids are read in place; other layouts are gathered once into a buffer the pager reuses. `out`, if given, is a writable int32[experts] array (numpy or torch CPU) that receives the expert map in place. `positions`, if given, are the token positions that position-aware policies read (reuse_probability, learned_belady): an int for the whole call (decode at batch 1) or a 1-D array with one per row (each distinct expert then carries the position of the first row routed to it; not with an expert_map). Raises LogicError (nothing changed) on a bad layer, shape, id or position count, or a call with more distinct experts than the capacity (split it with plan_token_groups / plan_expert_groups).

        With an expert_map, `targets` (int32 [tokens, k], the rank computing each pair: ReplicaChooser.choose's output) keeps only this rank's pairs, prepared as the expert-parallel simulator does (order_resident_first: resident experts first, then first seen), so a live rank counts what `wisp sim --ranks` counts; a pair sent here whose expert the rank holds no replica of is refused.
        """

    def prepare_experts(self, layer: int, experts: numpy.typing.ArrayLike) -> PrepareResult:
        """
        Makes exactly `experts` (1-D, duplicates allowed) of `layer` visible: one group of a split. Same semantics and errors as prepare over [len(experts), 1] ids.
        """

    def plan_token_groups(self, layer: int, topk_ids: numpy.typing.ArrayLike) -> list[TokenGroup]:
        """
        The fewest contiguous row groups of the batch whose expert unions fit the layer's capacity (token split). Does not touch the cache.
        """

    def plan_expert_groups(self, layer: int, topk_ids: numpy.typing.ArrayLike) -> list[numpy.typing.NDArray]:
        """
        The batch's distinct experts in ceil(union / capacity) groups, resident experts first (expert split). Does not touch the cache.
        """

    def reserve_tokens(self, tokens: int, k: int) -> None:
        """
        Grows the group planner so batches of tokens x k ids plan without allocation.
        """

    def begin_step(self) -> None:
        """
        Starts the next forward pass (step + 1); Least-Stale and collision counts use it.
        """

    @property
    def step(self) -> int: ...

    def invalidate(self, layer: int, expert: int) -> bool:
        """
        Drops `expert` of `layer` from its cache and hides it from the layer's map; returns whether it was resident.
        """

    def resize_layer(self, layer: int, capacity: int) -> dict[str, numpy.typing.NDArray]:
        """
        Per-layer scope: changes the layer's slot count. Returns {'evicted': int32[n], 'moves': int32[m, 3] of (expert, from_slot, to_slot)}: copy each move's bytes before freeing slots >= capacity. Strong guarantee.
        """

    def resize_pool(self, capacity: int) -> dict[str, numpy.typing.NDArray]:
        """
        Global scope: changes the pool's slot count; keys are layer * experts + expert.
        """

    @property
    def layers(self) -> int: ...

    @property
    def experts(self) -> int: ...

    @property
    def top_k(self) -> int: ...

    @property
    def scope(self) -> str: ...

    @property
    def policy(self) -> str: ...

    @property
    def rank(self) -> int | None:
        """The expert-parallel rank whose expert_map the pager took, or None."""

    def capacity(self, layer: int) -> int:
        """Slots available to `layer` (the pool's in global scope)."""

    def slot_of(self, layer: int, expert: int) -> int:
        """Slot of `expert` of `layer` if resident (visible or not), else -1."""

    def expert_map(self, layer: int) -> numpy.typing.NDArray:
        """A copy of the layer's current map (as its last prepare left it)."""

    def stats(self, layer: int | None = None) -> CacheStats:
        """Counters of the cache serving `layer`, or summed over every cache."""

    def __repr__(self) -> str: ...

class RerouteTable:
    """
    ExpertWeave's [adapters x experts] -> row table: adapter fine-tuned experts live as extra rows [experts, rows) of one expert tensor; adapter id -1 is the base model.
    """

    def __init__(self, adapters: int, experts: int, rows: int) -> None: ...

    def assign(self, adapter: int, expert: int, row: int) -> None: ...

    def row(self, adapter: int, expert: int) -> int: ...

    def apply(self, topk_ids: numpy.typing.ArrayLike, adapter_ids: numpy.typing.ArrayLike) -> numpy.typing.NDArray:
        """
        Reroutes [tokens, k] ids: out[t, j] = row(adapter_ids[t], topk_ids[t, j]). Returns a new array of the ids' dtype.
        """

    @property
    def adapters(self) -> int: ...

    @property
    def experts(self) -> int: ...

    @property
    def rows(self) -> int: ...

    @property
    def table(self) -> numpy.typing.NDArray:
        """A copy of the table, int32[adapters, experts]."""

class ColumnChunks:
    """Iterator over a trace's accesses in chunks."""

    def __iter__(self) -> ColumnChunks: ...

    def __next__(self) -> dict[str, numpy.typing.NDArray]: ...

class ImportReport:
    """
    What an importer found missing in a routing log and what it did about it (all zero for a complete log). A record is one (token, layer) entry: a JSONL line, or one token's top_k ids in an ESFT layer file.
    """

    @property
    def incomplete_tokens(self) -> int:
        """tokens lacking at least one layer"""

    @property
    def missing_records(self) -> int:
        """(token, layer) records those tokens lack"""

    @property
    def dropped_tokens(self) -> int:
        """on_incomplete='skip': incomplete tokens left out"""

    @property
    def dropped_records(self) -> int:
        """on_incomplete='skip': the records of those tokens, left out"""

    @property
    def partial_tokens(self) -> int:
        """on_incomplete='keep': incomplete tokens kept with the layers present"""

    @property
    def incomplete_sequences(self) -> int:
        """sequences (ESFT lines, JSONL groups) holding such tokens"""

    def __eq__(self, arg: ImportReport, /) -> bool: ...

    def __repr__(self) -> str: ...

class Trace:
    """
    A routing trace (wisp::routing_trace): which top_k of `experts` experts every MoE layer chose at every step (token), optional gate weights, and sequence starts. Immutable once made; replayed in canonical order: step, layer, then the top_k ids as recorded.

    A step may be partial (a token the routing log lacks some layers of, kept by an importer with on_incomplete='keep'): replays skip its missing (step, layer) rows, `present()` says which rows are held and `complete` is False.
    """

    @staticmethod
    def from_arrays(ids: Annotated[NDArray[numpy.int32], dict(shape=(None, None, None), order='C', device='cpu', writable=False)], experts: int, weights: Annotated[NDArray[numpy.float32], dict(shape=(None, None, None), order='C', device='cpu', writable=False)] | None = None, sequence_starts: Sequence[int] | None = None, present: Annotated[NDArray[numpy.bool_], dict(shape=(None, None), order='C', device='cpu', writable=False)] | None = None) -> Trace:
        """
        A trace from ids[steps, layers, top_k] (ids distinct within each row), optional float32 weights of the same shape, the steps where sequences begin, and optional present[steps, layers] (bool): False marks a row the step lacks, whose ids and weights are ignored. Round trip: from_arrays(t.ids(), t.experts, t.weights(), t.sequence_starts, t.present()) == t (weights only when t.has_weights).
        """

    @staticmethod
    def read(path: str | os.PathLike) -> Trace:
        """Reads a .wtrace file (validated: CRCs, sizes, ids, weights)."""

    @staticmethod
    def import_esft(path: str | os.PathLike, experts: int = 64, top_k: int = 6, on_incomplete: str = 'error') -> ImportedTrace:
        """
        Imports an ESFT expert_weights_<L>.txt folder (one file per MoE layer). A line whose files disagree on its token count is refused (on_incomplete='error', FormatError), or its tokens lacking some layers are left out ('skip') or kept with the layers present ('keep'); the result's `report` counts them. Releases the GIL.
        """

    @staticmethod
    def import_jsonl(path: str | os.PathLike, group_key: str = '', experts: int = 0, layers: int = 0, layer_key: str = 'layer', experts_key: str = 'experts', token_key: str = 'token_idx', weights_key: str = 'weights', on_incomplete: str = 'error') -> ImportedTrace:
        """
        Imports a JSON Lines routing log, one record per (token, layer); experts/layers 0 infer them from the data. A token lacking some layers is refused (on_incomplete='error', FormatError), left out ('skip') or kept with the layers present ('keep'); the result's `report` counts them. Releases the GIL.
        """

    @staticmethod
    def synthetic(preset: str = 'default', steps: int = 8222, seed: int = 1, **overrides) -> Trace:
        """
        The deterministic synthetic router: a preset (default, deepseek-v2-lite, qwen3-30b-a3b, mixtral-8x7b, olmoe-1b-7b, uniform) with any of its parameters overridden by keyword (layers, experts, top_k, zipf_exponent, zipf_spread, working_set, locality, coactivation, drift_rate, topics, mean_sequence_length, topic_shift_probability).
        """

    def write(self, path: str | os.PathLike) -> None:
        """Writes the trace as a .wtrace file (partial steps included)."""

    @property
    def layers(self) -> int: ...

    @property
    def experts(self) -> int: ...

    @property
    def top_k(self) -> int: ...

    @property
    def steps(self) -> int: ...

    @property
    def access_count(self) -> int:
        """
        top_k per (step, layer) row held: (steps * layers - missing_rows) * top_k
        """

    @property
    def has_weights(self) -> bool: ...

    @property
    def complete(self) -> bool:
        """True when every step holds every layer (no partial step)"""

    @property
    def missing_rows(self) -> int:
        """(step, layer) rows that partial steps lack"""

    def present(self) -> numpy.typing.NDArray:
        """
        bool[steps, layers]: whether each step holds each layer (all True for a complete trace).
        """

    @property
    def sequence_starts(self) -> numpy.typing.NDArray:
        """uint64 array: the steps where sequences begin"""

    def ids(self) -> numpy.typing.NDArray:
        """
        A copy of the ids, int32[steps, layers, top_k]; -1 in the rows partial steps lack.
        """

    def weights(self) -> numpy.typing.NDArray:
        """
        A copy of the gate weights, float32[steps, layers, top_k]; NaN in the rows partial steps lack. Raises LogicError when the trace has none.
        """

    def columns(self, start: int = 0, stop: int | None = None) -> dict[str, numpy.typing.NDArray]:
        """
        Accesses [start, stop) in canonical order as numpy columns: {'step': uint32, 'layer': int32, 'expert': int32} (the rows partial steps lack are skipped). O(stop).
        """

    def iter_columns(self, chunk: int = 1048576) -> ColumnChunks:
        """
        Iterates the accesses in chunks of `chunk` as columns (see columns()); no per-access Python object, O(accesses) in all.
        """

    def __len__(self) -> int: ...

    def __eq__(self, arg: Trace, /) -> bool:
        """
        Same shape, rows held, ids, weights and sequence starts (an import report does not count).
        """

    def __repr__(self) -> str: ...

class ImportedTrace(Trace):
    """
    A Trace made by an importer (Trace.import_esft, Trace.import_jsonl), with the importer's `report`: what the routing log lacked and what was done about it.
    """

    @property
    def report(self) -> ImportReport:
        """the ImportReport (all zero for a complete log)"""

COLD: int = 4294967295

class ReuseHistogram:
    """
    Counts of LRU stack distances plus cold (first-sight) accesses. A per-layer histogram is the sum of one histogram per layer.
    """

    @property
    def scope(self) -> str: ...

    @property
    def partitions(self) -> int: ...

    @property
    def keys_per_partition(self) -> int: ...

    @property
    def cold(self) -> int: ...

    @property
    def warm(self) -> int: ...

    @property
    def accesses(self) -> int: ...

    @property
    def max_distance(self) -> int: ...

    def count(self, distance: int) -> int: ...

    def counts(self) -> numpy.typing.NDArray:
        """
        uint64[max_distance + 1]: counts[d] accesses of distance d (counts[0] is 0).
        """

    def merge(self, other: ReuseHistogram) -> ReuseHistogram:
        """
        Adds every count of `other` (same shape: an independent stream or cache).
        """

    def __eq__(self, arg: ReuseHistogram, /) -> bool: ...

class MissCurve:
    """
    Misses of an LRU cache at every capacity, from one reuse histogram: misses(c) = cold + #{d > c}. Per-layer scope: c is the slots of each layer, misses summed over layers.
    """

    def __init__(self, histogram: ReuseHistogram) -> None: ...

    @property
    def accesses(self) -> int: ...

    @property
    def cold(self) -> int: ...

    @property
    def max_capacity(self) -> int:
        """smallest capacity at which only cold misses remain"""

    def misses(self, capacity: int) -> int: ...

    def miss_ratio(self, capacity: int) -> float: ...

    def hit_ratio(self, capacity: int) -> float: ...

    def capacity_for_hit_ratio(self, target: float) -> int | None:
        """
        Smallest capacity whose hit ratio is at least `target`, or None when cold misses make it unreachable.
        """

    def values(self) -> numpy.typing.NDArray:
        """uint64[max_capacity + 1]: misses at capacities 0..max_capacity."""

    def miss_ratios(self) -> numpy.typing.NDArray:
        """float64[max_capacity + 1]: miss ratios at capacities 0..max_capacity."""

class ReuseProfile:
    """The exact reuse profile of a trace."""

    @property
    def histogram(self) -> ReuseHistogram: ...

    @property
    def distinct_per_cache(self) -> int:
        """distinct keys of the largest cache (global: all keys)"""

    @property
    def distinct_total(self) -> int:
        """distinct (layer, expert) keys over all caches"""

    @property
    def curve(self) -> MissCurve:
        """The LRU miss curve of the histogram."""

def profile(trace: Trace, scope: str = 'layer', granularity: str = 'call') -> ReuseProfile:
    """
    Exact reuse profile of `trace` replayed in canonical order: scope 'layer' (one LRU cache per layer) or 'global' (one over all (layer, expert) keys). Granularity 'call' (the default, as `wisp reuse`): each (step, layer) request's top_k experts are one call that cannot evict its own experts, so the curve equals the misses of the pager and of simulate(trace, 'lru', c) at every capacity c >= top_k; 'access': every expert access on its own (textbook LRU, equal to simulate(..., protect_calls=False)). O(accesses log keys); releases the GIL.
    """

def reuse_distances(trace: Trace, scope: str = 'layer', granularity: str = 'call') -> numpy.typing.NDArray:
    """
    uint32[accesses]: the stack distance of every access in canonical order (wisp.COLD on first sight). Granularity 'call': each access's distance in the stack as it was before its (step, layer) call (profile()'s histogram counts these); 'access': per access. Releases the GIL.
    """

class DecayedHistogram:
    """
    A binned reuse-distance histogram with per-burst exponential decay (H <- decay * H + burst): the current marginal value of one more slot, for online controllers.
    """

    def __init__(self, edges: Sequence[int], decay: float) -> None: ...

    @staticmethod
    def unit_edges(max_distance: int) -> list[int]: ...

    @staticmethod
    def power_of_two_edges(max_distance: int) -> list[int]: ...

    def record(self, distance: int, weight: float = 1.0) -> None:
        """Adds `weight` accesses of `distance` (wisp.COLD = cold)."""

    def record_many(self, distances: numpy.typing.ArrayLike) -> None:
        """
        record() for each entry of a 1-D int64/int32 array (e.g. reuse_distances as int64).
        """

    def end_burst(self) -> None: ...

    def add_burst(self, burst: ReuseHistogram) -> None: ...

    @property
    def decay(self) -> float: ...

    @property
    def edges(self) -> numpy.typing.NDArray: ...

    @property
    def bins(self) -> numpy.typing.NDArray:
        """decayed mass per bin; the last is the overflow bin"""

    @property
    def cold(self) -> float: ...

    @property
    def warm_total(self) -> float: ...

    @property
    def bursts(self) -> int: ...

    @property
    def max_capacity(self) -> int: ...

    def hits(self, capacity: int) -> float: ...

    def warm_miss_ratio(self, capacity: int) -> float: ...

    def marginal(self, capacity: int) -> float: ...

    def marginals(self) -> numpy.typing.NDArray:
        """float64[max_capacity]: marginal(c) for c = 0..max_capacity-1."""

class SampledReuseCounter:
    """
    Fixed-rate SHARDS: exact stack distances of a hash-sampled subset of the keys, scaled back into a miss-ratio curve estimate.
    """

    def __init__(self, key_space: int, rate: float = 0.01, seed: int = 0, adjust: bool = True) -> None: ...

    def access(self, keys: numpy.typing.ArrayLike) -> None:
        """Records one access per entry of a 1-D integer key array."""

    @property
    def key_space(self) -> int: ...

    @property
    def rate(self) -> float: ...

    @property
    def adjusted(self) -> bool: ...

    @property
    def accesses(self) -> int: ...

    @property
    def sampled_accesses(self) -> int: ...

    @property
    def sampled_keys(self) -> int: ...

    def estimated_miss_ratio(self, capacity: int) -> float: ...

    def estimated_misses(self, capacity: int) -> float: ...

    def estimate(self, max_capacity: int) -> numpy.typing.NDArray:
        """
        float64[max_capacity + 1]: estimated miss ratios at capacities 0..max_capacity.
        """

class ModelSpec:
    """
    What an expert/KV split is made of: MoE layers, experts per layer, top-k, bytes of one expert, KV bytes per token and tokens per KV block.
    """

    def __init__(self, name: str, layers: int, experts: int, top_k: int, expert_bytes: int, kv_bytes_per_token: int, block_tokens: int = 16) -> None: ...

    @staticmethod
    def preset(name: str) -> ModelSpec:
        """A built-in preset (see wisp.model_presets())."""

    @staticmethod
    def read_json(path: str | os.PathLike) -> ModelSpec:
        """A model .json file (the direct form or published config fields)."""

    @property
    def name(self) -> str: ...

    @property
    def layers(self) -> int: ...

    @property
    def experts(self) -> int: ...

    @property
    def top_k(self) -> int: ...

    @property
    def expert_bytes(self) -> int: ...

    @property
    def kv_bytes_per_token(self) -> int: ...

    @property
    def block_tokens(self) -> int: ...

    @property
    def cap_unit_bytes(self) -> int:
        """one slot in every MoE layer: layers * expert_bytes"""

    @property
    def kv_block_bytes(self) -> int: ...

    def __eq__(self, arg: ModelSpec, /) -> bool: ...

    def __repr__(self) -> str: ...

def model_presets() -> list[str]:
    """Names of the built-in model presets."""

def parse_byte_size(text: str) -> int:
    """
    Bytes in a size as people write it ('24GiB', '1.5 GiB', '80GB', '8000000000'), exactly.
    """

def minimum_budget(model: ModelSpec | str, concurrency: int = 0, context: int = 0) -> int:
    """
    The smallest budget with a feasible split: top_k slots per layer plus the KV admission floor (concurrency sessions x context tokens).
    """

class Plan:
    """What plan() chose, and the sweep of caps."""

    @property
    def choice(self) -> dict[str, int]:
        """
        The minimum predicted-latency feasible split (ties to the smallest cap): {expert_cap, kv_blocks, kv_tokens, expert_bytes, kv_bytes, slack}.
        """

    @property
    def predicted_seconds(self) -> float: ...

    @property
    def max_feasible_cap(self) -> int:
        """feasible caps are [top_k, max_feasible_cap]"""

    @property
    def knobs(self) -> dict[str, int]:
        """The choice as the two engine settings."""

    @property
    def sweep(self) -> list[dict]:
        """
        One row per swept cap: the split, whether the expert pool fits the budget, whether it is feasible (fits and meets the KV floor), and its predicted seconds (NaN if it does not fit).
        """

def plan(model: ModelSpec | str, budget: int | str, trace: Trace, concurrency: int = 0, context: int = 0, bandwidth_gbps: float = 25.0, recompute: float = 0.0002, sweep_caps: Sequence[int] | None = None) -> Plan:
    """
    Splits a device budget (bytes or a size such as '24GiB') between expert slots and KV blocks (MV-WSA's offline configurator, what `wisp plan --trace` prints): the expert miss curve comes from `trace` (per-layer scope), the KV stream is the admission floor's working set read every round. Raises InfeasibleError (with .minimum_budget) when no cap is feasible. Releases the GIL for the profile and the sweep.
    """

class Placement:
    """
    Every MoE layer's logical experts and their replicas on `ranks` ranks (wisp::expert_placement): rank r holds, per layer, up to `local_experts` physical experts (rows 0..local_experts-1 of its expert tensors); vLLM describes a rank by its expert_map, int32[experts]: logical id -> local row or -1. Immutable; validated when made.
    """

    @staticmethod
    def linear(layers: int, experts: int, ranks: int) -> Placement:
        """
        vLLM's default placement: contiguous blocks of experts per rank, no redundancy.
        """

    @staticmethod
    def from_expert_maps(maps: numpy.typing.ArrayLike, local_experts: int) -> Placement:
        """
        A placement from vLLM-style maps, int[layers, ranks, experts] (what expert_maps() returns). Raises LogicError naming the values on a value outside [-1, local_experts), two experts on one local row, or an expert with no replica.
        """

    @property
    def layers(self) -> int: ...

    @property
    def experts(self) -> int: ...

    @property
    def ranks(self) -> int: ...

    @property
    def local_experts(self) -> int:
        """rows (physical experts) each rank holds per layer"""

    def expert_map(self, rank: int, layer: int) -> numpy.typing.NDArray:
        """
        vLLM's expert_map of (rank, layer): int32[experts], logical id -> local row or -1.
        """

    def rank_maps(self, rank: int) -> numpy.typing.NDArray:
        """
        int32[layers, experts]: `rank`'s expert_map of every layer (what ExpertCache and Pager take as expert_map=).
        """

    def expert_maps(self) -> numpy.typing.NDArray:
        """
        int32[layers, ranks, experts]: every map (what from_expert_maps reads back).
        """

    def replicas(self, layer: int, expert: int) -> numpy.typing.NDArray:
        """
        int32[replicas, 2]: (rank, local row) of each replica of the expert, by rank.
        """

    def physical_experts(self, layer: int) -> int:
        """replicas of every expert of the layer"""

    def check_expert_map(self, rank: int, expert_map: numpy.typing.ArrayLike) -> None:
        """
        Raises LogicError, naming the first (layer, expert) and both values, unless `expert_map` (int[experts] for every layer, or int[layers, experts]: an engine's EP map) is `rank`'s map in this placement. Touches no process group: call it before any collective, on every rank.
        """

    def __repr__(self) -> str: ...

class EpPlan:
    """
    The plan one arm of the expert-parallel simulator replays under (wisp.plan_placement): its placement, each rank's device slots (its pager's capacity), and the costs its ReplicaChooser weighs. The same inputs give the same plan on every rank.
    """

    @property
    def placement(self) -> Placement: ...

    @property
    def rank_slots(self) -> numpy.typing.NDArray:
        """
        int32[ranks]: each rank's device slots, one pool over its (layer, local row) keys; the `slots` of `wisp sim --ranks --json`
        """

    @property
    def copy_seconds(self) -> numpy.typing.NDArray:
        """
        float64[ranks]: one expert copy over each rank's link (the modelled link time)
        """

    @property
    def expert_seconds(self) -> float:
        """modelled compute of one expert active on a rank in a call"""

    @property
    def token_seconds(self) -> float:
        """modelled compute of one (token, expert) pair"""

    @property
    def batch(self) -> int:
        """concurrent sequences of the serving steps"""

    @property
    def total_slots(self) -> int: ...

    @property
    def arm(self) -> str: ...

    def __repr__(self) -> str: ...

class ReplicaChooser:
    """
    Residency- and load-aware replica choice (wisp::replica_chooser, docs/expert_parallel.md): the rank of each (token, expert) of a call. Deterministic: every rank running it on the same calls and the same published residency computes the same targets. O(tokens x k x replicas) per call, no allocation but the returned array; not thread-safe.
    """

    @overload
    def __init__(self, plan: EpPlan) -> None:
        """The chooser of a plan (its placement and costs)."""

    @overload
    def __init__(self, placement: Placement, copy_seconds: Sequence[float], expert_seconds: float, token_seconds: float) -> None:
        """
        A chooser over `placement` with the modelled costs: one expert copy per rank (copy_seconds[ranks]), an active expert, a (token, expert) pair.
        """

    def choose(self, layer: int, topk_ids: numpy.typing.ArrayLike, out: numpy.typing.ArrayLike | None = None) -> numpy.typing.NDArray:
        """
        The rank computing each pair of a call of `layer`: topk_ids is [tokens, k] int32 or int64 (numpy or torch CPU), read in place when C-contiguous; returns int32[tokens, k] (written into `out`, a writable C-contiguous int32 numpy array of tokens x k, and returned, when given). The whole call at once, as `wisp sim --ranks` does (replica_chooser::choose). Raises LogicError (nothing changed) on a bad layer, shape or id.
        """

    def set_resident(self, rank: int, layer: int, local: int, resident: bool) -> None:
        """
        Records whether row `local` of `rank` for `layer` is resident on its device (ranks publish it from their copy plans). O(1).
        """

    def resident(self, rank: int, layer: int, local: int) -> bool: ...

    def reset_load(self) -> None:
        """Forgets the long-run pair counts (the last tie-breaker)."""

    @property
    def ranks(self) -> int: ...
