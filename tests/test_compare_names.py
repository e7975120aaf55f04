"""Issue 27: `compare` takes the names every other command takes: --max-model-len beside --context (tokens per
request), --engine-version ENGINE=VERSION beside --version (the old name, kept), --vllm-version VERSION; the
same inputs give the same answer under either name, and a bad one is one line, exit 2."""
from __future__ import annotations

import json

import pytest

from vram_detective.cli import main

MODEL, GPU = "Qwen/Qwen3-8B", "4090"


def _json(capsys, *args) -> dict:
    assert main(["compare", MODEL, "--gpu", GPU, "--engines", "vllm,sglang", "--json", *args]) == 0
    report = json.loads(capsys.readouterr().out)
    report.pop("elapsed_s", None)
    return report


def _releases_and_lengths(report: dict) -> list:
    return [(row["engine_version"], row["max_model_len"]) for row in report["engines"]]


def test_explains_names_give_the_same_answer_as_the_old_ones(capsys):
    old = _json(capsys, "--context", "16k", "--version", "vllm=0.8.5", "--version", "sglang=0.4.10")
    new = _json(capsys, "--max-model-len", "16k", "--vllm-version", "0.8.5", "--engine-version", "sglang=0.4.10")
    assert _releases_and_lengths(old) == [("0.8.5", 16384), ("0.4.10", 16384)]
    assert new == old


def test_a_bare_release_with_one_engine(capsys):
    report = _json(capsys, "--engines", "sglang", "--engine-version", "0.4.10")
    assert _releases_and_lengths(report)[0][0] == "0.4.10"


@pytest.mark.parametrize("args, says", [
    (["--engine-version", "0.8.5"], "--engine-version takes ENGINE=VERSION"),  # two engines: which one?
    (["--vllm-version", "0.8.5", "--engine-version", "vllm=0.10.0"], "two releases given for vllm"),
])
def test_ambiguous_releases_are_one_line_exit_2(args, says, capsys):
    assert main(["compare", MODEL, "--gpu", GPU, "--engines", "vllm,sglang", *args]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1


def test_help_names_both_spellings(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name in ("--context CONTEXT, --max-model-len CONTEXT", "--engine-version ENGINE=VERSION, --version",
                 "--vllm-version VERSION", "--version is the old name", "--max-model-len is the same"):
        assert name in text
