"""`watch URL`: a loopback server replays each engine's /metrics texts (tests/data/metrics, written in each release's
metric names and format by scripts/write_metric_fixtures.py from the engines' sources) and watch sets them beside
the prediction; an endpoint that is not an engine, or dies mid-poll, is one line and exit 2."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from metrics_replay_server import replaying, texts_of
from vram_detective.cli import main
from vram_detective.watch.prometheus_text import buckets, parse, total
from vram_detective.watch.report import Observed, lengths, rate

HERE = Path(__file__).resolve().parent
METRICS = HERE / "data" / "metrics"
ROOT = HERE.parent
FAST = ["--interval", "0.05", "--samples", "4", "--deadline", "20"]


def _watch(url, capsys, *extra):
    code = main(["watch", url, *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("folder", sorted(p.name for p in METRICS.iterdir() if p.is_dir()))
def test_own_parser_reads_what_prometheus_client_reads(folder):
    """The parser used without the [watch] extra gives the same samples as prometheus_client's."""
    library = pytest.importorskip("prometheus_client.parser")
    for text in texts_of(METRICS / folder):
        text = text.decode()
        own = parse(text, use_library=False)
        theirs = [(s.name, dict(s.labels), float(s.value)) for family in library.text_string_to_metric_families(text)
                  for s in family.samples]
        assert [(s.name, s.labels, s.value) for s in own] == theirs


def test_own_parser_on_the_vllm_text():
    samples = parse((METRICS / "vllm-0.19.0" / "2.txt").read_text(), use_library=False)
    assert total(samples, "vllm:request_success_total") == 25
    assert total(samples, "vllm:kv_cache_usage_perc") == 0.61
    prompt = buckets(samples, "vllm:request_prompt_tokens")
    assert prompt[-1] == (math.inf, 25.0) and (2000.0, 12.0) in prompt


@pytest.mark.parametrize("folder, usage_metric", [("vllm-0.9.0", "vllm:gpu_cache_usage_perc"),
                                                  ("vllm-0.19.0", "vllm:kv_cache_usage_perc")])
def test_vllm_live_beside_the_prediction(folder, usage_metric, capsys):
    with replaying(texts_of(METRICS / folder)) as url:
        code, out, err = _watch(url, capsys, "Qwen/Qwen3-8B", "--gpu", "RTX 4090", "--max-model-len", "16384",
                                "--engine-version", folder.split("-")[1], "--json", *FAST)
    assert code == 0, err
    answer = json.loads(out)
    live, predicted = answer["observed"], answer["prediction"]
    assert (live["engine"], live["usage_metric"], live["scrapes"]) == ("vllm", usage_metric, 4)
    assert live["usage_peak"] == 0.61 and live["running_peak"] == 12 and live["waiting_peak"] == 3
    assert live["pool_tokens"] == 2040 * 16  # cache_config_info: num_gpu_blocks x block_size
    assert live["settings"] == {"gpu_memory_utilization": 0.9, "block_size": 16, "swap_space": 4.0,
                                "cpu_offload_gb": 0.0, "enable_prefix_caching": True}
    assert live["prompt_mean"] == pytest.approx(sum(700 + 370 * (i % 9) for i in range(40)) / 40)
    # the prediction for the same settings (gpu_memory_utilization 0.9 read from the metrics)
    from vram_detective import api

    alone = api.explain("Qwen/Qwen3-8B", "RTX 4090", engine_version=folder.split("-")[1], max_model_len=16384,
                        gpu_memory_utilization=0.9, block_size=16, swap_space=4.0, cpu_offload_gb=0.0,
                        enable_prefix_caching=True)
    assert predicted["kv_cache_tokens"] == alone.kv_cache_tokens
    assert predicted["peak_bytes"] == int(0.61 * alone.kv_cache_bytes)
    assert predicted["reported_vs_predicted"] == round(32640 / alone.kv_cache_tokens - 1, 4)
    assert answer["simulation"]["requests"] >= 40


def test_vllm_text_output_says_it_in_one_line(capsys):
    with replaying(texts_of(METRICS / "vllm-0.19.0")) as url:
        code, out, _ = _watch(url, capsys, "Qwen/Qwen3-8B", "--gpu", "RTX 4090", "--max-model-len", "16384", *FAST)
    assert code == 0
    assert "KV pool in use: peak 61%, now 35% (vllm:kv_cache_usage_perc)" in out
    assert "the pool peaks at 61% of the predicted" in out
    assert "at this traffic" in out
    assert "the metrics do not name the release: predicted with vLLM" in out


def test_vllm_09_metrics_say_the_release_is_older(capsys):
    with replaying(texts_of(METRICS / "vllm-0.9.0")) as url:
        code, out, _ = _watch(url, capsys, *FAST)
    assert code == 0
    assert "vllm:gpu_cache_usage_perc without vllm:kv_cache_usage_perc: a release before 0.10" in out


