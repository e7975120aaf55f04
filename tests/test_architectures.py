"""MoE, MLA, multimodal towers, LoRA slots, CPU offload and the pipeline split, each pinned by a worked
example (hand arithmetic in the comments) or a real log from ../shared/groundtruth/dev.jsonl."""
from __future__ import annotations

import pytest

from conftest import GIB, spec_of
from vram_detective import explain
from vram_detective.engines.vllm.kv_cache import kv_layout
from vram_detective.engines.vllm.releases import release
from vram_detective.model.inventory import LoraSlots, Shard, build_inventory, pipeline_layer_counts


def _role_bytes(inventory, role):
    return sum(group.bytes for group in inventory.groups if group.role == role)


# --- mixture of experts --------------------------------------------------------------------------------


def test_qwen3_30b_a3b_experts_on_tp4_with_and_without_expert_parallel():
    spec = spec_of("Qwen/Qwen3-30B-A3B")
    assert (spec.moe.num_experts, spec.moe.experts_per_token, spec.moe.expert_intermediate) == (128, 8, 768)
    tp = build_inventory(spec, "bfloat16", Shard(4))
    ep = build_inventory(spec, "bfloat16", Shard(4, expert_parallel=True))
    # TP: 128 experts x (w13 [2 x 192, 2048] + w2 [2048, 192]) x 2 B per layer, 48 layers
    per_layer_tp = 128 * (2 * 192 * 2048 + 2048 * 192) * 2
    assert _role_bytes(tp, "expert") == 48 * per_layer_tp
    # EP: 32 whole experts x (w13 [1536, 2048] + w2 [2048, 768]) x 2 B: the same bytes, other shapes
    assert _role_bytes(ep, "expert") == 48 * 32 * (1536 * 2048 + 2048 * 768) * 2 == 48 * per_layer_tp
    w13 = {g.shape for g in ep.groups if g.name.endswith("experts.w13_weight")}
    assert w13 == {(32, 1536, 2048)}
    # the router [128, 2048] is replicated on every rank
    assert _role_bytes(tp, "router") == _role_bytes(ep, "router") == 48 * 128 * 2048 * 2


def test_qwen3_235b_fp8_weights_and_kv_on_8_l40s(dev_cases):
    case = dev_cases["file38962983769-qwen3-235b-fp8-tp4-ep-l40s"]
    b = explain("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "L40S", vllm_version="0.10.2", tensor_parallel_size=8,
                max_model_len=32768, gpu_memory_utilization=0.9)
    assert b.weights_bytes / GIB == pytest.approx(case["observed"]["weights_gib"], rel=0.002)
    assert b.kv_cache_bytes / GIB == pytest.approx(case["observed"]["kv_cache_gib"], rel=0.02)
    # the sampler over 256 requests x 151,936 logits sets the peak (logged 1.40 GiB)
    assert b.activation_peak_bytes / GIB == pytest.approx(case["observed"]["activation_peak_gib"], rel=0.03)


def test_deepseek_dense_first_layers_and_shared_experts():
    spec = spec_of("deepseek-ai/DeepSeek-V3")
    assert spec.moe.dense_layers == (0, 1, 2)  # first_k_dense_replace = 3
    assert spec.moe.shared_intermediate == 2048 and spec.moe.score_correction_bias


# --- MLA -------------------------------------------------------------------------------------------------


