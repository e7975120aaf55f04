"""SGLang's CUDA graphs: which batch sizes a release captures and what they take. They are captured after
the KV pool, out of the (1 - mem_fraction_static) slack, so they never shrink the pool; a capture that does
not fit fails after the pool is built."""
from __future__ import annotations

from . import calibration
from .releases import Rules
from .settings import SGLangSettings, piecewise_enabled, piecewise_graph_tokens


def capture_batch_sizes(s: SGLangSettings, r: Rules, gpu_mem_mib: float, req_pool_size: int) -> list[int]:
    """get_batch_sizes_to_capture: the release's list, extended on big GPUs (0.4.6-0.5.2), cut at
    cuda_graph_max_bs (which is itself captured) and at the request pool."""
    if s.disable_cuda_graph:
        return []
    speculative = s.speculative_algorithm and r["capture_bs_list_speculative"] is not None
    first, ranges = r["capture_bs_list_speculative"] if speculative else r["capture_bs_list"]
    sizes = list(first) + [bs for start, stop, step in ranges for bs in range(start, stop, step)]
    for above_mib, (start, stop, step) in r["capture_bs_big_gpu"]:
        if gpu_mem_mib > above_mib:
            sizes += list(range(start, stop, step))
    limit = min(s.cuda_graph_max_bs or max(sizes), req_pool_size)
    sizes = [bs for bs in sizes if bs <= limit]
    if limit not in sizes:
        sizes.append(limit)
    return sorted(set(sizes))


def decode_graph_bytes(batch_sizes: list[int], layers: int) -> int:
    """Decode graphs: a fitted amount per captured batch size and layer (calibration.GRAPH_PER_LAYER_BS)."""
    return len(batch_sizes) * layers * calibration.GRAPH_PER_LAYER_BS.bytes


def piecewise_graph_bytes(s: SGLangSettings, r: Rules, use_mla: bool) -> tuple[int, int]:
    """(token counts captured, bytes) of the piecewise prefill graphs when the release captures them."""
    if not piecewise_enabled(s, r):
        return 0, 0
    sizes = piecewise_graph_tokens(2048 if use_mla else s.chunked_prefill_size)
    return len(sizes), len(sizes) * calibration.PIECEWISE_PER_SIZE.bytes


def draft_graph_layers(s: SGLangSettings, draft_layers: int) -> int:
    """Decoder-layer passes the draft worker's own graphs hold per captured batch size (same batch sizes as the
    target's): eagle_draft_cuda_graph_runner unrolls --speculative-num-steps draft forwards (its out_cache_loc is
    num_tokens x num_steps), eagle_draft_extend_cuda_graph_runner one (0.5.17 speculative/); each pass is priced
    as a target layer's (calibration.GRAPH_PER_LAYER_BS). The target's verify graphs replace its decode graphs."""
    if not draft_layers or not s.speculative_algorithm or s.disable_cuda_graph:
        return 0
    return draft_layers * ((s.speculative_num_steps or 1) + 1)
