"""Breakdowns (and `logs` / `fit` reports) as HTML with inline SVG: the fragments the page swaps in, and
`html_report(breakdown)`, one self-contained file (`explain --html`). Pure functions; no I/O but reading the
package's own stylesheet."""
from __future__ import annotations

import json
from dataclasses import dataclass
from html import escape
from importlib.resources import files

from ..breakdown import Breakdown, Component
from ..units import GIB

MIB = 1 << 20
# segment kind -> CSS class (colours live in static/app.css, light and dark)
KINDS = ("weights", "kv", "graphs", "overhead", "context", "workspace", "activation", "reserved", "free", "other")
# the figures the page lists under the bar, as `explain --json` names them
FIGURES = (("nvidia_smi_used_mib", "nvidia-smi used", "MiB"), ("total_gpu_gib", "GPU total (CUDA)", "GiB"),
           ("weights_gib", "weights", "GiB"), ("kv_cache_gib", "KV cache", "GiB"),
           ("num_gpu_blocks", "KV blocks", ""), ("kv_cache_tokens", "KV tokens", ""),
           ("max_concurrency", "requests at full context", "x"), ("max_model_len", "context", "tokens"),
           ("activation_peak_gib", "activation peak (freed)", "GiB"), ("cuda_graph_gib", "CUDA graphs", "GiB"))


@dataclass(frozen=True)
class Segment:
    key: str
    label: str
    bytes: int
    kind: str
    detail: str = ""


def _engine_label(report: dict) -> str:
    from ..engines import get_engine

    return report.get("engine_label") or get_engine(report.get("engine")).label


def _kind(key: str) -> str:
    key = key.lower()
    for word, kind in (("reserved", "reserved"), ("activation", "activation"), ("weights", "weights"), ("model", "weights"),
                       ("kv", "kv"), ("graph", "graphs"), ("context", "context"), ("backend", "workspace"),
                       ("compute", "workspace")):
        if word in key:
            return kind
    return "overhead"


def _leaves(node: Component) -> list[Component]:
    """The parts of a node the bar shows: weights by group, a device node by its buffers (first GPU only)."""
    if not node.children:
        return [node]
    if node.key == "weights":
        return list(node.children)
    children = list(node.children)
    if all(child.children for child in children):  # one child per GPU (llama.cpp's CUDA0, CUDA1...): GPU 0
        children = children[:1]
    return [leaf for child in children for leaf in _leaves(child)]


def gpu_segments(b: Breakdown) -> list[Segment]:
    """What one GPU holds, as nvidia-smi counts it, plus the activation peak as a ghost (freed before the
    KV pool is sized). Host memory (llama.cpp's CPU buffers) is not on the bar."""
    out = []
    for tree in (b.components, b.outside_budget):
        for node in (tree.children if tree.children else ()):
            if node.key.startswith("host"):
                continue
            for leaf in _leaves(node):
                detail = ", ".join(f"{c.label} {c.bytes / GIB:.2f} GiB" for c in leaf.children)
                out.append(Segment(leaf.key, leaf.label, leaf.bytes, _kind(leaf.key), detail or leaf.reason))
    counted = sum(s.bytes for s in out if s.kind != "activation")
    gap = b.nvidia_smi_used_mib * MIB - counted
    peak = sum(s.bytes for s in out if s.kind == "activation")
    if peak > 0 and abs(gap - peak) <= 8 * MIB:  # the peak's buffers reserved again after start (in nvidia-smi)
        out.append(Segment("reserved", "activation buffers reserved again after the warm-up", gap, "reserved",
                           "the profile-run peak's size, held by the allocator once the engine runs"))
    elif gap > 8 * MIB:  # what nvidia-smi shows beyond the named parts (rounding, allocator slack)
        out.append(Segment("other", "other (allocator, rounding)", gap, "other"))
    return out


def _g(num_bytes: float) -> str:
    return f"{num_bytes / GIB:.2f} GiB"


def bar_svg(b: Breakdown) -> str:
    """The stacked bar of one GPU: real parts left to right, the free rest, the activation peak hatched
    over the free part, and the engine's budget as a tick."""
    total = max(b.total_gpu_bytes, 1)
    width, height, x = 1000.0, 44.0, 0.0
    parts, ghosts = [], [s for s in gpu_segments(b) if s.kind == "activation"]
    for index, seg in enumerate(s for s in gpu_segments(b) if s.kind != "activation"):
        w = width * max(seg.bytes, 0) / total
        parts.append(_rect(seg, x, w, height).replace('class="seg weights"', f'class="seg weights w{index % 4}"', 1))
        x += w
    free = max(total - b.nvidia_smi_used_mib * MIB, 0)
    parts.append(_rect(Segment("free", "free", free, "free"), x, width - x, height))
    gx = x
    for seg in ghosts:
        w = min(width * seg.bytes / total, max(width - gx, 0))
        parts.append(_rect(seg, gx, w, height, ghost=True))
        gx += w
    budget = b.figure("budget_bytes")
    if budget:
        bx = width * budget / total
        parts.append(f'<line class="budget" x1="{bx:.1f}" x2="{bx:.1f}" y1="0" y2="{height + 8:.0f}">'
                     f'<title>{escape(b.engine_label)} budget {_g(budget)}</title></line>')
    title = (f"{b.nvidia_smi_used_mib:,} MiB of {total / MIB:,.0f} MiB used per GPU as nvidia-smi shows it "
             f"(weights {b.weights_bytes / MIB:,.0f}, KV cache {max(b.kv_cache_bytes, 0) / MIB:,.0f} MiB)")
    return (f'<svg class="bar" viewBox="0 0 {width:.0f} {height + 10:.0f}" role="img" aria-label="{escape(title)}" '
            f'preserveAspectRatio="none"><title>{escape(title)}</title>{"".join(parts)}</svg>')


