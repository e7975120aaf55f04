"""The pool a simulation runs against: what a prediction (a Breakdown) says the engine pre-allocates.

`pool_from_breakdown` reads only Breakdown fields: the engine figures (vLLM's num_gpu_blocks, block_size,
num_cpu_blocks; SGLang's max_total_num_tokens / page_size; llama.cpp's n_ctx / n_parallel when those
engines publish them), the settings, and the KV component's reason, which names the KV-cache groups
("N blocks x B B; G group(s): 9 sliding (window 1024) + 1 padding, ..., 10 full", plan.py).
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
    engine: str  # "vllm", "sglang", "llamacpp"
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


def _setting(b: Breakdown, name: str, default: object = None) -> object:
    try:
        value = b.setting(name)
    except KeyError:
        return default
    return default if value is None else value


def pool_from_breakdown(b: Breakdown, **overrides) -> PoolSpec:
    """The pool a Breakdown predicts; `overrides` replace PoolSpec fields (e.g. prefix_caching=False)."""
    builders = {"vllm": _vllm_pool, "sglang": _sglang_pool, "llamacpp": _llamacpp_pool, "llama.cpp": _llamacpp_pool}
    if b.engine_name not in builders:
        from ..errors import NotOffered

        raise NotOffered(f"simulate: {b.engine_label}'s scheduler is not modelled (no pool simulator for it)")
    return replace(builders[b.engine_name](b), **overrides)


def _vllm_pool(b: Breakdown) -> PoolSpec:
    block_size = int(b.figure("block_size") or 16)
    blocks = int(b.figure("num_gpu_blocks") or 0)
    kv = b.components.find("kv_cache")
    groups = groups_from_reason(kv.reason) if kv is not None else (KvGroup("full"),)
    block_bytes = kv.bytes // blocks if kv is not None and blocks else b.kv_bytes_per_token * block_size
    return PoolSpec(
        engine="vllm", version=b.engine_version, variant=str(b.figure("engine") or "v1"), num_blocks=blocks,
        block_size=block_size, block_bytes=block_bytes, max_num_seqs=int(_setting(b, "max_num_seqs", 256)),
        max_num_batched_tokens=int(_setting(b, "max_num_batched_tokens", b.max_model_len)),
        max_model_len=b.max_model_len, groups=groups, num_cpu_blocks=int(b.figure("num_cpu_blocks") or 0),
        prefix_caching=_setting(b, "enable_prefix_caching"), chunked_prefill=_setting(b, "enable_chunked_prefill"),
        preemption_mode=_setting(b, "preemption_mode"),
    )


def _sglang_pool(b: Breakdown) -> PoolSpec:
    page = int(b.figure("page_size") or _setting(b, "page_size", 1))
    tokens = int(b.figure("max_total_num_tokens") or b.kv_cache_tokens)
    return PoolSpec(
        engine="sglang", version=b.engine_version, variant="", num_blocks=tokens // page, block_size=page,
        block_bytes=b.kv_bytes_per_token * page,
        max_num_seqs=int(b.figure("max_running_requests") or _setting(b, "max_running_requests", 4096)),
        max_num_batched_tokens=_sglang_step_tokens(b), max_model_len=b.max_model_len,
        prefix_caching=not _setting(b, "disable_radix_cache", False), chunked_prefill=True,
    )


def _sglang_step_tokens(b: Breakdown) -> int:
    """A prefill step's tokens: chunked_prefill_size; 0 or -1 turn chunking off (scheduler.py 0.5.23 sets it to
    None when <= 0), and the scheduler's PrefillAdder then takes a whole prompt, however long, as a batch's first."""
    chunk = int(_setting(b, "chunked_prefill_size", 8192))
    return chunk if chunk > 0 else max(b.max_model_len, 1)


def _llamacpp_pool(b: Breakdown) -> PoolSpec:
    n_ctx = int(b.figure("n_ctx") or _setting(b, "n_ctx", b.kv_cache_tokens))
    slots = int(b.figure("n_parallel") or _setting(b, "n_parallel", 1))
    return PoolSpec(
        engine="llamacpp", version=b.engine_version, variant="", num_blocks=n_ctx, block_size=1,
        block_bytes=b.kv_bytes_per_token, max_num_seqs=slots, max_num_batched_tokens=int(_setting(b, "n_batch", 2048)),
        max_model_len=n_ctx if _setting(b, "kv_unified", False) else n_ctx // slots,
        unified_kv=bool(_setting(b, "kv_unified", False)), context_shift=bool(_setting(b, "context_shift", True)),
        prefix_caching=True,
    )
