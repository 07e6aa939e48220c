# SPDX-License-Identifier: Apache-2.0
"""wisp.integrations.transformers on tiny random models of every supported family, on the CPU.

Oracles: the unpaged model (its greedy tokens and logits) and wisp.simulate over the routing
recorded from the paged run. Prompts are one token long, so every forward is one token and the
recorded trace's (step, layer) calls are exactly the pager's calls."""
import copy
import json
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import wisp  # noqa: E402
from wisp.integrations import transformers as wt  # noqa: E402

TOKENS = 32
# fp32 noise: the paged block runs the same implementation over slot buffers, so only the order
# of accumulation may differ (none for grouped_mm/batched_mm, which sum each token's k outputs in
# routing order).
ATOL, RTOL = 1e-5, 1e-5

COMMON = dict(vocab_size=128, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=128, tie_word_embeddings=False)


def _configs():
    from transformers import (DeepseekV2Config, DeepseekV3Config, GptOssConfig, MixtralConfig,
                              OlmoeConfig, Qwen2MoeConfig, Qwen3MoeConfig)
    mla = dict(kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=8, qk_nope_head_dim=8,
               v_head_dim=8, n_shared_experts=1, first_k_dense_replace=0, n_group=1,
               topk_group=1, moe_intermediate_size=32, intermediate_size=64)
    return {
        "mixtral": MixtralConfig(**COMMON, intermediate_size=48, num_hidden_layers=2,
                                 num_local_experts=8, num_experts_per_tok=2),
        "qwen2_moe": Qwen2MoeConfig(**COMMON, intermediate_size=64, moe_intermediate_size=32,
                                    shared_expert_intermediate_size=32, num_hidden_layers=3,
                                    num_experts=12, num_experts_per_tok=3, decoder_sparse_step=1,
                                    mlp_only_layers=[], norm_topk_prob=False),
        "qwen3_moe": Qwen3MoeConfig(**COMMON, intermediate_size=64, moe_intermediate_size=32,
                                    num_hidden_layers=2, num_experts=16, num_experts_per_tok=4,
                                    head_dim=8, norm_topk_prob=True),
        "olmoe": OlmoeConfig(**COMMON, intermediate_size=32, num_hidden_layers=2, num_experts=8,
                             num_experts_per_tok=2),
        "deepseek_v2": DeepseekV2Config(**dict(COMMON, num_key_value_heads=4), num_hidden_layers=2, n_routed_experts=8,
                                        num_experts_per_tok=2, **mla),
        "deepseek_v3": DeepseekV3Config(**dict(COMMON, num_key_value_heads=4), num_hidden_layers=2, n_routed_experts=8,
                                        num_experts_per_tok=2, **mla),
        "gpt_oss": GptOssConfig(**COMMON, intermediate_size=32, num_hidden_layers=2,
                                num_local_experts=8, num_experts_per_tok=2, head_dim=8,
                                sliding_window=16, layer_types=["sliding_attention",
                                                                "full_attention"]),
    }


CONFIGS = _configs()


def build(family, seed=0):
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(CONFIGS[family]))
    model.eval()
    # Random init leaves some weights (e.g. gpt-oss's router and biases) at zero: make every
    # expert and router weight random so that routing varies from token to token.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "experts" in name or "gate" in name or "router" in name:
                p.normal_(0.0, 0.5 if "bias" not in name else 0.1)
    return model


def greedy(model, prompt=(5,)):
    ids = torch.tensor([list(prompt)])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=TOKENS,
                             min_new_tokens=TOKENS, do_sample=False, output_logits=True,
                             return_dict_in_generate=True, eos_token_id=None, pad_token_id=0)
    return out.sequences[0, len(prompt):], torch.stack(out.logits)


@pytest.fixture(scope="module", params=list(wt.SUPPORTED.values()))
def family(request):
    model = build(request.param)
    tokens, logits = greedy(model)
    return request.param, model, tokens, logits


