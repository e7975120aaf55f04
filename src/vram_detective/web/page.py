"""The one page of `vram-detective serve`, rendered on the server from the URL's query (so a shared URL
shows the same result before any script runs); static/app.js then recomputes as the controls move."""
from __future__ import annotations

import json
from html import escape

from ..engines import DEFAULT_ENGINE
from . import report, service

TABS = (("explain", "Explain"), ("logs", "Forensics"), ("fit", "Fit"), ("simulate", "Simulate"))


def _input(name: str, label: str, value, *, kind: str = "text", extra: str = "") -> str:
    shown = "" if value is None else escape(str(value))
    return (f'<label class="field"><span>{escape(label)}</span><input type="{kind}" name="{name}" id="f-{name}" '
            f'value="{shown}" {extra}></label>')


def _select(name: str, label: str, options, value, *, blank: str = "") -> str:
    items = [f'<option value="">{escape(blank)}</option>'] if blank else []
    for option in options:
        selected = " selected" if str(option) == str(value) else ""
        items.append(f'<option value="{escape(str(option))}"{selected}>{escape(str(option))}</option>')
    return (f'<label class="field"><span>{escape(label)}</span><select name="{name}" id="f-{name}">'
            f'{"".join(items)}</select></label>')


def setup_form(params: dict) -> str:
    """Model, GPU, engine, release and a pasted launch line: shared by the three tabs."""
    engines = service.releases()
    engine = params.get("engine") or DEFAULT_ENGINE
    known = engines.get(engine, engines[DEFAULT_ENGINE])["known"]
    models = "".join(f'<option value="{escape(m)}">' for m in service.catalog_models())
    gpus = "".join(f'<option value="{escape(g["short_name"])}">{escape(g["name"])} ({g["cuda_total_gib"]} GiB)</option>'
                   for g in service.catalog_gpus())
    return (f'<form id="setup" class="grid" role="search" aria-label="model, GPU and engine">'
            + _input("model", "model (catalog id)", params.get("model"), extra='list="models" autocomplete="off" spellcheck="false"')
            + _input("gpu", "GPU", params.get("gpu"), extra='list="gpus" autocomplete="off"')
            + _input("gpu_memory", "or a custom size", params.get("gpu_memory"), extra='placeholder="e.g. 23.65GiB"')
            + _select("engine", "engine", list(engines), engine)
            + _select("version", "release", list(reversed(known)), params.get("version"), blank="newest")
            + _input("line", "or paste a launch line", params.get("line"),
                     extra='placeholder="vllm serve MODEL --max-model-len 32k" spellcheck="false" class="wide"')
            + f'</form><datalist id="models">{models}</datalist><datalist id="gpus">{gpus}</datalist>')


def _control(spec: tuple, params: dict, resolved: dict, engine: str = DEFAULT_ENGINE) -> str:
    setting, kind, label, low, high, step = spec
    given = params.get(setting)
    if given not in (None, ""):  # as the engine reads it (32k -> 32768): a range input would take "32k" for its middle
        given = service.control_value(engine, setting, given)
    value = given if given not in (None, "") else resolved.get(setting)
    # the URL's own value, written back as given: a range input snaps its value to its step and bounds
    mark = f' data-set="1" data-value="{escape(str(given))}"' if given not in (None, "") else ""
    if kind in ("range", "number") and isinstance(value, (int, float)) and not isinstance(value, bool):
        high = max(high, value)  # a value past the slider's end widens it rather than being cut to it
        low = min(low, value)
    if kind == "select":
        options = list(low)
        if value is not None and str(value) not in map(str, options):
            options.append(value)
        return _select(setting, label, options, value, blank="default").replace("<select ", f"<select{mark} ", 1)
    if kind == "text":  # a free value (a draft model, a JSON config): `low` is its placeholder
        shown = "" if value in (None, "") else (json.dumps(value) if isinstance(value, dict) else str(value))
        return (f'<label class="field lever wide"><span>{escape(label)}</span><input type="text" name="{setting}" '
                f'id="f-{setting}" value="{escape(shown)}" placeholder="{escape(str(low or ""))}" spellcheck="false"'
                f'{mark}></label>')
    if kind == "checkbox":
        checked = " checked" if str(value).lower() in ("true", "1", "on") else ""
        return (f'<label class="field check"><input type="checkbox" name="{setting}" id="f-{setting}"{checked}{mark}>'
                f'<span>{escape(label)}</span></label>')
    number = value if value is not None else ("" if kind == "number" else low)  # a number not in play: blank
    out = (f'<output for="f-{setting}" id="o-{setting}">{escape(str(number))}</output>' if kind == "range" else "")
    return (f'<label class="field lever"><span>{escape(label)} {out}</span><input type="{kind}" name="{setting}" '
            f'id="f-{setting}" min="{low}" max="{high}" step="{step}" value="{escape(str(number))}"{mark}></label>')