def device_segments(device) -> list[Segment]:
    """One GPU of a multi-GPU answer (breakdown.DeviceFigures): its parts as the engine named them, and what
    nvidia-smi shows beyond them (MiB rounding aside)."""
    out = [Segment(p.key, p.label, p.bytes, _kind(p.key.split(".")[-1]), p.reason) for p in device.parts]
    gap = device.nvidia_smi_used_mib * MIB - sum(s.bytes for s in out)
    if gap > 8 * MIB:
        out.append(Segment("other", "other (allocator, rounding)", gap, "other"))
    return out


def device_bar_svg(b: Breakdown, device) -> str:
    """One GPU's bar: its parts left to right over its own card, the free rest, the engine's budget as a tick."""
    total = max(device.total_bytes, 1)
    width, height, x, parts = 1000.0, 44.0, 0.0, []
    for index, seg in enumerate(device_segments(device)):
        w = min(width * max(seg.bytes, 0) / total, max(width - x, 0))
        parts.append(_rect(seg, x, w, height).replace('class="seg weights"', f'class="seg weights w{index % 4}"', 1))
        x += w
    parts.append(_rect(Segment("free", "free", device.free_bytes, "free"), x, max(width - x, 0), height))
    budget = b.figure("budget_bytes")
    if budget:
        bx = width * min(budget / total, 1)
        parts.append(f'<line class="budget" x1="{bx:.1f}" x2="{bx:.1f}" y1="0" y2="{height + 8:.0f}">'
                     f'<title>{escape(b.engine_label)} budget {_g(budget)}</title></line>')
    title = (f"{device.name}: {device.nvidia_smi_used_mib:,} MiB of {total / MIB:,.0f} MiB as nvidia-smi shows it "
             f"(weights {_g(device.weights_bytes)}, KV cache {_g(device.kv_cache_bytes)})")
    return (f'<svg class="bar" viewBox="0 0 {width:.0f} {height + 10:.0f}" role="img" aria-label="{escape(title)}" '
            f'preserveAspectRatio="none"><title>{escape(title)}</title>{"".join(parts)}</svg>')


def device_legend_html(device) -> str:
    rows = [f'<li data-key="{escape(seg.key)}"><span class="swatch {seg.kind}" aria-hidden="true"></span>'
            f'{escape(seg.label)} <b>{_g(seg.bytes)}</b></li>' for seg in device_segments(device)]
    rows.append(f'<li data-key="free"><span class="swatch free" aria-hidden="true"></span>free '
                f'<b>{_g(device.free_bytes)}</b></li>')
    return f'<ul class="legend">{"".join(rows)}</ul>'


def gpus_html(b: Breakdown) -> str:
    """One bar, one nvidia-smi figure and one legend per GPU (GPUs with the same figures share a bar only past
    summary.MAX_BARS)."""
    from ..summary import device_groups

    out = []
    for label, d in device_groups(b.devices):
        out.append(f'<div class="gpu" data-gpu="{escape(d.name)}" data-used-mib="{d.nvidia_smi_used_mib}" '
                   f'data-total-bytes="{d.total_bytes}"><p class="gpu-head">{escape(label)}: nvidia-smi '
                   f'<b>{d.nvidia_smi_used_mib:,} MiB</b> of {d.total_bytes / MIB:,.0f} MiB</p>'
                   f'{device_bar_svg(b, d)}{device_legend_html(d)}</div>')
    return "".join(out)


def smi_figure_html(b: Breakdown) -> str:
    """What nvidia-smi shows: one bar for one GPU, one per GPU when the model spans several."""
    head = (f'<figure class="smi{" gpus" if b.devices else ""}" data-used-mib="{b.nvidia_smi_used_mib}" '
            f'data-total-bytes="{b.total_gpu_bytes}"{f" data-gpus={len(b.devices)}" if b.devices else ""}>')
    if b.devices:
        return (head + f'<figcaption>What nvidia-smi shows on {_which_gpus(b.devices)}: {escape(b.model)} '
                f'on {escape(b.gpu_name)}</figcaption>{gpus_html(b)}</figure>')
    return (head + f'<figcaption>What nvidia-smi shows on each GPU: {escape(b.model)} on {escape(b.gpu_name)}'
            f'</figcaption>{bar_svg(b)}{legend_html(b)}</figure>')


def _which_gpus(devices) -> str:
    return f"each of the {len(devices)} GPUs" if len(devices) > 1 else escape(devices[0].name)


def _rect(seg: Segment, x: float, w: float, h: float, ghost: bool = False) -> str:
    label = f"{seg.label}: {_g(seg.bytes)}" + (f" ({seg.detail})" if seg.detail else "")
    cls = f"seg {seg.kind}" + (" ghost" if ghost else "")
    return (f'<rect class="{cls}" data-key="{escape(seg.key)}" data-bytes="{seg.bytes}" x="{x:.2f}" y="0" '
            f'width="{max(w, 0):.2f}" height="{h:.0f}"><title>{escape(label)}</title></rect>')


