"""config.json normalization, family by family, through the packaged catalog.

Expected values are read off each model's published config.json and vLLM's model code
(vllm/model_executor/models/*.py, vllm/config.py _get_and_verify_max_len, get_rope); parameter
counts are summed by hand in the comments.
"""
from __future__ import annotations

import copy
import json

import pytest

from conftest import spec_of
from vram_detective.engines.vllm.releases import release
from vram_detective.engines.vllm.settings import derive_max_model_len
from vram_detective.model.config import parse_config
from vram_detective.model.spec import ConfigError, UnsupportedArchitectureError
from vram_detective.engines.vllm.weights import build_inventory, rotary_caches
from vram_detective.model.sources import UnknownModelError, load_model

NEWEST = release((0, 33, 0), "v1")


def params(repo_id: str) -> int:
    spec = spec_of(repo_id)
    return build_inventory(spec, spec.torch_dtype).parameters


# --- catalog lookup ------------------------------------------------------------------------


def test_lookup_is_case_insensitive_and_returns_the_canonical_repo_id():
    source = load_model("QWEN/qwen3-8B")
    assert source.repo_id == "Qwen/Qwen3-8B"
    assert source.origin == "catalog"
    assert source.config["num_hidden_layers"] == 36


def test_unknown_model_suggests_close_catalog_names():
    with pytest.raises(UnknownModelError) as info:
        load_model("Qwen/Qwen3-8")
    message = str(info.value)
    assert "\n" not in message
    assert "Qwen/Qwen3-8B" in message


# --- Llama 1/2/3.x -------------------------------------------------------------------------


def test_llama2_7b_is_mha_fp16_4k():
    spec = spec_of("meta-llama/Llama-2-7b-hf")
    assert (spec.family, spec.architecture) == ("llama", "LlamaForCausalLM")
    assert (spec.hidden_size, spec.num_layers, spec.num_attention_heads, spec.num_kv_heads) == (4096, 32, 32, 32)
    assert spec.head_dim == 128  # 4096 / 32
    assert spec.intermediate_size == 11008
    assert spec.vocab_size == spec.padded_vocab_size == 32000  # 32000 = 500 x 64
    assert spec.torch_dtype == "float16"
    assert spec.tie_word_embeddings is False
    assert spec.rope_scaling is None
    assert spec.rotary_dim == 128
    assert not (spec.qkv_bias or spec.o_bias or spec.mlp_bias or spec.qk_norm)
    assert derive_max_model_len(spec, NEWEST)[0] == 4096


def test_meta_llama3_8b_instruct_gqa_8k():
    spec = spec_of("meta-llama/Meta-Llama-3-8B-Instruct")
    assert (spec.num_attention_heads, spec.num_kv_heads, spec.head_dim) == (32, 8, 128)
    assert spec.kv_size == 8 * 128
    assert spec.vocab_size == 128256
    assert spec.torch_dtype == "bfloat16"
    assert spec.rope_scaling is None
    assert derive_max_model_len(spec, NEWEST)[0] == 8192


def test_llama31_8b_llama3_rope_is_not_multiplied_into_max_len():
    spec = spec_of("meta-llama/Llama-3.1-8B-Instruct")
    assert spec.rope_scaling is not None
    assert spec.rope_scaling.kind == "llama3"
    assert spec.rope_scaling.factor == 8.0
    assert spec.rope_scaling.original_max_position == 8192
    # _get_and_verify_max_len skips su/longrope/llama3: 131072, not 131072 x 8
    assert derive_max_model_len(spec, NEWEST)[0] == 131072
    # one cos/sin cache of [max_position_embeddings, head_dim]
    assert rotary_caches(spec) == (("rotary_emb.cos_sin_cache", 131072, 128),)


def test_llama32_1b_tied_with_explicit_head_dim():
    spec = spec_of("meta-llama/Llama-3.2-1B-Instruct")
    assert spec.tie_word_embeddings is True
    assert (spec.hidden_size, spec.num_layers, spec.num_attention_heads, spec.num_kv_heads) == (2048, 16, 32, 8)
    assert spec.head_dim == 64
    assert spec.rope_scaling.kind == "llama3" and spec.rope_scaling.factor == 32.0
    assert derive_max_model_len(spec, NEWEST)[0] == 131072
    # 128256 x 2048 embedding once (tied)
    # + 16 x (2048 x (2048 + 2 x 512) + 2048 x 2048 + 2048 x 16384 + 8192 x 2048 + 2 x 2048) + 2048
    # = 262,668,288 + 16 x 60,821,504 + 2048 = 1,235,814,400 (the published "1.24B")
    assert params("meta-llama/Llama-3.2-1B-Instruct") == 1_235_814_400


