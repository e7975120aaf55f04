"""Issue 15, the rest: `logs` answers first and reads what it is given (nvidia-smi alone plus a model, the GPU
from the log's totals, the engine and model the log names, failed starts get the flags that make them start),
and `compare`'s table cells never break mid-word. Inputs are the real logs of groundtruth/dev.jsonl."""
from __future__ import annotations

import re

import pytest

from vram_detective.cli import main


def _run(args, capsys, monkeypatch, columns=80):
    monkeypatch.setenv("COLUMNS", str(columns))
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _cell_words(out: str) -> set[str]:
    words = set()
    for line in out.splitlines():
        if line.startswith("│"):
            for cell in line.strip("│").split("│"):
                words |= set(cell.split())
    return words


@pytest.mark.parametrize("tp", ["1", "2"])
def test_compare_cells_wrap_at_word_boundaries(tp, capsys, monkeypatch):
    args = ["compare", "Qwen/Qwen3-8B", "--gpu", "4090", "--context", "32k", "-tp", tp,
            "--engines", "vllm,sglang,llamacpp,ollama"]
    _, narrow, _ = _run(args, capsys, monkeypatch, 80)
    _, wide, _ = _run(args + ["--wide"], capsys, monkeypatch, 80)
    assert max(len(line) for line in narrow.splitlines()) <= 80
    assert _cell_words(narrow) <= _cell_words(wide)  # every word of a wrapped cell is a whole word
    assert "gpu_memory_utilization 0.92" in narrow  # the budget's why, under the table
    assert re.search(r"│ budget +│ 21\.76 GiB +│", narrow)  # the figure alone in its cell