def legend_html(b: Breakdown) -> str:
    """The bar's parts as a list (what a screen reader reads, and the figures in text)."""
    rows, seen = [], {}
    for seg in gpu_segments(b):
        group = "weights" if seg.key.startswith("weights.") else seg.key
        label = "model weights" if group == "weights" else seg.label
        seen.setdefault(group, [label, 0, seg.kind])[1] += seg.bytes
    free = max(b.total_gpu_bytes - b.nvidia_smi_used_mib * MIB, 0)
    seen["free"] = ["free", free, "free"]
    for key, (label, amount, kind) in seen.items():
        note = " (peak during profiling, freed before the KV pool is sized; dashed: not a part of the bar)" \
            if kind == "activation" else ""
        rows.append(f'<li data-key="{escape(key)}"><span class="swatch {kind}" aria-hidden="true"></span>'
                    f'{escape(label)} <b>{_g(amount)}</b>{note}</li>')
    return f'<ul class="legend">{"".join(rows)}</ul>'


def figures_html(figures: dict) -> str:
    """The headline figures exactly as `explain --json` gives them (data-value holds the JSON value)."""
    items = []
    own = figures.get(str(figures.get("engine_name")))
    own = own if isinstance(own, dict) else {}
    for key, label, unit in FIGURES:
        value = figures[key] if figures.get(key) is not None else own.get(key)  # common, else the engine's own
        if value is None:
            continue
        if key == "nvidia_smi_used_mib" and figures.get("devices"):  # the bars above give every GPU's
            label = f"{label} ({figures['devices'][0]['name']})"
        text = f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else f"{value:,.2f}"
        items.append(f'<div><dt>{escape(label)}</dt><dd data-figure="{key}" data-value="{escape(json.dumps(value))}">'
                     f'{text}{" " + unit if unit else ""}</dd></div>')
    return f'<dl class="figures">{"".join(items)}</dl>'


def theory_svg(b: Breakdown) -> str:
    """Theory vs reality for the weights: the nominal figure, then each addition, up to what the engine logs."""
    steps = [step for step in b.weights_explained if step.key != "reality"]  # the real figure is drawn below
    if not steps:
        return ""
    top = max(b.weights_bytes, sum(max(s.bytes, 0) for s in steps), 1)
    width, rows = 1000.0, []
    x = 0.0
    for index, step in enumerate(steps):
        w = width * max(step.bytes, 0) / top
        cls = "theory" if index == 0 else "extra"
        rows.append(f'<rect class="seg {cls}" x="{x:.2f}" y="0" width="{w:.2f}" height="26" data-key="{escape(step.key)}">'
                    f'<title>{escape(step.label)}: {_g(step.bytes)}</title></rect>')
        x += w
    rows.append(f'<rect class="seg real" x="0" y="32" width="{width * b.weights_bytes / top:.2f}" height="14">'
                f'<title>real weights: {_g(b.weights_bytes)}</title></rect>')
    label = f"theory {_g(steps[0].bytes)} vs real {_g(b.weights_bytes)}"
    table = "".join(f"<tr><td>{escape(s.label)}</td><td class=num>{('+' if i else '')}{s.bytes / GIB:.3f}</td></tr>"
                    for i, s in enumerate(steps))
    return (f'<svg class="bar theory-bar" viewBox="0 0 1000 46" preserveAspectRatio="none" role="img" '
            f'aria-label="{escape(label)}"><title>{escape(label)}</title>{"".join(rows)}</svg>'
            f'<table class="steps"><caption>{escape(label)}</caption><tr><th>step</th><th>GiB</th></tr>{table}'
            f'<tr><td>real weights on this GPU</td><td class=num>{b.weights_bytes / GIB:.3f}</td></tr></table>')


def verdict(b: Breakdown) -> str:
    if b.failure is not None:
        fix = (f" The longest context that fits: {b.failure.largest_fitting_max_model_len:,} tokens."
               if b.failure.largest_fitting_max_model_len else "")
        return f"{b.engine_label} {b.engine_version} would not start: {b.failure.message}.{fix}"
    if b.devices:
        from ..summary import per_gpu_words

        return (f"{b.engine_label} {b.engine_version} starts: {per_gpu_words(b.devices)}; the KV cache holds "
                f"{b.kv_cache_tokens:,} tokens, {b.max_concurrency:.2f} requests of {b.max_model_len:,} tokens at once.")
    return (f"{b.engine_label} {b.engine_version} starts: nvidia-smi shows about {b.nvidia_smi_used_mib:,} MiB per GPU; "
            f"the KV cache holds {b.kv_cache_tokens:,} tokens, {b.max_concurrency:.2f} requests of "
            f"{b.max_model_len:,} tokens at once.")


def kv_html(b: Breakdown) -> str:
    rows = [(label, text) for label, text in
            [("KV bytes per token", f"{b.kv_bytes_per_token:,} B"), ("KV cache", _g(b.kv_cache_bytes))]
            + [(f.label, f.text or str(f.value)) for f in b.engine_figures if f.label]
            + [("KV cache tokens", f"{b.kv_cache_tokens:,}"),
               (f"max concurrency at {b.max_model_len:,} tokens", f"{b.max_concurrency:.2f}x")]]
    body = "".join(f"<tr><th scope=row>{escape(label)}</th><td class=num>{escape(text)}</td></tr>" for label, text in rows)
    return f'<table class="kv"><caption>KV pool</caption>{body}</table>'


def log_lines_html(b: Breakdown) -> str:
    lines = "\n".join(escape(line) for line in b.log_lines)
    return (f'<figure class="log"><figcaption>What {escape(b.engine_label)} {escape(b.engine_version)} prints'
            f'</figcaption><pre>{lines}</pre></figure>')


def copy_line_html(line: str, label: str = "launch line") -> str:
    return (f'<div class="launch"><code>{escape(line)}</code><button type="button" class="copy" '
            f'data-copy="{escape(line)}" aria-label="copy the {escape(label)}">copy</button></div>')


