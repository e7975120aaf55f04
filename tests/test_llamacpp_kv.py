"""The KV buffers of the dev cases, exact, from each case's settings and the model's attention shape."""
import pytest

from vram_detective.engines.llamacpp.kv_cache import (
    KvLayer, KvSettings, gated_delta_state, kv_cache, mla_layers, recurrent_state, uniform_layers)

MIB = 1024 * 1024


def _mib(n):
    return n / MIB


# (case, n_layer, kv heads, head dim, settings, {device: layers}, observed {device: MiB}, K MiB, V MiB)
DENSE = [
    ("glm-z1-32b b5274", 61, 2, 128, KvSettings(32768, flash_attn=True, build=5274), {"CUDA0": 61},
     {"CUDA0": 1952.0}, 976.0, 976.0),
    ("ollama llama3.1-8b 4 seqs", 32, 8, 128, KvSettings(8192, n_seq_max=4, build=3600), {"CUDA0": 32},
     {"CUDA0": 1024.0}, 512.0, 512.0),
    ("qwen3-30b-a3b b5622 two GPUs", 48, 4, 128, KvSettings(16384, build=5622), {"CUDA0": 12, "CUDA1": 36},
     {"CUDA0": 384.0, "CUDA1": 1152.0}, 768.0, 768.0),
    ("phi3-mini 4k", 32, 32, 96, KvSettings(4096, build=5800), {"CUDA0": 32}, {"CUDA0": 1536.0}, 768.0, 768.0),
    ("mistral-7b ngl 20 of 32", 32, 8, 128, KvSettings(768, flash_attn=True, build=6150), {"CPU": 12, "CUDA0": 20},
     {"CUDA0": 60.0, "CPU": 36.0}, 48.0, 48.0),
    ("qwen3-coder-30b b7342 np4 unified", 48, 4, 128,
     KvSettings(65536, n_seq_max=4, kv_unified=True, flash_attn=True, build=7342), {"CUDA0": 48},
     {"CUDA0": 6144.0}, 3072.0, 3072.0),
    ("gemma3-4b ~b5000 no iSWA", 34, 4, 256, KvSettings(131072, n_swa=1024, build=5000), {"CPU": 14, "CUDA0": 20},
     {"CUDA0": 10240.0, "CPU": 7168.0}, 8704.0, 8704.0),
    ("ollama qwen3-4b ngl 26/37", 36, 8, 128, KvSettings(4096, build=7500), {"CPU": 11, "CUDA0": 25},
     {"CUDA0": 400.0, "CPU": 176.0}, 288.0, 288.0),
    ("ollama qwen3-4b q8_0 FA", 36, 8, 128, KvSettings(4096, type_k="q8_0", type_v="q8_0", flash_attn=True,
                                                       build=7500), {"CUDA0": 36}, {"CUDA0": 306.0}, 153.0, 153.0),
]


def _devices(spread):
    return [device for device, count in spread.items() for _ in range(count)]


@pytest.mark.parametrize("case", DENSE, ids=[c[0] for c in DENSE])
def test_dense_kv_exact(case):
    _, n_layer, heads, head, settings, spread, observed, k, v = case
    cache = kv_cache(uniform_layers(n_layer, heads, head), _devices(spread), settings)
    assert {d: _mib(b) for d, b in cache.per_device} == observed
    assert (_mib(cache.k_bytes), _mib(cache.v_bytes)) == (k, v)


def test_deepseek_v3_mla_may_2025_split_by_device():
    # UD-Q2_K_XL on 4 GPUs: K 576 / V 512 per layer, 1 KV head; 15 + 12 + 12 + 22 layers
    layers = mla_layers(61, 512, 64, 128, 128, 128, build=5400)
    cache = kv_cache(layers, _devices({"CUDA0": 15, "CUDA1": 12, "CUDA2": 12, "CUDA3": 22}),
                     KvSettings(16384, flash_attn=True, build=5400))
    assert {d: _mib(b) for d, b in cache.per_device} == {"CUDA0": 510.0, "CUDA1": 408.0, "CUDA2": 408.0,
                                                          "CUDA3": 748.0}
    assert (_mib(cache.k_bytes), _mib(cache.v_bytes)) == (1098.0, 976.0)


