"""The scheduler and KV-cache-manager rules the simulator follows, read from each engine's one rule table
(the "scheduler (simulate)" rows of engines/<engine>/releases.py, rules named scheduler_<field>) through the
engine interface: `rules_for(pool)` asks the table the pool's engine names (engines/base.py PoolSimulation
rule_table: the table, the engine path, the release) for every field below.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from functools import lru_cache

PREFIX = "scheduler_"


@dataclass(frozen=True)
class EngineRules:
    engine: str
    prefix_caching: bool  # the release's default when the launch line says nothing
    chunked_prefill: bool
    mixed_prefill_decode: bool  # prefills and decodes share one step (V1, chunked prefill)
    reserved_blocks: int  # blocks the pool keeps for itself (V1's null block)
    admission_watermark: float  # fraction of blocks kept free when admitting (V0 BlockSpaceManager)
    preemption: str  # "recompute", "swap" (V0 with CPU blocks), "retract" (SGLang), "none" (llama.cpp)
    sliding_window_frees: bool  # blocks wholly outside a sliding window go back to the pool
    victim: str  # which running request is preempted: "newest" (vLLM), "fewest_outputs" (SGLang)
    new_token_ratio: tuple[float, float, int] = (0.0, 0.0, 1)  # SGLang: init, min factor, decay steps
    retract_decode_steps: int = 0
    clip_max_new_tokens: int = 0
    hash_at_schedule: bool = False  # a full block's hash is registered when it is scheduled, not after the step
    no_admission_after_preemption: str = "prefill"  # a step admits nothing after a preemption by: "prefill", "any"
    admission_fits_prompt: bool = False  # a waiting request enters only if its whole prompt fits the free blocks
    lookup_counts_preempted: bool = True  # the engine's prefix-cache counter counts a preempted request's lookups
    lookup_counts_retries: bool = True  # ... and a lookup that admits nothing (a blocked head's every retry)
    lookup_in_blocks: bool = False  # ... in full blocks (the lookup's block hashes), not tokens
    admission_caps_window: bool = False  # the whole-prompt gate counts a window's group as its window's blocks
    free_uncached_first: bool = False
    keeps_duplicates: bool = False  # a block filled with a hash already cached is a cached copy, not anonymous  # a freed block without a hash goes to the front of the free queue
    swaps_duplicates: bool = False  # ... is freed, the request holding the cached block instead
    caches_decodes: bool = True  # a block a decode fills is cached then (SGLang: only when the request finishes)
    sources: tuple[str, ...] = ()


_FIELDS = tuple(f.name for f in fields(EngineRules) if f.name not in ("engine", "sources"))


def _release(releases, version: str):
    """The engine's release for the pool's version text; the newest when the text is not one of its releases
    (llama.cpp pools may carry llama-cpp-python's version rather than a build number)."""
    try:
        return releases.resolve(version or None)
    except ValueError:
        return releases.resolve(None)


@lru_cache(maxsize=64)
def rules_at(engine: str, path: str, version: str) -> EngineRules:
    """Every rule in `engine`'s rule table (on engine path `path`, "" when the engine has one) at `version`."""
    from ..engines import get_engine

    releases = get_engine(engine).releases
    at = _release(releases, version)
    ruleset = releases.rules(at, path) if path else releases.rules(at)
    values: dict[str, object] = {}
    sources: list[str] = []
    for name in _FIELDS:
        value = releases.rule_at(at, PREFIX + name, path or None, default=None)
        if value is not None:
            values[name] = value
            source = getattr(ruleset, "source", None)
            sources.append(source(PREFIX + name) if source else f"{engine} releases.py {PREFIX + name}")
    if not values:
        raise ValueError(f"no simulator rules for {engine} {path}")
    return EngineRules(engine=engine, sources=tuple(sources), **values)


def rules_for(pool) -> EngineRules:
    """The rules of the pool's release, from the rule table its engine names (Ollama: llama.cpp's at the build
    it vendors)."""
    from ..engines import get_engine
    from ..engines.base import pool_simulation

    return rules_at(*pool_simulation(get_engine(pool.engine)).rule_table(pool))