def resolved_settings(b: Breakdown, figures: dict) -> dict:
    """What the release picked for each setting, for the page's controls: the plan's settings, then the engine's
    own figures of the same name where the pool decides the value (SGLang's max_running_requests)."""
    own = figures.get(figures.get("engine_name") or "", {})
    resolved = {key: value for key, value in own.items() if isinstance(value, (int, float, str, bool))}
    resolved.update({s.name: s.value for s in b.settings if isinstance(s.value, (int, float, str, bool))})
    return resolved


def explain_fragment(b: Breakdown, figures: dict, launch: str = "", page: bool = False) -> str:
    """The explain result: verdict, nvidia-smi bar, figures, theory vs reality, KV pool, log lines, launch line
    (`page`: also the resolved settings, which the page's controls show when not set by hand)."""
    resolved = resolved_settings(b, figures)
    parts = [f'<div hidden id="resolved" data-settings="{escape(json.dumps(resolved))}"></div>' if page else "",
             f'<p class="verdict{" failed" if b.failure else ""}">{escape(verdict(b))}</p>',
             smi_figure_html(b),
             f'<p class="delta" aria-live="polite"></p>', figures_html(figures)]
    if launch:
        parts.append(copy_line_html(launch))
    parts.append('<div class="cols">')
    parts.append(f'<section><h3>Theory vs reality (weights)</h3>{theory_svg(b) or "<p>no breakdown</p>"}</section>')
    parts.append(f'<section><h3>KV pool</h3>{kv_html(b)}</section></div>')
    parts.append(log_lines_html(b))
    if b.notes:
        parts.append("<ul class=notes>" + "".join(f"<li>{escape(n)}</li>" for n in b.notes) + "</ul>")
    return "".join(parts)


def stylesheet() -> str:
    return files("vram_detective.web").joinpath("static/app.css").read_text(encoding="utf-8")


def _page(title: str, body: str) -> str:
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" '
            f'content="width=device-width, initial-scale=1"><title>{escape(title)}</title>'
            f'<style>{stylesheet()}</style></head><body><main class="report"><h1>{escape(title)}</h1>{body}'
            f'<p class="small">Made by vram-detective. Figures per GPU, in GiB (2<sup>30</sup> bytes) unless '
            f'marked MiB.</p></main></body></html>')


def html_report(breakdown: Breakdown) -> str:
    """One self-contained HTML file (inline CSS and SVG, no script, nothing fetched) for `explain --html`."""
    from ..render import to_json

    title = f"{breakdown.model} on {breakdown.gpu_name} ({breakdown.engine_label} {breakdown.engine_version})"
    return _page(title, explain_fragment(breakdown, to_json(breakdown)))


# --- logs and fit -----------------------------------------------------------------------------------------------

def pair_bars_svg(figures: list[dict]) -> str:
    """Observed vs predicted, one pair of bars per figure in GiB (reconciliation figures)."""
    rows = [f for f in figures if isinstance(f.get("observed"), (int, float)) and isinstance(f.get("predicted"), (int, float))
            and f["key"].endswith("_gib")]
    if not rows:
        return ""
    top = max(max(f["observed"], f["predicted"]) for f in rows) or 1
    out, y = [], 0
    for f in rows:
        name = escape(f["key"].removesuffix("_gib").replace("_", " "))
        out.append(f'<text x="0" y="{y + 17}" class="lbl">{name}</text>')
        for offset, which in ((0, "observed"), (13, "predicted")):
            w = 640 * max(f[which], 0) / top
            out.append(f'<rect class="seg {which}" data-key="{escape(f["key"])}" data-{which}="{f[which]}" '
                       f'x="240" y="{y + 4 + offset}" width="{w:.1f}" height="11"><title>{which} {name}: '
                       f'{f[which]:.2f} GiB</title></rect>'
                       f'<text x="{246 + w:.1f}" y="{y + 13 + offset}" class="val">{f[which]:.2f}</text>')
        y += 34
    return (f'<svg class="pairs" viewBox="0 0 1000 {y}" role="img" aria-label="observed vs predicted, GiB">'
            f'<title>observed (solid) vs predicted (light), GiB</title>{"".join(out)}</svg>')


def _dict_table(caption: str, rows: dict, cls: str = "", labels: dict | None = None) -> str:
    """Rows of figures; with `labels` (figures a log printed), each in words with its unit."""
    from ..forensics.engine_answer import show

    def text(key, value):
        return show(key, value) if labels is not None else _show(value)

    body = "".join(f'<tr><th scope=row>{escape(str((labels or {}).get(k, k)))}</th><td class=num '
                   f'data-figure="{escape(str(k))}" data-value="{escape(json.dumps(v, default=str))}">'
                   f'{escape(text(k, v))}</td></tr>' for k, v in rows.items())
    return f'<table class="{cls}"><caption>{escape(caption)}</caption>{body}</table>'


def _show(value) -> str:
    if isinstance(value, dict) and "value" in value:
        return f"{value['value']} ({value.get('confidence', '')})"
    if isinstance(value, float):
        return f"{value:,.2f}"
    return str(value)


