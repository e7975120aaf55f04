"""GGUF files written by the gguf package: metadata -> config, the tensor table with GGML block sizes, the
gguf reader and the prefix parser agreeing, split files, and the bytes vLLM keeps on the GPU."""
from __future__ import annotations

import pytest

gguf = pytest.importorskip("gguf")
pytest.importorskip("numpy")

from vram_detective import api  # noqa: E402
from vram_detective.engines.vllm.weights import checkpoint_vs_gpu  # noqa: E402
from vram_detective.model.checkpoint import gguf_weight_bytes  # noqa: E402
from vram_detective.model.config import parse_config  # noqa: E402
from vram_detective.model.spec import UnsupportedArchitectureError
from vram_detective.model.gguf_source import (  # noqa: E402
    GGML_TYPES, AmbiguousGGUFError, GGUFError, NeedMoreBytes, _read_prefix_from_file, gguf_config, parse_prefix,
    read_local, tensor_bytes,
)
from vram_detective.model.sources import load_model  # noqa: E402

from test_sources_server import GGUF_TINY, write_gguf  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_api_cache():
    api.model_source.cache_clear()
    api.model_spec.cache_clear()
    yield


def test_block_sizes_match_the_gguf_package():
    for type_id, (name, block, size) in GGML_TYPES.items():
        qtype = gguf.GGMLQuantizationType(type_id)
        assert qtype.name == name
        if name != "Q8_1":  # gguf-py's table keeps the old f32 d/s layout (4 + 4 + 32); ggml's is below
            assert gguf.GGML_QUANT_SIZES[qtype] == (block, size), name
    expected = {"Q4_0": (32, 18), "Q4_K": (256, 144), "Q5_K": (256, 176), "Q6_K": (256, 210), "Q8_0": (32, 34),
                "F16": (1, 2), "BF16": (1, 2), "F32": (1, 4)}
    assert {name: (block, size) for name, block, size in GGML_TYPES.values() if name in expected} == expected


def test_q8_1_block_is_two_halves_and_32_int8():
    # ggml-common.h: block_q8_1 = {ggml_half d, ggml_half s; int8_t qs[32]}, static_assert(... == 2*2 + 32);
    # gguf-py still says (32, 40) (vendored llama.cpp b6150 gguf-py/gguf/constants.py), so the reader must not
    # take the package's table for it
    assert GGML_TYPES[9] == ("Q8_1", 32, 36)
    assert tensor_bytes(9, 64 * 32, "blk.0.x.weight", "t.gguf") == ("Q8_1", 64 * 36)
    assert gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.Q8_1] == (32, 40)  # the package's stale figure


def test_tensor_table_from_both_readers(tmp_path):
    path = write_gguf(tmp_path / "tiny-Q4_K_M.gguf", tokens=5000)[0]
    by_package = read_local(path)
    by_prefix = _read_prefix_from_file(path)
    assert by_package.tensors == by_prefix.tensors
    assert by_package.header_bytes == by_prefix.header_bytes
    assert by_package.metadata["llama.block_count"] == by_prefix.metadata["llama.block_count"] == 2
    assert by_prefix.metadata["tokenizer.ggml.tokens"] == by_package.metadata["tokenizer.ggml.tokens"] == 5000
    reader = gguf.GGUFReader(str(path))
    assert {t.name: int(t.n_bytes) for t in reader.tensors} == {t.name: t.nbytes for t in by_package.tensors}
    types = {t.name: t.dtype for t in by_package.tensors}
    assert types["blk.0.attn_q.weight"] == "Q4_K" and types["blk.0.attn_k.weight"] == "Q4_0"
    assert types["blk.0.attn_v.weight"] == "Q8_0" and types["blk.0.attn_output.weight"] == "Q5_K"
    assert types["token_embd.weight"] == "Q6_K" and types["blk.0.attn_norm.weight"] == "F32"
    q = next(t for t in by_package.tensors if t.name == "blk.0.attn_q.weight")
    assert q.shape == (256, 256) and q.nbytes == 256 * 256 // 256 * 144
    assert path.stat().st_size > by_package.header_bytes  # the data was never needed


def test_prefix_parser_asks_for_more_bytes(tmp_path):
    path = write_gguf(tmp_path / "t.gguf", tokens=2000)[0]
    data = path.read_bytes()
    with pytest.raises(NeedMoreBytes) as more:
        parse_prefix(data[:1000], "t.gguf")
    assert more.value.needed > 1000
    with pytest.raises(GGUFError, match="bad magic"):
        parse_prefix(b"GGUX" + data[4:], "t.gguf")


