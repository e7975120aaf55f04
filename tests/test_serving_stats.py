"""What the pool held while serving (forensics/serving.py): the periodic stats lines after a real startup log,
read by `logs` (vLLM and SGLang) and compared by `simulate --log`.

No ground-truth case carries serving lines yet, so each test appends lines written in the exact format of the
release's source (cited per line) to a real startup log from groundtruth/."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from vram_detective.cli import main
from vram_detective.forensics.serving import ServingStats, read_serving_stats

ROOT = Path(__file__).resolve().parents[1]


def _case(name: str, case_id: str) -> dict:
    for line in (ROOT / "groundtruth" / name).read_text().splitlines():
        case = json.loads(line)
        if case["id"] == case_id:
            return case
    raise KeyError(case_id)


# v1/metrics/loggers.py 0.10.2 LoggingStatLogger.log
V1_0102 = ("(APIServer pid=2811) INFO 09-23 18:13:{s:02d} [loggers.py:123] Engine 000: Avg prompt throughput: 812.3 "
           "tokens/s, Avg generation throughput: 95.1 tokens/s, Running: {running} reqs, Waiting: {waiting} reqs, "
           "GPU KV cache usage: {usage:.1f}%, Prefix cache hit rate: {hit:.1f}%")
# v1/metrics/loggers.py 0.19.0: "Preemptions: N" (since the previous line) only when there were some
V1_0190 = ("(APIServer pid=7) INFO 03-02 10:00:{s:02d} [loggers.py:259] Avg prompt throughput: 0.0 tokens/s, Avg "
           "generation throughput: 410.2 tokens/s, Running: {running} reqs, Waiting: {waiting} reqs, Preemptions: "
           "{preempted}, GPU KV cache usage: {usage:.1f}%, Prefix cache hit rate: 0.0%")
# engine/metrics.py 0.6.3 and core/scheduler.py 0.6.3 (the warning on the 1st, 51st, ... preemption)
V0_063 = ("INFO 12-16 02:40:{s:02d} metrics.py:349] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: "
          "31.2 tokens/s, Running: {running} reqs, Swapped: 0 reqs, Pending: {waiting} reqs, GPU KV cache usage: "
          "{usage:.1f}%, CPU KV cache usage: 12.5%.")
V0_PREEMPTED = ("WARNING 12-16 02:40:59 scheduler.py:1481] Sequence group 57 is preempted by PreemptionMode.RECOMPUTE "
                "mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase "
                "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
                "total_num_cumulative_preemption=51")
# managers/scheduler.py 0.4.3 log_decode_stats / log_prefill_stats
SGL_DECODE = ("[2025-03-04 10:00:{s:02d} TP0] Decode batch. #running-req: {running}, #token: {tokens}, token usage: "
              "{usage:.2f}, gen throughput (token/s): 120.31, #queue-req: {waiting}")
SGL_PREFILL = ("[2025-03-04 10:01:00 TP0] Prefill batch. #new-seq: 1, #new-token: 2048, #cached-token: 512, cache hit "
               "rate: 20.00%, token usage: 0.31, #running-req: 3, #queue-req: 0")


def test_vllm_v1_stats_after_a_real_startup(tmp_path, capsys):
    case = _case("dev.jsonl", "file34680831065-llava16-mistral7b-h100-v0102")
    stats = [V1_0102.format(s=i, running=i, waiting=max(0, i - 30), usage=1.5 * i, hit=41.2) for i in range(1, 41)]
    log = tmp_path / "serve.log"
    log.write_text(case["log"] + "\n" + "\n".join(stats) + "\n")
    assert main(["logs", str(log), "--json"]) == 0
    run = json.loads(capsys.readouterr().out)["runs"][-1]
    serving = run["serving"]
    assert serving["samples"] == 40 and serving["peak_usage_pct"] == 60.0
    assert serving["median_usage_pct"] == 30.0  # the 20th of 1.5, 3.0, ... 60.0
    assert serving["p99_usage_pct"] == 60.0
    assert (serving["max_running"], serving["max_waiting"], serving["preemptions"]) == (40, 10, 0)
    assert serving["prefix_cache_hit_rate_pct"] == 41.2
    # the log's own pool: 55.15 GiB available for the KV cache
    assert serving["pool_gib"] == 55.15 and serving["peak_in_use_gib"] == pytest.approx(55.15 * 0.6, abs=1e-3)
    assert main(["logs", str(log)]) == 0
    assert "KV cache usage peaked at 60.0 % (≈ 33.09 of the 55.15 GiB pool" in capsys.readouterr().out
    page = tmp_path / "report.html"
    assert main(["logs", str(log), "--html", str(page)]) == 0
    assert '<p class="serving" data-peak-usage="60.0">while serving (40 stats lines)' in page.read_text()


def test_vllm_v0_stats_count_cpu_apart_and_read_the_cumulative_preemptions(tmp_path, capsys):
    case = _case("dev.jsonl", "vllm-10517-llama31-8b-3090-20k")
    lines = [V0_063.format(s=i, running=4, waiting=i % 3, usage=90.0 + i / 10) for i in range(1, 11)] + [V0_PREEMPTED]
    log = tmp_path / "v0.log"
    log.write_text(case["log"] + "\n" + "\n".join(lines) + "\n")
    assert main(["logs", str(log), "--json"]) == 0
    serving = json.loads(capsys.readouterr().out)["runs"][-1]["serving"]
    assert serving["peak_usage_pct"] == 91.0  # the GPU share, never the CPU swap space's 12.5 %
    assert serving["preemptions"] == 51 and serving["max_waiting"] == 2
    assert serving["peak_blocks"] == round(1952 * 0.91)  # '# GPU blocks: 1952' in the same log


def test_v1_preemptions_add_up_across_lines():
    stats = ServingStats()
    for i, preempted in enumerate((3, 0, 5), 1):
        assert stats.feed(V1_0190.format(s=i, running=200, waiting=12, preempted=preempted, usage=99.9), i)
    assert (stats.preemptions, stats.samples, stats.peak_usage) == (8, 3, 99.9)
    assert not stats.feed("INFO 03-02 10:00:04 [loggers.py:259] Engine 000: Avg prompt throughput: 0.0 tokens/s", 4)


def test_sglang_stats_in_the_engine_report(tmp_path, capsys):
    case = _case("dev-sglang.jsonl", "sglang-qwq32b-4xl4-g6-tp4")
    lines = [SGL_DECODE.format(s=i, running=i, tokens=1000 * i, usage=i / 20, waiting=0) for i in range(1, 11)]
    log = tmp_path / "sglang.log"
    log.write_text(case["log"] + "\n" + SGL_PREFILL + "\n" + "\n".join(lines) + "\n")
    assert main(["logs", str(log), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    serving = report["serving"]
    assert report["engine"] == "sglang" and serving["samples"] == 11
    assert serving["peak_usage_pct"] == 50.0 and serving["max_running"] == 10
    assert serving["prefix_cache_hit_rate_pct"] == 20.0
    k, v = case["observed"]["k_size_gb"], case["observed"]["v_size_gb"]
    assert serving["pool_gib"] == pytest.approx(k + v) and serving["peak_in_use_gib"] == pytest.approx((k + v) / 2, abs=1e-3)


def test_sglang_hybrid_pools_report_the_fuller_one():
    line = ("[2025-09-01 10:00:00] Decode batch. #running-req: 8, #full token: 4000, full token usage: 0.12, "
            "#swa token: 9000, swa token usage: 0.71, gen throughput (token/s): 88.10, #queue-req: 2, ")
    stats = read_serving_stats(line)
    assert stats.peak_usage == 71.0 and stats.max_waiting == 2


def test_simulate_compares_with_the_logged_usage(tmp_path, capsys):
    case = _case("dev.jsonl", "file34680831065-llava16-mistral7b-h100-v0102")
    stats = [V1_0102.format(s=i, running=3, waiting=0, usage=2.0 + i / 10, hit=0.0) for i in range(1, 11)]
    log = tmp_path / "serve.log"
    log.write_text(case["log"] + "\n" + "\n".join(stats) + "\n")
    args = ["simulate", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "H100 SXM", "--workload", "chat:rate=1,duration=30",
            "--log", str(log), "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    compared = out["log"]
    assert compared["logged"]["peak_usage_pct"] == 3.0 and compared["logged"]["samples"] == 10
    result = out["result"]
    assert compared["simulated"]["peak_usage_pct"] == round(100 * result["peak_blocks"] / result["pool_blocks"], 1)
    assert compared["peak_gap_pct_points"] == round(compared["simulated"]["peak_usage_pct"] - 3.0, 1)
    empty = tmp_path / "startup-only.log"
    empty.write_text(case["log"] + "\n")
    assert main(args[:-3] + ["--log", str(empty)]) == 2
    assert "no periodic stats lines" in capsys.readouterr().err