def logs_fragment(report: dict) -> str:
    """A `logs --json` report: per run, the printed figures, what was inferred, predicted vs observed, what-ifs."""
    if report.get("log") is None and "parts" in report:  # an nvidia-smi reading without a log (forensics/reading.py)
        from ..forensics.reading import render_reading

        lines = render_reading(report, None)
        return (f'<p class="verdict">{escape(lines[0])}</p><pre class="reading">'
                + escape("\n".join(lines[1:]).strip("\n")) + "</pre>")
    if "runs" not in report:
        return _engine_logs_fragment(report)
    if not report["runs"]:
        return f'<p class="verdict">Read {report.get("lines_read", 0):,} lines; no startup figures found.</p>'
    from ..forensics.answer import render_answer
    from ..forensics.observed import LABELS

    last = report["runs"][-1]
    answer = [line.strip() for line in render_answer(last, None, _engine_label(report))]  # the terminal's answer (forensics/answer.py)
    read = answer[-1] if answer[-1].startswith("Read from the log:") else ""
    failed = " failed" if last["startup"]["failed"] else ""
    parts = [f'<p class="verdict{failed}">{escape(answer[0])}</p>', _observed_bar_svg(last.get("answer")),
             f'<p class="read">{report["lines_read"]:,} lines, {report["lines_with_figures"]:,} with figures, '
             f'{len(report["runs"])} startup run(s). {escape(read.removesuffix(" --verbose shows how."))}</p>']
    for run in report["runs"][-3:]:
        parts.append(f'<section class="run" data-run="{run.get("run")}"><h3>Run {run.get("run")}</h3>')
        parts.append('<div class="cols">' + _dict_table("what the log printed", run.get("observed", {}), "observed",
                                                        LABELS))
        inferred = {k: run[k] for k in ("vllm_version", "engine", "gpu", "model") if isinstance(run.get(k), dict)}
        inferred.update({f"setting {k}": v for k, v in (run.get("settings") or {}).items()})
        parts.append(_dict_table("inferred", inferred, "inferred") + "</div>")
        figures = (run.get("reconciliation") or {}).get("figures") or []
        if figures:
            parts.append(f"<h4>Predicted vs observed</h4>{pair_bars_svg(figures)}")
            parts.append("<ul class=causes>" + "".join(
                f"<li><b>{escape(LABELS.get(f['key'], f['key']))}</b>: {escape(str(f.get('cause', '')))}</li>"
                for f in figures) + "</ul>")
        parts.append(what_if_html(run.get("what_if")))
        parts.append(_serving_html(run.get("serving")))
        parts.append("".join(f"<p class=note>{escape(a)}</p>" for a in run.get("anomalies", [])) + "</section>")
    return "".join(parts)


def what_if_html(shrink: dict | None) -> str:
    """What to change, as the terminal's table (forensics/changes.py): every engine's log, one shape."""
    if shrink and shrink.get("withheld"):
        return f'<p class="what-if">What to change: not listed; {escape(shrink["withheld"])}</p>'
    if not shrink or not shrink.get("scenarios"):
        return ""
    from ..forensics.changes import head, rows

    body = "".join(f"<tr><th scope=row><code>{escape(flags)}</code></th><td class=num>{escape(saving)}</td>"
                   f"<td>{escape(kv)}</td></tr>" for flags, saving, kv in rows(shrink))
    return f'<table class="what-if"><caption>{escape(head(shrink))}</caption>{body}</table>'


def _serving_html(serving: dict | None) -> str:
    """What the pool held while serving (forensics/serving.py), when the log went on after startup."""
    if not serving:
        return ""
    from ..forensics.serving import serving_line

    return f'<p class="serving" data-peak-usage="{serving["peak_usage_pct"]}">{escape(serving_line(serving))}</p>'


def _engine_logs_fragment(report: dict) -> str:
    """A log read whole (forensics/engine_logs.py), as the terminal shows it (forensics/engine_answer.py): the
    verdict first, GPU 0's bar, how it was read, then the figures in words, the settings and observed vs
    predicted as tables."""
    from ..forensics.engine_answer import show

    answer = report.get("answer") or {}
    failed = " failed" if report.get("observed", {}).get("startup_failed") else ""
    parts = [f'<p class="verdict{failed}">{escape(answer.get("verdict", ""))}</p>',
             _observed_bars_html(answer), f'<p class="read">{escape(answer.get("read", ""))}</p>',
             '<section class="run"><div class="cols">']
    labels = report.get("labels") or {}
    rows = [(labels.get(key, key), show(key, value), key) for key, value in (report.get("observed") or {}).items()]
    parts.append(_rows_table("what the log printed (GPU 0 where the device shows)", rows, "observed"))
    flags = report.get("setting_flags") or {}
    settings = [(f"{key} ({flags[key]})" if key in flags else key, show(key, value), key)
                for key, value in (report.get("settings") or {}).items()]
    if settings:
        parts.append(_rows_table(f"settings ({report.get('engine_label', '')}'s names)", settings, "inferred"))
    parts.append("</div>")
    comparison = report.get("comparison") or []
    if comparison:
        head = "<tr><th scope=col>figure</th><th scope=col>observed</th><th scope=col>predicted</th><th scope=col>gap</th></tr>"
        body = "".join(_comparison_row(row, show) for row in comparison)
        parts.append(f'<table class="comparison"><caption>observed vs predicted</caption>{head}{body}</table>')
    parts.append(_findings_html(report.get("findings")))
    parts.append(what_if_html(report.get("what_if")))
    parts.append(_serving_html(report.get("serving")))
    parts.append("".join(f"<p class=note>{escape(str(n))}</p>" for n in report.get("notes") or []) + "</section>")
    return "".join(parts)


def _comparison_row(row: dict, show) -> str:
    gap = "" if row["relative_gap"] is None else f"{row['relative_gap']:+.1%}"
    return (f'<tr data-figure="{escape(row["key"])}"><th scope=row>{escape(row["label"])}</th>'
            f'<td class=num>{escape(show(row["key"], row["observed"]))}</td>'
            f'<td class=num>{escape(show(row["key"], row["predicted"]))}</td><td class=num>{gap}</td></tr>')


