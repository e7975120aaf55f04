"""The llama.cpp engine end to end: registry, launch lines, a real small GGUF planned per device, printed lines
read back, the dev cases against their logs, and the fit solvers."""
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest

from vram_detective.engines import get_engine
from vram_detective.engines.base import Engine
from vram_detective.engines.llamacpp import calibration, fit
from vram_detective.engines.llamacpp.launch import LaunchLineError, is_launch_line, parse_launch_line
from vram_detective.engines.llamacpp.log_lines import log_lines
from vram_detective.engines.llamacpp.log_parser import parse
from vram_detective.engines.llamacpp.settings import StartupRefusal, resolve
from vram_detective.hardware import custom_gpu
from vram_detective.model.sources import load_model
from vram_detective.model.config import parse_config

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import llamacpp_accuracy as bench  # noqa: E402
from dev_shapes import LLAMA31_8B, QWEN3_30B, case_spec  # noqa: E402

MIB = 2**20
ENGINE = get_engine("llamacpp")
GPU = custom_gpu(24 * 2**30)


def test_registered_and_speaks_the_protocol():
    assert isinstance(ENGINE, Engine) and isinstance(get_engine("ollama"), Engine)
    assert (ENGINE.name, ENGINE.label) == ("llamacpp", "llama.cpp")
    assert ENGINE.releases.resolve("b5274") == (5274,) and ENGINE.releases.resolve(None) == (11312,)
    assert ENGINE.releases.newest == "b11312"
    with pytest.raises(ValueError):
        ENGINE.releases.resolve("b1200")


def test_llama_server_line():
    line = ("./build/bin/llama-server -m q.gguf -ngl 99 -c 32768 -np 2 -ctk q8_0 -ctv q8_0 -fa on -ub 1024 "
            "-ts 3,1 -ot exps=CPU --n-cpu-moe 4 --no-mmap --kv-unified --host 0.0.0.0")
    got = parse_launch_line(line)
    assert got.model == "q.gguf" and got.binary == "llama-server"
    assert got.settings == {"n_gpu_layers": 99, "n_ctx": 32768, "n_parallel": 2, "type_k": "q8_0", "type_v": "q8_0",
                            "flash_attn": "on", "n_ubatch": 1024, "tensor_split": (3.0, 1.0),
                            "override_tensor": ("exps=CPU",), "n_cpu_moe": 4, "mmap": False, "kv_unified": True}
    assert got.ignored == ("--host", "0.0.0.0")
    old = parse_launch_line("llama-cli -m m.gguf -fa -ngl 33")  # bare -fa of older builds
    assert old.settings == {"flash_attn": "on", "n_gpu_layers": 33}
    py = parse_launch_line("python3 -m llama_cpp.server --model m.gguf --n_gpu_layers -1 --n_ctx 8192 --type_k 8")
    # llama-cpp-python's server defaults under the flags (llama_cpp/server/settings.py; -1 = every layer)
    assert py.settings == {"n_gpu_layers": "all", "n_ctx": 8192, "type_k": "q8_0", "n_batch": 512, "n_ubatch": 512,
                           "flash_attn": "off", "n_parallel": 1, "swa_full": True} and py.binary == "llama_cpp.server"
    assert is_launch_line("llama-server -m x.gguf") and not is_launch_line("vllm serve Qwen/Qwen3-8B")
    assert ENGINE.is_launch_line(["llama-server.exe", "-m", "x"])
    with pytest.raises(LaunchLineError):
        parse_launch_line("vllm serve x")


