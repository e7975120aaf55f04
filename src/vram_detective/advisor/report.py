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
    from .answers import nested_row

    # the engine's own figures under its name (schema 2): its V0/V1 path here, its block counts in each row
    out = {"model": base.model, "gpu": result.gpu_name, "engine_name": b.engine_name, "engine_version": b.engine_version,
           b.engine_name: {"vllm_path": result.engine}, "baseline": nested_row(base.to_dict(), b.engine_name),
           "levers": [nested_row(lever.to_dict(), b.engine_name) for lever in result.levers]}
    out["baseline"].pop("delta", None)
    return out


def _lines(headers, rows, aligns, columns, markdown: bool) -> list[str]:
    from ..listing import _markdown
    from ..term import table

    if markdown:
        return _markdown(headers, rows, aligns)
    return table(headers, rows, aligns, columns)


def _first_sentence(text: str) -> str:
    from ..summary import _first_sentence as first

    return first(text)


def whatif_text(result, columns: int | None = -1, markdown: bool = False) -> str:
    """The baseline in a line or two, the levers that change something as a table, and each refusal once
    (the levers it holds for listed together); a baseline that would not start points to `fit` first."""
    from ..term import paragraph, width

    columns = width() if columns == -1 else columns
    base = result.baseline
    b = base.breakdown
    given = " · ".join(f"{s.name}={s.value}" for s in b.settings if s.given) or "this release's defaults"
    title = f"{b.engine_label} {b.engine_version}" + (f" ({b.engine_variant})" if b.engine_variant else "")
    if base.starts:
        head = [f"Starts as it is: weights {base.weights_bytes / GIB:.2f} GiB, KV pool {base.kv_pool_bytes / GIB:.2f} "
                f"GiB ({base.num_gpu_blocks:,} blocks, {base.kv_cache_tokens:,} tokens), {base.max_concurrency:.2f}x "
                f"concurrency at {b.max_model_len:,} tokens. nvidia-smi ≈ {base.nvidia_smi_used_mib:,} MiB."]
    else:
        head = [f"{b.engine_label} would refuse to start as it is: {_first_sentence(base.refused)}",
                f"try: vram-detective fit {base.model} --gpu \"{result.gpu_name}\" --context {b.max_model_len} "
                "(the settings and checkpoints that do start); the levers below, one at a time:"]
    lines = paragraph(head, columns, "  ") + [""]
    rows, refusals = [], {}
    for lever in result.levers:
        name = f"{lever.lever}: {lever.change}"
        if lever.refused and (lever.weights_bytes is None or not lever.starts):
            refusals.setdefault(_first_sentence(lever.refused), []).append(name)
            continue
        if lever.weights_bytes is None:
            rows.append((name, "-", "-", "-", "-", "-", lever.note or lever.cost))
            continue
        d = lever.deltas
        rows.append((name, _signed(d["weights_bytes"] / GIB), _signed(d["kv_pool_bytes"] / GIB),
                     _signed(d["kv_cache_tokens"]), f"{lever.max_concurrency:.2f}x", _signed(d["nvidia_smi_used_mib"]),
                     (lever.note + "; " if lever.note else "") + lever.cost))
    if rows:
        lines += _lines(("each lever alone: change", "weights GiB", "KV pool GiB", "KV tokens", "concurrency",
                         "nvidia-smi MiB", "what it costs"), rows, "lrrrrrl", columns, markdown)
    baseline_reason = _first_sentence(base.refused) if not base.starts else None
    for reason, names in refusals.items():
        same = " (as the baseline)" if reason == baseline_reason else ""
        lines += paragraph([f"would not start{same}: {', '.join(names)}"], columns, "  ")
        if not same:
            lines += paragraph([f"  because: {reason}"], columns, "  ")
    lines += paragraph(["Figures are per GPU; tokens and concurrency are the engine's (all GPUs together). KV "
                        "offload to CPU (LMCache, --kv-transfer-config) is not modelled.",
                        f"{base.model} on {result.gpu_name} · {title} · {given}"], columns)
    return "\n".join(lines)


# --- fit ---------------------------------------------------------------------------------------------------


