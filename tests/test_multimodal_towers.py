"""LLaVA-1.5 / LLaVA-NeXT: CLIP tower built up to vision_feature_layer, the projector, image_newline,
the text model from text_config, and the vision-encoder term of the profile - hand-computed counts."""
import copy

import pytest
from conftest import GIB, TARGET

from vram_detective import explain
from vram_detective.engines.vllm.profile import vision_item
from vram_detective.model.config import parse_config
from vram_detective.model.multimodal import _clip_built_layers
from vram_detective.model.spec import UnsupportedArchitectureError
from vram_detective.engines.vllm.weights import Shard, build_inventory
from vram_detective.model.sources import load_model

LLAVA15 = "llava-hf/llava-1.5-7b-hf"
LLAVA16 = "llava-hf/llava-v1.6-mistral-7b-hf"

# CLIP ViT-L/14-336 by hand (hidden 1024, MLP 4096, 336 / 14 = 24 -> 576 patches + class token = 577 positions)
CLASS, PATCH, POSITIONS, PRE_NORM = 1024, 1024 * 3 * 14 * 14, 577 * 1024, 2 * 1024
CLIP_LAYER = (4 * 1024                       # layer_norm1/2 weight + bias
              + 1024 * 3 * 1024 + 3 * 1024   # qkv_proj + bias
              + 1024 * 1024 + 1024           # out_proj + bias
              + 1024 * 4096 + 4096           # fc1 + bias
              + 4096 * 1024 + 1024)          # fc2 + bias
assert CLIP_LAYER == 12_596_224
TOWER_23 = CLASS + PATCH + POSITIONS + PRE_NORM + 23 * CLIP_LAYER  # vision_feature_layer -2: 23 of 24 layers
PROJECTOR = (1024 * 4096 + 4096) + (4096 * 4096 + 4096)  # linear_1 / linear_2 with biases, GELU between
POSITION_IDS_BYTES = 577 * 8  # the int64 position_ids buffer

# text models: Vicuna-7B (Llama 32 x 4096, MLP 11008, MHA) and Mistral-7B (MLP 14336, 8 KV heads), vocab 32064
EMBED = 32064 * 4096
LLAMA_LAYER = 4096 * 3 * 4096 + 4096 * 4096 + 4096 * 2 * 11008 + 11008 * 4096 + 2 * 4096
MISTRAL_LAYER = 4096 * (4096 + 2 * 1024) + 4096 * 4096 + 4096 * 2 * 14336 + 14336 * 4096 + 2 * 4096
VICUNA = 2 * EMBED + 32 * LLAMA_LAYER + 4096
MISTRAL = 2 * EMBED + 32 * MISTRAL_LAYER + 4096


def spec_of(repo):
    return parse_config(load_model(repo).config, repo)


def test_llava15_spec_reads_text_config_over_llama_defaults():
    spec = spec_of(LLAVA15)
    assert spec.architecture == "LlavaForConditionalGeneration" and spec.family == "llama"
    assert (spec.hidden_size, spec.num_layers, spec.num_attention_heads, spec.num_kv_heads) == (4096, 32, 32, 32)
    assert (spec.intermediate_size, spec.vocab_size, spec.max_position_embeddings) == (11008, 32064, 4096)
    assert spec.torch_dtype == "float16" and not spec.tie_word_embeddings
    v = spec.vision
    assert (v.kind, v.hidden_size, v.intermediate_size, v.num_layers, v.full_layers) == ("clip", 1024, 4096, 23, 24)
    assert not v.post_norm and not v.image_newline


def test_llava16_mistral_spec():
    spec = spec_of(LLAVA16)
    assert spec.architecture == "LlavaNextForConditionalGeneration"
    assert (spec.num_kv_heads, spec.intermediate_size, spec.sliding_window, spec.torch_dtype) == (8, 14336, None, "float16")
    assert spec.vision.kind == "clip_anyres" and spec.vision.image_newline
    assert max(spec.vision.grid_pinpoints) == (1008, 336)


def test_llava15_parameters_by_hand():
    inventory = build_inventory(spec_of(LLAVA15), "float16")
    assert inventory.parameters == VICUNA + TOWER_23 + PROJECTOR == 7_050_828_800
    assert inventory.bytes_by_role()["vision"] == 2 * (TOWER_23 + PROJECTOR) + POSITION_IDS_BYTES
    names = " ".join(group.name for group in inventory.groups)
    assert "post_layernorm" not in names and "image_newline" not in names


