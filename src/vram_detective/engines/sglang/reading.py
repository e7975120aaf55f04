"""SGLang's lever for an nvidia-smi reading without a log (forensics/reading.py solves it): --mem-fraction-static.

The KV pool is sized from the fraction: its budget is the free memory after the weights minus the slack
pre_model_load_memory x (1 - mem_fraction_static) (sglang 0.5.23 srt/mem_cache/kv_cache_configurator.py
_profile_available_bytes; 0.4.10 srt/model_executor/model_runner.py profile_max_num_token: rest_memory =
available - total x (1 - mem_fraction_static)), so the pool, and the process's nvidia-smi figure with it, grows with the
fraction (engines/sglang/pool.py plans it)."""
from __future__ import annotations

from ..base import ReadingLever


def _release(breakdown) -> dict:
    return {"engine_version": breakdown.engine_version}


def _release_words(report: dict) -> str:
    return f"SGLang {report['engine_version']}"


READING = ReadingLever("mem_fraction_static", "--mem-fraction-static", "fraction", 0.05, 0.99, 0.01, "2 decimals",
                       "context, activations, workspace", "--context-length", _release, _release_words)