def test_deepseek_coder_v2_lite_old_file_keeps_full_heads():
    layers = mla_layers(27, 512, 64, 16, 128, 128, build=7600, file_has_kv_b_split=False)
    for n_ctx, total in ((8192, 2160.0), (4096, 1080.0), (2048, 540.0)):
        cache = kv_cache(layers, ["CUDA0"] * 27, KvSettings(n_ctx, build=7600))
        assert _mib(cache.total_bytes) == total
    assert _mib(kv_cache(layers, ["CUDA0"] * 27, KvSettings(8192, build=7600)).k_bytes) == 1296.0


def test_gemma4_iswa_cells_and_sizes():
    layers = [KvLayer(512, 512) if il % 6 == 5 else KvLayer(2048, 2048, swa=True) for il in range(48)]
    s = KvSettings(8192, n_seq_max=4, kv_unified=True, type_k="q8_0", type_v="q8_0", flash_attn=True,
                   n_swa=1024, build=7600)
    full, swa = kv_cache(layers, ["CUDA0"] * 48, s, swa=False), kv_cache(layers, ["CUDA0"] * 48, s, swa=True)
    assert (full.cells, full.layers, _mib(full.total_bytes)) == (8192, 8, 68.0)
    assert (swa.cells, swa.layers, _mib(swa.total_bytes)) == (4608, 40, 765.0)
    one = KvSettings(8192, n_seq_max=1, type_k="q8_0", type_v="q8_0", flash_attn=True, n_swa=1024, build=7600)
    assert kv_cache(layers, ["CUDA0"] * 48, one, swa=True).cells == 1536
    swa_full = KvSettings(8192, n_seq_max=4, kv_unified=True, type_k="q8_0", type_v="q8_0", flash_attn=True,
                          n_swa=1024, swa_full=True, build=7600)
    assert kv_cache(layers, ["CUDA0"] * 48, swa_full, swa=True).cells == 8192


def test_qwen36_27b_hybrid_kv_and_recurrent_state():
    # 16 full-attention layers (4 KV heads x 256), q8_0, 131072 cells unified over 4 slots
    cache = kv_cache(uniform_layers(16, 4, 256), ["CUDA0"] * 16,
                     KvSettings(131072, n_seq_max=4, kv_unified=True, type_k="q8_0", type_v="q8_0", flash_attn=True,
                                build=7600))
    assert (_mib(cache.total_bytes), _mib(cache.k_bytes)) == (4352.0, 2176.0)
    rs = recurrent_state(48, *gated_delta_state(4, 16, 128, 48, 128), n_seq_max=4)
    assert (_mib(rs.r_bytes), _mib(rs.s_bytes), _mib(rs.total_bytes)) == (22.5, 576.0, 598.5)


def test_non_unified_streams_and_padding():
    s = KvSettings(1000, n_seq_max=3, kv_unified=False, flash_attn=False, build=6150)
    cache = kv_cache(uniform_layers(1, 1, 64), ["CUDA0"], s)
    assert (cache.cells, cache.streams) == (352, 3)  # ceil(1000 / 3) = 334 -> pad 32 -> 352
    assert cache.k_bytes == 352 * 3 * 64 * 2
    fa = kv_cache(uniform_layers(1, 1, 64), ["CUDA0"], KvSettings(1000, flash_attn=True, build=6150))
    assert fa.cells == 1024


def test_ik_llama_mla3_latent_q8_0():
    # ik_llama.cpp MLA-3 caches only c^KV (576 wide): the K half of a KvLayer(576, 0)
    cache = kv_cache([KvLayer(576, 0)] * 61, ["CUDA0"] * 61, KvSettings(16384, type_k="q8_0", flash_attn=True))
    assert round(_mib(cache.k_bytes), 2) == 583.31
