"""The tensors one rank holds (vllm/model_executor/layers/linear.py, vocab_parallel_embedding.py,
quantization/*.py; design/vllm-memory.md §4, §8, §9), checked tensor by tensor with hand arithmetic."""
from __future__ import annotations

import copy

import pytest

from conftest import GIB, MIB, spec_of
from vram_detective import explain
from vram_detective.engines.vllm.weights_plan import plan_weights
from vram_detective.engines.vllm.releases import release
from vram_detective.engines.vllm.settings import resolve_settings
from vram_detective.hardware import find_gpu
from vram_detective.model.config import parse_config
from vram_detective.engines.vllm.weights import Shard, build_inventory, pipeline_layer_counts
from vram_detective.model.sources import load_model
from vram_detective.units import parse_version


def groups_by_suffix(inventory, suffix: str):
    hits = [group for group in inventory.groups if group.name.endswith(suffix)]
    assert len(hits) == 1, (suffix, [g.name for g in inventory.groups])
    return hits[0]


def has_suffix(inventory, suffix: str) -> bool:
    return any(group.name.endswith(suffix) for group in inventory.groups)


# --- vocabulary padding ---------------------------------------------------------------------------------------


def test_opt_vocab_is_padded_to_a_multiple_of_64():
    spec = spec_of("facebook/opt-125m")
    assert spec.vocab_size == 50272 and spec.padded_vocab_size == 50304  # ceil(50272 / 64) x 64
    inventory = build_inventory(spec, "float16")
    roles = inventory.bytes_by_role()
    assert roles["embedding"] == 50272 * 768 * 2
    assert roles["vocab padding"] == 32 * 768 * 2  # 49,152 B on the GPU, no parameters
    assert roles["lm_head"] == 0  # tied
    assert roles["position embedding"] == 2050 * 768 * 2


def test_vocab_already_aligned_has_no_padding():
    inventory = build_inventory(spec_of("meta-llama/Llama-3.1-8B-Instruct"), "bfloat16")
    assert inventory.bytes_by_role()["vocab padding"] == 0  # 128256 = 2004 x 64


def test_vocab_padding_is_split_across_tp_ranks():
    spec = spec_of("facebook/opt-125m")
    inventory = build_inventory(spec, "float16", Shard(2))
    roles = inventory.bytes_by_role()
    # 50304 / 2 = 25152 rows per rank, 16 of them padding on average
    assert roles["embedding"] + roles["vocab padding"] == 25152 * 768 * 2


# --- tied embeddings ----------------------------------------------------------------------------------------------


def test_tied_embeddings_are_counted_once():
    spec = spec_of("Qwen/Qwen2.5-3B-Instruct")
    inventory = build_inventory(spec, "bfloat16")
    roles = inventory.bytes_by_role()
    assert roles["embedding"] == 151936 * 2048 * 2  # 622,329,856 B
    assert roles["lm_head"] == 0
    assert inventory.parameters == 3_085_938_688  # the checkpoint's 6,171,877,376 B / 2


def test_tied_embeddings_twice_with_pipeline_parallel():
    # With PP the last stage builds its own embed_tokens for the tied lm_head (qwen2.py: is_first_rank or
    # (tie_word_embeddings and is_last_rank)); the first stage keeps the input embedding.
    spec = spec_of("Qwen/Qwen2.5-3B-Instruct")
    first = build_inventory(spec, "bfloat16", Shard(1, 0, 2))
    last = build_inventory(spec, "bfloat16", Shard(1, 1, 2))
    table = 151936 * 2048 * 2
    assert first.bytes_by_role()["embedding"] == table and first.bytes_by_role()["lm_head"] == 0
    assert last.bytes_by_role()["lm_head"] == table and last.bytes_by_role()["embedding"] == 0
    assert first.parameters + last.parameters == 3_085_938_688 + 151936 * 2048


def test_untied_lm_head_only_on_the_last_stage():
    spec = spec_of("meta-llama/Llama-3.1-8B-Instruct")
    stages = [build_inventory(spec, "bfloat16", Shard(1, stage, 2)) for stage in range(2)]
    assert [s.bytes_by_role()["embedding"] for s in stages] == [128256 * 4096 * 2, 0]
    assert [s.bytes_by_role()["lm_head"] for s in stages] == [0, 128256 * 4096 * 2]
    assert sum(s.parameters for s in stages) == 8_030_261_248
    # the rotary cache lives on both stages (every stage has attention layers)
    assert [s.bytes_by_role()["rotary cache"] for s in stages] == [131072 * 128 * 2] * 2


