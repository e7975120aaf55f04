"""nvidia-smi output read without an engine log (`logs --nvidia-smi smi.txt --model M [--gpu G]`).

The reading names the card (or its total does); the engine's prediction for the model is solved for the
gpu_memory_utilization at which its nvidia-smi figure equals the reading (bisection over explain: the figure
grows with the budget), and the reading is split into the predicted parts at that utilization.
"""
from __future__ import annotations

from ..units import GIB

UTILIZATION_RANGE = (0.05, 0.99)


def gpu_of_reading(smi, given: str | None):
    """(Gpu, how it was found): --gpu, else the name nvidia-smi printed, else its total in the catalog."""
    from ..hardware import UnknownGpuError, all_gpus, find_gpu

    if given:
        return find_gpu(given), "--gpu"
    first = smi.gpu(0)
    if first is not None and first.name:
        try:
            return find_gpu(first.name), f"nvidia-smi: {first.name}"
        except (UnknownGpuError, ValueError):
            pass
    if first is not None and first.total_mib:
        exact = sorted((gpu for gpu in all_gpus() if gpu.nvidia_smi_total_mib == first.total_mib),
                       key=lambda gpu: (not gpu.common, gpu.name))
        if exact:
            others = f" (also {', '.join(gpu.name for gpu in exact[1:3])})" if len(exact) > 1 else ""
            return exact[0], f"nvidia-smi total {first.total_mib:,} MiB{others}"
    raise ValueError("nvidia-smi's reading names no GPU of the catalog: give --gpu")


def vllm_share(smi) -> tuple[int, int]:
    """(MiB of GPU 0 the engine's process holds, MiB other processes hold): the largest python/vllm process is
    the engine's; without a process list the whole reading is."""
    gpu = smi.gpu(0)
    procs = [p for p in smi.processes_on(gpu.index) if p.used_mib]
    if not procs:
        return gpu.used_mib, 0
    engine = max(procs, key=lambda p: (("python" in p.name or "vllm" in p.name.lower()), p.used_mib))
    others = sum(p.used_mib for p in procs if p is not engine)
    return gpu.used_mib - others, others


def solve_utilization(model: str, gpu, version: str | None, settings: dict, target_mib: int):
    """(u, Breakdown at u, where the reading sits): the least u (2 decimals) whose predicted nvidia-smi figure
    reaches the reading; 'below' / 'above' when the reading is outside what any u in the range predicts."""
    from .predict import explain_quietly

    def at(u: float):
        breakdown, error = explain_quietly(model, gpu, version, dict(settings, gpu_memory_utilization=u))
        if breakdown is None:
            raise ValueError(f"no prediction for {model}: {str(error).splitlines()[0] if error else 'unknown'}")
        return breakdown

    low, high = UTILIZATION_RANGE
    if at(low).nvidia_smi_used_mib >= target_mib:
        return low, at(low), "below"
    if at(high).nvidia_smi_used_mib < target_mib:
        return high, at(high), "above"
    for _ in range(12):
        middle = (low + high) / 2
        if at(middle).nvidia_smi_used_mib >= target_mib:
            high = middle
        else:
            low = middle
    candidates = sorted({round(low, 2), round(high, 2)})
    u = min(candidates, key=lambda value: abs(at(value).nvidia_smi_used_mib - target_mib))
    return u, at(u), "inside"


def reading_parts(breakdown, used_mib: int, others_mib: int) -> list[tuple[str, float, str]]:
    """(part, GiB, basis) that add up to the reading; none is negative (the prediction's excess is said)."""
    parts = [("model weights", breakdown.weights_bytes / GIB, "predicted"),
             ("KV cache pool", max(breakdown.kv_cache_bytes, 0) / GIB, "predicted at that utilization")]
    graphs = breakdown.cuda_graph_bytes or 0
    if graphs:
        parts.append(("CUDA graph pool", graphs / GIB, "predicted"))
    rest = breakdown.nvidia_smi_used_mib / 1024 - sum(gib for _, gib, _ in parts)
    if rest > 0:
        parts.append(("context, non-torch, workspace", rest, "predicted"))
    if others_mib:
        parts.append(("other processes", others_mib / 1024, "nvidia-smi process list"))
    return parts