def _findings_row(row: dict) -> str:
    values = "".join(f"<td class=num>{'-' if v is None else f'{v:,.1f}'}</td>" for v in row["values"])
    delta = "" if row["delta"] is None else f"{row['delta']:+,.1f}"
    return (f"<tr><th scope=row>{escape(str(row['figure']))}</th>{values}<td class=num>{delta}</td>"
            f"<td>{escape(str(row['why']))}</td></tr>")


def _rows_table(caption: str, rows: list[tuple], cls: str) -> str:
    body = "".join(f'<tr><th scope=row>{escape(label)}</th><td class=num data-figure="{escape(key)}">'
                   f"{escape(value)}</td></tr>" for label, value, key in rows)
    return f'<table class="{cls}"><caption>{escape(caption)}</caption>{body}</table>'


def _findings_html(found: dict | None) -> str:
    """What the engine's own log says beyond the figures (Ollama's estimate vs llama.cpp's allocation)."""
    if not found:
        return ""
    head = "".join(f"<th scope=col>{escape(str(c))}</th>" for c in ["figure", *found["columns"], "difference", "why"])
    body = "".join(_findings_row(row) for row in found["rows"])
    return f'<table class="findings"><caption>{escape(found["title"])}</caption><tr>{head}</tr>{body}</table>'


def _observed_bars_html(answer: dict) -> str:
    """GPU 0's bar, or one bar per GPU when the log printed several GPUs' figures."""
    bars = answer.get("bars")
    if not bars:
        return _observed_bar_svg(answer.get("bar"))
    return "".join(f'<div class="gpu" data-gpu="{escape(bar["name"])}" data-used-mib="{bar["used_mib"]}">'
                   f'<p class="gpu-head">{escape(bar["name"])} ({escape(bar["device"])}): about '
                   f'<b>{bar["used_mib"]:,} MiB</b> of {bar["total_mib"]:,} MiB</p>{_observed_bar_svg(bar)}</div>'
                   for bar in bars)


def _observed_bar_svg(bar: dict | None) -> str:
    """GPU 0's bar from a log's figures: weights, KV pool, the rest of what nvidia-smi shows, free."""
    if not bar:
        return ""
    total = max(bar["total_mib"], bar["used_mib"], 1) * MIB
    used = bar["used_mib"] * MIB
    weights, kv = bar["weights_gib"] * GIB, max(bar["kv_gib"], 0) * GIB
    segments = [Segment("weights", "weights", int(weights), "weights"), Segment("kv", "KV pool", int(kv), "kv"),
                Segment("other", "context, graphs, compute", int(max(used - weights - kv, 0)), "other"),
                Segment("free", "free", int(max(total - used, 0)), "free")]
    x, rects = 0.0, []
    for seg in segments:
        w = 1000.0 * seg.bytes / total
        rects.append(_rect(seg, x, w, 44.0))
        x += w
    title = (f"{bar.get('name', 'GPU 0')}: {bar['used_mib']:,} MiB of {bar['total_mib']:,} MiB (weights "
             f"{bar['weights_gib'] * 1024:,.0f} MiB, KV pool {bar['kv_gib'] * 1024:,.0f} MiB; used: "
             f"{bar['sources']['used']}, total: {bar['sources']['total']})")
    legend = " ".join(f'<span class="key {seg.kind}">{escape(seg.label)} {seg.bytes / GIB:.2f} GiB</span>'
                      for seg in segments)
    return (f'<svg class="bar" viewBox="0 0 1000 54" role="img" aria-label="{escape(title)}" preserveAspectRatio="none">'
            f'<title>{escape(title)}</title>{"".join(rects)}</svg><p class="legend">{legend}</p>')


def logs_html_report(report: dict) -> str:
    """One self-contained HTML file for `logs --html`, titled with the log's engine."""
    return _page(f"{report.get('engine_label') or 'Engine'} log: {report.get('log', '')}", logs_fragment(report))


def fit_fragment(result: dict) -> str:
    """A `fit --json` result, whichever engine answered: the candidates (or the answers to llama.cpp's questions)
    with their launch lines; when nothing meets the target, what comes nearest, why, and its line."""
    if result.get("answers") is not None:  # an engine whose levers are solved one question at a time (llama.cpp)
        return _fit_answers_html(result)
    candidates = result.get("candidates") or []
    if not candidates:
        return (f'<p class="verdict failed">No configuration meets the target{_target(result)}.</p>'
                + _nearest_html(result))
    head = "<tr><th>#</th><th>checkpoint</th><th>nvidia-smi MiB</th><th>KV tokens</th><th>concurrency</th><th>binds</th></tr>"
    rows = []
    for index, c in enumerate(candidates, 1):
        rows.append(f'<tr data-rank="{index}"><td>{index}</td><td>{escape(str(c.get("checkpoint") or c.get("lever") or c.get("model", "")))}</td>'
                    f'<td class=num>{c.get("nvidia_smi_used_mib", 0):,}</td><td class=num>{c.get("kv_cache_tokens", 0):,}</td>'
                    f'<td class=num>{c.get("max_concurrency", 0):.2f}</td><td>{escape(str(c.get("binding_constraint", "")))}</td></tr>'
                    f'<tr><td></td><td colspan=5>{copy_line_html(c.get("command", ""), f"launch line of candidate {index}")}</td></tr>')
    feasible = result.get("feasible", True)
    verdict_text = "Candidates that meet the target, best first." if feasible else "Nothing meets the target; the nearest:"
    return f'<p class="verdict">{verdict_text}</p><table class="fit">{head}{"".join(rows)}</table>'


