"""Local checkpoints: config.json + safetensors headers (never the data), the checkpoint table and its
reconciliation with the synthesized vLLM layout, header errors, side-car quantization files."""
from __future__ import annotations

import json
import struct

import pytest

from vram_detective import api
from vram_detective.engines.vllm.weights import checkpoint_vs_gpu
from vram_detective.model.checkpoint import CheckpointTable, CheckpointTensor, reconcile, vllm_key
from vram_detective.model.config import parse_config
from vram_detective.model.spec import ConfigError
from vram_detective.engines.vllm.weights import build_inventory
from vram_detective.model.safetensors_headers import (
    MAX_HEADER_BYTES, InvalidHeaderError, OversizedHeaderError, TruncatedHeaderError, UnknownDtypeError, parse_header,
    read_header,
)
from vram_detective.model.sources import UnknownModelError, load_model

from test_sources_server import TINY_LLAMA, llama_tensors, write_sharded, write_sparse_safetensors


@pytest.fixture(autouse=True)
def _fresh_api_cache():
    api.model_source.cache_clear()
    api.model_spec.cache_clear()
    yield


def test_local_directory_reads_every_shard_header(tmp_path):
    pytest.importorskip("safetensors")
    tensors = llama_tensors(TINY_LLAMA, inv_freq=True)
    write_sharded(tmp_path / "m", TINY_LLAMA, tensors, shards=3)
    source = load_model(str(tmp_path / "m"))
    table = source.checkpoint
    assert source.origin == "local" and table.format == "safetensors" and len(table.files) == 3
    assert {t.name for t in table.tensors} == set(tensors)
    for tensor in table.tensors:
        assert (tensor.dtype, tensor.shape) == (tensors[tensor.name][0], tuple(tensors[tensor.name][1]))
    spec = parse_config(source.config, "tiny")
    report = checkpoint_vs_gpu(table, spec)
    by_status = {}
    for row in report.rows:
        by_status.setdefault(row.status, []).append(row.key)
    assert set(by_status) == {"match", "dropped", "added"}
    assert "model.layers.*.self_attn.qkv_proj.weight" in by_status["match"]
    assert "model.layers.*.mlp.gate_up_proj.weight" in by_status["match"]
    # vocab 200 is padded to 256 rows on the GPU, for the embedding and the lm_head
    padding = [row for row in report.added if row.role == "vocab padding"]
    assert sum(row.gpu_bytes for row in padding) == 2 * 56 * 64 * 2
    assert report.by_role["attention"][0] == report.by_role["attention"][1]
    stored = table.total_bytes - sum(row.checkpoint_bytes for row in report.dropped)
    assert report.gpu_bytes - sum(row.gpu_bytes for row in report.added) == stored
    assert report.to_dict()["matched_bytes"] == stored
    assert report.summary_lines()[0].startswith("checkpoint ")


def test_a_cast_and_a_config_mismatch_are_told_apart(tmp_path):
    tensors = llama_tensors(TINY_LLAMA, dtype="float32")
    tensors["model.layers.0.mlp.down_proj.weight"] = ("float32", (64, 100))  # the config says 128 inputs
    del tensors["model.layers.1.mlp.down_proj.weight"], tensors["model.layers.2.mlp.down_proj.weight"]
    table = CheckpointTable("safetensors", tuple(CheckpointTensor(n, tuple(s), d, _bytes(d, s)) for n, (d, s) in tensors.items()),
                            ("x",), 0)
    spec = parse_config(TINY_LLAMA, "tiny")
    report = reconcile(table, build_inventory(spec, "bfloat16"), spec.tie_word_embeddings)
    rows = {row.key: row for row in report.rows}
    assert rows["model.layers.*.self_attn.qkv_proj.weight"].status == "cast"
    assert rows["model.layers.*.self_attn.qkv_proj.weight"].note == "stored float32, loaded as bfloat16"
    assert rows["model.layers.*.mlp.down_proj.weight"].status == "mismatch"
    assert report.mismatches


def _bytes(dtype: str, shape) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count * {"float32": 4, "bfloat16": 2, "float16": 2, "int32": 4}[dtype]


