"""The answer of a log read whole (engine_logs.py), in the shape of a vLLM run's (answer.py): one verdict line
(who ran on what, what GPU 0 held, how far the prediction agrees), the memory bar, how each was read; then the
figures in words, the settings, observed vs predicted. The terminal text is drawn here; `--html` and the web page
draw the same fields (web/report.py)."""
from __future__ import annotations

# a figure "agrees" within the project's accuracy target (docs/accuracy.md: KV GiB within 5 %)
AGREES_WITHIN = 0.05


def engine_answer(report: dict, memory: dict, breakdown) -> dict:
    """{verdict, bar, read}: `memory` is what GPU 0 held by the log's own figures (engine.log_memory),
    `breakdown` the prediction compared with (None without one)."""
    observed = report["observed"]
    bar = _bar(observed, memory, breakdown, report.get("gpu"))
    bars = _device_bars(report, memory, bar)
    who = _who(report)
    if observed.get("startup_failed"):
        verdict = f"{who}: did not start" + (f": {report['failure']}" if report.get("failure") else ".")
    elif bar is not None and bar["sources"]["used"] == "logged":
        verdict = f"{who}: nvidia-smi {bar['used_mib']:,} MiB of {bar['total_mib']:,} MiB{_agreement(report)}."
    elif memory:
        held = (memory["weights_gib"] + memory["kv_gib"] + memory.get("other_gib", 0)
                + memory.get("context_gib", 0)) * 1024
        total = f" of {bar['total_mib']:,} MiB" if bar else ""
        others = "".join(f", {b['name']} about {b['used_mib']:,} MiB" + (f" of {b['total_mib']:,} MiB" if b["total_mib"]
                                                                          else "") for b in bars[1:])
        verdict = (f"{who}: GPU 0 holds about {held:,.0f} MiB{total}{others}: weights "
                   f"{memory['weights_gib'] * 1024:,.0f}, KV cache {memory['kv_gib'] * 1024:,.0f}, other buffers "
                   f"{memory.get('other_gib', 0) * 1024:,.0f} MiB as printed{' on GPU 0' if bars else ''}, and the "
                   f"CUDA context{_agreement(report)}.")
    else:
        verdict = f"{who}: this {report['engine_label']} log prints no memory figure of GPU 0{_agreement(report)}."
    out = {"verdict": verdict, "bar": bar, "read": _how_read(report)}
    if bars:
        out["bars"] = bars
    return out


def _device_bars(report: dict, memory: dict, first: dict | None) -> list[dict]:
    """One bar per GPU when the log printed several GPUs' figures (memory["devices"]): GPU 0's is `first`; each
    other GPU's is its printed parts and the CUDA context over its own card (the total it printed, else the catalog's
    card the log names for it, else GPU 0's)."""
    devices = memory.get("devices") or []
    if len(devices) < 2 or first is None:
        return []
    named = report.get("gpus_named") or []
    out = [dict(first, name=devices[0]["name"], device=devices[0]["device"])]
    for index, device in enumerate(devices[1:], start=1):
        gpu = _catalog_name(named[index]) if index < len(named) else None
        bar = _bar({}, device, None, gpu or report.get("gpu"))
        if bar is None:
            bar = _bar({"nvidia_smi_total_mib": first["total_mib"]}, device, None, None)
            bar["sources"]["total"] = "GPU 0's"
        out.append(dict(bar, name=device["name"], device=device["device"]))
    return out


def _catalog_name(name: str) -> str | None:
    from ..hardware import UnknownGpuError, find_gpu

    try:
        return find_gpu(name).name
    except (UnknownGpuError, ValueError):
        return None


def _who(report: dict) -> str:
    """'llama.cpp b5622 on NVIDIA GeForce RTX 4090, MODEL' from what was read or given."""
    title = report["engine_label"] + (f" {report['engine_version']}" if report.get("engine_version") else "")
    gpu = f" on {report['gpu']}" if report.get("gpu") else ""
    return title + gpu + (f", {report['model']}" if report.get("model") else "")


def _agreement(report: dict) -> str:
    rows = [row for row in report.get("comparison") or [] if row.get("relative_gap") is not None]
    if not rows:
        return ""
    off = [row for row in rows if abs(row["relative_gap"]) > AGREES_WITHIN]
    if not off:
        return f"; the prediction agrees on all {len(rows)} figures (within {AGREES_WITHIN:.0%})"
    worst = max(off, key=lambda row: abs(row["relative_gap"]))
    return (f"; the prediction agrees on {len(rows) - len(off)} of {len(rows)} figures within {AGREES_WITHIN:.0%} "
            f"(largest gap: {worst['label']} {worst['relative_gap']:+.1%})")


