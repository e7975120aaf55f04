"""Quantization formats beyond AWQ/GPTQ/FP8: compressed-tensors, bitsandbytes, ModelOpt NVFP4, MXFP4, FBGEMM
FP8 and the attention scale buffers. Each layout is checked on one layer with the arithmetic written out
(vLLM sources: vllm/model_executor/layers/quantization/*, read per release with shared/tools/engine-src)."""
from __future__ import annotations

import json

import pytest

from vram_detective.engines.vllm.releases import release
from vram_detective.model.config import parse_config
from vram_detective.model.quantization import QuantizationError, parse_quantization_config
from vram_detective.engines.vllm.quant_kernels import (
    ONLINE_BNB, UnsupportedInReleaseError, UnsupportedOnGpuError, expert_tensors, kernel_for, kv_scale_tensors,
    linear_tensors,
)
from vram_detective.model.sources import catalog_entries, load_model

GIB = 1 << 30


def by_suffix(tensors) -> dict[str, int]:
    return {t.suffix: t.bytes for t in tensors}


def total(tensors) -> int:
    return sum(t.bytes for t in tensors)


def v1(version: str):
    return release(tuple(int(part) for part in version.split(".")), "v1")


def v0(version: str):
    return release(tuple(int(part) for part in version.split(".")), "v0")


# --- real quantization_config blocks -------------------------------------------------------------------

CT_W4A16 = {  # llm-compressor W4A16 (pack-quantized, group 128, symmetric, router and lm_head kept)
    "quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
    "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": None, "output_activations": None,
                                  "weights": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group",
                                              "group_size": 128, "actorder": None, "dynamic": False}}},
    "ignore": ["lm_head", "re:.*mlp.gate$"], "kv_cache_scheme": None,
}
CT_W8A8_INT8 = {  # neuralmagic ...-quantized.w8a8: int8 per-channel weights, dynamic per-token activations
    "quant_method": "compressed-tensors", "format": "int-quantized",
    "config_groups": {"group_0": {"targets": ["Linear"],
                                  "weights": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel",
                                              "group_size": None, "dynamic": False},
                                  "input_activations": {"num_bits": 8, "type": "int", "symmetric": True,
                                                        "strategy": "token", "dynamic": True}}},
    "ignore": ["lm_head"],
}
CT_FP8_BLOCK = {  # RedHatAI ...-FP8-block: 128x128 weight blocks, dynamic group activations
    "quant_method": "compressed-tensors", "format": "float-quantized",
    "config_groups": {"group_0": {"targets": ["Linear"],
                                  "weights": {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "block",
                                              "block_structure": [128, 128], "dynamic": False},
                                  "input_activations": {"num_bits": 8, "type": "float", "strategy": "group",
                                                        "group_size": 128, "dynamic": True}}},
    "ignore": ["lm_head"],
}
CT_NVFP4 = {
    "quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
    "config_groups": {"group_0": {"targets": ["Linear"],
                                  "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16,
                                              "symmetric": True, "dynamic": False},
                                  "input_activations": {"num_bits": 4, "type": "float", "strategy": "tensor_group",
                                                        "group_size": 16, "dynamic": "local"}}},
    "ignore": ["lm_head"],
}
UNSLOTH_BNB = {  # unsloth *-bnb-4bit
    "_load_in_4bit": True, "_load_in_8bit": False, "bnb_4bit_compute_dtype": "bfloat16", "bnb_4bit_quant_storage": "uint8",
    "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True, "llm_int8_enable_fp32_cpu_offload": False,
    "llm_int8_has_fp16_weight": False, "llm_int8_skip_modules": ["lm_head", "multi_modal_projector", "mlp"],
    "llm_int8_threshold": 6.0, "load_in_4bit": True, "load_in_8bit": False, "quant_method": "bitsandbytes",
}
MODELOPT_NVFP4 = {  # hf_quant_config.json as a whole
    "producer": {"name": "modelopt", "version": "0.23.0"},
    "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8", "group_size": 16,
                     "exclude_modules": ["lm_head", "model.layers.*.mlp.gate"]},
}
GPT_OSS = {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                                      "lm_head"], "quant_method": "mxfp4"}


def test_parse_compressed_tensors_schemes():
    w4 = parse_quantization_config(CT_W4A16)
    assert (w4.method, w4.scheme, w4.bits, w4.group_size, w4.zero_point, w4.desc_act) == \
        ("compressed-tensors", "wNa16", 4, 128, False, False)
    int8 = parse_quantization_config(CT_W8A8_INT8)
    assert (int8.scheme, int8.weight_strategy, int8.static_input_scale, int8.input_symmetric) == ("w8a8-int8", "channel", False, True)
    block = parse_quantization_config(CT_FP8_BLOCK)
    assert (block.scheme, block.weight_block) == ("w8a8-fp8", (128, 128))
    assert parse_quantization_config(CT_NVFP4).scheme == "nvfp4"
    act_order = json.loads(json.dumps(CT_W4A16))
    act_order["config_groups"]["group_0"]["weights"].update(actorder="group", symmetric=False)
    parsed = parse_quantization_config(act_order)
    assert parsed.desc_act and parsed.zero_point
    with pytest.raises(QuantizationError):
        parse_quantization_config({"quant_method": "compressed-tensors", "config_groups": {"g": {"targets": ["Linear"],
                                   "weights": {"num_bits": 2, "type": "int", "strategy": "group", "group_size": 64},
                                   "input_activations": {"num_bits": 2, "type": "int"}}}})


