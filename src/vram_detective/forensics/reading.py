"""nvidia-smi output read without an engine log (`logs --nvidia-smi smi.txt --model M [--gpu G] [--engine E]`).

The reading names the card (or its total does); the engine's prediction for the model is solved for the value of
the engine's pool lever (engines/base.py ReadingLever: vLLM's gpu_memory_utilization, SGLang's
mem_fraction_static, llama.cpp's and Ollama's context) at which its nvidia-smi figure equals the reading (bisection
over explain: the figure grows with the lever), and the reading is split into the predicted parts at that value.
"""
from __future__ import annotations

from ..units import GIB


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


def engine_share(smi) -> tuple[int, int]:
    """(MiB of GPU 0 the engine's process holds, MiB other processes hold): the largest python / llama / engine
    process is the engine's; without a process list the whole reading is."""
    gpu = smi.gpu(0)
    procs = [p for p in smi.processes_on(gpu.index) if p.used_mib]
    if not procs:
        return gpu.used_mib, 0
    from ..engines import ENGINES

    engine = max(procs, key=lambda p: (any(word in p.name.lower() for word in ("python", "llama", *ENGINES)),
                                       p.used_mib))
    others = sum(p.used_mib for p in procs if p is not engine)
    return gpu.used_mib - others, others


def solve_lever(model: str, gpu, engine, version: str | None, settings: dict, target_mib: int):
    """(value, Breakdown at that value, where the reading sits): the least value of the engine's lever (at its
    grain) whose predicted nvidia-smi figure reaches the reading; 'below' / 'above' when the reading is outside
    what any value in the lever's range predicts."""
    from .predict import explain_quietly

    lever = engine.reading
    seen: dict = {}

    def at(value):
        if value not in seen:
            breakdown, error = explain_quietly(model, gpu, version, dict(settings, **{lever.setting: value}),
                                               engine=engine.name)
            if breakdown is None:
                raise ValueError(f"no prediction for {model}: {str(error).splitlines()[0] if error else 'unknown'}")
            seen[value] = breakdown
        return seen[value]

    low, high = lever.low, lever.high
    if at(low).nvidia_smi_used_mib >= target_mib:
        return low, at(low), "below"
    if at(high).nvidia_smi_used_mib < target_mib:
        bracket = _first_reaching(at, lever, target_mib)
        if bracket is None:
            return high, at(high), "above"
        low, high = bracket
    for _ in range(12):
        middle = (low + high) / 2 if lever.grain < 1 else (low + high) // 2  # (a context is a whole number)
        if at(middle).nvidia_smi_used_mib >= target_mib:
            high = middle
        else:
            low = middle
    value = min(lever.candidates(low, high), key=lambda v: abs(at(v).nvidia_smi_used_mib - target_mib))
    return value, at(value), "inside"


