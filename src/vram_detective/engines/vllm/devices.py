"""Every GPU of a multi-GPU vLLM start, for the per-GPU bars: tensor-parallel ranks of one pipeline stage hold the
same shard (vLLM's global rank = pp_rank x tp_size + tp_rank, vllm/distributed/parallel_state.py
initialize_model_parallel), each stage its own layers, its own profile peak and graphs, and every worker the
engine's one block count at its own page (v1/worker/gpu_worker.py initialize_from_config); data-parallel replicas
repeat the whole group on their own GPUs (vllm/v1/engine/core.py DPEngineCoreProc)."""
from __future__ import annotations

from ...breakdown import Component, DeviceFigures


def devices(stages, ranks, settings, total: int, non_torch_inside: int, non_torch_outside: int,
            smi_mib) -> tuple[DeviceFigures, ...]:
    """One DeviceFigures per GPU (() on one GPU). `stages` / `ranks`: plan.py's per-stage _Stage and RankFigures;
    `smi_mib(resident, activation)`: plan.nvidia_smi_used_mib for this GPU and engine path."""
    tp, pp = settings.tensor_parallel_size, settings.pipeline_parallel_size
    dp = max(int(settings.data_parallel_size or 1), 1)
    if tp * pp * dp < 2:
        return ()
    per_stage = [_stage_device(stage, rank, non_torch_inside, non_torch_outside, settings.engine, smi_mib)
                 for stage, rank in zip(stages, ranks)]
    out = []
    for replica in range(dp):
        for stage, (weights, kv, used, parts) in enumerate(per_stage):
            for tp_rank in range(tp):
                rank = stage * tp + tp_rank
                out.append(DeviceFigures(f"GPU {replica * tp * pp + rank}", _role(rank, stage, tp_rank, replica, tp, pp, dp),
                                         total, weights, kv, used, parts))
    return tuple(out)


def _role(rank: int, stage: int, tp_rank: int, replica: int, tp: int, pp: int, dp: int) -> str:
    words = [f"rank {rank}"]
    if pp > 1:
        words.append(f"stage {stage}")
    if tp > 1:
        words.append(f"TP rank {tp_rank}")
    if dp > 1:
        words.append(f"DP {replica}")
    return ", ".join(words)


def _stage_device(stage, rank, non_torch_inside: int, non_torch_outside: int, engine: str, smi_mib):
    """(weights, KV pool, nvidia-smi MiB, parts) of one rank of a stage, counted as plan() counts rank 0's."""
    pool = rank.kv_pool_bytes if rank.kv_cache_bytes > 0 else 0
    parts = [Component("weights", "model weights", rank.weights_bytes),
             Component("mamba_cache", "Mamba state cache (V0)", stage.mamba_cache[0]),
             Component("non_torch", "non-torch memory", non_torch_inside),
             Component("kv_cache", "KV cache pool", pool),
             Component("cuda_context", "CUDA context (+ NCCL buffers)", non_torch_outside),
             Component("cuda_graphs", "CUDA graphs", stage.graphs.bytes)]
    resident = sum(part.bytes for part in parts)
    peak = stage.peak.activation_peak_bytes
    if engine == "v1" and peak > 0:  # V1's sampler warm-up re-reserves the activation buffers (plan.nvidia_smi_used_mib)
        parts.append(Component("reserved", "activation buffers reserved again after the warm-up", peak))
    return rank.weights_bytes, pool, smi_mib(resident, peak), tuple(part for part in parts if part.bytes > 0)
