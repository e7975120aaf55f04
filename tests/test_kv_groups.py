"""KV-cache groups of hybrid-attention models (kv_groups.py): grouping, padding layers, blocks per
request, logged tokens and concurrency and the startup check, release by release, pinned by hand
arithmetic (design/vllm-memory.md §3.2-§3.4; vllm/v1/core/kv_cache_utils.py, v1/kv_cache_interface.py)
and by the dev-set logs of hybrid models."""
from __future__ import annotations

import json

import pytest
from conftest import GIB, MODELS

from vram_detective.engines.vllm.kv_groups import in_flight_tokens, plan_kv_groups
from vram_detective.engines.vllm.kv_layers import AttentionLayer, SlidingWindowRefusal, attention_layers_from_facts, rule
from vram_detective.engines.vllm.kv_layers import layer_kinds as _layer_kinds
from vram_detective.engines.vllm.kv_layers import sliding_window_max_len_cap as _max_len_cap
from vram_detective.engines.vllm.releases import release
from vram_detective.model.attention import attention_facts


# the engine reads the ModelSpec's attention facts; these tests write config.json dicts
def attention_layers_from_config(config: dict, *args, **kw):
    return attention_layers_from_facts(attention_facts(config), *args, **kw)


def layer_kinds(config: dict, **kw):
    return _layer_kinds(attention_facts(config), **kw)


def sliding_window_max_len_cap(config: dict, *args, **kw):
    return _max_len_cap(attention_facts(config), *args, **kw)


def kv_sharing_targets(config: dict) -> list:
    return list(attention_facts(config).kv_sharing_targets)


def config_of(repo_dir: str) -> dict:
    return json.loads((MODELS / repo_dir / "config.json").read_text(encoding="utf-8"))


def plan(layers, available, *, L, X=8192, version, engine="v1", block=16, **kw):
    return plan_kv_groups(layers, available, block, L, X, 256, version, engine, **kw)


# gpt-oss-120b on one H100: 36 layers, even ones sliding (W=128), 8 KV heads x 64, bf16.
# page = 2 x 16 x 8 x 64 x 2 B = 32,768 B
GPT_OSS_PAGE = 32_768
GPT_OSS_120B = [AttentionLayer("sliding", GPT_OSS_PAGE, 128) if i % 2 == 0 else AttentionLayer("full", GPT_OSS_PAGE)
                for i in range(36)]


# --- layers from config.json ----------------------------------------------------------------------


def test_gpt_oss_120b_layers_from_config():
    layers = attention_layers_from_config(config_of("openai--gpt-oss-120b"), 1, 16, 2)
    assert layers == GPT_OSS_120B
    # TP 8: one KV head per rank, fp8 KV: 2 x 16 x 1 x 64 x 1 = 2,048 B
    assert {l.page_bytes for l in attention_layers_from_config(config_of("openai--gpt-oss-120b"), 8, 16, 1)} == {2048}


def test_gemma3_pattern_5_sliding_1_full():
    kinds = layer_kinds(config_of("google--gemma-3-1b-it"))
    # 26 layers, full where (i + 1) % 6 == 0: 5, 11, 17, 23 -> 4 full, 22 sliding (W=512)
    assert [i for i, (kind, _) in enumerate(kinds) if kind == "full"] == [5, 11, 17, 23]
    assert {window for kind, window in kinds if kind == "sliding"} == {512}
    # page: 1 KV head x 256 x 2 x 16 x 2 B = 16,384 B
    assert {l.page_bytes for l in attention_layers_from_config(config_of("google--gemma-3-1b-it"), 1, 16, 2)} == {16_384}


def test_gemma3_multimodal_config_uses_text_defaults():
    # gemma-3-4b-it lists only 34 layers and W=1024; heads, head_dim and the pattern are HF defaults
    layers = attention_layers_from_config(config_of("google--gemma-3-4b-it"), 1, 16, 2)
    assert len(layers) == 34 and sum(l.kind == "full" for l in layers) == 5  # layers 5, 11, 17, 23, 29
    assert {l.page_bytes for l in layers} == {2 * 16 * 4 * 256 * 2}  # 4 KV heads x 256


def test_gemma2_alternates_starting_with_sliding():
    kinds = layer_kinds(config_of("google--gemma-2-9b"))
    assert len(kinds) == 42 and kinds[0] == ("sliding", 4096) and kinds[1] == ("full", None)
    assert sum(kind == "sliding" for kind, _ in kinds) == 21


def test_windows_on_every_layer_and_unused_windows():
    # Mistral-7B-v0.1 style: one window for all layers (cache_config.sliding_window)
    mistral = {"model_type": "mistral", "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
               "hidden_size": 4096, "sliding_window": 4096}
    assert set(layer_kinds(mistral)) == {("sliding", 4096)}
    # Phi-3-mini-4k carries W=2047 and vLLM applies it to every layer
    assert set(layer_kinds(config_of("microsoft--Phi-3-mini-4k-instruct"))) == {("sliding", 2047)}
    # Qwen2.5 carries sliding_window 131072 with use_sliding_window false: full attention
    assert set(layer_kinds(config_of("Qwen--Qwen2.5-7B-Instruct"))) == {("full", None)}
    assert set(layer_kinds(config_of("mistralai--Mistral-7B-Instruct-v0.2"))) == {("full", None)}