def _first_reaching(at, lever, target_mib: int, points: int = 16):
    """(the grid value before, the first value of a coarse grid over the lever's range) whose figure reaches the
    reading, or None: an engine whose figure is not monotone in its lever (Ollama's own estimate moves layers to
    the CPU as the context grows, so its figure falls again at the top of the range) can reach a reading in the
    middle of the range and not at its end."""
    step = (lever.high - lever.low) / points
    grid = [lever.low + step * i for i in range(1, points)]
    grid = [round(v, 2) if lever.grain < 1 else int(v // lever.grain * lever.grain) for v in grid]
    previous = lever.low
    for value in grid:
        if at(value).nvidia_smi_used_mib >= target_mib:
            return previous, value
        previous = value
    return None


def reading_parts(breakdown, used_mib: int, others_mib: int, lever) -> list[tuple[str, float, str]]:
    """(part, GiB, basis) that add up to the reading; none is negative (the prediction's excess is said)."""
    parts = [("model weights", breakdown.weights_bytes / GIB, "predicted"),
             ("KV cache pool", max(breakdown.kv_cache_bytes, 0) / GIB, f"predicted at that {lever.noun}")]
    graphs = breakdown.figure("cuda_graph_bytes") or 0
    if graphs:
        parts.append(("CUDA graph pool", graphs / GIB, "predicted"))
    rest = breakdown.nvidia_smi_used_mib / 1024 - sum(gib for _, gib, _ in parts)
    if rest > 0:
        parts.append((lever.rest, rest, "predicted"))
    if others_mib:
        parts.append(("other processes", others_mib / 1024, "nvidia-smi process list"))
    return parts


def reading_report(smi, model: str, gpu: str | None, version: str | None, tp: int | None = None,
                   engine: str | None = None) -> dict:
    """The report of an nvidia-smi reading read with a model and no engine log: `engine` (a name; None: what the
    model means, else the default engine) solved for its lever (errors.NotOffered when it has none)."""
    from ..engine_choice import canonical, model_engine
    from ..engines import DEFAULT_ENGINE, get_engine
    from ..engines.base import common_settings, pool_reading

    runner = get_engine(canonical(engine) or model_engine(model) or DEFAULT_ENGINE)
    lever = pool_reading(runner)
    if not smi.gpus or smi.gpu(0).used_mib is None:
        raise ValueError("the nvidia-smi output shows no memory in use for GPU 0")
    device, gpu_basis = gpu_of_reading(smi, gpu)
    engine_mib, others_mib = engine_share(smi)
    settings = common_settings(runner, gpus=tp) if tp and tp > 1 else {}
    value, breakdown, where = solve_lever(model, device, runner, version, settings, engine_mib)
    used = smi.gpu(0).used_mib
    parts = reading_parts(breakdown, used, others_mib, lever)
    accounted = sum(gib for _, gib, _ in parts)
    return {
        "log": None, "nvidia_smi": smi.to_dict(), "model": model, "gpu": {"value": device.name, "basis": gpu_basis},
        "engine": runner.name, **lever.release(breakdown),
        "tensor_parallel_size": tp or 1, "used_mib": used, "total_mib": smi.gpu(0).total_mib,
        "engine_mib": engine_mib, "other_processes_mib": others_mib,
        lever.setting: {"value": value, "where": where,
                        "basis": "solved: the predicted nvidia-smi figure equals the reading"},
        "predicted_nvidia_smi_mib": breakdown.nvidia_smi_used_mib,
        "kv_cache_tokens": max(breakdown.kv_cache_tokens, 0), "max_model_len": breakdown.max_model_len,
        "starts": breakdown.failure is None,
        "parts": [{"what": what, "gib": round(gib, 3), "basis": basis} for what, gib, basis in parts],
        "unaccounted_gib": round(max(used / 1024 - accounted, 0.0), 3),
        "excess_gib": round(max(accounted - used / 1024, 0.0), 3),
    }


def render_reading(report: dict, columns: int | None) -> list[str]:
    """The answer first (the lever's value and the bar of the reading), then the parts."""
    from ..engines import get_engine
    from ..term import columns_text

    lever = get_engine(report["engine"]).reading
    u = report[lever.setting]
    value = lever.words(u["value"])
    total = f" of {report['total_mib']:,} MiB" if report["total_mib"] else ""
    head = (f"nvidia-smi {report['used_mib']:,} MiB{total} on {report['gpu']['value']} with {report['model']} "
            f"on {lever.release_words(report)}")
    predicted = f"(predicted {report['predicted_nvidia_smi_mib']:,} MiB)"
    if u["where"] == "inside":
        answer = f"matches {lever.shown} ≈ {value} {predicted}."
    elif u["where"] == "above":
        answer = (f"is more than the engine takes even at {lever.shown} {value} {predicted}: other memory on the "
                  "card, or another model.")
    else:
        answer = (f"is less than the engine takes at {lever.shown} {value} {predicted}: taken before startup "
                  "ended, or a smaller checkpoint.")
    lines = [f"{head} {answer}"]
    lines += _bar(report, columns)
    if not report["starts"]:
        lines.append(f"At this {lever.noun} the KV pool holds {report['kv_cache_tokens']:,} tokens, less than the "
                     f"model's {report['max_model_len']:,}: the run used a shorter {lever.shorter_context}.")
    lines += ["", f"  GPU: {report['gpu']['value']} ({report['gpu']['basis']}); {lever.shown}: "
                  f"{u['basis']}", "", "  The reading, made of"]
    rows = [(part["what"], f"{part['gib']:.2f} GiB", part["basis"]) for part in report["parts"]]
    if report["unaccounted_gib"] >= 0.01:
        why = (f"the {lever.noun} is rounded to {lever.rounding}" if u["where"] == "inside" else
               f"beyond the prediction at any {lever.noun}")
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
