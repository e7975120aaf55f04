"""Recurrent and hybrid models in the llama.cpp plan: the RS buffer (llama-memory-recurrent.cpp) per device
beside a KV cache of the attention layers only, checked on the Qwen3.6-27B dev case (RTX 5090, 131k, 4 slots,
q8_0 KV: KV 4352.00 MiB of 16 layers, RS 598.50 MiB = R 22.50 + S 576.00, as its log prints)."""
import pytest

from dev_shapes import QWEN36_27B, case_spec

from vram_detective.engines import get_engine
from vram_detective.engines.llamacpp.kv_cache import mamba_state, rwkv_state
from vram_detective.engines.llamacpp.log_parser import parse
from vram_detective.engines.llamacpp.plan import layout
from vram_detective.engines.llamacpp.settings import SettingsError, resolve
from vram_detective.hardware import custom_gpu
from vram_detective.model.config import parse_config

MIB = 1024 * 1024
Q36 = {"n_ctx": 131072, "type_k": "q8_0", "type_v": "q8_0", "flash_attn": "on"}


def _layout(settings, build=7600, spec=None):
    return layout(spec or case_spec(QWEN36_27B), resolve(settings, build))


def test_qwen36_dev_case_kv_of_attention_layers_and_rs_exact():
    lay = _layout(Q36)
    assert (lay.kv.layers, lay.kv.cells, lay.kv.total_bytes / MIB) == (16, 131072, 4352.0)
    assert (lay.rs.cells, lay.rs.layers) == (4, 48)
    assert (lay.rs.r_bytes / MIB, lay.rs.s_bytes / MIB) == (22.5, 576.0)
    assert lay.rs_by_device == {"CUDA0": 598.5 * MIB}
    assert lay.vram("CUDA0") - lay.rs_by_device["CUDA0"] == (
        lay.model["CUDA0"] + lay.kv_by_device["CUDA0"] + lay.compute["CUDA0"] + lay.context["CUDA0"])


def test_rs_follows_the_layers_split_and_no_kv_offload():
    # b7600 puts the output layer first: -ngl 33 offloads blocks 32..63 (24 of them recurrent) and the output
    partial = _layout({**Q36, "n_gpu_layers": 33})
    assert {k: v / MIB for k, v in partial.rs_by_device.items()} == {"CPU": 299.25, "CUDA0": 299.25}
    assert partial.host - _layout({**Q36, "n_gpu_layers": 33, "n_parallel": 1}).host > 0
    off = _layout({**Q36, "kv_offload": False})
    assert off.rs_by_device == {"CPU": 598.5 * MIB} and off.kv_by_device == {"CPU": 4352 * MIB}
    one = _layout({**Q36, "n_parallel": 1})  # one slot: one state cell
    assert one.rs.total_bytes / MIB == pytest.approx(598.5 / 4)


def test_plan_prints_rs_lines_that_parse_back():
    engine = get_engine("llamacpp")
    b = engine.plan(case_spec(QWEN36_27B), custom_gpu(32 * 2**30), dict(Q36), engine.releases.resolve("b7600"))
    lines = "\n".join(b.log_lines)
    assert "llama_memory_recurrent:      CUDA0 RS buffer size =   598.50 MiB" in lines
    assert "(     4 cells,  64 layers,  4 seqs), R (f32):   22.50 MiB, S (f32):  576.00 MiB" in lines
    back = parse(lines)
    assert (back["cuda0_rs_buffer_mib"], back["rs_size_mib"], back["kv_layers"]) == (598.5, 598.5, 16)
    assert b.figure("cuda0_rs_buffer_mib") == 598.5


def test_mamba_and_rwkv_state_widths():
    # Mamba2 d_inner 8192, d_state 128, 1 group, conv 4: conv keeps 3 x (8192 + 2 x 128) floats
    assert mamba_state(4, 8192, 128, 1) == (25344, 1048576)
    assert mamba_state(4, 5120, 16) == (15360, 81920)  # Mamba1 (Jamba-style: d_inner 5120, d_state 16)
    assert rwkv_state(2048, 64) == (4096, 131072)


def test_bamba_mamba2_hybrid_through_the_plan():
    cfg = {"architectures": ["BambaForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
           "attn_layer_indices": [9, 18, 27], "mamba_n_heads": 128, "mamba_d_head": 64, "mamba_expand": 2,
           "mamba_n_groups": 1, "mamba_d_state": 128, "mamba_d_conv": 4, "max_position_embeddings": 4096,
           "torch_dtype": "bfloat16"}
    lay = _layout({"n_ctx": 4096, "n_parallel": 1}, spec=parse_config(cfg, "bamba-9b"))
    assert (lay.kv.layers, lay.rs.layers, lay.rs.cells) == (3, 29, 1)
    # 29 layers x (3 x (8192 + 256) + 128 x 8192) floats x 4 bytes
    assert lay.rs.total_bytes == 29 * (25344 + 1048576) * 4


def test_minimax_linear_attention_is_refused():
    cfg = {"architectures": ["MiniMaxText01ForCausalLM"], "hidden_size": 512, "num_hidden_layers": 2,
           "num_attention_heads": 8, "num_key_value_heads": 8, "intermediate_size": 1024, "vocab_size": 1000,
           "attn_type_list": [0, 1], "max_position_embeddings": 4096, "torch_dtype": "bfloat16", "head_dim": 64,
           "num_local_experts": 4, "num_experts_per_tok": 2, "rotary_dim": 64}
    with pytest.raises(SettingsError, match="no linear_attention"):
        _layout({"n_ctx": 4096}, spec=parse_config(cfg, "minimax-tiny"))
