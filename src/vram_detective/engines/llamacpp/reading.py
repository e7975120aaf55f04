"""llama.cpp's lever for an nvidia-smi reading without a log (forensics/reading.py solves it): the context (-c).

llama.cpp takes no fraction of the card: it allocates the weights of its GPU layers, a KV cache of n_ctx cells
per layer (src/llama-model.cpp create_memory: attn_kv_size = cparams.n_ctx, padded by
llama_kv_cache_unified::get_padding to 256 with flash attention, 32 without) and compute buffers that grow with
the context, so the process's nvidia-smi figure grows with -c: the reading is solved for the context, in steps of
256 tokens (llama-cpp-python 0.3.16's vendored llama.cpp)."""
from __future__ import annotations

from ..base import ReadingLever


def _release(breakdown) -> dict:
    return {"engine_version": breakdown.engine_version}


def reading(setting: str, shown: str, label: str) -> ReadingLever:
    """llama.cpp's context lever under an engine's own setting name (Ollama's num_ctx is llama.cpp's -c)."""
    return ReadingLever(setting, shown, "context", 512, 131072, 256, "256 tokens", "compute buffers, context",
                        shown, _release, lambda report: f"{label} {report['engine_version']}")


READING = reading("n_ctx", "-c", "llama.cpp")
