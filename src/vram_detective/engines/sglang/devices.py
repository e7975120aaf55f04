"""Every GPU of a multi-GPU SGLang start, for the per-GPU bars. Each tensor-parallel rank runs the same
model_runner startup on its own shard (the pool is the minimum over ranks, all_reduce in model_runner.py
profile_max_num_token), so a rank holds what rank 0 holds; pipeline stages are sized as rank 0 here (this tool
plans stage 0 only). GPU ids as data_parallel_controller.py (0.5.3) lays them out: gpu_id = base_gpu_id +
pp_rank x tp_size + tp_rank; each data-parallel replica starts tp_size x pp_size GPUs further on, except under
--enable-dp-attention, where the replicas share the TP group's GPUs."""
from __future__ import annotations

from ...breakdown import Component, DeviceFigures

_NOT_HELD = ("budget_unused", "outside.activations")  # free memory nvidia-smi does not count


def devices(settings, budget: Component, outside: Component, total: int, weights: int, kv: int,
            smi_mib: int) -> tuple[DeviceFigures, ...]:
    tp, pp = settings.tp_size, settings.pp_size
    dp = 1 if settings.enable_dp_attention else max(settings.dp_size, 1)
    if tp * pp * dp < 2:
        return ()
    parts = tuple(leaf for leaf in (*budget.children, *outside.children)
                  if leaf.key not in _NOT_HELD and leaf.bytes > 0)
    out = []
    for replica in range(dp):
        for stage in range(pp):
            for tp_rank in range(tp):
                words = [f"TP rank {tp_rank}"] if tp > 1 else []
                words += [f"stage {stage}" + (" (sized as stage 0)" if stage else "")] if pp > 1 else []
                words += [f"DP {replica}"] if dp > 1 else []
                out.append(DeviceFigures(f"GPU {replica * tp * pp + stage * tp + tp_rank}", ", ".join(words), total,
                                         weights, kv, smi_mib, parts))
    return tuple(out)
