"""Every GPU of a multi-GPU SGLang start, for the per-GPU bars. Each tensor-parallel rank of a stage runs the same
model_runner startup on its own shard, so it holds what the stage's first rank holds; each pipeline stage holds its
own layers (the embedding on the first, the final norm and lm_head on the last: stages.py) and its own KV cell at
the token count the ranks agree on (plan.startups), so every stage is sized on its own. GPU ids as
data_parallel_controller.py (0.5.3) lays them out: gpu_id = base_gpu_id + pp_rank x tp_size + tp_rank; each
data-parallel replica starts tp_size x pp_size GPUs further on, except under --enable-dp-attention, where the
replicas share the TP group's GPUs."""
from __future__ import annotations

from dataclasses import dataclass

from ...breakdown import Component, DeviceFigures

_NOT_HELD = ("budget_unused", "outside.activations")  # free memory nvidia-smi does not count


@dataclass(frozen=True)
class StageFigures:
    """One pipeline stage's rank as plan() sizes it: its budget and outside trees, weights, KV pool, nvidia-smi."""

    budget: Component
    outside: Component
    weights: int
    kv: int
    smi_mib: int
    layers: tuple[int, int] = (0, 0)  # [start, end) of its decoder layers

    @property
    def parts(self) -> tuple[Component, ...]:
        return tuple(leaf for leaf in (*self.budget.children, *self.outside.children)
                     if leaf.key not in _NOT_HELD and leaf.bytes > 0)


def devices(settings, total: int, per_stage: tuple[StageFigures, ...]) -> tuple[DeviceFigures, ...]:
    """One DeviceFigures per GPU (() on one GPU); `per_stage`: stage 0 first, one entry per pipeline stage."""
    tp, pp = settings.tp_size, settings.pp_size
    dp = 1 if settings.enable_dp_attention else max(settings.dp_size, 1)
    if tp * pp * dp < 2:
        return ()
    out = []
    for replica in range(dp):
        for stage, figures in enumerate(per_stage):
            for tp_rank in range(tp):
                words = [f"TP rank {tp_rank}"] if tp > 1 else []
                words += [f"stage {stage}", _layer_words(*figures.layers)] if pp > 1 else []
                words += [f"DP {replica}"] if dp > 1 else []
                out.append(DeviceFigures(f"GPU {replica * tp * pp + stage * tp + tp_rank}", ", ".join(words), total,
                                         figures.weights, figures.kv, figures.smi_mib, figures.parts))
    return tuple(out)


def _layer_words(start: int, end: int) -> str:
    """Which decoder layers a stage builds, as llama.cpp's GPUs say theirs ("layers 0-17")."""
    if end - start == 1:
        return f"layer {start}"
    return f"layers {start}-{end - 1}" if end > start else "no layers"