# --- Mistral -------------------------------------------------------------------------------


@pytest.mark.parametrize("repo_id, vocab", [
    ("mistralai/Mistral-7B-Instruct-v0.2", 32000),
    ("mistralai/Mistral-7B-Instruct-v0.3", 32768),
])
def test_mistral_7b(repo_id, vocab):
    spec = spec_of(repo_id)
    assert spec.architecture == "MistralForCausalLM"
    assert spec.family == "llama"  # vLLM serves MistralForCausalLM with the Llama layout
    assert (spec.hidden_size, spec.num_layers, spec.num_attention_heads, spec.num_kv_heads, spec.head_dim) == (
        4096, 32, 32, 8, 128)
    assert spec.intermediate_size == 14336
    assert spec.vocab_size == vocab
    assert spec.sliding_window is None  # v0.2 and v0.3 dropped Mistral-7B-v0.1's 4096 window
    assert derive_max_model_len(spec, NEWEST)[0] == 32768


def test_mistral_nemo_explicit_head_dim_differs_from_hidden_over_heads():
    spec = spec_of("mistralai/Mistral-Nemo-Base-2407")
    assert spec.hidden_size == 5120 and spec.num_attention_heads == 32
    assert spec.head_dim == 128  # config head_dim, not 5120 / 32 = 160
    assert spec.q_size == 4096 and spec.kv_size == 1024
    assert spec.vocab_size == 131072
    assert derive_max_model_len(spec, NEWEST)[0] == 128000
    # 2 x 131072 x 5120 (untied)
    # + 40 x (5120 x (4096 + 2048) + 4096 x 5120 + 5120 x 2 x 14336 + 14336 x 5120 + 2 x 5120) + 5120
    # = 1,342,177,280 + 40 x 272,640,000 + 5120 = 12,247,782,400 (the published "12.2B")
    assert params("mistralai/Mistral-Nemo-Base-2407") == 12_247_782_400


# --- Qwen2 / Qwen2.5 / Qwen3 ----------------------------------------------------------------


@pytest.mark.parametrize("repo_id", [
    "Qwen/Qwen2-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-3B-Instruct", "Qwen/Qwen2.5-72B-Instruct",
])
def test_qwen2_has_qkv_bias_and_drops_the_unused_window(repo_id):
    raw = load_model(repo_id).config
    assert raw["use_sliding_window"] is False and raw["sliding_window"]  # the config carries a window ...
    spec = spec_of(repo_id)
    assert spec.family == "qwen2"
    assert spec.qkv_bias is True  # Qwen2Attention: qkv_proj bias=True, o_proj bias=False
    assert spec.o_bias is False and spec.mlp_bias is False
    assert spec.sliding_window is None and spec.sliding_window_pattern == ""  # ... that vLLM never uses
    assert spec.qk_norm is False


def test_qwen25_7b_shapes():
    spec = spec_of("Qwen/Qwen2.5-7B-Instruct")
    assert (spec.hidden_size, spec.num_layers, spec.num_attention_heads, spec.num_kv_heads, spec.head_dim) == (
        3584, 28, 28, 4, 128)
    assert spec.q_size + 2 * spec.kv_size == 4608  # fused qkv output
    assert spec.vocab_size == 152064
    assert derive_max_model_len(spec, NEWEST)[0] == 32768


def test_qwen3_q_k_norm_and_explicit_head_dim():
    spec = spec_of("Qwen/Qwen3-0.6B")
    assert spec.family == "qwen3"
    assert spec.qk_norm is True
    assert spec.qkv_bias is False
    assert spec.hidden_size == 1024 and spec.num_attention_heads == 16
    assert spec.head_dim == 128  # explicit; 1024 / 16 would be 64
    assert spec.q_size == 2048 and spec.kv_size == 1024
    assert spec.tie_word_embeddings is True
    assert spec.sliding_window is None
    assert derive_max_model_len(spec, NEWEST)[0] == 40960
    # 151936 x 1024 (tied) + 28 x (1024 x 4096 + 2048 x 1024 + 1024 x 6144 + 3072 x 1024 + 2 x 1024
    # + 2 x 128 q/k norms) + 1024 = 155,582,464 + 28 x 15,730,944 + 1024 = 596,049,920
    assert params("Qwen/Qwen3-0.6B") == 596_049_920


