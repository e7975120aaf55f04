"""llama.cpp rules of issue 25: the newest vendored build, whose sliding windows llama.cpp applies (Phi-3's is
disabled), llama-cpp-python's own defaults for a pasted `python -m llama_cpp.server` line, and a CPU-only build
(no device: CPU_REPACK, the CPU compute buffer, no CUDA context)."""
import pytest

from vram_detective.api import explain, model_spec
from vram_detective.cli import main
from vram_detective.engines import get_engine
from vram_detective.engines.llamacpp.launch import parse_launch_line
from vram_detective.engines.llamacpp.plan import layout
from vram_detective.engines.llamacpp.settings import resolve

ENGINE = get_engine("llamacpp")


def _kv(model, build, **settings):
    b = explain(model, "RTX 4090", engine="llamacpp", engine_version=build, gguf_type="Q4_K_M", **settings)
    figures = {f.key: f.value for f in b.engine_figures if f.schema}
    return sum(v for k, v in figures.items() if k.endswith("_kv_buffer_mib"))


def test_newest_vendored_build_is_accepted(capsys):
    assert ENGINE.releases.resolve("b11312") == (11312,)
    assert main(["explain", "Qwen/Qwen3-0.6B", "--engine", "llamacpp", "--engine-version", "b11312", "--gpu", "4090",
                 "-c", "8192"]) == 0
    assert "llama.cpp b11312" in capsys.readouterr().out


@pytest.mark.parametrize("build", ["b6150", "b11312"])
def test_phi3_window_is_not_applied(build):
    # Phi-3-mini-4k's config carries sliding_window 2047; llama.cpp drops it ("Phi SWA is currently disabled"):
    # 32 layers x 3072 (32 KV heads x 96) x K and V x f16 x 4096 cells = 1536 MiB, as a real load allocates
    assert _kv("microsoft/Phi-3-mini-4k-instruct", build, n_ctx=4096, n_gpu_layers=99) == 1536.0


def test_gemma3_window_is_applied():
    # Gemma-3-1B: 26 layers, 1 KV head x 256; layers 5, 11, 17, 23 are global (8192 cells), the other 22 hold
    # pad(512 + 512, 256) = 1024 cells: (4 x 8192 + 22 x 1024) x 1024 B = 54 MiB
    assert _kv("google/gemma-3-1b-it", "b6150", n_ctx=8192, n_gpu_layers=99) == 54.0
    assert _kv("google/gemma-3-1b-it", "b6150", n_ctx=8192, n_gpu_layers=99, swa_full=True) == 208.0


def test_python_server_line_uses_the_package_defaults():
    line = parse_launch_line("python -m llama_cpp.server --model gemma-3-1b-it-Q4_K_M.gguf --n_ctx 8192")
    assert line.settings["swa_full"] is True and line.settings["n_gpu_layers"] == 0
    assert line.settings["flash_attn"] == "off" and line.settings["n_batch"] == 512
    # the package keeps llama_context_default_params' swa_full = true: every layer holds 8192 cells (208 MiB)
    assert _kv("google/gemma-3-1b-it", "b6150", **line.settings) == 208.0
    # n_batch and n_ubatch are clamped to a smaller context (Llama.__init__)
    small = parse_launch_line("python -m llama_cpp.server --model m.gguf --n_ctx 256 --n_gpu_layers -1")
    assert (small.settings["n_batch"], small.settings["n_ubatch"], small.settings["n_gpu_layers"]) == (256, 256, "all")


def _cpu_layout(quant, **extra):
    spec = model_spec("Qwen/Qwen2.5-0.5B", source="catalog")
    return layout(spec, resolve({"gguf_type": quant, "n_ctx": 4096, "num_gpus": 0, "n_gpu_layers": 0, **extra}, 6150))


def test_cpu_only_build_has_no_device_and_repacks_q4():
    lay = _cpu_layout("Q4_0")
    assert lay.devices == () and lay.context == {} and lay.output[0] == "CPU"
    assert set(lay.compute) == {"CPU"} and set(lay.kv_by_device) == {"CPU"}
    # Q4_0 matrices with rows in eights go to CPU_REPACK; the embedding (GET_ROWS) and norms stay mapped
    assert lay.model["CPU_REPACK"] > 0 and lay.model["CPU_Mapped"] > lay.model["CPU_REPACK"]
    assert "CPU_REPACK" not in _cpu_layout("Q4_0", repack=False).model
    assert "CPU_REPACK" not in _cpu_layout("Q8_0").model  # no AVX2 kernel for Q8_0
    loaded = _cpu_layout("Q4_0", mmap=False).model
    assert set(loaded) == {"CPU", "CPU_REPACK"} and loaded["CPU_REPACK"] == lay.model["CPU_REPACK"]


def test_no_repack_and_device_none_flags():
    line = parse_launch_line("llama-server -m m.gguf -dev none -nr -c 4096")
    assert line.settings == {"num_gpus": 0, "repack": False, "n_ctx": 4096}
