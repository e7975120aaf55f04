"""`vram-detective logs`: the seed story end to end, stdin, JSON, several runs, and bad input (one line on
stderr, exit 2, never a traceback)."""
from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from vram_detective.cli import main

SEED_LOG = "Loading model weights took 5.2048 GB\n# GPU blocks: 4556\n"
SEED_SMI = """\
Tue Mar 11 10:21:07 2025
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.120                Driver Version: 550.120        CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|                                         |                        |               MIG M. |
|=========================================+========================+======================|
|   0  NVIDIA GeForce RTX 4090        Off |   00000000:01:00.0 Off |                  Off |
|  0%   38C    P8             21W /  450W |   10240MiB /  24564MiB |      0%      Default |
|                                         |                        |                  N/A |
+-----------------------------------------+------------------------+----------------------+

+-----------------------------------------------------------------------------------------+
| Processes:                                                                              |
|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |
|        ID   ID                                                               Usage      |
|=========================================================================================|
|    0   N/A  N/A     48213      C   python3                                    10230MiB |
+-----------------------------------------------------------------------------------------+
"""

V0_TP2 = """\
INFO 04-02 10:20:40 llm_engine.py:232] Initializing a V0 LLM engine (v0.7.3) with config: model='/models/Qwen2.5-32B-Instruct', speculative_config=None, tokenizer='/models/Qwen2.5-32B-Instruct', skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, override_neuron_config=None, tokenizer_revision=None, trust_remote_code=False, dtype=torch.bfloat16, max_seq_len=10000, download_dir=None, load_format=auto, tensor_parallel_size=2, pipeline_parallel_size=1, disable_custom_all_reduce=False, quantization=None, enforce_eager=False, kv_cache_dtype=auto,  device_config=cuda, served_model_name=/models/Qwen2.5-32B-Instruct, num_scheduler_steps=1, enable_prefix_caching=False, chunked_prefill_enabled=False, use_async_output_proc=True
INFO 04-02 10:20:45 model_runner.py:1116] Loading model weights took 30.7098 GB
(VllmWorkerProcess pid=3280379) INFO 04-02 10:20:50 model_runner.py:1116] Loading model weights took 30.7098 GB
(VllmWorkerProcess pid=3280379) INFO 04-02 10:20:54 worker.py:266] the current vLLM instance can use total_gpu_memory (44.42GiB) x gpu_memory_utilization (0.90) = 39.98GiB
INFO 04-02 10:20:55 worker.py:266] Memory profiling takes 4.21 seconds
INFO 04-02 10:20:55 worker.py:266] the current vLLM instance can use total_gpu_memory (44.42GiB) x gpu_memory_utilization (0.90) = 39.98GiB
INFO 04-02 10:20:55 worker.py:266] model weights take 30.71GiB; non_torch_memory takes 0.30GiB; PyTorch activation peak memory takes 1.26GiB; the rest of the memory reserved for KV Cache is 7.71GiB.
INFO 04-02 10:20:55 executor_base.py:108] # cuda blocks: 3947, # CPU blocks: 2048
INFO 04-02 10:20:55 executor_base.py:113] Maximum concurrency for 10000 tokens per request: 6.32x
INFO 04-02 10:21:09 model_runner.py:1562] Graph capturing finished in 14 secs, took 0.41 GiB
INFO 04-02 10:21:09 llm_engine.py:436] init engine (profile, create kv cache, warmup model) took 24.02 seconds
"""


def run_cli(args, capsys):
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def seed_files(tmp_path):
    log = tmp_path / "seed.log"
    log.write_text(SEED_LOG)
    smi = tmp_path / "smi.txt"
    smi.write_text(SEED_SMI)
    return str(log), str(smi)


