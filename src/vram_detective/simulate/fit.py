"""`fit --workload`: the cheapest setting of the engine's pool lever that serves a workload without
preemption (or within a preemption budget), instead of the worst case of max_model_len requests.

The search, in three parts:
1. the fewest KV blocks that serve the workload: bisection over the pool size, re-simulating
   (verdict.smallest_pool, started at the baseline run's peak blocks in use);
2. the smallest value of the engine's lever whose *predicted* pool holds that many blocks: bisection over
   the lever's grid, predictions only (vLLM --gpu-memory-utilization in steps of 0.01, or
   --kv-cache-memory-bytes when the launch line pins it; SGLang --mem-fraction-static in steps of 0.01;
   llama.cpp -c in steps of 256 cells at the given -np);
3. one simulation at that setting's predicted pool to confirm it (a step up the grid when it does not).

`fit_workload(model, gpu, workload, ...)` is what a command calls; `fit_pool(predict, workload, ...)` takes
any `predict(settings) -> Breakdown` (the advisor's own prediction function, for instance).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from ..breakdown import Breakdown
from ..engines import DEFAULT_ENGINE
from ..units import GIB
from . import simulate
from .cost import CostModel, cost_for
from .pool import pool_from_breakdown
from .result import SimulationResult
from .verdict import smallest_pool
from .workloads import Workload

Predict = Callable[[dict], Breakdown]  # settings added to the pinned ones -> the prediction
CONFIRM_STEPS = 4  # grid steps tried above the predicted value when the confirming run still preempts


@dataclass(frozen=True)
class Lever:
    setting: str  # the engine's setting name
    flag: str  # as the user types it
    grid: Sequence  # ascending values: a bigger value, a bigger pool

    def text(self, value) -> str:
        return f"{self.flag} {value}"


@dataclass(frozen=True)
class WorkloadFit:
    lever: Lever
    value: object | None  # the cheapest value of the lever; None when none serves the workload
    breakdown: Breakdown | None  # the prediction at that value
    result: SimulationResult | None  # the workload on that pool
    needed_blocks: int  # the fewest blocks that serve the workload (0: not even the search's ceiling)
    needed_bytes: int
    budget: float  # fraction of requests allowed to be preempted
    simulations: int
    reason: str = ""  # why there is no value

    @property
    def feasible(self) -> bool:
        return self.value is not None

    @property
    def pool_bytes(self) -> int:
        return pool_from_breakdown(self.breakdown).pool_bytes if self.breakdown is not None else 0

    def to_dict(self) -> dict:
        return {"lever": self.lever.setting, "flag": self.lever.flag, "value": self.value,
                "needed_blocks": self.needed_blocks, "needed_bytes": self.needed_bytes, "pool_bytes": self.pool_bytes,
                "budget": self.budget, "simulations": self.simulations, "feasible": self.feasible,
                "reason": self.reason, "preempted_fraction": self.result.preempted_fraction if self.result else None,
                "held_back_requests": self.result.held_back_requests if self.result else None}


def lever_for(b: Breakdown, pinned: dict, needed_blocks: int) -> Lever:
    """The setting that sizes the engine's pool (a pinned exact size wins over a fraction), as the Breakdown's
    engine names it (engines/<engine>/simulation.py)."""
    return simulation_of(b).lever(b, pinned, needed_blocks)


def simulation_of(b: Breakdown):
    """The Breakdown's engine's PoolSimulation (errors.NotOffered when the engine has none)."""
    from ..engines import get_engine
    from ..engines.base import pool_simulation

    return pool_simulation(get_engine(b.engine_name))


def fit_pool(predict: Predict, workload: Workload, *, pinned: dict | None = None, seed: int = 0,
             budget: float = 0.01, cost: CostModel | None = None,
             baseline: tuple[Breakdown, SimulationResult] | None = None) -> WorkloadFit:
    """The cheapest lever value serving `workload` (module docstring). `baseline`: a prediction with the
    pinned settings and its run, when the caller has them."""
    pinned = dict(pinned or {})
    if baseline is None:
        b = predict({})
        base_pool = pool_from_breakdown(b)
        result = simulate(base_pool, workload, seed=seed, cost=cost)
        runs = 1
    else:
        (b, result), runs = baseline, 0
        base_pool = pool_from_breakdown(b)
    start = (result.peak_blocks + max(2, result.peak_blocks // 50)
             if result.preemptions == 0 and result.held_back_requests == 0 else None)
    verdict = smallest_pool(base_pool, workload, seed=seed, budget=budget, cost=cost, start=start,
                            held_back_counts=True)
    runs += verdict.simulations
    needed = verdict.blocks
    lever = lever_for(b, pinned, max(needed, base_pool.num_blocks))
    words = simulation_of(b).words
    if not needed:
        return WorkloadFit(lever, None, None, None, 0, 0, budget, runs,
                           f"even {4 * base_pool.num_blocks} blocks {words.verb} or hold back more than {budget:.0%} "
                           "of the requests")
    index, at = _smallest_value(predict, lever, needed)
    if index is None:
        why = (f"{at.engine_label} would refuse to start at the smallest {lever.flag} that gives that pool: "
               f"{at.failure.message.splitlines()[0]}" if at is not None else
               f"no {lever.flag} value gives a pool of {needed} blocks on this card")
        return WorkloadFit(lever, None, None, None, needed, needed * base_pool.block_bytes, budget, runs, why)
    for step in range(CONFIRM_STEPS + 1):
        confirm = simulate(pool_from_breakdown(at), workload, seed=seed, cost=cost)
        runs += 1
        good = confirm.short_of_memory_fraction <= budget and confirm.finished == confirm.requests
        if good or index + 1 >= len(lever.grid) or step == CONFIRM_STEPS:
            break
        index += 1
        at = predict({lever.setting: lever.grid[index]})
    return WorkloadFit(lever, lever.grid[index], at, confirm, needed, needed * base_pool.block_bytes, budget, runs,
                       "" if good else f"the confirming run still {words.verbs}")


def _smallest_value(predict: Predict, lever: Lever, blocks: int) -> tuple[int | None, Breakdown | None]:
    """Bisection over the lever's grid for the first value whose predicted pool starts and holds `blocks`.
    The engine may refuse at either end: too small a pool for one request (vLLM) or, at the top, no room left
    for CUDA graphs (SGLang's --mem-fraction-static 0.95+): the search starts from the largest value that
    starts, so a refusal at the top does not hide the smaller values that serve. (None, the refusing
    prediction) when no value that holds the blocks starts."""
    def sized(index: int) -> Breakdown | None:
        try:
            b = predict({lever.setting: lever.grid[index]})
        except ValueError:
            return None
        return b if pool_from_breakdown(b).num_blocks >= blocks else None

    high = len(lever.grid) - 1
    best = refused = sized(high)
    while best is not None and best.failure is not None and high > 0:  # refused at the top: step down
        high -= 1
        best = sized(high)
    if best is None or best.failure is not None:
        return None, refused
    low = -1
    while high - low > 1:
        mid = (low + high) // 2
        found = sized(mid)
        if found is not None and found.failure is None:
            high, best = mid, found
        else:
            low = mid
    return high, best


def fit_workload(model: str, gpu, workload: Workload, *, engine: str = DEFAULT_ENGINE,
                 engine_version: str | None = None, settings: dict | None = None, seed: int = 0,
                 budget: float = 0.01, cost: CostModel | None = None, **explain_options) -> WorkloadFit:
    """The cheapest pool setting for `model` on `gpu` serving `workload` (`settings` pinned as given;
    `explain_options`: api.explain's gpu_memory / vllm_engine / source options)."""
    from .. import api

    pinned = dict(settings or {})

    def predict(extra: dict) -> Breakdown:
        return api.explain(model, gpu, engine=engine, engine_version=engine_version, **explain_options,
                           **{**pinned, **extra})

    return fit_pool(predict, workload, pinned=pinned, seed=seed, budget=budget, cost=cost or default_cost(predict({})))


def default_cost(b: Breakdown) -> CostModel:
    """cost.py's defaults for the prediction's card, weights per GPU and tensor-parallel size."""
    tp = 1
    for name in ("tensor_parallel_size", "tp_size"):
        try:
            tp = int(b.setting(name) or 1)
            break
        except (KeyError, TypeError, ValueError):
            continue
    return cost_for(b.gpu_name, b.weights_bytes, tp)


def shortfall_words(engine: str):
    """How the engine words a request the pool was too small for (engines/base.py ShortfallWords)."""
    from ..engines import get_engine
    from ..engines.base import pool_simulation

    return pool_simulation(get_engine(engine)).words


def budget_words(budget: float, words=None) -> str:
    from ..engines.base import ShortfallWords

    words = words or ShortfallWords()
    if budget <= 0:
        return f"with no {words.event}"
    if abs(budget - 0.01) < 1e-9:
        return f"with no {words.event} at the 99th percentile"
    return f"with at most {budget:.1%} of the requests {words.some} or held back for memory"


def verdict_line(result: SimulationResult, fit: WorkloadFit) -> str:
    """'your traffic peaks at 3.1 GiB of the 14.6 GiB pool; a pool of 4 GiB (--gpu-memory-utilization 0.42 on
    this card) serves it with no preemption at the 99th percentile', in the engine's words."""
    words = shortfall_words(result.engine)
    pool_gib = result.pool_blocks * result.block_bytes / GIB
    if result.preemptions:
        head = (f"your traffic {words.full.format(pool=f'{pool_gib:.1f} GiB')} {result.preempted_requests} of "
                f"{result.requests} requests ({result.preempted_fraction:.1%}) {words.happened}")
    else:
        head = f"your traffic peaks at {result.peak_bytes / GIB:.1f} GiB of the {pool_gib:.1f} GiB pool"
    if not fit.feasible:
        return f"{head}; {fit.reason}"
    return (f"{head}; a pool of {fit.needed_bytes / GIB:.1f} GiB ({fit.lever.text(fit.value)} on this card) "
            f"serves it {budget_words(fit.budget, words)}")
