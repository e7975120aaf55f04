"""MoE, MLA, multimodal towers, LoRA slots, CPU offload and the pipeline split, each pinned by a worked
example (hand arithmetic in the comments) or a real log from ../shared/groundtruth/dev.jsonl."""
from __future__ import annotations

import pytest

from conftest import GIB, spec_of
from vram_detective import explain
from vram_detective.engines.vllm.kv_cache import kv_layout
from vram_detective.engines.vllm.releases import release
from vram_detective.engines.vllm.weights import LoraSlots, Shard, build_inventory, pipeline_layer_counts


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
    # what stays on the GPU, by role, with no negative term: every layer tensor is gone, the final norm stays
    weights = b.components.find("weights")
    assert {child.key: child.bytes for child in weights.children} == {
        "weights.embedding": 102400 * 2048 * 2, "weights.lm_head": 102400 * 2048 * 2, "weights.norm": 2048 * 2,
        "weights.rotary_cache": 163840 * 64 * 2}
    assert "moved to CPU memory by --cpu-offload-gb" in weights.reason
    # one offloaded layer is copied back in for its forward, on top of the activations
    assert "CPU-offloaded layer" in b.components.find("activation_peak").reason


def test_kv_cache_memory_bytes_skips_the_utilization_rule():
    b = explain("Qwen/Qwen3-8B", "RTX 4090", vllm_version="0.11.0", kv_cache_memory_bytes=4 * GIB, max_model_len=8192)
    assert b.kv_cache_bytes == 4 * GIB
    assert b.num_gpu_blocks == 4 * GIB // (36 * 2 * 16 * 8 * 128 * 2)


# --- Llama 4 (llama4.py / mllama4.py, 0.8.3+) ------------------------------------------------------------


def test_llama4_scout_and_maverick_parameters_by_hand():
    # Scout text: embed + lm_head 2 x 202048 x 5120; 48 x attention ((40 + 2 x 8) x 128 x 5120 + 5120 x 5120);
    # norms 48 x 2 x 5120 + 5120; routers 48 x 16 x 5120; experts 48 x 16 x 3 x 8192 x 5120; shared experts
    # 48 x 3 x 8192 x 5120. Vision: patch 5120-wide... (see the groups): 871,932,416 with the projector
    embed = 202048 * 5120
    attention = 48 * ((40 + 16) * 128 * 5120 + 5120 * 5120)
    scout_text = 2 * embed + attention + 48 * 2 * 5120 + 5120 + 48 * 16 * 5120 + 48 * 16 * 3 * 8192 * 5120 + 48 * 3 * 8192 * 5120
    assert scout_text == 107_769_861_120
    # vision: patch linear 1408 x 588, class 1408, positions 577 x 1408, LN pre/post 4 x 1408, 34 layers of
    # (qkv 1408 x 4224 + 4224, o 1408 x 1408 + 1408, fc1 1408 x 5632 + 5632, fc2 5632 x 1408 + 1408, 4 x 1408),
    # adapter 5632 x 4096 + 4096 x 4096, projector 4096 x 5120
    layer = 1408 * 4224 + 4224 + 1408 * 1408 + 1408 + 1408 * 5632 + 5632 + 5632 * 1408 + 1408 + 4 * 1408
    vision = 1408 * 588 + 1408 + 577 * 1408 + 4 * 1408 + 34 * layer + 5632 * 4096 + 4096 * 4096 + 4096 * 5120
    assert vision == 871_932_416
    scout = build_inventory(spec_of("meta-llama/Llama-4-Scout-17B-16E-Instruct"), "bfloat16")
    assert scout.parameters == scout_text + vision  # Meta's "109 B"
    # Maverick: 128 experts on the 24 odd layers, dense LlamaMLPs of 16384 on the 24 even ones
    maverick_spec = spec_of("meta-llama/Llama-4-Maverick-17B-128E-Instruct")
    assert maverick_spec.moe.dense_layers == tuple(range(0, 48, 2)) and maverick_spec.intermediate_size == 16384
    maverick_text = (2 * embed + attention + 48 * 2 * 5120 + 5120 + 24 * 128 * 5120 + 24 * 128 * 3 * 8192 * 5120
                     + 24 * 3 * 8192 * 5120 + 24 * 3 * 16384 * 5120)
    assert build_inventory(maverick_spec, "bfloat16").parameters == maverick_text + vision == 401_583_781_376  # "400 B"


