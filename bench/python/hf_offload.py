# SPDX-License-Identifier: Apache-2.0
"""Decode tokens/s of a transformers MoE model whose experts do not all fit the device:
wisp.integrations.transformers.page_experts against accelerate's device_map offload (the
layer-offload baseline) at the same device memory, and against the unpaged model.

The model is built from a config in code with random weights (never downloaded): a real shape
(Qwen3-30B-A3B, Mixtral-8x7B) with --layers of its decoder layers, or the tiny shape the tests use.
Random weights route arbitrarily, so the experts' ids are forced from a routing trace (a .wtrace
given with --trace, or wisp's synthetic router of the same preset) through a pre-hook on every
experts module, for every arm alike: only the benchmark does this.

Arms, each on a fresh model:
- unpaged: the whole model on --device (skipped when it does not fit; --no-unpaged skips it);
- wisp-F: page_experts with F of the experts resident (--fractions), policy --policy;
- accelerate-F: infer_auto_device_map + dispatch_model with max_memory = the device bytes the
  wisp-F arm used (its non-expert weights plus slots), the rest offloaded to the host and copied in
  per forward. On the CPU there is no device to offload to: the arm is accelerate's cpu_offload
  (weights copied to the execution device per forward), which only checks the arm end to end.

Prints one JSON object (and writes it with --json): per arm tok/s (median of --repeats runs of
--tokens decode steps after a warm-up), the device bytes it held, and wisp's hit/miss counts.
Usage:
  python bench/python/hf_offload.py --shape qwen3-30b-a3b --layers 4 --device cuda \\
      --fractions 0.25 0.5 --json bench/results/<date>-hf-offload-qwen3.json
  python bench/python/hf_offload.py --shape tiny --device cpu            # end-to-end check
  python bench/python/hf_offload.py --overhead --shape tiny --device cpu --dtype float32 \
      --tokens 64 --repeats 15                                             # overhead target
"""
import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import transformers

import wisp
from wisp.integrations import transformers as wt


def config_of(shape: str, layers: int):
    if shape == "qwen3-30b-a3b":  # Qwen/Qwen3-30B-A3B's config.json
        return transformers.Qwen3MoeConfig(
            vocab_size=151936, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
            num_hidden_layers=layers, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
            num_experts=128, num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1,
            max_position_embeddings=4096, rope_theta=1e6, tie_word_embeddings=False), "qwen3-30b-a3b"
    if shape == "mixtral-8x7b":  # mistralai/Mixtral-8x7B-v0.1's config.json
        return transformers.MixtralConfig(
            vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=layers,
            num_attention_heads=32, num_key_value_heads=8, num_local_experts=8,
            num_experts_per_tok=2, max_position_embeddings=4096, rope_theta=1e6,
            tie_word_embeddings=False), "mixtral-8x7b"
    if shape == "tiny":
        return transformers.Qwen3MoeConfig(
            vocab_size=128, hidden_size=32, intermediate_size=64, moe_intermediate_size=32,
            num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
            num_experts=16, num_experts_per_tok=4, max_position_embeddings=512,
            tie_word_embeddings=False), "default"
    raise SystemExit(f"unknown --shape {shape!r}")


def build(config, dtype, seed=0):
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


class ForcedRouting:
    """Replaces the router's top-k ids (and weights: uniform) of every experts module by the
    trace's: one trace step per token, per layer in order, wrapping around."""

    def __init__(self, model, trace: wisp.Trace):
        self.ids = torch.from_numpy(trace.ids().astype(np.int64))
        self.modules = [m for m in model.modules() if wt._is_experts_module(m)]
        self.next = [0] * len(self.modules)
        self.handles = [m.register_forward_pre_hook(self._hook(i), with_kwargs=True)
                        for i, m in enumerate(self.modules)]

    def _hook(self, layer):
        def hook(module, args, kwargs):
            hidden, index, weights = args[0], args[1], args[2]
            tokens = index.shape[0]
            rows = (torch.arange(tokens) + self.next[layer]) % self.ids.shape[0]
            self.next[layer] += tokens
            forced = self.ids[rows, layer % self.ids.shape[1]].to(index.device)
            uniform = torch.full_like(weights, 1.0 / weights.shape[-1])
            return (hidden, forced, uniform) + tuple(args[3:]), kwargs
        return hook


