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

CUDA_CONTEXT_BYTES = round(304.74 * MIB)

def residuals(cases: dict) -> list[float]:
    # cases: {case id: ((nvidia-smi MiB, printed buffers MiB), ...)}
    """nvidia-smi minus printed buffers, MiB, for each (nvidia-smi, buffers) pair."""
    return [round(smi - buffers, 2) for pairs in cases.values() for smi, buffers in pairs]
