"""Mamba / linear-attention hybrids: state pages, the raised attention block size, tokens per release."""
import pytest

from vram_detective.engines.vllm.kv_groups import plan_kv_groups
from vram_detective.engines.vllm.kv_mamba import mamba_block_sizing
from vram_detective.engines.vllm.kv_layers import AttentionLayer, rule
from vram_detective.engines.vllm.mamba_state import mamba_state as _mamba_state
from vram_detective.engines.vllm.mamba_state import v0_mamba_cache_bytes
from vram_detective.model.hybrid import hybrid_layout, is_hybrid, mixer_facts


def mamba_state(config: dict, *args, **kw):
    """The engine reads the ModelSpec's mixer facts; these tests write config.json dicts."""
    return _mamba_state(mixer_facts(config), *args, **kw)

GIB = 1 << 30

# Bamba-9B as its config.json lists it (the numbers below are used as a worked example, not catalogued)
BAMBA = {"architectures": ["BambaForCausalLM"], "model_type": "bamba", "hidden_size": 4096,
         "num_hidden_layers": 32, "attn_layer_indices": [9, 18, 27], "num_attention_heads": 32,
         "num_key_value_heads": 8, "mamba_n_heads": 128, "mamba_d_head": 64, "mamba_n_groups": 1,
         "mamba_d_state": 128, "mamba_d_conv": 4, "mamba_expand": 2}

# Qwen3.5-27B text part as the vllm-40691 log implies it (64 layers, every 4th full attention, 4 KV heads
# of 256, GatedDeltaNet 16 key / 48 value heads of 128, float32 ssm state)
QWEN35 = {"architectures": ["Qwen3_5ForConditionalGeneration"],
          "text_config": {"model_type": "qwen3_5_text", "hidden_size": 5120, "num_hidden_layers": 64,
                          "full_attention_interval": 4, "num_attention_heads": 24, "num_key_value_heads": 4,
                          "head_dim": 256, "linear_num_key_heads": 16, "linear_num_value_heads": 48,
                          "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
                          "mamba_ssm_dtype": "float32"}}


def _layers(config, state_page, attention_page):
    return [AttentionLayer("mamba", state_page) if kind == "mamba" else AttentionLayer("full", attention_page)
            for kind in hybrid_layout(config).layers]


def test_bamba_layout_and_state_pages_tp1_tp2():
    layout = hybrid_layout(BAMBA)
    assert is_hybrid(BAMBA) and layout.attention_layers == 3 and layout.mamba_layers == 29
    # TP1: conv (4-1, 8192 + 2*1*128) = 3 x 8448 x 2 B = 50688; ssm (128, 64, 128) x 2 B = 2097152
    one = mamba_state(BAMBA, 1, "bfloat16")
    assert one.shapes == ((3, 8448), (128, 64, 128)) and one.page_bytes == 50688 + 2097152 == 2147840
    # TP2: n_groups 1 -> 2 (replicated), conv (3, (8192 + 2*2*128) / 2 = 4352); ssm (64, 64, 128)
    two = mamba_state(BAMBA, 2, "bfloat16")
    assert two.shapes == ((3, 4352), (64, 64, 128)) and two.page_bytes == 3 * 4352 * 2 + 64 * 64 * 128 * 2 == 1074688
    # speculative tokens widen the conv state only
    assert mamba_state(BAMBA, 1, "bfloat16", num_speculative_tokens=2).shapes[0] == (5, 8448)


def test_raised_block_size_and_padding():
    # attention page per token at TP1: 2 x 8 KV heads x 128 x 2 B = 4096; 16 x cdiv(2147840, 16 x 4096) = 16 x 33
    sizing = mamba_block_sizing(4096, 2147840, 16, 4096, (0, 11, 0))
    assert sizing.block_size == 528 and sizing.attention_page_bytes == 528 * 4096 == 2162688
    assert sizing.padded_page_bytes == 2162688 and sizing.mamba_block_size == 4096
    # (2162688 - 2147840) / 2147840 = 0.6913 %
    assert sizing.log_lines == (
        "Setting attention block size to 528 tokens to ensure that attention page size is >= mamba page size.",
        "Padding mamba page size by 0.69% to ensure that mamba page size and attention page size are exactly equal.")
    # a user block size already large enough is kept, and only the padding is logged
    kept = mamba_block_sizing(4096, 2147840, 1024, 4096, (0, 11, 0))
    assert kept.block_size == 1024 and len(kept.log_lines) == 1
    # MLA aligns to 64 from 0.11.2: 64 x cdiv(2147840, 64 x 1152) = 64 x 30
    assert mamba_block_sizing(1152, 2147840, 16, 4096, (0, 11, 2), mla=True).block_size == 1920
    assert mamba_block_sizing(1152, 2147840, 16, 4096, (0, 11, 0), mla=True).block_size == 16 * 117


def test_bamba_v1_tokens_per_release():
    layers = _layers(BAMBA, 2147840, 2 * 16 * 8 * 128 * 2)
    # groups of 3 (fewest layers of a type): 10 Mamba groups (29 layers + 1 padding) + 1 attention group;
    # block id = 3 x 2162688 = 6488064 B; 10 GiB // 6488064 = 1654 blocks
    plans = {v: plan_kv_groups(layers, 10 * GIB, 16, 4096, 8192, 256, v, "v1") for v in ((0, 10, 1), (0, 21, 0))}
    old, new = plans[(0, 10, 1)], plans[(0, 21, 0)]
    assert old.block_bytes == 6488064 and old.num_blocks == 1654 and len(old.groups) == 11
    assert "Add 1 padding layers, may waste at most 3.45% KV cache memory" in old.log_lines
    # per request: 10 Mamba groups x 1 block + cdiv(4096, 528) = 8 attention blocks = 18
    assert old.blocks_per_request == 18
    assert old.kv_cache_tokens == 1654 // 11 * 528 == 79200
    assert old.max_concurrency == pytest.approx(1654 / 18)
    assert new.kv_cache_tokens == int(1654 / 18 * 4096) == 376376
    assert [g.block_size for g in old.groups if g.kind == "full"] == [528]
    assert all(g.blocks_per_request == 1 for g in old.groups if g.kind == "mamba")


