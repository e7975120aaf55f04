"""The advisor's fast path (engines/vllm/sweep.py) against the forward model: the same blocks, tokens,
concurrency, startup verdict and nvidia-smi figure as api.explain on random settings (dense, MoE,
sliding-window / hybrid, MLA, pipeline parallel, V0 and V1 eras); numpy and pure Python agree;
more memory never lowers concurrency; and the inverse is exact on the dev cases with a logged KV budget."""
from __future__ import annotations

import math
import random

import pytest

from conftest import GIB
from vram_detective import api
from vram_detective.engines.vllm import sweep as sweep_module
from vram_detective.engines.vllm.advisor.search import Target, fit
from vram_detective.engines.vllm.sweep import FastPath, FastPathUnsupported

# (model, gpu, vLLM version, fixed settings)
FAMILIES = [
    ("Qwen/Qwen3-8B", "H100", None, {}),  # dense, newest (null block in the fit check, ceil budget)
    ("Qwen/Qwen2.5-7B-Instruct-AWQ", "RTX 4090", "0.8.5", {}),  # V1 "blocks" tokens rule
    ("google/gemma-3-1b-it", "RTX 4090", "0.11.0", {}),  # sliding window + full: hybrid groups
    ("openai/gpt-oss-20b", "H100", "0.26.0", {"pipeline_parallel_size": 2}),  # MoE, sliding, in-flight tokens x2, PP
    ("deepseek-ai/DeepSeek-V2-Lite-Chat", "H100", "0.9.2", {}),  # MLA (forced block size on sm90)
    ("Qwen/Qwen3-30B-A3B", "H100", "0.15.1", {"tensor_parallel_size": 2, "kv_cache_dtype": "fp8"}),  # MoE + TP
    ("meta-llama/Llama-3.1-8B-Instruct", "RTX 3090", "0.6.4", {"engine": "v0"}),  # V0-d, chunked-prefill rule
    ("meta-llama/Llama-3.1-8B-Instruct", "RTX 3090", "0.4.3", {}),  # V0-c (reserved-memory peak)
    ("google/gemma-3-27b-it", "H100", "0.14.0", {"pipeline_parallel_size": 2}),  # global-min fit check, vision tower
    ("mistralai/Mistral-7B-Instruct-v0.2", "L4", "0.7.3", {"pipeline_parallel_size": 3}),  # uneven stages
    ("Qwen/Qwen3-8B", "H100", "0.21.0", {"enforce_eager": True, "cpu_offload_gb": 2}),  # offload staging
    ("google/gemma-2-9b-it", "A100-80G", "0.10.2", {"kv_cache_memory_bytes": 6 * GIB}),  # fixed KV budget
    ("Qwen/Qwen3-VL-4B-Instruct", "H100", "0.13.0", {}),  # deepstack buffers sized by batched tokens, image profile
    ("Qwen/Qwen3-VL-4B-Instruct-FP8", "L40S", "0.11.0", {}),  # 0.11 video profile scattered into the budget
    ("openai/whisper-tiny", "RTX 4090", "0.13.0", {"entrypoint": "llm"}),  # cross-attention reserve follows tokens
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "H200", "0.14.0", {"tensor_parallel_size": 8}),  # chunked local
    ("meta-llama/Llama-3.1-8B-Instruct", "H100", "0.11.1",  # the drafter's dummy run and piecewise graphs
     {"speculative_config": '{"method": "eagle3", "model": "x/EAGLE3-8B", "num_speculative_tokens": 3}'}),
    ("Qwen/Qwen3.5-27B", "H200", "0.19.0", {}),  # GatedDeltaNet hybrid with its vision tower
    ("google/gemma-4-31B-it", "H200", "0.21.0", {}),  # sliding and full layers of different page sizes
    ("zai-org/GLM-4.5-Air", "H100", "0.11.0", {"tensor_parallel_size": 8}),  # fp32 router, shared experts
    ("deepseek-ai/DeepSeek-V3.2-Exp", "H200", "0.11.0", {"tensor_parallel_size": 8}),  # fp8_ds_mla + indexer keys
    ("Qwen/Qwen3-4B", "H100", "0.25.0", {"kv_cache_dtype": "turboquant_k3v4_nc"}),  # packed KV, bf16 boundary layers
]
LENGTHS = (256, 1000, 2048, 4096, 8192, 16384, 32768, 40000, 131072)
SEQS = (1, 4, 16, 64, 256, 1024)
TOKENS = (256, 512, 2048, 8192, 16384, 40000)
COMPARED = ("num_gpu_blocks", "kv_cache_tokens", "max_concurrency", "starts", "nvidia_smi_used_mib", "kv_cache_bytes",
            "activation_peak_bytes", "cuda_graph_bytes", "budget_bytes")


def _random_points(fast: FastPath, rng: random.Random, count: int) -> list[tuple]:
    points = []
    while len(points) < count:
        length = min(rng.choice(LENGTHS), fast.derived_max_model_len)
        tokens = rng.choice(TOKENS)
        if not fast.valid(length, tokens):
            continue
        points.append((round(rng.uniform(0.3, 0.99), 2), length, rng.choice(SEQS), tokens))
    return points