def levers_form(params: dict, resolved: dict) -> str:
    from ..engines import DEFAULT_ENGINE, ENGINES, get_engine

    engine = params.get("engine") or DEFAULT_ENGINE
    shown = get_engine(engine).controls if engine in ENGINES else ()
    controls = "".join(_control(spec, params, resolved, engine) for spec in shown)
    missing = _not_offered(get_engine(engine)) if engine in ENGINES else ""
    return (f'<form id="levers" class="grid levers" aria-label="engine settings">{controls}'
            f'<button type="button" id="reset-levers">back to the defaults</button>{missing}</form>')


def _not_offered(engine) -> str:
    """What the engine has no control for that another engine has, said plainly (speculative decoding)."""
    from ..engines.base import Speculation
    from ..errors import NotOffered

    try:
        engine.speculative_settings(Speculation("mtp"))
    except NotOffered as error:
        return f'<p class="small wide not-offered">speculative decoding: {escape(str(error))}</p>'
    return ""


def explain_result(params: dict, policy: service.Policy) -> tuple[str, dict]:
    """(the result fragment, the resolved settings) for the URL's state; a message when it is incomplete."""
    if not (params.get("model") or params.get("line")) or not (params.get("gpu") or params.get("gpu_memory")):
        return '<p class="hint">Pick a model and a GPU.</p>', {}
    try:
        request = service.read_request(params, policy)
        breakdown = service.explain(request)
    except Exception as error:  # noqa: BLE001 - the page shows the one-line reason, as the CLI does
        return f'<p class="error" role="alert">{escape(_one_line(error))}</p>', {}
    figures = service.explain_json(request, breakdown)
    resolved = report.resolved_settings(breakdown, figures)
    return report.explain_fragment(breakdown, figures, service.launch_line(request, breakdown), page=True), resolved


def _one_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def workload_fields(spec: str) -> dict:
    """The picker's fields for a workload spec ("chat:rate=2,duration=120"); a shape alone takes its preset's
    arrivals (service.WORKLOAD_PRESETS: within the page's caps); unknown parts are left out."""
    name, _, options = (spec or "chat").partition(":")
    fields = {"shape": name if name in WORKLOAD_SHAPES else "chat"}
    for item in filter(None, (options or service.WORKLOAD_PRESETS.get(fields["shape"], "")).split(",")):
        key, _, value = item.partition("=")
        if key in ("rate", "duration", "users"):
            fields[key] = value
    return fields


WORKLOAD_SHAPES = ("chat", "rag", "longdoc", "agent")


def simulate_panel(params: dict, shown: bool) -> str:
    """The Simulate tab: a built-in shape with its arrivals (or a pasted JSONL trace), the seed; the server
    runs the workload against the predicted pool (capped: service.MAX_SIM_*)."""
    fields = workload_fields(params.get("workload") or "")
    pick = _select("sim_shape", "workload", WORKLOAD_SHAPES + ("trace",), fields["shape"]).replace(
        "<select ", f"<select data-presets=\"{escape(json.dumps(service.WORKLOAD_PRESETS))}\" ", 1)
    inputs = "".join(_input(name, label, fields.get(key), kind="number", extra=extra) for name, key, label, extra in (
        ("sim_rate", "rate", "sessions a second (Poisson)", 'min="0" step="any" placeholder="2"'),
        ("sim_duration", "duration", "seconds of arrivals", 'min="1" step="any" placeholder="120"'),
        ("sim_users", "users", "or users in a closed loop", 'min="0" step="1" placeholder="0"')))
    seed = _input("seed", "seed", params.get("seed") or 0, kind="number", extra='step="1"')
    caps = (f"at most {service.MAX_SIM_DURATION_S:g} s of arrivals, {service.MAX_SIM_REQUESTS:,} requests and "
            f"{service.MAX_SIM_TOKENS / 1e6:g} M tokens ({service.MAX_SIM_USERS} users and "
            f"{service.MAX_SIM_USER_SECONDS:g} user-seconds in a closed loop); the simulate command has no cap")
    return (f'<section role="tabpanel" id="panel-simulate" aria-labelledby="tab-simulate"{"" if shown else " hidden"}>'
            f'<form id="sim-form" class="grid" aria-label="the workload">{pick}{inputs}{seed}'
            f'<label class="field wide" id="trace-field"{"" if fields["shape"] == "trace" else " hidden"}><span>JSONL '
            f'trace, one request a line: {{"timestamp": s, "prompt_tokens": n, "output_tokens": n}} (optional '
            f'prefix_id, prefix_tokens, session)</span><textarea name="trace" id="f-trace" rows="6" spellcheck="false">'
            f'</textarea></label><button type="button" id="simulate">Simulate</button></form>'
            f'<p class="small">The workload runs against the predicted KV pool, then again to find the smallest '
            f'pool that serves it. Memory, not latency: step times come from a simple cost model. Web page cap: '
            f'{escape(caps)}.</p><div id="simulate-result" class="result" aria-live="polite"></div></section>')


