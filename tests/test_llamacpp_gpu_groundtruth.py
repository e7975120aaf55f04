"""The CPU-testable parts of benchmarks/llamacpp_gpu_groundtruth.sh: the tiny GGUF files it runs llama.cpp on
(benchmarks/llamacpp_tiny_gguf.py) and the log-to-JSONL conversion (benchmarks/llamacpp_gpu_groundtruth.py),
fed a real llama-server log (the b7342 A100 dev case)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gguf
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import llamacpp_gpu_groundtruth as gt  # noqa: E402
import llamacpp_tiny_gguf as tiny  # noqa: E402

from vram_detective.engines.llamacpp.log_parser import parse  # noqa: E402
from vram_detective.model.config import parse_config  # noqa: E402
from vram_detective.model.gguf_source import gguf_config, gguf_table, read_local  # noqa: E402

MIB = 1024 * 1024


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    return {p.name: p for p in tiny.write_all(tmp_path_factory.mktemp("gguf"))}


def _spec(path):
    header = read_local(path)
    return parse_config(gguf_config(header.metadata, gguf_table([header], [str(path)]).tensors, str(path)), path.stem), header


def test_tiny_models_read_back_with_both_readers(written):
    assert sorted(written) == ["tiny-gemma3.gguf", "tiny-llama.gguf", "tiny-mmproj.gguf", "tiny-moe.gguf"]
    llama, header = _spec(written["tiny-llama.gguf"])
    assert (llama.num_layers, llama.hidden_size, llama.num_kv_heads, llama.head_dim, llama.vocab_size) == (6, 512, 2, 64, 4096)
    types = {t.name: t.dtype for t in header.tensors}
    assert types["blk.0.attn_q.weight"] == "Q8_0" and types["blk.1.attn_q.weight"] == "Q4_0"
    assert types["blk.0.ffn_down.weight"] == "F16" and types["token_embd.weight"] == "Q8_0"
    reader = gguf.GGUFReader(str(written["tiny-llama.gguf"]))
    assert [(t.name, int(t.n_bytes)) for t in reader.tensors] == [(t.name, t.nbytes) for t in header.tensors]
    # the tokenizer llama.cpp needs: 3 specials, 256 byte tokens, words up to 4096
    assert len(reader.fields["tokenizer.ggml.tokens"].data) == 4096
    moe, _ = _spec(written["tiny-moe.gguf"])
    assert (moe.moe.num_experts, moe.moe.experts_per_token, moe.moe.expert_intermediate) == (8, 2, 256)
    gemma, gheader = _spec(written["tiny-gemma3.gguf"])
    assert gemma.sliding_window == 128 and gemma.tie_word_embeddings
    assert "output.weight" not in {t.name for t in gheader.tensors}
    proj = read_local(written["tiny-mmproj.gguf"])
    assert proj.metadata["clip.projector_type"] == "mlp" and proj.metadata["clip.vision.projection_dim"] == 512


def test_token_embedding_bytes(written):
    header = read_local(written["tiny-llama.gguf"])
    embd = next(t for t in header.tensors if t.name == "token_embd.weight")
    assert embd.nbytes == 4096 * 512 // 32 * 34  # Q8_0: 34 bytes per 32 values


def _a100_case():
    for line in (ROOT / "groundtruth" / "dev-llamacpp.jsonl").read_text().splitlines():
        case = json.loads(line)
        if case["id"] == "llamacpp-b7342-qwen3-coder-30b-a3b-q8-a100-40g-64k-np4":
            return case
    raise AssertionError("dev case missing")


def test_log_dir_to_schema_jsonl(tmp_path):
    case = _a100_case()
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "qwen3-coder.cmd").write_text("build/bin/llama-server -m gguf/Qwen3-Coder-30B-A3B-Q8_0.gguf -c 65536 "
                                          "-ngl 99 -fa on --mmproj gguf/tiny-mmproj.gguf --port 18001\n")
    (logs / "qwen3-coder.log").write_text(case["log"])
    (logs / "orphan.cmd").write_text("llama-server -m x.gguf\n")  # a run whose log is missing is left out
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "llamacpp_gpu_groundtruth.py"), "to-jsonl",
                          "b7342", str(logs)], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    records = [json.loads(x) for x in out.stdout.splitlines()]
    assert len(records) == 1
    rec = records[0]
    schema = {"id", "source", "engine", "engine_version", "engine_version_basis", "model", "gpu", "num_gpus",
              "settings", "observed", "log", "tags", "notes"}
    assert set(rec) == schema and rec["engine"] == "llamacpp" and rec["engine_version"] == "b7342"
    assert rec["id"] == "llamacpp-gpu-b7342-qwen3-coder" and rec["gpu"] == "NVIDIA A100-PCIE-40GB"
    assert rec["settings"] == {"n_ctx": 65536, "n_gpu_layers": 99, "flash_attn": "on", "mmproj": "tiny-mmproj.gguf",
                               "gguf_file": "Qwen3-Coder-30B-A3B-Q8_0.gguf", "binary": "llama-server"}
    assert rec["observed"] == parse(case["log"])
    for key in ("cuda0_model_buffer_mib", "cuda0_kv_buffer_mib", "cuda0_compute_buffer_mib"):
        assert rec["observed"][key] == case["observed"][key]
    assert "CUDA0 KV buffer size" in rec["log"] and parse(rec["log"])["cuda0_kv_buffer_mib"] == 6144.0


def test_usage_without_arguments():
    assert gt.main(["x"]) == 2


def test_script_refuses_without_an_sdist(tmp_path):
    script = ROOT / "benchmarks" / "llamacpp_gpu_groundtruth.sh"
    run = subprocess.run(["bash", str(script), str(tmp_path / "missing.tar.gz"), str(tmp_path / "out")],
                         capture_output=True, text=True)
    assert run.returncode == 2 and "no llama-cpp-python sdist" in run.stdout
