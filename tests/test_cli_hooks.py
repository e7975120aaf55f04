"""The command-line hooks onto the HTML report, the bounded log reader and the workload fit, on real input."""
from __future__ import annotations

import json

from conftest import DEV, read_jsonl

from vram_detective.cli import main

SEED = ["Qwen/Qwen2.5-7B-Instruct-AWQ", "--gpu", "RTX 4090", "--max-model-len", "32k", "--vllm-version", "0.6.3"]


def test_explain_html_writes_the_report_beside_the_usual_output(tmp_path, capsys):
    report = tmp_path / "report.html"
    assert main(["explain", *SEED, "--json", "--html", str(report)]) == 0
    captured = capsys.readouterr()
    printed = json.loads(captured.out)
    assert captured.err == f"wrote {report}\n"  # said on stderr: stdout stays the JSON answer
    html = report.read_text(encoding="utf-8")
    assert html.startswith("<!doctype html>") and "<svg" in html and "<script" not in html
    assert f"{printed['nvidia_smi_used_mib']:,} MiB" in html


def test_explain_html_to_an_unwritable_place_is_one_line(tmp_path, capsys):
    assert main(["explain", *SEED, "--html", str(tmp_path / "no-such-dir" / "r.html")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot write" in err


def test_logs_keeps_the_last_runs_and_summarizes_the_earlier_ones(tmp_path, capsys):
    case = next(c for c in read_jsonl(DEV) if c["id"] == "vllm-pr10511-llama3-8b-h100-tp1")
    log = tmp_path / "restarts.log"
    log.write_text("\n".join([case["log"]] * 70) + "\n", encoding="utf-8")
    html = tmp_path / "logs.html"
    assert main(["logs", str(log), "--json", "--html", str(html)]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert f"wrote {html}\n" in captured.err
    assert len(report["runs"]) == 64 and report["earlier_runs"]["runs"] == 6
    assert report["runs"][-1]["run"] == 70 and sum(not run.get("summary_only") for run in report["runs"]) == 8
    assert "<svg" in html.read_text(encoding="utf-8")


def test_fit_workload_finds_the_cheapest_utilization_that_serves_the_traffic(capsys):
    args = ["fit", "Qwen/Qwen2.5-7B-Instruct-AWQ", "--gpu", "RTX 4090", "--max-model-len", "32k",
            "--workload", "chat:rate=1,duration=60"]
    assert main([*args, "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["feasible"] and found["flag"] == "--gpu-memory-utilization"
    assert 0 < found["value"] < 0.9 and found["preempted_fraction"] <= 0.01
    assert found["pool_bytes"] >= found["needed_bytes"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"--gpu-memory-utilization {found['value']}" in out and "serves it" in out
