"""`vram-detective whatif`: each lever moves the figures in the direction, and by the amount, that the
forward model gives for the changed settings."""
from __future__ import annotations

import json

import pytest

from conftest import GIB
from vram_detective import api
from vram_detective.engines.vllm.advisor.levers import whatif
from vram_detective.cli import main

BASELINES = [
    ("Qwen/Qwen2.5-7B-Instruct-AWQ", "RTX 4090", None, {"max_model_len": 32768}),
    ("meta-llama/Llama-3.1-8B-Instruct", "RTX 3090", "0.6.4", {"max_model_len": 20000, "engine": "v0"}),
    ("google/gemma-3-1b-it", "RTX 4090", "0.19.0", {}),
]


def _by_change(result) -> dict:
    return {(lever.lever, lever.change): lever for lever in result.levers}


@pytest.mark.parametrize("model,gpu,version,settings", BASELINES, ids=[b[0] for b in BASELINES])
def test_every_lever_is_the_forward_model(model, gpu, version, settings):
    result = whatif(model, gpu, vllm_version=version, settings=settings)
    base = result.baseline
    reference = api.explain(model, gpu, vllm_version=version, **settings)
    assert (base.weights_bytes, base.kv_cache_tokens, base.nvidia_smi_used_mib) == (
        reference.weights_bytes, reference.kv_cache_tokens, reference.nvidia_smi_used_mib)
    names = {lever.lever for lever in result.levers}
    assert names >= {"gpu_memory_utilization", "max_model_len", "max_num_seqs", "max_num_batched_tokens",
                     "kv_cache_dtype", "enforce_eager", "cpu_offload_gb", "tensor_parallel_size",
                     "pipeline_parallel_size", "embeddings_8bit"}
    assert names & {"checkpoint", "quantization"}  # a catalog checkpoint, or vLLM's online FP8
    for lever in result.levers:
        assert lever.cost
        if lever.lever in ("embeddings_8bit", "checkpoint") or lever.weights_bytes is None:
            continue
        # the amount: exactly what explain gives for the changed settings
        changed = api.explain(lever.model, gpu, vllm_version=version, **dict(settings, **lever.settings))
        assert lever.weights_bytes == changed.weights_bytes
        assert lever.kv_cache_tokens == changed.kv_cache_tokens
        assert lever.max_concurrency == changed.max_concurrency
        assert lever.nvidia_smi_used_mib == changed.nvidia_smi_used_mib
        assert lever.deltas["kv_cache_tokens"] == changed.kv_cache_tokens - reference.kv_cache_tokens
        assert lever.deltas["weights_bytes"] == changed.weights_bytes - reference.weights_bytes


def test_directions():
    result = whatif("Qwen/Qwen2.5-7B-Instruct-AWQ", "RTX 4090", settings={"max_model_len": 32768})
    levers = _by_change(result)
    base = result.baseline
    lower_u = levers[("gpu_memory_utilization", "0.92 -> 0.87")]
    higher_u = levers[("gpu_memory_utilization", "0.92 -> 0.97")]
    assert lower_u.kv_pool_bytes < base.kv_pool_bytes < higher_u.kv_pool_bytes
    assert lower_u.nvidia_smi_used_mib < base.nvidia_smi_used_mib < higher_u.nvidia_smi_used_mib
    shorter = levers[("max_model_len", "32,768 -> 16,384")]
    assert shorter.max_concurrency > base.max_concurrency and shorter.kv_pool_bytes == base.kv_pool_bytes
    seqs = levers[("max_num_seqs", "256 -> 128")]
    assert seqs.kv_pool_bytes > base.kv_pool_bytes  # smaller sampler peak and fewer graphs
    tokens = levers[("max_num_batched_tokens", "2,048 -> 1,024")]
    assert tokens.kv_pool_bytes >= base.kv_pool_bytes
    fp8 = levers[("kv_cache_dtype", "float16 -> fp8")]
    assert fp8.kv_cache_tokens == 2 * base.kv_cache_tokens and fp8.weights_bytes == base.weights_bytes
    eager = levers[("enforce_eager", "CUDA graphs -> eager")]
    assert eager.kv_pool_bytes > base.kv_pool_bytes  # 0.20+: the graph estimate is subtracted from the budget
    offload = next(lever for lever in result.levers if lever.lever == "cpu_offload_gb")
    assert offload.weights_bytes < base.weights_bytes and offload.kv_cache_tokens > base.kv_cache_tokens
    tp = next(lever for lever in result.levers if lever.lever == "tensor_parallel_size")
    assert tp.weights_bytes < base.weights_bytes and tp.max_concurrency > 2 * base.max_concurrency
    bf16 = next(lever for lever in result.levers if lever.change.startswith("AWQ 4-bit -> bf16"))
    assert bf16.weights_bytes > base.weights_bytes and bf16.max_concurrency < base.max_concurrency
    gptq4 = next(lever for lever in result.levers if "GPTQ 4-bit" in lever.change)
    assert abs(gptq4.weights_bytes - base.weights_bytes) < 0.1 * GIB