def _candidate_json(candidate, rank: int | None, engine_name: str) -> dict:
    from ..render import to_json

    family = candidate.family
    out = {"rank": rank, "feasible": candidate.feasible, "model": candidate.model, "checkpoint": family.variant.label,
           "settings": {key: value for key, value in candidate.settings.items() if key != "entrypoint"},
           "command": candidate.command, "python": candidate.python, "binding_constraint": candidate.binding,
           "binding_reason": candidate.why, "compromises": candidate.compromises, "verified": candidate.verified,
           **margin_json(candidate.margin, candidate.point[1])}
    if candidate.breakdown is not None:
        figures = to_json(candidate.breakdown)
        for key in _FIGURE_KEYS_DROPPED:
            figures.pop(key, None)
        figures.pop("model", None)
        out.update(figures)
    else:
        f = candidate.figures
        out[engine_name] = {"num_gpu_blocks": f["num_gpu_blocks"]}  # the engine's own figure (schema 2)
        out.update(kv_cache_tokens=f["kv_cache_tokens"],
                   max_concurrency=round(f["max_concurrency"], 4), nvidia_smi_used_mib=f["nvidia_smi_used_mib"],
                   kv_cache_gib=round(f["kv_cache_bytes"] / GIB, 4), max_model_len=candidate.point[1],
                   startup_failed=not f["starts"])
    return out


def margin_json(margin, max_model_len: int) -> dict:
    """`margin_gib`, `covers_interval` and the interval used (null where no interval was scored)."""
    from ..intervals import describe

    if margin is None:
        return {"margin_gib": None, "covers_interval": None, "interval": None, "margin": None}
    return dict(margin.to_dict(), margin=describe(margin, max_model_len))


def margin_cell(margin, unit: str = "GiB") -> str:
    """'+1.20 GiB' or '+0.10 GiB borderline' for a table ('+1,229 MiB' in a sentence of MiB figures); '-' without
    an interval."""
    if margin is None:
        return "-"
    text = f"{margin.spare_gib * 1024:+,.0f} MiB" if unit == "MiB" else f"{margin.spare_gib:+.2f} GiB"
    return text + ("" if margin.covers else " borderline")


def none_covers_line(margins: list) -> str | None:
    """The one line that says no candidate's margin covers its interval (None when one does or none is known)."""
    known = [m for m in margins if m is not None]
    if not known or any(m.covers for m in known) or len(known) < len(margins):
        return None
    return (f"No candidate's margin covers the {known[0].interval.level:.0%} interval of its KV pool; "
            "the best borderline one:")


def _borderline_lines(candidates) -> list[str]:
    """Each borderline candidate of the table with its reason (ranked after those whose margin covers)."""
    from ..intervals import describe

    return [f"{number}. {describe(c.margin, c.point[1])}" for number, c in enumerate(candidates, start=1)
            if c.margin is not None and not c.margin.covers]


