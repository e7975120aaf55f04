"""The pool at work: a discrete-event simulation of an engine's KV-cache manager over the predicted pool,
against a request workload (issue 18). The point is memory (how much of the pool the traffic holds, when
the scheduler preempts), not latency: step times come from a simple documented cost model (cost.py).

    from vram_detective.simulate import simulate, pool_from_breakdown, parse_workload
    result = simulate(pool_from_breakdown(breakdown), parse_workload("chat:rate=5"), seed=0)
"""
from __future__ import annotations

import gc
from dataclasses import replace

from .arrivals import Arrivals
from .cost import CostModel, cost_for
from .pool import KvGroup, PoolSpec, pool_from_breakdown
from .result import Recorder, SimulationResult, to_csv, to_json
from .rules import EngineRules, rules_for
from .workloads import Request, Workload, parse_workload, read_trace

__all__ = ["simulate", "pool_from_breakdown", "parse_workload", "read_trace", "PoolSpec", "KvGroup", "Workload",
           "Request", "CostModel", "cost_for", "SimulationResult", "EngineRules", "rules_for", "to_csv", "to_json"]


def simulate(pool: PoolSpec, workload: Workload, engine_rules: EngineRules | None = None, seed: int = 0,
             cost: CostModel | None = None, buckets: int = 240) -> SimulationResult:
    """Run `workload` against `pool` under the engine's rules (default: the pool's release, rules.py), with the
    simulator the pool's engine names (engines/base.py PoolSimulation)."""
    from ..engines import get_engine
    from ..engines.base import pool_simulation

    engine = pool_simulation(get_engine(pool.engine))
    rules = engine_rules or rules_for(pool)
    notes = ["memory, not latency: step times come from a simple per-token cost model (simulate/cost.py)"]
    if engine.grain and pool.block_size < engine.grain:
        # a token-granular pool tracked in pages: at most grain - 1 tokens per live request over
        pool = coarse_pool(pool, engine.grain)
        notes.append(f"{get_engine(pool.engine).label}'s token pool tracked in pages of {engine.grain} tokens")
    # requests are cut at the context length, unless the engine shifts a full slot's context instead (llama.cpp)
    if engine.bounds_requests and workload.max_model_len != pool.max_model_len and pool.max_model_len:
        workload = replace(workload, max_model_len=pool.max_model_len)
    cost = cost or CostModel()
    rec = Recorder(pool.num_blocks, buckets, max(workload.duration, 1.0) / buckets)
    arrivals = Arrivals(workload, seed)
    simulator = engine.simulator()(pool, rules, cost, arrivals, rec)
    # a run makes no reference cycles (its objects go when their last reference does), so the cyclic collector
    # only walks the pool's long lists again and again: a tenth of a multi-group run; paused while it runs
    collecting = gc.isenabled()
    gc.disable()
    try:
        end = simulator.run()
    finally:
        if collecting:
            gc.enable()
    if getattr(simulator, "rejected", 0):
        notes.append(f"{simulator.rejected} request(s) larger than the whole pool were refused")
    if getattr(simulator, "errors", 0):
        notes.append(f"{simulator.errors} request(s) failed with 'Context size has been exceeded.' (the unified KV "
                     "cache ran out: the server fails every slot's request)")
    return replace(rec.result(pool.engine, pool, end, tuple(notes)), reserved_blocks=rules.reserved_blocks)


def coarse_pool(pool: PoolSpec, grain: int) -> PoolSpec:
    scale = grain // pool.block_size
    return replace(pool, num_blocks=pool.num_blocks // scale, block_size=grain, block_bytes=pool.block_bytes * scale)


def _simulator(engine: str) -> type:
    """The simulator class of the engine called `engine` (its PoolSimulation; NotOffered when it has none)."""
    from ..engines import get_engine
    from ..engines.base import pool_simulation

    return pool_simulation(get_engine(engine)).simulator()
