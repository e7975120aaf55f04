"""Issue 27, one shape for every engine's `logs` answer: verdict first, the figures in words, predicted vs
printed per line, then what to change. A log read whole (SGLang, llama.cpp, Ollama) now ends, as a vLLM run
does, with the flags that would shrink the footprint: the engine's own whatif levers one at a time, each saving
and footprint the engine's prediction, drawn by one function (forensics/changes.py) in the terminal, --json and
--html. Inputs are real logs from groundtruth/."""
from __future__ import annotations

import json
import re
from html import unescape

import pytest

from conftest import GROUNDTRUTH, read_jsonl
from vram_detective import api
from vram_detective.advisor import answers
from vram_detective.cli import main
from vram_detective.engines import get_engine

CASES = {case["id"]: case for name in ("dev.jsonl", "dev-sglang.jsonl", "dev-llamacpp.jsonl")
         for case in read_jsonl(GROUNDTRUTH / name)}
# (case, the model to compare with, the engine, the GPU the log names, the settings the log shows, as planned)
LOGS = [("sglang-qwen3-06b-rtx5080-mineru", "Qwen/Qwen3-0.6B", "sglang", "NVIDIA GeForce RTX 5080"),
        ("llamacpp-ollama-llama31-8b-q4_0-t4-kaggle-8k-np4", "meta-llama/Llama-3.1-8B-Instruct", "ollama", "Tesla T4")]
HEAD = "Flags that would shrink the footprint (now ~"


def _log(tmp_path, case_id: str) -> str:
    path = tmp_path / f"{case_id}.log"
    path.write_text(CASES[case_id]["log"])
    return str(path)


def _run(args, capsys, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "80")
    assert main(list(args)) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("case_id, model, engine, gpu", LOGS)
def test_a_log_read_whole_ends_with_what_to_change(case_id, model, engine, gpu, tmp_path, capsys, monkeypatch):
    log = _log(tmp_path, case_id)
    report = json.loads(_run(["logs", log, "--model", model, "--json"], capsys, monkeypatch))
    shrink = report["what_if"]
    assert shrink["scenarios"], shrink
    # each scenario is the engine's own lever, planned by the engine: the same figures as `whatif`
    settings = {key: value for key, value in report["settings"].items()
                if key in {f.setting for f in get_engine(engine).launch.flags} | set(get_engine(engine).log_only_settings)}
    rows = answers.whatif(model, api.resolve_gpu(gpu, None), get_engine(engine), report["engine_version"]
                          if engine != "ollama" else None, settings, {}, checkpoints=False).to_dict()["rows"]
    by_lever = {row["lever"]: row for row in rows}
    for scenario in shrink["scenarios"]:
        row = by_lever[scenario["flags"]]
        assert scenario["command"] == row["command"] and scenario["kv_cache_tokens"] == row["kv_cache_tokens"]
        assert scenario["saving_mib"] > 64
    savings = [s["saving_mib"] for s in shrink["scenarios"]]
    assert savings == sorted(savings, reverse=True)
    text = _run(["logs", log, "--model", model], capsys, monkeypatch)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    at = next(i for i, line in enumerate(lines) if line.startswith("  " + HEAD))
    assert lines.index("  Observed vs predicted") < at  # after predicted vs printed, as a vLLM run's
    flat = " ".join(" ".join(lines[at:]).split())
    for scenario in shrink["scenarios"]:
        assert f"{scenario['flags']} -{scenario['saving_mib']:,} -> ~" in flat


def test_the_html_report_draws_the_same_rows(tmp_path, capsys, monkeypatch):
    case_id, model = LOGS[0][0], LOGS[0][1]
    page = tmp_path / "report.html"
    out = _run(["logs", _log(tmp_path, case_id), "--model", model, "--html", str(page)], capsys, monkeypatch)
    html = page.read_text()
    table = re.search(r'<table class="what-if"><caption>(.*?)</caption>(.*?)</table>', html)
    assert table and table[1].startswith(HEAD)
    cells = re.findall(r"<code>(.*?)</code></th><td class=num>(.*?)</td>", table[2])
    flat = " ".join(out.split())
    assert cells and all(f"{unescape(flags)} {unescape(saving)}" in flat for flags, saving in cells)


def test_a_vllm_run_draws_its_shrink_table_with_the_same_function(tmp_path, capsys, monkeypatch):
    out = _run(["logs", _log(tmp_path, "vllm-10517-llama31-8b-3090-20k")], capsys, monkeypatch)
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  " + HEAD))
    assert "--gpu-memory-utilization is the least that still serves one 20,000-token" in " ".join(lines[at:at + 3])
    assert re.search(r"--enforce-eager +-\d[\d,]* -> ~[\d,]+ MiB", out)


def test_savings_are_withheld_when_the_prediction_is_not_this_run(tmp_path, capsys, monkeypatch):
    """A llama.cpp run with the experts on the CPU (-ot, which the log does not show): the plan of the logged
    settings holds 6,149 MiB on GPU 0 against the 1,904 MiB printed, so its savings would mislead."""
    log = _log(tmp_path, "llamacpp-b5622-qwen3-30b-a3b-q4km-4090-5090-experts-cpu")
    out = _run(["logs", log, "--model", "Qwen/Qwen3-30B-A3B"], capsys, monkeypatch)
    assert HEAD not in out
    assert re.search(r"What to change: not listed; the prediction for the logged settings \([\d,]+ MiB on GPU 0\) "
                     r"is far from the 1,904 MiB the log shows", " ".join(out.split()))