def _write(path, n_layer=2, embd=256, vocab=1000, ff=512):
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(n_layer)
    w.add_embedding_length(embd)
    w.add_feed_forward_length(ff)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_context_length(4096)
    w.add_vocab_size(vocab)
    w.add_tensor("token_embd.weight", np.zeros((vocab, embd), dtype=np.float16))
    for il in range(n_layer):
        w.add_tensor(f"blk.{il}.attn_norm.weight", np.zeros(embd, dtype=np.float32))
        w.add_tensor(f"blk.{il}.attn_q.weight", np.zeros((embd, embd), dtype=np.float16))
        w.add_tensor(f"blk.{il}.attn_k.weight", np.zeros((embd // 2, embd), dtype=np.float16))
        w.add_tensor(f"blk.{il}.attn_v.weight", np.zeros((embd // 2, embd), dtype=np.float16))
        w.add_tensor(f"blk.{il}.attn_output.weight", np.zeros((embd, embd), dtype=np.float16))
        w.add_tensor(f"blk.{il}.ffn_norm.weight", np.zeros(embd, dtype=np.float32))
        for name in ("ffn_gate", "ffn_up"):
            w.add_tensor(f"blk.{il}.{name}.weight", np.zeros((ff, embd), dtype=np.float16))
        w.add_tensor(f"blk.{il}.ffn_down.weight", np.zeros((embd, ff), dtype=np.float16))
    w.add_tensor("output_norm.weight", np.zeros(embd, dtype=np.float32))
    w.add_tensor("output.weight", np.zeros((vocab, embd), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_plan_of_a_real_gguf(tmp_path):
    source = load_model(str(_write(tmp_path / "tiny.gguf")))
    spec = parse_config(source.config, "tiny")
    assert ENGINE.layout(spec, GPU, {}, (5274,), gguf_checkpoint=source.checkpoint).offloaded == 0  # -ngl 0 default
    lay = ENGINE.layout(spec, GPU, {"n_ctx": 1024, "n_gpu_layers": 99}, (5274,), gguf_checkpoint=source.checkpoint)
    # per layer: 2 norms 1024 B each, q/o 256x256 f16 = 131072 B each, k/v 128x256 = 65536 each,
    # gate/up/down 512x256 f16 = 262144 each -> 1,181,696 B; output 1000x256 f16 = 512000 + norm 1024
    layer = 2 * 1024 + 2 * 131072 + 2 * 65536 + 3 * 262144
    assert lay.model["CUDA0"] == 2 * layer + 512000 + 1024
    assert lay.model["CPU_Mapped"] == 512000  # token_embd stays on the host, mapped
    # KV: 2 layers x 1024 cells x (2 heads x 64) x 2 B x (K + V)
    assert lay.kv_by_device == {"CUDA0": 2 * 1024 * 128 * 2 * 2}
    assert lay.vram("CUDA0") == (lay.model["CUDA0"] + lay.kv_by_device["CUDA0"] + lay.compute["CUDA0"]
                                 + calibration.CUDA_CONTEXT_BYTES)
    b = ENGINE.plan(spec, GPU, {"n_ctx": 1024, "n_gpu_layers": 99}, (5274,), gguf_checkpoint=source.checkpoint)
    assert b.engine_name == "llamacpp" and b.engine_version == "b5274"
    assert b.figure("vram_cuda0_bytes") == lay.vram("CUDA0") and b.figure("host_ram_bytes") == lay.host
    assert b.components.find("CUDA0.kv").bytes == 2 * 1024 * 128 * 2 * 2
    partial = ENGINE.layout(spec, GPU, {"n_ctx": 1024, "n_gpu_layers": 1}, (5274,), gguf_checkpoint=source.checkpoint)
    assert partial.model["CUDA0"] == layer and partial.kv_by_device == {"CUDA0": 524288, "CPU": 524288}


def test_quantized_v_needs_flash_attention():
    spec = case_spec(LLAMA31_8B)
    with pytest.raises(StartupRefusal):
        ENGINE.plan(spec, GPU, {"type_v": "q8_0", "flash_attn": "off"}, (5274,))
    assert ENGINE.layout(spec, GPU, {"type_v": "q8_0", "flash_attn": "auto"}, (7342,)).flash_attn is True


@pytest.mark.parametrize("build", [3600, 5274, 5622, 7342])
def test_every_printed_figure_reads_back(build):
    spec = case_spec(QWEN3_30B)
    b = ENGINE.plan(spec, GPU, {"n_ctx": 8192, "n_gpu_layers": 30, "num_gpus": 2, "gguf_type": "Q4_K_M"}, (build,))
    printed = {f.key: f.value for f in b.engine_figures if f.schema}
    read = parse("\n".join(b.log_lines))
    assert {k: read.get(k) for k in printed} == printed


# --- the dev cases ---------------------------------------------------------------------------------------
KNOWN_MISSES = {
    ("llamacpp-ollama-0.32-dscoder-v2-lite-q5km-16g-ctx8192", "cuda0_compute_buffer_mib"):
        "compute approximation has no MoE / MLA terms (n_ff = 6 x 1408 + 2816 active, 16 heads of 192): "
        "observed 340.27, predicted 282.00 (-17.12 %)",
    ("llamacpp-ollama-0.32-dscoder-v2-lite-q5km-16g-ctx8192", "cuda_host_compute_buffer_mib"):
        "host inputs miss 4 MiB at this build (8192 cells, ubatch 512): observed 24.01, predicted 20.00 (-16.70 %)",
    ("llamacpp-phi3-mini-4k-q4km-3070-tgwebui-4k", "cuda0_compute_buffer_mib"):
        "compute approximation: observed 150.00, predicted 139.00 (-7.33 %)",
    ("llamacpp-ollama-qwen3-4b-q4km-4g-partial26-f16kv", "cuda0_model_buffer_mib"):
        "Ollama's qwen3:4b file has one more Q6_K ffn_down among GPU layers than the stock rule (6.11 MiB = "
        "Q6_K - Q4_K of 9728x2560): observed 1745.66, predicted 1739.53; the total over both buffers matches",
    ("llamacpp-ollama-qwen3-4b-q4km-4g-partial26-f16kv", "cuda_host_model_buffer_mib"):
        "the same 6.11 MiB on the host side: observed 934.54, predicted 940.66",
    ("llamacpp-qwen36-27b-udq4kxl-5090-131k-q8kv", "cuda0_compute_buffer_mib"):
        "compute approximation has no gated-delta-net term (fitted on attention-only models): observed 495.00, "
        "predicted 529.00 (+6.87 %)",
}
TOLERANCE = {"model": 0.001, "kv": 0.0, "rs": 0.0, "output": 0.0, "compute": 0.05, "vram": 0.05, "host": 0.05}


def _figures():
    out = []
    for case in bench._cases():
        if case["id"] in bench.PLANS:
            for kind, figure, got, want in bench.compare(case):
                marks = ()
                if (case["id"], figure) in KNOWN_MISSES:
                    marks = pytest.mark.xfail(strict=True, reason=KNOWN_MISSES[(case["id"], figure)])
                out.append(pytest.param(kind, got, want, id=f"{case['id'][9:]}:{figure}", marks=marks))
    return out


@pytest.mark.parametrize("kind,got,want", _figures())
def test_dev_case_figure(kind, got, want):
    assert abs(got - want) <= TOLERANCE[kind] * want + (0.011 if kind not in ("kv", "rs") else 0)


def test_dev_targets():
    _, errors = bench.table()
    s = bench.summary(errors)
    assert s["model"][1] <= 0.001 and s["kv"][2] == 0.0 and s["compute"][1] <= 0.05
    assert s["vram"][1] <= 0.02 and s["vram"][2] <= 0.05 and s["host"][1] <= 0.02 and s["host"][2] <= 0.05
    assert s["kv"][0] == 16 and s["model"][0] == 26 and s["rs"] == (1, 0.0, 0.0, 1)


def test_calibration_cases():
    import calibration_cases

    assert calibration.residuals(calibration_cases.llamacpp_pairs("fitted_on")) == [304.74, 304.74, 304.74]
    assert calibration.residuals(calibration_cases.llamacpp_pairs("held_out")) == [210.9]
    # the constant is the fitted residual
    assert calibration.CUDA_CONTEXT_BYTES == round(304.74 * 2**20)


# --- fit -------------------------------------------------------------------------------------------------
def test_most_layers_at_a_context_and_largest_context():
    spec = case_spec(LLAMA31_8B)
    budget = {"CUDA0": 6 * 2**30}
    most = fit.most_gpu_layers(spec, {"gguf_type": "Q4_K_M"}, 5274, budget, 32768, "llama31-8b.gguf")
    ngl = most.settings.n_gpu_layers
    assert 0 < ngl < 33 and fit.fits(most.layout, budget)
    over = fit.layout(spec, resolve({"gguf_type": "Q4_K_M", "n_ctx": 32768, "n_gpu_layers": ngl + 1}, 5274))
    assert not fit.fits(over, budget)
    # b5274's -fa is a switch (flash attention off by default): nothing to say, and "-fa off" would be a stray word
    assert most.command == f"llama-server -m llama31-8b.gguf -ngl {ngl} -c 32768"
    ctx = fit.largest_context(spec, {"gguf_type": "Q4_K_M"}, 5274, budget)
    assert ctx.settings.n_ctx % 256 == 0 and fit.fits(ctx.layout, budget)
    bigger = fit.layout(spec, resolve({"gguf_type": "Q4_K_M", "n_ctx": ctx.settings.n_ctx + 256,
                                       "n_gpu_layers": "all"}, 5274))
    assert not fit.fits(bigger, budget)
    assert ctx.command.startswith("llama-server -m model.gguf -ngl all -c ")
    assert fit.largest_context_for_kv(spec, {}, 5274, 2**30) == 8192  # 128 KiB per token in f16
