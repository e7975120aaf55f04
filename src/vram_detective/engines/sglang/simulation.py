"""SGLang's token pool and scheduler as `simulate` runs them (engines/base.py PoolSimulation): the pool a
prediction pre-allocates (max_total_num_tokens in pages of page_size), the simulator of its radix cache,
PrefillAdder and retract_decode (simulate/sglang.py), and --mem-fraction-static as the lever of `fit --workload`."""
from __future__ import annotations

# SGLang's token pool has pages of page_size tokens (1 by default); the simulator tracks it in 16-token pages, an
# approximation of its own (said in the result's notes), so that a step moves pages rather than single tokens
GRAIN = 16


def words():
    from ..base import ShortfallWords

    # SGLang's own word for giving back a running request's KV when the pool is full: "KV cache pool is full.
    # Retract requests." and "#retracted_reqs" (managers/scheduler.py 0.5.23, retract_decode); it never says
    # "preempt"
    return ShortfallWords(event="retraction", label="retractions", happened="are retracted", some="retracted",
                          verb="retract", verbs="retracts")


def pool(b):
    from ...simulate.pool import PoolSpec, setting

    page = int(b.figure("page_size") or setting(b, "page_size", 1))
    tokens = int(b.figure("max_total_num_tokens") or b.kv_cache_tokens)
    return PoolSpec(
        engine="sglang", version=b.engine_version, variant="", num_blocks=tokens // page, block_size=page,
        block_bytes=b.kv_bytes_per_token * page,
        max_num_seqs=int(b.figure("max_running_requests") or setting(b, "max_running_requests", 4096)),
        max_num_batched_tokens=_step_tokens(b), max_model_len=b.max_model_len,
        prefix_caching=not setting(b, "disable_radix_cache", False), chunked_prefill=True,
    )


def _step_tokens(b) -> int:
    """A prefill step's tokens: chunked_prefill_size; 0 or -1 turn chunking off (scheduler.py 0.5.23 sets it to
    None when <= 0), and the scheduler's PrefillAdder then takes a whole prompt, however long, as a batch's first."""
    from ...simulate.pool import setting

    chunk = int(setting(b, "chunked_prefill_size", 8192))
    return chunk if chunk > 0 else max(b.max_model_len, 1)


def simulator() -> type:
    from ...simulate.sglang import SglangSim

    return SglangSim


def rule_table(pool) -> tuple[str, str, str]:
    return "sglang", "", pool.version


def lever(b, pinned: dict, needed_blocks: int):
    from ...simulate.fit import Lever

    return Lever("mem_fraction_static", "--mem-fraction-static", [k / 100 for k in range(1, 100)])


def flags_for_bytes(b, pool_bytes: int) -> dict:
    """--mem-fraction-static: the weights and the pool as a share of the card."""
    static = b.weights_bytes + pool_bytes
    return {"mem_fraction_static": round(min(1.0, static / b.total_gpu_bytes + 0.005), 3)}