def test_vllm_key_names():
    assert vllm_key("model.layers.7.self_attn.k_proj.bias") == ("model.layers.*.self_attn.qkv_proj.bias", "attention")
    assert vllm_key("model.layers.7.mlp.up_proj.qweight") == ("model.layers.*.mlp.gate_up_proj.qweight", "mlp")
    assert vllm_key("model.layers.7.mlp.up_proj.scales")[1] == "quantization metadata"
    assert vllm_key("model.layers.0.block_sparse_moe.experts.3.w3.weight") == ("model.layers.*.mlp.experts.w13_weight", "expert")
    assert vllm_key("model.layers.0.block_sparse_moe.gate.weight") == ("model.layers.*.mlp.gate.weight", "router")
    assert vllm_key("model.layers.3.pre_feedforward_layernorm.weight") == ("model.layers.*.*_layernorm.weight", "norm")
    assert vllm_key("language_model.model.embed_tokens.weight") == ("model.embed_tokens.weight", "embedding")
    assert vllm_key("visual.blocks.0.attn.qkv.weight")[1] == "vision"


def test_catalog_sized_sparse_checkpoint_is_read_instantly(tmp_path):
    catalog = load_model("Qwen/Qwen2.5-7B-Instruct")
    directory = tmp_path / "qwen7b"
    write_sharded(directory, catalog.config, llama_tensors(catalog.config), shards=4, sparse=True)
    table = load_model(str(directory)).checkpoint
    assert table.total_bytes > 14 * 2**30  # a 15 GB checkpoint whose data region is a hole on disk
    assert table.header_bytes < 64 * 1024
    assert api.explain(str(directory), "H100").weights_bytes == api.explain("Qwen/Qwen2.5-7B-Instruct", "H100").weights_bytes


def _file(tmp_path, prefix: bytes, body: bytes = b""):
    path = tmp_path / "x.safetensors"
    path.write_bytes(prefix + body)
    return path


def test_header_errors_are_one_line_each(tmp_path):
    with pytest.raises(OversizedHeaderError, match="over the 16,777,216-byte limit"):
        read_header(_file(tmp_path, struct.pack("<Q", MAX_HEADER_BYTES + 1)))
    with pytest.raises(TruncatedHeaderError, match="the length prefix alone is 8"):
        read_header(_file(tmp_path, b"\x01\x02"))
    with pytest.raises(TruncatedHeaderError, match="claims 1,000 bytes"):
        read_header(_file(tmp_path, struct.pack("<Q", 1000), b"{}"))
    with pytest.raises(InvalidHeaderError, match="not valid JSON"):
        read_header(_file(tmp_path, struct.pack("<Q", 4), b"{x:1"))
    blob = json.dumps({"w": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]}}).encode()
    with pytest.raises(TruncatedHeaderError, match="tensors end at byte"):
        read_header(_file(tmp_path, struct.pack("<Q", len(blob)), blob + b"\0" * 4))
    blob = json.dumps({"w": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 6]}}).encode()
    with pytest.raises(InvalidHeaderError, match="needs 8 bytes"):
        parse_header(blob, "x")
    blob = json.dumps({"w": {"dtype": "F7", "shape": [4], "data_offsets": [0, 4]}}).encode()
    with pytest.raises(UnknownDtypeError, match="dtype 'F7'"):
        parse_header(blob, "x")
    for error in (OversizedHeaderError, TruncatedHeaderError, InvalidHeaderError, UnknownDtypeError):
        assert issubclass(error, ValueError)


def test_cli_maps_a_bad_header_to_exit_2(tmp_path, capsys):
    from vram_detective.cli import main

    directory = tmp_path / "bad"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(TINY_LLAMA))
    (directory / "model.safetensors").write_bytes(struct.pack("<Q", 1 << 50))
    assert main(["explain", str(directory), "--gpu", "4090"]) == 2
    err = capsys.readouterr().err.strip()
    assert "header claims" in err and "\n" not in err