def test_qwen3_8b_untied():
    spec = spec_of("Qwen/Qwen3-8B")
    assert (spec.hidden_size, spec.num_layers, spec.num_attention_heads, spec.num_kv_heads, spec.head_dim) == (
        4096, 36, 32, 8, 128)
    assert spec.tie_word_embeddings is False
    assert spec.qk_norm is True


# --- Gemma 2 / 3 -----------------------------------------------------------------------------


def test_gemma2_9b():
    spec = spec_of("google/gemma-2-9b-it")
    assert spec.family == "gemma2"
    assert spec.norms_per_layer == 4  # input, post_attention, pre_feedforward, post_feedforward
    assert spec.tie_word_embeddings is True  # no tie_word_embeddings key: Gemma ties by default
    assert spec.head_dim == 256
    assert spec.q_size == 16 * 256 and spec.q_size != spec.hidden_size
    assert spec.forbids_fp16 is True
    assert spec.sliding_window == 4096 and spec.sliding_window_pattern == "alternate"
    assert derive_max_model_len(spec, NEWEST)[0] == 8192


def test_gemma3_1b_text():
    spec = spec_of("google/gemma-3-1b-it")
    assert spec.family == "gemma3"
    assert spec.norms_per_layer == 4
    assert spec.qk_norm is True
    assert spec.tie_word_embeddings is True
    assert spec.head_dim == 256
    assert spec.num_kv_heads == 1
    assert spec.forbids_fp16 is True  # model_type gemma3_text is in _FLOAT16_NOT_SUPPORTED_MODELS (0.11)
    assert spec.sliding_window == 512
    assert derive_max_model_len(spec, NEWEST)[0] == 32768
    # global layers (rope_theta 1e6) and local layers (rope_local_base_freq 1e4): two caches
    assert [rows for _, rows, _ in rotary_caches(spec)] == [32768, 32768]


def test_fp16_forbidden_models_fall_back_to_fp32_on_pre_ampere():
    """vLLM 0.9.1+ _resolve_auto_dtype: T4 supports [fp16, fp32]; gemma2 forbids fp16 -> fp32."""
    from vram_detective.engines.vllm.settings import resolve_dtype
    from vram_detective.hardware import find_gpu

    t4 = find_gpu("T4")
    assert resolve_dtype("auto", spec_of("google/gemma-2-9b-it"), t4, release((0, 11, 0), "v1"))[0] == "float32"
    assert resolve_dtype("auto", spec_of("Qwen/Qwen2.5-7B-Instruct"), t4, release((0, 11, 0), "v1"))[0] == "float16"


# --- Phi-3 / 3.5 / 4 -------------------------------------------------------------------------


def test_phi3_mini_4k():
    spec = spec_of("microsoft/Phi-3-mini-4k-instruct")
    assert spec.family == "phi3"
    assert (spec.hidden_size, spec.num_layers, spec.num_attention_heads, spec.num_kv_heads, spec.head_dim) == (
        3072, 32, 32, 32, 96)
    assert spec.vocab_size == 32064  # already a multiple of 64
    assert spec.rope_scaling is None
    assert spec.sliding_window == 2047  # every layer attends within 2047 tokens
    assert derive_max_model_len(spec, NEWEST)[0] == 4096


def test_phi35_mini_longrope():
    spec = spec_of("microsoft/Phi-3.5-mini-instruct")
    assert spec.rope_scaling.kind == "longrope"
    assert spec.rope_scaling.original_max_position == 4096
    assert derive_max_model_len(spec, NEWEST)[0] == 131072  # longrope: not multiplied
    # Phi3LongRoPEScaledRotaryEmbedding: short cache [4096, 96] + long cache [131072, 96], concatenated
    assert rotary_caches(spec) == (("rotary_emb.cos_sin_cache", 4096 + 131072, 96),)


def test_phi4_mini_partial_rotary_and_tied():
    spec = spec_of("microsoft/Phi-4-mini-instruct")
    assert spec.tie_word_embeddings is True
    assert (spec.num_attention_heads, spec.num_kv_heads, spec.head_dim) == (24, 8, 128)
    assert spec.rotary_dim == 96  # 128 x partial_rotary_factor 0.75
    assert spec.vocab_size == spec.padded_vocab_size == 200064
    assert rotary_caches(spec)[0][2] == 96