def render(params: dict, policy: service.Policy) -> str:
    tab = params.get("tab") if params.get("tab") in dict(TABS) else "explain"
    theme = params.get("theme") if params.get("theme") in ("light", "dark") else ""
    result, resolved = explain_result(params, policy) if tab == "explain" else ("", {})
    tabs = "".join(f'<button role="tab" type="button" id="tab-{key}" aria-controls="panel-{key}" '
                   f'aria-selected="{"true" if key == tab else "false"}" tabindex="{0 if key == tab else -1}">{label}</button>'
                   for key, label in TABS)
    fit_targets = ("".join(_input(name, label, params.get(name), extra=extra) for name, label, extra in (
        ("context", "context per request", 'placeholder="32k"'), ("concurrency", "requests at once", 'placeholder="1"'),
        ("max_gpu_memory", "nvidia-smi at most", 'placeholder="20GiB"'), ("gpus", "GPUs", 'placeholder="1"'))))
    panels = (
        f'<section role="tabpanel" id="panel-explain" aria-labelledby="tab-explain"{"" if tab == "explain" else " hidden"}>'
        f'{levers_form(params, resolved)}<div id="explain-result" class="result" aria-live="polite">{result}</div></section>'
        f'<section role="tabpanel" id="panel-logs" aria-labelledby="tab-logs"{"" if tab == "logs" else " hidden"}>'
        f'<form id="logs-form" aria-label="a log to analyse">'
        f'<label class="field wide"><span>engine log (pasted text stays in memory, up to '
        f'{service.MAX_BODY_BYTES // (1024 * 1024)} MiB)</span><textarea name="log" id="f-log" rows="10" spellcheck="false">'
        f'</textarea></label><label class="field wide"><span>nvidia-smi output (optional)</span>'
        f'<textarea name="nvidia_smi" id="f-nvidia_smi" rows="4" spellcheck="false"></textarea></label>'
        f'<button type="button" id="analyse">Analyse the log</button></form>'
        f'<div id="logs-result" class="result" aria-live="polite"></div></section>'
        f'<section role="tabpanel" id="panel-fit" aria-labelledby="tab-fit"{"" if tab == "fit" else " hidden"}>'
        f'<form id="fit-form" class="grid" aria-label="the target">{fit_targets}'
        f'<button type="button" id="find">Find configurations</button></form>'
        f'<div id="fit-result" class="result" aria-live="polite"></div></section>' + simulate_panel(params, tab == "simulate"))
    return (f'<!doctype html><html lang="en"{f" data-theme={chr(34)}{theme}{chr(34)}" if theme else ""}><head>'
            f'<meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<title>VRAM Detective</title><link rel="icon" href="data:,"><link rel="stylesheet" href="/static/app.css"></head><body>'
            f'<a class="skip" href="#panels">skip to the result</a><header><h1>VRAM Detective</h1>'
            f'<p>Where every GiB of GPU memory goes, before you launch.</p>'
            f'<button type="button" id="theme" aria-label="switch light or dark">light / dark</button></header>'
            f'<main>{setup_form(params)}<div role="tablist" aria-label="views">{tabs}</div>'
            f'<div id="panels">{panels}</div><p id="status" class="sr-only" aria-live="polite"></p></main>'
            f'<footer>JSON API: <a href="/api">/api</a> (the same JSON as the commands\' --json)</footer>'
            f'<script src="/static/app.js"></script></body></html>')
