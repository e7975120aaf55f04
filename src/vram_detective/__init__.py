"""VRAM Detective: predict, explain and fit LLM inference GPU memory, byte by byte, without a GPU.

Library API (the CLI and the web API serialize the same results; docs/api.md): one function per command in
`vram_detective.library` (`compare` and `simulate` are also subpackage names, so import them from there):
    from vram_detective.library import explain, whatif, fit, compare, logs, simulate, score
    breakdown = explain("Qwen/Qwen2.5-7B-Instruct-AWQ", gpu="RTX 4090", max_model_len=32768)
    whatif("Qwen/Qwen3-8B", "RTX 4090", engine="llamacpp", n_ctx=32768).to_dict()   # what `whatif --json` prints
"""
from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["explain", "whatif", "fit", "logs", "score", "EngineRefused", "NotOffered", "SCHEMA_VERSION",
           "__version__"]

SCHEMA_VERSION = 3  # library.SCHEMA_VERSION (kept equal by tests/test_library_api.py)


def explain(model: str, gpu: str | None = None, *, gpu_memory: int | None = None, vllm_version: str | None = None,
            **settings):
    """Predict the engine's startup memory for `model` on `gpu` (a catalog name) or a GPU of `gpu_memory` bytes.

    `engine=` picks the engine (default: what the model reference means, else vLLM); settings take the engine's
    own argument names in snake_case (tensor_parallel_size, max_model_len, n_ctx, mem_fraction_static, ...).
    Returns a `vram_detective.breakdown.Breakdown`; raises `EngineRefused` when the engine would not start.
    """
    from .library import explain as _explain

    return _explain(model, gpu, gpu_memory=gpu_memory, vllm_version=vllm_version, **settings)


def __getattr__(name: str):
    """The other commands and error types, imported on first use (the package import stays light)."""
    if name in ("whatif", "fit", "logs", "score"):
        from . import library

        return getattr(library, name)
    if name in ("EngineRefused", "NotOffered"):
        from . import errors

        return getattr(errors, name)
    raise AttributeError(f"module 'vram_detective' has no attribute {name!r}")