def test_embeddings_at_8_bit_is_half_the_vocabulary_tables():
    from vram_detective.engines.vllm.weights_plan import rank_inventories
    from vram_detective.engines.vllm.releases import resolve_version

    result = whatif("Qwen/Qwen3-8B", "RTX 4090", settings={"max_model_len": 16384}, include_checkpoints=False)
    lever = next(lever for lever in result.levers if lever.lever == "embeddings_8bit")
    spec = api.model_spec("Qwen/Qwen3-8B")
    (_, inventory), = rank_inventories(spec, api.resolve_gpu("RTX 4090", None), {"max_model_len": 16384},
                                       resolve_version(None))
    tables = sum(g.bytes for g in inventory.groups if g.role in ("embedding", "lm_head", "vocab padding"))
    base = result.baseline
    assert base.weights_bytes - lever.weights_bytes == tables // 2
    assert lever.kv_pool_bytes > base.kv_pool_bytes and lever.max_concurrency > base.max_concurrency
    # the same saving as the breakdown's own weights lever, where the forward model lists it
    own = next((c for c in getattr(base.breakdown, "weights_whatif", ()) if c.key == "embeddings_lm_head_8bit"), None)
    if own is not None:
        assert -own.bytes == tables // 2
    # the pool it frees is what a lighter model of the same shape gets from the budget: whole blocks
    per_block = base.breakdown.per_rank[0].kv_bytes_per_block if base.breakdown.per_rank else (
        base.breakdown.kv_bytes_per_token * base.breakdown.block_size)
    assert (lever.kv_pool_bytes - base.kv_pool_bytes) % per_block == 0


def test_swap_space_is_cpu_only_on_v0():
    result = whatif("meta-llama/Llama-3.1-8B-Instruct", "RTX 3090", vllm_version="0.6.4",
                    settings={"max_model_len": 20000, "engine": "v0"}, include_checkpoints=False)
    swap = next(lever for lever in result.levers if lever.lever == "swap_space")
    assert swap.num_cpu_blocks == 0 < result.baseline.num_cpu_blocks
    assert swap.kv_pool_bytes == result.baseline.kv_pool_bytes and "CPU swap blocks" in swap.note
    refused = next(lever for lever in result.levers if lever.lever == "max_num_batched_tokens")
    assert refused.refused and refused.weights_bytes is None  # V0 refuses tokens < max_model_len


def test_whatif_cli(capsys):
    assert main(["whatif", "Qwen/Qwen2.5-7B-Instruct-AWQ", "--gpu", "RTX 4090", "--max-model-len", "32k"]) == 0
    out = capsys.readouterr().out
    assert "kv_cache_dtype" in out and "embeddings_8bit" in out and "fp8 KV cache: small accuracy cost" in out
    assert main(["whatif", "Qwen/Qwen2.5-7B-Instruct-AWQ", "--gpu", "RTX 4090", "--json", "--no-checkpoints"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["baseline"]["figures"]["kv_cache_tokens"] == data["baseline"]["kv_cache_tokens"]
    for lever in data["levers"]:
        assert {"lever", "change", "settings", "cost"} <= set(lever)
        if "delta" in lever:
            assert set(lever["delta"]) >= {"weights_bytes", "kv_pool_bytes", "kv_cache_tokens", "max_concurrency",
                                           "nvidia_smi_used_mib"}


def test_whatif_of_a_baseline_that_does_not_start(capsys):
    # 128k tokens of an 8B model do not fit a 4090's KV pool: the levers still say what each would change
    assert main(["whatif", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "RTX 4090", "--max-model-len", "128k",
                 "--no-checkpoints"]) == 1
    out = capsys.readouterr().out
    assert "vLLM would refuse to start" in out and "max_model_len" in out
