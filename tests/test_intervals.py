"""90 % intervals from scored errors (intervals.py, data/intervals.json) and the verdict's margin."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from vram_detective import intervals
from vram_detective.api import explain
from vram_detective.render import to_json

ROOT = Path(__file__).resolve().parents[1]


def _rows(errors, era="V1-c", gpu="consumer (<= 32 GB)"):
    return [{"id": f"c{i}", "engine": "vllm", "term": "kv_pool", "era": era, "gpu_class": gpu,
             "predicted": 10.0, "observed": 10.0 + error} for i, error in enumerate(errors)]


def test_fit_takes_the_90th_percentile_of_the_error_relative_to_the_prediction():
    data = intervals.fit(_rows([0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, 0.8, -0.9, 5.0]))
    group = data["groups"]["vllm"]["kv_pool"]
    assert group["V1-c | consumer (<= 32 GB) | 1 GPU"] == {"n": 10, "p90_rel_to_predicted": 0.09}
    low, high, basis = intervals.bounds("vllm", "kv_cache_gib", 20.0, "V1-c", "consumer (<= 32 GB)", data)
    assert (low, high) == pytest.approx((18.2, 21.8)) and basis == "V1-c | consumer (<= 32 GB) | 1 GPU (n=10)"
    # fewer than 5 cases in an era: the GPU class and setup across eras, the GPU class, then every case
    assert intervals.bounds("vllm", "kv_cache_gib", 20.0, "V0-c", "consumer (<= 32 GB)", data)[2] == \
        "* | consumer (<= 32 GB) | 1 GPU (n=10)"
    assert intervals.bounds("vllm", "kv_cache_gib", 20.0, "V1-c", "consumer (<= 32 GB)", data,
                            intervals.SEVERAL_GPUS)[2] == "* | consumer (<= 32 GB) (n=10)"
    assert intervals.bounds("vllm", "non_torch_gib", 1.0, "V1-c", "consumer (<= 32 GB)", data) is None


def test_the_kv_pools_figures_are_one_term_counted_once_per_case():
    """GiB, tokens, blocks and concurrency of one pool: one error term, one observation per case (its worst)."""
    assert {intervals.term_of(key) for key in intervals.POOL_FIGURES} == {"kv_pool"}
    assert intervals.term_of("cuda1_kv_buffer_mib") == "kv_buffer_mib"
    rows = [dict(row, term="kv_pool") for row in _rows([0.1, 0.2, 0.3, 0.4, 0.5])]
    twice = rows + [dict(rows[0], predicted=10.0, observed=19.0)]  # the same case's tokens, 90 % off
    group = intervals.fit(twice)["groups"]["vllm"]["kv_pool"]["V1-c | consumer (<= 32 GB) | 1 GPU"]
    assert group == {"n": 5, "p90_rel_to_predicted": 0.9}


def test_coverage_counts_observed_figures_inside():
    rows = _rows([0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, 0.8, -0.9, 5.0])
    covered = intervals.coverage(rows, intervals.fit(rows))
    assert covered["overall"] == {"n": 10, "inside": 9, "share": 0.9}


def test_a_prediction_carries_intervals_and_a_margin():
    breakdown = explain("Qwen/Qwen3-8B", "H100", vllm_version="0.11.0")
    keys = {item.key for item in breakdown.intervals}
    assert {"weights_gib", "kv_cache_gib", "activation_peak_gib", "non_torch_gib", "cuda_graph_gib"} <= keys
    pool = next(item for item in breakdown.intervals if item.key == "kv_cache_gib")
    assert pool.low < pool.value < pool.high and pool.level == 0.9
    assert breakdown.verdict_margin.startswith("starts, ") and "GiB to spare" in breakdown.verdict_margin
    assert to_json(breakdown)["intervals"][0]["key"] == "weights_gib"


def test_a_pool_that_barely_holds_one_request_is_borderline():
    # 4.54 GiB of KV on a 4090 for one 32,768-token request of 4.5 GiB
    breakdown = explain("Qwen/Qwen3-8B", "RTX 4090", vllm_version="0.11.0", max_model_len=32768)
    assert breakdown.verdict_margin.startswith("borderline: +0.04 GiB")


def test_the_shipped_data_is_what_the_refit_script_writes():
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    import refit_intervals

    shipped = json.loads((ROOT / "src" / "vram_detective" / "data" / "intervals.json").read_text())
    assert shipped["groups"] == intervals.fit(refit_intervals.rows())["groups"]
    assert 0.85 <= shipped["coverage"]["two_fold_held_out"]["share"] <= 0.95


def test_errors_are_grouped_by_setup_one_gpu_or_several():
    """Issue 27: a consumer card's vLLM KV pool was +-72.5 % because two multi-GPU cases (a PP2 run over an RTX
    5070 Ti and a 5090 D, a TP4 4090 run) fell in the same group as the single-GPU ones. Errors are grouped by
    setup too: a single 4090 gets the single-GPU cases' error, a TP2 split the several-GPU cases'."""
    one = explain("Qwen/Qwen3-8B", "RTX 4090", vllm_version="0.11.0", max_model_len=16384)
    pool = next(item for item in one.intervals if item.key == "kv_cache_gib")
    assert pool.basis.startswith("* | consumer (<= 32 GB) | 1 GPU (n=")
    assert (pool.high - pool.value) / pool.value < 0.1  # was 0.7252
    split = explain("Qwen/Qwen3-8B", "RTX 4090", vllm_version="0.11.0", max_model_len=16384, tensor_parallel_size=2)
    pool = next(item for item in split.intervals if item.key == "kv_cache_gib")
    assert pool.basis.startswith("* | consumer (<= 32 GB) | several GPUs (n=")
    rows = [dict(row, setup=setup, id=f"{setup} {row['id']}") for setup in (intervals.ONE_GPU, intervals.SEVERAL_GPUS)
            for row in _rows([0.1] * 5 if setup == intervals.ONE_GPU else [5.0] * 5)]
    groups = intervals.fit(rows)["groups"]["vllm"]["kv_pool"]
    assert groups["V1-c | consumer (<= 32 GB) | 1 GPU"]["p90_rel_to_predicted"] == 0.01
    assert groups["V1-c | consumer (<= 32 GB) | several GPUs"]["p90_rel_to_predicted"] == 0.5
    assert groups["* | consumer (<= 32 GB)"]["n"] == 10


def test_a_case_is_scored_with_the_gpus_its_run_used():
    from vram_detective.scoring import load_cases, score_cases

    cases = {case["id"]: case for case in load_cases(str(ROOT / "groundtruth" / "dev.jsonl"))}
    report = score_cases([cases["vllm-15457-dsr1-distill-qwen32b-tp4-4x4090-v083"],
                          cases["vllm-10517-llama31-8b-3090-20k"]])
    section = report if "per_case" in report else report["vllm"]  # the default engine's cases: top level or own
    assert [case["gpus"] for case in section["per_case"]] == [4, 1]
    setups = {row["id"]: row["setup"] for row in intervals.observations(report)}
    assert setups == {"vllm-15457-dsr1-distill-qwen32b-tp4-4x4090-v083": "several GPUs",
                      "vllm-10517-llama31-8b-3090-20k": "1 GPU"}


# --- every interval within what can exist (issue 27) ------------------------------------------------------------
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st  # noqa: E402

_SETUPS = st.tuples(
    st.sampled_from([("vllm", {}), ("sglang", {}), ("llamacpp", {"gguf_type": "Q4_K_M"}),
                     ("llamacpp", {"gguf_type": "Q8_0"})]),
    st.sampled_from(["Qwen/Qwen3-8B", "Qwen/Qwen2.5-7B-Instruct-AWQ", "meta-llama/Llama-3.1-70B-Instruct",
                     "google/gemma-3-27b-it", "Qwen/Qwen3-0.6B"]),
    st.sampled_from(["RTX 4090", "H100", "RTX 3060", "A10G"]),
    st.sampled_from([4096, 32768, None]),
)


@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_SETUPS)
def test_every_interval_lies_on_the_card_and_holds_its_figure(setup):
    from vram_detective import api
    from vram_detective.errors import EngineRefused
    from vram_detective.hardware import find_gpu

    (engine, extra), model, gpu, context = setup
    length = ({"max_model_len": context} if engine == "vllm" else {"context_length": context} if engine == "sglang"
              else {"n_ctx": context}) if context else {}
    try:
        b = api.explain(model, gpu, engine=engine, **extra, **length)
    except EngineRefused:
        return
    card = find_gpu(gpu)
    on_the_gpu = {"weights_gib": card.cuda_total_bytes / 2**30, "kv_cache_gib": card.cuda_total_bytes / 2**30,
                  "nvidia_smi_used_mib": card.nvidia_smi_total_mib}
    for item in b.intervals:
        assert 0 <= item.low <= item.value <= item.high, item
        if item.key in on_the_gpu:  # a figure past the card (weights that do not fit) is its own upper end
            assert item.high <= max(on_the_gpu[item.key], item.value), item
    if b.failure is not None:
        assert "nvidia_smi_used_mib" not in {item.key for item in b.intervals}
    # one pool: the token, block and concurrency intervals are the GiB interval times each figure's own factor
    # (tokens = GiB / bytes per token, blocks = tokens / block size, ...): the same relative ends, so a GiB
    # interval and a token interval imply each other (before: GiB +-72 % against tokens +-6 % on one pool)
    by_key = {item.key: item for item in b.intervals}
    pool = by_key.get("kv_cache_gib")
    for key in ("kv_cache_tokens", "num_gpu_blocks", "max_concurrency"):
        other = by_key.get(key)
        if pool is None or other is None:
            continue
        assert other.low / other.value == pytest.approx(pool.low / pool.value), (key, other, pool)
        assert other.high / other.value == pytest.approx(pool.high / pool.value), (key, other, pool)