def _bar(observed: dict, memory: dict, breakdown, gpu: str | None) -> dict | None:
    """GPU 0's weights and KV pool (printed), nvidia-smi used (logged, else predicted, else the printed parts)
    and the card's total (logged, else the catalog's); None without the parts or a total."""
    if not memory:
        return None
    used, used_from = observed.get("nvidia_smi_used_mib"), "logged"
    if used is None:  # the printed parts and the CUDA context (a predicted total would mix in predicted weights)
        used = (memory["weights_gib"] + memory["kv_gib"] + memory.get("other_gib", 0)
                + memory.get("context_gib", 0)) * 1024
        used_from = "printed"
    total, total_from = observed.get("nvidia_smi_total_mib"), "logged"
    if total is None and memory.get("total_gib"):
        total = memory["total_gib"] * 1024
    if total is None and gpu:
        from ..hardware import find_gpu

        total, total_from = find_gpu(gpu).nvidia_smi_total_mib, "catalog"
    if not total:
        return None
    return {"weights_gib": round(memory["weights_gib"], 3), "kv_gib": round(memory["kv_gib"], 3),
            "used_mib": int(round(used)), "total_mib": int(round(total)),
            "sources": {"weights": "printed", "kv": "printed", "used": used_from, "total": total_from}}


def _how_read(report: dict) -> str:
    parts = [f"release {report['engine_version']} ({report['version_basis']})" if report.get("engine_version")
             else f"release {report['version_basis']}"]
    if report.get("gpu"):
        parts.append(f"GPU {report['gpu']} ({report.get('gpu_basis') or '--gpu'})")
    if report.get("model"):
        parts.append(f"model {report['model']}")
    return f"Read from the log: {'; '.join(parts)}."


# --- values in words ---------------------------------------------------------------------------------------------

def show(key: str, value) -> str:
    """A figure with its unit, as the key names it (_mib, _gib / _gb, _bytes)."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(show(key, item) for item in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if not isinstance(value, (int, float)):
        return str(value)
    if key.endswith("_bytes"):
        return f"{value / 2**20:,.0f} MiB"
    if "_mib" in key:
        return f"{value:,.2f} MiB" if isinstance(value, float) else f"{value:,} MiB"
    if key.endswith(("_gib", "_gb")) or "_gib_" in key:
        return f"{value:,.2f} GiB"
    return f"{value:,}" if isinstance(value, int) else f"{value:,.4g}"


def render_terminal(report: dict, columns: int | None) -> list[str]:
    """The report as the terminal shows it: the verdict first, the bar, then the details."""
    from ..term import columns_text

    def table(rows, indent="    "):
        if not rows:
            return []
        widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
        fits = columns is None or len(indent) + sum(widths) + 2 * (len(widths) - 1) <= columns
        return columns_text(rows, "l" * len(rows[0]), None if fits else columns, indent=indent)

    answer = report["answer"]
    lines = [f"{report['engine_label']} log: {report['log']} ({report['lines_read']:,} lines)", "",
             f"  {answer['verdict']}"]
    bar = answer.get("bar")
    if bar:
        from .bars import observed_bar_lines

        for one in answer.get("bars") or [bar]:
            if "name" in one:
                lines.append(f"  {one['name']} ({one['device']}): about {one['used_mib']:,} MiB of "
                             f"{one['total_mib']:,} MiB")
            lines += ["  " + line for line in observed_bar_lines(one["weights_gib"], one["kv_gib"],
                                                                 one["used_mib"] / 1024, one["total_mib"] / 1024,
                                                                 None if columns is None else columns - 2)]
        if bar["sources"]["used"] == "printed":
            lines.append("  (no nvidia-smi reading in the log: the bar is the buffers it printed plus the CUDA "
                         "context the engine holds)")
    lines += [f"  {answer['read']}", "", "  What the log printed (GPU 0 where the device shows)"]
    labels = report.get("labels") or {}
    lines += table([(labels.get(key, key), show(key, value)) for key, value in report["observed"].items()])
    if report["settings"]:
        flags = report.get("setting_flags") or {}
        rows = [(key, show(key, value), flags.get(key, "")) for key, value in report["settings"].items()]
        lines += ["", f"  Settings ({report['engine_label']}'s names, and their flag)"] + table(rows)
    if report["comparison"]:
        rows = [("figure", "observed", "predicted", "gap")]
        for row in report["comparison"]:
            gap = "" if row["relative_gap"] is None else f"{row['relative_gap']:+.1%}"
            rows.append((row["label"], show(row["key"], row["observed"]), show(row["key"], row["predicted"]), gap))
        lines += ["", "  Observed vs predicted"] + table(rows)
    from .changes import what_if_lines

    return lines + _findings(report) + what_if_lines(report.get("what_if"), table) + _tail(report)


def _findings(report: dict) -> list[str]:
    found = report.get("findings")
    if not found:
        return []
    lines = ["", f"  {found['title']}",
             f"    {'figure':<22} " + " ".join(f"{c:>12}" for c in found["columns"]) + f" {'difference':>11}  why"]
    for row in found["rows"]:
        delta = "" if row["delta"] is None else f"{row['delta']:+,.1f}"
        lines.append(f"    {row['figure']:<22} " + " ".join(f"{v:>12,.1f}" if v is not None else f"{'-':>12}"
                                                             for v in row["values"]) + f" {delta:>11}  {row['why']}")
    return lines


def _tail(report: dict) -> list[str]:
    lines = []
    if report.get("serving"):
        from .serving import serving_line

        lines += ["", "  " + serving_line(report["serving"])]
    return lines + [f"  note: {note}" for note in report["notes"]]