def device_bytes():
    return torch.cuda.max_memory_allocated() if torch.cuda.is_available() else 0


def decode_rate(model, device, tokens, repeats, clock=time.perf_counter):
    prompt = torch.tensor([[1]], device=device)
    kwargs = dict(attention_mask=torch.ones_like(prompt), do_sample=False, eos_token_id=None,
                  pad_token_id=0, min_new_tokens=tokens, max_new_tokens=tokens)
    times = []
    with torch.no_grad():
        model.generate(prompt, **dict(kwargs, min_new_tokens=2, max_new_tokens=2))  # warm-up
        for _ in range(repeats):
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = clock()
            model.generate(prompt, **kwargs)
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(clock() - start)
    per_token = statistics.median(times) / tokens
    return {"tok_s": 1.0 / per_token, "ms_per_token": per_token * 1e3,
            "ms_per_token_runs": [t / tokens * 1e3 for t in times]}


def reset_memory():
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def run(args):
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    config, preset = config_of(args.shape, args.layers)
    spec_model = build(config, dtype)
    spec = wt.model_spec(spec_model, args.shape)
    resident = wt._resident_bytes(spec_model)
    del spec_model
    trace = wisp.Trace.read(args.trace) if args.trace else wisp.Trace.synthetic(
        preset, steps=max(4 * args.tokens, 256), seed=1, layers=spec.layers,
        experts=spec.experts, top_k=spec.top_k)
    result = {"shape": args.shape, "layers": spec.layers, "experts": spec.experts,
              "top_k": spec.top_k, "expert_bytes": spec.expert_bytes,
              "non_expert_bytes": resident, "dtype": args.dtype, "device": str(device),
              "device_name": torch.cuda.get_device_name() if device.type == "cuda"
              else platform.processor() or platform.machine(),
              "tokens": args.tokens, "repeats": args.repeats, "policy": args.policy,
              "trace": args.trace or f"synthetic {preset}", "torch": torch.__version__,
              "transformers": transformers.__version__, "wisp": wisp.__version__,
              "commit": args.commit, "arms": []}

    if not args.no_unpaged:
        reset_memory()
        try:
            model = build(config, dtype).to(device)
            ForcedRouting(model, trace)
            arm = {"arm": "unpaged", **decode_rate(model, device, args.tokens, args.repeats),
                   "device_bytes": device_bytes()}
        except torch.OutOfMemoryError:
            arm = {"arm": "unpaged", "error": "does not fit the device"}
        result["arms"].append(arm)
        model = None

    for fraction in args.fractions:
        capacity = max(spec.top_k, round(fraction * spec.experts))
        reset_memory()
        model = build(config, dtype)
        wt.page_experts(model, budget=capacity, policy=args.policy, device=device)
        ForcedRouting(model, trace)
        arm = {"arm": f"wisp-{fraction:g}", "capacity": capacity,
               **decode_rate(model, device, args.tokens, args.repeats),
               "device_bytes": device_bytes(),
               "planned_device_bytes": resident + capacity * spec.layers * spec.expert_bytes}
        arm["wisp_stats"] = model.wisp_stats().as_dict()
        result["arms"].append(arm)
        model = None

        if "accelerate" in args.arms:
            import accelerate
            reset_memory()
            model = build(config, dtype)
            if device.type == "cuda":
                budget = arm["planned_device_bytes"]
                index = device.index if device.index is not None else torch.cuda.current_device()
                device_map = accelerate.infer_auto_device_map(
                    model, max_memory={index: budget, "cpu": 1 << 40},
                    no_split_module_classes=model._no_split_modules)
                accelerate.dispatch_model(model, device_map=device_map, main_device=device)
                note = f"max_memory={budget} bytes on the device, the rest offloaded to the host"
            else:
                accelerate.cpu_offload(model, execution_device=device)
                note = "cpu_offload on the CPU: an end-to-end check, not the memory-matched baseline"
            ForcedRouting(model, trace)
            result["arms"].append({"arm": f"accelerate-{fraction:g}", "note": note,
                                   **decode_rate(model, device, args.tokens, args.repeats),
                                   "device_bytes": device_bytes()})
            model = None

    by_name = {a["arm"]: a for a in result["arms"]}
    for fraction in args.fractions:
        ours, theirs = by_name.get(f"wisp-{fraction:g}"), by_name.get(f"accelerate-{fraction:g}")
        if ours and theirs and "tok_s" in theirs:
            ours["speedup_vs_accelerate"] = ours["tok_s"] / theirs["tok_s"]
        if ours and "tok_s" in by_name.get("unpaged", {}):
            ours["time_ratio_vs_unpaged"] = by_name["unpaged"]["tok_s"] / ours["tok_s"]
    return result