def test_qwen35_27b_matches_vllm_40691_log():
    layout = hybrid_layout(QWEN35)
    assert layout.attention_layers == 16 and layout.mamba_layers == 48
    state = mamba_state(QWEN35, 1, "bfloat16")
    # conv (3, 2*16*128 + 48*128 = 10240) bf16 = 61440; ssm (48, 128, 128) fp32 = 3145728
    assert state.shapes == ((3, 10240), (48, 128, 128)) and state.page_bytes == 3207168
    layers = _layers(QWEN35, state.page_bytes, 2 * 16 * 4 * 256 * 2)
    # 16 x cdiv(3207168, 16 x 4096) = 784; block id = 784 x 4096 x 16 layers
    plan = plan_kv_groups(layers, 1487 * 784 * 4096 * 16 + 5, 16, 32768, 16384, 16, (0, 19, 0), "v1")
    assert plan.log_lines[0] == ("Setting attention block size to 784 tokens to ensure that attention page size "
                                 "is >= mamba page size.")
    # "GPU KV cache size: 290,864 tokens" = 1487 // 4 groups x 784; "33.04x" = 1487 / (3 + cdiv(32768, 784))
    assert plan.kv_cache_tokens == 290864
    assert round(plan.max_concurrency, 2) == 33.04


def test_mamba_cache_modes_per_release():
    layers = _layers(BAMBA, 2147840, 2 * 16 * 8 * 128 * 2)
    align = plan_kv_groups(layers, 10 * GIB, 16, 4096, 8192, 256, (0, 18, 0), "v1", mamba_cache_mode="align")
    assert align.blocks_per_request == 10 * 2 + 8
    with pytest.raises(ValueError):
        plan_kv_groups(layers, 10 * GIB, 16, 4096, 8192, 256, (0, 14, 0), "v1", mamba_cache_mode="align")
    with pytest.raises(ValueError):
        plan_kv_groups(layers, 10 * GIB, 16, 4096, 8192, 256, (0, 11, 0), "v1", mamba_cache_mode="all")
    # "all" (prefix caching, 0.11.2+): 768-token blocks, cdiv(4096, 768) = 6 states per Mamba group
    full = plan_kv_groups(layers, 10 * GIB, 16, 4096, 8192, 256, (0, 12, 0), "v1", mamba_cache_mode="all")
    assert full.blocks_per_request == 10 * 6 + 6
    # "all": attention block = multiple of lcm(256, 16) covering cdiv(2147840, 4096) = 525 tokens -> 768
    assert mamba_block_sizing(4096, 2147840, 16, 4096, (0, 18, 0), mamba_cache_mode="all").block_size == 768


def test_v0_counts_attention_layers_only_bamba_pr10909():
    # vllm-pr10909-bamba-h100-tp2 (V0): 34.78 GiB of KV, 3 attention layers of 4 KV heads x 128 at TP2 in
    # float32 (its 18.49 GiB of weights per rank are ~9.8 B parameters x 4 B / 2):
    # block = 2 x 16 x 4 x 128 x 4 B x 3 = 196608 B -> 189945 blocks, 189945 x 16 / 1024 = 2967.89x
    layers = _layers(BAMBA, 1074688, 2 * 16 * 4 * 128 * 4)
    plan = plan_kv_groups(layers, int(34.78 * GIB), 16, 1024, 1024, 256, (0, 6, 4), "v0")
    assert plan.block_bytes == 196608 and plan.num_blocks == 189945
    assert round(plan.max_concurrency, 2) == 2967.89
    assert any("MambaCacheManager" in note for note in plan.notes)
    # its Mamba cache: 29 layers x 256 sequences x 1074688 B, outside the blocks
    assert v0_mamba_cache_bytes(mamba_state(BAMBA, 2, "bfloat16"), 29, 256) == 29 * 256 * 1074688


def test_v1_before_0101_refuses():
    assert not rule((0, 9, 2), "v1_mamba") and rule((0, 10, 1), "v1_mamba")
    with pytest.raises(NotImplementedError):
        plan_kv_groups(_layers(BAMBA, 2147840, 65536), 10 * GIB, 16, 4096, 8192, 256, (0, 9, 2), "v1")


