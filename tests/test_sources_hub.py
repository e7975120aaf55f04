"""The Hugging Face Hub source against a real local HTTP server (tests/test_sources_server.py): huggingface_hub
is used as it is (no mocking), with HF_ENDPOINT pointed at the server and the caches in tmp_path."""
from __future__ import annotations

import io
import json
import struct
from pathlib import Path

import pytest

pytest.importorskip("huggingface_hub")
pytest.importorskip("safetensors")
import huggingface_hub  # noqa: E402,F401  (imported before any test changes HF_* variables)

from test_sources_server import (  # noqa: E402
    TINY_LLAMA, FakeHub, fake_hub, llama_tensors, write_gguf, write_sharded,  # noqa: F401
)
from vram_detective import api  # noqa: E402
from vram_detective.model import hub as hub_source  # noqa: E402
from vram_detective.model import hub_calls  # noqa: E402
from vram_detective.engines.vllm.weights import checkpoint_vs_gpu  # noqa: E402
from vram_detective.model.config import parse_config  # noqa: E402
from vram_detective.model.safetensors_headers import (  # noqa: E402
    InvalidHeaderError, OversizedHeaderError, TruncatedHeaderError, UnknownDtypeError, read_header,
)
from vram_detective.model.sources import UnknownModelError, load_model  # noqa: E402
from vram_detective.render import to_json  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_api_cache():
    api.model_source.cache_clear()
    api.model_spec.cache_clear()
    yield
    api.model_source.cache_clear()
    api.model_spec.cache_clear()


def _mixed_tensors() -> dict:
    tensors = llama_tensors(TINY_LLAMA)
    tensors["model.layers.0.mlp.down_proj.weight"] = ("float8_e4m3fn", (64, 128))
    tensors["model.layers.0.mlp.down_proj.weight_scale"] = ("float32", (1,))
    tensors["model.layers.1.self_attn.o_proj.weight"] = ("float16", (64, 64))
    tensors["model.extra.int_table"] = ("int32", (7, 3))
    return tensors


def _sum_headers(files: dict) -> int:
    return sum(8 + read_header(path).header_bytes for name, path in files.items() if name.endswith(".safetensors"))


def test_sharded_repo_reads_only_the_headers(fake_hub, tmp_path):
    files = write_sharded(tmp_path / "tiny", TINY_LLAMA, _mixed_tensors(), shards=3)
    fake_hub.add_repo("org/tiny", files)
    stats = hub_source.FetchStats()
    source = hub_source.fetch("org/tiny", stats=stats)
    assert source.origin == "hub" and source.config["hidden_size"] == 64
    table = source.checkpoint
    assert table is not None and table.format == "safetensors"
    local = load_model(str(tmp_path / "tiny")).checkpoint
    assert sorted((t.name, t.shape, t.dtype, t.nbytes) for t in table.tensors) == \
        sorted((t.name, t.shape, t.dtype, t.nbytes) for t in local.tensors)
    assert {"bfloat16", "float16", "float32", "int32", "float8_e4m3fn"} <= set(table.bytes_by_dtype())
    # exactly the headers crossed the wire: 8 + N per shard, in two range reads each
    sent = fake_hub.traffic.bytes_for(".safetensors")
    assert sent == _sum_headers(files) == table.header_bytes == stats.header_bytes_received
    ranges = [r for method, path, r in fake_hub.traffic.requests if path.endswith(".safetensors")]
    assert len(ranges) == 6 and all(r and r.startswith("bytes=") for r in ranges)


def test_local_hub_and_catalog_predict_identically(fake_hub, tmp_path):
    catalog = load_model("Qwen/Qwen2.5-0.5B-Instruct")
    tensors = llama_tensors(catalog.config, inv_freq=True)
    files = write_sharded(tmp_path / "Qwen2.5-0.5B-Instruct", catalog.config, tensors, shards=2, sparse=True)
    fake_hub.add_repo("Qwen/Qwen2.5-0.5B-Instruct", files)
    settings = {"max_model_len": 8192}
    results = {}
    for label, reference, source in (("catalog", "Qwen/Qwen2.5-0.5B-Instruct", "catalog"),
                                     ("local", str(tmp_path / "Qwen2.5-0.5B-Instruct"), None),
                                     ("hub", "Qwen/Qwen2.5-0.5B-Instruct", "hub")):
        breakdown = api.explain(reference, "RTX 4090", source=source, **settings)
        out = to_json(breakdown)
        out.pop("model", None)
        results[label] = json.dumps(out, sort_keys=True, default=str).replace(reference, "MODEL")
    assert results["catalog"] == results["local"] == results["hub"]
    # the headers agree with the config-synthesized layout: only the stored inv_freq is dropped and the
    # rotary cache added; everything else is byte-identical
    hub_table = api.model_source("Qwen/Qwen2.5-0.5B-Instruct", "hub").checkpoint
    spec = parse_config(catalog.config, catalog.repo_id)
    report = checkpoint_vs_gpu(hub_table, spec)
    statuses = {row.status for row in report.rows}
    assert statuses == {"match", "dropped", "added"}, report.summary_lines()
    assert [row.role for row in report.added] == ["rotary cache"]
    assert {row.key for row in report.dropped} == {"model.layers.*.self_attn.rotary_emb.inv_freq"}
    assert report.by_role["embedding"][0] == report.by_role["embedding"][1] == 151936 * 896 * 2