def _explained(breakdown) -> dict:
    return {"num_gpu_blocks": breakdown.num_gpu_blocks, "kv_cache_tokens": breakdown.kv_cache_tokens,
            "max_concurrency": breakdown.max_concurrency, "starts": breakdown.failure is None,
            "nvidia_smi_used_mib": breakdown.nvidia_smi_used_mib, "kv_cache_bytes": breakdown.kv_cache_bytes,
            "activation_peak_bytes": breakdown.activation_peak_bytes, "cuda_graph_bytes": breakdown.cuda_graph_bytes,
            "budget_bytes": breakdown.budget_bytes}


@pytest.mark.parametrize("model,gpu,version,fixed", FAMILIES, ids=[f"{m}-{v}-{sorted(f)}" for m, _, v, f in FAMILIES])
def test_fast_path_equals_explain(model, gpu, version, fixed):
    rng = random.Random(hash((model, version)) & 0xFFFF)
    fast = FastPath(model, gpu, vllm_version=version, settings=fixed)
    points = _random_points(fast, rng, 24)
    swept = fast.points(*zip(*points))
    for index, point in enumerate(points):
        breakdown = api.explain(model, gpu, vllm_version=version, **fast.user_settings(*point))
        got = swept.at(index)
        assert {key: got[key] for key in COMPARED} == _explained(breakdown), (point, got)


def test_grid_points_and_pure_python_agree():
    fast = FastPath("google/gemma-3-1b-it", "RTX 4090", vllm_version="0.26.0")
    axes = ([0.5, 0.9, 0.97], [1024, 8192, 32768], [1, 64, 256], [512, 2048, 8192])
    grid = fast.grid(*axes)
    plain = fast.grid(*axes, use_numpy=False)
    assert len(grid) == len(plain) == 81
    for index in range(len(grid)):
        point = grid.setting(index)
        assert point == plain.setting(index)
        one = fast.points(*([value] for value in point))
        assert grid.at(index) == plain.at(index) == one.at(0), point


def test_grid_matches_explain_on_a_product():
    fast = FastPath("Qwen/Qwen2.5-7B-Instruct-AWQ", "RTX 4090", vllm_version="0.19.0")
    grid = fast.grid([0.6, 0.9], [4096, 32768], [16, 256], [1024, 4096])
    for index in range(len(grid)):
        breakdown = api.explain("Qwen/Qwen2.5-7B-Instruct-AWQ", "RTX 4090", vllm_version="0.19.0",
                                **fast.user_settings(*grid.setting(index)))
        got = grid.at(index)
        assert {key: got[key] for key in COMPARED} == _explained(breakdown)


def test_invalid_settings_are_marked_not_started():
    fast = FastPath("meta-llama/Llama-3.1-8B-Instruct", "RTX 3090", vllm_version="0.6.4", settings={"engine": "v0"})
    # V0 without chunked prefill refuses max_num_batched_tokens < max_model_len; lengths over the model's refuse too
    sweep = fast.points([0.9, 0.9, 0.9], [8192, 8192, 10 ** 7], [16, 16, 16], [4096, 8192, 10 ** 7])
    assert [sweep.at(i)["valid"] for i in range(3)] == [False, True, False]
    assert not sweep.at(0)["starts"] and not sweep.at(2)["starts"]


def test_unsupported_settings():
    with pytest.raises(FastPathUnsupported):
        FastPath("Qwen/Qwen3-8B", "H100", settings={"num_gpu_blocks_override": 100})


def test_more_memory_never_lowers_concurrency():
    for model, gpu, version, fixed in FAMILIES[:9]:
        fast = FastPath(model, gpu, vllm_version=version, settings=fixed)
        us = [round(0.3 + 0.05 * k, 2) for k in range(14)]
        lengths = sorted({min(length, fast.derived_max_model_len) for length in (2048, 8192, 32768)})
        grid = fast.grid(us, lengths, [16, 256], [2048, 8192])
        rest = len(grid) // len(us)
        for column in range(rest):
            series = [grid.at(u * rest + column) for u in range(len(us))]
            for before, after in zip(series, series[1:]):
                assert after["max_concurrency"] >= before["max_concurrency"]
                assert after["num_gpu_blocks"] >= before["num_gpu_blocks"]
                assert after["kv_cache_tokens"] >= before["kv_cache_tokens"]
                assert after["starts"] >= before["starts"], (model, version, series)


def test_a_bigger_gpu_never_lowers_concurrency():
    from vram_detective.hardware import custom_gpu

    previous = None
    for gib in (16, 20, 24, 32, 48, 80):
        gpu = custom_gpu(gib * GIB, compute_capability=(8, 9))
        figures = FastPath("Qwen/Qwen3-8B", gpu).figures(0.9, 16384, 64, 2048)
        if previous is not None:
            assert figures["max_concurrency"] >= previous["max_concurrency"]
            assert figures["starts"] >= previous["starts"]
        previous = figures