_RELAXED = {"concurrency": "fewer requests", "context": "a shorter context", "gpus": "more GPUs"}


def _nearest_html(result: dict) -> str:
    """`nearest` of a fit with no candidate: each part of the target given up, why, and the line that starts it
    (vLLM nests the candidate, SGLang gives the row itself)."""
    items = []
    for near in result.get("nearest") or []:
        command = (near.get("candidate") or near).get("command")
        line = copy_line_html(command, f"launch line: {near.get('relaxed')}") if command else ""
        items.append(f'<li data-relaxed="{escape(str(near.get("relaxed")))}">'
                     f'{escape(_RELAXED.get(near.get("relaxed"), "why not"))}: {escape(str(near.get("why", "")))}'
                     f"{line}</li>")
    return f'<p>The nearest:</p><ul class="nearest">{"".join(items)}</ul>' if items else ""


def _target(result: dict) -> str:
    target = result.get("target")
    return f" ({escape(str(target))})" if isinstance(target, str) and target else ""


def _fit_answers_html(result: dict) -> str:
    """`fit --json` as answers to questions (the most layers at this context, the largest context on the GPU):
    each question, its answer and its launch line."""
    answers = [a for a in result["answers"] if isinstance(a, dict)]
    if not answers:
        return f'<p class="verdict failed">No configuration meets the target{_target(result)}.</p>'
    rows = []
    for index, a in enumerate(answers, 1):
        vram = ", ".join(f"{escape(str(k))} {v:,} MiB" for k, v in (a.get("vram_per_gpu_mib") or {}).items())
        rows.append(f'<tr data-rank="{index}"><td>{index}</td><td>{escape(str(a.get("question", "")))}</td>'
                    f'<td>{escape(str(a.get("reason", "")))}</td><td>{vram}</td></tr>'
                    f'<tr><td></td><td colspan=3>{copy_line_html(str(a.get("command") or ""), f"launch line {index}")}'
                    f'</td></tr>')
    head = "<tr><th>#</th><th>question</th><th>answer</th><th>VRAM per GPU</th></tr>"
    return (f'<p class="verdict">{escape(str(answers[0].get("reason", "")))}</p>'
            f'<table class="fit">{head}{"".join(rows)}</table>')


# --- simulate ---------------------------------------------------------------------------------------------------

# the figures the Simulate tab lists, as `simulate --json` names them under "result"
SIM_FIGURES = (("peak_blocks", "peak blocks in use"), ("p99_blocks", "p99 blocks in use"),
               ("mean_blocks", "mean blocks in use"), ("pool_blocks", "pool blocks"), ("block_size", "tokens a block"),
               ("duration_s", "seconds simulated"), ("requests", "requests"), ("finished", "finished"),
               ("held_back_requests", "held back for blocks"), ("peak_running", "running (peak)"),
               ("peak_waiting", "waiting (peak)"), ("preemptions", "preemptions"),
               ("preempted_requests", "requests preempted"), ("prefix_hit_rate", "prefix-cache hit rate"),
               ("swap_out_bytes", "swapped out (bytes)"), ("request_steps", "request-steps"))
CHART_W, CHART_H, CHART_LEFT, CHART_TOP = 1000.0, 240.0, 14.0, 22.0


def _chart_xy(t: float, blocks: float, end_s: float, top_blocks: float) -> tuple[float, float]:
    width, height = CHART_W - CHART_LEFT - 10, CHART_H - CHART_TOP - 26
    return (CHART_LEFT + width * t / end_s, CHART_TOP + height * (1 - blocks / top_blocks))


def occupancy_svg(report: dict) -> str:
    """Blocks in use over time (the bucket maxima as a line over the time-weighted means, filled), the pool's
    size as a line, the smallest pool that serves the workload dashed, and a mark at each listed preemption."""
    r, fit = report["result"], report["fit"]
    end = max(r["duration_s"], 1e-9)
    top = max(r["pool_blocks"], r["peak_blocks"], fit.get("needed_blocks") or 0, 1) * 1.04
    xy = lambda t, v: _chart_xy(t, v, end, top)  # noqa: E731 - the one scale every mark uses
    buckets = [(t, peak, mean) for t, peak, mean in r["occupancy"]]
    width = buckets[1][0] - buckets[0][0] if len(buckets) > 1 else end
    peak_pts, mean_pts = [], [xy(0, 0)]
    for t, peak, mean in buckets:
        t1 = min(t + width, end)
        peak_pts += [xy(t, peak), xy(t1, peak)]
        mean_pts += [xy(t, mean), xy(t1, mean)]
    mean_pts.append(xy(buckets[-1][0] + width if buckets else end, 0))
    points = lambda pts: " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)  # noqa: E731
    gib = r["block_bytes"] / GIB
    parts = [_hline("pool", r["pool_blocks"], end, top, f"the pool: {r['pool_blocks']:,} blocks, "
                    f"{r['pool_blocks'] * gib:.2f} GiB")]
    if fit.get("needed_blocks"):
        parts.append(_hline("needed", fit["needed_blocks"], end, top, f"the smallest pool that serves it: "
                            f"{fit['needed_blocks']:,} blocks, {fit['needed_bytes'] / GIB:.2f} GiB"))
    parts.append(f'<polygon class="occ-mean" points="{points(mean_pts)}"><title>mean blocks in use</title></polygon>')
    parts.append(f'<polyline class="occ-peak" points="{points(peak_pts)}"><title>blocks in use (max per '
                 f'{width:.1f} s)</title></polyline>')
    for p in r["preemption_log"]:
        x, _ = xy(p["time_s"], 0)
        parts.append(f'<line class="preempt" data-time="{p["time_s"]}" x1="{x:.1f}" x2="{x:.1f}" y1="{CHART_TOP - 10}" '
                     f'y2="{CHART_TOP + 4}"><title>{escape(p["mode"])} at {p["time_s"]:.2f} s: {escape(p["cause"])}'
                     f'</title></line>')
    parts.append(_time_axis(end))
    label = (f"blocks in use over {end:,.0f} s: peak {r['peak_blocks']:,} of a {r['pool_blocks']:,}-block pool, "
             f"{r['preemptions']:,} {_shortfall(report).event}(s)")
    return (f'<svg class="occupancy" viewBox="0 0 {CHART_W:.0f} {CHART_H:.0f}" role="img" aria-label="{escape(label)}" '
            f'data-pool-blocks="{r["pool_blocks"]}" data-peak-blocks="{r["peak_blocks"]}" data-buckets="{len(buckets)}" '
            f'data-preemption-marks="{len(r["preemption_log"])}"><title>{escape(label)}</title>{"".join(parts)}</svg>')