def test_side_car_quantization_files(tmp_path):
    config = dict(TINY_LLAMA, torch_dtype="float16")
    directory = tmp_path / "gptq"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(config))
    (directory / "quantize_config.json").write_text(json.dumps({"bits": 4, "group_size": 32, "desc_act": False, "sym": True}))
    spec = api.model_spec(str(directory))
    assert spec.quantization is not None and spec.quantization.method == "gptq" and spec.quantization.bits == 4
    awq = tmp_path / "awq"
    awq.mkdir()
    (awq / "config.json").write_text(json.dumps(config))
    (awq / "quant_config.json").write_text(json.dumps({"w_bit": 4, "q_group_size": 32, "zero_point": True}))
    assert api.model_spec(str(awq)).quantization.method == "awq"


def test_unsupported_architecture_still_reports_the_weights(tmp_path):
    pytest.importorskip("safetensors")
    config = dict(TINY_LLAMA, architectures=["MambaForCausalLM"], model_type="mamba")
    write_sharded(tmp_path / "mamba", config, llama_tensors(TINY_LLAMA), shards=1)
    with pytest.raises(ConfigError) as error:
        api.model_spec(str(tmp_path / "mamba"))
    assert "GiB of weights" in str(error.value) and "'MambaForCausalLM'" in str(error.value)
    missing = dict(TINY_LLAMA)
    del missing["hidden_size"]
    (tmp_path / "nohidden").mkdir()
    (tmp_path / "nohidden" / "config.json").write_text(json.dumps(missing))
    with pytest.raises(ConfigError, match="hidden_size"):
        api.model_spec(str(tmp_path / "nohidden"))


def test_resolution_order_and_forced_sources(tmp_path):
    write_sharded(tmp_path / "m", TINY_LLAMA, {"model.norm.weight": ("float32", (64,))}, shards=1, sparse=True)
    assert load_model(str(tmp_path / "m")).origin == "local"
    assert load_model("Qwen/Qwen3-8B").origin == "catalog"
    with pytest.raises(UnknownModelError, match="no such local"):
        load_model("Qwen/Qwen3-8B", source="local")
    with pytest.raises(UnknownModelError, match="not in the built-in catalog"):
        load_model(str(tmp_path / "nothing-here"), source="catalog")
    with pytest.raises(UnknownModelError, match="has no config.json"):
        (tmp_path / "empty").mkdir()
        load_model(str(tmp_path / "empty"))


def test_sparse_writer_matches_the_safetensors_reader(tmp_path):
    safetensors = pytest.importorskip("safetensors")
    path = write_sparse_safetensors(tmp_path / "s.safetensors", {"a": ("bfloat16", (3, 5)), "b": ("int32", (2,))})
    with safetensors.safe_open(str(path), framework="numpy") as handle:
        assert sorted(handle.keys()) == ["a", "b"]
    header = read_header(path)
    assert {t.name: (t.stored_dtype, t.shape) for t in header.tensors} == {"a": ("BF16", (3, 5)), "b": ("I32", (2,))}


def test_explain_shows_checkpoint_vs_gpu_for_a_local_checkpoint(tmp_path, capsys):
    """explain on a directory with real safetensors headers reports where the file and the GPU differ:
    the stored rotary inv_freq is dropped, vocabulary padding and vLLM's own rotary cache are added."""
    pytest.importorskip("safetensors")
    from vram_detective.cli import main

    write_sharded(tmp_path / "m", TINY_LLAMA, llama_tensors(TINY_LLAMA, inv_freq=True), shards=2)
    assert main(["explain", str(tmp_path / "m"), "--gpu", "4090", "--max-model-len", "256", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    report = out["checkpoint_vs_gpu"]
    statuses = {row["status"] for row in report["rows"]}
    assert {"match", "dropped", "added"} <= statuses
    assert any("inv_freq" in row["key"] for row in report["rows"] if row["status"] == "dropped")
    assert main(["explain", str(tmp_path / "m"), "--gpu", "4090", "--max-model-len", "256"]) == 0
    assert "Checkpoint (its real tensor headers) vs what vLLM holds on one GPU:" in capsys.readouterr().out
