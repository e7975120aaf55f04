"""VRAM Detective: predict, explain and fit LLM inference GPU memory, byte by byte, without a GPU.

Library API (the CLI is a thin layer over it):
    from vram_detective import explain
    breakdown = explain("Qwen/Qwen2.5-7B-Instruct-AWQ", gpu="RTX 4090", max_model_len=32768)
"""
from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["explain", "__version__"]


def explain(model: str, gpu: str | None = None, *, gpu_memory: int | None = None, vllm_version: str | None = None, **settings):
    """Predict vLLM's startup memory for `model` on `gpu` (a catalog name) or a GPU of `gpu_memory` bytes.

    `settings` take vLLM's argument names in snake_case (tensor_parallel_size, max_model_len, ...).
    Returns a `vram_detective.breakdown.Breakdown`.
    """
    from .api import explain as _explain

    return _explain(model, gpu, gpu_memory=gpu_memory, vllm_version=vllm_version, **settings)
