"""The simulator's allocation rules on small hand-checked traces (issue 18)."""
from dataclasses import replace

import pytest

from vram_detective.simulate import CostModel, KvGroup, PoolSpec, Request, Workload, simulate
from vram_detective.simulate.arrivals import Arrivals
from vram_detective.simulate.plot import occupancy_plot, sparkline
from vram_detective.simulate.result import Recorder, to_csv, to_json
from vram_detective.simulate.rules import rules_for
from vram_detective.simulate.verdict import smallest_pool
from vram_detective.simulate.vllm import VllmSim
from vram_detective.simulate.workloads import parse_workload

STEP = CostModel(decode_step_s=1.0, per_seq_s=0.0, prefill_tokens_per_s=1e12)  # one second a step


def pool(blocks=100, **kw):
    base = PoolSpec("vllm", "0.11.0", "v1", num_blocks=blocks, block_size=16, block_bytes=1000, max_num_seqs=8,
                    max_num_batched_tokens=64, max_model_len=4096)
    return replace(base, **kw)


def trace(*requests):
    return Workload("trace", trace=tuple(requests), duration=10.0)


def stepper(p, w):
    rec = Recorder(p.num_blocks, 1000, 1.0)
    sim = VllmSim(p, rules_for(p), STEP, Arrivals(w, 0), rec)
    return sim, rec


def test_one_request_exact_blocks_each_step():
    # 40-token prompt, budget 64: one prefill step -> ceil(40/16) = 3 blocks (+1 null block); the first token
    # is sampled there; decode token 41..48 stays in block 3; token 49 (computed 48) needs block 4
    sim, _ = stepper(pool(), trace(Request(0.0, 40, 12)))
    used = []
    sim._step()
    used.append(sim.blocks.used)
    while sim.running:
        sim._step()
        used.append(sim.blocks.used)
    assert used[0] == 1 + 3
    assert used[:9] == [4] * 9  # steps computing tokens 40..47 keep 3 blocks
    assert used[9] == 5 and len(used) == 12  # computing token 48 takes the 4th; 12 outputs = 1 prefill + 11 decodes
    assert used[-1] == 1  # finished: only the null block is held


def test_chunked_prefill_under_the_budget():
    sim, _ = stepper(pool(), trace(Request(0.0, 100, 2)))
    sim._step()
    assert sim.blocks.used - 1 == 4  # 64 tokens this step
    sim._step()
    assert sim.blocks.used - 1 == 7  # ceil(100/16)


def test_shared_prefix_counted_once_and_hit_rate():
    # two requests with the same 64-token system prefix: the second hits 4 blocks, holds 4 + 2 of its own
    a = Request(0.0, 80, 40, "sys", 64, "a")
    b = Request(0.5, 80, 40, "sys", 64, "b")
    sim, rec = stepper(pool(max_num_batched_tokens=200), trace(a, b))
    sim._step()
    sim._step()
    assert len(sim.running) == 2
    assert sim.blocks.used - 1 == 5 + 2  # 5 blocks for a (80 tokens + the first decode) + 2 own blocks of b
    result = simulate(pool(max_num_batched_tokens=200), trace(a, b), cost=STEP)
    assert result.prefix_hit_tokens == 64 and result.prompt_tokens == 160
    assert result.prefix_hit_rate == pytest.approx(0.4)


def test_no_prefix_caching_when_off():
    a = Request(0.0, 80, 4, "sys", 64, "a")
    result = simulate(pool(prefix_caching=False), trace(a, replace(a, arrival=10.0, session="b")), cost=STEP)
    assert result.prefix_hit_tokens == 0


def test_forced_preemption_of_the_newest_request():
    # 9 blocks (1 null): two 60-token requests take 4 blocks each; at 64 computed tokens the first needs
    # a 9th -> none free: the newest running request (1) is preempted by recompute
    p = pool(blocks=9, prefix_caching=False, max_num_batched_tokens=200)
    result = simulate(p, trace(Request(0.0, 60, 20), Request(0.0, 60, 20)), cost=STEP)
    assert result.preemptions >= 1
    first = result.preemption_log[0]
    assert first.request == 1 and first.mode == "recompute"
    assert first.time_s == pytest.approx(5.0)  # step 1 prefills both; decodes at 60..63 need no block; 64 does
    assert "decode of request 0" in first.cause
    assert result.finished == 2


