"""Fitted constants of the llama.cpp plan, with the cases they were fitted on and how held-out cases fare.

CUDA_CONTEXT_BYTES: what a llama.cpp process holds on each GPU it uses beyond its printed buffers (the CUDA
context, cuBLAS workspace and handles, the ggml-cuda memory pool after the warm-up decode). Measured as
nvidia-smi's per-process figure minus the printed model + KV + compute buffers of that GPU.

Fitted on (shared/groundtruth/dev-llamacpp.jsonl):
  llamacpp-ollama-0.32-dscoder-v2-lite-q5km-16g-ctx8192, three context sizes of one process:
    ctx 2048: 12110 - (11160.99 + 540 + 104.27)  = 304.74 MiB
    ctx 4096: 12734 - (11160.99 + 1080 + 188.27) = 304.74 MiB
    ctx 8192: 13966 - (11160.99 + 2160 + 340.27) = 304.74 MiB
Held out:
  llamacpp-pyllama-mistral7b-q4km-4060laptop-ngl20-768: nvidia_smi_gpu_mem_mb_max 2904 - (2495.31 + 60 +
    137.79) = 210.9 MiB (the constant is 94 MiB high, 3.2 % of that GPU's total; a laptop GPU in docker whose
    tool's unit is not stated). Not refitted: one GPU, one driver, too few cases; the end-to-end VRAM rows of
    benchmarks/llamacpp_accuracy.py show its weight.
"""
from __future__ import annotations

MIB = 1024 * 1024

CUDA_CONTEXT_BYTES = round(304.74 * MIB)

FITTED_ON = {
    "llamacpp-ollama-0.32-dscoder-v2-lite-q5km-16g-ctx8192": (
        (12110, 11160.99 + 540 + 104.27), (12734, 11160.99 + 1080 + 188.27), (13966, 11160.99 + 2160 + 340.27)),
}
HELD_OUT = {
    "llamacpp-pyllama-mistral7b-q4km-4060laptop-ngl20-768": ((2904, 2495.31 + 60 + 137.79),),
}


def residuals(cases: dict) -> list[float]:
    """nvidia-smi minus printed buffers, MiB, for each (nvidia-smi, buffers) pair."""
    return [round(smi - buffers, 2) for pairs in cases.values() for smi, buffers in pairs]
