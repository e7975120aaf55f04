"""Breakdown -> terminal text, JSON-ready dict, Markdown. Pure functions; no I/O."""
from __future__ import annotations

import os
import sys

from .breakdown import Breakdown, Component
from .units import GIB


def _g(num_bytes: float) -> float:
    return round(num_bytes / GIB, 4)


def schema_figures(breakdown: Breakdown, weights_bytes: int | None = None) -> dict:
    """A prediction under the key names of shared/groundtruth/SCHEMA.md's `observed` object (the engine's
    own figures under the names the engine gives them)."""
    out = {
        "total_gpu_memory_gib": breakdown.total_gpu_bytes / GIB,
        "weights_gib": (breakdown.weights_bytes if weights_bytes is None else weights_bytes) / GIB,
        "kv_cache_gib": breakdown.kv_cache_bytes / GIB,
        "kv_cache_tokens": breakdown.kv_cache_tokens,
        "max_concurrency": breakdown.max_concurrency,
        "nvidia_smi_used_mib": breakdown.nvidia_smi_used_mib,
        "startup_failed": breakdown.failure is not None,
    }
    for figure in breakdown.engine_figures:
        for name in figure.schema:
            out[name] = figure.value / GIB if figure.key.endswith("_bytes") else figure.value
    return out


def to_json(breakdown: Breakdown) -> dict:
    out = {
        "model": breakdown.model,
        "gpu": breakdown.gpu_name,
        "total_gpu_gib": _g(breakdown.total_gpu_bytes),
        "engine_name": breakdown.engine_name,
        "engine_version": breakdown.engine_version,
        # the engine's own figures (vLLM: vllm_version, engine "v0"/"v1", blocks, budget terms)
        **{figure.json_key: _g(figure.value) if figure.key.endswith("_bytes") else figure.value
           for figure in breakdown.engine_figures},
        "weights_gib": _g(breakdown.weights_bytes),
        "kv_cache_gib": _g(breakdown.kv_cache_bytes),
        "kv_bytes_per_token": breakdown.kv_bytes_per_token,
        "kv_cache_tokens": breakdown.kv_cache_tokens,
        "max_concurrency": round(breakdown.max_concurrency, 4),
        "max_model_len": breakdown.max_model_len,
        "nvidia_smi_used_mib": breakdown.nvidia_smi_used_mib,
        "log_lines": list(breakdown.log_lines),
        "components": breakdown.components.to_dict(),
        "outside_budget": breakdown.outside_budget.to_dict(),
        "weights_explained": [step.to_dict() for step in breakdown.weights_explained],
        "weights_whatif": [lever.to_dict() for lever in breakdown.weights_whatif],
        "settings": {s.name: {"value": s.value, "given": s.given, **({"reason": s.reason} if s.reason else {})}
                     for s in breakdown.settings},
        "startup_failed": breakdown.failure is not None,
        "notes": list(breakdown.notes),
    }
    if breakdown.intervals:
        out["intervals"] = [item.to_dict() for item in breakdown.intervals]
    if breakdown.verdict_margin:
        out["verdict_margin"] = breakdown.verdict_margin
    if breakdown.failure is not None:
        out["failure"] = {"message": breakdown.failure.message,
                          "largest_fitting_max_model_len": breakdown.failure.largest_fitting_max_model_len}
    if breakdown.per_rank:
        out["per_rank"] = [
            {"rank": r.rank, "pipeline_stage": r.pipeline_stage, "layers": r.num_layers, "weights_gib": _g(r.weights_bytes),
             "activation_peak_gib": _g(r.activation_peak_bytes), "non_torch_gib": _g(r.non_torch_bytes),
             "cuda_graph_gib": _g(r.cuda_graph_bytes), "kv_cache_gib": _g(r.kv_cache_bytes),
             "num_blocks_own": r.num_blocks_own, "budget_gib": _g(r.budget_bytes),
             "other_budgeted_gib": _g(r.other_budgeted_bytes), "kv_pool_gib": _g(r.kv_pool_bytes),
             "kv_unused_gib": _g(r.kv_unused_bytes)}
            for r in breakdown.per_rank
        ]
    return out