# --- tensor parallel ------------------------------------------------------------------------------------------------


def test_meta_llama3_8b_tp4_rank_weights(dev_cases):
    """genlm #10 (vLLM 0.7.0/0.7.1, TP 4) logs 'Loading model weights took 3.7418 GB' on every rank.
    Per rank: embedding and lm_head 128256/4 = 32064 rows x 4096 x 2 B = 262,668,288 B each;
    per layer qkv 4096 x (8 + 2 x 2 heads) x 128, o 1024 x 4096, gate_up 4096 x 7168, down 3584 x 4096,
    2 norms 4096 = 54,534,144 params = 109,068,288 B, x 32 layers; final norm 8,192 B; rotary cache
    8192 x 128 x 2 B = 2,097,152 B (replicated): 4,017,627,136 B. Every large tensor is a whole number of
    2 MiB, so the caching allocator adds nothing to them; but 0.7.0's attention layers also keep four fp32
    scale buffers (_k_scale, _v_scale, k_range, v_range), each in its own 512 B block: 32 x 4 x 512 B =
    65,536 B -> 4,017,692,672 B = 3.74176 GiB, printed 3.7418."""
    spec = spec_of("meta-llama/Meta-Llama-3-8B")
    expected = 2 * 262_668_288 + 32 * 109_068_288 + 8_192 + 2_097_152
    assert expected == 4_017_627_136
    assert build_inventory(spec, "bfloat16", Shard(4)).total_bytes == expected
    b = explain("meta-llama/Meta-Llama-3-8B", "A100 80GB", vllm_version="0.7.0", tensor_parallel_size=4)
    assert b.weights_bytes == expected + 32 * 4 * 512
    logged = dev_cases["genlm-10-llama3-8b-tp4"]["observed"]["weights_gib"]
    assert f"{b.weights_bytes / GIB:.4f}" == f"{logged:.4f}"


def test_tp_shards_columns_and_rows():
    spec = spec_of("Qwen/Qwen2.5-7B-Instruct")
    inventory = build_inventory(spec, "bfloat16", Shard(2))
    # q heads 28/2 = 14, KV heads 4/2 = 2 -> qkv out (14 + 4) x 128 = 2304; bias sharded with it
    assert groups_by_suffix(inventory, "self_attn.qkv_proj.weight").shape == (2304, 3584)
    assert groups_by_suffix(inventory, "self_attn.qkv_proj.bias").shape == (2304,)
    assert groups_by_suffix(inventory, "self_attn.o_proj.weight").shape == (3584, 1792)  # row parallel: K split
    assert groups_by_suffix(inventory, "mlp.gate_up_proj.weight").shape == (18944, 3584)  # 2 x 18944 / 2
    assert groups_by_suffix(inventory, "mlp.down_proj.weight").shape == (3584, 9472)
    assert groups_by_suffix(inventory, "self_attn.qkv_proj.weight").count == 28


def test_tp_replicates_kv_heads_beyond_their_count():
    spec = spec_of("Qwen/Qwen2.5-7B-Instruct")  # 4 KV heads
    inventory = build_inventory(spec, "bfloat16", Shard(7))
    # 28 q heads / 7 = 4 per rank; one KV head per rank (replicated): (4 + 2 x 1) x 128 = 768
    assert groups_by_suffix(inventory, "self_attn.qkv_proj.weight").shape == (768, 3584)


def test_row_parallel_bias_is_replicated():
    spec = spec_of("facebook/opt-125m")
    inventory = build_inventory(spec, "float16", Shard(2))
    assert groups_by_suffix(inventory, "fc1.bias").shape == (1536,)  # column parallel: 3072 / 2
    assert groups_by_suffix(inventory, "fc2.bias").shape == (768,)  # row parallel: added once, full width


def test_norms_and_rotary_cache_are_replicated():
    spec = spec_of("meta-llama/Llama-3.1-8B-Instruct")
    one, four = build_inventory(spec, "bfloat16"), build_inventory(spec, "bfloat16", Shard(4))
    for role in ("norm", "rotary cache"):
        assert one.bytes_by_role()[role] == four.bytes_by_role()[role], role
    assert one.bytes_by_role()["rotary cache"] == 32 * MIB  # 131072 x 128 x 2 B