def fit_json(result, engine_name: str) -> dict:
    """`fit --json` of the sweep: the release at the top, the engine's own path under its name (schema 2)."""
    target = result.target
    return {
        "model": result.model, "gpu": result.gpu.name, "engine_version": result.vllm_version,
        engine_name: {"vllm_path": result.engine}, "entrypoint": result.entrypoint,
        "target": {"context": target.context, "concurrency": target.need,
                   "max_gpu_memory_mib": target.ceiling_mib, "gpus": target.gpus},
        "feasible": result.feasible, "searched_configurations": result.searched, "families": result.families,
        "seconds": round(result.seconds, 3), "vectorized": result.numpy,
        "candidates": [_candidate_json(c, i, engine_name) for i, c in enumerate(result.candidates, start=1)],
        "nearest": [dict({"relaxed": what, "why": why}, **({"candidate": _candidate_json(c, None, engine_name)} if c else {}))
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
        rows.append((f"{number}. " + c.model + ("" if family.variant.given else f" [{family.variant.label}]"),
                     layout, "fp8" if family.kv_cache_dtype != "auto" else "auto", "no" if family.enforce_eager else "yes",
                     f"{u:g}", f"{length:,}", str(seqs), f"{tokens:,}", f"{f['kv_cache_tokens']:,}",
                     f"{f['max_concurrency']:.2f}x", f"{f['nvidia_smi_used_mib']:,}", margin_cell(c.margin),
                     c.binding))
    return rows


_HEADERS = ("checkpoint", "GPUs", "KV", "graphs", "gpu util", "max_model_len", "seqs", "batched tokens",
            "KV tokens", "concurrency", "smi MiB", "margin", "binding constraint")
_ALIGNS = "lrllrrrrrrrrl"


def _table_lines(candidates, columns, markdown: bool) -> list[str]:
    """The ranked candidates; a column with one value for all of them is said once above the table."""
    rows = _rows(candidates)
    same = [i for i in range(1, len(_HEADERS) - 1) if len(rows) > 1 and len({row[i] for row in rows}) == 1]
    kept = [i for i in range(len(_HEADERS)) if i not in same]
    out = []
    if same:
        from ..term import wrap

        out += wrap("every candidate: " + ", ".join(f"{_HEADERS[i]} {rows[0][i]}" for i in same), columns, "", "  ")
    return out + _lines(tuple(_HEADERS[i] for i in kept), [tuple(row[i] for i in kept) for row in rows],
                        "".join(_ALIGNS[i] for i in kept), columns, markdown)


def _launch(candidate, entrypoint: str) -> list[str]:
    if entrypoint == "llm":
        return ["  " + line for line in candidate.python.splitlines()] + [f"  (server: {candidate.command})"]
    return [f"  {candidate.command}"]


_RELAXED = {"concurrency": "fewer requests", "context": "a shorter context", "gpus": "more GPUs",
            "weights": "why not", "model limit": "why not"}


def fit_text(result, columns: int | None = -1, markdown: bool = False) -> str:
    """The answer first (the best launch line, or why nothing fits and what would), then the ranked table."""
    from ..term import paragraph, width

    columns = width() if columns == -1 else columns
    gpu = result.gpu
    lines = []
    if result.feasible:
        best = result.candidates[0]
        f = best.figures
        none_covers = none_covers_line([c.margin for c in result.candidates])
        if none_covers:
            lines += paragraph([none_covers], columns)
        lines += paragraph([f"Best: {best.model} · nvidia-smi {f['nvidia_smi_used_mib']:,} MiB, "
                            f"{f['max_concurrency']:.2f}x at {best.point[1]:,} tokens ({best.binding} binds: {best.why})"],
                           columns)
        lines += paragraph(_launch(best, result.entrypoint), columns, "    ")
        if best.margin is not None:
            from ..intervals import describe

            covers = f": covers the KV pool's {best.margin.interval.level:.0%} interval" if best.margin.covers else ""
            lines += paragraph([f"margin: {describe(best.margin, best.point[1])}{covers}"], columns)
        if best.compromises:
            lines += paragraph(["what it gives up: " + "; ".join(best.compromises)], columns)
        if best.verified is False:
            lines.append("note: api.explain disagrees with the fast path for this candidate (figures are the fast path's)")
    else:
        lines.append("No configuration meets the target.")
        for what, candidate, why in result.nearest:
            lines += paragraph([f"- {_RELAXED.get(what, what)}: {why}"], columns, "  ")
            if candidate is not None:
                lines += paragraph([f"  binding: {candidate.binding} — {candidate.why}"], columns, "  ")
                lines += paragraph(["  " + line for line in _launch(candidate, result.entrypoint)], columns, "    ")
    lines += [""] + paragraph([f"{result.model} on {gpu.name} ({gpu.cuda_total_bytes / GIB:.2f} GiB as CUDA reports "
                               f"it) · vLLM {result.vllm_version} ({result.engine.upper()})",
                               f"target: {result.target.describe()}",
                               f"searched {result.searched:,} configurations in {result.families} families "
                               f"in {result.seconds:.2f} s"], columns)
    if result.feasible:
        lines += _table_lines(result.candidates, columns, markdown)
        lines += paragraph(_borderline_lines(result.candidates), columns, "     ")
    lines += paragraph([f"note: {note}" for note in result.notes], columns)
    return "\n".join(lines)