def test_config_from_metadata_sizes_the_model(tmp_path):
    source = load_model(str(write_gguf(tmp_path / "m.gguf")[0]))
    assert source.origin == "gguf" and source.checkpoint.format == "gguf"
    config = source.config
    assert config["architectures"] == ["LlamaForCausalLM"] and config["tie_word_embeddings"] is False
    spec = parse_config(config, "m")
    assert (spec.hidden_size, spec.num_layers, spec.num_kv_heads, spec.intermediate_size, spec.vocab_size) == (
        GGUF_TINY["hidden"], GGUF_TINY["layers"], GGUF_TINY["kv_heads"], GGUF_TINY["intermediate"], GGUF_TINY["vocab"])
    assert spec.max_position_embeddings == GGUF_TINY["context"]
    tied = load_model(str(write_gguf(tmp_path / "tied.gguf", tied=True)[0]))
    assert tied.config["tie_word_embeddings"] is True
    assert api.explain(str(tmp_path / "m.gguf"), "RTX 4090").weights_bytes > 0


def test_gguf_weights_stay_in_their_blocks(tmp_path):
    source = load_model(str(write_gguf(tmp_path / "m.gguf")[0]))
    table = source.checkpoint
    by_role = gguf_weight_bytes(table, "float16")
    t = GGUF_TINY
    head = t["hidden"] // t["heads"]
    attention = t["layers"] * (t["heads"] * head * t["hidden"] // 256 * 144 + t["kv_heads"] * head * t["hidden"] // 32 * 18
                               + t["kv_heads"] * head * t["hidden"] // 32 * 34 + t["hidden"] * t["heads"] * head // 256 * 176)
    assert by_role["attention"] == attention
    assert by_role["embedding"] == t["vocab"] * t["hidden"] // 256 * 210
    assert by_role["norm"] == (2 * t["layers"] + 1) * t["hidden"] * 2  # F32 in the file, float16 on the GPU
    spec = parse_config(source.config, "m")
    report = checkpoint_vs_gpu(table, spec, "float16")
    statuses = {row.key: row.status for row in report.rows}
    assert statuses["model.embed_tokens.weight"] == "gguf"
    assert statuses["model.layers.*.self_attn.qkv_proj.weight"] == "gguf"
    assert statuses["model.layers.*.*_layernorm.weight"] == "cast"
    assert report.by_role["attention"] == (attention, attention)
    assert not any(row.role == "vocab padding" and row.key.startswith("model.embed_tokens") for row in report.rows)


def test_split_files_and_choosing_one(tmp_path):
    directory = tmp_path / "split"
    directory.mkdir()
    parts = write_gguf(directory / "tiny-Q4_K_M.gguf", split_max_tensors=8)
    assert len(parts) > 1
    source = load_model(str(directory))
    assert len(source.checkpoint.files) == len(parts)
    single = load_model(str(write_gguf(tmp_path / "single.gguf")[0]))
    assert sorted(t.name for t in source.checkpoint.tensors) == sorted(t.name for t in single.checkpoint.tensors)
    assert source.config == single.config
    write_gguf(directory / "tiny-Q8_0.gguf")
    with pytest.raises(AmbiguousGGUFError, match="--gguf-file"):
        load_model(str(directory))
    assert load_model(str(directory), gguf_file="tiny-Q8_0.gguf").checkpoint.files[0].endswith("tiny-Q8_0.gguf")
    assert len(load_model(str(directory), gguf_file=parts[0].name).checkpoint.files) == len(parts)


def test_unknown_architecture_and_missing_fields(tmp_path):
    header = read_local(write_gguf(tmp_path / "m.gguf")[0])
    metadata = dict(header.metadata, **{"general.architecture": "rwkv6"})
    with pytest.raises(UnsupportedArchitectureError, match="'rwkv6' is not sized yet"):
        gguf_config(metadata, header.tensors, "m.gguf")
    metadata = {k: v for k, v in header.metadata.items() if k != "llama.embedding_length"}
    with pytest.raises(ValueError, match="lacks llama.embedding_length"):
        gguf_config(metadata, header.tensors, "m.gguf")


def test_explain_sizes_a_gguf_file_from_its_blocks(tmp_path):
    """End to end: the weights figure of a GGUF model is the file's block bytes (norms cast to the model
    dtype) plus vLLM's own rotary cache - not the 16-bit size of its parameters."""
    from vram_detective import explain

    path = write_gguf(tmp_path / "m.gguf")[0]
    source = load_model(str(path))
    stored = sum(gguf_weight_bytes(source.checkpoint, "float16").values())
    b = explain(str(path), gpu_memory=24 * 2**30, dtype="float16", vllm_version="0.8.5", max_model_len=512)
    rotary = b.components.find("weights.rotary_cache").bytes
    assert b.weights_bytes == stored + rotary
    assert any(step.key == "gguf_blocks" and step.bytes < 0 for step in b.weights_explained)
