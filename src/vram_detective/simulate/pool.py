"""The pool a simulation runs against: what a prediction (a Breakdown) says the engine pre-allocates.

`pool_from_breakdown` asks the Breakdown's engine (engines/<engine>/simulation.py), which reads only Breakdown
fields: its figures (vLLM's num_gpu_blocks, block_size, num_cpu_blocks; SGLang's max_total_num_tokens /
page_size; llama.cpp's cells and slots), the settings, and vLLM's KV component reason, which names the KV-cache
groups ("N blocks x B B; G group(s): 9 sliding (window 1024) + 1 padding, ..., 10 full", plan.py).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ..breakdown import Breakdown


@dataclass(frozen=True)
class KvGroup:
    """One KV-cache group of vLLM V1's hybrid manager: every group draws its blocks from the one pool."""

    kind: str  # "full", "sliding", "chunked_local", "mla", "mamba"
    window: int | None = None  # tokens of the sliding window / local chunk
    layers: int = 0


@dataclass(frozen=True)
class PoolSpec:
    engine: str  # the registry name of the engine whose simulator runs it (engines/base.py PoolSimulation)
    version: str  # the release, as the Breakdown names it
    variant: str  # vLLM "v1"/"v0"; "" elsewhere
    num_blocks: int  # blocks (vLLM), pages (SGLang: tokens / page_size), cells / slot (llama.cpp: n_ctx)
    block_size: int  # tokens per block / page (1 for llama.cpp cells)
    block_bytes: int  # bytes of one block id across all groups and layers
    max_num_seqs: int  # max_num_seqs / max_running_requests / llama.cpp slots (-np)
    max_num_batched_tokens: int  # per-step token budget (SGLang chunked_prefill_size; llama.cpp n_batch)
    max_model_len: int
    groups: tuple[KvGroup, ...] = (KvGroup("full"),)
    num_cpu_blocks: int = 0  # V0 swap space in blocks
    prefix_caching: bool | None = None  # None: the release's default (rules.py)
    chunked_prefill: bool | None = None
    preemption_mode: str | None = None  # V0: "recompute" / "swap"; None: as the release picks
    unified_kv: bool = False  # llama.cpp --kv-unified: slots share all n_ctx cells
    context_shift: bool = True  # llama.cpp --context-shift
    # tokens scheduled but not yet settled that a sliding window's admission cap reserves for (vLLM 0.26+:
    # max_concurrent_batches x max_num_batched_tokens); 0: one step's max_num_batched_tokens
    in_flight_tokens: int = 0

    @property
    def pool_bytes(self) -> int:
        return self.num_blocks * self.block_bytes

    @property
    def pool_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def with_blocks(self, num_blocks: int) -> PoolSpec:
        return replace(self, num_blocks=num_blocks)


_GROUP = re.compile(r"(\d+) (\w+)(?: \(window (\d+)\))?")


def groups_from_reason(reason: str) -> tuple[KvGroup, ...]:
    """vLLM's KV component reason -> its groups (plan.py writes them; "" or no groups: one full group)."""
    _, _, listed = reason.partition("group(s):")
    groups = []
    for part in listed.split(","):
        match = _GROUP.search(part)
        if match:
            window = int(match.group(3)) if match.group(3) else None
            groups.append(KvGroup(match.group(2), window, int(match.group(1))))
    return tuple(groups) or (KvGroup("full"),)


def setting(b: Breakdown, name: str, default: object = None) -> object:
    """The Breakdown's setting `name`, `default` when it has none (or None)."""
    try:
        value = b.setting(name)
    except KeyError:
        return default
    return default if value is None else value


def pool_from_breakdown(b: Breakdown, **overrides) -> PoolSpec:
    """The pool a Breakdown predicts, as its engine builds it (engines/<engine>/simulation.py); `overrides`
    replace PoolSpec fields (e.g. prefix_caching=False). errors.NotOffered for an engine without a simulator."""
    from ..engines import get_engine
    from ..engines.base import pool_simulation

    return replace(pool_simulation(get_engine(b.engine_name)).pool(b), **overrides)