def test_other_families():
    jamba = {"architectures": ["JambaForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32,
             "attn_layer_period": 8, "attn_layer_offset": 4, "mamba_d_state": 16, "mamba_d_conv": 4,
             "mamba_expand": 2, "num_attention_heads": 32, "num_key_value_heads": 8}
    layout = hybrid_layout(jamba)
    assert [i for i, k in enumerate(layout.layers) if k == "attention"] == [4, 12, 20, 28]
    # Mamba1 TP2: conv (3, 4096) + ssm (4096, 16), bf16
    assert mamba_state(jamba, 2, "bfloat16").page_bytes == (3 * 4096 + 4096 * 16) * 2
    nemo = {"architectures": ["NemotronHForCausalLM"], "hidden_size": 4096, "hybrid_override_pattern": "M-M*-",
            "mamba_num_heads": 128, "mamba_head_dim": 64, "n_groups": 8, "ssm_state_size": 128, "conv_kernel": 4,
            "num_attention_heads": 32, "num_key_value_heads": 8}
    assert hybrid_layout(nemo).layers == ("mamba", "none", "mamba", "attention", "none")
    state = mamba_state(nemo, 1, "bfloat16")  # ssm float16 by default (NemotronHForCausalLMConfig)
    assert state.dtypes == ("bfloat16", "float16") and state.shapes == ((3, 8192 + 2 * 8 * 128), (128, 64, 128))
    minimax = {"architectures": ["MiniMaxText01ForCausalLM"], "hidden_size": 6144, "num_hidden_layers": 4,
               "attn_type_list": [0, 0, 0, 1], "num_attention_heads": 64, "head_dim": 128}
    assert hybrid_layout(minimax).layers == ("mamba",) * 3 + ("attention",)
    assert mamba_state(minimax, 8, "bfloat16").page_bytes == 8 * 128 * 128 * 2


def test_hybrid_attention_layers_from_config():
    from vram_detective.engines.vllm.kv_mamba import hybrid_attention_layers

    layers, per_layer = hybrid_attention_layers(mixer_facts(QWEN35), 1, 16, 2, "bfloat16")
    assert len(layers) == 64 and per_layer[3] == (3,)
    assert layers[3] == AttentionLayer("full", 65536) and layers[0] == AttentionLayer("mamba", 3207168)
    plan = plan_kv_groups(layers, 1487 * 784 * 4096 * 16, 16, 32768, 16384, 16, (0, 19, 0), "v1")
    assert plan.kv_cache_tokens == 290864
    falcon = {"architectures": ["FalconH1ForCausalLM"], "hidden_size": 1024, "num_hidden_layers": 2,
              "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64, "mamba_n_heads": 16,
              "mamba_d_head": 64, "mamba_n_groups": 1, "mamba_d_state": 128, "mamba_d_conv": 4, "mamba_expand": 1,
              "mamba_d_ssm": 1024}
    layers, per_layer = hybrid_attention_layers(mixer_facts(falcon), 1, 16, 2, "bfloat16")
    assert per_layer == [(0, 1), (2, 3)] and [layer.kind for layer in layers] == ["full", "mamba"] * 2
    # Mamba2: conv (3, 1024 + 2 x 128) bf16 + ssm (16, 64, 128) bf16
    assert layers[1].page_bytes == (3 * 1280 + 16 * 64 * 128) * 2


BAMBA_FULL = {**BAMBA, "intermediate_size": 14336, "vocab_size": 128256, "torch_dtype": "bfloat16",
              "max_position_embeddings": 4096, "attn_rotary_emb": 64, "mamba_conv_bias": True,
              "mamba_proj_bias": False}


def test_bamba_parses_and_inventories_mixers():
    from vram_detective.model.config import parse_config
    from vram_detective.model.spec import UnsupportedArchitectureError
    from vram_detective.engines.vllm.weights import build_inventory

    spec = parse_config(BAMBA_FULL, "bamba")
    assert spec.family == "bamba" and spec.hybrid.mamba_layers == 29 and spec.rotary_dim == 64
    inventory = build_inventory(spec, "bfloat16")
    by_name = {group.name: group for group in inventory.groups}
    attention = [g for g in inventory.groups if g.name.endswith("self_attn.qkv_proj.weight")]
    assert len(attention) == 1 and attention[0].count == 3  # layers 9, 18, 27 only
    mixer = {g.name.rsplit(".mamba.", 1)[1]: g for g in inventory.groups if ".mamba." in g.name}
    assert all(g.count == 29 for g in mixer.values())
    # in_proj: 4096 -> 8192 (z) + 8448 (x, B, C) + 128 (dt); out_proj 8192 -> 4096; conv1d (8448, 4) + bias
    assert mixer["in_proj.weight"].shape == (16768, 4096)
    assert mixer["out_proj.weight"].shape == (4096, 8192)
    assert mixer["conv1d.weight"].shape == (8448, 4) and mixer["conv1d.bias"].shape == (8448,)
    assert mixer["A"].dtype == "float32" and mixer["A"].bytes_each == 128 * 4
    assert mixer["norm.weight"].shape == (8192,)
    # TP2, n_groups 1 replicated: in_proj (8192 + 8704 + 128) / 2 rows
    two = build_inventory(spec, "bfloat16", __import__("vram_detective.engines.vllm.weights", fromlist=["Shard"]).Shard(2))
    assert [g.shape for g in two.groups if g.name.endswith("mamba.in_proj.weight")] == [(8512, 4096)]
    assert by_name  # the plain inventory still lists embeddings etc.
    # Nemotron-H is sized now (test_nemotron_h_*); a layer kind it does not know is still refused
    with pytest.raises(UnsupportedArchitectureError, match="layer kinds"):
        parse_config({**NEMOTRON_H_8B, "hybrid_override_pattern": "M*X", "num_hidden_layers": 3})


def test_bamba_plan_v1_and_refusals():
    from vram_detective.engines.vllm.plan import plan
    from vram_detective.hardware import find_gpu
    from vram_detective.model.config import parse_config
    from vram_detective.model.spec import UnsupportedArchitectureError

    spec = parse_config(BAMBA_FULL, "bamba")
    result = plan(spec, find_gpu("H100"), {"max_model_len": 4096}, (0, 11, 0))
    assert ("Setting attention block size to 528 tokens to ensure that attention page size is >= mamba page size."
            in result.log_lines)
    assert any(line.startswith("Padding mamba page size by 0.69%") for line in result.log_lines)
    # V0 (0.7.3): sized now, the MambaCacheManager its own component (test_v0_bamba_pr10909_*)
    v0 = plan(spec, find_gpu("H100"), {"max_model_len": 4096}, (0, 7, 3))
    assert any(c.key == "mamba_state_cache_v0" for c in v0.components.children) and v0.kv_cache_tokens > 0
    with pytest.raises(UnsupportedArchitectureError, match="0.10.1"):
        plan(spec, find_gpu("H100"), {"max_model_len": 4096}, (0, 9, 2))


def test_explain_reports_the_raised_block_size(tmp_path):
    """End to end on V1: Bamba's attention blocks are raised to 528 tokens so that one attention page
    covers a 2,147,840 B Mamba state page (16 x cdiv(2147840, 16 x 4096) = 528); the breakdown and the
    'Setting attention block size' line say so, and tokens are counted in those blocks."""
    import json

    from vram_detective import explain

    config = dict(BAMBA, torch_dtype="bfloat16", intermediate_size=14336, vocab_size=128256, max_position_embeddings=4096)
    (tmp_path / "config.json").write_text(json.dumps(config))
    b = explain(str(tmp_path), "H100", vllm_version="0.11.0", max_model_len=4096)
    assert b.block_size == 528
    assert any(line.startswith("Setting attention block size to 528 tokens") for line in b.log_lines)


# Qwen3-Next-80B-A3B as its published config.json lists it (the values the model card gives)
QWEN3_NEXT = {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": 2048,
              "num_hidden_layers": 48, "full_attention_interval": 4, "num_attention_heads": 16,
              "num_key_value_heads": 2, "head_dim": 256, "intermediate_size": 5120, "vocab_size": 151936,
              "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
              "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "num_experts": 512,
              "num_experts_per_tok": 10, "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
              "decoder_sparse_step": 1, "mlp_only_layers": [], "partial_rotary_factor": 0.25,
              "max_position_embeddings": 262144, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def test_qwen3_next_parses_and_inventories_gated_delta_net():
    from vram_detective.model.config import parse_config
    from vram_detective.engines.vllm.weights import Shard, build_inventory

    spec = parse_config(QWEN3_NEXT, "qwen3-next")
    assert spec.family == "qwen3_next" and spec.hybrid.attention_layers == 12 and spec.hybrid.mamba_layers == 36
    assert spec.moe.shared_expert_gate and spec.moe.shared_intermediate == 512 and not spec.moe.dense_layers
    inventory = build_inventory(spec, "bfloat16")
    # hand count, TP1:
    # GatedDeltaNet (36 layers): key = 16 x 128 = 2048, value = 32 x 128 = 4096
    #   in_proj_qkvz 2048 x (2 x 2048 + 2 x 4096) = 25,165,824; in_proj_ba 2048 x 64 = 131,072;
    #   out_proj 4096 x 2048 = 8,388,608; conv1d (8192, 1, 4) = 32,768; dt_bias 32 + A_log 32 + norm 128
    gdn = 25_165_824 + 131_072 + 8_388_608 + 32_768 + 192
    # gated attention (12 layers): qkv 2048 x (2 x 16 + 2 x 2) x 256 = 18,874,368; o 4096 x 2048; q/k norm 2 x 256
    attention = 18_874_368 + 8_388_608 + 512
    # MoE (48 layers): router 512 x 2048; experts 512 x 3 x 2048 x 512; shared 3 x 2048 x 512; shared gate 2048
    moe = 1_048_576 + 1_610_612_736 + 3_145_728 + 2048
    norms = 2 * 2048
    total = 36 * gdn + 12 * attention + 48 * (moe + norms) + 2 * 151936 * 2048 + 2048
    assert total == 79_674_391_296 and inventory.parameters == total
    mixer = {g.name.rsplit(".linear_attn.", 1)[1]: g for g in inventory.groups if ".linear_attn." in g.name}
    assert mixer["in_proj_qkvz.weight"].shape == (12288, 2048) and mixer["in_proj_qkvz.weight"].count == 36
    assert mixer["conv1d.weight"].shape == (8192, 1, 4) and mixer["A_log"].dtype == "float32"
    qkv = [g for g in inventory.groups if g.name.endswith("self_attn.qkv_proj.weight")]
    assert [(g.count, g.shape) for g in qkv] == [(12, (9216, 2048))]
    # TP2: the mixer's projections halve, its gated norm is replicated
    two = build_inventory(spec, "bfloat16", Shard(2))
    mixer2 = {g.name.rsplit(".linear_attn.", 1)[1]: g for g in two.groups if ".linear_attn." in g.name}
    assert mixer2["in_proj_qkvz.weight"].shape == (6144, 2048) and mixer2["in_proj_ba.weight"].shape == (32, 2048)
    assert mixer2["norm.weight"].shape == (128,) and mixer2["conv1d.weight"].shape == (4096, 1, 4)


def test_qwen35_dense_text_model_sizes_and_plans():
    """Qwen3.5 dense text model (Qwen3_5ForCausalLM): every layer a plain MLP. Shapes as QWEN35 above;
    intermediate 17408 and vocab 248320 are the published Qwen3.5-27B values as far as we know them."""
    from vram_detective.engines.vllm.plan import plan
    from vram_detective.hardware import find_gpu
    from vram_detective.model.config import parse_config
    from vram_detective.engines.vllm.weights import build_inventory

    text = {**QWEN35["text_config"], "architectures": ["Qwen3_5ForCausalLM"], "intermediate_size": 17408,
            "vocab_size": 248320, "max_position_embeddings": 262144, "torch_dtype": "bfloat16",
            "tie_word_embeddings": False}
    spec = parse_config(text, "qwen3.5-27b-text")
    assert spec.moe is None and spec.hybrid.attention_layers == 16
    inventory = build_inventory(spec, "bfloat16")
    # GDN (48): key 2048, value 6144: qkvz 5120 x 16384, ba 5120 x 96, out 6144 x 5120, conv 10240 x 4, 48 + 48 + 128
    gdn = 5120 * 16384 + 5120 * 96 + 6144 * 5120 + 10240 * 4 + 224
    # attention (16): qkv 5120 x (48 + 8) x 256, o 6144 x 5120, q/k norms 512
    attention = 5120 * 56 * 256 + 6144 * 5120 + 512
    mlp = 3 * 5120 * 17408 + 2 * 5120
    assert inventory.parameters == 48 * gdn + 16 * attention + 64 * mlp + 2 * 248320 * 5120 + 5120
    result = plan(spec, find_gpu("H100"), {"max_model_len": 32768}, (0, 19, 0))
    assert result.kv_cache_tokens > 0


def test_default_mamba_cache_mode_per_release():
    from vram_detective.engines.vllm.kv_mamba import default_mamba_cache_mode as mode

    # before 0.11.2 hybrids never prefix-cache; prefix caching off by default for hybrids until 0.25
    assert mode("BambaForCausalLM", (0, 11, 0), True) == "none"
    assert mode("NemotronHForCausalLM", (0, 19, 0)) == "none"
    assert mode("Qwen3NextForCausalLM", (0, 25, 0)) == "none"
    # --enable-prefix-caching: "all" where the model supports Mamba prefix caching
    assert mode("NemotronHForCausalLM", (0, 12, 0), True) == "all"
    assert mode("Qwen3NextForCausalLM", (0, 14, 0), True) == "none"  # 0.11.2-0.14: switched off again
    assert mode("Qwen3NextForCausalLM", (0, 19, 0), True) == "align"  # 0.15.1+: falls back to align
    # 0.26: on by default; Bamba no longer supports "all"; 0.28+: "align" for everyone
    assert mode("JambaForCausalLM", (0, 26, 0)) == "all"
    assert mode("BambaForCausalLM", (0, 26, 0)) == "align"
    assert mode("NemotronHForCausalLM", (0, 29, 0)) == "align"
    assert mode("NemotronHForCausalLM", (0, 29, 0), False) == "none"


def test_prefix_caching_flag_reaches_the_kv_plan():
    from vram_detective.engines.vllm.launch import parse_launch_line
    from vram_detective.engines.vllm.plan import plan
    from vram_detective.hardware import find_gpu
    from vram_detective.model.config import parse_config

    assert parse_launch_line("vllm serve m --enable-prefix-caching").settings == {"enable_prefix_caching": True}
    assert parse_launch_line("vllm serve m --no-enable-prefix-caching").settings == {"enable_prefix_caching": False}
    spec = parse_config(QWEN3_NEXT, "qwen3-next")
    gpu = find_gpu("H200")
    user = {"max_model_len": 32768, "tensor_parallel_size": 2}
    off = plan(spec, gpu, user, (0, 19, 0))
    on = plan(spec, gpu, {**user, "enable_prefix_caching": True}, (0, 19, 0))
    # 36 GatedDeltaNet layers in groups of 12 = 3 Mamba groups: "none" keeps 1 state each per request,
    # "align" 2; the same blocks, so fewer concurrent requests
    assert on.kv_cache_tokens == off.kv_cache_tokens and on.max_concurrency < off.max_concurrency


# Jamba-v0.1 as its published config.json lists it (51.6B parameters on the model card)
JAMBA = {"architectures": ["JambaForCausalLM"], "model_type": "jamba", "hidden_size": 4096, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 65536,
         "num_experts": 16, "num_experts_per_tok": 2, "expert_layer_period": 2, "expert_layer_offset": 1,
         "attn_layer_period": 8, "attn_layer_offset": 4, "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2,
         "mamba_dt_rank": 256, "mamba_conv_bias": True, "mamba_proj_bias": False, "tie_word_embeddings": False,
         "torch_dtype": "bfloat16", "max_position_embeddings": 262144}


def test_jamba_parses_and_inventories_mamba1_and_moe():
    from vram_detective.engines.vllm.plan import plan
    from vram_detective.hardware import find_gpu
    from vram_detective.model.config import parse_config
    from vram_detective.engines.vllm.weights import Shard, build_inventory

    spec = parse_config(JAMBA, "jamba")
    assert spec.rotary_dim is None and spec.hybrid.attention_layers == 4 and spec.hybrid.mamba_layers == 28
    assert spec.moe.dense_layers == tuple(range(0, 32, 2))  # experts on the odd layers
    inventory = build_inventory(spec, "bfloat16")
    # Mamba1 (28 layers), intermediate 8192: in_proj 4096 x 16384; x_proj 8192 x (256 + 32); dt_proj 256 x 8192
    # + bias 8192; out_proj 8192 x 4096; conv1d 8192 x 4 + bias 8192; A 8192 x 16; D 8192; norms 256 + 16 + 16
    mamba = (4096 * 16384 + 8192 * 288 + 256 * 8192 + 8192 + 8192 * 4096 + 8192 * 4 + 8192 + 8192 * 16 + 8192
             + 288)
    attention = 4096 * 6144 + 4096 * 4096  # 4 layers, no rotary, no bias
    moe = 16 * 4096 + 16 * 3 * 4096 * 14336  # 16 layers: router + 16 SwiGLU experts
    dense = 3 * 4096 * 14336  # 16 layers
    total = 28 * mamba + 4 * attention + 16 * (moe + dense) + 32 * 2 * 4096 + 4096 + 2 * 65536 * 4096
    assert total == 51_570_323_328 and inventory.parameters == total
    assert not any("rotary" in g.name for g in inventory.groups)
    a = [g for g in inventory.groups if g.name.endswith("mamba.A")]
    assert a[0].dtype == "float32" and a[0].shape == (8192, 16)
    two = build_inventory(spec, "bfloat16", Shard(2))
    x_proj = [g for g in two.groups if g.name.endswith("mamba.x_proj.weight")]
    assert x_proj[0].shape == (288, 4096)  # row-parallel: the input halves
    result = plan(spec, find_gpu("H200"), {"max_model_len": 32768, "tensor_parallel_size": 2}, (0, 19, 0))
    assert result.kv_cache_tokens > 0


# GraniteMoeHybrid in the shape of Granite-4.0-H-Tiny (synthetic but realistic: hidden 1536, 40 layers of which
# 4 attention, 64 experts of 512 + a 1024 shared MLP, Mamba2 48 heads x 64, NoPE, tied embeddings)
_GRANITE_TYPES = ["attention" if i in (5, 15, 25, 35) else "mamba" for i in range(40)]
GRANITE = {"architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid", "hidden_size": 1536,
           "num_hidden_layers": 40, "num_attention_heads": 12, "num_key_value_heads": 4, "intermediate_size": 512,
           "shared_intermediate_size": 1024, "num_local_experts": 64, "num_experts_per_tok": 6, "vocab_size": 100352,
           "mamba_n_heads": 48, "mamba_d_head": 64, "mamba_n_groups": 1, "mamba_d_state": 128, "mamba_d_conv": 4,
           "mamba_expand": 2, "layer_types": _GRANITE_TYPES, "position_embedding_type": "nope",
           "tie_word_embeddings": True, "torch_dtype": "bfloat16", "max_position_embeddings": 131072}


def test_granitemoehybrid_parses_and_inventories():
    from vram_detective.model.config import parse_config
    from vram_detective.engines.vllm.weights import build_inventory

    spec = parse_config(GRANITE, "granite-h")
    assert spec.rotary_dim is None and spec.hybrid.attention_layers == 4 and spec.moe.shared_intermediate == 1024
    inventory = build_inventory(spec, "bfloat16")
    # Mamba2 (36 layers), intermediate 3072, conv_dim 3072 + 2 x 128 = 3328: in_proj 1536 x (3072 + 3328 + 48),
    # out_proj 3072 x 1536, conv1d 3328 x 4 + bias, A / D / dt_bias 3 x 48, gated norm 3072
    mamba = 1536 * 6448 + 3072 * 1536 + 3328 * 5 + 144 + 3072
    attention = 1536 * (12 + 8) * 128 + 1536 * 1536  # 4 layers
    moe = 64 * 1536 + 64 * 3 * 1536 * 512 + 3 * 1536 * 1024  # every layer: router, experts, shared MLP
    total = 36 * mamba + 4 * attention + 40 * (moe + 2 * 1536) + 1536 + 100352 * 1536  # tied lm_head
    assert inventory.parameters == total == 6_939_037_248
    assert not any("rotary" in g.name for g in inventory.groups)
    # the dense variant (no experts): the shared MLP is the only MLP
    dense = parse_config({**GRANITE, "num_local_experts": 0}, "granite-h-dense")
    assert dense.moe is None and dense.intermediate_size == 1024
    assert build_inventory(dense, "bfloat16").parameters == total - 40 * (64 * 1536 + 64 * 3 * 1536 * 512)


# Falcon-H1 in the shape of Falcon-H1-0.5B (synthetic but realistic: d_ssm 1536 overriding expand x hidden,
# no Mamba gated norm, 36 parallel attention + Mamba2 layers)
FALCON_H1 = {"architectures": ["FalconH1ForCausalLM"], "model_type": "falcon_h1", "hidden_size": 1024,
             "num_hidden_layers": 36, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
             "intermediate_size": 2048, "vocab_size": 32784, "mamba_n_heads": 24, "mamba_d_head": 64,
             "mamba_n_groups": 1, "mamba_d_state": 128, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_d_ssm": 1536,
             "mamba_rms_norm": False, "mamba_conv_bias": True, "mamba_proj_bias": False,
             "tie_word_embeddings": False, "torch_dtype": "bfloat16", "max_position_embeddings": 16384}


def test_falcon_h1_parses_and_inventories():
    from vram_detective.engines.vllm.plan import plan
    from vram_detective.hardware import find_gpu
    from vram_detective.model.config import parse_config
    from vram_detective.engines.vllm.weights import build_inventory

    spec = parse_config(FALCON_H1, "falcon-h1")
    assert spec.hybrid.attention_layers == 36 and spec.hybrid.mamba_layers == 36
    inventory = build_inventory(spec, "bfloat16")
    attention = 1024 * (8 + 4) * 64 + 512 * 1024
    # conv_dim = 1536 + 2 x 128 = 1792: in_proj 1024 x (1536 + 1792 + 24), out_proj 1536 x 1024, conv1d + bias,
    # A / D / dt_bias; no norm weight (mamba_rms_norm false)
    mamba = 1024 * 3352 + 1536 * 1024 + 1792 * 5 + 3 * 24
    mlp = 3 * 1024 * 2048
    total = 36 * (attention + mamba + mlp + 2 * 1024) + 1024 + 2 * 32784 * 1024
    assert inventory.parameters == total == 521_411_104
    assert not any(g.name.endswith("mamba.norm.weight") for g in inventory.groups)
    with_norm = build_inventory(parse_config({**FALCON_H1, "mamba_rms_norm": True}), "bfloat16")
    assert with_norm.parameters == total + 36 * 1536
    result = plan(spec, find_gpu("H100"), {"max_model_len": 16384}, (0, 19, 0))
    assert result.kv_cache_tokens > 0


# MiniMax-Text-01 as its published config.json lists it (456B parameters on the model card)
MINIMAX = {"architectures": ["MiniMaxText01ForCausalLM"], "model_type": "minimax_text_01", "hidden_size": 6144,
           "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
           "intermediate_size": 9216, "num_local_experts": 32, "num_experts_per_tok": 2, "vocab_size": 200064,
           "rotary_dim": 64, "attn_type_list": [0, 0, 0, 0, 0, 0, 0, 1] * 10, "max_position_embeddings": 10240000,
           "shared_intermediate_size": 0, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def test_minimax_text_01_parses_and_inventories():
    from vram_detective.engines.vllm.weights_plan import rank_inventories
    from vram_detective.hardware import find_gpu
    from vram_detective.model.config import parse_config
    from vram_detective.engines.vllm.weights import build_inventory

    spec = parse_config(MINIMAX, "minimax")
    assert spec.hybrid.attention_layers == 10 and spec.hybrid.mamba_layers == 70 and spec.rotary_dim == 64
    inventory = build_inventory(spec, "bfloat16")
    inner = 64 * 128
    lightning = 6144 * 3 * inner + 6144 * inner + inner * 6144 + inner  # qkv, output_gate, out_proj, norm (70)
    attention = 6144 * (64 + 16) * 128 + inner * 6144  # softmax layers (10)
    moe = 32 * 6144 + 32 * 3 * 6144 * 9216  # every layer: float32 router + 32 experts
    total = 70 * lightning + 10 * attention + 80 * (moe + 2 * 6144) + 6144 + 2 * 200064 * 6144
    assert inventory.parameters == total == 456_089_655_296
    gate = [g for g in inventory.groups if g.name.endswith("mlp.gate.weight")][0]
    assert gate.dtype == "float32" and gate.bytes_each == 32 * 6144 * 4
    rotary = [g for g in inventory.groups if g.role == "rotary cache"]
    assert rotary[0].dtype == "float32" and rotary[0].shape == (10240000, 64)
    # vLLM builds the rotary cache for min(max_position_embeddings, max_model_len) rows
    ranks = rank_inventories(spec, find_gpu("H200"), {"max_model_len": 32768, "tensor_parallel_size": 8}, (0, 19, 0))
    assert [g.shape for g in ranks[0][1].groups if g.role == "rotary cache"] == [(32768, 64)]


def test_jamba_all_mode_aligns_to_the_2048_default_chunk():
    """0.26 turns prefix caching on for hybrids and Jamba supports Mamba prefix caching ("all"): the attention
    block becomes a multiple of get_mamba_chunk_size() = 2048 (JambaConfig has no chunk attribute)."""
    from vram_detective.engines.vllm.plan import plan
    from vram_detective.hardware import find_gpu
    from vram_detective.model.config import parse_config

    spec = parse_config(JAMBA, "jamba")
    result = plan(spec, find_gpu("H200"), {"max_model_len": 32768, "tensor_parallel_size": 2}, (0, 26, 0))
    assert result.block_size == 2048
    off = plan(spec, find_gpu("H200"), {"max_model_len": 32768, "tensor_parallel_size": 2,
                                        "enable_prefix_caching": False}, (0, 26, 0))
    assert off.block_size == 80  # 16 x cdiv(Mamba1 page, 16 x attention bytes per token)


# Nemotron-H-8B-Base-8K as its published config.json lists it (hybrid_override_pattern, Mamba2 128 heads of 64,
# 8 groups, state 128; 32 / 8 attention heads of 128; relu2 MLP 21504; vocab 131072). Written from the model
# card / config as recalled, not re-downloaded: the parameter total (8.10B, "8B" on the card) is checked by hand.
NEMOTRON_H_8B = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "hidden_size": 4096,
    "num_hidden_layers": 52, "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
    "num_attention_heads": 32, "num_key_value_heads": 8, "attention_head_dim": 128, "intermediate_size": 21504,
    "mamba_num_heads": 128, "mamba_head_dim": 64, "n_groups": 8, "ssm_state_size": 128, "conv_kernel": 4,
    "use_bias": False, "use_conv_bias": True, "mlp_bias": False, "mlp_hidden_act": "relu2", "vocab_size": 131072,
    "tie_word_embeddings": False, "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}

# A synthetic Nemotron-H MoE (Nemotron-3-Nano-like layout, small made-up sizes): every layer kind once or twice
NEMOTRON_H_MOE = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "hidden_size": 1024,
    "num_hidden_layers": 6, "hybrid_override_pattern": "ME*EM-", "num_attention_heads": 8, "num_key_value_heads": 4,
    "head_dim": 128, "intermediate_size": 2048, "mamba_num_heads": 16, "mamba_head_dim": 64, "n_groups": 4,
    "ssm_state_size": 64, "conv_kernel": 4, "use_conv_bias": True, "n_routed_experts": 16, "num_experts_per_tok": 4,
    "moe_intermediate_size": 512, "n_shared_experts": 1, "moe_shared_expert_intermediate_size": 768,
    "n_group": 1, "topk_group": 1, "vocab_size": 32000, "torch_dtype": "bfloat16", "max_position_embeddings": 4096}


def test_nemotron_h_8b_parameters_by_hand():
    from vram_detective.model.config import parse_config
    from vram_detective.engines.vllm.weights import Shard, build_inventory

    spec = parse_config(NEMOTRON_H_8B, "nemotron-h-8b")
    assert (spec.hybrid.mamba_layers, spec.hybrid.attention_layers) == (24, 4)
    assert spec.moe is None and spec.rotary_dim is None and not spec.tie_word_embeddings
    inventory = build_inventory(spec, "bfloat16")
    h = 4096
    # Mamba2: intermediate 128 x 64 = 8192, conv_dim 8192 + 2 x 8 x 128 = 10240; in_proj h -> 8192 + 10240 + 128
    mamba = h * 18560 + 8192 * h + 10240 * 4 + 10240 + 3 * 128 + 8192
    attention = h * (32 + 2 * 8) * 128 + h * h  # no rotary, no bias
    mlp = 2 * h * 21504  # relu2: up_proj + down_proj, no gate
    total = 24 * mamba + 4 * attention + 24 * mlp + 52 * h + h + 2 * 131072 * h  # one norm per layer + norm_f
    assert inventory.parameters == total == 8_100_852_736
    names = [g.name for g in inventory.groups]
    assert not any("gate_up_proj" in n for n in names)
    mlp_layers = "model.layers.{1,3,5,8,10,12,14,16,19,21,23,25,27,30,32,34,36,38,41,43,45,47,49,51}.mixer"
    assert f"{mlp_layers}.up_proj.weight" in names
    # TP2: MLP and Mamba mixers split, in_proj (8192 + 10240 + 128) / 2 rows
    two = {g.name.rsplit(".mixer.", 1)[-1]: g for g in build_inventory(spec, "bfloat16", Shard(2)).groups}
    assert two["up_proj.weight"].shape == (10752, 4096) and two["in_proj.weight"].shape == (9280, 4096)


def test_nemotron_h_moe_non_gated_experts_and_latent():
    from vram_detective.model.config import parse_config
    from vram_detective.engines.vllm.weights import build_inventory

    spec = parse_config(NEMOTRON_H_MOE, "nemotron-h-moe")
    assert spec.moe.dense_layers == (0, 2, 4, 5) and not spec.moe.gated
    inventory = build_inventory(spec, "bfloat16")
    h = 1024
    attention = h * (8 + 8) * 128 + h * h
    mamba = h * (1024 + 1536 + 16) + 1024 * h + 1536 * 5 + 3 * 16 + 1024  # conv_dim 1024 + 2 x 4 x 64
    mlp = 2 * h * 2048
    router = 16 * h + 16  # fp32 gate + e_score_correction_bias
    experts = 16 * 2 * h * 512  # w13 [E, I, H] + w2 [E, H, I]
    shared = 2 * h * 768
    base = attention + 2 * mamba + mlp + 6 * h + h + 2 * 32000 * h
    assert inventory.parameters == base + 2 * (router + experts + shared)
    groups = {g.name.rsplit(".mixer.", 1)[-1]: g for g in inventory.groups}
    assert groups["experts.w13_weight"].shape == (16, 512, 1024)
    assert groups["gate.weight"].dtype == "float32" and groups["gate.e_score_correction_bias"].dtype == "float32"
    assert groups["shared_experts.up_proj.weight"].shape == (768, 1024)
    # latent MoE: experts in the latent width between two replicated projections
    latent = build_inventory(parse_config({**NEMOTRON_H_MOE, "moe_latent_size": 256}), "bfloat16")
    lgroups = {g.name.rsplit(".mixer.", 1)[-1]: g for g in latent.groups}
    assert lgroups["experts.w13_weight"].shape == (16, 512, 256)
    assert lgroups["fc1_latent_proj.weight"].shape == (256, 1024)
    assert latent.parameters == base + 2 * (router + 16 * 2 * 256 * 512 + 2 * h * 256 + shared)


def test_nemotron_h_plans():
    from vram_detective.engines.vllm.plan import plan
    from vram_detective.hardware import find_gpu
    from vram_detective.model.config import parse_config

    for config in (NEMOTRON_H_8B, NEMOTRON_H_MOE):
        result = plan(parse_config(config), find_gpu("H100"), {"max_model_len": 4096}, (0, 12, 0))
        assert result.kv_cache_tokens > 0


def test_non_gated_expert_tensors_per_method():
    from vram_detective.model.quantization import QuantConfig
    from vram_detective.engines.vllm.quant_kernels import expert_tensors

    def shapes(quant, gated):
        return {t.suffix: t for t in expert_tensors(quant, None, 8, 256, 128, "bfloat16", gated=gated)}

    plain = shapes(None, False)
    assert plain["w13_weight"].shape == (8, 128, 256) and plain["w2_weight"].shape == (8, 256, 128)
    assert shapes(None, True)["w13_weight"].shape == (8, 256, 256)
    fp8 = QuantConfig(method="modelopt-fp8", bits=8, group_size=-1)
    gated, up_only = shapes(fp8, True), shapes(fp8, False)
    assert up_only["w13_weight"].bytes * 2 == gated["w13_weight"].bytes
    assert up_only["w13_weight_scale"].shape == (8, 1) and gated["w13_weight_scale"].shape == (8, 2)
    assert up_only["w2_weight"].bytes == gated["w2_weight"].bytes


def test_v0_mamba_batch_per_release():
    from vram_detective.engines.vllm.mamba_state import v0_mamba_batch

    # 0.6.0-0.6.4.post1: _get_graph_batch_size(max_num_seqs) even when eager
    assert v0_mamba_batch(256, False, (0, 6, 4)) == 256 and v0_mamba_batch(100, True, (0, 6, 4)) == 104
    assert v0_mamba_batch(3, False, (0, 6, 0)) == 4
    # 0.6.5-0.7.2: eager -> 8192 + 2 slots; else padded, capped at the largest capture size
    assert v0_mamba_batch(100, True, (0, 7, 0)) == 8194 and v0_mamba_batch(1000, False, (0, 6, 6)) == 512
    # 0.7.3-0.10: max_num_seqs, padded only with CUDA graphs
    assert v0_mamba_batch(100, True, (0, 9, 2)) == 100 and v0_mamba_batch(100, False, (0, 9, 2)) == 104


def test_v0_bamba_pr10909_plan_with_mamba_state_cache():
    # vllm-pr10909-bamba-h100-tp2 (0.6.4.post1 V0, TP2, --dtype float32, max_model_len 1024): logged weights
    # 18.4902 GiB, non_torch 1.96, KV 34.78 GiB -> 189,945 GPU blocks, 21,845 CPU blocks, 2967.89x.
    # Its activation peak (u x T - W - N - KV = 16.04 GiB) is mostly the MambaCacheManager: 29 layers x 256
    # slots x 2,149,376 B (fp32 conv 3 x 4352 + ssm 64 x 64 x 128) = 14.86 GiB.
    from vram_detective.engines.vllm.plan import plan
    from vram_detective.engines.vllm.kv_plan import kv_plan_for_budget
    from vram_detective.hardware import find_gpu
    from vram_detective.model.config import parse_config

    spec = parse_config({**BAMBA_FULL, "torch_dtype": "float32"}, "bamba-9b")
    settings = {"max_model_len": 1024, "tensor_parallel_size": 2, "dtype": "float32"}
    from_log = kv_plan_for_budget(spec, find_gpu("H100"), settings, (0, 6, 4), int(34.78 * GIB))
    assert from_log.num_blocks == 189945 and round(from_log.max_concurrency, 2) == 2967.89
    result = plan(spec, find_gpu("H100"), settings, (0, 6, 4))
    cache = next(c for c in result.components.children if c.key == "mamba_state_cache_v0")
    assert cache.label == "Mamba state cache (V0)" and cache.bytes == 29 * 256 * 2149376
    assert result.num_cpu_blocks == 21845
    # the logged activation peak carries the cache; the KV budget lands within 1 GiB of the log (34.78 GiB)
    assert abs(result.activation_peak_bytes / GIB - 16.04) < 0.25
    assert abs(result.kv_cache_bytes / GIB - 34.78) < 1.0
    unfilled = result.components.bytes - sum(c.bytes for c in result.components.children)
    assert 0 <= unfilled < 196608  # the budget less whole KV blocks
    # eager in 0.6.6: 8194 slots - the cache alone outgrows the budget
    eager = plan(spec, find_gpu("H100"), {**settings, "enforce_eager": True}, (0, 6, 6))
    assert eager.failure is not None