def reading_report(smi, model: str, gpu: str | None, version: str | None, tp: int | None = None) -> dict:
    """The report of an nvidia-smi reading read with a model and no engine log."""
    if not smi.gpus or smi.gpu(0).used_mib is None:
        raise ValueError("the nvidia-smi output shows no memory in use for GPU 0")
    device, gpu_basis = gpu_of_reading(smi, gpu)
    engine_mib, others_mib = vllm_share(smi)
    settings = {"tensor_parallel_size": tp} if tp and tp > 1 else {}
    u, breakdown, where = solve_utilization(model, device, version, settings, engine_mib)
    used = smi.gpu(0).used_mib
    parts = reading_parts(breakdown, used, others_mib)
    accounted = sum(gib for _, gib, _ in parts)
    return {
        "log": None, "nvidia_smi": smi.to_dict(), "model": model, "gpu": {"value": device.name, "basis": gpu_basis},
        "engine": "vllm", "vllm_version": breakdown.vllm_version, "engine_path": breakdown.engine,
        "tensor_parallel_size": tp or 1, "used_mib": used, "total_mib": smi.gpu(0).total_mib,
        "engine_mib": engine_mib, "other_processes_mib": others_mib,
        "gpu_memory_utilization": {"value": u, "where": where,
                                   "basis": "solved: the predicted nvidia-smi figure equals the reading"},
        "predicted_nvidia_smi_mib": breakdown.nvidia_smi_used_mib,
        "kv_cache_tokens": max(breakdown.kv_cache_tokens, 0), "max_model_len": breakdown.max_model_len,
        "starts": breakdown.failure is None,
        "parts": [{"what": what, "gib": round(gib, 3), "basis": basis} for what, gib, basis in parts],
        "unaccounted_gib": round(max(used / 1024 - accounted, 0.0), 3),
        "excess_gib": round(max(accounted - used / 1024, 0.0), 3),
    }


def render_reading(report: dict, columns: int | None) -> list[str]:
    """The answer first (the utilization and the bar of the reading), then the parts."""
    from ..term import columns_text

    u = report["gpu_memory_utilization"]
    total = f" of {report['total_mib']:,} MiB" if report["total_mib"] else ""
    head = (f"nvidia-smi {report['used_mib']:,} MiB{total} on {report['gpu']['value']} with {report['model']} "
            f"on vLLM {report['vllm_version']} ({report['engine_path'].upper()} engine)")
    if u["where"] == "inside":
        answer = f"matches gpu_memory_utilization ≈ {u['value']:.2f} (predicted {report['predicted_nvidia_smi_mib']:,} MiB)."
    elif u["where"] == "above":
        answer = (f"is more than the engine takes even at gpu_memory_utilization {u['value']:.2f} (predicted "
                  f"{report['predicted_nvidia_smi_mib']:,} MiB): other memory on the card, or another model.")
    else:
        answer = (f"is less than the engine takes at gpu_memory_utilization {u['value']:.2f} (predicted "
                  f"{report['predicted_nvidia_smi_mib']:,} MiB): taken before startup ended, or a smaller checkpoint.")
    lines = [f"{head} {answer}"]
    lines += _bar(report, columns)
    if not report["starts"]:
        lines.append(f"At this utilization the KV pool holds {report['kv_cache_tokens']:,} tokens, less than the "
                     f"model's {report['max_model_len']:,}: the run used a shorter --max-model-len.")
    lines += ["", f"  GPU: {report['gpu']['value']} ({report['gpu']['basis']}); gpu_memory_utilization: "
                  f"{u['basis']}", "", "  The reading, made of"]
    rows = [(part["what"], f"{part['gib']:.2f} GiB", part["basis"]) for part in report["parts"]]
    if report["unaccounted_gib"] >= 0.01:
        why = ("the utilization is rounded to 2 decimals" if u["where"] == "inside" else
               "beyond the prediction at any utilization")
        rows.append(("the rest of the reading", f"{report['unaccounted_gib']:.2f} GiB", why))
    lines += columns_text(rows, "lrl", columns, indent="    ")
    if report["excess_gib"] >= 0.01:
        lines.append(f"    the predicted parts come to {report['excess_gib']:.2f} GiB more than the reading")
    return lines


def _bar(report: dict, columns: int | None) -> list[str]:
    from .bars import observed_bar_lines

    parts = {part["what"]: part["gib"] for part in report["parts"]}
    total_gib = (report["total_mib"] or report["used_mib"]) / 1024
    return observed_bar_lines(parts.get("model weights", 0.0), parts.get("KV cache pool", 0.0),
                              report["used_mib"] / 1024, total_gib, columns)