def test_qwen2_max_window_layers():
    base = {"model_type": "qwen2", "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
            "hidden_size": 3584, "sliding_window": 32768, "use_sliding_window": True}
    # max_window_layers == num_hidden_layers: every layer gets the window (0.9.0+)
    assert set(layer_kinds({**base, "max_window_layers": 28}, version=(0, 10, 1))) == {("sliding", 32768)}
    # a partial window is refused (qwen2.py: assertion 0.9.0+, ValueError 0.4.3-0.8.5 for any window)
    with pytest.raises(SlidingWindowRefusal, match="max_window_layers` = 14"):
        layer_kinds({**base, "max_window_layers": 14}, version=(0, 11, 0))
    with pytest.raises(SlidingWindowRefusal):
        layer_kinds({**base, "max_window_layers": 28}, version=(0, 8, 5))
    # 0.4.1: the first max_window_layers layers slide
    kinds = layer_kinds({**base, "max_window_layers": 14}, version=(0, 4, 1))
    assert kinds[13] == ("sliding", 32768) and kinds[14] == ("full", None)


def test_llama4_every_fourth_layer_is_global():
    scout = {"model_type": "llama4_text", "num_hidden_layers": 48, "num_attention_heads": 40,
             "num_key_value_heads": 8, "head_dim": 128, "attention_chunk_size": 8192}
    kinds = layer_kinds({"model_type": "llama4", "text_config": scout})
    assert [i for i, (kind, _) in enumerate(kinds) if kind == "full"] == list(range(3, 48, 4))
    assert sum(kind == "chunked_local" for kind, _ in kinds) == 36


def test_disable_sliding_window_makes_every_layer_full():
    assert set(layer_kinds(config_of("openai--gpt-oss-20b"), disable_sliding_window=True)) == {("full", None)}


# --- groups and padding layers ------------------------------------------------------------------------


def test_gpt_oss_120b_two_groups_of_18():
    p = plan(GPT_OSS_120B, 8 * GIB, L=131072, version=(0, 21, 0))
    assert [(g.kind, g.layers, g.padding_layers) for g in p.groups] == [("sliding", 18, 0), ("full", 18, 0)]
    # one block id = page x 18 layers (the 18 tensors each shared by one sliding and one full layer)
    assert p.block_bytes == 18 * GPT_OSS_PAGE == 589_824
    assert p.num_blocks == 8 * GIB // 589_824 == 14_563
    assert p.log_lines == ()


def test_gemma3_27b_padding_layers_and_warning():
    layers = attention_layers_from_config(config_of("google--gemma-3-27b-it"), 1, 16, 2)
    p = plan(layers, 10 * GIB, L=8192, version=(0, 13, 0))
    # 62 layers: 10 full (5, 11, ..., 59), 52 sliding; group size 10 -> 1 full + 6 sliding groups,
    # the last sliding group has 2 layers + 8 padding layers: 8 / 52 = 15.38 %
    assert len(p.groups) == 7
    assert p.padding_layers == 8
    assert p.log_lines == ("Add 8 padding layers, may waste at most 15.38% KV cache memory",)
    assert p.block_bytes == 10 * 2 * 16 * 16 * 128 * 2  # 10 layers x 131,072 B


@pytest.mark.parametrize("version, group_size, padding_line", [
    ((0, 11, 2), 12, "Add 11 padding layers, may waste at most 84.62% KV cache memory"),  # g = min
    ((0, 12, 0), 13, "Add 1 padding layers, may waste at most 8.33% KV cache memory"),  # 13 < 1.25 x 12
])
def test_group_size_min_or_max(version, group_size, padding_line):
    # gpt-oss-20b + an EAGLE head: 12 full + 13 sliding layers
    layers = [AttentionLayer("sliding", 1024, 128) if i % 2 == 0 else AttentionLayer("full", 1024) for i in range(25)]
    p = plan(layers, GIB, L=4096, version=version)
    assert p.block_bytes == 1024 * group_size
    assert padding_line in p.log_lines


def test_group_size_factor_1_5_from_0_18():
    # 10 full + 14 sliding: 14 >= 1.25 x 10 -> g = 10 on 0.17; 14 < 1.5 x 10 -> g = 14 on 0.18
    layers = [AttentionLayer("full", 1024)] * 10 + [AttentionLayer("sliding", 1024, 512)] * 14
    assert plan(layers, GIB, L=4096, version=(0, 17, 0)).block_bytes == 10 * 1024
    assert plan(layers, GIB, L=4096, version=(0, 18, 0)).block_bytes == 14 * 1024


