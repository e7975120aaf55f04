"""Hostile and clumsy inputs (issue 17): each is written here for real, and each must end in the project's
own one-line error (a ValueError / LookupError subclass: exit 2 in the CLI), in bounded time and memory,
without reading anything it was not given. benchmarks/hostile.py times the same inputs."""
from __future__ import annotations

import io
import json
import os
import struct
import tracemalloc
from pathlib import Path

import pytest

from vram_detective.forensics.nvidia_smi import SmiValueError, parse_file as parse_smi_file, parse_nvidia_smi
from vram_detective.forensics.observed import build_observed
from vram_detective.engines.vllm.logs.reader import MAX_LINE_CHARS, LogParser, parse_stream, parse_text
from vram_detective.model.config import parse_config
from vram_detective.model.spec import ConfigError
from vram_detective.model.gguf_source import GGUFError, gguf_config, parse_prefix, read_local
from vram_detective.model.safetensors_headers import HeaderError, read_header
from vram_detective.model.sources import (MAX_CONFIG_BYTES, MalformedConfigError, UnknownModelError,
                                          UnsafeShardPathError, load_model)
from vram_detective.units import NotARegularFileError

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000,
         "max_position_embeddings": 2048, "torch_dtype": "bfloat16"}


# --- GGUF ----------------------------------------------------------------------------------------------------

def _gguf(kv: list[bytes], tensors: list[bytes] = (), version: int = 3) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kv)) + b"".join(kv) + b"".join(tensors)


def _s(text: str) -> bytes:
    return struct.pack("<Q", len(text.encode())) + text.encode()


def _kv_str(key: str, value: str) -> bytes:
    return _s(key) + struct.pack("<I", 8) + _s(value)


def _kv_u32(key: str, value: int) -> bytes:
    return _s(key) + struct.pack("<II", 4, value)


