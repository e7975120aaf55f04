"""Property tests (hypothesis, bounded examples): random bytes through the safetensors and GGUF header
readers, and mutated real log lines (groundtruth/dev.jsonl) through the log parser. Only the project's own
errors may escape (ValueError / LookupError subclasses defined in vram_detective)."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from vram_detective.engines.vllm.logs.reader import parse_text  # noqa: E402
from vram_detective.model.gguf_source import GGUFError, NeedMoreBytes, gguf_config, parse_prefix  # noqa: E402
from vram_detective.model.spec import ConfigError  # noqa: E402
from vram_detective.model.safetensors_headers import HeaderError, header_length, parse_header  # noqa: E402

BOUNDED = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LINES = sorted({line for case in map(json.loads, (Path(__file__).resolve().parents[1] / "groundtruth" / "dev.jsonl")
                                      .read_text().splitlines())
                for line in (case.get("log") or "").splitlines() if line.strip()})


def _ours(error: BaseException) -> bool:
    return type(error).__module__.startswith("vram_detective.") and isinstance(error, (ValueError, LookupError))


@BOUNDED
@given(st.binary(max_size=512))
def test_random_bytes_through_the_safetensors_reader(data):
    try:
        length = header_length(data[:8], "x", len(data))
        parse_header(data[8:8 + length], "x", len(data))
    except HeaderError:
        pass


@BOUNDED
@given(st.dictionaries(st.text(max_size=8), st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12),
    max_size=4))
def test_random_json_through_the_safetensors_reader(header):
    blob = json.dumps(header).encode()
    try:
        parse_header(blob, "x", 8 + len(blob) + 64)
    except HeaderError:
        pass


def _gguf_prefix(kv: int, tensors: int) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, tensors, kv)


@BOUNDED
@given(st.integers(0, 4), st.integers(0, 4), st.binary(max_size=400))
def test_random_bytes_through_the_gguf_reader(kv, tensors, rest):
    data = _gguf_prefix(kv, tensors) + rest
    try:
        header = parse_prefix(data, "x.gguf", len(data))
        gguf_config(header.metadata, header.tensors, "x.gguf")
    except (GGUFError, ConfigError):
        pass
    except NeedMoreBytes:  # only without a file size
        raise AssertionError("asked for more bytes than the file holds")


@BOUNDED
@given(st.sampled_from(LINES), st.integers(0, 10_000), st.sampled_from(["9" * 30, "-", ".", "nan", "1e999", " ", "",
                                                                          "\x1b[31m", "(", "GiB", "\u2588", "'", "{"]),
       st.integers(0, 3))
def test_mutated_real_log_lines_through_the_parser(line, where, insert, repeat):
    where %= len(line) + 1
    mutated = line[:where] + insert * (1 + repeat * 50) + line[where:]
    try:
        parsed = parse_text(line + "\n" + mutated)
        for run in parsed.runs:
            run.observed()
    except Exception as error:  # noqa: BLE001 - the property: only our own errors
        assert _ours(error), f"{type(error).__name__}: {error}"