def _hline(cls: str, blocks: int, end: float, top: float, text: str) -> str:
    x0, y = _chart_xy(0, blocks, end, top)
    x1, _ = _chart_xy(end, blocks, end, top)
    return (f'<line class="{cls}" data-blocks="{blocks}" x1="{x0:.1f}" x2="{x1:.1f}" y1="{y:.1f}" y2="{y:.1f}">'
            f'<title>{escape(text)}</title></line><text class="lbl" x="{x1 - 4:.1f}" y="{y - 5:.1f}" '
            f'text-anchor="end">{escape(text)}</text>')


def _time_axis(end: float) -> str:
    x0, y = _chart_xy(0, 0, end, 1)
    x1, _ = _chart_xy(end, 0, end, 1)
    ticks = [f'<line class="axis" x1="{x0:.1f}" x2="{x1:.1f}" y1="{y:.1f}" y2="{y:.1f}"/>']
    for k in range(5):
        t = end * k / 4
        x, _ = _chart_xy(t, 0, end, 1)
        anchor = ("start", "middle", "middle", "middle", "end")[k]
        ticks.append(f'<text class="lbl" x="{x:.1f}" y="{y + 18:.1f}" text-anchor="{anchor}">{t:,.0f} s</text>')
    return "".join(ticks)


def simulate_fragment(report: dict, launch: str = "") -> str:
    """A `simulate --json` report: the verdict, the occupancy chart, the smallest-pool flags, the figures."""
    r, fit = report["result"], report["fit"]
    parts = [f'<p class="verdict sim-verdict">{escape(report["verdict"])}</p>',
             f'<figure class="sim" data-workload="{escape(report["workload"])}"><figcaption>Blocks in use: '
             f'{escape(report["model"])} on {escape(report["gpu"])}, {escape(report["engine"])} '
             f'{escape(report["version"])}, workload {escape(report["workload"])} (seed {report["seed"]})</figcaption>'
             f'{occupancy_svg(report)}<ul class="legend"><li><span class="swatch kv" aria-hidden="true"></span>'
             f'blocks in use (max per bucket; filled: mean)</li><li><span class="swatch pool" aria-hidden="true">'
             f'</span>the pool</li><li><span class="swatch needed" aria-hidden="true"></span>the smallest pool that '
             f'serves it</li><li><span class="swatch preempt" aria-hidden="true"></span>a {_shortfall(report).event}'
             '</li></ul></figure>']
    parts.append(_fit_html(fit, launch))
    items = {key: r[key] for key, _ in SIM_FIGURES if key in r}
    labels = dict(SIM_FIGURES, preemptions=_shortfall(report).label,
                  preempted_requests=f"requests {_shortfall(report).some}")
    parts.append('<table class="sim-figures"><caption>figures (simulate --json, "result")</caption>' + "".join(
        f'<tr><th scope=row>{escape(labels[k])}</th><td class=num data-figure="{k}" data-value="{escape(json.dumps(v))}">'
        f'{escape(_sim_show(k, v))}</td></tr>' for k, v in items.items()) + "</table>")
    parts.append("<ul class=notes>" + "".join(f"<li>{escape(n)}</li>" for n in r.get("notes") or []) + "</ul>")
    return "".join(parts)


def _shortfall(report: dict):
    """The engine's words for a request the pool was too small for (llama.cpp: a slot overflow, no preemption)."""
    from ..simulate.fit import shortfall_words

    return shortfall_words(report["engine"])


def _sim_show(key: str, value) -> str:
    if key.endswith("_rate"):
        return f"{value:.1%}"
    return f"{value:,}" if isinstance(value, int) else f"{value:,.1f}"


def _fit_html(fit: dict, launch: str) -> str:
    if not fit.get("feasible"):
        return f'<p class="note sim-fit">No pool setting found: {escape(fit.get("reason") or "")}</p>'
    text = (f'The smallest pool: {fit["needed_blocks"]:,} blocks ({fit["needed_bytes"] / GIB:.2f} GiB); '
            f'{fit["flag"]} {fit["value"]} gives a pool of {fit["pool_bytes"] / GIB:.2f} GiB on this card '
            f'({fit["simulations"]} simulations).')
    flags = (f'<p class="sim-fit" data-flag="{escape(fit["flag"])}" data-value="{escape(json.dumps(fit["value"]))}">'
             f'{escape(text)}</p>')
    return flags + (copy_line_html(launch, "launch line with the smallest pool") if launch else "")
