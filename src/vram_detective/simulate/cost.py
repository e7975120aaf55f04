"""How long a step takes: a deliberately simple per-token cost model, so that arrivals and service overlap.

The simulator is about memory, not latency: times only decide how many requests are live at once.
A step that prefills P tokens and decodes D sequences takes
    step_s = decode_step_s + D * per_seq_s + P / prefill_tokens_per_s
where decode_step_s is reading the weights once (memory-bound decode: weights_bytes / bandwidth / 0.75)
and prefill is compute-bound (2 x parameters FLOPs per token at 45% of the card's dense BF16 peak).
"""
from __future__ import annotations

from dataclasses import dataclass

# GPU class -> (memory bandwidth GB/s, dense BF16 TFLOPS), from the vendors' datasheets
GPU_CLASSES: tuple[tuple[str, float, float], ...] = (
    ("B200", 8000, 2250), ("H200", 4800, 989), ("H100 PCIe", 2000, 756), ("H100", 3350, 989), ("H20", 4000, 148),
    ("GH200", 4000, 989), ("A100 80GB PCIe", 1935, 312), ("A100", 2039, 312), ("L40S", 864, 362), ("L40", 864, 181),
    ("L4", 300, 121), ("A10", 600, 125), ("A6000", 768, 155), ("RTX 6000 Ada", 960, 364), ("5090", 1792, 209),
    ("4090", 1008, 165), ("3090", 936, 71), ("V100", 900, 125), ("T4", 320, 65), ("MI300X", 5300, 1307),
)
DEFAULT_CLASS = ("default", 1000, 150)  # a card not listed: a mid-range figure of the table above, not a datasheet


@dataclass(frozen=True)
class CostModel:
    decode_step_s: float = 0.02  # one decode step of the whole batch, before per-sequence work
    per_seq_s: float = 0.00005  # each sequence in the step (attention reads, sampling)
    prefill_tokens_per_s: float = 10000.0

    def step_s(self, prefill_tokens: int, decode_seqs: int) -> float:
        return self.decode_step_s + decode_seqs * self.per_seq_s + prefill_tokens / self.prefill_tokens_per_s


def gpu_class(gpu_name: str) -> tuple[str, float, float]:
    name = gpu_name.upper()
    for row in GPU_CLASSES:
        if row[0].upper() in name:
            return row
    return DEFAULT_CLASS


def cost_for(gpu_name: str, weights_bytes: int, gpus: int = 1) -> CostModel:
    """Defaults for a model of `weights_bytes` (per GPU) on `gpus` cards of `gpu_name`."""
    _, bandwidth_gbs, tflops = gpu_class(gpu_name)
    weights = max(weights_bytes, 1 << 28)
    decode = weights / (bandwidth_gbs * 1e9 * 0.75)
    params = weights * gpus / 2  # ~2 bytes a parameter: a rough size, not a dtype claim
    prefill = tflops * 1e12 * 0.45 * gpus / (2 * params)
    return CostModel(decode_step_s=decode, per_seq_s=decode / 400, prefill_tokens_per_s=prefill)