@pytest.mark.parametrize("count", [50_000_000 - 1, 2 ** 40])
def test_a_300_byte_gguf_claiming_millions_of_tokens_fails_at_once(tmp_path, count):
    claim = _s("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, count) + _s("a") * 8
    data = _gguf([_kv_str("general.architecture", "llama"), claim])
    data += b"\0" * (300 - len(data))
    path = tmp_path / "tokens.gguf"
    path.write_bytes(data)
    tracemalloc.start()
    try:
        with pytest.raises(GGUFError, match="claims|items"):
            read_local(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20


def test_gguf_nested_arrays_and_zero_dimension_tensors_are_refused():
    nested = _s("x") + struct.pack("<IIQ", 9, 9, 1) + struct.pack("<IQ", 9, 1) * 3 + struct.pack("<IQ", 4, 0)
    with pytest.raises(GGUFError, match="nested"):
        parse_prefix(_gguf([nested]) + b"\0" * 64, "nested.gguf")
    tensor = _s("token_embd.weight") + struct.pack("<I", 0) + struct.pack("<IQ", 0, 0)
    with pytest.raises(GGUFError, match="0 dimensions"):
        parse_prefix(_gguf([_kv_str("general.architecture", "llama")], [tensor]) + b"\0" * 64, "zero.gguf")


def _metadata(**extra):
    meta = {"general.architecture": "llama", "llama.block_count": 2, "llama.embedding_length": 256,
            "llama.attention.head_count": 4, "llama.feed_forward_length": 512, "llama.vocab_size": 1000}
    meta.update(extra)
    return meta


@pytest.mark.parametrize("change, words", [
    ({"llama.attention.head_count": 0}, "head_count is 0"),
    ({"llama.block_count": 2 ** 32 - 1}, "block_count is 4294967295"),
    ({"general.architecture": ["llama"]}, "architecture"),
    ({"llama.embedding_length": float("inf")}, "embedding_length"),
    ({"llama.attention.head_count_kv": ["x"]}, "non-numbers"),
])
def test_gguf_metadata_of_the_wrong_type_or_size_is_a_config_error(change, words):
    with pytest.raises(ConfigError, match=words):
        gguf_config(_metadata(**change), (), "bad.gguf")


# --- config.json, index, headers ----------------------------------------------------------------------------

@pytest.mark.parametrize("change, words", [
    ({"num_hidden_layers": float("inf")}, "num_hidden_layers"),
    ({"num_hidden_layers": 10 ** 400}, "num_layers = 10000.*characters"),
    ({"dtype": ["BF16"], "torch_dtype": None}, "dtype"),
    ({"hidden_size": "4096"}, "hidden_size"),
    ({"num_attention_heads": 0}, "num_attention_heads"),
    ({"num_hidden_layers": 2 ** 32 - 1}, "num_layers"),
    ({"rope_scaling": {"rope_type": "linear", "factor": {"x": 1}}}, "cannot read"),
])
def test_config_values_of_the_wrong_type_or_size_are_config_errors(change, words):
    with pytest.raises(ConfigError, match=words):
        parse_config({**LLAMA, **change}, "bad")


def _model_dir(tmp_path: Path, config: str | None = None) -> Path:
    directory = tmp_path / "model"
    directory.mkdir()
    (directory / "config.json").write_text(config if config is not None else json.dumps(LLAMA))
    return directory


def test_deeply_nested_or_huge_config_json_is_one_line(tmp_path):
    deep = _model_dir(tmp_path, '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(MalformedConfigError, match="nested"):
        load_model(str(deep))
    big = tmp_path / "big"
    big.mkdir()
    (big / "config.json").write_text('{"pad": "' + "x" * (MAX_CONFIG_BYTES + 10) + '"}')
    with pytest.raises(MalformedConfigError, match="limit"):
        load_model(str(big))


@pytest.mark.parametrize("weight_map", ["/etc/passwd", "../other/model.safetensors", "link.safetensors", "list"])
def test_index_shards_must_stay_in_the_model_directory(tmp_path, weight_map):
    directory = _model_dir(tmp_path)
    outside = tmp_path / "other"
    outside.mkdir()
    (outside / "model.safetensors").write_bytes(struct.pack("<Q", 2) + b"{}")
    (directory / "link.safetensors").symlink_to(outside / "model.safetensors")
    mapping = ["a.weight"] if weight_map == "list" else {"a.weight": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps({"weight_map": mapping}))
    with pytest.raises(MalformedConfigError) as error:
        load_model(str(directory))
    assert "\n" not in str(error.value)
    if weight_map != "list":
        assert isinstance(error.value, UnsafeShardPathError)


def test_home_of_an_unknown_user_is_no_crash():
    with pytest.raises(UnknownModelError):
        load_model("~nouser-vram-detective/x", source="local")


def test_fifos_are_refused_not_waited_on(tmp_path):
    directory = _model_dir(tmp_path)
    os.mkfifo(directory / "model.safetensors")
    with pytest.raises(NotARegularFileError, match="FIFO"):
        load_model(str(directory))
    os.mkfifo(tmp_path / "m.gguf")
    with pytest.raises(NotARegularFileError, match="FIFO"):
        read_local(tmp_path / "m.gguf")
    os.mkfifo(tmp_path / "smi.txt")
    with pytest.raises(NotARegularFileError, match="FIFO"):
        parse_smi_file(str(tmp_path / "smi.txt"))
    with pytest.raises(NotARegularFileError):
        read_header(tmp_path)  # a directory


@pytest.mark.parametrize("header", [
    {"w": {"dtype": ["BF16"], "shape": [1], "data_offsets": [0, 2]}},
    {"w": {"dtype": "BF16", "shape": [1.5], "data_offsets": [0, 2]}},
    {"w": {"dtype": "BF16", "shape": [10 ** 400], "data_offsets": [0, 2]}},
])
def test_safetensors_header_of_the_wrong_types(tmp_path, header):
    blob = json.dumps(header).encode()
    path = tmp_path / "x.safetensors"
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + b"\0" * 2)
    with pytest.raises(HeaderError):
        read_header(path)


def test_safetensors_header_nested_too_deep(tmp_path):
    blob = ("[" * 50_000 + "]" * 50_000).encode()
    path = tmp_path / "deep.safetensors"
    path.write_bytes(struct.pack("<Q", len(blob)) + blob)
    with pytest.raises(HeaderError, match="nested|not a JSON object"):
        read_header(path)


# --- logs and nvidia-smi -------------------------------------------------------------------------------------

def test_a_line_of_40000_digits_is_no_figure_and_is_cut_to_the_cap():
    line = "1" * 40_000 + " GiB for weight, x GiB for peak activation"
    parsed = parse_text("Loading model weights took 5.2 GB\n" + line)
    assert parsed.first.observed() == {"weights_gib": 5.2}  # the absurd number is not read; the rest stays
    parser = LogParser()
    parser.feed("x" * (MAX_LINE_CHARS + 5))
    assert parser.truncated_lines == 1 and MAX_LINE_CHARS == 64 * 1024


def test_numbers_have_bounded_lengths_and_runs_start_at_their_first_digit():
    from vram_detective.engines.vllm.logs import reader as parser

    for pattern, handler in ((p.regex, p.name) for p in parser.PATTERNS):
        assert r"(\d+)" not in pattern.pattern, handler
    assert parse_text("# GPU blocks: " + "9" * 5000).runs[0].figures == []
    assert parse_text("x 12.5 GiB for peak activation").first.observed() == {"activation_peak_gib": 12.5}


def test_nvidia_smi_negative_and_more_used_than_total_are_refused():
    table = "| N/A   34C    P0    61W / 300W |  {used}MiB / {total}MiB |      0%      Default |\n"
    with pytest.raises(SmiValueError, match="negative"):
        parse_nvidia_smi("NVIDIA-SMI 535\n" + table.format(used=-10240, total=81920))
    with pytest.raises(SmiValueError, match="more than it has"):
        parse_nvidia_smi("NVIDIA-SMI 535\n" + table.format(used=90000, total=81920))
    with pytest.raises(SmiValueError, match="negative"):
        parse_nvidia_smi("index, name, memory.used [MiB], memory.total [MiB]\n0, H100, -10240 MiB, 81920 MiB\n")
    assert parse_nvidia_smi("NVIDIA-SMI 535\n" + table.format(used=10240, total=81920)).gpus[0].used_mib == 10240


def test_a_log_with_an_impossible_smi_reading_keeps_its_other_figures():
    log = "Loading model weights took 5.2 GB\n|  -10240MiB / 81920MiB |\n"
    assert parse_stream(io.BytesIO(log.encode())).first.observed() == {"weights_gib": 5.2}


def test_observed_nan_is_a_clear_message():
    with pytest.raises(ValueError, match="weights_gib.*not a finite size"):
        build_observed({"weights_gib": float("nan")})