def test_sliding_window_group_frees_blocks_outside_the_window():
    # a full group and a 32-token sliding group: after 200 tokens the sliding group holds 3 blocks, not 13 -
    # freed by the next step's allocate_slots (remove_skipped_blocks), not in the prefill step (vLLM 0.11.0's
    # real scheduler agrees: benchmarks/scheduler_conformance.py)
    p = pool(groups=(KvGroup("full"), KvGroup("sliding", 32)), max_num_batched_tokens=256, prefix_caching=False)
    sim, _ = stepper(p, trace(Request(0.0, 200, 3)))
    sim._step()
    r = next(iter(sim.running.values()))
    assert [r.nblocks - skip for skip in r.skip] == [13, 13] and sim.blocks.used == 1 + 26
    sim._step()
    assert [r.nblocks - skip for skip in r.skip] == [13, 3]  # 200 tokens: full 13; window keeps tokens 169..
    assert r.skip == [0, 10]  # -> the sliding group's blocks 10, 11, 12
    assert sim.blocks.used == 1 + 16  # the null block and the 16 held


def test_v0_swaps_when_asked():
    p = pool(blocks=8, variant="v0", version="0.6.3", prefix_caching=False, max_num_batched_tokens=4096,
             num_cpu_blocks=100, preemption_mode="swap")
    result = simulate(p, trace(Request(0.0, 60, 20), Request(0.0, 60, 20)), cost=STEP)
    assert result.preemption_log[0].mode == "swap"
    assert result.swap_out_bytes == 4 * 1000 and result.swap_in_bytes == 4 * 1000
    assert result.finished == 2


def test_reproducible_with_a_seed_and_exports():
    w = parse_workload("chat:rate=4,duration=30")
    one, two = simulate(pool(2000), w, seed=3), simulate(pool(2000), w, seed=3)
    assert one == two
    assert simulate(pool(2000), w, seed=4) != one
    assert to_csv(one).splitlines()[0].startswith("time_s,blocks_max")
    assert '"peak_blocks"' in to_json(one)
    assert all(len(line) <= 80 for line in occupancy_plot(one).splitlines())
    assert sparkline([0, 4, 8], 3) == " ▄█"


def test_smallest_pool_serves_without_preemption():
    w = parse_workload("chat:rate=3,duration=30")
    verdict = smallest_pool(pool(20000, max_num_seqs=64, max_num_batched_tokens=2048), w, seed=1)
    assert 0 < verdict.blocks < 20000
    smaller = simulate(pool(verdict.blocks - verdict.blocks // 10, max_num_seqs=64, max_num_batched_tokens=2048), w, seed=1)
    assert smaller.preempted_fraction > 0.01


def test_a_request_that_preempts_itself_alone_is_refused_not_retried_forever():
    """Three full groups of 120 blocks of 8 tokens hold 960 tokens a request: longer chat turns preempt
    themselves with nothing else running. Before, they came back from the waiting queue for ever (the run
    never ended); now they are refused, as requests larger than the whole pool."""
    import signal

    def stuck(*_):
        raise TimeoutError("the simulation did not end")

    previous = signal.signal(signal.SIGALRM, stuck)
    signal.alarm(60)
    try:
        small = pool(362, groups=(KvGroup("full"),) * 3, block_size=8, prefix_caching=True, max_num_seqs=256)
        result = simulate(small, parse_workload("chat:rate=1,duration=20"), seed=19, cost=STEP)
        large = simulate(small.with_blocks(3620), parse_workload("chat:rate=1,duration=20"), seed=19, cost=STEP)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    refused = result.requests - result.finished
    assert (result.requests, result.finished) == (55, 10)
    assert f"{refused} request(s) larger than the whole pool were refused" in result.notes
    assert large.requests == 55 and large.finished == 55  # ten times the pool: none refused


def test_engine_counter_counts_every_lookup_and_usage_leaves_out_the_null_block():
    """vLLM's prefix-cache counter counts the blocked head's lookup on every step it retries; the per-admission
    rate counts it once. KV usage as vLLM prints it: (used - null block) / (pool - null block)."""
    # 20 blocks (1 null): a takes 13 (200 tokens + decodes); b (prefix of a's 64 tokens) waits for blocks
    a = Request(0.0, 200, 40, "sys", 64, "a")
    b = Request(0.0, 200, 4, "sys", 64, "b")
    result = simulate(pool(blocks=20, max_num_batched_tokens=512), trace(a, b), cost=STEP)
    assert result.prompt_tokens == 400 and result.prefix_hit_tokens == 64
    assert result.lookup_queries > 2 * 200  # b looked up on every step it waited
    lookups = result.lookup_queries // 200
    assert result.lookup_hits == (lookups - 1) * 64  # a's one lookup missed; each of b's hit its 4 blocks
    assert result.engine_hit_rate > 1.5 * result.prefix_hit_rate  # 31% vs 16%: the two definitions differ
    assert result.reserved_blocks == 1
    assert result.engine_usage_pct(result.peak_blocks) == pytest.approx(100 * (result.peak_blocks - 1) / 19)
    assert result.to_dict()["peak_usage_pct"] == round(100 * (result.peak_blocks - 1) / 19, 1)