def overhead(args):
    """The issue's overhead target: per-token decode time of the paged model with every expert
    resident over the unpaged model's, both on --device, timed alternately (--repeats rounds) so
    that a shared machine's load falls on both alike. Routing is the model's own."""
    device = torch.device(args.device)
    config, _ = config_of(args.shape, args.layers)
    dtype = getattr(torch, args.dtype)
    unpaged = build(config, dtype).to(device)
    paged = build(config, dtype)
    spec = wt.model_spec(paged, args.shape)
    wt.page_experts(paged, budget=spec.experts, policy=args.policy, device=device)
    # On the CPU with one torch thread, all the work is this thread's: its CPU time leaves out
    # the time other processes of a shared machine take from it.
    cpu_clock = device.type == "cpu" and torch.get_num_threads() == 1
    clock = time.thread_time if cpu_clock else time.perf_counter
    times = {"unpaged": [], "paged": []}
    for _ in range(args.repeats):
        for name, model in (("unpaged", unpaged), ("paged", paged)):
            times[name].append(decode_rate(model, device, args.tokens, 1, clock)["ms_per_token"])
    med = {k: statistics.median(v) for k, v in times.items()}
    stats = paged.wisp_stats()
    return {"mode": "overhead", "shape": args.shape, "layers": spec.layers,
            "experts": spec.experts, "top_k": spec.top_k, "dtype": args.dtype,
            "device": str(device), "threads": torch.get_num_threads(), "tokens": args.tokens,
            "clock": "thread CPU time" if cpu_clock else "wall",
            "rounds": args.repeats, "commit": args.commit,
            "ms_per_token_median": med, "ratio_median": med["paged"] / med["unpaged"],
            "ratio_of_minimums": min(times["paged"]) / min(times["unpaged"]),
            "ms_per_token_runs": times,
            "wisp_us_per_layer_call": stats.seconds.sum() / stats.calls.sum() * 1e6,
            "misses": int(stats.misses.sum()), "hits": int(stats.hits.sum())}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", default="tiny", choices=["tiny", "qwen3-30b-a3b", "mixtral-8x7b"])
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--fractions", type=float, nargs="+", default=[0.25, 0.5])
    p.add_argument("--arms", default="wisp,accelerate")
    p.add_argument("--no-unpaged", action="store_true")
    p.add_argument("--policy", default="lru")
    p.add_argument("--trace", help="a .wtrace to force routing from (default: synthetic)")
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--overhead", action="store_true",
                   help="only the overhead target: paged with every expert resident vs unpaged")
    p.add_argument("--json", help="also write the result here")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        args.commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                     text=True, cwd=os.path.dirname(__file__)).stdout.strip()
    except OSError:
        args.commit = ""
    result = overhead(args) if args.overhead else run(args)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
