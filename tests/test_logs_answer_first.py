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
    assert out.splitlines()[3].startswith("[█") and out.splitlines()[4].startswith("0 ")  # the bar and its scale
    assert out.splitlines()[4].endswith(" 44.99 GiB") and "▓ KV pool" in out.splitlines()[5]
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


def _report(case: dict, tmp_path, **options) -> dict:
    from vram_detective.forensics.command import build_report

    log, _ = _case_files(tmp_path, case)
    return build_report(log, **options)


def test_without_a_gpu_no_gap_is_computed_against_a_made_up_card(dev_cases, tmp_path):
    case = dev_cases["seed-int4-7b-rtx4090"]  # weights and GPU blocks only: no total, no nvidia-smi
    run = _report(case, tmp_path, model="Qwen/Qwen2.5-7B-Instruct-AWQ")["runs"][-1]
    assert run["gpu"] is None
    assert [row["key"] for row in run["reconciliation"]["figures"]] == ["weights_gib"]  # no num_gpu_blocks gap
    assert any(note.startswith("GPU not known") and "GPU blocks not compared" in note
               for note in run["reconciliation"]["notes"])
    with_gpu = _report(case, tmp_path, model="Qwen/Qwen2.5-7B-Instruct-AWQ", gpu="RTX 4090")["runs"][-1]
    assert "num_gpu_blocks" in [row["key"] for row in with_gpu["reconciliation"]["figures"]]


def test_an_sglang_log_takes_its_gpu_from_the_nvidia_smi_table_it_quotes(tmp_path, capsys, monkeypatch):
    from conftest import GROUNDTRUTH, read_jsonl

    case = next(c for c in read_jsonl(GROUNDTRUTH / "dev-sglang.jsonl") if c["id"] == "sglang-qwen3-06b-rtx5080-mineru")
    log, _ = _case_files(tmp_path, case)
    code, out, _ = _run(["logs", log, "--model", case["model"]], capsys, monkeypatch, 80)
    assert code == 0 and out.startswith("SGLang log:")
    flat = " ".join(out.split())
    assert "GPU NVIDIA GeForce RTX 5080 (nvidia-smi quoted in the log" in flat
    assert "predicted with SGLang" in flat and "vLLM" not in out
    assert re.search(r"\n    nvidia-smi: used +14,134 MiB +[\d,]+ MiB", out)


@pytest.mark.parametrize("case_id", ["vllm-5248-dscoder-6.7b-2xT4", "vllm-pr3120-opt125m-v03"])
def test_the_comparison_runs_the_engine_the_log_shows(case_id, dev_cases, tmp_path):
    run = _report(dev_cases[case_id], tmp_path)["runs"][-1]
    assert run["vllm_version"] is None and run["engine"]["value"] == "v0"  # '# CPU blocks': V0, release unknown
    assert run["reconciliation"]["engine"] == "v0"  # was the newest release's V1
    assert run["reconciliation"]["vllm_version"] == "0.7.3"  # the newest release running V0 by default


def test_a_model_the_log_names_wins_over_a_weights_match(dev_cases, tmp_path):
    case = dev_cases["file57935131721-qwen3-235b-fp8-tp4-rtxpro6000"]  # docker run ... vllm-openai:latest MODEL
    run = _report(case, tmp_path)["runs"][-1]
    assert run["model"]["value"] == case["model"]
    assert run["model"]["basis"] == f"named in the log text (the docker run line: {case['model']})"
    assert run["model_used_for_prediction"]["why"] == "named" and run["candidates"] == []


def test_a_failed_start_lists_flags_that_start_each_checked(dev_cases, tmp_path, capsys, monkeypatch):
    from vram_detective import api

    case = dev_cases["vllm-10517-llama31-8b-3090-29k"]  # 29,000 tokens do not fit the 23,648-token pool
    log, _ = _case_files(tmp_path, case)
    args = ["logs", log, "--model", case["model"], "--gpu", "3090"]
    code, out, _ = _run(args, capsys, monkeypatch, 80)
    first = out.splitlines()
    run = next(number for number, line in enumerate(first) if line.startswith("Run 1 "))
    assert code == 0
    assert first[run].startswith("Run 1 (lines 1-5): FAILED: The model's max seq len (29000) is larger than")
    at = first.index("  Flags that make it start (each checked with the prediction):")
    assert at <= run + 4 and "shrink the footprint" not in out
    run = _report(case, tmp_path, model=case["model"], gpu="3090")["runs"][-1]
    fixes = run["what_if"]["start_fixes"]
    assert [fix["flags"].split()[0] for fix in fixes] == ["--gpu-memory-utilization", "--max-model-len",
                                                         "--kv-cache-dtype"]
    for fix in fixes:  # each one starts when explain is asked again with it
        flag, *value = fix["flags"].split()
        setting = {"--gpu-memory-utilization": ("gpu_memory_utilization", float),
                   "--max-model-len": ("max_model_len", int), "--kv-cache-dtype": ("kv_cache_dtype", str)}[flag]
        settings = {"gpu_memory_utilization": 0.9, "max_model_len": 29000}
        settings[setting[0]] = setting[1](value[0])
        b = api.explain(case["model"], "RTX 3090", vllm_version="0.6.4", **settings)
        assert b.failure is None and b.nvidia_smi_used_mib == fix["predicted_nvidia_smi_mib"]
        assert f"{flag} {value[0]}  -> nvidia-smi ~{b.nvidia_smi_used_mib:,} MiB" in out


def test_the_first_screen_answers_first(dev_cases, tmp_path, capsys, monkeypatch):
    log, _ = _case_files(tmp_path, dev_cases[L40S])
    code, out, _ = _run(["logs", log], capsys, monkeypatch, 80)
    lines = out.splitlines()
    assert code == 0 and all(len(line) <= 80 for line in lines)
    run = next(number for number, line in enumerate(lines) if line.startswith("Run 1 "))
    assert lines[run + 1].startswith("  vLLM 0.9.1 (V1) on NVIDIA L40S, Qwen/Qwen3-30B-A3B-Instruct-2507-FP8:")
    assert "nvidia-smi 45,241 MiB of 46,068 MiB; the prediction agrees on all 4" in " ".join(out.split())
    bar = next(number for number, line in enumerate(lines) if line.startswith("  [█"))
    assert bar <= run + 4 and lines[bar + 1].startswith("  0 ")  # the bar's scale under it
    assert "▓ KV pool 25.91" in lines[bar + 2]  # the logged KV pool, nvidia-smi's reading
    assert lines[bar + 4].startswith("  Read from the log: release 0.9.1 (medium); engine V1 (medium)")
    assert "(medium)   log format" not in out  # the bases wait for --verbose
    _, verbose, _ = _run(["logs", log, "--verbose"], capsys, monkeypatch, 80)
    assert "log format: 'Available KV cache memory'" in verbose


def test_shrink_heading_only_above_flags_that_shrink(dev_cases, tmp_path):
    run = _report(dev_cases[L40S], tmp_path)["runs"][-1]
    scenarios = run["what_if"]["scenarios"]
    assert scenarios and all(s["saving_mib"] > 0 for s in scenarios)