def test_pure_python_fallback(monkeypatch):
    monkeypatch.setattr(sweep_module, "numpy_or_none", lambda: None)
    fast = FastPath("Qwen/Qwen3-0.6B", "RTX 4090")
    grid = fast.grid([0.5, 0.9], [4096], [16, 64], [2048])
    assert not grid.is_numpy and len(grid) == 4
    breakdown = api.explain("Qwen/Qwen3-0.6B", "RTX 4090", **fast.user_settings(*grid.setting(3)))
    assert grid.at(3)["num_gpu_blocks"] == breakdown.num_gpu_blocks


# --- the inverse on dev cases with a logged KV budget -------------------------------------------------------


def _case_inputs(case):
    from vram_detective.engines.vllm.scoring import _predict
    from vram_detective.scoring import half_unit as _half_unit

    prediction, reason = _predict(case)
    if prediction is None or prediction.refused or prediction.partial:
        return None
    breakdown, spec, gpu, user = prediction.breakdown, prediction.spec, prediction.gpu, prediction.user
    observed = case["observed"]
    logged = observed.get("kv_cache_gib")
    key = "num_gpu_blocks" if "num_gpu_blocks" in observed else "kv_cache_tokens" if "kv_cache_tokens" in observed else None
    if not logged or logged <= 0 or key is None:
        return None
    half = _half_unit(logged)
    user = dict(user, engine=breakdown.engine)
    point = (float(breakdown.setting("gpu_memory_utilization")), breakdown.max_model_len,
             int(breakdown.setting("max_num_seqs")), int(breakdown.setting("max_num_batched_tokens")))
    return spec, gpu, user, breakdown.vllm_version, point, int((logged - half) * GIB), int((logged + half) * GIB) - 1, \
        key, observed[key]


def _budget_for(fast: FastPath, point, lo: int, hi: int, key: str, wanted: int) -> int | None:
    """The smallest budget in [lo, hi] whose figure reaches the logged one, if it equals it."""
    def figure(budget):
        fast.kv_fixed = budget
        return fast.figures(*point)[key]

    if figure(hi) < wanted or figure(lo) > wanted:
        return None
    while lo < hi:
        middle = (lo + hi) // 2
        if figure(middle) >= wanted:
            hi = middle
        else:
            lo = middle + 1
    return lo if figure(lo) == wanted else None


def test_inverse_is_exact_on_dev_cases(dev_cases):
    from vram_detective.engines.vllm.kv_plan import kv_plan_for_budget
    from vram_detective.units import parse_version

    checked = 0
    for case in dev_cases.values():
        inputs = _case_inputs(case)
        if inputs is None:
            continue
        spec, gpu, user, version, point, lo, hi, key, wanted = inputs
        try:
            fast = FastPath(spec.name, gpu, vllm_version=version, settings=user, spec=spec, kv_budget_bytes=lo)
        except FastPathUnsupported:
            continue
        budget = _budget_for(fast, point, lo, hi, key, wanted)
        if budget is None:
            continue  # the forward model is not exact on this case's own figure: nothing to invert
        fast.kv_fixed = budget
        figures = fast.figures(*point)
        plan = kv_plan_for_budget(spec, gpu, dict(user, max_model_len=point[1], max_num_seqs=point[2],
                                                  max_num_batched_tokens=point[3]), parse_version(version), budget)
        assert (figures["num_gpu_blocks"], figures["kv_cache_tokens"], figures["max_concurrency"]) == (
            plan.num_blocks, plan.kv_cache_tokens, plan.max_concurrency), case["id"]
        blocks, length, tokens = figures["num_gpu_blocks"], point[1], point[3]
        own = fast.concurrency_for_blocks(blocks, length, tokens)
        one_more = fast.concurrency_for_blocks(blocks + 1, length, tokens)
        assert own == figures["max_concurrency"] and one_more > own
        if not figures["starts"] or math.ceil(one_more) > point[2]:
            continue  # the case's vLLM refused to start, or max_num_seqs alone caps the larger target
        pins = dict(user, gpu_memory_utilization=point[0], max_model_len=length, max_num_seqs=point[2],
                    max_num_batched_tokens=tokens, kv_cache_dtype=user.get("kv_cache_dtype") or "auto",
                    enforce_eager=bool(user.get("enforce_eager")))
        pins.pop("engine")
        common = dict(vllm_version=version, pins=pins, engine=user["engine"], same_checkpoint=True,
                      kv_budget_bytes=budget, top=1)
        met = fit(spec.name, gpu, Target(context=length, concurrency=own), **common)
        assert met.feasible, case["id"]
        best = met.candidates[0]
        assert best.point == point and best.figures["num_gpu_blocks"] == blocks, case["id"]
        assert {k: best.settings[k] for k in ("gpu_memory_utilization", "max_model_len", "max_num_seqs",
                                               "max_num_batched_tokens")} == {
            "gpu_memory_utilization": point[0], "max_model_len": length, "max_num_seqs": point[2],
            "max_num_batched_tokens": tokens}
        missed = fit(spec.name, gpu, Target(context=length, concurrency=one_more), **common)
        assert not missed.feasible, case["id"]
        checked += 1
    assert checked >= 8
