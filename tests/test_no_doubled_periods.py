"""Issue 27's small things: no sentence the tool prints ends in two periods ("... the engine's message.."), on
starts and refusals of every engine, explain / whatif / fit / compare, and `logs` on real logs (groundtruth/)
that started and that failed; an ellipsis ("...") is not a doubled period."""
from __future__ import annotations

import re

import pytest

from conftest import GROUNDTRUTH, read_jsonl
from vram_detective.cli import main

CASES = {case["id"]: case for name in ("dev.jsonl", "dev-sglang.jsonl", "dev-llamacpp.jsonl")
         for case in read_jsonl(GROUNDTRUTH / name)}
BIG = "meta-llama/Llama-3.1-70B-Instruct"
COMMANDS = [
    ["explain", BIG, "--gpu", "4090"], ["explain", BIG, "--gpu", "4090", "--engine", "sglang"],
    ["explain", BIG, "--gpu", "4090", "--engine", "llamacpp", "-ngl", "99"],
    ["explain", BIG, "--gpu", "4090", "--engine", "ollama"],
    ["explain", "Qwen/Qwen3-8B", "--gpu", "4090", "--max-model-len", "64k"],
    ["whatif", BIG, "--gpu", "4090"], ["whatif", BIG, "--gpu", "4090", "--engine", "sglang"],
    ["fit", "meta-llama/Llama-3.1-405B-Instruct", "--gpu", "4090", "--context", "32k"],
    ["fit", "meta-llama/Llama-3.1-405B-Instruct", "--gpu", "T4", "--context", "32k", "--engine", "llamacpp"],
    ["compare", BIG, "--gpu", "4090", "--engines", "vllm,sglang,llamacpp,ollama"],
]
LOGS = ["vllm-10517-llama31-8b-3090-29k", "vllm-10517-llama31-8b-3090-20k",
        "sglang-inferencex-2128-dsv4-pro-fp8-8xh200-fail", "sglang-qwen3-06b-rtx5080-mineru",
        "llamacpp-b5622-qwen3-30b-a3b-q4km-4090-5090-experts-cpu", "llamacpp-ollama-llama31-8b-q4_0-t4-kaggle-8k-np4"]
DOUBLED = re.compile(r"(?<!\.)\.\s*\.(?!\.)")  # two periods, maybe a space or a line break apart; not "..."


def _doubled(text: str) -> list[str]:
    flat = " ".join(text.split())
    return [flat[max(m.start() - 60, 0):m.end() + 10] for m in DOUBLED.finditer(flat)]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda args: " ".join(args[:1] + args[3:]))
def test_commands_print_no_doubled_period(args, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(args) in (0, 1)
    out, err = capsys.readouterr()
    assert (out + err).strip() and _doubled(out + "\n" + err) == []


@pytest.mark.parametrize("case_id", LOGS)
def test_logs_print_no_doubled_period(case_id, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    path = tmp_path / "engine.log"
    path.write_text(CASES[case_id]["log"])
    assert main(["logs", str(path)]) in (0, 1)
    out, err = capsys.readouterr()
    assert (out + err).strip() and _doubled(out + "\n" + err) == []