# --- pipeline parallel layer split ------------------------------------------------------------------------------------


@pytest.mark.parametrize("layers, stages, expected", [
    (28, 3, (9, 10, 9)),  # remainder 1 -> partitions[-2]
    (32, 3, (11, 11, 10)),  # remainder 2 -> partitions[-2], [-3]
    (31, 4, (8, 8, 8, 7)),
    (30, 4, (7, 8, 8, 7)),
    (80, 3, (27, 27, 26)),
    (32, 2, (16, 16)),
    (36, 1, (36,)),
    (4, 4, (1, 1, 1, 1)),
])
def test_pipeline_layer_counts_follow_get_pp_indices(layers, stages, expected):
    assert pipeline_layer_counts(layers, stages) == expected


def test_pipeline_stage_layer_names():
    spec = spec_of("Qwen/Qwen2.5-7B-Instruct")
    middle = build_inventory(spec, "bfloat16", Shard(1, 1, 3))
    group = groups_by_suffix(middle, "self_attn.qkv_proj.weight")
    assert group.name.startswith("model.layers.{9..18}.") and group.count == 10


# --- quantized layouts: Qwen2.5-7B's fused qkv, K = 3584 -> N = 4608, group 128 (28 groups) ----------------------------


def quantized(repo_id: str, gpu: str, version: str, config_patch: dict | None = None, tp: int = 1):
    if config_patch:
        config = copy.deepcopy(load_model(repo_id).config)
        config.update(config_patch)
        spec = parse_config(config, name=repo_id)
    else:
        spec = spec_of(repo_id)
    device = find_gpu(gpu)
    settings, rel = resolve_settings({"tensor_parallel_size": tp}, spec, device, release, parse_version(version))
    weights = plan_weights(spec, settings, device, rel)
    return build_inventory(spec, settings.dtype, Shard(tp), weights.quant, weights.kernel)


def tensor(inventory, suffix):
    group = groups_by_suffix(inventory, suffix)
    return group.shape, group.dtype, group.bytes_each


QKV = "model.layers.{0..27}.self_attn.qkv_proj."


