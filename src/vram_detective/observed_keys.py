"""What reports call each figure a log prints (groundtruth/SCHEMA.md's `observed` keys). Apart from
forensics/observed.py so that explain's intervals are labelled without importing the log forensics."""

LABELS = {
    "total_gpu_memory_gib": "GPU total (CUDA)", "requested_memory_gib": "budget (u x total)",
    "weights_gib": "weights", "activation_peak_gib": "activation peak", "non_torch_gib": "non-torch memory",
    "cuda_graph_gib": "CUDA graphs", "cuda_graph_estimate_gib": "CUDA graph estimate", "kv_cache_gib": "KV cache",
    "num_gpu_blocks": "GPU blocks", "num_cpu_blocks": "CPU blocks", "kv_cache_tokens": "KV cache tokens",
    "max_concurrency": "max concurrency", "max_concurrency_tokens": "tokens per request (max_model_len)",
    "nvidia_smi_used_mib": "nvidia-smi used", "nvidia_smi_total_mib": "nvidia-smi total",
    "startup_failed": "startup failed",
}