def test_phi4_14b():
    spec = spec_of("microsoft/phi-4")
    assert spec.family == "phi3"
    assert (spec.hidden_size, spec.num_layers, spec.num_attention_heads, spec.num_kv_heads, spec.head_dim) == (
        5120, 40, 40, 10, 128)
    assert spec.vocab_size == 100352
    assert spec.rope_scaling is None
    assert spec.sliding_window is None
    assert derive_max_model_len(spec, NEWEST)[0] == 16384


# --- Yi, InternLM2, GLM-4, OPT -----------------------------------------------------------------


def test_yi_15_6b_and_34b():
    small, large = spec_of("01-ai/Yi-1.5-6B"), spec_of("01-ai/Yi-1.5-34B")
    assert small.family == large.family == "llama"
    assert (small.num_kv_heads, small.vocab_size, small.head_dim) == (4, 64000, 128)
    assert (large.hidden_size, large.num_layers, large.num_attention_heads, large.num_kv_heads) == (7168, 60, 56, 8)
    assert large.head_dim == 128
    # 2 x 64000 x 4096 + 32 x (4096 x 5120 + 4096 x 4096 + 4096 x 22016 + 11008 x 4096 + 8192) + 4096
    assert params("01-ai/Yi-1.5-6B") == 524_288_000 + 32 * 173_023_232 + 4096  # 6,061,035,520
    # 2 x 64000 x 7168 + 60 x (7168 x 9216 + 7168 x 7168 + 7168 x 40960 + 20480 x 7168 + 2 x 7168) + 7168
    assert params("01-ai/Yi-1.5-34B") == 917_504_000 + 60 * 557_856_768 + 7168  # 34,388,917,248


def test_internlm25_dynamic_rope_doubles_max_len():
    spec = spec_of("internlm/internlm2_5-7b-chat")
    assert spec.family == "internlm2"
    assert spec.rope_scaling.kind == "dynamic" and spec.rope_scaling.factor == 2.0
    assert spec.num_kv_heads == 8 and spec.vocab_size == 92544
    assert spec.qkv_bias is False and spec.o_bias is False  # "bias": false
    # dynamic is not in (su, longrope, llama3): 32768 x 2
    assert derive_max_model_len(spec, NEWEST)[0] == 65536
    # DynamicNTKScalingRotaryEmbedding caches max_position x factor rows
    assert rotary_caches(spec) == (("rotary_emb.cos_sin_cache", 65536, 128),)


def test_glm4_9b_chatglm_layout():
    spec = spec_of("THUDM/glm-4-9b-chat")
    assert spec.architecture == "ChatGLMModel" and spec.family == "chatglm"
    assert spec.num_attention_heads == 32
    assert spec.num_kv_heads == 2  # multi_query_group_num
    assert spec.head_dim == 128  # kv_channels
    assert spec.vocab_size == 151552  # padded_vocab_size
    assert spec.rotary_dim == 64  # chatglm.py: get_rope(..., rotary_dim=head_dim // 2, ...)
    assert spec.qkv_bias is True and spec.o_bias is False  # add_qkv_bias / add_bias_linear
    assert spec.num_layers == 40 and spec.intermediate_size == 13696
    assert spec.tie_word_embeddings is False
    assert derive_max_model_len(spec, NEWEST)[0] == 131072  # seq_length
    assert rotary_caches(spec) == (("rotary_emb.cos_sin_cache", 131072, 64),)
    # 2 x 151552 x 4096 + 40 x (4096 x 4608 + 4608 bias + 4096 x 4096 + 4096 x 27392 + 13696 x 4096
    # + 2 x 4096) + 4096 = 1,241,513,984 + 40 x 203,960,832 + 4096 = 9,399,951,360 (the published "9.4B")
    assert params("THUDM/glm-4-9b-chat") == 9_399_951_360


def test_opt_125m():
    spec = spec_of("facebook/opt-125m")
    assert spec.family == "opt"
    assert spec.learned_positions == 2050  # OPTLearnedPositionalEmbedding: max_position_embeddings + 2
    assert spec.rotary_dim is None and rotary_caches(spec) == ()
    assert spec.qkv_bias and spec.o_bias and spec.mlp_bias and spec.norm_bias
    assert spec.gated_mlp is False
    assert spec.tie_word_embeddings is True
    assert spec.torch_dtype == "float16"
    assert spec.vocab_size == 50272
    # HF's own count for facebook/opt-125m is 125,239,296:
    # 50272 x 768 + 2050 x 768 + 12 x (768 x 2304 + 2304 + 768 x 768 + 768 + 768 x 3072 + 3072
    # + 3072 x 768 + 768 + 2 x 2 x 768) + 2 x 768
    assert params("facebook/opt-125m") == 125_239_296


