"""Packed KV-cache formats (engines/vllm/kv_dtypes.py): bytes per token and KV head, TurboQuant's boundary layers
and forced block size, and the refusals - each pinned by the arithmetic of vLLM's own formulas
(turboquant/config.py slot_size_aligned, kv_cache_interface.py, platforms/interface.py, 0.20-0.33)."""
from __future__ import annotations

import pytest

from vram_detective import explain
from vram_detective.engines.vllm import kv_dtypes
from vram_detective.engines.vllm.settings import SettingsError, StartupRefusal


@pytest.mark.parametrize("name, slot", [
    ("turboquant_k8v4", 128 + 64 + 4),          # FP8 keys (D bytes) + 4-bit values (64 + fp16 scale and zero)
    ("turboquant_4bit_nc", 64 + 2 + 64 + 4),    # 4-bit MSE keys + an fp16 norm
    ("turboquant_k3v4_nc", 48 + 2 + 64 + 4),
    ("turboquant_3bit_nc", 48 + 2 + 48 + 4),
    ("int8_per_token_head", 2 * 128 + 8),       # 1-byte K and V + one fp32 scale each
    ("fp8_per_token_head", 2 * 128 + 8),
    ("int4_per_token_head", 128 + 8),
    ("nvfp4", 2 * (64 + 8)),                    # fp4 codes + an fp8 scale per 16 values, K and V
])
def test_slot_bytes_at_head_dim_128(name, slot):
    assert kv_dtypes.slot_bytes(name, 128) == slot


def test_turboquant_slots_round_up_to_even():
    # D = 96, 3-bit: keys 36 + 2, values 36 + 4 = 78 (even already); D = 100, k3v4: 38 + 2 + 50 + 4 = 94
    assert kv_dtypes.slot_bytes("turboquant_3bit_nc", 96) == 78
    assert kv_dtypes.slot_bytes("turboquant_k3v4_nc", 100) == 94
    assert kv_dtypes.slot_bytes("turboquant_3bit_nc", 90) == 34 + 2 + 34 + 4  # 74


def test_qwen3_4b_turboquant_3bit_pool(dev_cases):
    # 36 layers, 8 KV heads of 128: layers 0, 1, 34, 35 stay bf16 (4 x 4,096 B per token), 32 layers x 8 x 102 B
    bf16 = explain("Qwen/Qwen3-4B", "H100", vllm_version="0.20.0", gpu_memory_utilization=0.85, max_model_len=8192)
    tq = explain("Qwen/Qwen3-4B", "H100", vllm_version="0.20.0", gpu_memory_utilization=0.85, max_model_len=8192,
                 kv_cache_dtype="turboquant_3bit_nc")
    assert bf16.kv_bytes_per_token == 36 * 8 * 2 * 128 * 2 == 147_456
    assert tq.kv_bytes_per_token == 4 * 4096 + 32 * 8 * 102 == 42_496
    assert tq.kv_cache_bytes == bf16.kv_cache_bytes  # the same budget
    assert tq.kv_cache_tokens / bf16.kv_cache_tokens == pytest.approx(147_456 / 42_496, rel=1e-3)
    # the PR branch (#38479, April 2026) logged 1,431,184 tokens: within 0.6 % (its slot was 104 B, not 102)
    logged = dev_cases["vllm-pr38479-qwen3-4b-h100-turboquant3"]["observed"]["kv_cache_tokens"]
    assert abs(tq.kv_cache_tokens - logged) / logged < 0.006
    # 0.25+: the boundary layers' page forces 32-token blocks, even over --block-size 16
    late = explain("Qwen/Qwen3-4B", "H100", vllm_version="0.25.0", max_model_len=8192, block_size=16,
                   kv_cache_dtype="turboquant_3bit_nc")
    assert late.block_size == 32 and late.kv_bytes_per_token == 42_496


@pytest.mark.parametrize("model, gpu, version, kv_dtype, reason", [
    ("Qwen/Qwen3-4B", "H100", "0.19.0", "turboquant_4bit_nc", "does not exist before vLLM 0.20.0"),
    ("deepseek-ai/DeepSeek-V2-Lite", "H100", "0.24.0", "turboquant_4bit_nc", "MLA not supported"),
    ("openai/gpt-oss-20b", "H100", "0.24.0", "turboquant_k8v4", "attention sinks not supported"),
    ("google/gemma-3-4b-it", "H100", "0.26.0", "turboquant_k8v4", "sliding window not supported"),
    ("Qwen/Qwen3-4B", "A100", "0.24.0", "fp8_per_token_head", "SM89"),
    ("Qwen/Qwen3-4B", "H100", "0.26.0", "nvfp4", "SM100"),
])
def test_refusals_in_one_line(model, gpu, version, kv_dtype, reason):
    with pytest.raises(StartupRefusal, match=reason):
        explain(model, gpu, vllm_version=version, kv_cache_dtype=kv_dtype)


def test_nvfp4_and_unsized_dtypes():
    nvfp4 = explain("Qwen/Qwen3-4B", "H100", vllm_version="0.32.0", max_model_len=8192, kv_cache_dtype="nvfp4")
    assert nvfp4.kv_bytes_per_token == 36 * 8 * 144  # no boundary layers for nvfp4
    with pytest.raises(SettingsError, match="not sized yet"):
        explain("Qwen/Qwen3-4B", "H100", kv_cache_dtype="octave_k3v4")


def test_hybrids_with_packed_caches_are_not_sized():
    with pytest.raises(StartupRefusal, match="hybrid"):  # 0.20 refuses them itself
        explain("Qwen/Qwen3.5-27B", "H200", vllm_version="0.20.0", kv_cache_dtype="turboquant_4bit_nc")
    with pytest.raises(SettingsError, match="not sized yet"):  # 0.21+: attention pages aligned to the state page
        explain("Qwen/Qwen3.5-27B", "H200", vllm_version="0.21.0", kv_cache_dtype="turboquant_4bit_nc")
