"""vLLM's lever for an nvidia-smi reading without a log (forensics/reading.py solves it): gpu_memory_utilization.

The process asks for total x gpu_memory_utilization (vllm 0.33.0 v1/worker/utils.py request_memory:
`math.ceil(init_snapshot.total_memory * cache_config.gpu_memory_utilization)`; worker/worker.py before V1) and
the KV pool takes what the weights, the activation peak and non-torch memory leave of it
(v1/worker/gpu_worker.py determine_available_memory), so the process's nvidia-smi figure grows with the
utilization."""
from __future__ import annotations

from ..base import ReadingLever


def _release(breakdown) -> dict:
    return {"vllm_version": breakdown.vllm_version, "engine_path": breakdown.engine}


def _release_words(report: dict) -> str:
    return f"vLLM {report['vllm_version']} ({report['engine_path'].upper()} engine)"


READING = ReadingLever("gpu_memory_utilization", "gpu_memory_utilization", "utilization", 0.05, 0.99, 0.01,
                       "2 decimals", "context, non-torch, workspace", "--max-model-len", _release, _release_words)
