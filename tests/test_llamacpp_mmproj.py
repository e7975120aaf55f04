"""--mmproj: a real CLIP projector GGUF written by benchmarks/llamacpp_tiny_gguf.py, its weights placed as
clip.cpp allocates them and its warm-up compute buffer, through the engine's plan and a pasted line."""
import importlib.util
from pathlib import Path

import pytest

from vram_detective.engines.llamacpp.launch import parse_launch_line
from vram_detective.engines.llamacpp.log_parser import parse
from vram_detective.engines.llamacpp.mmproj import ProjectorError, compute_bytes, read_projector, weights_bytes

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("llamacpp_tiny_gguf", ROOT / "benchmarks" / "llamacpp_tiny_gguf.py")
tiny = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tiny)
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny")
    return {"llama": tiny.write_llama(out / "tiny-llama.gguf"), "mmproj": tiny.write_mmproj(out / "tiny-mmproj.gguf")}


def test_projector_weights_and_compute(files):
    p = read_projector(str(files["mmproj"]))
    assert (p.projector_type, p.image_size, p.patch_size, p.has_cls, p.n_pos) == ("mlp", 224, 14, True, 257)
    assert p.stored_bytes == 2924032 and len(p.tensors) == 41
    # on CUDA: the ten Q8_0 matrices with 256 columns (q, k, v, out, ffn_up x 2 layers) gain a padding row of
    # 256 Q8_0 elements (272 B) and then 112 B to the 128-byte alignment; every other tensor is aligned already
    assert weights_bytes(p, True) - p.stored_bytes == 10 * (272 + 112)
    assert weights_bytes(p, False) == p.stored_bytes
    # KQ scores 4 heads x 257 x 257 f32 + activations 257 x (256 + 1024) f32
    assert compute_bytes(p) == 4 * 257 * 257 * 4 + 257 * 1280 * 4


def test_plan_with_and_without_offload(files):
    from vram_detective.engines import get_engine
    from vram_detective.engines.llamacpp.plan import layout
    from vram_detective.engines.llamacpp.settings import resolve
    from vram_detective.hardware import custom_gpu

    line = parse_launch_line(f"llama-server -m {files['llama']} -ngl 99 -c 4096 --mmproj {files['mmproj']}")
    assert line.settings["mmproj"] == str(files["mmproj"])
    assert parse_launch_line("llama-server -m m.gguf --no-mmproj-offload").settings == {"mmproj_offload": False}
    engine = get_engine("llamacpp")
    spec = _tiny_spec(files["llama"])
    base = layout(spec, resolve({"n_ctx": 4096, "n_gpu_layers": 99}, 7342))
    on = layout(spec, resolve(line.settings, 7342))
    assert on.vram("CUDA0") - base.vram("CUDA0") == 2927872 + 2372624 and on.host == base.host
    off = layout(spec, resolve({**line.settings, "mmproj_offload": False}, 7342))
    assert off.vram("CUDA0") == base.vram("CUDA0") and off.host - base.host == 2924032 + 2372624
    b = engine.plan(spec, custom_gpu(8 * 2**30), dict(line.settings), engine.releases.resolve("b7342"))
    back = parse("\n".join(b.log_lines))
    assert back["mmproj_model_size_mib"] == 2.79 and back["mmproj_cuda0_compute_buffer_mib"] == 2.26
    assert back["cuda0_compute_buffer_mib"] == b.figure("cuda0_compute_buffer_mib")  # the LLM's, not clip's


def test_a_text_model_is_not_a_projector(files):
    with pytest.raises(ProjectorError, match="not a vision projector"):
        read_projector(str(files["llama"]))


def _tiny_spec(path):
    from vram_detective.model.config import parse_config
    from vram_detective.model.gguf_source import read_local, gguf_config, gguf_table

    header = read_local(path)
    return parse_config(gguf_config(header.metadata, gguf_table([header], [str(path)]).tensors, str(path)), "tiny")
