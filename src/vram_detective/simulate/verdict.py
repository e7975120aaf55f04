"""The verdict: the smallest pool that serves a workload with (almost) no preemption, found by
re-simulating (bisection over the number of blocks), and the launch flags that give that pool."""
from __future__ import annotations

from dataclasses import dataclass

from ..breakdown import Breakdown
from . import simulate
from .cost import CostModel
from .pool import PoolSpec
from .workloads import Workload


@dataclass(frozen=True)
class Verdict:
    blocks: int  # the smallest pool found (None-like 0 when even `limit` blocks preempt too often)
    bytes: int
    preempted_fraction: float  # at that size
    simulations: int
    budget: float  # the preemption budget searched for (fraction of requests ever preempted)


def smallest_pool(pool: PoolSpec, workload: Workload, seed: int = 0, budget: float = 0.01,
                  cost: CostModel | None = None, limit: int | None = None, start: int | None = None,
                  held_back_counts: bool = False) -> Verdict:
    """Bisection on num_blocks: fewest blocks whose run preempts at most `budget` of the requests
    (0.01: no preemption at the 99th percentile of requests). Searches up to `limit` (default 4x the pool).
    `start`: a first upper bound to try (a run's peak blocks in use), which saves the doublings above it.
    `held_back_counts`: requests the pool held back at admission count against the budget too (a small pool
    can avoid preemption by admitting one request at a time)."""
    runs = 0

    def ok(blocks: int) -> tuple[bool, float]:
        nonlocal runs
        runs += 1
        result = simulate(pool.with_blocks(blocks), workload, seed=seed, cost=cost)
        fraction = result.short_of_memory_fraction if held_back_counts else result.preempted_fraction
        return fraction <= budget and result.finished == result.requests, fraction

    top = limit or pool.num_blocks * 4
    low, high = 1, pool.num_blocks
    if start and start < high:
        good, fraction = ok(start)
        if good:
            high = start
        else:
            low = start
            good, fraction = ok(high)
    else:
        good, fraction = ok(high)
    while not good and high < top:
        low, high = high, min(top, high * 2)
        good, fraction = ok(high)
    if not good:
        return Verdict(0, 0, fraction, runs, budget)
    while high - low > max(1, high // 200):  # to within 0.5%
        mid = (low + high) // 2
        good_mid, fraction_mid = ok(mid)
        if good_mid:
            high, fraction = mid, fraction_mid
        else:
            low = mid
    return Verdict(high, high * pool.block_bytes, fraction, runs, budget)


def flags_for_bytes(b: Breakdown, pool_bytes: int) -> dict[str, object]:
    """Launch settings giving a KV pool of `pool_bytes` on the Breakdown's card and model, as its engine sets
    them (engines/<engine>/simulation.py: vLLM --kv-cache-memory-bytes and --gpu-memory-utilization, SGLang
    --mem-fraction-static, llama.cpp the context in cells)."""
    from .fit import simulation_of

    return simulation_of(b).flags_for_bytes(b, pool_bytes)
