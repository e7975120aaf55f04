"""vLLM's KV pool and scheduler as `simulate` runs them (engines/base.py PoolSimulation): the pool a prediction
pre-allocates (num_gpu_blocks of block_size tokens, its KV-cache groups, V0's CPU swap blocks), the simulator of
its V1 / V0 KV-cache manager (simulate/vllm.py), and the lever that sizes the pool for `fit --workload`."""
from __future__ import annotations


def pool(b):
    from ...simulate.pool import KvGroup, PoolSpec, groups_from_reason, setting

    block_size = int(b.figure("block_size") or 16)
    blocks = int(b.figure("num_gpu_blocks") or 0)
    kv = b.components.find("kv_cache")
    groups = groups_from_reason(kv.reason) if kv is not None else (KvGroup("full"),)
    block_bytes = kv.bytes // blocks if kv is not None and blocks else b.kv_bytes_per_token * block_size
    return PoolSpec(
        engine="vllm", version=b.engine_version, variant=str(b.figure("engine") or "v1"), num_blocks=blocks,
        block_size=block_size, block_bytes=block_bytes, max_num_seqs=int(setting(b, "max_num_seqs", 256)),
        max_num_batched_tokens=int(setting(b, "max_num_batched_tokens", b.max_model_len)),
        max_model_len=b.max_model_len, groups=groups, num_cpu_blocks=int(b.figure("num_cpu_blocks") or 0),
        prefix_caching=setting(b, "enable_prefix_caching"), chunked_prefill=setting(b, "enable_chunked_prefill"),
        preemption_mode=setting(b, "preemption_mode"),
        in_flight_tokens=_in_flight(b),
    )


def _in_flight(b) -> int:
    """The tokens in flight a sliding window's admission cap reserves for, as the plan sized the window's
    blocks; 0 on V0, which has no cap."""
    from ...simulate.pool import setting

    if str(b.figure("engine") or "v1") != "v1":
        return 0
    return in_flight(b.engine_version, int(setting(b, "max_num_batched_tokens", b.max_model_len)),
                     pipeline_parallel_size=int(setting(b, "pipeline_parallel_size", 1)))


def in_flight(release: str, step_tokens: int, async_scheduling: bool | None = None,
              pipeline_parallel_size: int = 1) -> int:
    """kv_groups.in_flight_tokens at `release`: max_num_batched_tokens; from 0.26.0 x max_concurrent_batches
    (2 with async scheduling, the default from 0.14.0, on one pipeline stage)."""
    from .kv_groups import in_flight_tokens
    from .releases import resolve_version

    return in_flight_tokens(resolve_version(release), step_tokens, async_scheduling, pipeline_parallel_size)


def simulator() -> type:
    from ...simulate.vllm import VllmSim

    return VllmSim


def rule_table(pool) -> tuple[str, str, str]:
    """The scheduler_ rows of engines/vllm/releases.py on the pool's engine path (V1 unless it says V0)."""
    return "vllm", pool.variant or "v1", pool.version


def lever(b, pinned: dict, needed_blocks: int):
    """--kv-cache-memory-bytes in whole blocks when the launch line pins it, else --gpu-memory-utilization in
    steps of 0.01."""
    from ...simulate.fit import Lever
    from ...simulate.pool import pool_from_breakdown

    if pinned.get("kv_cache_memory_bytes"):
        block = pool_from_breakdown(b).block_bytes
        return Lever("kv_cache_memory_bytes", "--kv-cache-memory-bytes",
                     range(block, block * (2 * needed_blocks + 2), block))
    return Lever("gpu_memory_utilization", "--gpu-memory-utilization", [k / 100 for k in range(1, 101)])


def flags_for_bytes(b, pool_bytes: int) -> dict:
    """--kv-cache-memory-bytes (exact) and --gpu-memory-utilization (the budget the other terms leave:
    utilization x total = budget - kv pool + pool_bytes)."""
    budget = int(b.figure("budget_bytes") or 0)
    others = budget - b.kv_cache_bytes
    util = (others + pool_bytes) / b.total_gpu_bytes
    return {"kv_cache_memory_bytes": pool_bytes, "gpu_memory_utilization": round(min(1.0, util + 0.005), 2)}