# --- blocks per request, tokens and concurrency -----------------------------------------------------------


def test_gpt_oss_120b_8713_blocks_per_request_up_to_0_23():
    for version in ((0, 9, 1), (0, 11, 2), (0, 21, 0), (0, 23, 0)):
        p = plan(GPT_OSS_120B, 8 * GIB, L=131072, X=8192, version=version)
        # full: cdiv(131072, 16) = 8192; sliding: cdiv(min(128 - 1 + 8192, 131072), 16) + 1 = 520 + 1
        assert p.blocks_per_request == 8192 + 520 + 1 == 8713
        assert [g.blocks_per_request for g in p.groups] == [521, 8192]


def test_0_26_reserves_the_in_flight_tokens():
    # 0.26+: X = max_in_flight_tokens = 2 batches x 8192 with async scheduling (on by default since 0.14)
    p = plan(GPT_OSS_120B, 8 * GIB, L=131072, X=8192, version=(0, 26, 0))
    assert p.in_flight_tokens == 16384
    assert p.blocks_per_request == 8192 + (-(-(127 + 16384) // 16)) + 1 == 8192 + 1032 + 1
    off = plan(GPT_OSS_120B, 8 * GIB, L=131072, X=8192, version=(0, 26, 0), async_scheduling=False)
    assert off.blocks_per_request == 8713
    assert in_flight_tokens((0, 26, 0), 8192, True, pipeline_parallel_size=2) == 2 * 8192  # V1 runner: pp batches
    assert in_flight_tokens((0, 26, 0), 8192, True, pipeline_parallel_size=2, v2_model_runner=True) == 3 * 8192
    assert in_flight_tokens((0, 25, 0), 8192, True) == 8192


def test_tokens_formula_0_20_vs_0_21():
    blocks = 14_563  # 8 GiB // 589,824
    p20 = plan(GPT_OSS_120B, 8 * GIB, L=131072, version=(0, 20, 0))
    p21 = plan(GPT_OSS_120B, 8 * GIB, L=131072, version=(0, 21, 0))
    assert p20.num_blocks == p21.num_blocks == blocks
    # 0.9.1-0.20: blocks // groups x block = 7281 x 16; concurrency = 14563 / 8713 = 1.67x
    assert p20.kv_cache_tokens == 7281 * 16 == 116_496
    assert f"{p20.max_concurrency:.2f}" == "1.67"
    # 0.21+: int(concurrency x L) = int(14563 / 8713 x 131072) = 219,075
    assert p21.kv_cache_tokens == int(blocks / 8713 * 131072) == 219_075
    assert p21.max_concurrency == p20.max_concurrency


def test_before_0_9_1_sliding_layers_are_sized_as_full():
    # 0.8.2: no SlidingWindowSpec; 0.8.3-0.9.0: specs exist but full + sliding is unified to full
    for version in ((0, 8, 2), (0, 8, 5), (0, 9, 0)):
        p = plan(GPT_OSS_120B, 8 * GIB, L=131072, version=version)
        assert len(p.groups) == 1 and p.groups[0].kind == "full" and p.groups[0].layers == 36
        assert p.block_bytes == 36 * GPT_OSS_PAGE
        assert p.num_blocks == 8 * GIB // (36 * GPT_OSS_PAGE) == 7281
        assert p.kv_cache_tokens == 7281 * 16 and p.max_concurrency == 7281 * 16 / 131072
        assert p.log_lines == ()


def test_all_layers_sliding_is_one_group_with_a_shorter_request():
    # Mistral-7B-v0.1: 32 layers W=4096, page 2 x 16 x 8 x 128 x 2 = 65,536 B, block id = 2 MiB
    layers = [AttentionLayer("sliding", 65_536, 4096)] * 32
    p = plan(layers, 20 * GIB, L=32768, X=2048, version=(0, 10, 2))
    assert len(p.groups) == 1 and p.block_bytes == 2 << 20 and p.num_blocks == 10_240
    # tokens stay blocks x 16; a request needs cdiv(min(4095 + 2048, 32768), 16) + 1 = 385 blocks
    assert p.kv_cache_tokens == 163_840
    assert p.blocks_per_request == 385 and p.max_concurrency == 10_240 / 385
    # 0.8.3-0.9.0: concurrency is still tokens / max_model_len
    assert plan(layers, 20 * GIB, L=32768, X=2048, version=(0, 9, 0)).max_concurrency == 163_840 / 32768


def test_disable_hybrid_kv_cache_manager():
    p = plan(GPT_OSS_120B, 8 * GIB, L=131072, version=(0, 13, 0), disable_hybrid_kv_cache_manager=True)
    assert len(p.groups) == 1 and p.block_bytes == 36 * GPT_OSS_PAGE
    assert p.log_lines[0].startswith("Hybrid KV cache manager is disabled for this hybrid model")
    assert p.blocks_per_request == 8192 and p.kv_cache_tokens == 7281 * 16


def test_llama4_chunked_local_hybrid_off_by_default_until_0_14():
    layers = [AttentionLayer("full", 4096) if i % 4 == 3 else AttentionLayer("chunked_local", 4096, 8192)
              for i in range(48)]
    off = plan(layers, 4 * GIB, L=65536, X=8192, version=(0, 13, 0))
    assert len(off.groups) == 1 and off.block_bytes == 48 * 4096
    assert off.log_lines[0].startswith("There is a latency regression when using chunked local attention")
    on = plan(layers, 4 * GIB, L=65536, X=8192, version=(0, 14, 0))
    # 12 full + 36 chunked -> g = 12: 1 full + 3 chunked groups; chunked: cdiv(min(8192 + 8192, 65536), 16)
    assert len(on.groups) == 4 and on.block_bytes == 12 * 4096
    assert on.blocks_per_request == 4096 + 3 * 1024
    assert plan(layers, 4 * GIB, L=65536, version=(0, 13, 0), allow_chunked_local_hybrid=True).hybrid
    # 0.9.2: no chunked spec at all -> full attention, no warning
    old = plan(layers, 4 * GIB, L=65536, version=(0, 9, 2))
    assert len(old.groups) == 1 and old.log_lines == ()


def test_dcp_multiplies_tokens():
    layers = [AttentionLayer("mla", 16 * 576 * 2)] * 61
    p = plan(layers, 10 * GIB, L=131072, version=(0, 11, 0), decode_context_parallel_size=4)
    # each DCP rank holds L / 4 tokens: cdiv(32768, 16) = 2048 blocks per request; tokens x 4
    assert p.blocks_per_request == 2048
    assert p.kv_cache_tokens == p.num_blocks * 16 * 4
    assert p.log_lines == ("Multiplying the GPU KV cache size by the dcp_world_size 4.",)


# --- the startup check ------------------------------------------------------------------------------------


def test_fit_check_first_group_only_in_0_14_to_0_18():
    # vllm-27508: gpt-oss-120b, L=131072, max_num_batched_tokens 1024, 1.71 GiB available.
    # per-layer sum (<= 0.13) and sum over groups (0.19+): 18 x 32,768 x (8192 + cdiv(1151, 16) + 1) = 4.54 GiB
    # 0.14-0.18 count the first group (sliding) only: 18 x 32,768 x 73 = 43 MB -> passes
    for version, fits in (((0, 11, 0), False), ((0, 13, 0), False), ((0, 14, 0), True), ((0, 18, 0), True),
                          ((0, 19, 0), False)):
        p = plan(GPT_OSS_120B, int(1.71 * GIB), L=131072, X=1024, version=version)
        assert p.fits is fits, version
    p = plan(GPT_OSS_120B, int(1.71 * GIB), L=131072, X=1024, version=(0, 19, 0))
    assert p.fit_needed_bytes == 18 * GPT_OSS_PAGE * (8192 + 73)
    # longest length that fits: 589,824 x (cdiv(L', 16) + 73) <= 1.71 GiB -> cdiv(L', 16) <= 3039
    assert p.estimated_max_model_len == 3039 * 16


def test_fit_check_ignores_disable_flag_before_0_14():
    # the check runs on the specs as created, before unification: sliding layers count their window
    p13 = plan(GPT_OSS_120B, int(2.5 * GIB), L=131072, X=1024, version=(0, 13, 0), disable_hybrid_kv_cache_manager=True)
    p19 = plan(GPT_OSS_120B, int(2.5 * GIB), L=131072, X=1024, version=(0, 19, 0), disable_hybrid_kv_cache_manager=True)
    assert p13.fit_needed_bytes == 18 * GPT_OSS_PAGE * (8192 + 73) and not p13.fits
    assert p19.fit_needed_bytes == 36 * GPT_OSS_PAGE * 8192 and not p19.fits


def test_null_block_leaves_the_check_in_0_29():
    layers = [AttentionLayer("full", 65_536)] * 32  # 2 MiB blocks, 4096 tokens need 256 blocks
    exact = 256 * (2 << 20)
    assert plan(layers, exact, L=4096, version=(0, 28, 0)).fits
    p = plan(layers, exact, L=4096, version=(0, 29, 0))
    assert not p.fits and p.fit_available_bytes == exact - (2 << 20) and p.estimated_max_model_len == 255 * 16
    assert p.num_blocks == 256  # the pool itself keeps every block


def test_override_by_release():
    layers = [AttentionLayer("full", 65_536)] * 32
    assert plan(layers, 4 * GIB, L=4096, version=(0, 9, 0), num_gpu_blocks_override=100).num_blocks == 100
    ignored = plan(layers, 4 * GIB, L=4096, version=(0, 9, 1), num_gpu_blocks_override=100)
    assert ignored.num_blocks == 2048 and ignored.log_lines == ("Overriding num_gpu_blocks=2048 with num_gpu_blocks_override=100",)
    assert plan(layers, 4 * GIB, L=4096, version=(0, 9, 2), num_gpu_blocks_override=100).num_blocks == 100
    # 0.21+: the check sees override x block bytes: 100 blocks < 256 needed
    assert plan(layers, 4 * GIB, L=4096, version=(0, 20, 0), num_gpu_blocks_override=100).fits
    assert not plan(layers, 4 * GIB, L=4096, version=(0, 21, 0), num_gpu_blocks_override=100).fits


def test_negative_budget_fails():
    # vllm-23278: "Available KV cache memory: -2.14 GiB" then "EngineCore failed to start."
    p = plan(GPT_OSS_120B, int(-2.14 * GIB), L=131072, version=(0, 10, 1))
    assert not p.fits and p.num_blocks == 0


# --- V0 -----------------------------------------------------------------------------------------------------


def test_v0_sizes_every_layer_for_max_model_len():
    layers = attention_layers_from_config(config_of("google--gemma-2-9b"), 1, 16, 2)
    p = plan(layers, 10 * GIB, L=4096, version=(0, 6, 4), engine="v0")
    # 42 layers x 2 x 16 x 8 x 256 x 2 B = 5.25 MiB per block
    assert p.block_bytes == 42 * 131_072 and p.num_blocks == 10 * GIB // (42 * 131_072) == 1950
    assert p.kv_cache_tokens == 1950 * 16 and p.max_concurrency == 1950 * 16 / 4096 and len(p.groups) == 1


def test_gemma2_window_caps_max_model_len_in_early_releases():
    gemma2 = config_of("google--gemma-2-9b")
    cap, line = sliding_window_max_len_cap(gemma2, (0, 5, 2), "v0")
    assert cap == 4096 and line.startswith("Gemma 2 uses sliding window attention for every odd layer")
    cap, line = sliding_window_max_len_cap(gemma2, (0, 6, 4), "v0")
    assert cap == 4096 and line.startswith("gemma2 has interleaved attention, which is currently not supported by vLLM.")
    # 0.6.5+: interleaved windows are run as full attention unless the backend cannot do them
    assert sliding_window_max_len_cap(gemma2, (0, 6, 5), "v0") == (None, None)
    cap, line = sliding_window_max_len_cap(gemma2, (0, 8, 5), "v1", attention_backend="FLASHINFER")
    assert cap == 4096 and "not supported by the FLASHINFER backend" in line
    assert sliding_window_max_len_cap(gemma2, (0, 7, 0), "v0", attention_backend="FLASHINFER") == (None, None)
    assert sliding_window_max_len_cap(config_of("google--gemma-3-1b-it"), (0, 8, 0), "v1") == (None, None)
    assert sliding_window_max_len_cap(gemma2, (0, 20, 0), "v1", disable_sliding_window=True) == (4096, None)


# --- dense models: one group, the figures each release logs, by hand ------------------------------------------

# Qwen3-8B: 36 layers x 8 KV heads x 128, bf16: page 2 x 16 x 8 x 128 x 2 = 65,536 B, block 36 pages = 2,359,296 B
# (LMCache #3430). Budget of exactly 1478 blocks at max_model_len 29000 (not a block multiple: cdiv = 1813
# blocks per request), which tells the three token rules apart:
#   tokens: 1478 x 16 = 23,648 (V0, V1 to 0.20.0); int(1478 / 1813 x 29000) = 23,641 (0.20.1+)
#   concurrency: 23,648 / 29,000 (V0, V1 0.8.x); 1478 / 1813 (0.9.1+)
#   startup check: 1478 < 1813 blocks, refused; V1's longest fitting request 1478 x 16 = 23,648 (0.33 keeps the
#   null block out: 1477 x 16 = 23,632)
QWEN3_8B_PAGE = 65_536
V0_CONC, V1_CONC = 23_648 / 29_000, 1478 / 1813


@pytest.mark.parametrize("version, engine, tokens, concurrency, longest", [
    ((0, 6, 4), "v0", 23_648, V0_CONC, 23_648), ((0, 10, 2), "v0", 23_648, V0_CONC, 23_648),
    ((0, 8, 0), "v1", 23_648, V0_CONC, 23_648), ((0, 8, 5), "v1", 23_648, V0_CONC, 23_648),
    ((0, 9, 2), "v1", 23_648, V1_CONC, 23_648), ((0, 13, 0), "v1", 23_648, V1_CONC, 23_648),
    ((0, 15, 1), "v1", 23_648, V1_CONC, 23_648), ((0, 20, 0), "v1", 23_648, V1_CONC, 23_648),
    ((0, 21, 0), "v1", 23_641, V1_CONC, 23_648), ((0, 26, 0), "v1", 23_641, V1_CONC, 23_648),
    ((0, 33, 0), "v1", 23_641, V1_CONC, 23_632),
])
def test_dense_tokens_concurrency_and_fit_per_release(version, engine, tokens, concurrency, longest):
    layers = [AttentionLayer("full", QWEN3_8B_PAGE)] * 36
    p = plan(layers, 1478 * 2_359_296, L=29000, version=version, engine=engine)
    assert (p.num_blocks, p.block_bytes, p.blocks_per_request) == (1478, 2_359_296, 1813)
    assert (p.kv_cache_tokens, p.max_concurrency) == (tokens, pytest.approx(concurrency))
    assert not p.fits
    if engine == "v1":
        assert p.estimated_max_model_len == longest


@pytest.mark.parametrize("version, engine", [((0, 6, 4), "v0"), ((0, 8, 5), "v1"), ((0, 21, 0), "v1"), ((0, 33, 0), "v1")])
def test_dense_block_multiple_max_len_agrees_across_rules(version, engine):
    # 6.37 GiB = 6,839,735,418 B // 2,359,296 = 2899 blocks; 16,384 = 1024 blocks: 46,384 tokens, 2899 / 1024 = 2.83x
    p = plan([AttentionLayer("full", QWEN3_8B_PAGE)] * 36, int(6.37 * GIB), L=16384, version=version, engine=engine)
    assert (p.num_blocks, p.kv_cache_tokens, f"{p.max_concurrency:.2f}", p.fits) == (2899, 46_384, "2.83", True)
    # 0.3 GiB = 322,122,547 B: 136 blocks, 2176 tokens, far from one 32,768-token request
    small = plan([AttentionLayer("full", QWEN3_8B_PAGE)] * 36, int(0.3 * GIB), L=32768, version=version, engine=engine)
    assert (small.num_blocks, small.kv_cache_tokens, small.fits) == (136, 2176, False)


def test_lmcache_qwen3_8b_anchor():
    # "Available KV cache memory: 6.37 GiB" -> 2898 blocks (6.368 GiB, inside the rounding) -> 46,368 tokens,
    # 2.83x at 16,384 (§3.4)
    assert 2898 in _blocks_in_rounding_window(6.37, 2_359_296)
    p = plan([AttentionLayer("full", 65_536)] * 36, 2898 * 2_359_296, L=16384, version=(0, 10, 1))
    assert p.num_blocks == 2898 and p.kv_cache_tokens == 46_368 and f"{p.max_concurrency:.2f}" == "2.83"


# --- dev-set cases of hybrid models -----------------------------------------------------------------------


def _blocks_in_rounding_window(logged_gib: float, block_bytes: int) -> range:
    """Block counts whose pool the release could have logged as `logged_gib` (2 decimals)."""
    low = int((logged_gib - 0.005) * GIB) // block_bytes
    high = int((logged_gib + 0.005) * GIB) // block_bytes
    return range(low, high + 1)


def test_dev_gemma3_1b_v0130(dev_cases):
    case = dev_cases["file45405743641-gemma3-1b-it-v0130-nocudagraph"]
    obs, settings = case["observed"], case["settings"]
    layers = attention_layers_from_config(config_of("google--gemma-3-1b-it"), 1, 16, 2)
    L, X = settings["max_model_len"], settings["max_num_batched_tokens"]
    p = plan(layers, int(obs["kv_cache_gib"] * GIB), L=L, X=X, version=(0, 13, 0))
    # 4 full + 22 sliding (W=512): group size 4 -> 1 full + 6 sliding groups, 2 padding layers
    assert p.log_lines == ("Add 2 padding layers, may waste at most 9.09% KV cache memory",)  # logged verbatim
    assert len(p.groups) == 7 and p.block_bytes == 4 * 16_384
    # a 2048-token request: 128 full blocks + 6 x (cdiv(min(511 + 8192, 2048), 16) + 1) = 128 + 6 x 129 = 902
    assert p.blocks_per_request == 902
    # 25.39 GiB / 65,536 B = 415,989 blocks -> 950,832 tokens / 461.19x; the log's 950,864 tokens /
    # 461.21x are 416,007-416,009 blocks (= 25.3908 GiB), inside the rounding of the logged 25.39 GiB
    matches = []
    for blocks in _blocks_in_rounding_window(obs["kv_cache_gib"], p.block_bytes):
        q = plan(layers, blocks * p.block_bytes, L=L, X=X, version=(0, 13, 0))
        if q.kv_cache_tokens == obs["kv_cache_tokens"] and f"{q.max_concurrency:.2f}" == f"{obs['max_concurrency']:.2f}":
            matches.append(blocks)
    assert matches == [416_007, 416_008, 416_009]
    # a dense-model formula would have logged 25.39 GiB // (26 x 16,384) x 16 = 1,023,968 tokens
    assert int(obs["kv_cache_gib"] * GIB) // (26 * 16_384) * 16 == 1_023_968


def test_dev_gpt_oss_120b_v0112_tokens(dev_cases):
    case = dev_cases["huikang-blog-gptoss120b-kaggle-v0112"]
    obs, settings = case["observed"], case["settings"]
    layers = attention_layers_from_config(config_of("openai--gpt-oss-120b"), 1, 16, 2)
    L, X = settings["max_model_len"], settings["max_num_batched_tokens"]
    p = plan(layers, int(obs["kv_cache_gib"] * GIB), L=L, X=X, version=(0, 11, 2))
    # 8.99 GiB / 589,824 B = 16,365 blocks -> 16,365 // 2 x 16 = 130,912 tokens (logged 130,960 = 8185 x 16:
    # 16,370-16,371 blocks, inside the rounding of 8.99 GiB)
    assert p.num_blocks == 16_365 and p.kv_cache_tokens == 130_912
    tokens = {plan(layers, b * p.block_bytes, L=L, X=X, version=(0, 11, 2)).kv_cache_tokens
              for b in _blocks_in_rounding_window(obs["kv_cache_gib"], p.block_bytes)}
    assert obs["kv_cache_tokens"] in tokens
    # per request: 6144 full + cdiv(127 + 2048, 16) + 1 = 137 sliding blocks
    assert p.blocks_per_request == 6144 + 137


def test_dev_gpt_oss_120b_v0110_does_not_fit(dev_cases):
    case = dev_cases["vllm-27508-gptoss120b-h100-095"]
    obs, settings = case["observed"], case["settings"]
    assert obs["startup_failed"]
    layers = attention_layers_from_config(config_of("openai--gpt-oss-120b"), 1, 16, 2)
    p = plan(layers, int(obs["kv_cache_gib"] * GIB), L=131072, X=settings["max_num_batched_tokens"],
             version=(0, 11, 0))
    assert not p.fits and p.fit_needed_bytes > 4.5 * GIB


@pytest.mark.parametrize("case_id, version, block, L, X", [
    ("myoceane-gptoss20b-a100-v0190", (0, 19, 0), 16, 131072, 2048),  # A100: 2048-token serve default
    ("file28022205292-gptoss20b-h100-16k", (0, 11, 0), 128, 16000, 8192),
])
def test_dev_gpt_oss_20b_starts(dev_cases, case_id, version, block, L, X):
    case = dev_cases[case_id]
    assert not case["observed"].get("startup_failed")
    layers = attention_layers_from_config(config_of("openai--gpt-oss-20b"), 1, block, 2)
    p = plan(layers, int(case["observed"]["kv_cache_gib"] * GIB), L=L, X=X, version=version, block=block)
    assert p.fits and len(p.groups) == 2 and p.block_bytes == 12 * layers[0].page_bytes


def test_rule_table_rows_are_ordered_by_release():
    assert rule((0, 9, 0), "hybrid_allocator") is False and rule((0, 9, 1), "hybrid_allocator") is True
    # the 0.20.1 wheel already logs int(concurrency x L) (kv_cache_utils.py); 0.20.0 the blocks // groups form
    assert rule((0, 20, 0), "kv_tokens_rule") == "blocks-per-group" and rule((0, 20, 1), "kv_tokens_rule") == "concurrency"


# --- pages that do not divide the largest one (unify_kv_cache_spec_page_size) -------------------------------

# full attention of 2 KV heads x 64 (16 KiB at fp32) next to a sliding layer of 2 x 96 (24 KiB): 3:2
HEAD64, HEAD96 = AttentionLayer("full", 16_384), AttentionLayer("sliding", 24_576, 1)


@pytest.mark.parametrize(("version", "backend", "padded"), [
    ((0, 19, 0), None, False), ((0, 23, 0), None, False),  # NotImplementedError (0.23.0 wheel)
    ((0, 24, 0), None, True), ((0, 28, 0), "FLASHINFER", True),  # CUDA backends index KV by block stride
    ((0, 24, 0), "ROCM_ATTN", False), ((0, 28, 0), "CPU_ATTN", False),
    ((0, 29, 0), "ROCM_ATTN", True), ((0, 33, 0), None, True)])  # any backend from 0.29
def test_non_divisible_page_padding_by_release_and_backend(version, backend, padded):
    args = ([HEAD64, HEAD96], 1 << 20)
    if not padded:
        with pytest.raises(NotImplementedError, match="not divisible"):
            plan(*args, L=16, version=version, attention_backend=backend)
        return
    p = plan(*args, L=16, version=version, attention_backend=backend)
    # the 16 KiB page padded to 24 KiB, both blocks stay 16 tokens: 1 MiB // 24 KiB
    assert (p.num_blocks, p.block_bytes, [g.block_size for g in p.groups]) == (42, 24_576, [16, 16])


def test_mla_page_is_padded_until_0_28_only():
    # a 576-wide latent (18,432 B per block at bf16) next to a 24 KiB sliding draft page
    layers = [AttentionLayer("mla", 18_432), AttentionLayer("sliding", 24_576, 1024)]
    assert plan(layers, 1 << 20, L=16, version=(0, 28, 0)).block_bytes == 24_576
    with pytest.raises(NotImplementedError, match="non-MLA"):
        plan(layers, 1 << 20, L=16, version=(0, 29, 0))


def test_mamba_page_padded_to_a_larger_draft_page_from_0_26():
    # Mamba state 16 KiB, the model's attention 16 KiB, a draft layer of 32 KiB (vLLM issue 43626)
    layers = [AttentionLayer("mamba", 16_384), AttentionLayer("full", 16_384), AttentionLayer("full", 32_768)]
    with pytest.raises(NotImplementedError, match="0.26"):
        plan(layers, 1 << 30, L=4096, version=(0, 25, 0))
    p = plan(layers, 1 << 30, L=4096, version=(0, 26, 0))
    # three groups of one layer, each a 32 KiB page: the model's attention re-blocked to 32 tokens
    assert p.block_bytes == 32_768 and p.num_blocks == (1 << 30) // 32_768
    assert [g.block_size for g in p.groups][1:] == [32, 16]


# --- KV-shared layers (kv_sharing_target_layer_name) ----------------------------------------------------------

# Gemma 4 E2B-shaped text model: 35 layers, every fifth full, the last 20 reuse the KV of layer 13 (sliding)
# or 14 (full); 1 KV head, head_dim 256 sliding / 512 full, bf16: pages 16 KiB and 32 KiB at block 16
E2B_TEXT = {"model_type": "gemma4_text", "num_hidden_layers": 35, "num_attention_heads": 8,
            "num_key_value_heads": 1, "head_dim": 256, "sliding_window": 512, "num_kv_shared_layers": 20,
            "layer_types": ["full_attention" if i % 5 == 4 else "sliding_attention" for i in range(35)]}


def _e2b_layers(shared: bool) -> list[AttentionLayer]:
    targets = kv_sharing_targets(E2B_TEXT) if shared else [None] * 35
    return [AttentionLayer("full", 32_768, None, targets[i]) if i % 5 == 4
            else AttentionLayer("sliding", 16_384, 512, targets[i]) for i in range(35)]


def test_gemma4_kv_sharing_targets():
    targets = kv_sharing_targets(E2B_TEXT)
    assert targets[:15] == [None] * 15
    assert targets[15:] == [14 if i % 5 == 4 else 13 for i in range(15, 35)]
    # Gemma 3n: full -> the layer before the shared ones, sliding -> two before
    gemma3n = {**E2B_TEXT, "model_type": "gemma3n_text", "num_kv_shared_layers": 10}
    assert kv_sharing_targets(gemma3n)[25:] == [23, 23, 23, 23, 24, 23, 23, 23, 23, 24]
    layers = attention_layers_from_config(E2B_TEXT, 1, 16, 2)
    assert [layer.kv_sharing_target for layer in layers] == targets


def test_gemma4_e2b_shared_layers_take_no_page():
    # own layers: 12 sliding + 3 full -> group size 3, sliding re-blocked to 32 (32 KiB): 4 + 1 groups,
    # 3 x 32 KiB per block; without sharing 28 + 7 -> 7 x 32 KiB per block
    shared = plan(_e2b_layers(True), 1 << 30, L=8192, version=(0, 33, 0))
    unshared = plan(_e2b_layers(False), 1 << 30, L=8192, version=(0, 33, 0))
    assert (shared.block_bytes, shared.num_blocks) == (98_304, 10_922)
    assert (unshared.block_bytes, unshared.num_blocks) == (229_376, 4_681)
    assert sum(g.layers for g in shared.groups) == 15
    by_target = {g.layer_indices: g.shared_layer_indices for g in shared.groups}
    assert by_target[(4, 9, 14)] == (19, 24, 29, 34)
    assert by_target[(3, 8, 13)] == tuple(i for i in range(15, 35) if i % 5 != 4)
    assert any("KV-shared layers: 20" in note for note in shared.notes)


def test_kv_sharing_refused_where_vllm_refuses():
    layers = [AttentionLayer("full", 32_768), AttentionLayer("full", 32_768, None, 0)]
    with pytest.raises(NotImplementedError, match="V0"):
        plan(layers, 1 << 30, L=4096, version=(0, 10, 1), engine="v0")
    with pytest.raises(NotImplementedError):
        plan(layers, 1 << 30, L=4096, version=(0, 9, 0))
    # pipeline stages: the target must live on the same stage
    with pytest.raises(ValueError, match="not a valid Attention layer"):
        plan(layers, [1 << 30] * 2, L=4096, version=(0, 33, 0), worker_layers=[(0,), (1,)])
    with pytest.raises(ValueError, match="same type"):
        plan([AttentionLayer("full", 32_768), AttentionLayer("cross", 32_768, 1500, 0)], 1 << 30, L=4096,
             version=(0, 33, 0))
