"""Issue 27, "mixed units in one sentence" ("22,587 MiB of 23.65 GiB"): a sentence the tool writes names one
unit, on every engine's explain verdict, the llama.cpp / Ollama advisors' answers (VRAM and margin), and `logs`'
verdict and shrink table (real logs of groundtruth/). A line quoting the engine's own words (Ollama's estimate
line, a refusal) is the engine's and is not checked."""
from __future__ import annotations

import re

import pytest

from conftest import GROUNDTRUTH, read_jsonl
from vram_detective import api
from vram_detective.cli import main

MIB = 1 << 20
CASES = {case["id"]: case for name in ("dev.jsonl", "dev-sglang.jsonl", "dev-llamacpp.jsonl")
         for case in read_jsonl(GROUNDTRUTH / name)}
LOGS = ("vllm-10517-llama31-8b-3090-20k", "sglang-qwen3-06b-rtx5080-mineru",
        "llamacpp-b5622-qwen3-30b-a3b-q4km-4090-5090-experts-cpu", "llamacpp-ollama-llama31-8b-q4_0-t4-kaggle-8k-np4")
ENGINE_WORDS = re.compile(r"memory\.|would refuse to start|msg=|level=")


def _run(args, capsys, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "80")
    assert main(list(args)) in (0, 1)
    return capsys.readouterr().out


def _sentences(text: str) -> list[str]:
    """Prose lines with their wrapped continuations (indented deeper) joined, cut at sentence ends; table rows
    (box lines, or columns aligned by runs of spaces) and the engine's own words left out."""
    joined: list[list[str]] = []
    for line in text.splitlines():
        indent = len(line) - len(line.lstrip())
        if joined and line.strip() and indent > joined[-1][0]:
            joined[-1][1] += " " + line.strip()
        else:
            joined.append([indent, line.strip()])
    out = []
    for _, para in joined:
        if not para or "│" in para or re.search(r"\S {2,}\S", para) or ENGINE_WORDS.search(para):
            continue
        out += [s for s in re.split(r"(?<=[.;:])\s", para) if s]
    return out


def _mixed(text: str) -> list[str]:
    return [s for s in _sentences(text) if re.search(r"\bMiB\b", s) and re.search(r"\bGiB\b", s)]


@pytest.mark.parametrize("engine", ["vllm", "sglang", "llamacpp", "ollama"])
def test_explain_verdict_names_one_unit(engine, capsys, monkeypatch):
    out = _run(["explain", "Qwen/Qwen3-4B", "--gpu", "4090", "--engine", engine], capsys, monkeypatch)
    b = api.explain("Qwen/Qwen3-4B", "4090", engine=engine)
    first = " ".join(out.split("\n[")[0].split())
    assert first.endswith(f"nvidia-smi ≈ {b.nvidia_smi_used_mib:,} MiB of {b.total_gpu_bytes / MIB:,.0f} MiB.")
    assert "GiB" not in first


@pytest.mark.parametrize("engine", ["vllm", "sglang", "llamacpp", "ollama"])
def test_whatif_names_one_unit_per_sentence(engine, capsys, monkeypatch):
    assert _mixed(_run(["whatif", "Qwen/Qwen3-4B", "--gpu", "4090", "--engine", engine], capsys, monkeypatch)) == []


def test_llamacpp_fit_answers_name_one_unit(capsys, monkeypatch):
    out = _run(["fit", "Qwen/Qwen3-8B", "--gpu", "4090", "--engine", "llamacpp", "--context", "16k"], capsys,
               monkeypatch)
    answers = [line for line in " ".join(out.split()).split("llama-server") if "VRAM CUDA0" in line]
    assert answers, out
    for answer in answers:
        margin = re.search(r"VRAM CUDA0 ([\d,]+) MiB, host RAM [\d,]+ MiB, margin \+([\d,]+) MiB", answer)
        assert margin, answer
        total = api.resolve_gpu("4090", None).cuda_total_bytes / MIB
        assert abs(int(margin[2].replace(",", "")) - (total - int(margin[1].replace(",", "")))) <= 1
    assert _mixed(out) == []


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_fit_candidates_name_one_unit(engine, capsys, monkeypatch):
    out = _run(["fit", "Qwen/Qwen3-8B", "--gpu", "4090", "--engine", engine, "--context", "16k"], capsys, monkeypatch)
    assert _mixed(out) == []


@pytest.mark.parametrize("case_id", LOGS)
def test_logs_answer_names_one_unit_per_sentence(case_id, tmp_path, capsys, monkeypatch):
    path = tmp_path / "engine.log"
    path.write_text(CASES[case_id]["log"])
    out = _run(["logs", str(path)], capsys, monkeypatch)
    assert _mixed(out) == []
    shrink = [line for line in out.splitlines() if "-> ~" in line]
    for line in shrink:  # the vLLM run's shrink table: the saving and the footprint in MiB
        assert re.search(r" -[\d,]+ -> ~[\d,]+ MiB( |$)", line), line


@pytest.mark.parametrize("engine", ["vllm", "llamacpp"])
def test_the_html_bars_title_names_one_unit(engine, tmp_path, capsys, monkeypatch):
    import html

    report = tmp_path / "report.html"
    _run(["explain", "Qwen/Qwen3-4B", "--gpu", "4090", "--engine", engine, "--html", str(report)], capsys, monkeypatch)
    titles = [html.unescape(t) for t in re.findall(r"<title>([^<]*MiB[^<]*)</title>", report.read_text())]
    assert titles and all("GiB" not in title for title in titles), titles
    b = api.explain("Qwen/Qwen3-4B", "4090", engine=engine)
    assert any(f"(weights {b.weights_bytes / MIB:,.0f}, KV cache {b.kv_cache_bytes / MIB:,.0f} MiB)" in title
               for title in titles), titles
