"""Ollama's pool as `simulate` runs it (engines/base.py PoolSimulation): Ollama runs llama.cpp underneath, so its
requests meet llama.cpp's slots (simulate/llamacpp.py) with Ollama's own settings mapped onto them:

- OLLAMA_NUM_PARALLEL (num_parallel) slots, the cache holds num_ctx x num_parallel cells, and each request's
  context is num_ctx (the 0.3.x dev log: n_ctx 8192 = 4 x 2048, n_ctx_per_seq 2048; docs/faq.md: memory grows
  with num_parallel x the context): a slot of num_ctx cells, never the whole cache;
- a request whose context fills its slot shifts (the runner drops half of what follows num_keep) and a prompt
  longer than num_ctx is truncated, as llama.cpp's server does;
- num_batch is the batch (api/types.go NumBatch, 512 by default).

The scheduler rules are llama.cpp's rows (engines/llamacpp/releases.py) at the build the Ollama release vendors.
The lever of `fit --workload` is num_ctx (PARAMETER num_ctx in a Modelfile, or OLLAMA_CONTEXT_LENGTH) at the
given num_parallel."""
from __future__ import annotations


def _parallel(b) -> int:
    from ...simulate.pool import setting

    return max(1, int(setting(b, "num_parallel", 1)))


def pool(b):
    from ...simulate.pool import PoolSpec, setting
    from . import releases as r

    slots = _parallel(b)
    cells = int(b.figure("kv_cells") or b.kv_cache_tokens)
    n_batch = int(setting(b, "num_batch", r.rule("n_batch", r.resolve_version(b.engine_version))))
    return PoolSpec(
        engine="ollama", version=b.engine_version, variant="", num_blocks=cells, block_size=1,
        block_bytes=b.kv_bytes_per_token, max_num_seqs=slots, max_num_batched_tokens=n_batch,
        max_model_len=cells // slots, unified_kv=False, context_shift=True, prefix_caching=True,
    )


def simulator() -> type:
    from ...simulate.llamacpp import LlamacppSim

    return LlamacppSim


def rule_table(pool) -> tuple[str, str, str]:
    """llama.cpp's scheduler rows at the build this Ollama release vendors (rule llamacpp_build)."""
    from . import releases as r

    return "llamacpp", "", f"b{r.rule('llamacpp_build', r.resolve_version(pool.version or None))}"


def lever(b, pinned: dict, needed_blocks: int):
    """num_ctx in steps of 256 at the given num_parallel (the pool is num_ctx x num_parallel cells)."""
    from ...simulate.fit import Lever

    top = -(-needed_blocks // _parallel(b))
    return Lever("num_ctx", "PARAMETER num_ctx", range(256, 256 * (2 * (top // 256) + 4), 256))


def flags_for_bytes(b, pool_bytes: int) -> dict:
    return {"num_ctx": pool_bytes // max(1, b.kv_bytes_per_token) // _parallel(b)}