def test_gated_repo_needs_a_token(fake_hub, tmp_path, monkeypatch):
    files = write_sharded(tmp_path / "gated", TINY_LLAMA, llama_tensors(TINY_LLAMA), shards=1)
    fake_hub.add_repo("org/gated", files, gated=True)
    with pytest.raises(hub_calls.GatedRepoTokenError) as error:
        hub_source.fetch("org/gated")
    message = str(error.value)
    assert "huggingface-cli login" in message and "HF_TOKEN" in message and "\n" not in message
    assert hub_source.fetch("org/gated", token=FakeHub.TOKEN).checkpoint is not None
    monkeypatch.setenv("HF_TOKEN", FakeHub.TOKEN)
    assert hub_source.fetch("org/gated").config["hidden_size"] == 64


def test_missing_repo_revision_and_file(fake_hub, tmp_path):
    files = write_sharded(tmp_path / "tiny", TINY_LLAMA, llama_tensors(TINY_LLAMA), shards=2)
    repo = fake_hub.add_repo("org/tiny", files, branches=("main", "v1"))
    with pytest.raises(hub_calls.HubRepoNotFoundError, match="no such model"):
        hub_source.fetch("org/missing")
    with pytest.raises(hub_calls.HubRevisionNotFoundError, match="no revision 'nope'"):
        hub_source.fetch("org/tiny", revision="nope")
    assert hub_source.fetch("org/tiny", revision="v1").revision == repo.commit
    assert hub_source.fetch("org/tiny", revision=repo.commit).revision == repo.commit
    broken = dict(files)
    del broken["model-00002-of-00002.safetensors"]
    fake_hub.add_repo("org/broken", broken)
    with pytest.raises(hub_calls.HubFileNotFoundError, match="model-00002-of-00002.safetensors"):
        hub_source.fetch("org/broken")
    # through load_model's resolution order: not in the catalog, so the Hub answers (or says why not)
    with pytest.raises(UnknownModelError, match="no such model"):
        load_model("org/missing")


def test_slow_server_times_out_after_a_retry(fake_hub, tmp_path, monkeypatch):
    files = write_sharded(tmp_path / "slow", TINY_LLAMA, llama_tensors(TINY_LLAMA), shards=1)
    fake_hub.add_repo("org/slow", files, delay=1.5)
    monkeypatch.setenv("VRAM_DETECTIVE_HUB_TIMEOUT", "0.3")
    with pytest.raises(hub_calls.HubUnreachableError, match="did not answer within 0.3 s") as error:
        hub_source.fetch("org/slow")
    assert "\n" not in str(error.value)
    tries = [path for method, path, _ in fake_hub.traffic.requests if "/api/models/org/slow" in path]
    assert len(tries) <= 2


def test_network_down_is_one_line(monkeypatch, tmp_path):
    import socket

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with pytest.raises(hub_calls.HubUnreachableError, match="cannot reach") as error:
        hub_source.fetch("org/anything")
    assert "\n" not in str(error.value)


def _raw_shard(path: Path, prefix: bytes, body: bytes = b"") -> Path:
    path.write_bytes(prefix + body)
    return path


@pytest.mark.parametrize("case,error", [
    ("oversized", OversizedHeaderError), ("truncated", TruncatedHeaderError), ("json", InvalidHeaderError),
    ("dtype", UnknownDtypeError),
])
def test_bad_headers_are_refused_and_nothing_is_cached(fake_hub, tmp_path, case, error):
    directory = tmp_path / case
    files = write_sharded(directory, TINY_LLAMA, llama_tensors(TINY_LLAMA), shards=2)
    bad = directory / "model-00002-of-00002.safetensors"
    if case == "oversized":
        _raw_shard(bad, struct.pack("<Q", 1 << 40), b"x" * 64)
    elif case == "truncated":
        _raw_shard(bad, struct.pack("<Q", 5000), b"{" * 100)
    elif case == "json":
        _raw_shard(bad, struct.pack("<Q", 16), b"{not json at all")
    else:
        blob = json.dumps({"w": {"dtype": "Q9_X", "shape": [2], "data_offsets": [0, 2]}}).encode()
        _raw_shard(bad, struct.pack("<Q", len(blob)), blob + b"\0\0")
    fake_hub.add_repo("org/bad", files)
    with pytest.raises(error) as raised:
        hub_source.fetch("org/bad")
    assert "\n" not in str(raised.value)
    if case == "oversized":  # refused from the 8-byte prefix alone
        assert fake_hub.traffic.bytes_for("model-00002-of-00002.safetensors") == 8
    with pytest.raises(error):  # the local reader refuses it the same way
        read_header(bad)
    cache = tmp_path / "hf-home" / "assets" / "vram-detective"
    assert not list(cache.rglob("table.json")) and not list(cache.rglob("*.incomplete"))