def test_the_seed_reads_like_the_seeds_verdict(seed_files, capsys):
    log, smi = seed_files
    code, out, err = run_cli(["logs", log, "--gpu", "RTX 4090", "--nvidia-smi", smi], capsys)
    assert code == 0 and err == ""
    # the consistent models
    assert "Qwen/Qwen2.5-7B-Instruct-AWQ" in out and "Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4" in out
    # the KV pool from blocks x bytes per block
    assert "4,556 blocks x 917,504 B" in out and "= 3.89 GiB" in out
    # the inferred utilization, the rest as overhead, the flags
    assert "gpu_memory_utilization  0.4" in out
    assert "runtime overhead" in out
    assert "--kv-cache-dtype fp8" in out and "--gpu-memory-utilization" in out

    code, out, _ = run_cli(["logs", log, "--gpu", "RTX 4090", "--nvidia-smi", smi, "--json"], capsys)
    report = json.loads(out)
    run = report["runs"][0]
    assert run["observed"] == {"weights_gib": 5.2048, "num_gpu_blocks": 4556, "nvidia_smi_used_mib": 10240,
                               "nvidia_smi_total_mib": 24564}
    names = [c["model"] for c in run["candidates"]]
    assert names[:2] == ["Qwen/Qwen2.5-7B-Instruct-AWQ", "Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4"]
    assert all(c["weights_error"] < 0.01 for c in run["candidates"][:2])
    assert 3.85 < run["kv_pool"]["gib"] < 3.95
    util = run["settings_basis"]["gpu_memory_utilization"]
    assert 0.3 < run["settings"]["gpu_memory_utilization"] < 0.7 and util["confidence"] == "low"
    assert "4556 blocks" in util["basis"]
    assert run["nvidia_smi_breakdown"]["used_mib"] == 10240
    flags = [s["flags"] for s in run["what_if"]["scenarios"]]
    # every suggestion keeps room beyond the KV pool's error (intervals.starts_safely, as explain and fit count
    # it): lowering the utilization alone is not one, the least safe one being above the run's own
    from vram_detective.engines.vllm.logs.reconcile import least_utilization
    from vram_detective.hardware import find_gpu

    least, _ = least_utilization("Qwen/Qwen2.5-7B-Instruct-AWQ", find_gpu("RTX 4090"), None, {}, "catalog")
    # the least safe one (0.39 since a single consumer GPU's KV error is its own group's 6.5 %, not 72.5 %) is
    # below the run's own: lowering the utilization alone is one, at about that value (solved for the run's
    # own settings)
    assert least < run["settings"]["gpu_memory_utilization"]
    alone = [float(f.split()[1]) for f in flags if f.startswith("--gpu-memory-utilization")]
    assert len(alone) == 1 and abs(alone[0] - least) <= 0.02 and alone[0] < run["settings"]["gpu_memory_utilization"]
    assert any("--kv-cache-dtype fp8" in f for f in flags)
    assert all(s["saving_mib"] > 0 for s in run["what_if"]["scenarios"])
    assert any("below gpu_memory_utilization x total" in text for text in run["anomalies"])
    # the observation as Breakdown figures (bytes)
    assert run["breakdown_fields"]["weights_bytes"] == round(5.2048 * 2**30)
    assert run["breakdown_fields"]["num_gpu_blocks"] == 4556


def test_reading_standard_input(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(V0_TP2.encode())))
    code, out, err = run_cli(["logs", "-", "--json"], capsys)
    assert code == 0, err
    report = json.loads(out)
    assert report["log"] == "standard input"
    run = report["runs"][0]
    assert run["observed"]["kv_cache_gib"] == 7.71 and run["observed"]["startup_failed"] is False
    assert run["model"]["value"] == "Qwen/Qwen2.5-32B-Instruct"
    assert run["settings"]["tensor_parallel_size"] == 2
    assert run["settings_basis"]["tensor_parallel_size"]["confidence"] == "printed"
    assert run["vllm_version"]["value"] == "0.7.3" and run["engine"]["value"] == "v0"
    assert run["gpu"]["value"] == "NVIDIA L40S"
    rows = {row["key"]: row for row in run["reconciliation"]["figures"]}
    assert rows["weights_gib"]["agrees"] and rows["num_cpu_blocks"]["agrees"]
    assert all(row["cause"] for row in rows.values())
    assert "worker pid 3280379" in run["per_rank"]


def test_text_report_of_a_tensor_parallel_run(tmp_path, capsys):
    path = tmp_path / "tp2.log"
    path.write_text(V0_TP2)
    code, out, _ = run_cli(["logs", str(path)], capsys)
    assert code == 0
    assert "Run 1 (lines 1-11): started" in out
    assert "Observed vs predicted: Qwen/Qwen2.5-32B-Instruct" in out
    assert "worker pid 3280379:" in out


def test_several_runs_are_each_reported(tmp_path, capsys):
    second = V0_TP2.replace("(v0.7.3)", "(v0.8.5)").replace("# cuda blocks: 3947", "# cuda blocks: 3900")
    path = tmp_path / "two.log"
    path.write_text(V0_TP2 + second)
    code, out, _ = run_cli(["logs", str(path), "--json"], capsys)
    runs = json.loads(out)["runs"]
    assert [run["observed"]["num_gpu_blocks"] for run in runs] == [3947, 3900]
    assert [run["vllm_version"]["value"] for run in runs] == ["0.7.3", "0.8.5"]


