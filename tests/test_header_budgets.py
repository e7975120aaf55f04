"""Issue 31: header-parsing budgets. Each hostile file is written here for real (small: a claim, or a few MB of
minimal items) and must be refused with one line - ValueError subclasses, exit 2 in the CLI - before it costs
seconds or hundreds of MiB; real-sized headers (a 262k-token tokenizer with merges) still parse; a Hub fetch's
parsing runs under its deadline; a repository's headers in all are bounded before they are fetched."""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from vram_detective.model import gguf_source
from vram_detective.model.gguf_source import GGUFError, parse_prefix, read_local
from vram_detective.model.safetensors_headers import (MAX_HEADER_BYTES, MAX_HEADER_TENSORS, OversizedHeaderError,
                                                      parse_header, read_header)

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _s(text: str) -> bytes:
    return struct.pack("<Q", len(text.encode())) + text.encode()


def _gguf(kv: list[bytes], tensors: list[bytes] = (), tensor_count: int | None = None, kv_count: int | None = None) -> bytes:
    counts = (len(tensors) if tensor_count is None else tensor_count, len(kv) if kv_count is None else kv_count)
    return b"GGUF" + struct.pack("<IQQ", 3, *counts) + b"".join(kv) + b"".join(tensors)


def _string_array(key: str, items: list[bytes] | bytes, count: int) -> bytes:
    return _s(key) + struct.pack("<IIQ", 9, 8, count) + (items if isinstance(items, bytes) else b"".join(items))


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=SRC)
    return subprocess.run([sys.executable, "-m", "vram_detective", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def _refused_with_one_line(path: Path, words: str) -> None:
    done = _cli("explain", str(path), "--gpu", "H100")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in done.stderr


def test_millions_of_empty_token_strings_are_refused_by_count_not_parsed_for_seconds(tmp_path):
    """1.1 M empty strings (8.8 MB, under the 4 M-item array cap): over the header's 1,048,576-value budget; the
    reader's peak memory is the file's bytes, no string objects (784 MiB for 50 M before)."""
    count = 1_100_000
    path = tmp_path / "strings.gguf"
    path.write_bytes(_gguf([_s("general.architecture") + struct.pack("<I", 8) + _s("llama"),
                            _string_array("tokenizer.ggml.tokens", struct.pack("<Q", 0) * count, count)]))
    # VmHWM: this process's own peak (ru_maxrss would count the parent's pages at exec)
    probe = ("import sys\nfrom vram_detective.model.gguf_source import read_local, GGUFError\n"
             "try:\n    read_local(sys.argv[1])\nexcept GGUFError as error:\n    print(error)\n"
             "print(next(line for line in open('/proc/self/status') if line.startswith('VmHWM')).split()[1])")
    done = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=SRC))
    message, peak_kib = done.stdout.splitlines()
    assert "over 1,048,576 strings and array items" in message
    assert int(peak_kib) < 96 * 1024
    _refused_with_one_line(path, "strings and array items")


def test_tensor_and_key_counts_over_the_budget_are_refused_at_once(tmp_path):
    path = tmp_path / "tensors.gguf"
    path.write_bytes(_gguf([], tensor_count=gguf_source.MAX_TENSORS + 1) + b"\0" * 4096)
    with pytest.raises(GGUFError, match="65,537 tensors"):
        read_local(path)
    _refused_with_one_line(path, "65,537 tensors")
    keys = tmp_path / "keys.gguf"
    keys.write_bytes(_gguf([], kv_count=gguf_source.MAX_KEYS + 1) + b"\0" * (16 * (gguf_source.MAX_KEYS + 1)))
    with pytest.raises(GGUFError, match="65,537 keys"):
        read_local(keys)


def test_many_kept_arrays_count_against_the_budget(tmp_path):
    """17 keys of 65,536 one-byte items each (1.1 MB): kept arrays become Python lists, so their items count."""
    arrays = [_s(f"x.{i}") + struct.pack("<IIQ", 9, 0, 65536) + b"\1" * 65536 for i in range(17)]
    path = tmp_path / "arrays.gguf"
    path.write_bytes(_gguf(arrays))
    with pytest.raises(GGUFError, match="over 1,048,576"):
        read_local(path)


def test_a_tensor_name_of_64_bytes_is_refused_as_llama_cpp_does(tmp_path):
    name = "blk.0." + "x" * 58  # 64 bytes: gguf.cpp refuses name.length() >= GGML_MAX_NAME
    tensor = _s(name) + struct.pack("<I", 1) + struct.pack("<Q", 32) + struct.pack("<IQ", 0, 0)
    path = tmp_path / "name.gguf"
    path.write_bytes(_gguf([_s("general.architecture") + struct.pack("<I", 8) + _s("llama")], [tensor]) + b"\0" * 256)
    with pytest.raises(GGUFError, match="is 64 bytes"):
        read_local(path)
    ok = _s(name[:63]) + struct.pack("<I", 1) + struct.pack("<Q", 32) + struct.pack("<IQ", 0, 0)
    header = parse_prefix(_gguf([], [ok]) + b"\0" * 256, "ok.gguf")
    assert header.tensors[0].key_name == name[:63] or header.tensors[0].name == name[:63]


