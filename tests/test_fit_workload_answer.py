"""`fit --workload` answers as `fit` does for every engine that simulates its pool: the cheapest setting, and the
engine's own launch line at it (`--json` "command"), the verdict and the line fitted to the terminal."""
from __future__ import annotations

import json
import shlex

import pytest

from vram_detective.cli import main
from vram_detective.engines import get_engine

WORKLOAD = "chat:rate=1,duration=20"
CASES = {  # engine -> (GPU, flags): Qwen3-8B, a pool each engine sizes by its own lever
    "vllm": ("4090", []),
    "sglang": ("H100 SXM", []),
    "llamacpp": ("4090", ["--gguf-type", "Q4_K_M", "-ngl", "99", "-fa", "on"]),
}


def _fit(capsys, engine: str, *extra: str) -> tuple[int, str]:
    gpu, flags = CASES[engine]
    code = main(["fit", "Qwen/Qwen3-8B", "--gpu", gpu, "--engine", engine, "--workload", WORKLOAD, *flags, *extra])
    return code, capsys.readouterr().out


@pytest.mark.parametrize("engine", sorted(CASES))
def test_the_launch_line_starts_the_engine_at_the_setting_found(capsys, engine):
    code, out = _fit(capsys, engine, "--json")
    found = json.loads(out)
    assert code == 0 and found["feasible"]
    parsed = get_engine(engine).launch.parse(shlex.split(found["command"], comments=True))
    assert parsed.model == "Qwen/Qwen3-8B" and parsed.settings[found["lever"]] == found["value"]


@pytest.mark.parametrize("engine", sorted(CASES))
def test_the_answer_fits_60_columns_and_the_line_reads_back_whole(capsys, monkeypatch, engine):
    _, out = _fit(capsys, engine, "--json")
    command = json.loads(out)["command"]
    monkeypatch.setenv("COLUMNS", "60")
    code, text = _fit(capsys, engine)
    lines = text.splitlines()
    assert code == 0 and max(len(line) for line in lines) <= 60, text
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(command.split()[0]))
    joined = " ".join(line.strip().removesuffix("\\").strip() for line in lines[start:])
    assert shlex.split(joined, comments=True) == shlex.split(command, comments=True)
    assert "serves it" in " ".join(line.strip() for line in lines[:start])


def test_no_setting_serving_the_workload_says_why_and_gives_no_line(capsys):
    code = main(["fit", "Qwen/Qwen3-8B", "--gpu", "4090", "--engine", "vllm", "--max-model-len", "32k",
                 "--workload", "chat:rate=50,duration=30", "--json"])
    found = json.loads(capsys.readouterr().out)
    assert code == 1 and not found["feasible"] and found["command"] is None and found["reason"]
