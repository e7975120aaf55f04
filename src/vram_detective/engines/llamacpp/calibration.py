"""Fitted constants of the llama.cpp plan, with the cases they were fitted on and how held-out cases fare.

CUDA_CONTEXT_BYTES: what a llama.cpp process holds on each GPU it uses beyond its printed buffers (the CUDA
context, cuBLAS workspace and handles, the ggml-cuda memory pool after the warm-up decode). Measured as
nvidia-smi's per-process figure minus the printed model + KV + compute buffers of that GPU.

Fitted on one Ollama 0.32 llama-server process at three context sizes (nvidia-smi minus the printed buffers:
304.74 MiB each time), held out on a llama-cpp-python laptop run (210.9 MiB: the constant is 94 MiB high there,
3.2 % of that GPU's total). The cases and their (nvidia-smi, buffers) pairs are in scripts/calibration_cases.json
(`llamacpp`), which tests/test_llamacpp_engine.py recomputes; not refitted: one GPU, one driver, too few cases.
"""
from __future__ import annotations

MIB = 1024 * 1024

# CPU_ATTENTION_ACTIVATIONS: a CPU-only build's compute buffer at its attention peak (compute.cpu_compute_bytes)
# holds the KQ scores and mask plus this many n_ubatch x n_embd f32 activations (the layer input kept for the
# residual, Q, K and V before they are stored, allocator slack). Fitted on the real CPU loads of
# groundtruth/cpu/llamacpp_b6150.jsonl where that peak wins: Llama-3.2-1B-Instruct c4096 and c16384 without
# flash attention (282.01 and 1074.01 MiB = KQ + mask + 18.01 MiB, n_embd 2048: 4.50); held out: Qwen2.5-0.5B
# and Qwen3-0.6B c16384 (487.51 and 560.01 MiB; benchmarks/llamacpp_cpu_accuracy.py prints the errors).
CPU_ATTENTION_ACTIVATIONS = 4.5

CUDA_CONTEXT_BYTES = round(304.74 * MIB)

def residuals(cases: dict) -> list[float]:
    # cases: {case id: ((nvidia-smi MiB, printed buffers MiB), ...)}
    """nvidia-smi minus printed buffers, MiB, for each (nvidia-smi, buffers) pair."""
    return [round(smi - buffers, 2) for pairs in cases.values() for smi, buffers in pairs]
