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


def _case_files(tmp_path, case: dict) -> tuple[str, str]:
    """The case's log, and the nvidia-smi table rows quoted in it as a file of their own."""
    log = tmp_path / f"{case['id']}.log"
    log.write_text(case["log"])
    smi = tmp_path / f"{case['id']}.smi"
    smi.write_text("\n".join(line for line in case["log"].splitlines() if line.startswith("|")) + "\n")
    return str(log), str(smi)


L40S = "file39689115050-qwen3-30b-a3b-2507-fp8-tp2-ep-2xl40s"  # --gpu-memory-utilization 0.95, 45,241 MiB read


def test_nvidia_smi_and_a_model_without_a_log_solve_the_utilization(dev_cases, tmp_path, capsys, monkeypatch):
    case = dev_cases[L40S]
    _, smi = _case_files(tmp_path, case)
    args = ["logs", "--nvidia-smi", smi, "--model", case["model"], "-tp", "2", "--vllm-version", "0.10.2"]
    code, out, err = _run(args, capsys, monkeypatch, 80)
    assert code == 0 and err == ""
    assert out.startswith("nvidia-smi 45,241 MiB of 46,068 MiB on NVIDIA L40S with")
    solved = float(re.search(r"gpu_memory_utilization ≈ (\d\.\d\d)", out)[1])
    assert abs(solved - case["settings"]["gpu_memory_utilization"]) <= 0.03  # 0.97 against the launch line's 0.95
    assert out.splitlines()[3].startswith("[█") and "▓ KV pool" in out.splitlines()[4]
    assert all(len(line) <= 80 for line in out.splitlines())
    assert not re.search(r" -\d+\.\d\d GiB", out)  # no negative part
    code, out, _ = _run(args + ["--json"], capsys, monkeypatch, 80)
    report = __import__("json").loads(out)
    assert report["gpu_memory_utilization"]["value"] == solved and report["used_mib"] == 45241
    assert abs(report["predicted_nvidia_smi_mib"] - 45241) / 45241 < 0.01
    assert all(part["gib"] > 0 for part in report["parts"])


def test_a_reading_below_any_utilization_says_so(dev_cases, tmp_path, capsys, monkeypatch):
    _, smi = _case_files(tmp_path, dev_cases["vllm-7768-internvl2-8b-2x4090"])  # 14,214 MiB on a 4090
    code, out, _ = _run(["logs", "--nvidia-smi", smi, "--model", "Qwen/Qwen3-30B-A3B-Instruct-2507-FP8"], capsys,
                        monkeypatch, 80)
    assert code == 0
    assert "is less than the engine takes at gpu_memory_utilization 0.05" in " ".join(out.split())
    assert "more than the reading" in out and not re.search(r" -\d+\.\d\d GiB", out)


@pytest.mark.parametrize("args, message", [
    (["logs"], "give an engine log, or --nvidia-smi FILE with --model MODEL"),
    (["logs", "--nvidia-smi", "SMI"], "nvidia-smi output without a log needs --model (the model that ran)"),
])
def test_a_reading_alone_asks_for_what_is_missing(args, message, dev_cases, tmp_path, capsys, monkeypatch):
    _, smi = _case_files(tmp_path, dev_cases[L40S])
    code, _, err = _run([smi if arg == "SMI" else arg for arg in args], capsys, monkeypatch)
    assert code == 2 and err == f"vram-detective: error: {message}\n"
