"""A Hub GGUF repository through the llama.cpp engine: `explain org/tiny-GGUF --engine llamacpp --gguf-file X`
reads only the header by range reads (model/hub.py) from a real local HTTP server serving a GGUF that the test
writes (benchmarks/llamacpp_tiny_gguf.py), and plans the same buffers as the local file."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("huggingface_hub")
import huggingface_hub  # noqa: E402,F401  (imported before any test changes HF_* variables)

from test_sources_server import fake_hub  # noqa: E402,F401
from vram_detective.cli import main  # noqa: E402

_helper = importlib.util.spec_from_file_location(
    "llamacpp_tiny_gguf", Path(__file__).resolve().parents[1] / "benchmarks" / "llamacpp_tiny_gguf.py")
tiny = importlib.util.module_from_spec(_helper)
_helper.loader.exec_module(tiny)


def _explain(capsys, *args) -> dict:
    assert main(["explain", *args, "--engine", "llamacpp", "--gpu", "RTX 4090", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _figures(report: dict) -> dict:
    """The MiB figures and layer counts, common and the engine's own (nested under its name)."""
    merged = {**report, **report[report["engine_name"]]}
    return {k: v for k, v in merged.items() if k.endswith("_mib") or k in ("offloaded_layers", "kv_cells")}


def test_hub_gguf_repo_plans_like_the_local_file(fake_hub, tmp_path, capsys):
    directory = tmp_path / "repo"
    directory.mkdir()
    llama = tiny.write_llama(directory / "tiny-Q8_0.gguf")
    moe = tiny.write_moe(directory / "tiny-moe-Q8_0.gguf")
    fake_hub.add_repo("org/tiny-GGUF", {llama.name: llama, moe.name: moe})
    settings = ["-ngl", "4", "-c", "2048", "--engine-version", "b7342"]
    hub = _explain(capsys, "org/tiny-GGUF", "--source", "hub", "--gguf-file", "tiny-Q8_0.gguf", *settings)
    local = _explain(capsys, str(llama), *settings)
    assert _figures(hub) == _figures(local)
    figures = _figures(hub)
    # -ngl 4 at b7342 takes the output and blocks 3..5: 3 layers of K + V, 2048 cells x 128 (2 heads x 64) f16
    assert figures["offloaded_layers"] == 4 and figures["cuda0_kv_buffer_mib"] == 3.0
    assert figures["cpu_kv_buffer_mib"] == 3.0
    # only the header travelled, not the 25 MB of tensor data
    assert fake_hub.traffic.bytes_for("tiny-Q8_0.gguf") < llama.stat().st_size / 4
    assert fake_hub.traffic.bytes_for("tiny-moe-Q8_0.gguf") == 0