def test_model_and_gpu_from_the_command_line(tmp_path, capsys):
    path = tmp_path / "w.log"
    path.write_text("INFO 03-21 02:21:53 [gpu_model_runner.py:1176] Model loading took 8.9031 GB and 3.891568 seconds\n")
    code, out, _ = run_cli(["logs", str(path), "--model", "Qwen/Qwen2.5-VL-7B-Instruct", "--gpu", "H100", "--json"],
                           capsys)
    run = json.loads(out)["runs"][0]
    assert run["model"] == {"value": "Qwen/Qwen2.5-VL-7B-Instruct", "basis": "--model", "confidence": "given"}
    assert run["settings"]["quantization"] == "fp8"  # the weights fit online FP8, not the bf16 checkpoint
    assert run["gpu"]["confidence"] == "given"


@pytest.mark.parametrize("content, message", [
    (b"", "is empty"),
    (b"\x00\x01\x02\x03" * 1000, "binary"),
    (b"just some text\n", "no vLLM memory lines"),
])
def test_bad_logs_are_one_line_errors(tmp_path, capsys, content, message):
    path = tmp_path / "bad.log"
    path.write_bytes(content)
    code, out, err = run_cli(["logs", str(path)], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("vram-detective: error: ") and message in err


@pytest.mark.parametrize("extra, message", [
    (["--gpu", "GTX 9999"], "unknown GPU"),
    (["--nvidia-smi", "/nonexistent/smi.txt"], "no such file"),
    (["--vllm-version", "0.1.0"], "older than the oldest"),
])
def test_bad_options_are_one_line_errors(seed_files, capsys, extra, message):
    code, out, err = run_cli(["logs", seed_files[0]] + extra, capsys)
    assert code == 2 and err.count("\n") == 1 and message in err


def test_missing_log_and_double_stdin(capsys):
    code, _, err = run_cli(["logs", "/nonexistent/vllm.log"], capsys)
    assert code == 2 and "no such file" in err and err.count("\n") == 1
    code, _, err = run_cli(["logs", "-", "--nvidia-smi", "-"], capsys)
    assert code == 2 and "standard input" in err


def test_every_dev_log_renders_without_error(dev_cases, tmp_path):
    """Text and JSON for each dev log whose text has vLLM lines (no prediction search: fast)."""
    from vram_detective.engines.vllm.logs.analysis import analyze_run
    from vram_detective.forensics.command import render_text
    from vram_detective.engines.vllm.logs.reader import parse_text

    for case in dev_cases.values():
        parsed = parse_text(case["log"])
        if not parsed.lines_matched:
            continue
        report = {"log": case["id"], "lines_read": parsed.lines_read, "lines_with_figures": parsed.lines_matched,
                  "runs": [analyze_run(run, parsed, search=False) for run in parsed.runs]}
        json.dumps(report, default=str)
        assert render_text(report)


def test_the_command_module_imports_light():
    code = ("import sys, vram_detective.cli as c, vram_detective.forensics.command as m; "
            "heavy = [n for n in ('vram_detective.api', 'vram_detective.engines.vllm.logs.reader', "
            "'vram_detective.engines.vllm.plan') if n in sys.modules]; print(heavy)")
    import os
    from pathlib import Path

    import vram_detective

    env = dict(os.environ, PYTHONPATH=str(Path(vram_detective.__file__).resolve().parents[1]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert out.strip() == "[]"


def test_score_from_logs_flag(tmp_path, dev_cases, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = tmp_path / "cases.jsonl"
    picked = [dev_cases[i] for i in ("vllm-10517-llama31-8b-3090-20k", "vllm-15815-qwen25-32b-2xl40s")]
    path.write_text("\n".join(json.dumps(case) for case in picked) + "\n")
    code, plain, _ = run_cli(["score", str(path), "--json"], capsys)
    code2, from_logs, _ = run_cli(["score", str(path), "--json", "--from-logs"], capsys)
    assert code == code2 == 0 and plain == from_logs


def test_a_crash_loop_lists_every_start_and_analyses_the_last(tmp_path, capsys):
    from vram_detective.forensics.streaming import DEEP_RUNS

    starts = "".join(f"INFO 06-12 08:{i:02d}:23 distributed_gpu_executor.py:45] # GPU blocks: {500 + i}, # CPU blocks: "
                     f"1024\nERROR 06-12 08:{i:02d}:24 worker_base.py:145] Error executing method\n" for i in range(12))
    path = tmp_path / "loop.log"
    path.write_text(starts)
    code, out, _ = run_cli(["logs", str(path), "--json"], capsys)
    runs = json.loads(out)["runs"]
    assert [run["observed"]["num_gpu_blocks"] for run in runs] == [500 + i for i in range(12)]
    assert all(run["observed"]["startup_failed"] for run in runs)
    assert [bool(run.get("summary_only")) for run in runs] == [True] * (12 - DEEP_RUNS) + [False] * DEEP_RUNS
    code, out, _ = run_cli(["logs", str(path)], capsys)
    assert code == 0 and out.count("Run ") == 12 and "an earlier start" in out
