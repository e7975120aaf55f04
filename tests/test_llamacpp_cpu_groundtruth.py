"""The real-llama.cpp CPU ground truth (groundtruth/cpu/llamacpp_b<build>.jsonl, written by
benchmarks/llamacpp_cpu_groundtruth.py from llama-cpp-python 0.3.16 and 0.3.36 built on a CPU) scored the way
`score` scores any case: model, KV and output buffers exact in every load, the compute buffer within the
issue's bounds (median 1 %, worst 5 %)."""
import json
import re
import statistics
from pathlib import Path

import pytest

from vram_detective.engines.llamacpp.log_parser import log_settings, parse
from vram_detective.scoring import score_engine_cases

ROOT = Path(__file__).resolve().parents[1]
BUILDS = ("b6150", "b11312")  # llama-cpp-python 0.3.16 and 0.3.36


def _cases(build: str) -> list[dict]:
    path = ROOT / "groundtruth" / "cpu" / f"llamacpp_{build}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _scored(build: str) -> dict:
    return score_engine_cases("llamacpp", _cases(build), catalog_only=True)


_SCORES: dict = {}


def scored(build: str) -> dict:
    if build not in _SCORES:
        _SCORES[build] = _scored(build)
    return _SCORES[build]


def _figures(build: str, kind: str) -> list[tuple[str, str, dict]]:
    return [(case["id"], key, figure) for case in scored(build)["per_case"] for key, figure in case["figures"].items()
            if key.startswith(f"{kind}:")]


@pytest.mark.parametrize("build", BUILDS)
def test_every_load_is_scored(build):
    report = scored(build)
    assert report["cases"] >= 60 and report["scored"] == report["cases"], report["skipped"][:3]
    models = {case["model"] for case in _cases(build)}
    assert {"microsoft/Phi-3-mini-4k-instruct", "google/gemma-3-1b-it", "Qwen/Qwen3-0.6B"} <= models


@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("kind", ["model_buffer_mib", "kv_buffer_mib", "output_buffer_mib"])
def test_buffers_are_exact_in_every_load(build, kind):
    figures = _figures(build, kind)
    assert figures
    wrong = [(cid, key, f["predicted"], f["observed"]) for cid, key, f in figures
             if abs(f["predicted"] - f["observed"]) > 0.005]
    assert not wrong, wrong[:5]


def _compute_errors(build: str) -> list[float]:
    errors = [abs(f["rel_err"]) * 100 for _, _, f in _figures(build, "compute_buffer_mib")]
    assert errors
    return errors


@pytest.mark.parametrize("build", BUILDS)
def test_compute_buffer_median_within_one_percent(build):
    assert statistics.median(_compute_errors(build)) <= 1.0


# The compute buffer of a CPU build is where ggml-alloc puts the n_vocab x n_ubatch logits plus their size, which
# depends on the holes the whole graph left (with flash attention the f16 mask held across the layers shifts them):
# engines/llamacpp/galloc.py replays the allocator over the graph the build reserves (graph_llm.py) for every
# family of these cases (the closed form, compute.cpu_compute_bytes, stays for the others).
@pytest.mark.parametrize("build", BUILDS)
def test_compute_buffer_worst_within_five_percent(build):
    assert max(_compute_errors(build)) <= 5.0


def test_phi3_allocates_the_full_context():
    """Phi-3-mini-4k's GGUF carries sliding_window 2047 and llama.cpp says so and allocates every cell."""
    for build in BUILDS:
        phi = [c for c in _cases(build) if c["model"] == "microsoft/Phi-3-mini-4k-instruct"]
        assert phi and all("Phi SWA is currently disabled" in c["log"] for c in phi)
        at_4k = [c for c in phi if c["settings"]["n_ctx"] == 4096 and c["settings"]["type_k"] == "f16"
                 and c["settings"]["n_parallel"] == 1]
        assert at_4k and {c["observed"]["cpu_kv_buffer_mib"] for c in at_4k} == {1536.0}


def test_a_cpu_only_log_is_read_as_no_offload():
    case = _cases("b6150")[0]
    assert "offloaded" not in case["log"]
    assert log_settings(case["log"])["n_gpu_layers"] == 0 and log_settings(case["log"])["num_gpus"] == 0


def test_gemma_keeps_both_kv_buffer_lines():
    """iSWA prints the full cache's KV buffer line and then the SWA cache's: the device's KV is both."""
    case = next(c for c in _cases("b6150") if c["model"] == "google/gemma-3-1b-it" and not c["settings"]["swa_full"])
    printed = [float(m.group(1)) for m in re.finditer(r"CPU KV buffer size =\s*([\d.]+) MiB", case["log"])]
    assert len(printed) == 2
    figures = parse(case["log"])
    assert figures["cpu_kv_buffer_mib"] == round(sum(printed), 2) and figures["cpu_kv_swa_buffer_mib"] == printed[1]


@pytest.mark.parametrize("build", BUILDS)
def test_the_allocator_replay_is_exact_where_the_graph_is_modelled(build):
    """Every load (Llama, Qwen2, Qwen3, Phi-3, Gemma 2 and Gemma 3 iSWA; flash attention on and off, 1-4
    streams, unified or not, n_ubatch 128 / 512, swa_full, a q8_0 cache: at b11312 with its Hadamard rotations)
    gets the printed compute buffer to 0.01 MiB."""
    figures = [(cid, f) for cid, _, f in _figures(build, "compute_buffer_mib")]
    assert len(figures) >= 60
    wrong = [(cid, f["predicted"], f["observed"]) for cid, f in figures if abs(f["predicted"] - f["observed"]) > 0.005]
    assert not wrong, wrong[:5]
