"""SGLang retraction and llama.cpp slots on hand-checked traces; the pool read from a real prediction."""
from dataclasses import replace

import pytest

from vram_detective.api import explain
from vram_detective.simulate import CostModel, PoolSpec, Request, Workload, pool_from_breakdown, simulate
from vram_detective.simulate.pool import groups_from_reason
from vram_detective.simulate.rules import rules_for
from vram_detective.simulate.verdict import flags_for_bytes

STEP = CostModel(decode_step_s=1.0, per_seq_s=0.0, prefill_tokens_per_s=1e12)


def trace(*requests):
    return Workload("trace", trace=tuple(requests), duration=10.0)


def test_sglang_retracts_the_request_with_the_fewest_outputs():
    # 9 pages of 16 tokens, new_token_ratio held at 0.1 (as after a long decay): b (16 + 60 tokens, 5 pages)
    # is admitted next to a (16 + 100, 8 pages at its end); together they outgrow the pool, and b, which
    # arrived later, has fewer outputs: it is retracted
    p = PoolSpec("sglang", "0.5.11", "", num_blocks=9, block_size=16, block_bytes=100, max_num_seqs=8,
                 max_num_batched_tokens=512, max_model_len=4096)
    a, b = Request(0.0, 16, 100), Request(2.0, 16, 60)
    rules = replace(rules_for(p), new_token_ratio=(0.1, 1.0, 1))
    result = simulate(p, trace(a, b), rules, cost=STEP)
    assert result.preemptions >= 1
    assert result.preemption_log[0].request == 1 and result.preemption_log[0].mode == "retract"
    assert result.finished == 2


def test_sglang_admission_reserves_future_outputs():
    # 12 free pages: a 40-token prompt asking 200 new tokens needs ceil(240/16) = 15 pages at admission
    p = PoolSpec("sglang", "0.5.11", "", num_blocks=12, block_size=16, block_bytes=100, max_num_seqs=8,
                 max_num_batched_tokens=512, max_model_len=4096)
    result = simulate(p, trace(Request(0.0, 40, 200)), cost=STEP)
    assert result.finished == 0 and "refused" in result.notes[-1]


def test_llamacpp_slot_context_shift():
    # 2 slots of 64 cells: a 50-token prompt generating 30 fills its slot at 64 and shifts (drops half)
    p = PoolSpec("llamacpp", "0.3.16", "", num_blocks=128, block_size=1, block_bytes=10, max_num_seqs=2,
                 max_num_batched_tokens=512, max_model_len=64)
    result = simulate(p, trace(Request(0.0, 50, 30)), cost=STEP)
    assert result.preemptions == 1 and result.preemption_log[0].mode == "context shift"
    assert result.peak_blocks == 63  # the shift happens when the 64th cell would be used
    assert result.finished == 1


def test_llamacpp_shifts_and_truncated_prompts_count_per_request():
    # 2 slots of 64 cells: two 50-token prompts generating 30 each shift once (two requests short of cells, not one
    # shared "request -1"); a 100-token prompt is truncated to 63 cells: the slot could not hold it
    p = PoolSpec("llamacpp", "0.3.16", "", num_blocks=128, block_size=1, block_bytes=10, max_num_seqs=2,
                 max_num_batched_tokens=512, max_model_len=64)
    shifted = simulate(p, trace(Request(0.0, 50, 30), Request(0.0, 50, 30)), cost=STEP)
    assert (shifted.preemptions, shifted.preempted_requests) == (2, 2)
    truncated = simulate(p, trace(Request(0.0, 100, 5)), cost=STEP)
    # truncated to 63 cells, its first new token fills the slot and shifts: two events, one request
    assert [event.mode for event in truncated.preemption_log] == ["prompt truncated", "context shift"]
    assert (truncated.preempted_requests, truncated.preempted_fraction) == (1, 1.0)


def test_llamacpp_smallest_pool_holds_the_longest_request():
    # the verdict's search must not call a pool that truncates prompts (or shifts) "enough"
    from vram_detective.simulate.verdict import smallest_pool

    p = PoolSpec("llamacpp", "0.3.16", "", num_blocks=4096, block_size=1, block_bytes=10, max_num_seqs=1,
                 max_num_batched_tokens=512, max_model_len=4096)
    # 200 requests: one shared "request -1" for every shift was 0.5 % of them, under the 1 % budget
    requests = (Request(float(i), 300 + 100 * (i % 8), 20) for i in range(200))
    verdict = smallest_pool(p, trace(*requests), cost=STEP)
    assert verdict.blocks >= 1000 + 20  # the 1,000-token prompt and its 20 new tokens in the one slot


def test_llamacpp_third_request_waits_for_a_slot():
    p = PoolSpec("llamacpp", "0.3.16", "", num_blocks=1024, block_size=1, block_bytes=10, max_num_seqs=2,
                 max_num_batched_tokens=512, max_model_len=512)
    result = simulate(p, trace(*(Request(0.0, 10, 5) for _ in range(3))), cost=STEP)
    assert result.peak_running == 2 and result.peak_waiting == 1 and result.finished == 3


def test_llamacpp_unified_pool_running_out_fails_every_slot():
    # --kv-unified, 1,000 cells for 2 slots: two 600-token prompts need 1,200 cells; llama_decode finds no
    # KV slot even at batch 1 and server.cpp fails both requests ("Context size has been exceeded.")
    p = PoolSpec("llamacpp", "0.3.16", "", num_blocks=1000, block_size=1, block_bytes=10, max_num_seqs=2,
                 max_num_batched_tokens=2048, max_model_len=1000, unified_kv=True)
    result = simulate(p, trace(Request(0.0, 600, 5), Request(0.0, 600, 5), Request(5.0, 300, 5)), cost=STEP)
    assert (result.requests, result.finished) == (3, 1)  # the third, alone, is served
    assert any(note.startswith("2 request(s) failed with 'Context size has been exceeded.'") for note in result.notes)
    assert result.peak_blocks <= 1000
    assert simulate(replace(p, num_blocks=1300), trace(Request(0.0, 600, 5), Request(0.0, 600, 5)),
                    cost=STEP).finished == 2


def test_pool_from_a_vllm_prediction():
    b = explain("google/gemma-3-27b-it", "H100", max_model_len=16384)
    p = pool_from_breakdown(b)
    # 8,173 blocks: the profile's peak holds the 32 dummy images (0.14 GiB, 118 blocks of 1.25 MiB) under the sampler
    assert (p.num_blocks, p.block_size, p.max_num_seqs, p.max_num_batched_tokens) == (8173, 16, 1024, 8192)
    assert p.block_bytes == 1310720 and p.pool_bytes == b.components.find("kv_cache").bytes
    assert [g.kind for g in p.groups].count("sliding") == 6 and p.groups[-1].kind == "full"
    assert p.groups[0].window == 1024
    flags = flags_for_bytes(b, p.pool_bytes // 2)
    assert flags["kv_cache_memory_bytes"] == p.pool_bytes // 2
    assert 0.5 < flags["gpu_memory_utilization"] < 0.92


def test_group_reason_parsing():
    assert groups_from_reason("10 blocks x 5 B; 1 group(s): 36 full")[0].layers == 36
    assert groups_from_reason("")[0].kind == "full"