def test_a_real_sized_tokenizer_still_parses(tmp_path):
    """gemma-3's 262,208 tokens (the catalog's largest vocabulary) and as many merges (Llama 3 has 280,147)."""
    tokens = [f"tok{i}".encode() for i in range(262_208)]
    merges = [f"a{i} b{i}".encode() for i in range(262_208)]
    data = _gguf([_s("general.architecture") + struct.pack("<I", 8) + _s("llama"),
                  _string_array("tokenizer.ggml.tokens", [_s(t.decode()) for t in tokens], len(tokens)),
                  _string_array("tokenizer.ggml.merges", [_s(m.decode()) for m in merges], len(merges))])
    path = tmp_path / "vocab.gguf"
    path.write_bytes(data + b"\0" * 64)
    header = read_local(path)
    assert header.metadata["tokenizer.ggml.tokens"] == 262_208 and header.metadata["tokenizer.ggml.merges"] == 262_208


def test_gguf_parsing_stops_at_the_callers_deadline():
    class Late(Exception):
        pass

    calls = []

    def deadline():
        calls.append(1)
        raise Late()

    data = _gguf([_string_array("tokenizer.ggml.tokens", _s("a") * 10_000, 10_000)])
    with pytest.raises(Late):
        parse_prefix(data, "late.gguf", len(data), deadline)
    assert calls == [1]  # the first check, after 4,096 strings


# --- safetensors ---------------------------------------------------------------------------------------------


def test_a_safetensors_header_over_16_mib_is_refused_before_it_is_read(tmp_path):
    from test_sources_server import TINY_LLAMA

    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA))
    path = tmp_path / "model.safetensors"
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", MAX_HEADER_BYTES + 1))
        out.truncate(8 + MAX_HEADER_BYTES + 1)  # a hole: the claim is true, nothing is written
    with pytest.raises(OversizedHeaderError, match="16,777,217 bytes"):
        read_header(path)
    _refused_with_one_line(tmp_path, "over the 16,777,216-byte limit")


def test_tens_of_thousands_of_tiny_entries_stop_the_json_parse(tmp_path):
    count = MAX_HEADER_TENSORS + 100
    entries = ",".join(f'"t{i}":{{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}' for i in range(count))
    blob = ("{" + entries + "}").encode()
    path = tmp_path / "tiny.safetensors"
    path.write_bytes(struct.pack("<Q", len(blob)) + blob)
    with pytest.raises(OversizedHeaderError, match="over 65,536 tensors"):
        read_header(path)
    assert len(parse_header(("{" + entries.split(",\"t65536\"")[0] + "}").encode(), "ok").tensors) == 65_536


def test_safetensors_parsing_stops_at_the_callers_deadline():
    class Late(Exception):
        pass

    blob = json.dumps({f"t{i}": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]} for i in range(5000)}).encode()
    with pytest.raises(Late):
        parse_header(blob, "late", None, lambda: (_ for _ in ()).throw(Late()))


# --- the Hub: a repository's headers in all ----------------------------------------------------------------

def test_sixteen_shards_claiming_big_headers_are_refused_before_most_are_fetched(tmp_path, monkeypatch):
    pytest.importorskip("huggingface_hub")
    from test_sources_server import TINY_LLAMA, FakeHub
    from vram_detective.model import hub as hub_source

    hub = FakeHub().start()
    try:
        for name, value in {"HF_ENDPOINT": hub.endpoint, "HF_HOME": str(tmp_path / "hf"),
                            "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}.items():
            monkeypatch.setenv(name, value)
        for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_TOKEN", "HF_HUB_OFFLINE"):
            monkeypatch.delenv(name, raising=False)
        folder = tmp_path / "repo"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(TINY_LLAMA))
        files, weight_map = {"config.json": folder / "config.json"}, {}
        for index in range(16):
            name = f"model-{index + 1:05d}-of-00016.safetensors"
            with open(folder / name, "wb") as out:  # each claims a 15 MiB header: "{}" and NULs (a hole on disk)
                out.write(struct.pack("<Q", 15 << 20) + b"{}")
                out.truncate(8 + (15 << 20))
            files[name] = folder / name
            weight_map[f"w{index}"] = name
        (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
        files["model.safetensors.index.json"] = folder / "model.safetensors.index.json"
        hub.add_repo("org/hostile", files)
        with pytest.raises(OversizedHeaderError, match="over 67,108,864 bytes in all"):
            hub_source.fetch("org/hostile")
        sent = hub.traffic.bytes_for(".safetensors")
        assert sent <= 64 << 20  # 4 headers at most, not 16 x 15 MiB
    finally:
        hub.stop()
