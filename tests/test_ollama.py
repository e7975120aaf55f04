"""Ollama on llama.cpp: the local store (a real manifest and a GGUF blob written with the gguf package), its
estimate line reproduced from the dev T4 case, its log read and reconciled, `ollama ps`, defaults by version."""
import hashlib
import json
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest

from vram_detective.engines import get_engine
from vram_detective.engines.ollama import releases
from vram_detective.engines.ollama.estimate import estimate, log_line, shape_of
from vram_detective.engines.ollama.log_parser import parse, reconcile
from vram_detective.engines.ollama.ps import parse_ps
from vram_detective.engines.ollama.store import OllamaModelNotFound, load, manifest_path, resolve
from vram_detective.engines.llamacpp.quant_mix import quantized_tensors
from vram_detective.hardware import custom_gpu

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import llamacpp_accuracy as bench  # noqa: E402
from dev_shapes import LLAMA31_8B, QWEN3_30B, case_spec  # noqa: E402

OLLAMA = get_engine("ollama")


def _store(root: Path, name="tiny", tag="q4") -> Path:
    blob_path = root / "tmp.gguf"
    w = gguf.GGUFWriter(str(blob_path), "llama")
    w.add_block_count(2)
    w.add_embedding_length(128)
    w.add_feed_forward_length(256)
    w.add_head_count(4)
    w.add_head_count_kv(4)
    w.add_context_length(2048)
    w.add_vocab_size(500)
    w.add_tensor("token_embd.weight", np.zeros((500, 128), dtype=np.float16))
    for il in range(2):
        w.add_tensor(f"blk.{il}.attn_norm.weight", np.zeros(128, dtype=np.float32))
        for part in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(f"blk.{il}.{part}.weight", np.zeros((128, 128), dtype=np.float16))
        w.add_tensor(f"blk.{il}.ffn_norm.weight", np.zeros(128, dtype=np.float32))
        for part in ("ffn_gate", "ffn_up"):
            w.add_tensor(f"blk.{il}.{part}.weight", np.zeros((256, 128), dtype=np.float16))
        w.add_tensor(f"blk.{il}.ffn_down.weight", np.zeros((128, 256), dtype=np.float16))
    w.add_tensor("output_norm.weight", np.zeros(128, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    data = blob_path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    (root / "blobs").mkdir(parents=True)
    blob_path.rename(root / "blobs" / f"sha256-{digest}")
    params = json.dumps({"num_ctx": 1024}).encode()
    params_digest = hashlib.sha256(params).hexdigest()
    (root / "blobs" / f"sha256-{params_digest}").write_bytes(params)
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": "sha256:00",
                           "size": 2},
                "layers": [{"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}",
                            "size": len(data)},
                           {"mediaType": "application/vnd.ollama.image.params", "digest": f"sha256:{params_digest}",
                            "size": len(params)}]}
    path = root / "manifests" / "registry.ollama.ai" / "library" / name / tag
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(manifest))
    return path


def test_store_resolves_a_name_to_its_gguf(tmp_path, monkeypatch):
    manifest = _store(tmp_path)
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path))
    assert manifest_path("tiny:q4") == manifest
    assert manifest_path("user/m") == tmp_path / "manifests" / "registry.ollama.ai" / "user" / "m" / "latest"
    assert manifest_path("hf.co/a/b:Q4_K_M") == tmp_path / "manifests" / "hf.co" / "a" / "b" / "Q4_K_M"
    found = resolve("tiny:q4")
    assert found.model_blob.name.startswith("sha256-") and found.params == {"num_ctx": 1024}
    spec, table, _ = load("tiny:q4")
    assert (spec.num_layers, spec.hidden_size, spec.vocab_size, spec.tie_word_embeddings) == (2, 128, 500, True)
    assert table.format == "gguf" and len(table.tensors) == 2 * 9 + 2
    with pytest.raises(OllamaModelNotFound):
        resolve("tiny:other")
    b = OLLAMA.plan(spec, custom_gpu(8 * 2**30), {"num_ctx": 1024}, (0, 6, 8), gguf_checkpoint=table)
    # tied: the output is token_embd's copy on the GPU (500 x 128 f16) with both layers and output_norm
    layer = 2 * 512 + 4 * 32768 + 3 * 65536
    assert b.figure("cuda0_model_buffer_mib") == round((2 * layer + 512 + 128000) / 2**20, 2)
    assert b.figure("kv_size_mib") == round(2 * 1024 * 128 * 2 * 2 / 2**20, 2)


def test_estimate_reproduces_the_t4_line():
    spec = case_spec(LLAMA31_8B)
    est = estimate(quantized_tensors(spec, "Q4_0"), shape_of(spec), [15720382464], 8192)
    case = next(c for c in bench._cases() if c["id"] == "llamacpp-ollama-llama31-8b-q4_0-t4-kaggle-8k-np4")
    logged = {k: v for k, v in parse(case["log"]).items() if k.startswith("ollama_") and "layers" not in k}
    ours = {k: v for k, v in parse(log_line(est)).items() if k in logged}
    assert ours == {k: v for k, v in logged.items() if k in ours} and len(ours) >= 9
    assert (est.layers_offload, est.layers_model) == (33, 33)


def test_partial_estimate_keeps_layers_off_a_small_gpu():
    spec = case_spec(LLAMA31_8B)
    est = estimate(quantized_tensors(spec, "Q4_0"), shape_of(spec), [3 * 2**30], 8192)
    assert 0 < est.layers_offload < 33 and est.required_full > est.required_partial