# --- DeepSeek-R1 distills ------------------------------------------------------------------------


def test_r1_distill_qwen_7b_is_qwen2_with_long_context():
    spec = spec_of("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B")
    assert spec.family == "qwen2" and spec.qkv_bias
    assert spec.sliding_window is None  # sliding_window 4096 in config, use_sliding_window false
    assert derive_max_model_len(spec, NEWEST)[0] == 131072
    assert params("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B") == 7_615_616_512  # same shapes as Qwen2.5-7B


def test_r1_distill_qwen_32b():
    spec = spec_of("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B")
    assert (spec.hidden_size, spec.num_layers, spec.num_attention_heads, spec.num_kv_heads) == (5120, 64, 40, 8)
    assert spec.sliding_window is None
    assert derive_max_model_len(spec, NEWEST)[0] == 131072


def test_r1_distill_llama_70b():
    spec = spec_of("deepseek-ai/DeepSeek-R1-Distill-Llama-70B")
    assert spec.family == "llama"
    assert (spec.hidden_size, spec.num_layers, spec.num_attention_heads, spec.num_kv_heads) == (8192, 80, 64, 8)
    assert spec.rope_scaling.kind == "llama3"
    assert derive_max_model_len(spec, NEWEST)[0] == 131072


# --- what is refused -----------------------------------------------------------------------------


@pytest.mark.parametrize("architecture, model_type", [("DeepseekV4ForCausalLM", "deepseek_v4"),
                                                     ("Mistral3ForConditionalGeneration", "mistral3")])
def test_unsupported_architectures_are_refused_in_one_line(architecture, model_type):
    config = copy.deepcopy(load_model("Qwen/Qwen2.5-7B-Instruct").config)
    config["architectures"], config["model_type"] = [architecture], model_type
    with pytest.raises(UnsupportedArchitectureError) as info:
        parse_config(config, name="some/multimodal-model")
    message = str(info.value)
    assert architecture in message
    assert "\n" not in message and message.strip() == message and len(message) < 200


def test_unknown_architecture_is_refused():
    config = {"architectures": ["FancyNewForCausalLM"], "model_type": "fancy", "hidden_size": 64}
    with pytest.raises(UnsupportedArchitectureError, match="FancyNewForCausalLM"):
        parse_config(config)


def test_missing_hidden_size_is_a_config_error():
    config = copy.deepcopy(load_model("Qwen/Qwen2.5-7B-Instruct").config)
    del config["hidden_size"]
    with pytest.raises(ConfigError) as info:
        parse_config(config)
    assert "hidden_size" in str(info.value)
    assert not isinstance(info.value, UnsupportedArchitectureError)


@pytest.mark.parametrize("bad", [[], "not a dict", None])
def test_non_object_config_is_a_config_error(bad):
    with pytest.raises(ConfigError):
        parse_config(bad)


def test_unknown_torch_dtype_is_a_config_error():
    config = json.loads(json.dumps(load_model("Qwen/Qwen2.5-7B-Instruct").config))
    config["torch_dtype"] = "float13"
    with pytest.raises(ConfigError, match="float13"):
        parse_config(config)


def test_model_type_fallback_when_architectures_missing():
    config = copy.deepcopy(load_model("Qwen/Qwen2.5-7B-Instruct").config)
    del config["architectures"]
    assert parse_config(config).family == "qwen2"


# --- total parameters against the checkpoints' safetensors sizes ----------------------------------

# Documented differences between 2 x parameters and the checkpoint's total_size:
# Llama-2-7b stores rotary_emb.inv_freq buffers (32 layers x 64 fp32 = 8,192 bytes) that are not
# parameters (shared/models/safetensors_total_size.jsonl, "kind").
STORED_NON_PARAMETER_BYTES = {"meta-llama/Llama-2-7b-hf": 32 * 64 * 4}


def test_parameters_equal_checkpoint_sizes(checkpoint_sizes):
    checked = []
    for record in checkpoint_sizes:
        try:
            spec = spec_of(record["model"])
        except (UnknownModelError, UnsupportedArchitectureError):
            continue  # not in the catalog (e.g. Mixtral-Instruct) or not a dense decoder
        assert spec.torch_dtype in ("bfloat16", "float16"), record["model"]
        expected = (record["total_size"] - STORED_NON_PARAMETER_BYTES.get(spec.name, 0)) // 2
        inventory = build_inventory(spec, spec.torch_dtype)
        assert inventory.parameters == expected, (record["model"], inventory.parameters - expected)
        checked.append(spec.name)
    # every dense model of that file is in the catalog: a regression guard on the loop itself
    assert len(checked) >= 14, checked
    assert {"meta-llama/Llama-2-7b-hf", "microsoft/Phi-4-mini-instruct", "Qwen/Qwen2.5-3B-Instruct"} <= set(checked)


