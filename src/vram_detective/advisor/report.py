"""Terminal text and JSON for `whatif` and `fit` (pure functions, no I/O)."""
from __future__ import annotations

from ..units import GIB

_FIGURE_KEYS_DROPPED = ("log_lines", "components", "outside_budget", "weights_explained", "settings", "notes")


def _table(headers, rows, aligns) -> list[str]:
    from ..render import _table as table

    return table(headers, rows, aligns)


def _signed(value: float, digits: int = 2) -> str:
    if value == 0:
        return "0"
    return f"{value:+,.{digits}f}" if isinstance(value, float) else f"{value:+,}"


def _truncate(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


# --- whatif ------------------------------------------------------------------------------------------------


def whatif_json(result) -> dict:
    base = result.baseline
    b = base.breakdown
    out = {"model": base.model, "gpu": result.gpu_name, "engine_name": b.engine_name, "engine_version": b.engine_version,
           "vllm_version": result.vllm_version, "engine": result.engine, "baseline": base.to_dict(), "levers": [lever.to_dict() for lever in result.levers]}
    out["baseline"].pop("delta", None)
    return out


def whatif_text(result) -> str:
    base = result.baseline
    b = base.breakdown
    given = " · ".join(f"{s.name}={s.value}" for s in b.settings if s.given) or "this release's defaults"
    title = f"{b.engine_label} {b.engine_version}" + (f" ({b.engine_variant})" if b.engine_variant else "")
    lines = [f"{base.model} on {result.gpu_name} · {title} · {given}",
             f"baseline: weights {base.weights_bytes / GIB:.2f} GiB, KV pool {base.kv_pool_bytes / GIB:.2f} GiB "
             f"({base.num_gpu_blocks:,} blocks, {base.kv_cache_tokens:,} tokens), {base.max_concurrency:.2f}x "
             f"concurrency at {b.max_model_len:,} tokens, nvidia-smi {base.nvidia_smi_used_mib:,} MiB"
             + ("" if base.starts else f" — {b.engine_label} would refuse to start: {base.refused}"),
             ""]
    rows = []
    for lever in result.levers:
        name = lever.lever
        if lever.weights_bytes is None:
            why = lever.refused or lever.note
            rows.append((name, lever.change, "-", "-", "-", "-", "-", "refused" if lever.refused else "-",
                         _truncate(why or lever.cost, 90)))
            continue
        d = lever.deltas
        rows.append((
            name, lever.change, _signed(d["weights_bytes"] / GIB), _signed(d["kv_pool_bytes"] / GIB),
            _signed(d["kv_cache_tokens"]), f"{lever.max_concurrency:.2f}x ({_signed(d['max_concurrency'])})",
            _signed(d["nvidia_smi_used_mib"]), "yes" if lever.starts else "no",
            _truncate((lever.note + "; " if lever.note else "") + lever.cost, 90),
        ))
    lines += _table(("lever", "change", "weights GiB", "KV pool GiB", "KV tokens", "concurrency", "nvidia-smi MiB",
                     "starts", "what it costs"), rows, "llrrrrrll")
    refused = [lever for lever in result.levers if lever.refused and lever.weights_bytes is not None]
    for lever in refused:
        lines.append(f"{lever.lever} {lever.change}: vLLM would refuse to start: {_truncate(lever.refused, 160)}")
    lines.append("Figures are per GPU; tokens and concurrency are the engine's (all GPUs together). KV offload to CPU "
                 "(LMCache, --kv-transfer-config) is not modelled.")
    return "\n".join(lines)


# --- fit ---------------------------------------------------------------------------------------------------


def _candidate_json(candidate, rank: int | None) -> dict:
    from ..render import to_json

    family = candidate.family
    out = {"rank": rank, "feasible": candidate.feasible, "model": candidate.model, "checkpoint": family.variant.label,
           "settings": {key: value for key, value in candidate.settings.items() if key != "entrypoint"},
           "command": candidate.command, "python": candidate.python, "binding_constraint": candidate.binding,
           "binding_reason": candidate.why, "compromises": candidate.compromises, "verified": candidate.verified}
    if candidate.breakdown is not None:
        figures = to_json(candidate.breakdown)
        for key in _FIGURE_KEYS_DROPPED:
            figures.pop(key, None)
        figures.pop("model", None)
        out.update(figures)
    else:
        f = candidate.figures
        out.update(num_gpu_blocks=f["num_gpu_blocks"], kv_cache_tokens=f["kv_cache_tokens"],
                   max_concurrency=round(f["max_concurrency"], 4), nvidia_smi_used_mib=f["nvidia_smi_used_mib"],
                   kv_cache_gib=round(f["kv_cache_bytes"] / GIB, 4), max_model_len=candidate.point[1],
                   startup_failed=not f["starts"])
    return out


def fit_json(result) -> dict:
    target = result.target
    return {
        "model": result.model, "gpu": result.gpu.name, "vllm_version": result.vllm_version, "engine": result.engine,
        "entrypoint": result.entrypoint,
        "target": {"context": target.context, "concurrency": target.need,
                   "max_gpu_memory_mib": target.ceiling_mib, "gpus": target.gpus},
        "feasible": result.feasible, "searched_configurations": result.searched, "families": result.families,
        "seconds": round(result.seconds, 3), "vectorized": result.numpy,
        "candidates": [_candidate_json(c, i) for i, c in enumerate(result.candidates, start=1)],
        "nearest": [dict({"relaxed": what, "why": why}, **({"candidate": _candidate_json(c, None)} if c else {}))
                    for what, c, why in result.nearest],
        "notes": result.notes,
    }


def _rows(candidates) -> list[tuple]:
    rows = []
    for number, c in enumerate(candidates, start=1):
        family = c.family
        u, length, seqs, tokens = c.point
        f = c.figures
        layout = str(family.gpus) + ("" if family.pipeline_parallel_size == 1 else f" (pp {family.pipeline_parallel_size})")
        rows.append((str(number), _truncate(c.model, 44) + ("" if family.variant.given else f" [{family.variant.label}]"),
                     layout, "fp8" if family.kv_cache_dtype != "auto" else "auto", "no" if family.enforce_eager else "yes",
                     f"{u:g}", f"{length:,}", str(seqs), f"{tokens:,}", f"{f['kv_cache_tokens']:,}",
                     f"{f['max_concurrency']:.2f}x", f"{f['nvidia_smi_used_mib']:,}", c.binding))
    return rows


_HEADERS = ("#", "checkpoint", "GPUs", "KV", "graphs", "gpu util", "max_model_len", "seqs", "batched tokens",
            "KV tokens", "concurrency", "smi MiB", "binding constraint")


def _launch(candidate, entrypoint: str) -> list[str]:
    if entrypoint == "llm":
        return ["  " + line for line in candidate.python.splitlines()] + [f"  (server: {candidate.command})"]
    return [f"  {candidate.command}"]


_RELAXED = {"concurrency": "fewer requests", "context": "a shorter context", "gpus": "more GPUs",
            "weights": "why not", "model limit": "why not"}


def fit_text(result) -> str:
    gpu = result.gpu
    lines = [f"{result.model} on {gpu.name} ({gpu.cuda_total_bytes / GIB:.2f} GiB as CUDA reports it) · "
             f"vLLM {result.vllm_version} ({result.engine.upper()})",
             f"target: {result.target.describe()}",
             f"searched {result.searched:,} configurations in {result.families} families in {result.seconds:.2f} s", ""]
    if result.feasible:
        lines += _table(_HEADERS, _rows(result.candidates), "llrllrrrrrrrl")
        best = result.candidates[0]
        lines += ["", f"best: {best.binding} binds — {best.why}"]
        lines += _launch(best, result.entrypoint)
        if best.compromises:
            lines.append("what it gives up: " + "; ".join(best.compromises))
        if best.verified is False:
            lines.append("note: api.explain disagrees with the fast path for this candidate (figures above are the fast path's)")
    else:
        lines.append("No configuration meets the target.")
        for what, candidate, why in result.nearest:
            lines.append(f"- {_RELAXED.get(what, what)}: {why}")
            if candidate is not None:
                lines.append(f"  binding: {candidate.binding} — {candidate.why}")
                lines += ["  " + line for line in _launch(candidate, result.entrypoint)]
    for note in result.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines)
