"""-sm row (split buffers, by build), -ot regex=CUDA<N>, --no-kv-offload: where llama.cpp puts each buffer."""
from dev_shapes import LLAMA31_8B, case_spec
from vram_detective.engines.llamacpp.launch import parse_launch_line
from vram_detective.engines.llamacpp.plan import layout
from vram_detective.engines.llamacpp.report import figures as figures_of
from vram_detective.engines.llamacpp.settings import resolve
from vram_detective.engines.llamacpp.weights import GgufTensor, row_split

MIB = 1024 * 1024
SPEC = case_spec(LLAMA31_8B)
BASE = {"gguf_type": "Q4_K_M", "n_ctx": 8192, "n_gpu_layers": 99, "num_gpus": 2}


def test_row_split_of_one_matrix():
    q = GgufTensor("blk.0.attn_q.weight", "Q4_K", (4096, 4096))  # 4096 rows of 2304 bytes
    assert row_split(q, [0.5, 1.0], ("CUDA0", "CUDA1")) == {"CUDA0": 2048 * 2304, "CUDA1": 2048 * 2304}
    # -ts 3,1: CUDA1 starts at row 3072 (a multiple of the 128-row rounding)
    assert row_split(q, [0.75, 1.0], ("CUDA0", "CUDA1")) == {"CUDA0": 3072 * 2304, "CUDA1": 1024 * 2304}
    k = GgufTensor("blk.0.attn_k.weight", "Q4_K", (4096, 1000))  # 1000 x 0.75 = 750 -> 640
    assert row_split(k, [0.75, 1.0], ("CUDA0", "CUDA1")) == {"CUDA0": 640 * 2304, "CUDA1": 360 * 2304}


def test_sm_row_new_builds_split_layers_and_rows():
    lay = layout(SPEC, resolve({**BASE, "split_mode": "row"}, 7342))
    by_layer = layout(SPEC, resolve(BASE, 7342))
    assert set(lay.model) == {"CPU_Mapped", "CUDA0", "CUDA1", "CUDA0_Split", "CUDA1_Split"}
    assert lay.kv_by_device == by_layer.kv_by_device  # the KV still follows the layer split
    # split buffers only hold the 2-D matrices: the per-GPU buffers keep norms (a few KiB per layer)
    assert lay.model["CUDA0"] < MIB and lay.model["CUDA1"] < MIB
    assert sum(lay.row_split.values()) <= lay.split_buffers
    assert abs(lay.row_split["CUDA0"] - lay.row_split["CUDA1"]) < 0.02 * lay.split_buffers
    total_row = sum(lay.vram(d) for d in ("CUDA0", "CUDA1"))
    total_layer = sum(by_layer.vram(d) for d in ("CUDA0", "CUDA1"))
    assert abs(total_row - total_layer) < 2 * MIB


def test_sm_row_old_builds_keep_layers_and_kv_on_the_main_gpu():
    lay = layout(SPEC, resolve({**BASE, "split_mode": "row"}, 3600))
    assert set(lay.model) == {"CPU_Mapped", "CUDA0", "CUDA0_Split"}
    assert lay.kv_by_device == {"CUDA0": 1024 * MIB}
    assert lay.row_split["CUDA1"] > 2000 * MIB and lay.vram("CUDA1") > lay.row_split["CUDA1"]
    figures = figures_of(lay)  # that era names the one split buffer CUDA_Split and the mapped one CPU
    assert {"cuda_split_model_buffer_mib", "cpu_model_buffer_mib", "cuda0_model_buffer_mib"} <= set(figures)
    assert "cuda_split_model_buffer_mib" in figures_of(layout(SPEC, resolve({**BASE, "split_mode": "row"}, 3600)))
    assert "cuda1_split_model_buffer_mib" in figures_of(layout(SPEC, resolve({**BASE, "split_mode": "row"}, 7342)))


def test_override_to_a_named_gpu():
    one = layout(SPEC, resolve({**BASE, "num_gpus": 1}, 7342))
    moved = layout(SPEC, resolve({**BASE, "num_gpus": 1, "override_tensor": (r"blk\.(1[0-9])\.ffn_.*=CUDA1",)}, 7342))
    # ten layers' ffn (gate, up, down, norm) move to CUDA1; the KV stays with the layers on CUDA0
    assert moved.devices == ("CUDA0", "CUDA1") and moved.kv_by_device == one.kv_by_device
    assert moved.model["CUDA0"] + moved.model["CUDA1"] == one.model["CUDA0"]
    # per layer: gate + up 2 x 31.5 MiB Q4_K, down 31.5 (Q4_K) or 45.94 MiB (Q6_K, Q4_K_M's use_more_bits layers)
    assert 10 * 94.5 * MIB < moved.model["CUDA1"] < 10 * 109 * MIB
    assert moved.context.keys() == {"CUDA0", "CUDA1"}
    line = parse_launch_line(r"llama-server -m m.gguf -ngl 99 -ot 'blk\.(1[0-9])\.ffn_.*=CUDA1,exps=CPU' -sm row")
    assert line.settings["override_tensor"] == (r"blk\.(1[0-9])\.ffn_.*=CUDA1", "exps=CPU")
    assert resolve(line.settings, 7342).device_overrides == ((r"blk\.(1[0-9])\.ffn_.*", "CUDA1"),)


def test_no_kv_offload_moves_kv_to_the_host():
    lay = layout(SPEC, resolve({**BASE, "num_gpus": 1, "kv_offload": False}, 7342))
    assert lay.kv_by_device == {"CPU": 1024 * MIB} and lay.host > 1024 * MIB
    assert parse_launch_line("llama-server -m m.gguf -nkvo").settings == {"kv_offload": False}