def test_offline_uses_the_caches(fake_hub, tmp_path, monkeypatch):
    files = write_sharded(tmp_path / "tiny", TINY_LLAMA, llama_tensors(TINY_LLAMA), shards=2)
    fake_hub.add_repo("org/tiny", files)
    online = hub_source.fetch("org/tiny")
    fake_hub.stop()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    offline = hub_source.fetch("org/tiny")
    assert offline.config == online.config and offline.revision == online.revision
    assert offline.checkpoint == online.checkpoint
    with pytest.raises(hub_calls.HubOfflineCacheMissError, match="HF_HUB_OFFLINE"):
        hub_source.fetch("org/never-fetched")
    cache = tmp_path / "hf-home"
    assert not list(cache.rglob("*.incomplete"))


def test_a_server_ignoring_range_is_still_read_correctly(tmp_path, monkeypatch):
    server = FakeHub(ignore_range=True).start()
    try:
        monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        files = write_sharded(tmp_path / "tiny", TINY_LLAMA, llama_tensors(TINY_LLAMA), shards=2)
        server.add_repo("org/tiny", files)
        table = hub_source.fetch("org/tiny").checkpoint
        assert table.total_bytes == load_model(str(tmp_path / "tiny")).checkpoint.total_bytes
    finally:
        server.stop()


def test_progress_bar_only_on_a_terminal_or_when_slow():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    quiet = io.StringIO()
    bar = hub_source._Progress(3, "org/x: safetensors headers", stream=quiet)
    for _ in range(3):
        bar.step()
    bar.close()
    assert quiet.getvalue() == ""
    tty = Tty()
    bar = hub_source._Progress(3, "org/x: safetensors headers", stream=tty)
    for _ in range(3):
        bar.step()
    bar.close()
    assert "3/3 shards" in tty.getvalue() and tty.getvalue().endswith("\n")
    slow = io.StringIO()
    bar = hub_source._Progress(2, "org/x", stream=slow, after=0.0)
    bar.step()
    bar.step()
    assert "2/2 shards" in slow.getvalue()


def test_gguf_repository(fake_hub, tmp_path):
    directory = tmp_path / "gguf"
    directory.mkdir()
    q4 = write_gguf(directory / "tiny-Q4_K_M.gguf", tokens=3000)[0]
    q8 = write_gguf(directory / "tiny-Q8_0.gguf", types={k: "Q8_0" for k in (
        "token_embd", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down", "output")})[0]
    fake_hub.add_repo("org/tiny-GGUF", {q4.name: q4, q8.name: q8})
    with pytest.raises(LookupError, match="--gguf-file"):
        hub_source.fetch("org/tiny-GGUF")
    stats = hub_source.FetchStats()
    source = hub_source.fetch("org/tiny-GGUF", gguf_file="tiny-Q4_K_M.gguf", stats=stats)
    local = load_model(str(q4))
    assert source.config == local.config
    assert [(t.name, t.shape, t.dtype, t.nbytes) for t in source.checkpoint.tensors] == \
        [(t.name, t.shape, t.dtype, t.nbytes) for t in local.checkpoint.tensors]
    # the prefix holding metadata + tensor infos, not the tensor data
    assert fake_hub.traffic.bytes_for("tiny-Q4_K_M.gguf") < q4.stat().st_size
    assert api.explain("org/tiny-GGUF", "RTX 4090", source="hub", gguf_file="tiny-Q8_0.gguf").weights_bytes > 0


def test_cli_reads_the_hub(fake_hub, tmp_path, capsys):
    from vram_detective.cli import main

    files = write_sharded(tmp_path / "tiny", TINY_LLAMA, llama_tensors(TINY_LLAMA), shards=2)
    fake_hub.add_repo("org/tiny", files)
    fake_hub.add_repo("org/gated", files, gated=True)
    assert main(["explain", "org/tiny", "--gpu", "4090", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["weights_gib"] > 0
    assert main(["explain", "org/gated", "--gpu", "4090"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "huggingface-cli login" in err
    assert main(["explain", "org/gated", "--gpu", "4090", "--hf-token", FakeHub.TOKEN, "--json"]) == 0
