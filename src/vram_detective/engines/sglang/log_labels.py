"""What SGLang's log figures mean, in words (`logs` shows these instead of the keys), and what GPU 0 held by its
own figures (the answer's bar). The lines as SGLang prints them (groundtruth/dev-sglang.jsonl): "Load weight end.
... avail mem=, mem usage=", "KV Cache is allocated. #tokens: ..., K size: ... GB, V size: ... GB", "Capture cuda
graph end. ... mem usage=" (its "GB" is GiB)."""
from __future__ import annotations

FIXED = {
    "load_begin_avail_mem_gb": "free before the weights", "load_end_avail_mem_gb": "free after the weights",
    "weights_mem_usage_gb": "weights", "init_dist_mem_usage_gb": "distributed init (NCCL)",
    "kv_cache_tokens": "KV cache tokens", "k_size_gb": "K cache", "v_size_gb": "V cache",
    "kv_size_gb": "KV cache (MLA)", "mem_pool_end_avail_mem_gb": "free after the KV pool",
    "max_total_num_tokens": "tokens the pool holds", "profiled_max_total_tokens": "tokens the profile allowed",
    "max_running_requests": "max running requests", "max_prefill_tokens": "max prefill tokens",
    "chunked_prefill_size": "chunked prefill size", "context_len": "context length",
    "available_gpu_mem_gb": "free when serving starts", "cuda_graph_begin_avail_mem_gb": "free before CUDA graphs",
    "cuda_graph_end_avail_mem_gb": "free after CUDA graphs", "cuda_graph_mem_usage_gb": "CUDA graphs",
    "mamba_cache_size": "Mamba state slots", "mamba_conv_state_gb": "Mamba conv state",
    "mamba_ssm_state_gb": "Mamba SSM state", "mamba_max_cache_size": "Mamba state slots",
    "mamba_intermediate_ssm_state_gb": "Mamba SSM states of the draft tokens",
    "mamba_conv_window_gb": "Mamba conv windows of the draft tokens", "startup_failed": "start failed",
}
_PREFIXES = (("draft_", "draft model: "), ("swa_", "sliding-window "), ("decode_graph_", "decode graphs: "),
             ("piecewise_cuda_graph_", "piecewise graphs: "), ("target_verify_graph_", "target-verify graphs: "))
_GRAPH = {"begin_avail_mem_gb": "free before", "end_avail_mem_gb": "free after", "mem_usage_gb": "memory"}


def label(key: str) -> str | None:
    """The key in words (no unit: the value carries it); None for a key this table does not know."""
    if key in FIXED:
        return FIXED[key]
    for prefix, words in _PREFIXES:
        if key.startswith(prefix):
            rest = key.removeprefix(prefix)
            inner = _GRAPH.get(rest) if "graph" in prefix else FIXED.get(rest)
            return words + inner if inner else None
    return None


def memory(observed: dict) -> dict:
    """What GPU 0 held by SGLang's own figures, in GiB: weights (the draft model's too), KV pool (K + V, or MLA's
    one size, plus Mamba, sliding-window and draft pools) and CUDA graphs; empty when the log printed none."""
    kv_keys = ("k_size_gb", "v_size_gb", "kv_size_gb", "swa_k_size_gb", "swa_v_size_gb", "mamba_conv_state_gb",
               "mamba_ssm_state_gb", "mamba_intermediate_ssm_state_gb", "mamba_conv_window_gb", "draft_k_size_gb",
               "draft_v_size_gb", "draft_kv_size_gb")
    weights = observed.get("weights_mem_usage_gb")
    if weights is not None and (observed.get("draft_weights_mem_usage_gb") or 0) > 0:
        weights += observed["draft_weights_mem_usage_gb"]  # the draft model's own load (a negative one is not memory)
    kv = sum(observed.get(key) or 0 for key in kv_keys)
    if weights is None and not kv:
        return {}
    graphs = sum(max(observed.get(f"{p}mem_usage_gb") or 0, 0) for p in
                 ("cuda_graph_", "decode_graph_", "piecewise_cuda_graph_", "target_verify_graph_"))
    return {"weights_gib": weights or 0, "kv_gib": kv, "other_gib": graphs, "total_gib": None}
