"""vLLM 0.26+: a sliding window's admission cap reserves for every batch in flight (VllmConfig.max_in_flight_tokens
= max_concurrent_batches x max_num_batched_tokens, handed to the KVCacheManager by sched/scheduler.py 0.26.0-0.33.0);
before 0.26.0, one batch (max_num_batched_tokens). The simulator's pool carries the tokens in flight as the plan
sized the window's blocks."""
from __future__ import annotations

from vram_detective import api
from vram_detective.simulate import pool_from_breakdown
from vram_detective.simulate.stepwise import step_rows


def _trace(async_scheduling: bool) -> dict:
    # a 160-token prompt, then a 1,500-token one: 94 blocks of 16 in the full group, and a 16-token window's group
    # counts at most cdiv(min(15 + X, max_model_len), 16) + 1 blocks at admission: 34 with X = 512 (one batch),
    # 66 with X = 1,024 (two)
    return {"name": "cap", "num_blocks": 161, "block_size": 16, "max_num_seqs": 8,
            "max_num_batched_tokens": 512, "max_model_len": 32768, "prefix_caching": False,
            "groups": [["full", None], ["sliding", 16]], "requests": [[160, 4, -1, 0], [1500, 4, -1, 0]],
            "async_scheduling": async_scheduling}


def test_two_batches_in_flight_double_the_windows_admission_cap_from_0_26():
    # 161 blocks, the null block reserved: 160 free. The first request takes 10 + 10 in the first step, 140 left:
    # with one batch in flight the second one's 94 + 34 = 128 fit at once; with two, its 94 + 66 = 160 wait for
    # the first request to finish (alone they fit the pool: it is not refused)
    one = step_rows(_trace(False), "0.33.0")
    two = step_rows(_trace(True), "0.33.0")
    assert [row[1:3] for row in one[:2]] == [[2, 0], [2, 0]]  # running, waiting
    assert [row[1:3] for row in two[:2]] == [[1, 1], [1, 1]]
    assert sorted(i for row in two for i in row[5]) == [0, 1]  # both finish
    # 0.25.0 has no in-flight factor: async scheduling changes nothing
    assert step_rows(_trace(True), "0.25.0") == step_rows(_trace(False), "0.25.0")


def test_the_pool_carries_the_tokens_in_flight_the_plan_sized_the_window_with():
    def pool(version: str, **settings):
        return pool_from_breakdown(api.explain("google/gemma-3-4b-it", "L4", engine_version=version,
                                               max_model_len=32768, **settings))

    # async scheduling is on by default from 0.14.0; it doubles the tokens in flight from 0.26.0
    assert (pool("0.25.0").max_num_batched_tokens, pool("0.25.0").in_flight_tokens) == (2048, 2048)
    assert (pool("0.33.0").max_num_batched_tokens, pool("0.33.0").in_flight_tokens) == (2048, 4096)
    assert pool("0.33.0", max_num_batched_tokens=4096).in_flight_tokens == 8192


def test_the_real_scheduler_reserves_for_two_batches():
    """The committed series of vLLM 0.33.0's own Scheduler on traces run with async scheduling: the simulator
    matches them with two batches in flight (tests/test_scheduler_conformance.py) and not with one."""
    import json
    from pathlib import Path

    from vram_detective.simulate.stepwise import first_divergence

    path = Path(__file__).parent / "fixtures" / "scheduler_conformance" / "vllm-0.33.0.json"
    cases = [c for c in json.loads(path.read_text())["cases"] if c["trace"].get("async_scheduling")]
    assert {c["trace"]["name"] for c in cases} >= {"tight-0-cache-async", "tight-16-cache-async"}
    one_batch = {}
    for case in cases:
        real = [row for repeat, row in case["steps"] for _ in range(repeat)]
        assert first_divergence(real, step_rows(case["trace"], "0.33.0")) is None
        one_batch[case["trace"]["name"]] = first_divergence(real, step_rows(
            dict(case["trace"], async_scheduling=False), "0.33.0"))
    assert one_batch["tight-0-cache-async"] == "step 11: used real 825, simulated 867"
    assert one_batch["tight-16-cache-async"] == "step 213: used real 722, simulated 786"