def test_sglang_live_beside_the_prediction(capsys):
    with replaying(texts_of(METRICS / "sglang-0.5.23")) as url:
        code, out, err = _watch(url, capsys, "Qwen/Qwen3-8B", "--gpu", "RTX 4090", "--engine-version", "0.5.23",
                                "--json", *FAST)
    assert code == 0, err
    answer = json.loads(out)
    live = answer["observed"]
    assert (live["engine"], live["usage_peak"], live["pool_tokens"]) == ("sglang", 0.61, 110921)
    assert live["output_mean"] == pytest.approx(sum(150 + 130 * (i % 7) for i in range(40)) / 40)
    from vram_detective import api

    alone = api.explain("Qwen/Qwen3-8B", "RTX 4090", engine="sglang", engine_version="0.5.23")
    assert answer["prediction"]["kv_cache_tokens"] == alone.kv_cache_tokens


def test_llama_server_says_what_its_metrics_lack(capsys):
    with replaying(texts_of(METRICS / "llamacpp-b6150")) as url:
        code, out, err = _watch(url, capsys, *FAST)
    assert code == 0, err
    assert out.startswith("llama.cpp at ")
    assert "requests: up to 4 running, 3 waiting" in out
    assert "this build exports no KV-cache usage" in out and "no arrival rate" in out


def test_an_endpoint_that_is_not_an_engine(capsys):
    node = b"# HELP node_load1 1m load average.\n# TYPE node_load1 gauge\nnode_load1 0.21\n"
    with replaying([node]) as url:
        code, out, err = _watch(url, capsys, *FAST)
    assert code == 2 and not out and err.count("\n") == 1
    assert "serves Prometheus text but no engine's metrics" in err
    with replaying([b"<html><body>hello</body></html>"], "text/html") as url:
        code, out, err = _watch(url, capsys, *FAST)
    assert code == 2 and err.count("\n") == 1 and "is not a metrics endpoint" in err


def test_nothing_listening_is_one_line(capsys):
    from web_server import free_port

    code, out, err = _watch(f"http://127.0.0.1:{free_port()}/metrics", capsys, *FAST)
    assert code == 2 and err.count("\n") == 1 and "does not answer" in err


def test_server_killed_mid_poll_is_one_line_exit_2():
    from web_server import free_port

    port = free_port()
    server = subprocess.Popen([sys.executable, str(HERE / "metrics_replay_server.py"), str(METRICS / "vllm-0.19.0"),
                               str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "ready"
        watch = subprocess.Popen([sys.executable, "-m", "vram_detective", "watch", f"http://127.0.0.1:{port}/metrics",
                                  "--interval", "0.5", "--samples", "6", "--deadline", "30"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
        assert server.stdout.readline().strip() == "served 1"
        assert server.stdout.readline().strip() == "served 2"
        server.kill()
        server.wait(10)
        out, err = watch.communicate(timeout=60)
    finally:
        server.kill()
    assert watch.returncode == 2 and not out
    assert err.count("\n") == 1 and "it stopped answering after 2 scrape(s)" in err, err


def test_rate_and_lengths_from_counters_and_buckets():
    assert rate((0.0, 10.0), (4.0, 30.0)) == 5.0
    assert rate((0.0, None), (4.0, 30.0)) is None and rate((1.0, 5.0), (1.0, 6.0)) is None
    spread = lengths(((1000.0, 3.0), (2000.0, 12.0), (5000.0, 25.0), (math.inf, 25.0)), 2076.4, 25)
    assert len(spread) == 25 and min(spread) < 1000 < 2000 < max(spread) <= 5000 * 1.1
    assert sum(spread) / 25 == pytest.approx(2076.4, abs=1)
    assert lengths((), 300.0, 3) == [300, 300, 300]


def test_a_slow_steady_traffic_is_served_by_a_smaller_pool():
    """The simulation of the watched traffic: 0.5 requests/s of ~2k-token prompts fit far below 0.9."""
    from argparse import Namespace

    from vram_detective.watch.compare import compare

    live = Observed(engine="vllm", scrapes=4, seconds=30.0, usage_metric="vllm:kv_cache_usage_perc", usage_peak=0.2,
                    usage_last=0.1, running_peak=2, waiting_peak=0, arrival_rate=0.5, prompt_mean=2000.0,
                    output_mean=300.0, prompt_buckets=(), output_buckets=(), pool_tokens=None, model="Qwen/Qwen3-8B",
                    settings={"gpu_memory_utilization": 0.9}, notes=())
    args = Namespace(model=None, gpu="H100", gpu_memory=None, engine_name="vllm", engine_given=False,
                     engine_version="0.19.0", source=None, revision=None, hf_token=None, gguf_file=None,
                     max_model_len=8192)
    answer = compare(args, live)
    line = next(text for text in answer["lines"] if text.startswith("at this traffic"))
    value = float(line.split("--gpu-memory-utilization ")[1].split()[0])
    assert 0.1 < value < 0.9 and "would still serve it" in line