def test_mla_kv_is_one_latent_replicated_on_every_tp_rank():
    spec = spec_of("deepseek-ai/DeepSeek-V3")
    new = release((0, 8, 5), "v1")
    for tp in (1, 8, 16):
        layout = kv_layout(spec, tp, 61, 64, 2, new)
        assert layout.bytes_per_token == 61 * 576 * 2  # kv_lora_rank 512 + rope 64, no K/V pair
    # before MLA backends (0.7.0) DeepSeek kept per-head K and V of qk_head_dim 192
    old = kv_layout(spec, 16, 61, 16, 2, release((0, 7, 0), "v0"))
    assert old.bytes_per_token == 61 * 2 * (128 // 16) * 192 * 2
    # V0 0.7.1-0.7.3 pads each latent entry to 256 bytes: 1152 B -> 1280 B
    assert kv_layout(spec, 1, 61, 16, 2, release((0, 7, 2), "v0")).bytes_per_token == 61 * 1280


@pytest.mark.parametrize("gpu, version, block", [("H100", "0.8.5", 64), ("B200", "0.11.0", 128), ("A100", "0.11.0", 16),
                                                 ("H100", "0.7.3", 16)])
def test_mla_block_size_is_forced_by_the_attention_backend(gpu, version, block):
    b = explain("deepseek-ai/DeepSeek-V2-Lite", gpu, vllm_version=version, max_model_len=4096)
    assert b.block_size == block


def test_deepseek_v3_tp16_pp2_stage_weights(dev_cases):
    """#12258 (0.7.0, L20): stages log 18.9152 GiB and 21.4118 GiB. 61 layers split 30 + 31 (the last
    stage took the remainder before 0.8); FP8 block-quantized experts sharded 16 ways."""
    assert pipeline_layer_counts(61, 2, remainder_to_last=True) == (30, 31)
    assert pipeline_layer_counts(61, 2) == (31, 30)
    b = explain("deepseek-ai/DeepSeek-V3", "L20", vllm_version="0.7.0", tensor_parallel_size=16, pipeline_parallel_size=2)
    stages = [rank.weights_bytes / GIB for rank in b.per_rank]
    assert stages[0] == pytest.approx(18.9152, rel=0.01)
    assert stages[1] == pytest.approx(21.4118, rel=0.001)


# --- multimodal --------------------------------------------------------------------------------------------


def test_qwen2_5_vl_vision_tower_parameters():
    spec = spec_of("Qwen/Qwen2.5-VL-7B-Instruct")
    inventory = build_inventory(spec, "bfloat16")
    # patch embed 1280 x (3 x 2 x 14 x 14); 32 blocks of (2 norms, qkv 1280->3840 + bias, proj 1280^2 + bias,
    # gate_up 1280->6840 + bias, down 3420->1280 + bias); merger ln_q, 5120->5120 + bias, 5120->3584 + bias
    block = 2 * 1280 + (1280 * 3840 + 3840) + (1280 * 1280 + 1280) + (1280 * 6840 + 6840) + (3420 * 1280 + 1280)
    vision = 1280 * 1176 + 32 * block + 1280 + (5120 * 5120 + 5120) + (5120 * 3584 + 3584)
    assert _role_bytes(inventory, "vision") == vision * 2


def test_gemma3_27b_tp4_weights(dev_cases):
    case = dev_cases["vllm-16378-gemma3-27b-tp4-v080rc3-v0"]
    b = explain("google/gemma-3-27b-it", "H100", vllm_version="0.8.0", tensor_parallel_size=4, max_model_len=65536)
    assert b.weights_bytes / GIB == pytest.approx(case["observed"]["weights_gib"], rel=0.002)


# --- LoRA and CPU offload ----------------------------------------------------------------------------------


def test_lora_slots_of_a_mistral_layer():
    spec = spec_of("mistralai/Mistral-7B-Instruct-v0.2")
    plain = build_inventory(spec, "bfloat16")
    with_lora = build_inventory(spec, "bfloat16", lora=LoraSlots(max_loras=1, max_rank=16, extra_vocab=0))
    # per layer, rank 16, one adapter: A = 16 x in per output slice, B = out x 16
    # qkv: A 3 x 16 x 4096, B (4096 + 1024 + 1024) x 16; o: 16 x 4096 + 4096 x 16;
    # gate_up: A 2 x 16 x 4096, B 2 x 14336 x 16; down: 16 x 14336 + 4096 x 16
    per_layer = (3 * 16 * 4096 + 6144 * 16) + (2 * 16 * 4096) + (2 * 16 * 4096 + 2 * 14336 * 16) + (16 * 14336 + 4096 * 16)
    # embeddings: A [32000, 16] and B [4096, 16]; lm_head: A [16, 4096] and B [32000 padded to 256, 16]
    vocab = 32000 * 16 + 4096 * 16 + 16 * 4096 + 32000 * 16
    assert _role_bytes(with_lora, "lora") == (32 * per_layer + vocab) * 2
    assert with_lora.total_bytes - plain.total_bytes == _role_bytes(with_lora, "lora")


def test_cpu_offload_keeps_embeddings_on_the_gpu(dev_cases):
    """#15196 (0.7.2): DeepSeek-Coder-V2-Lite with --cpu-offload-gb 30 logs 0.8008 GiB: every decoder layer
    moved to the CPU, leaving embed_tokens + lm_head (2 x 102400 x 2048 x 2 B), the final norm and the
    [163840, 64] bf16 rotary cache."""
    b = explain("deepseek-ai/DeepSeek-Coder-V2-Lite-Instruct", "L40S", vllm_version="0.7.2", cpu_offload_gb=30,
                max_model_len=100000, max_num_batched_tokens=40000, gpu_memory_utilization=0.45, enforce_eager=True)
    assert b.weights_bytes == 2 * 102400 * 2048 * 2 + 2048 * 2 + 163840 * 64 * 2
    assert b.weights_bytes / GIB == pytest.approx(dev_cases["vllm-15196-dscoder-v2-lite-l40s-cpuoffload30"]["observed"]["weights_gib"], abs=0.0001)
    assert b.components.find("weights.cpu_offload").bytes < -25 * GIB
    # one offloaded layer is copied back in for its forward, on top of the activations
    assert "CPU-offloaded layer" in b.components.find("activation_peak").reason


def test_kv_cache_memory_bytes_skips_the_utilization_rule():
    b = explain("Qwen/Qwen3-8B", "RTX 4090", vllm_version="0.11.0", kv_cache_memory_bytes=4 * GIB, max_model_len=8192)
    assert b.kv_cache_bytes == 4 * GIB
    assert b.num_gpu_blocks == 4 * GIB // (36 * 2 * 16 * 8 * 128 * 2)
