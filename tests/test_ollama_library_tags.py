"""Issue 27: an Ollama library name with no local store (`explain qwen2.5:7b --engine ollama` before `ollama
pull`) was a dead end. It is answered from the built-in catalog: the checkpoint the library's tag was converted
from, at the tag's quantization (its default type, or the tag's own suffix), saying plainly where the answer came
from; the same on the command line, the library and the web API (a real local server)."""
from __future__ import annotations

import json
import urllib.parse
import urllib.request

import pytest

from web_server import running_server

from vram_detective import api
from vram_detective.cli import main
from vram_detective.engines.ollama.library import LIBRARY, library_tag
from vram_detective.model.sources import load_model


@pytest.fixture
def empty_store(tmp_path, monkeypatch):
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "models"))
    return tmp_path / "models"


# (name, the catalog checkpoint, the GGUF type)
TAGS = [("qwen2.5:7b", "Qwen/Qwen2.5-7B-Instruct", "Q4_K_M"),
        ("qwen2.5", "Qwen/Qwen2.5-7B-Instruct", "Q4_K_M"),  # latest: the default size
        ("qwen2.5:7b-instruct-q8_0", "Qwen/Qwen2.5-7B-Instruct", "Q8_0"),
        ("library/qwen2.5:14b-instruct-q4_K_M", "Qwen/Qwen2.5-14B-Instruct", "Q4_K_M"),
        ("qwen2.5:7b-text-fp16", "Qwen/Qwen2.5-7B", "F16"),
        ("qwen3:4b", "Qwen/Qwen3-4B", "Q4_K_M"),
        ("llama3.1:8b", "meta-llama/Llama-3.1-8B-Instruct", "Q4_0")]


@pytest.mark.parametrize("name, repo, gguf_type", TAGS)
def test_the_cli_answers_a_library_name_from_the_catalog(name, repo, gguf_type, empty_store, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["explain", name, "--engine", "ollama", "--gpu", "4090", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    same = api.explain(repo, "4090", engine="ollama", gguf_type=gguf_type)  # the catalog model at that mix
    assert answer["model"] == repo and answer["nvidia_smi_used_mib"] == same.nvidia_smi_used_mib
    assert answer["weights_gib"] == pytest.approx(same.weights_bytes / 2**30, abs=1e-3)
    assert answer["settings"]["gguf_type"]["value"] == gguf_type
    note = next(note for note in answer["notes"] if note.startswith(f"{name}: "))
    assert (f"{name}: it is not in the Ollama store ({empty_store}); sized from the built-in catalog's {repo} at the "
            f"tag's quantization {gguf_type}") in note and f"`ollama pull {name}`" in note


def test_the_terminal_says_where_the_answer_came_from(empty_store, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["explain", "qwen2.5:7b", "--engine", "ollama", "--gpu", "4090"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Starts on Ollama ")
    assert "Qwen/Qwen2.5-7B-Instruct on NVIDIA GeForce RTX 4090" in out
    flat = " ".join(out.split())
    assert (f"note: qwen2.5:7b: it is not in the Ollama store ({empty_store}); sized from the built-in catalog's "
            "Qwen/Qwen2.5-7B-Instruct at the tag's quantization Q4_K_M") in flat
    assert max(len(line) for line in out.splitlines()) <= 80


def test_the_users_own_type_wins_over_the_tags(empty_store):
    b = api.explain("qwen2.5:7b", "4090", engine="ollama", gguf_type="Q8_0")
    assert b.weights_bytes == api.explain("Qwen/Qwen2.5-7B-Instruct", "4090", engine="ollama",
                                          gguf_type="Q8_0").weights_bytes


@pytest.mark.parametrize("name", ["foo:7b", "qwen2.5:9b", "someone/qwen2.5:7b", "qwen2.5:7b-vision"])
def test_a_name_the_library_table_does_not_know_stays_not_pulled(name, empty_store, capsys):
    assert main(["explain", name, "--engine", "ollama", "--gpu", "4090"]) == 2
    err = capsys.readouterr().err
    assert "not in the Ollama store" in err and len(err.strip().splitlines()) == 1


def test_every_library_checkpoint_is_in_the_catalog():
    for sizes, latest, gguf_type, basis in LIBRARY.values():
        assert latest in sizes and gguf_type and basis
        for repo in sizes.values():
            assert load_model(repo, source="catalog").repo_id == repo
    assert library_tag("qwen3:30b", "x").repo_id == "Qwen/Qwen3-30B-A3B"


def test_the_web_api_and_the_library_answer_alike(empty_store):
    library = api.explain("qwen2.5:7b", "4090", engine="ollama")
    # a server started without --allow-local-models reads no store: the catalog answers, saying so
    with running_server() as (base, _):
        query = urllib.parse.urlencode({"model": "qwen2.5:7b", "gpu": "4090", "engine": "ollama"})
        with urllib.request.urlopen(f"{base}/api/explain?{query}", timeout=120) as answer:
            status, body = answer.status, json.loads(answer.read())
    assert status == 200 and body["model"] == library.model == "Qwen/Qwen2.5-7B-Instruct"
    assert body["nvidia_smi_used_mib"] == library.nvidia_smi_used_mib
    assert body["settings"]["gguf_type"]["value"] == "Q4_K_M"
    assert any("qwen2.5:7b: the Ollama store is not readable here" in note and "sized from the built-in catalog's "
               "Qwen/Qwen2.5-7B-Instruct at the tag's quantization Q4_K_M" in note for note in body["notes"])