def test_log_parse_and_reconcile_t4():
    case = next(c for c in bench._cases() if c["id"] == "llamacpp-ollama-llama31-8b-q4_0-t4-kaggle-8k-np4")
    got = parse(case["log"])
    assert got["ollama_layers_offload"] == 33 and got["ollama_layers_model"] == 33 and got["ollama_parallel"] == 4
    assert got["ollama_runner_settings"] == {"n_ctx": 8192, "n_batch": 512, "embeddings": True, "n_gpu_layers": 33,
                                             "n_parallel": 4}
    diffs = {d.figure: d for d in reconcile(got)}
    assert diffs["graph"].delta_mib == 0.0  # memory.graph.full 560.0 = CUDA0 compute 560.00
    assert diffs["KV cache"].delta_mib == 0.0
    assert diffs["weights"].delta_mib == pytest.approx(4.7 * 1024 - 4156.0 - 281.81)  # the KV counted in
    assert diffs["required on GPU"].delta_mib == pytest.approx(6.2 * 1024 - (4156.0 + 1024.0 + 560.0))


def test_ollama_ps():
    text = ("NAME                ID              SIZE      PROCESSOR          UNTIL\n"
            "qwen2.5:7b          845dbda0ea48    6.0 GB    100% GPU           4 minutes from now\n"
            "llama3.1:70b        711a9e8463af    42 GB     48%/52% CPU/GPU    Forever\n")
    rows = parse_ps(text)
    assert [(r.name, r.size_bytes, r.gpu_percent, r.cpu_percent) for r in rows] == [
        ("qwen2.5:7b", 6_000_000_000, 100, 0), ("llama3.1:70b", 42_000_000_000, 52, 48)]
    assert rows[1].gpu_bytes == 21_840_000_000
    newer = parse_ps("NAME      ID      SIZE     PROCESSOR    CONTEXT    UNTIL\n"
                     "gemma3:4b a2af6cc 4.1 GB   100% CPU     8192       2 minutes from now\n")
    assert (newer[0].context, newer[0].gpu_percent, newer[0].cpu_percent) == (8192, 0, 100)
    with pytest.raises(ValueError):
        parse_ps("nothing here")


def test_defaults_by_version():
    assert releases.default_num_ctx((0, 3, 8), 16 * 2**30) == 2048
    assert releases.default_num_ctx((0, 6, 8), 16 * 2**30) == 4096
    assert releases.default_num_ctx((0, 32, 13), 80 * 2**30) == 262144
    assert releases.default_num_parallel((0, 3, 8)) == 4 and releases.default_num_parallel((0, 6, 8)) == 1
    assert releases.rule("llamacpp_build", (0, 3, 8)) == 3600
    assert OLLAMA.releases.resolve("v0.6.8") == (0, 6, 8)


def test_t4_case_end_to_end_through_the_engine():
    spec = case_spec(LLAMA31_8B)
    run = OLLAMA.decide(spec, custom_gpu(15 * 2**30), {"gguf_type": "Q4_0", "gpu_free_mib": [14992]}, (0, 3, 8))
    assert (run.num_ctx, run.num_parallel) == (2048, 4)
    assert run.llamacpp_settings["n_ctx"] == 8192 and run.llamacpp_settings["n_gpu_layers"] == 33
    assert run.layout.kv_by_device == {"CUDA0": 2**30}


def test_modelfile_parameters_and_projector_from_the_store(tmp_path, monkeypatch):
    import importlib.util

    from vram_detective.engines.ollama import engine as ollama_engine

    manifest = _store(tmp_path)  # its params layer says num_ctx 1024
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path))
    ollama_engine._stored.cache_clear()
    spec, table = OLLAMA.resolve_model("tiny:q4")
    assert ollama_engine.stored_defaults(table) == {"num_ctx": 1024}
    gpu = custom_gpu(8 * 2**30)
    run = ollama_engine.decide(spec, gpu, {"num_parallel": 1}, (0, 6, 8), table)
    assert run.num_ctx == 1024 and run.layout.kv.cells == 1024  # the Modelfile's num_ctx, not the version's default
    assert ollama_engine.decide(spec, gpu, {"num_parallel": 1, "num_ctx": 2048}, (0, 6, 8), table).num_ctx == 2048
    # a vision model's manifest names a projector blob: the runner gets it as --mmproj
    helper = importlib.util.spec_from_file_location("tiny_gguf", Path(__file__).parents[1] / "benchmarks" / "llamacpp_tiny_gguf.py")
    tiny = importlib.util.module_from_spec(helper)
    helper.loader.exec_module(tiny)
    proj = tiny.write_mmproj(tmp_path / "proj.gguf")
    digest = hashlib.sha256(proj.read_bytes()).hexdigest()
    proj.rename(tmp_path / "blobs" / f"sha256-{digest}")
    data = json.loads(manifest.read_text())
    data["layers"].append({"mediaType": "application/vnd.ollama.image.projector", "digest": f"sha256:{digest}"})
    manifest.write_text(json.dumps(data))
    ollama_engine._stored.cache_clear()
    spec, table = OLLAMA.resolve_model("tiny:q4")
    with_proj = ollama_engine.decide(spec, gpu, {"num_parallel": 1}, (0, 6, 8), table)
    assert with_proj.layout.projector.device == "CUDA0" and with_proj.layout.projector.stored == 2924032
    assert with_proj.layout.vram("CUDA0") - run.layout.vram("CUDA0") == 2927872 + 2372624
    ollama_engine._stored.cache_clear()
