"""Every command for every engine in an 80-column terminal: no line of the answer is wider than the terminal
(COLUMNS=80, --help included), and each answer is the real one: its figures are the library's for the same
inputs. Errors stay one line on standard error (exit 2) and are not checked for width."""
from __future__ import annotations

import json
import re

import pytest

from conftest import GROUNDTRUTH, read_jsonl
from vram_detective import api
from vram_detective.cli import main

COLUMNS = 80
MODEL, GPU = "Qwen/Qwen3-8B", "H100 SXM"
LABELS = {"vllm": "vLLM", "sglang": "SGLang", "llamacpp": "llama.cpp", "ollama": "Ollama"}
PROGRAMS = {"vllm": "vllm serve Qwen/Qwen3-8B", "sglang": "python -m sglang.launch_server --model-path Qwen/Qwen3-8B",
            "llamacpp": "llama-server -m Qwen3-8B"}
LOGS = {"vllm": ("dev.jsonl", "vllm-pr10511-llama3-8b-h100-tp1"),
        "sglang": ("dev-sglang.jsonl", "sglang-llama31-8b-docs-notebook-80g"),
        "llamacpp": ("dev-llamacpp.jsonl", "llamacpp-glm-z1-32b-iq4xs-3090ti-32k-fa"),
        "ollama": ("dev-llamacpp.jsonl", "llamacpp-ollama-llama31-8b-q4_0-t4-kaggle-8k-np4")}
COMMANDS = ("explain", "whatif", "fit", "compare", "logs", "simulate", "score", "serve", "watch", "models", "gpus")


def _run(args, capsys, monkeypatch) -> tuple[int, str, str]:
    monkeypatch.setenv("COLUMNS", str(COLUMNS))
    try:
        code = main(list(args))
    except SystemExit as done:  # --help
        code = done.code
    out, err = capsys.readouterr()
    return code, out, err


def _fits(out: str) -> None:
    too_long = [line for line in out.splitlines() if len(line) > COLUMNS]
    assert too_long == [], too_long[:3]


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("command", COMMANDS)
def test_every_help_fits_80_columns(command, capsys, monkeypatch):
    code, out, _ = _run([command, "--help"], capsys, monkeypatch)
    assert code == 0 and out.startswith(f"usage: vram-detective {command}")
    _fits(out)


@pytest.mark.parametrize("engine", LABELS)
def test_explain(engine, capsys, monkeypatch):
    code, out, _ = _run(["explain", MODEL, "--gpu", GPU, "--engine", engine], capsys, monkeypatch)
    b = api.explain(MODEL, GPU, engine=engine)
    assert code == 0
    first = out.splitlines()[0]
    assert first.startswith(f"Starts on {LABELS[engine]} ") and f"nvidia-smi ≈ {b.nvidia_smi_used_mib:,} MiB" in first
    _fits(out)


@pytest.mark.parametrize("engine", LABELS)
def test_whatif(engine, capsys, monkeypatch):
    code, out, _ = _run(["whatif", MODEL, "--gpu", GPU, "--engine", engine], capsys, monkeypatch)
    data = json.loads(_run(["whatif", MODEL, "--gpu", GPU, "--engine", engine, "--json"], capsys, monkeypatch)[1])
    assert code == 0 and LABELS[engine] in out and MODEL in out
    # every lever the JSON lists is a row of the table (its name at the start of a line)
    levers = [row.get("lever") or row.get("label") or row.get("question") for row in
              (data.get("rows") or data.get("levers") or [])]
    named = [lever for lever in levers if isinstance(lever, str)]
    assert named and all(_flat(lever)[:20] in _flat(out) for lever in named), named
    _fits(out)


@pytest.mark.parametrize("engine", LABELS)
def test_fit(engine, capsys, monkeypatch):
    code, out, err = _run(["fit", MODEL, "--gpu", GPU, "--engine", engine, "--context", "16k"], capsys, monkeypatch)
    if engine == "ollama":  # Ollama picks its layers itself: said plainly, bad input
        assert (code, out) == (2, "") and "Ollama picks the layers itself" in err
        return
    assert code == 0 and PROGRAMS[engine] in _flat(out).replace(" \\ ", " ")
    _fits(out)


@pytest.mark.parametrize("engine", LABELS)
def test_simulate(engine, capsys, monkeypatch):
    args = ["simulate", MODEL, "--gpu", GPU, "--engine", engine, "--workload", "chat:rate=1,duration=30"]
    code, out, _ = _run(args, capsys, monkeypatch)
    report = json.loads(_run(args + ["--json"], capsys, monkeypatch)[1])
    assert code == 0 and _flat(report["verdict"]) in _flat(out)
    _fits(out)


@pytest.mark.parametrize("engine", LABELS)
def test_logs(engine, capsys, monkeypatch, tmp_path):
    file, case_id = LOGS[engine]
    case = next(row for row in read_jsonl(GROUNDTRUTH / file) if row["id"] == case_id)
    log = tmp_path / f"{engine}.log"
    log.write_text(case["log"])
    code, out, _ = _run(["logs", str(log)], capsys, monkeypatch)
    assert code == 0 and LABELS[engine] in "\n".join(out.splitlines()[:3])
    # the figures the log printed are in the answer
    printed = [value for value in case["observed"].values() if isinstance(value, (int, float))]
    words = set(re.split(r"[\s(),;:=]+", out))
    shown = [value for value in printed if {str(value), f"{value:,}", f"{value:,.2f}", f"{value:.2f}"} & words]
    assert len(shown) >= min(3, len(printed)), (printed, out[:500])
    _fits(out)


def test_compare(capsys, monkeypatch):
    code, out, _ = _run(["compare", MODEL, "--gpu", GPU, "--context", "16k"], capsys, monkeypatch)
    assert code == 0 and all(label in out for label in ("vLLM", "SGLang", "llama.cpp"))
    b = api.explain(MODEL, GPU, engine="vllm", max_model_len=16384)
    assert f"{b.nvidia_smi_used_mib:,}" in out
    _fits(out)


@pytest.mark.parametrize("args", [["models", "qwen3"], ["gpus", "4090"], ["score"]])
def test_listings_and_score(args, capsys, monkeypatch):
    code, out, _ = _run(args, capsys, monkeypatch)
    assert code == 0 and out.strip()
    if args[0] == "models":
        assert "Qwen/Qwen3-8B" in out
    if args[0] == "gpus":
        assert "RTX 4090" in out
    _fits(out)
