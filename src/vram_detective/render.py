"""Breakdown -> terminal text, JSON-ready dict, Markdown. Pure functions; no I/O."""
from __future__ import annotations

import os
import re
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


def engine_json(breakdown: Breakdown) -> dict:
    """The engine's own figures by their names (vLLM: its release, V0/V1 path, blocks, budget terms; SGLang: its
    pool and memory lines; llama.cpp: its buffers per device), as `explain --json` nests them under the engine."""
    return {figure.json_key: _g(figure.value) if figure.key.endswith("_bytes") else figure.value
            for figure in breakdown.engine_figures}


def to_json(breakdown: Breakdown) -> dict:
    """What `explain --json` prints and /api/explain answers (library.SCHEMA_VERSION names its shape)."""
    from .library import SCHEMA_VERSION

    out = {
        "schema_version": SCHEMA_VERSION,
        "model": breakdown.model,
        "gpu": breakdown.gpu_name,
        "total_gpu_gib": _g(breakdown.total_gpu_bytes),
        "engine_name": breakdown.engine_name,
        "engine_version": breakdown.engine_version,
        # the engine's own figures under its name, the figures every engine has at the top (schema 2)
        breakdown.engine_name: engine_json(breakdown),
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
    if breakdown.devices:
        out.update(gpus_json(breakdown.devices))
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


def gpus_json(devices) -> dict:
    """`devices`: one entry per GPU (breakdown.DeviceFigures.to_dict); `all_gpus`: their sums, what the GPUs
    hold together (with one GPU neither key is written: the top-level figures are that GPU's)."""
    listed = [d.to_dict() for d in devices]
    return {"devices": listed, "all_gpus": {
        "gpus": len(devices), "total_gib": _g(sum(d.total_bytes for d in devices)),
        "weights_gib": _g(sum(d.weights_bytes for d in devices)),
        "kv_cache_gib": _g(sum(d.kv_cache_bytes for d in devices)),
        "other_gib": _g(sum(d.other_bytes for d in devices)), "free_gib": _g(sum(d.free_bytes for d in devices)),
        "nvidia_smi_used_mib": sum(d.nvidia_smi_used_mib for d in devices)}}


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


# Words of the project's own notes (rule ids, budget eras, issue numbers, design documents that do not ship
# with the wheel): kept for --verbose, left out of what a user reads otherwise.
_INTERNAL = (
    re.compile(r"\s*\((?:see )?design/[^)]*\)"),
    re.compile(r";?\s*(?:see )?design/[\w./-]+\.md(?:\s*§[\d.]+(?:[-,]\s*§?[\d.]+)*)?"),
    re.compile(r"#\d{3,}:?\s*"),
    re.compile(r",?\s*\bera V\d-[a-z]\b"),
    re.compile(r"\bV\d-[a-z]\b(?:\s*\([^)]*\))?:?\s*"),
    re.compile(r"\s*\(\d+ sizings\)|\b\d+ sizings\b"),
)


def public(text: str, verbose: bool = False) -> str:
    """`text` without the project's internal words (unless --verbose)."""
    if verbose or not text:
        return text
    lead = text[: len(text) - len(text.lstrip())]
    for pattern in _INTERNAL:
        text = pattern.sub(lambda match: " " if match.group(0)[:1].isspace() and match.group(0)[-1:].isspace() else "",
                           text)
    return lead + text.strip(" ;,") if text.strip(" ;,") else ""


def _tree_rows(component: Component, depth: int = 0, verbose: bool = False) -> list[tuple[str, float, str]]:
    reason = public(component.reason, verbose)
    if verbose and component.source:
        reason = f"{reason} [{component.source}]" if reason else f"[{component.source}]"
    rows = [("  " * depth + component.label, component.bytes / GIB, reason)]
    for child in component.children:
        rows.extend(_tree_rows(child, depth + 1, verbose))
    return rows


def _table(headers: tuple[str, ...], rows: list[tuple], aligns: str, columns: int | None = None) -> list[str]:
    from .term import table

    return table(headers, rows, aligns, columns)


def _truncate(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _engine_title(b: Breakdown, variant_word: str = "") -> str:
    """"vLLM 0.6.3 (V0 engine)": the engine's name, release and its own path, as the engine labels them."""
    return f"{b.engine_label} {b.engine_version}" + (f" ({b.engine_variant}{variant_word})" if b.engine_variant else "")


def _engine_rows(b: Breakdown) -> list[tuple[str, str]]:
    return [(figure.label, figure.text) for figure in b.engine_figures if figure.label]


def _kv_rows(b: Breakdown) -> list[tuple[str, str]]:
    rows = [("KV bytes per token", f"{b.kv_bytes_per_token:,} B"), *_engine_rows(b),
            ("KV cache tokens", f"{b.kv_cache_tokens:,}")]
    if b.failure is None:  # a refused start has no concurrency and no nvidia-smi reading
        where = f" ({b.devices[0].name})" if b.devices else ""  # every GPU's is in the answer above
        rows += [(f"max concurrency at {b.max_model_len:,} tokens", f"{b.max_concurrency:.2f}x"),
                 (f"expected nvidia-smi used{where}", f"{b.nvidia_smi_used_mib:,} MiB")]
    return rows


def _per_rank_lines(b: Breakdown, columns: int | None) -> list[str]:
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
    return (_table(headers, rows, "l" + "r" * len(b.per_rank), columns)
            + [f"the engine uses the minimum: {b.num_gpu_blocks:,} blocks on every stage", ""])


def _theory_lines(b: Breakdown, columns: int | None, verbose: bool) -> list[str]:
    from .term import wrap

    from .summary import model_gpus

    last = len(b.weights_explained) - 1
    steps = [(step.label, f"{step.bytes / GIB:+8.3f}" if i not in (0, last) else f"{step.bytes / GIB:8.3f}",
              public(step.reason, verbose)) for i, step in enumerate(b.weights_explained)]
    out = []
    if steps:  # an engine without a theory-vs-reality walk (llama.cpp: the header is the truth) shows none
        gpus = model_gpus(b)
        header = "theory vs reality (weights, per GPU)" if gpus > 1 else "theory vs reality (weights)"
        out += _table((header, "GiB", "why"), steps, "lrl", columns)
        if gpus > 1:
            out += wrap(f"whole model: {b.weights_bytes * gpus / GIB:.3f} GiB of weights over {gpus} GPUs "
                        f"({b.weights_bytes / GIB:.3f} GiB on each, as the table shows)", columns)
    for lever in b.weights_whatif:
        out += wrap(f"what if: {lever.label}: saves {-lever.bytes / GIB:.2f} GiB ({public(lever.reason, verbose)})",
                    columns, "", "  ")
    return out + ([""] if out else [])


def render_text(breakdown: Breakdown, stream=None, columns: int | None = -1, smallest=None,
                verbose: bool = False, fit_hint: str | None = None, input_notes=()) -> str:
    """The answer first (summary.verdict: starts or not, nvidia-smi and its parts as a bar), then the tables.
    `columns`: the width to fit (-1: the terminal's; None: --wide); `smallest`: summary.Smallest or None."""
    from .summary import verdict
    from .term import paragraph, width

    columns = width() if columns == -1 else columns
    style = _Style(_use_color(stream or sys.stdout))
    b = breakdown
    out = verdict(b, columns, smallest=smallest, fit_hint=fit_hint, style=style)
    out += paragraph([f"note: {note}" for note in input_notes], columns)
    out += [""] + [style(line, "1") for line in paragraph(
        [f"{b.model} on {b.gpu_name} ({b.total_gpu_bytes / GIB:.2f} GiB as CUDA reports it)"], columns)]
    out += paragraph([f"{_engine_title(b, ' engine')} · "
                      + (" · ".join(f"{s.name}={s.value}" for s in b.settings if s.given)
                         or "all settings at this release's defaults")], columns)
    rows = [(label, f"{amount:8.3f}", reason) for label, amount, reason in _tree_rows(b.components, verbose=verbose)]
    rows += [(label, f"{amount:8.3f}", reason) for label, amount, reason in _tree_rows(b.outside_budget, verbose=verbose)]
    out += _table(("where the memory goes (per GPU)", "GiB", "why"), rows, "lrl", columns)
    out.append("")
    out += _table(("KV cache", "value"), _kv_rows(b), "lr", columns)
    out.append("")
    out += paragraph(_interval_lines(b), columns, "    ")
    if b.per_rank:
        out += _per_rank_lines(b, columns)
    out += _theory_lines(b, columns, verbose)
    out.append(style("What this release would print:" if b.failure is None else
                     "What this release would print before it stops:", "1"))
    out += paragraph([f"  {line}" for line in b.log_lines], columns, "    ")
    out += paragraph([f"note: {public(note, verbose)}" for note in b.notes], columns)
    if b.failure is not None:
        from .summary import _first_sentence

        if _first_sentence(b.failure.message) != b.failure.message.strip():  # the verdict had its first sentence
            out += [style(line, "31") for line in paragraph(
                [f"{b.engine_label} {b.engine_version} would refuse to start: {b.failure.message}"], columns)]
    return "\n".join(out)


def _interval_lines(b: Breakdown) -> list[str]:
    """'KV cache 14.60 (90 %: 13.90-15.20)': each figure's interval from the scored errors of its term."""
    if not b.intervals:
        return []
    from .observed_keys import LABELS

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
            f"| expected nvidia-smi used | {b.nvidia_smi_used_mib:,} MiB |",
            *(f"| nvidia-smi on {d.name} ({d.role}) | {d.nvidia_smi_used_mib:,} MiB |" for d in b.devices), "",
            *(["| theory vs reality | GiB |", "|---|---:|"] if b.weights_explained or b.weights_whatif else [])]
    out += [f"| {step.label} | {step.bytes / GIB:.4f} |" for step in b.weights_explained]
    out += [f"| what if: {lever.label} | {lever.bytes / GIB:+.4f} |" for lever in b.weights_whatif]
    out += ["", "```"] + list(b.log_lines) + ["```"]
    if b.failure is not None:
        out += ["", f"**{b.engine_label} would refuse to start:** {b.failure.message}"]
    return "\n".join(out)


def render_gpu_summary(rows: list[dict], markdown: bool = False, columns: int | None = None) -> str:
    """One line per common GPU; the KV figures only where the engine starts (a refused start has none)."""
    from .summary import _first_sentence

    def figure(r, key, text):
        return text.format(r[key]) if r["starts"] and r.get(key) is not None else "-"

    headers = ("GPU", "total GiB", "weights GiB", "KV GiB", "KV tokens", "concurrency", "starts?")
    table_rows = []
    for r in rows:
        why = "starts" if r["starts"] else "does not start: " + _first_sentence(r.get("why") or "refused")
        if not r["starts"] and r.get("largest_fitting_max_model_len"):
            why += f" The longest context that fits: {r['largest_fitting_max_model_len']:,} tokens."
        table_rows.append((r["gpu"], f"{r['total_gib']:.2f}",
                           f"{r['weights_gib']:.2f}" if r.get("weights_gib") is not None else "-",
                           figure(r, "kv_cache_gib", "{:.2f}"), figure(r, "kv_cache_tokens", "{:,}"),
                           figure(r, "max_concurrency", "{:.2f}x"), why))
    if markdown:
        lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
        lines += ["| " + " | ".join(row) + " |" for row in table_rows]
        return "\n".join(lines)
    return "\n".join(_table(headers, table_rows, "lrrrrrl", columns))


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
