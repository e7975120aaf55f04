"""Speculative decoding: the drafter's weights (part of W) and its KV layers (engines/vllm/speculative.py)."""
from __future__ import annotations

import pytest
from conftest import spec_of

from vram_detective.api import explain
from vram_detective.engines.vllm.launch import parse_launch_line
from vram_detective.engines.vllm.settings import StartupRefusal
from vram_detective.engines.vllm.speculative import (
    SpeculativeConfig, SpeculativeConfigError, draft_weights, mtp_layer_count, parse_speculative_config,
)

TARGET = "meta-llama/Llama-3.1-8B-Instruct"
EAGLE = {"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}
DRAFT = {"model": "meta-llama/Llama-3.2-1B-Instruct", "num_speculative_tokens": 5}


def test_parse_json_dict_and_method_inference():
    config = parse_speculative_config('{"method": "eagle3", "model": "x/EAGLE3-8B", "num_speculative_tokens": 2}')
    assert (config.method, config.model, config.num_speculative_tokens) == ("eagle3", "x/EAGLE3-8B", 2)
    assert parse_speculative_config({"model": "[ngram]", "num_speculative_tokens": 3}).method == "ngram"
    assert parse_speculative_config({"model": "yuhuili/EAGLE-LLaMA3-Instruct-8B"}).method == "eagle"
    assert parse_speculative_config({"model": "meta-llama/Llama-3.2-1B"}).method == "draft_model"
    assert parse_speculative_config({"method": "deepseek_mtp", "num_speculative_tokens": 1}).method == "mtp"
    assert parse_speculative_config({"num_speculative_tokens": 1}).method == "mtp"
    assert parse_speculative_config(None) is None and parse_speculative_config("") is None
    # the 0.4-0.9 flags
    old = parse_speculative_config(None, "meta-llama/Llama-3.2-1B", 4, 1)
    assert (old.method, old.num_speculative_tokens, old.draft_tensor_parallel_size) == ("draft_model", 4, 1)
    with pytest.raises(SpeculativeConfigError):
        parse_speculative_config("{not json")
    with pytest.raises(SpeculativeConfigError):
        parse_speculative_config({"method": "lookahead-magic"})


@pytest.mark.parametrize("method", ["eagle", "eagle3", "medusa", "draft_model"])
def test_a_method_that_loads_a_draft_needs_one(method):
    """vLLM refuses a draft method without a model (0.19.0 config/speculative.py: 'num_speculative_tokens was
    provided but without speculative model'); was: a head sized from nothing, its bytes missing from the total."""
    with pytest.raises(SpeculativeConfigError, match="needs a draft model"):
        parse_speculative_config({"method": method, "num_speculative_tokens": 2})


@pytest.mark.parametrize("config", [EAGLE, DRAFT, {"method": "ngram", "num_speculative_tokens": 3,
                                                   "prompt_lookup_max": 4}])
def test_theory_vs_reality_counts_the_drafter_once(config):
    """Theory is the target's parameters (as without a draft); the drafter is its own step, so the rest is the
    same small buffers as without a draft (was: the drafter's parameters in theory and in its step, the rest
    negative by as much)."""
    plain = {step.key: step.bytes for step in explain(TARGET, "H100").weights_explained}
    drafted = {step.key: step.bytes for step in explain(TARGET, "H100", speculative_config=config).weights_explained}
    assert drafted["theory"] == plain["theory"] and drafted["buffers"] == plain["buffers"] >= 0
    assert drafted["reality"] - plain["reality"] == drafted.get("draft", 0) + (
        drafted["allocator_rounding"] - plain["allocator_rounding"])


def test_launch_line_speculative_config():
    line = parse_launch_line(
        "vllm serve meta-llama/Llama-3.1-8B-Instruct --speculative-config "
        "'{\"method\": \"eagle\", \"model\": \"yuhuili/EAGLE-LLaMA3.1-Instruct-8B\", \"num_speculative_tokens\": 3}' -tp 2")
    assert line.settings["tensor_parallel_size"] == 2 and not line.ignored
    assert parse_speculative_config(line.settings["speculative_config"]).method == "eagle"
    old = parse_launch_line("python -m vllm.entrypoints.openai.api_server --model m --speculative-model [ngram] "
                            "--num-speculative-tokens 5 --ngram-prompt-lookup-max 4")
    assert old.settings["speculative_model"] == "[ngram]" and old.settings["num_speculative_tokens"] == 5


def test_eagle_head_bytes_v1_by_hand():
    spec = spec_of(TARGET)
    head = draft_weights(parse_speculative_config(EAGLE), spec, "bfloat16", 1, 1, "v1")
    # one Llama-3.1-8B decoder layer without input_layernorm, the final norm and fc [2H -> H];
    # embed_tokens and lm_head are the target's (eagle.py load_model), the rotary cache is shared
    qkv = (32 + 2 * 8) * 128 * 4096 * 2
    o_proj = 4096 * 4096 * 2
    mlp = 3 * 14336 * 4096 * 2
    norms = 2 * 4096 * 2  # post_attention_layernorm + model.norm
    fc = 4096 * 8192 * 2
    assert head.total_bytes == qkv + o_proj + mlp + norms + fc == 503_332_864
    assert {group.role for group in head.groups} == {"draft"}


def test_eagle_head_v0_holds_its_own_vocabulary():
    spec = spec_of(TARGET)
    v1 = draft_weights(parse_speculative_config(EAGLE), spec, "bfloat16", 1, 1, "v1").total_bytes
    v0 = draft_weights(parse_speculative_config(EAGLE), spec, "bfloat16", 1, 1, "v0").total_bytes
    table = 128256 * 4096 * 2
    # embedding + the inner model's lm_head + EAGLE's own lm_head, and layer 0 keeps its input_layernorm
    assert v0 - v1 == 3 * table + 4096 * 2


def test_draft_model_bytes_by_hand():
    spec = spec_of(TARGET)
    config = SpeculativeConfig("draft_model", "meta-llama/Llama-3.2-1B-Instruct", 5,
                               draft_spec=spec_of("meta-llama/Llama-3.2-1B-Instruct"))
    draft = draft_weights(config, spec, "bfloat16", 1, 1, "v1")
    without_rope = sum(group.bytes for group in draft.groups if "rotary" not in group.name)
    embedding = 128256 * 2048 * 2  # tied with lm_head: once
    layer = (48 * 64 * 2048 + 2048 * 2048 + 3 * 8192 * 2048 + 2 * 2048) * 2
    assert without_rope == embedding + 16 * layer + 2048 * 2 == 2_471_628_800


def test_kv_bytes_per_block_grow_with_the_drafter():
    plain = explain(TARGET, "H100", vllm_version="0.11.0", max_model_len=8192)
    eagle = explain(TARGET, "H100", vllm_version="0.11.0", max_model_len=8192, speculative_config=EAGLE)
    draft = explain(TARGET, "H100", vllm_version="0.15.1", max_model_len=8192, speculative_config=DRAFT)
    page = 2 * 8 * 128 * 2  # K+V, 8 KV heads x 128, bf16, per token and layer
    assert plain.kv_bytes_per_token == 32 * page
    assert eagle.kv_bytes_per_token == 33 * page  # + the head's one attention layer
    assert draft.kv_bytes_per_token == 32 * page + 16 * (2 * 8 * 64 * 2)  # + Llama-3.2-1B's 16 layers
    assert eagle.weights_bytes - plain.weights_bytes == pytest.approx(503_332_864, abs=4 * 2**20)
    assert eagle.num_gpu_blocks < plain.num_gpu_blocks


def test_ngram_adds_nothing():
    plain = explain(TARGET, "H100", vllm_version="0.11.0", max_model_len=8192)
    ngram = explain(TARGET, "H100", vllm_version="0.11.0", max_model_len=8192,
                    speculative_config='{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}')
    assert (ngram.weights_bytes, ngram.num_gpu_blocks, ngram.kv_bytes_per_token) == (
        plain.weights_bytes, plain.num_gpu_blocks, plain.kv_bytes_per_token)


def test_draft_model_per_release():
    # 0.10-0.14 V1 refuses a draft model; 0.8-0.9 fall back to V0; 0.4-0.9 flags still work on V0
    with pytest.raises(StartupRefusal, match="draft model is not supported yet"):
        explain(TARGET, "H100", vllm_version="0.11.0", max_model_len=8192, speculative_config=DRAFT)
    assert explain(TARGET, "H100", vllm_version="0.8.5", max_model_len=8192, speculative_config=DRAFT).engine == "v0"
    old = explain(TARGET, "H100", vllm_version="0.6.3.post1", max_model_len=8192,
                  speculative_model="meta-llama/Llama-3.2-1B-Instruct", num_speculative_tokens=5)
    plain = explain(TARGET, "H100", vllm_version="0.6.3.post1", max_model_len=8192)
    assert old.kv_bytes_per_token == plain.kv_bytes_per_token + 16 * (2 * 8 * 64 * 2)
    assert old.weights_bytes > plain.weights_bytes + 2_400_000_000


def test_mtp_layers_from_the_config():
    spec = spec_of("deepseek-ai/DeepSeek-V3")
    assert mtp_layer_count(spec) == 1
    mtp = draft_weights(parse_speculative_config({"method": "deepseek_mtp", "num_speculative_tokens": 1}),
                        spec, "bfloat16", 8, 1, "v1")
    names = " ".join(group.name for group in mtp.groups)
    assert "eh_proj" in names and "embed_tokens" not in names and "lm_head" in names  # shared_head.head stays
    with pytest.raises(StartupRefusal, match="no MTP layers"):
        explain(TARGET, "H100", vllm_version="0.11.0", speculative_config={"method": "mtp", "num_speculative_tokens": 1})


# --- the drafter in the V1 profile run and the graphs (speculative.drafter_profile) ----------------------


def _run(version, config=None, **kw):
    settings = dict(max_model_len=8192, max_num_seqs=8, max_num_batched_tokens=16384, **kw)
    if config is not None:
        settings["speculative_config"] = config
    return explain(TARGET, "H100", vllm_version=version, **settings)


def test_drafter_dummy_run_stacks_on_the_kept_target_states():
    # T = 16384 tokens, 8 requests: the sampler is small, the forward peaks. One Llama-3.1-8B layer's forward at T:
    # 16384 x (3 x 4096 + 3 x 14336) x 2 B; the drafter (an EAGLE head of the target's shapes) runs it again after the
    # target while the target's [T, 4096] output stays alive: + 16384 x 4096 x 2 B (x 4 with EAGLE-3's aux states)
    forward = 16384 * (3 * 4096 + 3 * 14336) * 2
    kept = 16384 * 4096 * 2
    plain, eagle = _run("0.9.2"), _run("0.9.2", EAGLE)
    assert plain.activation_peak_bytes == pytest.approx(forward, rel=0.01)
    assert eagle.activation_peak_bytes == pytest.approx(forward + kept, rel=0.01)
    eagle3 = _run("0.9.2", {**EAGLE, "method": "eagle3"})
    assert eagle3.activation_peak_bytes == pytest.approx(forward + 4 * kept, rel=0.01)
    # 0.8.5: the dummy run has no drafter, but the single peak holds the proposer's [T, H] buffer + ids / positions
    old_plain, old_eagle = _run("0.8.5"), _run("0.8.5", EAGLE)
    assert old_eagle.activation_peak_bytes - old_plain.activation_peak_bytes == 16384 * (4096 * 2 + 16)
    # 0.27: buffers (hidden_states + inputs_embeds) counted again, through total_consumed
    new_plain, new_eagle = _run("0.27.0"), _run("0.27.0", EAGLE)
    assert new_eagle.activation_peak_bytes - new_plain.activation_peak_bytes == kept + 16384 * (2 * 4096 * 2 + 16)


def test_drafter_graphs_by_release():
    # piecewise graphs for the drafter's layer in 0.9.0-0.10.0 and from 0.11.1; none in 0.10.1-0.11.0
    for version, captured in (("0.9.2", True), ("0.11.0", False), ("0.11.1", True)):
        plain, eagle = _run(version), _run(version, EAGLE)
        if captured:
            assert eagle.cuda_graph_bytes > plain.cuda_graph_bytes
            assert (eagle.cuda_graph_bytes - plain.cuda_graph_bytes) * 32 < plain.cuda_graph_bytes * 1.01  # 1 of 32 layers
        else:
            assert eagle.cuda_graph_bytes == plain.cuda_graph_bytes
    assert _run("0.11.1", EAGLE, enforce_eager=True).cuda_graph_bytes == 0