def test_llava16_parameters_by_hand_and_dev_weights():
    spec = spec_of(LLAVA16)
    inventory = build_inventory(spec, "float16")
    assert inventory.parameters == MISTRAL + TOWER_23 + PROJECTOR + 4096 == 7_554_149_376  # + image_newline
    # dev: file34680831065 (0.10.2, H100, fp16) logs "Model loading took 14.0786 GiB"
    b = explain(LLAVA16, "H100", vllm_version="0.10.2", max_model_len=4096, max_num_batched_tokens=16384,
                dtype="float16")
    assert b.weights_bytes / GIB == pytest.approx(14.0786, abs=0.002)
    assert b.kv_cache_tokens == pytest.approx(451_744, rel=0.01)


@pytest.mark.parametrize("feature_layer, built", [(-2, 23), (-1, 24), (22, 23), ([-2, -5, -8], 23), ([3, 10], 11)])
def test_clip_layers_built_up_to_vision_feature_layer(feature_layer, built):
    assert _clip_built_layers(feature_layer, 24) == built


def test_all_layers_bring_the_post_layernorm():
    config = copy.deepcopy(load_model(LLAVA15).config)
    config["vision_feature_layer"] = -1
    spec = parse_config(config)
    assert spec.vision.num_layers == 24 and spec.vision.post_norm
    assert build_inventory(spec, "float16").parameters == VICUNA + TOWER_23 + CLIP_LAYER + 2 * 1024 + PROJECTOR


def test_vision_items():
    assert vision_item(spec_of(LLAVA15)) == (577, 576)
    # anyres 672x672: base + 2x2 tiles = 5 x 577 positions; 576 + 48 x 48 + 48 newlines = 2,928 tokens
    assert vision_item(spec_of(LLAVA16)) == (5 * 577, 2928)


def test_tensor_parallel_shards_tower_and_projector():
    spec = spec_of(LLAVA15)
    one = build_inventory(spec, "float16").bytes_by_role()["vision"]
    from vram_detective.engines.vllm.weights import Shard
    two = build_inventory(spec, "float16", Shard(tensor_parallel_size=2)).bytes_by_role()["vision"]
    assert one / 2 < two < one


def test_llava15_v052_blocks_against_llama3_on_the_same_gpu():
    # vllm-6623: 0.5.2, one unnamed GPU; llava-1.5 3631 GPU / 512 CPU blocks, Llama-3-8B 13078 / 2048 on the
    # same GPU. The GPU is unknown, so compare the ratio on a 48 GB card (KV per token 512 KiB vs 128 KiB).
    llava = explain(LLAVA15, "RTX A6000", vllm_version="0.5.2")
    llama = explain("meta-llama/Meta-Llama-3-8B-Instruct", "RTX A6000", vllm_version="0.5.2")
    assert llava.num_cpu_blocks == 512 and llama.num_cpu_blocks == 2048
    assert llava.num_gpu_blocks / llama.num_gpu_blocks == pytest.approx(3631 / 13078, rel=0.01)


@pytest.mark.parametrize("architecture", ["Mistral3ForConditionalGeneration", "Phi4MMForCausalLM"])
def test_towers_not_sized_yet_are_refused(architecture):
    with pytest.raises(UnsupportedArchitectureError, match=architecture):
        parse_config({"architectures": [architecture], "model_type": "x"})


# --- Llama 3.2 Vision (Mllama) ----------------------------------------------------------------------------