def test_parse_bitsandbytes_modelopt_mxfp4_fbgemm():
    bnb = parse_quantization_config(UNSLOTH_BNB)
    assert (bnb.method, bnb.bits, bnb.scheme, bnb.double_quant, bnb.group_size) == ("bitsandbytes", 4, "nf4", True, 64)
    eight = parse_quantization_config({"quant_method": "bitsandbytes", "load_in_8bit": True})
    assert (eight.bits, eight.scheme) == (8, "int8")
    # BitsAndBytesConfig defaults: fp4, no double quantization
    assert parse_quantization_config({"quant_method": "bitsandbytes", "load_in_4bit": True}).scheme == "fp4"
    nvfp4 = parse_quantization_config(MODELOPT_NVFP4)
    assert (nvfp4.method, nvfp4.group_size, nvfp4.kv_cache_scales) == ("modelopt-fp4", 16, True)
    folded = parse_quantization_config({"quant_method": "modelopt", **MODELOPT_NVFP4["quantization"]})
    assert folded == nvfp4
    oss = parse_quantization_config(GPT_OSS)
    assert (oss.method, oss.bits, oss.group_size, oss.experts_only) == ("mxfp4", 4, 32, True)
    fbgemm = parse_quantization_config({"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0,
                                        "modules_to_not_convert": ["lm_head"]})
    assert fbgemm.method == "fbgemm-fp8"


def test_which_modules_are_converted():
    ct = parse_quantization_config(CT_W4A16)
    # "re:.*mlp.gate$" keeps the router, not gate_up_proj; lm_head is never a compressed-tensors linear
    assert ct.converts("qkv_proj") and ct.converts("gate_up_proj") and ct.converts("experts")
    assert not ct.converts("lm_head")
    attention_kept = dict(CT_W4A16, ignore=["re:.*self_attn.*", "lm_head"])
    parsed = parse_quantization_config(attention_kept)
    assert not parsed.converts("qkv_proj") and not parsed.converts("o_proj") and parsed.converts("down_proj")
    # bitsandbytes: a whole dotted component ("mlp") keeps every MLP linear
    bnb = parse_quantization_config(UNSLOTH_BNB)
    assert bnb.converts("qkv_proj") and not bnb.converts("gate_up_proj") and not bnb.converts("down_proj")
    # one layer named in the skip list is not applied to every layer
    one_layer = parse_quantization_config(dict(UNSLOTH_BNB, llm_int8_skip_modules=["model.layers.0.mlp"]))
    assert one_layer.converts("down_proj")
    # ModelOpt wildcards
    nvfp4 = parse_quantization_config(MODELOPT_NVFP4)
    assert nvfp4.converts("qkv_proj") and not nvfp4.converts("lm_head")
    assert not parse_quantization_config({"quant_method": "modelopt", "quant_algo": "NVFP4",
                                          "exclude_modules": ["model.layers.*.self_attn*"]}).converts("qkv_proj")
    # MXFP4: only the fused experts
    oss = parse_quantization_config(GPT_OSS)
    assert oss.converts("experts") and not any(oss.converts(m) for m in ("qkv_proj", "o_proj", "lm_head"))


def test_every_catalog_quantization_block_parses():
    seen = set()
    for source in catalog_entries():
        raw = source.config.get("quantization_config") or source.config.get("compression_config")
        if not raw:
            continue
        quant = parse_quantization_config(raw)
        assert quant is not None and quant.describe(), source.repo_id
        seen.add(quant.method)
        parse_config(source.config, source.repo_id)  # the whole config too
    assert {"awq", "gptq", "fp8", "modelopt-fp8", "modelopt-fp4", "compressed-tensors", "bitsandbytes", "mxfp4"} <= seen


@pytest.mark.parametrize("repo_id,method", [
    ("Qwen/Qwen2.5-72B-Instruct-AWQ", "awq"),
    ("hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4", "awq"),
    ("hugging-quants/Meta-Llama-3.1-8B-Instruct-GPTQ-INT4", "gptq"),
    ("unsloth/qwen2.5-0.5b-instruct-unsloth-bnb-4bit", "bitsandbytes"),
    ("unsloth/Llama-3.2-3B-Instruct-bnb-4bit", "bitsandbytes"),
    ("neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8", "compressed-tensors"),
    ("nytopop/Qwen3-30B-A3B.w4a16", "compressed-tensors"),
    ("nvidia/Llama-3.1-8B-Instruct-FP4", "modelopt-fp4"),
    ("openai/gpt-oss-120b", "mxfp4"),
])
def test_catalog_has_the_quantized_variants(repo_id, method):
    source = load_model(repo_id)
    spec = parse_config(source.config, source.repo_id)
    assert spec.quantization.method == method
    if repo_id == "Qwen/Qwen2.5-72B-Instruct-AWQ":
        assert spec.intermediate_size == 29696  # Qwen pads the 72B MLP in its AWQ/GPTQ releases


# --- compressed-tensors W4A16 / W8A16 -------------------------------------------------------------------

def test_ct_w4a16_marlin_one_layer():
    quant = parse_quantization_config(CT_W4A16)
    layout = kernel_for(quant, (8, 9), v1("0.9.2"))
    assert layout.kernel == "gptq_marlin" and not layout.per_output_workspace
    # Llama-3.1-8B qkv_proj, TP 1: K = 4096, N = (32 + 2*8) * 128 = 6144
    tensors = by_suffix(linear_tensors(quant, layout, 4096, 6144, 3, "bfloat16", 4096))
    assert tensors == {
        "weight_packed": 4096 * 6144 * 4 // 8,  # 12,582,912: int32 [K/16, N*16/8] after gptq_marlin_repack
        "weight_scale": 4096 // 128 * 6144 * 2,  # 393,216: bf16 [K/g, N]
        "weight_shape": 2 * 8,  # int64 [2], never freed
    }
    # 0.8.x: marlin_make_workspace int32 [N/64*16] per layer = 6144/64*16*4 = 6,144 B
    old = by_suffix(linear_tensors(quant, kernel_for(quant, (8, 9), v0("0.8.5")), 4096, 6144, 3, "bfloat16", 4096))
    assert old["workspace"] == 6144