def test_vocab_padding_is_not_counted_as_parameters():
    # opt-125m: 50272 rows are parameters; the 32 rows VocabParallelEmbedding pads to 50304 are not
    spec = spec_of("facebook/opt-125m")
    inventory = build_inventory(spec, "float16")
    assert inventory.bytes_by_role()["vocab padding"] == (50304 - 50272) * 768 * 2
    assert inventory.parameters == 125_239_296


def test_multimodal_configs_give_the_text_model_and_its_vision_tower():
    qwen_vl = spec_of("Qwen/Qwen2.5-VL-7B-Instruct")
    assert (qwen_vl.family, qwen_vl.hidden_size, qwen_vl.num_layers, qwen_vl.num_kv_heads) == ("qwen2", 3584, 28, 4)
    assert qwen_vl.vision.kind == "qwen2_5_vl" and qwen_vl.vision.num_layers == 32 and qwen_vl.vision.out_hidden_size == 3584
    # Gemma 3 lists only what differs from Gemma3TextConfig's defaults (vocab 262208, tied, head_dim 256 ...)
    gemma = spec_of("google/gemma-3-4b-it")
    assert (gemma.hidden_size, gemma.num_layers, gemma.num_attention_heads, gemma.head_dim) == (2560, 34, 8, 256)
    assert gemma.vocab_size == 262208 and gemma.tie_word_embeddings and gemma.vision.kind == "siglip"
    big = spec_of("google/gemma-3-27b-it")
    assert (big.num_attention_heads, big.num_kv_heads, big.head_dim) == (32, 16, 128)


# --- derived catalog entries (scripts/derived_models.json) ---------------------------------

def test_llama3_70b_is_llama31_70b_without_the_long_context():
    old, new = spec_of("meta-llama/Meta-Llama-3-70B-Instruct"), spec_of("meta-llama/Llama-3.1-70B")
    assert old.rope_scaling is None and derive_max_model_len(old, NEWEST)[0] == 8192
    assert params("meta-llama/Meta-Llama-3-70B-Instruct") == params("meta-llama/Llama-3.1-70B") == 70_553_706_496
    assert (old.hidden_size, old.num_layers, old.num_kv_heads, old.vocab_size) == (new.hidden_size, new.num_layers,
                                                                                  new.num_kv_heads, new.vocab_size)


def test_qwen3_coder_30b_shares_the_2507_moe_and_its_fp8_block():
    fp8, bf16 = spec_of("Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8"), spec_of("Qwen/Qwen3-Coder-30B-A3B-Instruct")
    assert fp8.quantization.method == "fp8" and fp8.quantization.weight_block == (128, 128)
    assert bf16.quantization is None and bf16.moe == fp8.moe
    assert (bf16.moe.num_experts, bf16.moe.experts_per_token, bf16.moe.expert_intermediate) == (128, 8, 768)
    assert derive_max_model_len(bf16, NEWEST)[0] == 262144
    # 30.53 B parameters: 48 x (attention 2048 x (32 + 2 x 4) x 128 + 4096 x 2048 + 128 experts x 3 x 2048 x 768)
    assert params("Qwen/Qwen3-Coder-30B-A3B-Instruct") == params("Qwen/Qwen3-30B-A3B") == 30_532_122_624


@pytest.mark.parametrize("repo_id", ["Qwen/Qwen3-32B-AWQ", "Qwen/Qwen3-8B-AWQ", "Qwen/Qwen3-4B-AWQ",
                                     "Qwen/Qwen2.5-32B-Instruct-AWQ", "Qwen/QwQ-32B-AWQ"])
def test_qwen_awq_releases_keep_the_base_shapes(repo_id):
    spec = spec_of(repo_id)
    assert spec.quantization.method == "awq" and spec.quantization.bits == 4 and spec.quantization.group_size == 128
    assert spec.torch_dtype == "float16"


def test_mistral_7b_v01_has_its_4096_window():
    spec = spec_of("mistralai/Mistral-7B-Instruct-v0.1")
    assert spec.sliding_window == 4096 and spec.num_kv_heads == 8 and spec.vocab_size == 32000