def _per_rank_budget_rows(ranks) -> list[tuple[str, ...]]:
    """Each rank's own column down to its budget: non-torch, other budgeted terms, the pool it allocates and
    what it leaves unused (rows only where the engine filled the budget in)."""
    if not any(r.budget_bytes for r in ranks):
        return []
    rows = [("non-torch GiB",) + tuple(f"{r.non_torch_bytes / GIB:.3f}" for r in ranks)]
    if any(r.other_budgeted_bytes for r in ranks):
        rows.append(("other budgeted GiB",) + tuple(f"{r.other_budgeted_bytes / GIB:.3f}" for r in ranks))
    rows += [("KV pool allocated GiB",) + tuple(f"{r.kv_pool_bytes / GIB:.3f}" for r in ranks),
             ("KV left unused GiB",) + tuple(f"{r.kv_unused_bytes / GIB:.3f}" for r in ranks),
             ("= budget GiB",) + tuple(f"{r.budget_bytes / GIB:.3f}" for r in ranks)]
    return rows


def _use_color(stream) -> bool:
    return hasattr(stream, "isatty") and stream.isatty() and os.environ.get("NO_COLOR") is None


class _Style:
    def __init__(self, enabled: bool):
        self.enabled = enabled

    def __call__(self, text: str, code: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.enabled else text


def _tree_rows(component: Component, depth: int = 0) -> list[tuple[str, float, str]]:
    rows = [("  " * depth + component.label, component.bytes / GIB, component.reason)]
    for child in component.children:
        rows.extend(_tree_rows(child, depth + 1))
    return rows


def _table(headers: tuple[str, ...], rows: list[tuple], aligns: str) -> list[str]:
    cells = [tuple(str(c) for c in headers)] + [tuple(str(c) for c in row) for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row):
        parts = [(cell.rjust(w) if a == "r" else cell.ljust(w)) for cell, w, a in zip(row, widths, aligns)]
        return "│ " + " │ ".join(parts) + " │"

    top = "┌─" + "─┬─".join("─" * w for w in widths) + "─┐"
    mid = "├─" + "─┼─".join("─" * w for w in widths) + "─┤"
    bottom = "└─" + "─┴─".join("─" * w for w in widths) + "─┘"
    return [top, line(cells[0]), mid] + [line(row) for row in cells[1:]] + [bottom]


def _truncate(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _engine_title(b: Breakdown, variant_word: str = "") -> str:
    """"vLLM 0.6.3 (V0 engine)": the engine's name, release and its own path, as the engine labels them."""
    return f"{b.engine_label} {b.engine_version}" + (f" ({b.engine_variant}{variant_word})" if b.engine_variant else "")


def _engine_rows(b: Breakdown) -> list[tuple[str, str]]:
    return [(figure.label, figure.text) for figure in b.engine_figures if figure.label]


def render_text(breakdown: Breakdown, stream=None) -> str:
    style = _Style(_use_color(stream or sys.stdout))
    b = breakdown
    out = [style(f"{b.model} on {b.gpu_name} ({b.total_gpu_bytes / GIB:.2f} GiB as CUDA reports it)", "1"),
           f"{_engine_title(b, ' engine')} · "
           + (" · ".join(f"{s.name}={s.value}" for s in b.settings if s.given) or "all settings at this release's defaults")]
    rows = [(label, f"{amount:8.3f}", _truncate(reason, 70)) for label, amount, reason in _tree_rows(b.components)]
    rows += [(label, f"{amount:8.3f}", _truncate(reason, 70)) for label, amount, reason in _tree_rows(b.outside_budget)]
    out += _table(("where the memory goes (per GPU)", "GiB", "why"), rows, "lrl")
    out.append("")
    kv_rows = [
        ("KV bytes per token", f"{b.kv_bytes_per_token:,} B"),
        *_engine_rows(b),
        ("KV cache tokens", f"{b.kv_cache_tokens:,}"),
        (f"max concurrency at {b.max_model_len:,} tokens", f"{b.max_concurrency:.2f}x"),
        ("expected nvidia-smi used", f"{b.nvidia_smi_used_mib:,} MiB"),
    ]
    out += _table(("KV cache", "value"), kv_rows, "lr")
    out.append("")
    out += _interval_lines(b)
    if b.per_rank:
        # every pipeline stage sizes its own pool; the engine keeps the smallest block count
        headers = ("per GPU",) + tuple(f"stage {r.pipeline_stage} (rank {r.rank}+)" for r in b.per_rank)
        rows = [
            ("layers",) + tuple(str(r.num_layers) for r in b.per_rank),
            ("weights GiB",) + tuple(f"{r.weights_bytes / GIB:.3f}" for r in b.per_rank),
            ("activation peak GiB",) + tuple(f"{r.activation_peak_bytes / GIB:.3f}" for r in b.per_rank),
            *_per_rank_budget_rows(b.per_rank),
            ("available KV GiB",) + tuple(f"{r.kv_cache_bytes / GIB:.3f}" for r in b.per_rank),
            ("blocks it could hold",) + tuple(f"{r.num_blocks_own:,}" for r in b.per_rank),
        ]
        out += _table(headers, rows, "l" + "r" * len(b.per_rank))
        out.append(f"the engine uses the minimum: {b.num_gpu_blocks:,} blocks on every stage")
        out.append("")
    steps = [(step.label, f"{step.bytes / GIB:+8.3f}" if i not in (0, len(b.weights_explained) - 1) else f"{step.bytes / GIB:8.3f}",
              _truncate(step.reason, 80)) for i, step in enumerate(b.weights_explained)]
    if steps:  # an engine without a theory-vs-reality walk (llama.cpp: the header is the truth) shows none
        out += _table(("theory vs reality (weights)", "GiB", "why"), steps, "lrl")
    for lever in b.weights_whatif:
        out.append(f"what if: {lever.label}: saves {-lever.bytes / GIB:.2f} GiB ({lever.reason})")
    if steps or b.weights_whatif:
        out.append("")
    out.append(style("What this release would print:", "1"))
    out += [f"  {line}" for line in b.log_lines]
    for note in b.notes:
        out.append(f"note: {note}")
    if b.failure is not None:
        out.append(style(f"{b.engine_label} {b.engine_version} would refuse to start: {b.failure.message}", "31"))
        if b.failure.largest_fitting_max_model_len:
            out.append(f"largest max_model_len that fits: {b.failure.largest_fitting_max_model_len:,}")
    return "\n".join(out)


def _interval_lines(b: Breakdown) -> list[str]:
    """'KV cache 14.60 (90 %: 13.90-15.20)': each figure's interval from the scored errors of its term."""
    if not b.intervals:
        return []
    from .forensics.observed import LABELS

    out = [f"how sure ({b.intervals[0].level:.0%} intervals from the errors scored on real logs):"]
    for item in b.intervals:
        unit = "GiB" if item.key.endswith(("_gib", "_gb")) else ("MiB" if item.key.endswith("_mib") else "")
        digits = 2 if unit == "GiB" or "concurrency" in item.key else 0
        out.append(f"  {LABELS.get(item.key, item.key)} {item.value:,.{digits}f} {unit} ({item.level:.0%}: "
                   f"{item.low:,.{digits}f}-{item.high:,.{digits}f})".replace("  (", " ("))
    if b.verdict_margin:
        out.append(f"  verdict: {b.verdict_margin}")
    return out + [""]


def render_markdown(breakdown: Breakdown) -> str:
    b = breakdown
    out = [f"### {b.model} on {b.gpu_name} — {_engine_title(b)}", "",
           "| component | GiB | why |", "|---|---:|---|"]
    for label, amount, reason in _tree_rows(b.components) + _tree_rows(b.outside_budget):
        indent = "&nbsp;&nbsp;" * (len(label) - len(label.lstrip()))
        out.append(f"| {indent}{label.strip()} | {amount:.3f} | {reason.replace('|', '/')} |")
    out += ["", "| KV cache | value |", "|---|---:|",
            f"| KV bytes per token | {b.kv_bytes_per_token:,} |",
            *(f"| {label} | {text} |" for label, text in _engine_rows(b)),
            f"| KV cache tokens | {b.kv_cache_tokens:,} |",
            f"| max concurrency at {b.max_model_len:,} | {b.max_concurrency:.2f}x |",
            f"| expected nvidia-smi used | {b.nvidia_smi_used_mib:,} MiB |", "",
            *(["| theory vs reality | GiB |", "|---|---:|"] if b.weights_explained or b.weights_whatif else [])]
    out += [f"| {step.label} | {step.bytes / GIB:.4f} |" for step in b.weights_explained]
    out += [f"| what if: {lever.label} | {lever.bytes / GIB:+.4f} |" for lever in b.weights_whatif]
    out += ["", "```"] + list(b.log_lines) + ["```"]
    if b.failure is not None:
        out += ["", f"**{b.engine_label} would refuse to start:** {b.failure.message}"]
    return "\n".join(out)


def render_gpu_summary(rows: list[dict], markdown: bool = False) -> str:
    headers = ("GPU", "total GiB", "weights GiB", "KV GiB", "KV tokens", "concurrency", "starts?")
    table_rows = [
        (r["gpu"], f"{r['total_gib']:.2f}", f"{r['weights_gib']:.2f}" if r.get("weights_gib") is not None else "-",
         f"{r['kv_cache_gib']:.2f}" if r.get("kv_cache_gib") is not None else "-",
         f"{r['kv_cache_tokens']:,}" if r.get("kv_cache_tokens") is not None else "-",
         f"{r['max_concurrency']:.2f}x" if r.get("max_concurrency") is not None else "-",
         "yes" if r["starts"] else "no: " + _truncate(r.get("why", ""), 50))
        for r in rows
    ]
    if markdown:
        lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
        lines += ["| " + " | ".join(row) + " |" for row in table_rows]
        return "\n".join(lines)
    return "\n".join(_table(headers, table_rows, "lrrrrrl"))


def _size(num_bytes: int) -> str:
    if num_bytes >= GIB:
        return f"{num_bytes / GIB:.3f} GiB"
    if num_bytes >= 1 << 20:
        return f"{num_bytes / (1 << 20):.2f} MiB"
    if num_bytes >= 1 << 10:
        return f"{num_bytes / (1 << 10):.1f} KiB"
    return f"{num_bytes} B"


def render_tensors(groups, title: str | None = None, markdown: bool = False) -> str:
    """The tensor groups one rank holds (engines/vllm/weights.py TensorGroup): name pattern, count, shape, stored
    dtype, bytes (all of the group) and role, then the total and the bytes per role."""
    headers = ("tensor (per rank)", "count", "shape", "dtype", "bytes", "role")
    rows = [(g.name, f"{g.count:,}", "[" + ", ".join(f"{d:,}" for d in g.shape) + "]", g.dtype, _size(g.bytes), g.role)
            for g in groups]
    total = sum(g.bytes for g in groups)
    by_role: dict[str, int] = {}
    for g in groups:
        by_role[g.role] = by_role.get(g.role, 0) + g.bytes
    summary = " · ".join(f"{role} {_size(amount)}" for role, amount in sorted(by_role.items(), key=lambda item: -item[1]))
    if markdown:
        out = [f"#### {title}", ""] if title else []
        out += ["| " + " | ".join(headers) + " |", "|---|---:|---|---|---:|---|"]
        out += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in rows]
        out += [f"| **total** | | | | **{_size(total)}** ({total:,} B) | |", "", summary]
        return "\n".join(out)
    out = [title] if title else []
    out += _table(headers, rows + [("total", "", "", "", _size(total), f"{total:,} B")], "lrllrl")
    out.append(summary)
    return "\n".join(out)