def test_ct_w4a16_act_order_replicates_scales_on_row_parallel_ranks():
    raw = json.loads(json.dumps(CT_W4A16))
    raw["config_groups"]["group_0"]["weights"]["actorder"] = "group"
    quant = parse_quantization_config(raw)
    layout = kernel_for(quant, (8, 0), v1("0.11.0"))
    # o_proj of Llama-3.1-8B at TP 2: K = 4096/2 = 2048 per rank, N = 4096
    tensors = by_suffix(linear_tensors(quant, layout, 2048, 4096, 1, "bfloat16", 4096))
    assert tensors["weight_packed"] == 2048 * 4096 // 2  # 4,194,304
    assert tensors["weight_scale"] == (4096 // 128) * 4096 * 2  # 262,144: full K/g = 32 rows on every rank
    assert tensors["weight_g_idx"] == tensors["g_idx_sort_indices"] == 2048 * 4  # int32 [K] each
    # at TP 1 the same layer has 32 rows as well, and at TP 2 without act-order only 16
    plain = parse_quantization_config(CT_W4A16)
    assert by_suffix(linear_tensors(plain, kernel_for(plain, (8, 0), v1("0.11.0")), 2048, 4096, 1, "bfloat16", 4096))[
        "weight_scale"] == 16 * 4096 * 2  # 131,072


def test_ct_asymmetric_zero_points_marlin_and_machete():
    raw = json.loads(json.dumps(CT_W4A16))
    raw["config_groups"]["group_0"]["weights"]["symmetric"] = False
    quant = parse_quantization_config(raw)
    marlin = by_suffix(linear_tensors(quant, kernel_for(quant, (8, 9), v1("0.19.0")), 4096, 6144, 3, "bfloat16", 4096))
    assert marlin["weight_zero_point"] == 32 * 6144 * 4 // 8  # 98,304: int32 [K/g, N/8]
    machete_layout = kernel_for(quant, (9, 0), v1("0.19.0"))
    assert machete_layout.kernel == "machete"
    machete = by_suffix(linear_tensors(quant, machete_layout, 4096, 6144, 3, "bfloat16", 4096))
    assert machete["weight_zero_point"] == 32 * 6144 * 2  # 393,216: bf16 [K/g, N], scales pre-applied
    # before 0.19 Machete took no zero points: Marlin on sm90
    assert kernel_for(quant, (9, 0), v1("0.11.0")).kernel == "gptq_marlin"


def test_ct_w8a16_channelwise():
    raw = json.loads(json.dumps(CT_W4A16))
    raw["config_groups"]["group_0"]["weights"].update(num_bits=8, strategy="channel", group_size=None)
    quant = parse_quantization_config(raw)
    tensors = by_suffix(linear_tensors(quant, kernel_for(quant, (8, 0), v1("0.11.0")), 4096, 6144, 3, "float16", 4096))
    assert tensors["weight_packed"] == 4096 * 6144  # one byte per weight
    assert tensors["weight_scale"] == 6144 * 2  # fp16 [1, N]


def test_ct_wna16_minimum_capability_by_release():
    quant = parse_quantization_config(CT_W4A16)
    with pytest.raises(UnsupportedOnGpuError):
        kernel_for(quant, (7, 5), v1("0.11.0"))  # get_min_capability 80
    assert kernel_for(quant, (7, 5), v1("0.12.0")).kernel == "gptq_marlin"  # 75 from 0.12
    with pytest.raises(UnsupportedInReleaseError):
        kernel_for(quant, (8, 0), v0("0.5.0"))  # no wNa16 scheme before 0.5.1


# --- compressed-tensors W8A8 int8 / FP8 -----------------------------------------------------------------

def test_ct_w8a8_int8_one_layer():
    quant = parse_quantization_config(CT_W8A8_INT8)
    layout = kernel_for(quant, (9, 0), v1("0.7.3"))
    # Llama-3.1-70B qkv_proj, TP 1: K = 8192, N = (64 + 2*8) * 128 = 10240
    tensors = by_suffix(linear_tensors(quant, layout, 8192, 10240, 3, "bfloat16", 8192))
    assert tensors == {"weight": 8192 * 10240, "weight_scale": 10240 * 4}  # int8 [N, K]; fp32 [N, 1]
    # TP 4: N = 10240/4 = 2560 per rank
    assert total(linear_tensors(quant, layout, 8192, 2560, 3, "bfloat16", 8192)) == 8192 * 2560 + 2560 * 4
    # static asymmetric activations: scalar scale + int32 zero point + azp_adj int32 [1, N]
    raw = json.loads(json.dumps(CT_W8A8_INT8))
    raw["config_groups"]["group_0"]["input_activations"].update(dynamic=False, symmetric=False, strategy="tensor")
    asym = parse_quantization_config(raw)
    extra = by_suffix(linear_tensors(asym, layout, 8192, 10240, 3, "bfloat16", 8192))
    assert (extra["input_scale"], extra["input_zero_point"], extra["azp_adj"]) == (4, 4, 10240 * 4)


def test_ct_w8a8_int8_per_tensor_scales_become_channelwise_on_fused_layers():
    raw = json.loads(json.dumps(CT_W8A8_INT8))
    raw["config_groups"]["group_0"]["weights"]["strategy"] = "tensor"
    quant = parse_quantization_config(raw)
    layout = kernel_for(quant, (8, 9), v1("0.11.0"))
    assert by_suffix(linear_tensors(quant, layout, 4096, 6144, 3, "bfloat16", 4096))["weight_scale"] == 6144 * 4
    assert by_suffix(linear_tensors(quant, layout, 4096, 4096, 1, "bfloat16", 4096))["weight_scale"] == 4


def test_ct_fp8_channel_tensor_block_and_marlin():
    channel = parse_quantization_config(dict(CT_W8A8_INT8, config_groups={"group_0": {
        "targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True}}}))
    assert channel.scheme == "w8a8-fp8"
    layout = kernel_for(channel, (9, 0), v1("0.11.0"))
    assert layout.kernel == "fp8"
    # Qwen3-8B gate_up_proj: K = 4096, N = 2 * 12288 = 24576
    assert by_suffix(linear_tensors(channel, layout, 4096, 24576, 2, "bfloat16", 4096)) == {
        "weight": 4096 * 24576, "weight_scale": 24576 * 4}  # fp8 [N, K]; fp32 [N, 1]
    block = parse_quantization_config(CT_FP8_BLOCK)
    # fp32 [ceil(24576/128), ceil(4096/128)] = [192, 32]
    assert by_suffix(linear_tensors(block, kernel_for(block, (9, 0), v1("0.11.0")), 4096, 24576, 2, "bfloat16", 4096))[
        "weight_scale"] == 192 * 32 * 4
    # sm86 has no FP8 units: CompressedTensorsW8A16Fp8 (Marlin): int32 repack + bf16 channel scales
    marlin = kernel_for(channel, (8, 6), v1("0.11.0"))
    assert marlin.kernel == "fp8_marlin"
    assert by_suffix(linear_tensors(channel, marlin, 4096, 24576, 2, "bfloat16", 4096)) == {
        "weight": 4096 * 24576, "weight_scale": 24576 * 2}
    with pytest.raises(UnsupportedOnGpuError):
        kernel_for(channel, (7, 5), v1("0.11.0"))


# --- bitsandbytes -----------------------------------------------------------------------------------------

def test_bnb_in_flight_4bit_keeps_the_nested_absmax_before_0_9_2():
    layout = kernel_for(ONLINE_BNB, (8, 0), v0("0.5.4"))
    assert layout.kernel == "bitsandbytes" and not layout.bnb_dequantized
    # Llama-3.1-8B qkv_proj: K = 4096, N = 6144 -> 25,165,824 values in q [4096x4096], k and v [1024x4096]
    tensors = by_suffix(linear_tensors(ONLINE_BNB, layout, 4096, 6144, 3, "bfloat16", 4096))
    assert tensors == {
        "weight": 25_165_824 // 2,  # 12,582,912: uint8 [K*N/2, 1]
        "weight.absmax": 25_165_824 // 64,  # 393,216: uint8, one per 64 values (double-quantized)
        # fp32 absmax of the absmax per 256 blocks: q 262,144/256 + k 65,536/256 + v 65,536/256 = 1,536 values
        "weight.nested_absmax": 1536 * 4,
        "weight.nested_offset": 3 * 4,  # one fp32 offset per shard
        "weight.quant_map": 3 * 16 * 4,  # the nf4 code table per shard
    }


def test_bnb_double_quant_expanded_to_fp32_from_0_9_2():
    quant = parse_quantization_config(UNSLOTH_BNB)
    old = by_suffix(linear_tensors(quant, kernel_for(quant, (8, 9), v0("0.9.0")), 896, 1152, 3, "bfloat16", 896))
    new = by_suffix(linear_tensors(quant, kernel_for(quant, (8, 9), v0("0.9.2")), 896, 1152, 3, "bfloat16", 896))
    # Qwen2.5-0.5B qkv_proj: K = 896, N = 14*64 + 2*2*64 = 1152 -> 1,032,192 values, 16,128 blocks of 64
    assert old["weight"] == new["weight"] == 1_032_192 // 2
    assert old["weight.absmax"] == 16_128  # uint8
    assert old["weight.nested_quant_map"] == 3 * 256 * 4  # a checkpoint brings one per tensor
    assert new["weight.absmax"] == 16_128 * 4  # fp32 after dequantize_dq
    assert "weight.nested_absmax" not in new


def test_bnb_8bit_and_release_and_gpu_limits():
    quant = parse_quantization_config({"quant_method": "bitsandbytes", "load_in_8bit": True})
    # int8 [N, K]; the SCB row scales stay on the CPU until the first forward
    assert by_suffix(linear_tensors(quant, kernel_for(quant, (8, 0), v0("0.6.4")), 4096, 6144, 3, "bfloat16", 4096)) == {
        "weight": 4096 * 6144}
    with pytest.raises(UnsupportedInReleaseError):
        kernel_for(ONLINE_BNB, (9, 0), v1("0.28.0"))  # bitsandbytes.py removed in 0.28
    with pytest.raises(UnsupportedOnGpuError):
        kernel_for(ONLINE_BNB, (6, 1), v0("0.6.4"))  # min capability 70
    assert kernel_for(ONLINE_BNB, (7, 0), v1("0.27.0")).bnb_dequantized


# --- ModelOpt NVFP4 ---------------------------------------------------------------------------------------

def test_nvfp4_native_pads_the_swizzled_block_scales():
    quant = parse_quantization_config(MODELOPT_NVFP4)
    layout = kernel_for(quant, (10, 0), v1("0.11.0"))
    assert layout.kernel == "fp4"
    # Llama-3.1-8B qkv_proj: K = 4096, N = 6144 (multiples of 128 and 16*4: no padding)
    tensors = by_suffix(linear_tensors(quant, layout, 4096, 6144, 3, "bfloat16", 4096))
    assert tensors["weight"] == 6144 * 4096 // 2  # uint8 [N, K/2]
    assert tensors["weight_scale"] == 6144 * (4096 // 16)  # fp8 [N, K/16] = 1,572,864
    assert sum(tensors[name] for name in ("input_scale", "weight_scale_2", "alpha", "input_scale_inv")) == 16
    # gpt-oss-sized o_proj: N = 2880 -> 2944 rows (x128); K/16 = 4096/16 = 256 (x4)
    odd = by_suffix(linear_tensors(quant, layout, 4096, 2880, 1, "bfloat16", 4096))
    assert odd["weight_scale"] == 2944 * 256


def test_nvfp4_marlin_fallback_by_release():
    quant = parse_quantization_config(MODELOPT_NVFP4)
    with pytest.raises(UnsupportedOnGpuError):
        kernel_for(quant, (9, 0), v1("0.8.5"))  # 0.8.x: Blackwell only
    with pytest.raises(UnsupportedInReleaseError):
        kernel_for(quant, (10, 0), v1("0.7.3"))  # no ModelOptNvFp4Config before 0.8
    layout = kernel_for(quant, (8, 9), v1("0.9.2"))
    assert layout.kernel == "fp4_marlin"
    tensors = by_suffix(linear_tensors(quant, layout, 4096, 6144, 3, "bfloat16", 4096))
    assert tensors == {
        "weight": 4096 * 6144 // 2,  # int32 repack, same bytes
        "weight_scale": 4096 // 16 * 6144,  # fp8 [K/16, N], unpadded
        "weight_scale_2": 2,  # bf16 scalar
        "input_scale_inv": 4,
    }
    with pytest.raises(UnsupportedOnGpuError):
        kernel_for(quant, (7, 5), v1("0.11.0"))
    assert kernel_for(quant, (7, 5), v1("0.15.1")).kernel == "fp4_marlin"


def test_nvfp4_experts():
    quant = parse_quantization_config(CT_NVFP4)
    layout = kernel_for(quant, (12, 0), v1("0.23.0"))
    assert layout.kernel == "fp4"
    # Qwen3-30B-A3B: E = 128, H = 2048, I = 768
    tensors = by_suffix(expert_tensors(quant, layout, 128, 2048, 768, "bfloat16"))
    assert tensors["w13_weight_packed"] == 128 * 1536 * 1024  # uint8 [E, 2I, H/2]
    assert tensors["w2_weight_packed"] == 128 * 2048 * 384  # uint8 [E, H, I/2]
    assert tensors["w13_weight_scale"] == 128 * 1536 * 128  # fp8 [E, 2I, H/16], 1536 % 128 == 0
    assert tensors["w2_weight_scale"] == 128 * 2048 * 48  # fp8 [E, H, I/16], 48 % 4 == 0


# --- MXFP4 (gpt-oss) --------------------------------------------------------------------------------------

def test_mxfp4_path_by_gpu_and_release():
    quant = parse_quantization_config(GPT_OSS)
    assert kernel_for(quant, (9, 0), v1("0.10.1")).moe_kernel == "marlin"  # torch 2.7.1: no triton_kernels path
    assert kernel_for(quant, (9, 0), v1("0.11.0")).moe_kernel == "marlin"  # triton_kernels not installed by pip
    assert kernel_for(quant, (9, 0), v1("0.12.0")).moe_kernel == "triton"  # vendored from 0.12
    assert kernel_for(quant, (8, 0), v1("0.19.0")).moe_kernel == "marlin"
    assert kernel_for(quant, (12, 0), v1("0.19.0")).moe_kernel == "marlin"
    assert kernel_for(quant, (10, 0), v1("0.11.0")).moe_kernel == "flashinfer-trtllm"
    with pytest.raises(UnsupportedOnGpuError):
        kernel_for(quant, (7, 5), v1("0.11.0"))
    with pytest.raises(UnsupportedInReleaseError):
        kernel_for(quant, (9, 0), v1("0.9.2"))
    with pytest.raises(QuantizationError):
        linear_tensors(quant, kernel_for(quant, (9, 0), v1("0.11.0")), 2880, 5120, 3, "bfloat16", 2880)


def test_mxfp4_marlin_experts_of_one_gpt_oss_120b_layer():
    quant = parse_quantization_config(GPT_OSS)
    layout = kernel_for(quant, (9, 0), v1("0.10.1"))
    # E = 128, H = 2880 -> H' = 3072 (x256), I = 2880 -> I' = 2944 (x128)
    tensors = by_suffix(expert_tensors(quant, layout, 128, 2880, 2880, "bfloat16"))
    assert tensors == {
        "w13_weight": 128 * (2 * 2944) * 3072 // 2,  # 1,157,627,904
        "w2_weight": 128 * 3072 * 2944 // 2,  # 578,813,952
        "w13_weight_scale": 128 * (2 * 2944) * (3072 // 32),  # 72,351,744: one e8m0 byte per 32 values
        "w2_weight_scale": 128 * 3072 * (2944 // 32),  # 36,175,872
        "w13_bias": 128 * 2 * 2944 * 2,  # bf16 [E, 2I']
        "w2_bias": 128 * 3072 * 2,  # bf16 [E, H']
    }
    # TP 2: I = 1440 per rank -> I' = 1536
    tp2 = by_suffix(expert_tensors(quant, layout, 128, 2880, 1440, "bfloat16"))
    assert tp2["w13_weight"] == 128 * 3072 * 3072 // 2 and tp2["w2_weight"] == 128 * 3072 * 1536 // 2


def gpt_oss_non_expert_bytes(layers: int, experts: int, tp: int = 1) -> int:
    """Per rank: embeddings + lm_head (bf16, vocab 201088 = 3142 x 64, untied), per layer qkv (+bias), o
    (+replicated bias), sinks, router (+bias), two norms; final norm; the fp32 YaRN cache (gpt_oss.py passes
    dtype=torch.float32 to get_rope): 4096 x 32 rows x 64."""
    hidden, vocab, head, q_heads, kv_heads = 2880, 201088, 64, 64, 8
    q, kv = q_heads // tp, max(1, kv_heads // tp)
    qkv_out = (q + 2 * kv) * head
    per_layer = (hidden * qkv_out * 2 + qkv_out * 2 + q * head * hidden * 2 + hidden * 2 + q * 2
                 + hidden * experts * 2 + experts * 2 + 2 * hidden * 2)
    return 2 * (vocab // tp) * hidden * 2 + layers * per_layer + hidden * 2 + 131072 * 64 * 4


def test_gpt_oss_120b_whole_model_matches_the_log():
    quant = parse_quantization_config(GPT_OSS)
    experts = total(expert_tensors(quant, kernel_for(quant, (9, 0), v1("0.10.1")), 128, 2880, 2880, "bfloat16"))
    weights = gpt_oss_non_expert_bytes(36, 128) + 36 * experts
    # 65.9285 GiB of tensors; the log says 65.9651 GiB (0.10.1 and 0.11.2, H100, Marlin). The rest is the
    # caching allocator: each 69 MiB w13 scale tensor leaves a 1 MiB remainder of its 70 MiB segment (36 MiB)
    assert weights / GIB == pytest.approx(65.9285, abs=1e-4)
    assert abs(weights / GIB + 36 / 1024 - 65.9651) < 0.002


def test_gpt_oss_20b_per_backend():
    quant = parse_quantization_config(GPT_OSS)
    base = gpt_oss_non_expert_bytes(24, 32)
    marlin = base + 24 * total(expert_tensors(quant, kernel_for(quant, (8, 0), v1("0.19.0")), 32, 2880, 2880, "bfloat16"))
    # A100 0.19.0 logged 13.72 GiB (Marlin; + ~18 MiB allocator remainders of the 17.25 MiB scale tensors)
    assert marlin / GIB == pytest.approx(13.7023, abs=1e-3)
    triton_layout = kernel_for(quant, (9, 0), v1("0.12.0"))
    triton = by_suffix(expert_tensors(quant, triton_layout, 32, 2880, 2880, "bfloat16"))
    # I' = 2880 (x64), H unpadded: weights 32*5760*1440 + 32*2880*1440; scales kept (32*5760*90, 32*2880*90)
    # plus Hopper-swizzled copies with rows padded to 256: 32*5888*90 and 32*3072*90; biases fp32
    assert triton["w13_precision_config.weight_scale"] == 32 * 5888 * 90
    assert triton["w2_precision_config.weight_scale"] == 32 * 3072 * 90
    assert triton["w13_bias"] == 32 * 5760 * 4
    hopper = base + 24 * sum(triton.values())
    # H100 llm-d run (13.47 GiB): fits the 0.12+ Triton path (13.4366 GiB + allocator), not 0.11.0 Marlin (13.70)
    assert hopper / GIB == pytest.approx(13.4366, abs=1e-3)


def test_mxfp4_flashinfer_blackwell_layer():
    quant = parse_quantization_config(GPT_OSS)
    tensors = by_suffix(expert_tensors(quant, kernel_for(quant, (10, 0), v1("0.11.0")), 32, 2880, 2880, "bfloat16"))
    # I' = H' = 3072 (x256): w13 32*6144*1536, w2 32*3072*1536, scales /16 of those, fp32 biases
    assert tensors["w13_weight"] == 32 * 6144 * 1536 and tensors["w2_weight"] == 32 * 3072 * 1536
    assert tensors["w13_weight_scale"] == 32 * 6144 * 96 and tensors["w13_bias"] == 32 * 6144 * 4
    assert tensors["gemm1_alpha"] == 32 * 4


# --- compressed-tensors W4A16 experts ---------------------------------------------------------------------

def test_ct_w4a16_experts_by_release():
    quant = parse_quantization_config(CT_W4A16)
    # Qwen3-30B-A3B, TP 1: E = 128, H = 2048, I = 768, group 128
    common = {
        "w13_weight_packed": 128 * 1536 * 2048 // 2,  # 201,326,592
        "w2_weight_packed": 128 * 2048 * 768 // 2,  # 100,663,296
        "w13_weight_scale": 128 * (2048 // 128) * 1536 * 2,  # 6,291,456 bf16
        "w2_weight_scale": 128 * (768 // 128) * 2048 * 2,  # 3,145,728
        "w13_weight_shape": 128 * 2 * 2, "w2_weight_shape": 128 * 2 * 2,  # [E, 2] in the model dtype
    }
    # 0.8.5: >= 16 experts -> CompressedTensorsWNA16MoEMethod (moe_wna16 Triton), which never frees its
    # g_idx / sort-index parameters: 2 x int32 [E, H] + 2 x int32 [E, I]
    triton = by_suffix(expert_tensors(quant, kernel_for(quant, (8, 6), v0("0.8.5")), 128, 2048, 768, "bfloat16"))
    assert triton == {**common, "w13_weight_g_idx": 128 * 2048 * 4, "w2_weight_g_idx": 128 * 768 * 4,
                      "w13_g_idx_sort_indices": 128 * 2048 * 4, "w2_g_idx_sort_indices": 128 * 768 * 4}
    # 0.9+: Marlin MoE (H % 128 == 0, I % 128 == 0) empties them
    assert by_suffix(expert_tensors(quant, kernel_for(quant, (8, 6), v1("0.9.2")), 128, 2048, 768, "bfloat16")) == common
    # 0.8.3: Marlin MoE only
    assert by_suffix(expert_tensors(quant, kernel_for(quant, (8, 6), v0("0.8.3")), 128, 2048, 768, "bfloat16")) == common


def test_ct_fp8_experts():
    raw = {"quant_method": "compressed-tensors", "config_groups": {"group_0": {"targets": ["Linear"],
           "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
           "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True}}}}
    quant = parse_quantization_config(raw)
    tensors = by_suffix(expert_tensors(quant, kernel_for(quant, (9, 0), v1("0.11.0")), 128, 2048, 768, "bfloat16"))
    assert tensors == {"w13_weight": 128 * 1536 * 2048, "w2_weight": 128 * 2048 * 768,
                       "w13_weight_scale": 128 * 1536 * 4, "w2_weight_scale": 128 * 2048 * 4}


# --- FBGEMM FP8 and the attention scale buffers ---------------------------------------------------------

def test_fbgemm_fp8_layer():
    quant = parse_quantization_config({"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0})
    tensors = by_suffix(linear_tensors(quant, kernel_for(quant, (9, 0), v1("0.11.0")), 4096, 6144, 3, "bfloat16", 4096))
    assert tensors == {"weight": 4096 * 6144, "weight_scale": 6144 * 4, "input_scale_ub": 4}
    marlin = kernel_for(quant, (8, 0), v1("0.11.0"))
    assert marlin.kernel == "fp8_marlin"


def test_kv_scale_buffers_by_release():
    assert [t.suffix for t in kv_scale_tensors()] == ["_k_scale", "_v_scale"]
    assert kv_scale_tensors(None, v0("0.6.4")) == ()  # python floats before 0.7
    assert sum(t.bytes for t in kv_scale_tensors(None, v1("0.11.0"))) == 7 * 4  # k, v, q, prob scales + 3 ranges
    assert {t.dtype for t in kv_scale_tensors(None, v1("0.33.0"))} == {"float32"}


# --- whole models against logged weights (dev cases; the inventory adds embeddings, norms, rotary cache) ---

def _inventory_gib(repo_id: str, capability: tuple[int, int], rules, quant=None) -> float:
    from vram_detective.engines.vllm.weights import Shard, build_inventory

    source = load_model(repo_id)
    spec = parse_config(source.config, source.repo_id)
    quant = quant or spec.quantization
    layout = kernel_for(quant, capability, rules)
    dtype = "bfloat16"
    return build_inventory(spec, dtype, Shard(), quant, layout).total_bytes / GIB


@pytest.mark.parametrize("repo_id,capability,rules,quant,logged", [
    # vllm PR 12569: 0.7.1-dev V1, 80 GB GPU, "Loading model weights took 67.7229 GB"
    ("neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8", (9, 0), ("0.7.1", "v1"), None, 67.7229),
    # issue 17327: 0.8.5 V0 on an RTX 3090, "Model loading took 15.6841 GiB"
    ("nytopop/Qwen3-30B-A3B.w4a16", (8, 6), ("0.8.5", "v0"), None, 15.6841),
    # Kaitchup benchmark: 0.5.4, -q bitsandbytes --load-format bitsandbytes, "took 5.3421 GB"
    ("meta-llama/Llama-3.1-8B-Instruct", (8, 0), ("0.5.4", "v0"), ONLINE_BNB, 5.3421),
])
def test_dev_cases_whole_model(repo_id, capability, rules, quant, logged):
    version, engine = rules
    gib = _inventory_gib(repo_id, capability, release(tuple(int(p) for p in version.split(".")), engine), quant)
    # tensors alone; the logged figure adds a few MiB of caching-allocator rounding
    assert logged - 0.006 <= gib <= logged


# --- AWQ / GPTQ fused-MoE experts (awq_marlin.py, gptq_marlin.py, moe_wna16.py) ----------------------------

AWQ4 = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}
GPTQ4 = {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True, "desc_act": False}


def test_awq_marlin_experts_of_one_deepseek_v2_lite_layer():
    # 64 experts, H 2048, I 1408 (TP 1), AWQ 4-bit g128 on an A100 (0.9.2: the Marlin MoE method passes the
    # shape check: 2048 % 128 == 0, 1408 % 128 == 0)
    quant = parse_quantization_config(AWQ4)
    layout = kernel_for(quant, (8, 0), v1("0.9.2"))
    tensors = by_suffix(expert_tensors(quant, layout, 64, 2048, 1408, "float16"))
    assert tensors["w13_qweight"] == 64 * 2048 * 2 * 1408 // 2 and tensors["w2_qweight"] == 64 * 1408 * 2048 // 2
    assert tensors["w13_scales"] == 64 * 16 * 2816 * 2 and tensors["w2_scales"] == 64 * 11 * 2048 * 2
    assert tensors["w13_qzeros"] == 64 * 16 * 2816 // 8 * 4 and tensors["w2_qzeros"] == 64 * 11 * 2048 // 8 * 4
    # 276,824,064 B of weights + 8,650,752 of scales + 2,162,688 of zeros (the worked example in the notes)
    assert total(expert_tensors(quant, layout, 64, 2048, 1408, "float16")) == 276_824_064 + 8_650_752 + 2_162_688


def test_moe_wna16_when_the_marlin_shape_check_fails():
    # TP 2: I = 704, 704 % 128 != 0 -> "Falling back to Moe WNA16 kernels" (0.8.5+); the group halves to 64 so it
    # divides I: scales [E, 2I, H/64] and [E, H, I/64] (twice the Marlin count), uint8 zeros likewise
    quant = parse_quantization_config(AWQ4)
    tensors = by_suffix(expert_tensors(quant, kernel_for(quant, (8, 0), v1("0.9.2")), 64, 2048, 704, "float16"))
    assert tensors["w13_qweight"] == 64 * 1408 * 2048 // 2 and tensors["w2_qweight"] == 64 * 2048 * 704 // 2
    assert tensors["w13_scales"] == 64 * 1408 * 32 * 2 and tensors["w2_scales"] == 64 * 2048 * 11 * 2
    assert tensors["w13_qzeros"] == 64 * 1408 // 2 * 32 and tensors["w2_qzeros"] == 64 * 2048 // 2 * 11
    # 0.7.3-0.8.4 chose MoeWNA16 by expert count (> 32) instead; 0.7.2 always Marlin
    assert "w13_qzeros" in by_suffix(expert_tensors(quant, kernel_for(quant, (8, 0), v1("0.7.3")), 64, 2048, 1408, "float16"))
    marlin = by_suffix(expert_tensors(quant, kernel_for(quant, (8, 0), v1("0.7.2")), 64, 2048, 1408, "float16"))
    assert marlin["w13_scales"] == 64 * 16 * 2816 * 2


def test_gptq_marlin_experts_keep_their_zero_points():
    # GPTQMarlinMoEMethod allocates qzeros in the params dtype and never frees them (int32 from 0.27)
    quant = parse_quantization_config(GPTQ4)
    for version, zero_bytes in (("0.9.2", 2), ("0.27.0", 4)):
        tensors = by_suffix(expert_tensors(quant, kernel_for(quant, (8, 0), v1(version)), 128, 2048, 768, "bfloat16"))
        assert tensors["w13_qzeros"] == 128 * 16 * 1536 // 8 * zero_bytes
    act_order = parse_quantization_config({**GPTQ4, "desc_act": True})
    tensors = by_suffix(expert_tensors(act_order, kernel_for(act_order, (8, 0), v1("0.9.2")), 128, 2048, 768, "bfloat16"))
    assert tensors["w13_g_idx"] == tensors["w13_g_idx_sort_indices"] == 128 * 2048 * 4


def test_awq_experts_need_the_marlin_moe_method():
    quant = parse_quantization_config(AWQ4)
    with pytest.raises(QuantizationError, match="0.6.3"):
        expert_tensors(quant, kernel_for(quant, (8, 0), v1("0.6.2")), 8, 4096, 14336, "float16")
    with pytest.raises(QuantizationError, match="Marlin"):  # sm75: plain awq kernel, no MoE method before 0.9.2
        expert_tensors(quant, kernel_for(quant, (7, 5), v1("0.8.5")), 8, 4096, 14336, "float16")


def test_mla_matrix_absorption_in_v0_0_7_1_to_0_7_3():
    from vram_detective import explain

    # DeepSeek-V2-Lite bf16 at TP 1: per layer W_QR [2048, 16 x 64] + W_Q_UK [2048, 16 x 512] + W_UV_O
    # [16 x 512, 2048], 27 layers (VLLM_MLA_PERFORM_MATRIX_ABSORPTION, attention/backends/mla/utils.py)
    absorbed = 27 * (2048 * 1024 + 2048 * 8192 + 8192 * 2048) * 2
    kw = dict(vllm_version="0.7.3", engine="v0", max_model_len=8192)
    with_absorption = explain("deepseek-ai/DeepSeek-V2-Lite", "A100", **kw).weights_bytes
    before = explain("deepseek-ai/DeepSeek-V2-Lite", "A100", vllm_version="0.7.0", max_model_len=8192).weights_bytes
    after = explain("deepseek-ai/DeepSeek-V2-Lite", "A100", vllm_version="0.8.0", engine="v0", max_model_len=8192).weights_bytes
    assert with_absorption - before == pytest.approx(absorbed, abs=2 * 1024 ** 2)  # allocator rounding aside
    assert after == pytest.approx(before, abs=2 * 1024 ** 2)
    # an AWQ checkpoint also keeps its dequantized kv_b [512, 16 x 256] (0.7.3 enables MLA for AWQ; 0.7.1-0.7.2
    # disable MLA for it: per-head K/V, no absorption)
    awq = explain("TechxGenus/DeepSeek-Coder-V2-Lite-Instruct-AWQ", "A100", **kw)
    assert awq.kv_bytes_per_token == 27 * 1280  # the 576-wide latent, padded to 256 B (V0 0.7.1-0.7.3)
    awq_071 = explain("TechxGenus/DeepSeek-Coder-V2-Lite-Instruct-AWQ", "A100", vllm_version="0.7.1", engine="v0",
                      max_model_len=8192)
    assert awq_071.kv_bytes_per_token == 27 * 2 * 16 * 192 * 2