def test_awq_gemm_layout_on_a_t4():
    # awq.py: qweight int32 [K, N/8], qzeros int32 [K/g, N/8], scales fp16 [K/g, N] (no Marlin below sm80)
    inventory = quantized("Qwen/Qwen2.5-7B-Instruct-AWQ", "T4", "0.10.2")
    assert tensor(inventory, QKV + "qweight") == ((3584, 576), "int32", 3584 * 4608 // 2)  # 8,257,536 B
    assert tensor(inventory, QKV + "qzeros") == ((28, 576), "int32", 28 * 576 * 4)  # 64,512 B
    assert tensor(inventory, QKV + "scales") == ((28, 4608), "float16", 28 * 4608 * 2)  # 258,048 B
    assert tensor(inventory, QKV + "bias") == ((4608,), "float16", 9216)  # biases stay 16-bit
    assert groups_by_suffix(inventory, QKV + "scales").role == "quantization metadata"
    assert groups_by_suffix(inventory, QKV + "qweight").role == "attention"
    # embeddings and lm_head are not quantized: 152064 x 3584 fp16 each
    roles = inventory.bytes_by_role()
    assert roles["embedding"] == roles["lm_head"] == 152064 * 3584 * 2


def test_awq_marlin_layout_on_a_4090():
    # awq_marlin.py: qweight repacked to [K/16, N*16/8] (same bytes), scales permuted (same shape),
    # zero points converted but kept as int32 [K/g, N/8]; g_idx empty
    inventory = quantized("Qwen/Qwen2.5-7B-Instruct-AWQ", "RTX 4090", "0.10.2")
    assert tensor(inventory, QKV + "qweight") == ((224, 9216), "int32", 8_257_536)
    assert tensor(inventory, QKV + "scales") == ((28, 4608), "float16", 258_048)
    assert tensor(inventory, QKV + "qzeros") == ((28, 576), "int32", 64_512)
    assert not has_suffix(inventory, QKV + "g_idx")


def test_gptq_exllama_layout_on_a_t4():
    # gptq.py: qweight int32 [K/8, N], qzeros int32 [K/g, N/8], scales fp16 [K/g, N], g_idx int32 [K]
    inventory = quantized("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4", "T4", "0.10.2")
    assert tensor(inventory, QKV + "qweight") == ((448, 4608), "int32", 8_257_536)
    assert tensor(inventory, QKV + "qzeros") == ((28, 576), "int32", 64_512)
    assert tensor(inventory, QKV + "scales") == ((28, 4608), "float16", 258_048)
    assert tensor(inventory, QKV + "g_idx") == ((3584,), "int32", 14_336)


def test_gptq_marlin_layout_on_a_4090():
    # gptq_marlin.py (symmetric, no act-order): qweight [K/16, N*16/8], scales [K/g, N]; qzeros, g_idx and
    # the sort indices are replaced by empty tensors
    inventory = quantized("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4", "RTX 4090", "0.10.2")
    assert tensor(inventory, QKV + "qweight") == ((224, 9216), "int32", 8_257_536)
    assert tensor(inventory, QKV + "scales") == ((28, 4608), "float16", 258_048)
    for gone in ("qzeros", "g_idx", "g_idx_sort_indices"):
        assert not has_suffix(inventory, QKV + gone), gone


def test_gptq_marlin_act_order_replicates_row_parallel_scales():
    # desc_act: g_idx + sort indices kept; row-parallel layers keep scales for the full K on every rank
    patch = {"quantization_config": {"bits": 4, "group_size": 128, "desc_act": True, "sym": True, "quant_method": "gptq"}}
    inventory = quantized("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4", "RTX 4090", "0.10.2", patch, tp=2)
    down = "model.layers.{0..27}.mlp.down_proj."
    # down_proj: K = 18944 / 2 = 9472 per rank, but scales cover 18944 / 128 = 148 groups
    assert tensor(inventory, down + "scales") == ((148, 3584), "float16", 148 * 3584 * 2)
    assert tensor(inventory, down + "g_idx") == ((9472,), "int32", 9472 * 4)
    assert tensor(inventory, down + "g_idx_sort_indices") == ((9472,), "int32", 9472 * 4)
    # column-parallel qkv keeps its own K: 3584 / 128 = 28 groups
    assert tensor(inventory, QKV + "scales")[0] == (28, 2304)


def test_fp8_block_layout():
    # fp8.py with weight_block_size [128, 128]: weight fp8 [N, K], weight_scale_inv fp32 [ceil(N/128), ceil(K/128)]
    patch = {"quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic",
                                     "weight_block_size": [128, 128]}, "torch_dtype": "bfloat16"}
    inventory = quantized("Qwen/Qwen2.5-7B-Instruct", "H100", "0.10.2", patch)
    assert tensor(inventory, QKV + "weight") == ((4608, 3584), "float8_e4m3fn", 4608 * 3584)  # 16,515,072 B
    assert tensor(inventory, QKV + "weight_scale_inv") == ((36, 28), "float32", 36 * 28 * 4)  # 4,032 B


def test_fp8_block_checkpoint_qwen3_8b():
    inventory = quantized("Qwen/Qwen3-8B-FP8", "H100", "0.10.2")
    # qkv: K 4096 -> N (32 + 2 x 8) x 128 = 6144
    assert tensor(inventory, "self_attn.qkv_proj.weight") == ((6144, 4096), "float8_e4m3fn", 25_165_824)
    assert tensor(inventory, "self_attn.qkv_proj.weight_scale_inv") == ((48, 32), "float32", 6_144)
    assert tensor(inventory, "mlp.down_proj.weight_scale_inv") == ((32, 96), "float32", 32 * 96 * 4)


def test_awq_model_total_against_the_seed():
    # whole-model sanity: the AWQ 7B lands within 0.5% of the seed's 5.2048 GiB (vLLM 0.6.3, 4090)
    inventory = quantized("Qwen/Qwen2.5-7B-Instruct-AWQ", "RTX 4090", "0.6.3")
    assert inventory.total_bytes / GIB == pytest.approx(5.2048, rel=0.005)
    # and the quantized linears hold 4 bits per weight: 28 layers x 233,046,016 linear weights / 2
    linear_weights = 3584 * 4608 + 3584 * 3584 + 3584 * 37888 + 18944 * 3584
    assert sum(g.bytes for g in inventory.groups if g.name.endswith(".qweight")) == 28 * linear_weights // 2