# Llama-3.2-11B-Vision's config.json as published (the parts vLLM reads; not catalogued: used as a worked example)
MLLAMA_11B = {
    "architectures": ["MllamaForConditionalGeneration"], "model_type": "mllama", "image_token_index": 128256,
    "torch_dtype": "bfloat16",
    "text_config": {"model_type": "mllama_text_model", "cross_attention_layers": [3, 8, 13, 18, 23, 28, 33, 38],
                    "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
                    "num_hidden_layers": 40, "num_key_value_heads": 8, "max_position_embeddings": 131072,
                    "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "vocab_size": 128256, "tie_word_embeddings": False,
                    "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                     "original_max_position_embeddings": 8192, "rope_type": "llama3"}},
    "vision_config": {"model_type": "mllama_vision_model", "attention_heads": 16, "hidden_size": 1280,
                      "image_size": 560, "intermediate_layers_indices": [3, 7, 15, 23, 30], "intermediate_size": 5120,
                      "max_num_tiles": 4, "num_channels": 3, "num_global_layers": 8, "num_hidden_layers": 32,
                      "patch_size": 14, "vision_output_dim": 7680,
                      "supported_aspect_ratios": [[1, 1], [1, 2], [1, 3], [1, 4], [2, 1], [2, 2], [3, 1], [4, 1]]},
}
# by hand: 560 / 14 = 40 -> 1601 positions per tile, 4 tiles, 8 aspect ratios (+1 row)
MLLAMA_VISION = (588 * 1280                        # patch conv (bias-free linear over 3 x 14 x 14)
                 + 1280                            # class embedding
                 + 1601 * 1280 + 9 * 4 * 1601 * 1280   # gated position embedding + tile table
                 + 2 * 9 * 4 * 1280 + 3            # pre/post tile embeddings + 3 gates
                 + 4 * 1280                        # layernorm_pre/post
                 + 40 * (4 * 1280 + 1280 * 3840 + 1280 * 1280 + 1280 * 5120 + 5120 + 5120 * 1280 + 1280)
                 + 8 * 2                           # global layers' gate_attn / gate_ffn
                 + 7680 * 4096 + 4096)             # projector
MLLAMA_TEXT = (2 * 128256 * 4096 + 4096
               + 40 * (4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336 + 2 * 4096)  # self and cross layers alike
               + 8 * (2 * 128 + 2)                 # cross layers: q_norm / k_norm, attn / mlp gates
               + 8 * 4096)                         # embed_tokens: vocab_size + 8 rows


def test_mllama_parameters_by_hand():
    spec = parse_config(MLLAMA_11B, "meta-llama/Llama-3.2-11B-Vision")
    assert (spec.num_layers, spec.num_kv_heads, spec.vocab_size, spec.rope_scaling.kind) == (40, 8, 128256, "llama3")
    v = spec.vision
    assert (v.kind, v.num_layers, v.global_layers, v.vision_output_dim) == ("mllama", 32, 8, 7680)
    assert v.cross_attention_layers == (3, 8, 13, 18, 23, 28, 33, 38)
    assert build_inventory(spec, "bfloat16").parameters == MLLAMA_TEXT + MLLAMA_VISION == 10_670_220_835
    assert vision_item(spec) == (4 * 1601, 4 * 1601)


def test_mllama_v0_kv_page_counts_cross_attention_layers(tmp_path):
    # vllm-pr12126 (0.6.6, H100, max_model_len 65536, 128 seqs, eager): weights 19.86 GiB, 6001 GPU blocks of
    # 14.65 GiB -> 2.5 MiB per block = 40 layers (32 self + 8 cross) x 2 x 8 heads x 128 x 2 B x 16 tokens;
    # 1638 CPU blocks = 4 GiB / 2.5 MiB. The 36.63 GiB activation peak is the V0 vision encoder run on 128 images
    # at once (test_mllama_v0_profile_runs_the_vision_encoder_on_every_sequence).
    import json
    (tmp_path / "config.json").write_text(json.dumps(MLLAMA_11B))
    b = explain(str(tmp_path), "H100", vllm_version="0.6.6", max_model_len=65536, max_num_seqs=128, enforce_eager=True)
    assert b.weights_bytes / GIB == pytest.approx(19.86, rel=0.005)
    assert b.num_cpu_blocks == 1638
    assert b.num_gpu_blocks == b.kv_cache_bytes // (40 * 2 * 8 * 128 * 2 * 16)


# --- InternVL2 -----------------------------------------------------------------------------------------------

# OpenGVLab/InternVL2-8B's config.json, the keys vLLM reads (a worked example, not catalogued)
INTERNVL2_8B = {
    "architectures": ["InternVLChatModel"], "model_type": "internvl_chat", "torch_dtype": "bfloat16",
    "downsample_ratio": 0.5, "force_image_size": 448, "max_dynamic_patch": 12, "min_dynamic_patch": 1,
    "dynamic_image_size": True, "use_thumbnail": True, "select_layer": -1, "ps_version": "v2",
    "template": "internlm2-chat",
    "llm_config": {"architectures": ["InternLM2ForCausalLM"], "model_type": "internlm2", "hidden_size": 4096,
                   "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
                   "num_key_value_heads": 8, "max_position_embeddings": 32768, "vocab_size": 92553, "bias": False,
                   "rope_scaling": {"factor": 2.0, "type": "dynamic"}, "rope_theta": 1000000,
                   "rms_norm_eps": 1e-05, "tie_word_embeddings": False, "torch_dtype": "bfloat16"},
    "vision_config": {"model_type": "intern_vit_6b", "hidden_size": 1024, "image_size": 448, "intermediate_size": 4096,
                      "num_attention_heads": 16, "num_hidden_layers": 24, "patch_size": 14, "qkv_bias": True,
                      "qk_normalization": False, "norm_type": "layer_norm", "num_channels": 3},
}
INTERN_VIT_LAYER = (4 * 1024 + 1024 * 3072 + 3072 + 1024 * 1024 + 1024 + 1024 * 4096 + 4096 + 4096 * 1024 + 1024
                    + 2 * 1024)  # norms, qkv, proj, fc1, fc2 (all with biases), ls1/ls2
INTERN_VIT = 1024 + 1024 * 588 + 1024 + 1025 * 1024 + 24 * INTERN_VIT_LAYER   # class, patch conv + bias, positions
MLP1 = 2 * 4096 + 4096 * 4096 + 4096 + 4096 * 4096 + 4096  # LayerNorm(4 x 1024), two linears with biases
INTERNLM2_7B = 2 * 92553 * 4096 + 32 * MISTRAL_LAYER + 4096  # same shapes as Mistral-7B, vocabulary 92,553


def test_internvl2_8b_parameters_by_hand():
    spec = parse_config(INTERNVL2_8B, "OpenGVLab/InternVL2-8B")
    assert spec.family == "internlm2" and spec.architecture == "InternVLChatModel"
    v = spec.vision
    assert (v.kind, v.num_layers, v.spatial_merge_size, v.image_size, v.max_num_tiles) == ("intern_vit", 24, 2, 448, 13)
    assert build_inventory(spec, "bfloat16").parameters == INTERNLM2_7B + INTERN_VIT + MLP1 == 8_075_365_376
    # 448 / 14 = 32 -> 1,025 positions per tile, 256 tokens after the 2x2 pixel shuffle; 12 tiles + thumbnail
    assert vision_item(spec) == (13 * 1025, 13 * 256)


def test_internvl2_8b_explains_with_tp2():
    # vllm-7768 (0.5.4, 2 x RTX 4090, TP 2) gives nvidia-smi only; check that the plan runs and shards
    import json, tempfile, pathlib
    with tempfile.TemporaryDirectory() as folder:
        (pathlib.Path(folder) / "config.json").write_text(json.dumps(INTERNVL2_8B))
        b = explain(folder, "RTX 4090", vllm_version="0.5.4", tensor_parallel_size=2)
    assert 7.4 < b.weights_bytes / GIB < 7.7  # ~8.08 B x 2 B / 2 ranks, vocabulary and norms replicated aside


def test_mllama_v0_profile_runs_the_vision_encoder_on_every_sequence(tmp_path):
    # enc_dec_model_runner.profile_run: 128 sequences x 1 dummy 1024x1024 image -> a 2x2 canvas of 560 tiles
    # = 4 tiles; (560/14)^2 + 1 = 1601 positions padded to 1608 -> L = 6432. At a late local layer's MLP:
    # mask L^2 x 2 B + (5 saved + residual + normed) x L x 1280 x 2 B + (fc1 + GELU) x L x 5120 x 2 B.
    import json

    from vram_detective.engines.vllm.profile import mllama_tiles
    spec = parse_config(MLLAMA_11B, "meta-llama/Llama-3.2-11B-Vision")
    assert mllama_tiles(spec.vision) == 4
    per_image = 6432 * 6432 * 2 + 6432 * (7 * 1280 + 2 * 5120) * 2
    (tmp_path / "config.json").write_text(json.dumps(MLLAMA_11B))
    b = explain(str(tmp_path), "H100", vllm_version="0.6.6", max_model_len=65536, max_num_seqs=128, enforce_eager=True)
    assert b.activation_peak_bytes == 128 * per_image
    assert 128 * per_image / GIB == pytest.approx(39.30, abs=0.01)  # logged 36.63: test below
    # the peak scales with max_num_seqs (one image per sequence)
    small = explain(str(tmp_path), "H100", vllm_version="0.6.6", max_model_len=8192, max_num_seqs=16, enforce_eager=True)
    assert small.activation_peak_bytes == 16 * per_image


@pytest.mark.xfail(strict=True, reason="the mllama 11B log (H100, 0.6.6, 128 sequences, eager) shows a 36.63 GiB "
                   "activation peak; the tool predicts 39.30 GiB (+7.3 %), outside the project's 5 % target: the "
                   "vision encoder's peak is overestimated (which tensors are live at the peak is not settled)")
def test_mllama_v0_profile_peak_within_target_of_the_log(tmp_path):
    import json

    (tmp_path / "config.json").write_text(json.dumps(MLLAMA_11B))
    b = explain(str(tmp_path), "H100", vllm_version="0.6.6", max_model_len=65536, max_num_seqs=128, enforce_eager=True)
    assert b.activation_peak_bytes / GIB == pytest.approx(36.63, rel=TARGET)


def test_mllama_is_v0_only_and_gone_from_0_11(tmp_path):
    import json

    from vram_detective.engines.vllm.settings import StartupRefusal
    (tmp_path / "config.json").write_text(json.dumps(MLLAMA_11B))
    b = explain(str(tmp_path), "H100", vllm_version="0.9.2", max_model_len=8192)  # V1 default -> V0 fallback
    assert b.num_cpu_blocks > 0  # V0 keeps CPU swap blocks
    with pytest.raises(StartupRefusal, match="until 0.10.2"):
        explain(str(tmp_path), "H100", vllm_version="0.11.0", max_model_len=8192)


# --- Qwen3-VL / Qwen3.5 (Qwen3_VisionTransformer, qwen3_vl.py 0.11.0+) ---------------------------------------

# Qwen3-VL-4B's tower by hand: d 1024, MLP 4096, 24 blocks, out 2560, 3 deepstack mergers, 2304 positions
QWEN3_VL_BLOCK = 4 * 1024 + (1024 * 3072 + 3072) + (1024 * 1024 + 1024) + (1024 * 4096 + 4096) + (4096 * 1024 + 1024)
QWEN3_VL_MERGER = 2 * 1024 + (4096 * 4096 + 4096) + (4096 * 2560 + 2560)  # LayerNorm over d before the 2x2 shuffle
QWEN3_VL_DEEPSTACK = 2 * 4096 + (4096 * 4096 + 4096) + (4096 * 2560 + 2560)  # LayerNorm over 4d after it
QWEN3_VL_4B_TOWER = (1024 * 3 * 2 * 16 * 16 + 1024) + 2304 * 1024 + 24 * QWEN3_VL_BLOCK + QWEN3_VL_MERGER \
    + 3 * QWEN3_VL_DEEPSTACK


def _spec(repo_id):
    source = load_model(repo_id)
    return parse_config(source.config, source.repo_id)


def test_qwen3_vl_4b_tower_by_hand():
    assert QWEN3_VL_BLOCK == 12_596_224 and QWEN3_VL_4B_TOWER == 415_347_712
    spec = _spec("Qwen/Qwen3-VL-4B-Instruct")
    vision = build_inventory(spec, "bfloat16")
    assert sum(g.bytes for g in vision.groups if g.role == "vision") == 2 * QWEN3_VL_4B_TOWER
    # text: Qwen3 2560 x 36 layers (32 / 8 heads of 128, MLP 9728, q/k norms), tied 151936-row embedding
    layer = 2560 * (32 + 16) * 128 + 4096 * 2560 + 3 * 2560 * 9728 + 2 * 128 + 2 * 2560
    assert vision.parameters == QWEN3_VL_4B_TOWER + 36 * layer + 151936 * 2560 + 2560  # 4.44 B
    # TP 2: fused qkv / fc1 / merger fc1 sharded, row-parallel biases, norms, patch conv and positions whole
    two = build_inventory(spec, "bfloat16", Shard(2))
    assert sum(g.bytes for g in two.groups if g.role == "vision") == 419_465_216


def test_qwen3_vl_deepstack_buffers_and_mrope_rows_per_release():
    spec = _spec("Qwen/Qwen3-VL-4B-Instruct")
    b11 = explain("Qwen/Qwen3-VL-4B-Instruct", "H100", vllm_version="0.31.0", max_num_batched_tokens=8192)
    b32 = explain("Qwen/Qwen3-VL-4B-Instruct", "H100", vllm_version="0.32.0", max_num_batched_tokens=8192)
    # MRotaryEmbedding: [262144 x 4, 128] bf16 = 256 MiB until 0.31; 0.32 passes mrope_positions_factor 1
    assert b11.weights_bytes - b32.weights_bytes == 3 * 262144 * 128 * 2
    # Qwen2.5-VL keeps the x4 table in 0.32 (its decoder layers take get_rope's default factor)
    qwen25 = [explain("Qwen/Qwen2.5-VL-7B-Instruct", "H100", vllm_version=v).weights_bytes for v in ("0.31.0", "0.32.0")]
    assert qwen25[0] == qwen25[1]
    # deepstack_input_embeds: 3 x [max_num_batched_tokens, 2560] bf16, created with the model
    inventory = build_inventory(spec, "bfloat16", batched_tokens=8192)
    buffers = [g for g in inventory.groups if g.role == "model buffers"]
    assert sum(g.bytes for g in buffers) == 3 * 8192 * 2560 * 2
    assert not [g for g in build_inventory(_spec("Qwen/Qwen3.5-27B"), "bfloat16", batched_tokens=8192).groups
                if g.role == "model buffers"]  # Qwen3.5 has no deepstack


def test_qwen3_vl_fp8_follows_the_ignore_list(dev_cases):
    from vram_detective.engines.vllm.releases import release
    from vram_detective.engines.vllm.quant_kernels import kernel_for

    spec = _spec("Qwen/Qwen3-VL-4B-Instruct-FP8")
    kernel = kernel_for(spec.quantization, (8, 9), release((0, 11, 0), "v1"))
    kept = build_inventory(spec, "bfloat16", quant=spec.quantization, kernel=kernel)
    assert sum(g.bytes for g in kept.groups if g.role == "vision") == 2 * QWEN3_VL_4B_TOWER  # listed: bf16
    config = copy.deepcopy(load_model("Qwen/Qwen3-VL-4B-Instruct-FP8").config)
    config["quantization_config"]["modules_to_not_convert"] = ["lm_head"]
    unlisted = parse_config(config, "unlisted")
    quantized = build_inventory(unlisted, "bfloat16", quant=unlisted.quantization, kernel=kernel)
    assert sum(g.bytes for g in quantized.groups if g.role == "vision") < QWEN3_VL_4B_TOWER * 1.1  # fp8 linears
    # gpustack #3098 (0.11.0): "Model loading took 5.2076 GiB"; a < 70 GiB card's 2048 batched tokens
    case = dev_cases["gpustack-3098-qwen3vl-4b-fp8"]
    b = explain("Qwen/Qwen3-VL-4B-Instruct-FP8", "RTX 4090", vllm_version="0.11.0", max_model_len=8192)
    assert b.weights_bytes / GIB == pytest.approx(case["observed"]["weights_gib"], rel=0.005)


@pytest.mark.parametrize("version, rows", [("0.11.0", 153_600), ("0.12.0", 153_600), ("0.13.0", 16_384)])
def test_qwen3_vl_encoder_profile_per_release(version, rows):
    from vram_detective.engines.vllm.profile import qwen3_vl_encoder
    from vram_detective.engines.vllm.releases import release
    from vram_detective.engines.vllm.settings import resolve_settings
    from vram_detective.hardware import find_gpu
    from vram_detective.units import parse_version

    spec = _spec("Qwen/Qwen3-VL-4B-Instruct")
    rel = parse_version(version)
    settings, rules = resolve_settings({"max_model_len": 32768, "max_num_batched_tokens": 8192}, spec,
                                       find_gpu("H100"), release, rel)
    profile = qwen3_vl_encoder(spec, settings, rules, 2)
    # 0.11-0.12: one dummy video of 12,288 tokens scattered into an encoder-budget (12,288 x 12.5) zeros tensor;
    # 0.13+: one 4096 x 4096 image of 16,384 tokens. Rows are out_hidden 2560 x (1 + 3 deepstack) wide.
    assert profile.cache_bytes == rows * 2560 * 4 * 2
    patches = 12_288 * 4 if rows > 16_384 else 65_536
    assert profile.peak_bytes == patches * ((3 * 1024 + 3 * 4096) * 2 + 3 * 2 * 16 * 16 * 4)


def test_qwen35_tower_has_no_deepstack_mergers():
    # Qwen3.5-27B: the same block layout at d 1152, MLP 4304, 27 blocks, one merger into the 5120-wide text model
    block = 4 * 1152 + (1152 * 3456 + 3456) + (1152 * 1152 + 1152) + (1152 * 4304 + 4304) + (4304 * 1152 + 1152)
    merger = 2 * 1152 + (4608 * 4608 + 4608) + (4608 * 5120 + 5120)
    tower = (1152 * 1536 + 1152) + 2304 * 1152 + 27 * block + merger
    spec = _spec("Qwen/Qwen3.5-27B")
    assert spec.vision.deepstack_layers == 0 and spec.hybrid is not None and spec.mrope
    inventory = build_inventory(spec, "bfloat16")
    assert sum(g.bytes for g in inventory.groups if g.role == "vision") == 2 * tower == 921_460_192