def test_llama4_rotary_buffer_spans_max_position_embeddings():
    # get_rope caches one [max_position_embeddings, head_dim] bf16 cos/sin table for the 36 RoPE layers:
    # Scout 10,485,760 x 128 x 2 B = 2.5 GiB on every rank; Maverick 1,048,576 positions -> 256 MiB
    for repo_id, rows in (("meta-llama/Llama-4-Scout-17B-16E-Instruct", 10_485_760),
                          ("meta-llama/Llama-4-Maverick-17B-128E-Instruct", 1_048_576)):
        inventory = build_inventory(spec_of(repo_id), "bfloat16", Shard(8))
        table = next(g for g in inventory.groups if g.name == "rotary_emb.cos_sin_cache")
        assert table.shape == (rows, 128) and table.bytes == rows * 128 * 2
    # the vision tower's complex64 [577, 1, 44] table: 577 x 44 x 8 B
    vision_table = next(g for g in inventory.groups if g.name.startswith("vision_model.rotary_emb"))
    assert vision_table.bytes == 577 * 44 * 8 == 203_104


@pytest.mark.parametrize("version, kinds", [
    ("0.9.2", {"full": 48}),                       # chunking only inside the attention backends
    ("0.10.0", {"full": 12, "chunked_local": 36}),  # ChunkedLocalAttentionSpec, hybrid manager on
    ("0.11.0", {"full": 48}),                      # VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0
    ("0.14.0", {"full": 12, "chunked_local": 36}),  # the variable defaults to 1
])
def test_llama4_chunked_local_layers_per_release(version, kinds):
    from vram_detective.engines.vllm.kv_plan import kv_plan_for_budget
    from vram_detective.hardware import find_gpu
    from vram_detective.units import parse_version

    spec = spec_of("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    settings = {"tensor_parallel_size": 8, "max_model_len": 131072, "max_num_batched_tokens": 8192}
    plan = kv_plan_for_budget(spec, find_gpu("H200"), settings, parse_version(version), 40 * GIB)
    created = {}
    for group in plan.groups:
        created[group.kind] = created.get(group.kind, 0) + group.layers
    assert created == kinds
    if "chunked_local" in kinds:
        # 12 NoPE layers set the group size: 1 full + 3 chunked groups; a chunked group holds
        # min(8192 + 8192 batched tokens, max_model_len) tokens of a request: cdiv(16384, 16) = 1024 blocks
        assert [g.blocks_per_request for g in plan.groups if g.kind == "chunked_local"] == [1024] * 3
        assert [g.blocks_per_request for g in plan.groups if g.kind == "full"] == [131072 // 16]


def test_llama4_vision_tower_stays_bf16_in_an_fp8_checkpoint():
    import json
    from pathlib import Path

    from vram_detective.model.config import parse_config
    from vram_detective.engines.vllm.quant_kernels import kernel_for
    from vram_detective.engines.vllm.releases import release

    entry = json.loads((Path(__file__).resolve().parents[1] / "src/vram_detective/model/catalog/"
                        "meta-llama--Llama-4-Scout-17B-16E-Instruct.json").read_text())
    config = {**entry["config"], "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic"}}
    spec = parse_config(config, "scout-fp8")
    kernel = kernel_for(spec.quantization, (9, 0), release((0, 11, 0), "v1"))
    fp8 = build_inventory(spec, "bfloat16", Shard(8), spec.quantization, kernel)
    bf16 = build_inventory(spec_of("meta-llama/Llama-4-Scout-17B-16E-Instruct"), "bfloat16", Shard(8))
    assert _role_bytes(fp8, "vision") == _role_bytes(bf16, "vision") > 0
    assert _role_bytes(fp8, "expert") == _role_bytes(bf16, "expert") // 2  # the experts do go to fp8


def test_kimi_k2_is_deepseek_v3_with_384_experts():
    # 60 MoE layers x 384 x 3 x 7168 x 2048 + shared 60 x 3 x 7168 x 2048 + dense layer 3 x 7168 x 18432
    # + 61 MLA layers (q_a 7168 x 1536 + q_b 1536 x 64 x 192 + kv_a 7168 x 576 + kv_b 512 x 64 x 256 + o 8192 x 7168
    # + norms 1536 + 512 + 2 x 7168) + routers 60 x 384 x (7168 + 1 bias) + 2 x 163840 x 7168 + final norm
    spec = spec_of("moonshotai/Kimi-K2-Instruct")
    assert spec.mla.latent_dim == 576 and spec.moe.dense_layers == (0,)
    experts = 60 * 385 * 3 * 7168 * 2048
    attention = 61 * (7168 * 1536 + 1536 * 64 * 192 + 7168 * 576 + 512 * 64 * 256 + 8192 * 7168 + 1536 + 512 + 2 * 7168)
    total = experts + 3 * 7168 * 18432 + attention + 60 * 384 * 7169 + 2 * 163840 * 7168 + 7168
    assert build_inventory(spec, "bfloat16").parameters == total == 1_026_408_232_448
    # MLA: one 576-wide latent per token and layer on every TP rank: 61 x 576 x 2 B = 70,272 B per token
    assert kv_layout(spec, 8, 61, 16, 2).bytes_per_token == 70_272


# --- GLM-4.5 (glm4_moe.py, 0.10.0+) ----------------------------------------------------------------------


def test_glm45_air_per_rank_bytes_at_tp8(dev_cases):
    # TP 8: embed / lm_head 18944 x 4096; 46 x (qkv [1792, 4096] + bias 1792 + o [4096, 1536] + 2 norms); dense layer
    # 0 gate_up [2736, 4096] + down [4096, 1368]; 45 MoE layers of 128 experts (w13 [352, 4096] + w2 [4096, 176]),
    # a shared expert ([352, 4096] + [4096, 176]), an fp32 router [128, 4096] + fp32 correction bias [128];
    # a [131072, 64] rotary table (half-width rotary of 128): all bf16 but the router
    spec = spec_of("zai-org/GLM-4.5-Air")
    assert spec.rotary_dim == 64 and spec.qkv_bias and not spec.o_bias and spec.moe.dense_layers == (0,)
    expected = (2 * 18944 * 4096 * 2 + 46 * (1792 * 4096 + 1792 + 4096 * 1536) * 2 + (93 * 4096) * 2
                + (2736 * 4096 + 4096 * 1368) * 2 + 45 * 128 * (352 * 4096 + 4096 * 176) * 2
                + 45 * (352 * 4096 + 4096 * 176) * 2 + 45 * (128 * 4096 + 128) * 4 + 131072 * 64 * 2)
    inventory = build_inventory(spec, "bfloat16", Shard(8))
    assert inventory.total_bytes == expected == 26_819_001_856
    # an Ascend NPU run (vllm-ascend, upstream glm4_moe.py) logs 25.0148 GiB on rank 1: +0.15 %
    case = dev_cases["glm45-79-glm45-air-ascend-npu"]
    assert expected / GIB == pytest.approx(case["observed"]["weights_gib"], rel=0.003)


def test_glm45_has_three_dense_layers_and_qk_norms():
    spec = spec_of("zai-org/GLM-4.5")
    assert spec.moe.dense_layers == (0, 1, 2) and spec.qk_norm and spec.moe.num_experts == 160
    assert build_inventory(spec, "bfloat16").parameters == 352_797_829_024  # the published "355 B"
    from vram_detective.engines.vllm.settings import StartupRefusal

    with pytest.raises(StartupRefusal, match="0.10.0"):
        explain("zai-org/GLM-4.5-Air", "H100", vllm_version="0.9.2", tensor_parallel_size=8)


# --- Gemma 4 (gemma4.py / gemma4_mm.py, 0.19.0+) -----------------------------------------------------------


def test_gemma4_31b_layer_types_and_their_shapes():
    # 50 sliding layers: qkv (32 + 2 x 16) x 256 x 5376, o 5376 x 8192, q/k norms 256; 10 full layers with k = v:
    # qkv (32 + 2 x 4) x 512 x 5376 (vLLM fills the V slot with K), o 5376 x 16384, q/k norms 512
    spec = spec_of("google/gemma-4-31B-it")
    assert spec.full_attention_shape == (512, 4) and spec.full_attention_layers == tuple(range(5, 60, 6))
    inventory = build_inventory(spec, "bfloat16")
    attention = 50 * (64 * 256 * 5376 + 5376 * 8192) + 10 * (40 * 512 * 5376 + 5376 * 16384)
    assert _role_bytes(inventory, "attention") == 2 * attention
    # two rotary tables of max_position_embeddings rows: 256 wide (sliding) and 512 wide (full, head_size wide)
    assert _role_bytes(inventory, "rotary cache") == 262144 * (256 + 512) * 2
    # the vision tower: patch 1152 x 768, positions 2 x 10240 x 1152, 27 x (4 x 1152^2 + 2 x 72 + 4 x 1152
    # + 3 x 4304 x 1152), embed_vision 5376 x 1152 - replicated, bf16
    tower = 1152 * 768 + 2 * 10240 * 1152 + 27 * (4 * 1152 * 1152 + 2 * 72 + 4 * 1152 + 3 * 4304 * 1152) + 5376 * 1152
    assert _role_bytes(inventory, "vision") == 2 * tower
    assert _role_bytes(build_inventory(spec, "bfloat16", Shard(4)), "vision") == 2 * tower


def test_gemma4_kv_tokens_change_with_the_logged_formula_only(dev_cases):
    # vllm#43308 (gemma-4-31B AWQ, A100, ~50 GB of KV): ~55k tokens on 0.20.0, ~525k on 0.21.0 - the same pool:
    # 6 groups of 10 layers (5 sliding + 1 full, the 131,072-B full page doubled to the 262,144-B sliding one by
    # raising its block to 32), 50 GiB // 262,144 // 10 = 20,480 blocks. 0.20.0 logs 20,480 // 6 x 16 = 54,608;
    # 0.20.1+ int(concurrency x L) with 4,096 + 5 x (cdiv(1023 + 2048, 16) + 1) = 5,061 blocks per 131,072 tokens
    old, new = (explain("google/gemma-4-31B-it", "A100", vllm_version=v, max_model_len=131072,
                        kv_cache_memory_bytes=50 * GIB) for v in ("0.20.0", "0.21.0"))
    assert old.num_gpu_blocks == new.num_gpu_blocks == 20_480
    assert old.kv_cache_tokens == 54_608 and new.kv_cache_tokens == 530_400
    assert new.max_concurrency == pytest.approx(20_480 / 5_061)
    logged = dev_cases["vllm-43308-gemma4-31b-awq-a100-v0210"]["observed"]["kv_cache_tokens"]
    assert abs(new.kv_cache_tokens - logged) / logged < 0.02  # "~525k" in the user's table


def test_gemma4_effective_models_are_refused_in_one_line():
    from vram_detective.model.config import parse_config
    from vram_detective.model.spec import UnsupportedArchitectureError

    config = {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
              "text_config": {"hidden_size": 1536, "num_hidden_layers": 35, "num_attention_heads": 8,
                              "num_key_value_heads": 1, "intermediate_size": 6144, "vocab_size": 262144,
                              "hidden_size_per_layer_input": 256, "num_kv_shared_layers": 20}}
    with pytest.raises(UnsupportedArchitectureError, match="E2B / E4B"):
        parse_config(config, "google/gemma-4-E2B-it")


# --- DeepSeek-V3.2 (sparse attention: the lightning indexer, fp8_ds_mla; deepseek_v2.py 0.11.0+) -----------------


def test_deepseek_v32_kv_is_fp8_ds_mla_plus_the_indexer_keys():
    # auto / fp8 become fp8_ds_mla: 512 fp8 + 4 fp32 scales + 64 bf16 rope = 656 B per token and layer; each layer's
    # indexer cache holds 128 fp8 + one fp32 scale = 132 B; the sparse backend forces 64-token blocks
    b = explain("deepseek-ai/DeepSeek-V3.2-Exp", "H200", vllm_version="0.11.0", tensor_parallel_size=8,
                max_model_len=65536)
    assert b.block_size == 64 and b.kv_bytes_per_token == 61 * (656 + 132) == 48_068
    assert b.setting("kv_cache_dtype") == "fp8_ds_mla"
    bf16 = explain("deepseek-ai/DeepSeek-V3.2-Exp", "H200", vllm_version="0.11.0", tensor_parallel_size=8,
                   max_model_len=65536, kv_cache_dtype="bfloat16")
    assert bf16.kv_bytes_per_token == 61 * (576 * 2 + 132)
    with pytest.raises(Exception, match="0.11.0"):
        explain("deepseek-ai/DeepSeek-V3.2-Exp", "H200", vllm_version="0.10.2", tensor_parallel_size=8)


def test_deepseek_v32_indexer_weights_and_top_k_buffer():
    v3, v32 = spec_of("deepseek-ai/DeepSeek-V3"), spec_of("deepseek-ai/DeepSeek-V3.2-Exp")
    # per layer, replicated: wq_b [64 x 128, 1536], wk [128, 7168], weights_proj [64, 7168] + bias, k_norm 2 x 128
    per_layer = 8192 * 1536 + 128 * 7168 + 64 * 7168 + 64 + 2 * 128
    assert build_inventory(v32, "bfloat16").parameters - build_inventory(v3, "bfloat16").parameters == 61 * per_layer
    buffers = [g for g in build_inventory(v32, "bfloat16", batched_tokens=8192).groups if g.role == "model buffers"]
    assert sum(g.bytes for g in buffers) == 8192 * 2048 * 4  # topk_indices_buffer int32
