"""llama.cpp's server slots as `simulate` runs them (engines/base.py PoolSimulation): n_ctx cells in -np slots
(each n_ctx / np cells, or all of n_ctx with --kv-unified), the slot simulator (simulate/llamacpp.py), -c as the
lever of `fit --workload`, and the words for a request its slot cannot hold: llama.cpp preempts nothing, a full
slot shifts its context and a prompt over the slot is truncated (tools/server/server.cpp)."""
from __future__ import annotations

from ..base import ShortfallWords

WORDS = ShortfallWords(event="slot overflow", label="slot overflows",
                       happened="overflow their slot (context shifted or prompt truncated)",
                       some="overflowing their slot", full="outgrows the slots of the {pool} pool:",
                       verb="overflow slots", verbs="overflows slots")


def pool(b):
    from ...simulate.pool import PoolSpec, setting

    n_ctx = int(b.figure("n_ctx") or setting(b, "n_ctx", b.kv_cache_tokens))
    slots = int(b.figure("n_parallel") or setting(b, "n_parallel", 1))
    unified = bool(setting(b, "kv_unified", False))
    return PoolSpec(
        engine="llamacpp", version=b.engine_version, variant="", num_blocks=n_ctx, block_size=1,
        block_bytes=b.kv_bytes_per_token, max_num_seqs=slots, max_num_batched_tokens=int(setting(b, "n_batch", 2048)),
        max_model_len=n_ctx if unified else n_ctx // slots, unified_kv=unified,
        context_shift=bool(setting(b, "context_shift", True)), prefix_caching=True,
    )


def simulator() -> type:
    from ...simulate.llamacpp import LlamacppSim

    return LlamacppSim


def rule_table(pool) -> tuple[str, str, str]:
    return "llamacpp", "", pool.version


def lever(b, pinned: dict, needed_blocks: int):
    """-c in steps of 256 cells at the given -np."""
    from ...simulate.fit import Lever

    return Lever("n_ctx", "-c", range(256, 256 * (2 * (needed_blocks // 256) + 4), 256))


def flags_for_bytes(b, pool_bytes: int) -> dict:
    return {"ctx_size_tokens": pool_bytes // max(1, b.kv_bytes_per_token)}
