"""The scheduler and KV-cache-manager rules the simulator follows, per engine and release: one table,
each row (engine, path, first release, rule, value, source). `rules_for(pool)` folds the rows up to the
pool's release. Sources were read in the released wheels (`shared/tools/engine-src ENGINE VERSION`).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..units import parse_version


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
    sources: tuple[str, ...] = ()


V1 = "vllm v1/core/sched/scheduler.py"
# (engine, path, first release, rule, value, source)
RULE_ROWS: tuple[tuple[str, str, str, str, object, str], ...] = (
    ("vllm", "v1", "0.0.0", "prefix_caching", True, "vllm/engine/arg_utils.py 0.8.5: V1 turns prefix caching on"),
    ("vllm", "v1", "0.0.0", "chunked_prefill", True, f"{V1} 0.8.0: token budget max_num_batched_tokens per step"),
    ("vllm", "v1", "0.0.0", "mixed_prefill_decode", True, f"{V1} 0.8.0: running first, then waiting, one budget"),
    ("vllm", "v1", "0.0.0", "reserved_blocks", 0, "v1/core/block_pool.py 0.8.0: no null block"),
    ("vllm", "v1", "0.8.5", "reserved_blocks", 1, "v1/core/block_pool.py 0.8.5: null_block = free_block_queue.popleft()"),
    ("vllm", "v1", "0.0.0", "admission_watermark", 0.0, "v1/core/kv_cache_manager.py 0.11.0: no watermark"),
    ("vllm", "v1", "0.0.0", "preemption", "recompute", f"{V1} 0.11.0: running.pop(); num_computed_tokens = 0"),
    ("vllm", "v1", "0.0.0", "victim", "newest", f"{V1} 0.11.0: FCFS preempts self.running.pop()"),
    ("vllm", "v1", "0.0.0", "sliding_window_frees", True,
     "v1/core/single_type_kv_cache_manager.py 0.11.0: SlidingWindowManager.remove_skipped_blocks"),
    ("vllm", "v0", "0.0.0", "prefix_caching", False, "vllm/config.py 0.6.3: enable_prefix_caching=False"),
    ("vllm", "v0", "0.0.0", "chunked_prefill", False, "vllm/config.py 0.6.3: chunked prefill opt-in below 32K"),
    ("vllm", "v0", "0.0.0", "mixed_prefill_decode", False, "vllm/core/scheduler.py 0.6.3: _schedule_default"),
    ("vllm", "v0", "0.0.0", "reserved_blocks", 0, "vllm/core/block_manager.py 0.6.3"),
    ("vllm", "v0", "0.0.0", "admission_watermark", 0.01, "vllm/core/block_manager.py 0.6.3: watermark=0.01"),
    ("vllm", "v0", "0.0.0", "preemption", "recompute",
     "vllm/core/scheduler.py 0.6.3 _preempt: one running sequence -> RECOMPUTE (SWAP for n>1 or when asked)"),
    ("vllm", "v0", "0.0.0", "victim", "newest", "vllm/core/scheduler.py 0.6.3: running_queue.pop()"),
    ("vllm", "v0", "0.0.0", "sliding_window_frees", False, "V0 allocates full attention for every layer"),
    ("sglang", "", "0.0.0", "prefix_caching", True, "sglang mem_cache/radix_cache.py 0.5.11: radix cache on"),
    ("sglang", "", "0.0.0", "chunked_prefill", True, "sglang managers/schedule_policy.py 0.5.11: PrefillAdder"),
    ("sglang", "", "0.0.0", "mixed_prefill_decode", False, "sglang managers/scheduler.py 0.5.11: prefill batch first"),
    ("sglang", "", "0.0.0", "reserved_blocks", 0, "sglang mem_cache/allocator.py 0.5.11"),
    ("sglang", "", "0.0.0", "admission_watermark", 0.0, "sglang: admission reserves new_token_ratio instead"),
    ("sglang", "", "0.0.0", "preemption", "retract", "sglang managers/schedule_batch.py 0.5.11: retract_decode"),
    ("sglang", "", "0.0.0", "victim", "fewest_outputs",
     "sglang managers/schedule_batch.py 0.5.11: sort by (len(output_ids), -len(input)) desc, pop the last"),
    ("sglang", "", "0.0.0", "sliding_window_frees", False, "sglang token pool: full attention"),
    ("sglang", "", "0.0.0", "new_token_ratio", (0.7, 0.14, 600),
     "sglang environ.py 0.5.11: SGLANG_INIT_NEW_TOKEN_RATIO, _MIN_NEW_TOKEN_RATIO_FACTOR, _DECAY_STEPS"),
    ("sglang", "", "0.0.0", "retract_decode_steps", 20, "sglang environ.py 0.5.11: SGLANG_RETRACT_DECODE_STEPS"),
    ("sglang", "", "0.0.0", "clip_max_new_tokens", 4096, "sglang managers/schedule_policy.py 0.5.11: CLIP_MAX_NEW_TOKENS"),
    ("llamacpp", "", "0.0.0", "prefix_caching", True, "llama.cpp tools/server/server.cpp (0.3.16): cache_prompt per slot"),
    ("llamacpp", "", "0.0.0", "chunked_prefill", True, "llama.cpp server: prompt decoded in n_batch chunks"),
    ("llamacpp", "", "0.0.0", "mixed_prefill_decode", True, "llama.cpp server: one batch for all slots"),
    ("llamacpp", "", "0.0.0", "reserved_blocks", 0, "llama.cpp: cells"),
    ("llamacpp", "", "0.0.0", "admission_watermark", 0.0, "llama.cpp: a free slot admits"),
    ("llamacpp", "", "0.0.0", "preemption", "none", "llama.cpp server: a full slot shifts its context, nothing preempts"),
    ("llamacpp", "", "0.0.0", "victim", "none", "llama.cpp server"),
    ("llamacpp", "", "0.0.0", "sliding_window_frees", False, "llama.cpp: SWA cells kept per slot"),
)


@lru_cache(maxsize=64)
def rules_at(engine: str, path: str, version: str) -> EngineRules:
    """Every rule of `engine`/`path` at `version` (the last row whose first release is <= version wins)."""
    at = parse_version(version) if version and version[0].isdigit() else (999, 0, 0)
    values: dict[str, object] = {}
    sources: dict[str, str] = {}
    for row_engine, row_path, first, name, value, source in RULE_ROWS:
        if row_engine == engine and row_path == path and parse_version(first) <= at:
            values[name], sources[name] = value, source
    if not values:
        raise ValueError(f"no simulator rules for {engine} {path}")
    return EngineRules(engine=engine, sources=tuple(sources.values()), **values)


def rules_for(pool) -> EngineRules:
    path = (pool.variant or "v1") if pool.engine == "vllm" else ""
    return rules_at(pool.engine, path, pool.version)