def capacities(model, scope):
    spec = wt.model_spec(model)
    if scope == "layer":
        return sorted({spec.top_k, (spec.top_k + spec.experts) // 2, spec.experts})
    return sorted({spec.top_k, spec.layers * spec.experts // 3})  # all experts: as per layer


@pytest.mark.parametrize("scope", ["layer", "global"])
def test_paged_generation_is_exact_and_misses_match_simulate(family, scope):
    name, reference, tokens, logits = family
    for capacity in capacities(reference, scope):
        model = copy.deepcopy(reference)
        wt.page_experts(model, budget=capacity, scope=scope, device="cpu")
        with wt.record_routing(model) as recorder:
            paged_tokens, paged_logits = greedy(model)
        assert torch.equal(paged_tokens, tokens), (name, scope, capacity)
        torch.testing.assert_close(paged_logits, logits, atol=ATOL, rtol=RTOL)
        trace = recorder.trace()
        assert trace.steps == TOKENS  # the prompt token, then TOKENS - 1 decode forwards
        stats = model.wisp_stats()
        [expected] = wisp.simulate(trace, "lru", capacity, scope)
        assert int(stats.misses.sum()) == expected["misses"], (name, scope, capacity)
        assert int(stats.hits.sum()) == expected["hits"]
        if scope == "layer":
            np.testing.assert_array_equal(stats.misses, expected["per_layer_misses"])
        assert int(stats.bytes.sum()) == expected["misses"] * wt.model_spec(reference).expert_bytes
        if capacity == wt.model_spec(reference).experts and scope == "layer":
            assert int(stats.misses.sum()) == len({(l, e) for l, e in zip(
                trace.columns()["layer"], trace.columns()["expert"])})  # only cold misses


def test_unpage_restores_the_model(family):
    name, reference, tokens, logits = family
    model = copy.deepcopy(reference)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    implementation = model.config._experts_implementation
    wt.page_experts(model, budget=wt.model_spec(model).top_k, device="cpu")
    assert not any("experts" in k and k.endswith("proj") for k in model.state_dict())
    assert model.config._experts_implementation == implementation  # the model's config is its own
    greedy(model)
    wt.unpage_experts(model)
    after = model.state_dict()
    assert before.keys() == after.keys()
    for k in before:
        assert torch.equal(before[k], after[k]), k
    assert not hasattr(model, "wisp_stats")
    again, again_logits = greedy(model)
    assert torch.equal(again, tokens)
    torch.testing.assert_close(again_logits, logits, atol=0, rtol=0)


@pytest.mark.parametrize("name, scope", [("qwen2_moe", "layer"), ("gpt_oss", "global")])
def test_long_prompt_splits_the_prefill(name, scope):
    """A prompt whose experts exceed the budget is split into token groups; still exact."""
    reference = build(name)
    prompt = tuple(range(3, 40))
    tokens, logits = greedy(reference, prompt)
    model = copy.deepcopy(reference)
    wt.page_experts(model, budget=wt.model_spec(model).top_k, scope=scope, device="cpu")
    paged_tokens, paged_logits = greedy(model, prompt)
    assert torch.equal(paged_tokens, tokens)
    torch.testing.assert_close(paged_logits, logits, atol=ATOL, rtol=RTOL)
    stats = model.wisp_stats()
    assert (stats.calls > TOKENS).all()  # the prefill took several calls per layer


# The policies that read no token positions and no future (the pager is given neither here).
STEP_POLICIES = [p for p in wisp.POLICIES
                 if p not in ("reuse_probability", "learned_belady", "belady", "lru")]


@pytest.mark.parametrize("scope", ["layer", "global"])
def test_misses_match_simulate_for_every_policy(scope):
    """Each forward is one step of the pager (begin_step), as each trace step is one of
    simulate's: the policies that count steps (least_stale, decayed_frequency...) agree too."""
    reference = build("qwen3_moe")
    capacity = 6 if scope == "layer" else 12
    for policy in STEP_POLICIES:
        model = copy.deepcopy(reference)
        wt.page_experts(model, budget=capacity, policy=policy, scope=scope, device="cpu")
        with wt.record_routing(model) as recorder:
            greedy(model)
        [expected] = wisp.simulate(recorder.trace(), policy, capacity, scope)
        stats = model.wisp_stats()
        assert (int(stats.hits.sum()), int(stats.misses.sum())) == (
            expected["hits"], expected["misses"]), policy


def model_state(model):
    return ({k: (v.data_ptr(), v.device) for k, v in model.state_dict().items()},
            model.config._experts_implementation, hasattr(model, "wisp_stats"))


def test_bad_budget_is_refused_naming_sizes():
    model = build("mixtral")
    state = model_state(model)
    with pytest.raises(wisp.LogicError, match=r"1 expert slots per layer.*top_k=2"):
        wt.page_experts(model, budget=1, device="cpu")
    with pytest.raises(wisp.LogicError, match=r"9 expert slots per layer.*8 experts"):
        wt.page_experts(model, budget=9, device="cpu")
    with pytest.raises(wisp.LogicError, match=r"1 expert slots in the pool.*top_k=2"):
        wt.page_experts(model, budget=1, scope="global", device="cpu")
    with pytest.raises(wisp.LogicError, match=r"scope"):
        wt.page_experts(model, budget=4, scope="pool", device="cpu")
    with pytest.raises(wisp.LogicError, match=r"policy|unknown"):
        wt.page_experts(model, budget=4, policy="nope", device="cpu")
    assert model_state(model) == state


def test_byte_budget():
    model = build("mixtral")
    expert = 3 * 32 * 48 * 4  # gate, up, down of one expert, fp32
    wt.page_experts(model, budget=str(expert * 2 * 5), device="cpu")  # 2 layers x 5 slots
    assert model.wisp_stats().capacity == 5


def test_model_without_moe_is_refused():
    from transformers import LlamaConfig
    model = transformers.AutoModelForCausalLM.from_config(LlamaConfig(
        **COMMON, intermediate_size=64, num_hidden_layers=2))
    with pytest.raises(wisp.LogicError, match=r"LlamaForCausalLM has no MoE block"):
        wt.page_experts(model, budget=2, device="cpu")


def test_unsupported_moe_class_is_refused_by_name():
    from transformers import PhimoeConfig
    model = transformers.AutoModelForCausalLM.from_config(PhimoeConfig(
        **COMMON, intermediate_size=32, num_hidden_layers=2, num_local_experts=4,
        num_experts_per_tok=2))
    with pytest.raises(wisp.LogicError, match=r"PhimoeExperts.*supported: MixtralExperts"):
        wt.page_experts(model, budget=2, device="cpu")


def test_model_on_another_device_and_double_paging_are_refused():
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(CONFIGS["mixtral"]))
    state = model_state(model)
    with pytest.raises(wisp.LogicError, match=r"parameters on meta; device=cpu"):
        wt.page_experts(model, budget=2, device="cpu")
    assert model_state(model) == state

    model = build("mixtral")
    wt.page_experts(model, budget=4, device="cpu")
    state = model_state(model)
    paged = model._wisp_paged
    with pytest.raises(wisp.LogicError, match=r"already paged"):
        wt.page_experts(model, budget=2, device="cpu")
    assert model_state(model) == state and model._wisp_paged is paged
    wt.unpage_experts(model)
    with pytest.raises(wisp.LogicError, match=r"not paged"):
        wt.unpage_experts(model)


def test_recorder_and_plan(tmp_path):
    model = build("qwen3_moe")
    with wt.record_routing(model) as recorder:
        greedy(model, prompt=(1, 2, 3, 4))
        greedy(model, prompt=(9,))
    trace = recorder.trace()
    # 4 prompt tokens + 31 decode steps, then 1 + 31: every token is a step.
    assert trace.steps == (4 + TOKENS - 1) + (1 + TOKENS - 1)
    assert list(trace.sequence_starts) == [0, 4 + TOKENS - 1]
    assert (trace.layers, trace.experts, trace.top_k) == (2, 16, 4)
    path = tmp_path / "routing.wtrace"
    trace.write(path)
    assert wisp.Trace.read(path).ids().tolist() == trace.ids().tolist()

    spec = wt.model_spec(model)
    assert spec.expert_bytes == 3 * 32 * 32 * 4
    # The non-expert weights are taken out of the budget; the rest is wisp.plan's.
    experts_bytes = spec.layers * spec.experts * spec.expert_bytes
    resident = sum(t.numel() * 4 for t in [*model.parameters(), *model.buffers()]) - experts_bytes
    budget = resident + 6 * spec.layers * spec.expert_bytes + (1 << 20)
    proposed = wt.plan(model, budget, trace, concurrency=1, context=64)
    direct = wisp.plan(spec, budget - resident, trace, concurrency=1, context=64)
    assert proposed.choice == direct.choice
    assert spec.top_k <= proposed.choice["expert_cap"] <= spec.experts
    wt.page_experts(model, budget=proposed.choice["expert_cap"], device="cpu")
    assert wt.plan(model, budget, trace, concurrency=1, context=64).choice == direct.choice
    with pytest.raises(wisp.LogicError, match=r"does not hold"):
        wt.plan(build("qwen3_moe"), resident // 2, trace)


def test_offload_benchmark_runs_end_to_end(tmp_path):
    """bench/python/hf_offload.py (the GPU benchmark) on the tiny shape, on the CPU."""
    script = pathlib.Path(__file__).resolve().parents[2] / "bench" / "python" / "hf_offload.py"
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, str(script), "--shape", "tiny", "--device", "cpu",
                           "--dtype", "float32", "--tokens", "4", "--repeats", "1",
                           "--fractions", "0.25", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    arms = {a["arm"]: a for a in result["arms"]}
    assert set(arms) == {"unpaged", "wisp-0.25", "accelerate-0.25"}
    assert all(a["tok_s"] > 0 for a in arms.values())
    assert arms["wisp-0.25"]["capacity"] == 4
    stats = arms["wisp-0.25"]["wisp_stats"]
    assert stats["hits"] + stats["misses"] == 2 * 4 * (2 + 4)  # layers x k x forwards (warm-up: 2)


def test_docs_example_runs(capsys):
    """docs/python.md's transformers example runs as written (a tiny model, offline)."""
    doc = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "python.md").read_text()
    section = doc.split("## Hugging Face transformers", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    exec(compile(code, "docs/python.md", "exec"), {})
    assert "hit rate" in capsys.readouterr().out
