"""`logs` for an engine whose log is read whole (no streaming reader: SGLang, llama.cpp, Ollama): which engine
wrote the log, the figures it printed, its settings, release and GPU, (with the model and GPU) each figure against
the prediction, and the answer first: who ran, what GPU 0 held, how far the prediction agrees.

What a figure means, what a log names and what GPU 0 held come from the engine (log_label, log_gpus,
log_memory); an engine that streams its log analyses its runs itself (engine.logs.analyse)."""
from __future__ import annotations

import re

from ..units import GIB


def detect_engine(text: str) -> str:
    """The engine whose log formats match; every other engine is asked before the default (whose reader also
    takes a log that names no engine)."""
    from ..engines import DEFAULT_ENGINE, ENGINES, get_engine

    others = [name for name in ENGINES if name != DEFAULT_ENGINE]
    return next((name for name in others if get_engine(name).logs.is_mine(text)), DEFAULT_ENGINE)


def build_engine_report(text: str, engine_name: str, *, log: str, model=None, gpu=None, version=None,
                        smi=None, extra: str | None = None, skipped_bytes: int = 0) -> dict:
    """`extra`: more of the engine's own output read with the log (Ollama's `ollama ps`); `skipped_bytes`: the
    middle of a long log left out (forensics/command.py bounded_text), said in a note."""
    from ..engines import get_engine
    from .serving import read_serving_stats

    engine = get_engine(engine_name)
    observed = _observed(engine, text, extra, smi)
    settings, version_basis = _settings_and_version(engine, text, version)
    model = model or settings.pop("model_path", None)
    gpu_basis = "--gpu" if gpu else None
    devices = engine.log_gpus(text)
    unknown = None
    if not gpu:
        gpu, gpu_basis, unknown = gpu_of_log(text, smi, devices)
    report = {"log": log, "engine": engine_name, "engine_label": engine.label,
              "lines_read": text.count("\n") + (1 if text and not text.endswith("\n") else 0),
              "observed": observed, "settings": settings, "engine_version": version_basis[0],
              "version_basis": version_basis[1], "model": model, "gpu": gpu, "gpu_basis": gpu_basis,
              "gpus_named": list(devices), "comparison": None, "notes": [], "bytes_skipped": skipped_bytes}
    if skipped_bytes:
        report["notes"].append(f"the log is long: its middle ({skipped_bytes / 2**20:,.1f} MiB) was skipped; the "
                               "first and last parts were read (every start prints its figures near its start, "
                               "the last start's are at the end)")
    if observed.get("startup_failed"):
        report["failure"] = failure_line(text)
    report["findings"] = engine.log_findings(observed)
    report["serving"] = read_serving_stats(text).to_dict(pool_gib=_pool_gib(observed))
    breakdown = None
    report["what_if"] = None
    if model and gpu:
        report["comparison"], breakdown = _compare(engine, model, gpu, version_basis[0], settings, observed,
                                                   report["notes"])
    else:
        report["notes"].append(_why_not_compared(engine, model, gpu, unknown))
    report["labels"] = {key: figure_label(engine, key) for key in observed}
    report["setting_flags"] = _setting_flags(engine, settings)
    _answer(report, engine, observed, breakdown)
    return report


def _observed(engine, text: str, extra: str | None, smi) -> dict:
    """The log's figures, then what `extra` adds, then GPU 0's nvidia-smi reading."""
    observed = engine.logs.parse(text)
    if extra:
        observed.update({key: value for key, value in engine.logs.parse(extra).items() if key not in observed})
    if smi is not None and smi.gpus:
        observed.update({key: value for key, value in (("nvidia_smi_used_mib", smi.gpu(0).used_mib),
                                                        ("nvidia_smi_total_mib", smi.gpu(0).total_mib))
                         if value is not None})
    return observed


def _why_not_compared(engine, model, gpu, unknown) -> str:
    if unknown:
        return (f"the log names {unknown}, which the catalog does not know: give --gpu (the nearest catalog card, "
                "or --gpu-memory) for a comparison")
    if not gpu:
        return (f"GPU not known: this {engine.label} log names no device and quotes no nvidia-smi reading, so no "
                "comparison against a made-up card; give --gpu (and --model when the log does not name it)")
    return "model not named in the log: give --model for the comparison"


def _setting_flags(engine, settings: dict) -> dict:
    flags: dict = {}
    for flag in engine.launch.flags:  # a setting's first flag (llama.cpp's -ctk before its --type_k alias)
        flags.setdefault(flag.setting, flag.names[0])
    return {key: flags[key] for key in settings if key in flags}


def _answer(report: dict, engine, observed: dict, breakdown) -> None:
    """The report's answer (what the log's figures and the prediction say) and, with a prediction, what to change:
    the engine's own levers, one at a time (changes.py)."""
    from .engine_answer import engine_answer

    memory = engine.log_memory(observed)
    if memory:
        context = engine.cuda_context_bytes() / GIB  # every GPU holds its own
        memory = dict(memory, context_gib=context)
        if memory.get("devices"):
            memory["devices"] = [dict(device, context_gib=context) for device in memory["devices"]]
    report["answer"] = engine_answer(report, memory, breakdown)
    if breakdown is not None:
        from .changes import from_whatif

        bar = report["answer"].get("bar") or {}
        report["what_if"] = from_whatif(report["model"], report["gpu"], engine, breakdown.engine_version,
                                        _known(engine, report["settings"]), bar.get("used_mib"))


_ERROR = re.compile(r"\b\w*(?:Error|Exception)\b: |out of memory|failed to allocate|\berror: ", re.I)


def failure_line(text: str, limit: int = 200) -> str | None:
    """The last error line of a failed start (a Python exception, CUDA's out of memory, a failed allocation),
    cut at a word; None when the log shows none."""
    found = [line.strip() for line in text.splitlines() if _ERROR.search(line)]
    if not found:
        return None
    last = found[-1]
    return last if len(last) <= limit else last[:limit].rsplit(" ", 1)[0] + " ..."


def gpu_of_log(text: str, smi=None, devices: tuple[str, ...] = ()) -> tuple[str | None, str | None, str | None]:
    """(catalog GPU name, how it was found, a named device the catalog lacks) from nvidia-smi output (the
    reading given, else a table quoted in the log: the name it prints, else its total in the catalog), else the
    device the engine's own lines name (GPU 0 of `devices`)."""
    from ..hardware import UnknownGpuError, find_gpu
    from .nvidia_smi import LineScanner, reading_from_log_items
    from .reading import gpu_of_reading

    readings = [(smi, "nvidia-smi")] if smi is not None and smi.gpus else []
    scanner = LineScanner()
    items = [item for line in text.splitlines() for item in scanner.feed(line)]
    quoted = reading_from_log_items([i for i in items if i["type"] == "gpu"], [])
    if quoted is not None and quoted.gpus:
        readings.append((quoted, "nvidia-smi quoted in the log"))
    for reading, where in readings:
        try:
            device, basis = gpu_of_reading(reading, None)
        except ValueError:
            continue
        return device.name, basis.replace("nvidia-smi", where, 1), None
    if not devices:
        return None, None, None
    try:
        device = find_gpu(devices[0])
    except (UnknownGpuError, ValueError):
        return None, None, devices[0]
    of = f", GPU 0 of {len(devices)}" if len(devices) > 1 else ""
    return device.name, f"named in the log{of}", None


# figures every engine's report may hold (nvidia-smi's, read beside the log)
COMMON_LABELS = {"nvidia_smi_used_mib": "nvidia-smi: used", "nvidia_smi_total_mib": "nvidia-smi: total",
                 "nvidia_smi_process_mib": "nvidia-smi: the engine's process", "startup_failed": "start failed",
                 "model_path": "model path", "num_gpus": "GPUs", "gguf_type": "quantization mix (GGUF file)"}


def figure_label(engine, key: str) -> str:
    """A figure or setting in words: the engine's, else the common ones, else the key's words."""
    return engine.log_label(key) or COMMON_LABELS.get(key) or key.replace("_", " ")


def _settings_and_version(engine, text: str, version: str | None) -> tuple[dict, tuple]:
    """The settings a log's server-args dump shows and the release (given, else the engine's inference)."""
    settings = engine.log_settings(text)
    if version:
        return settings, (version, "given")
    inferred = engine.log_version(text)
    if inferred is None:
        return settings, (None, "not shown by the log: the newest modelled release is assumed")
    return settings, (engine.releases.named(inferred), engine.log_version_basis)


def _known(engine, settings: dict) -> dict:
    """The logged settings the engine plans with: its flags' and what it reads from a log besides its flags
    (llama.cpp: the file's mix, free memory per GPU)."""
    names = {flag.setting for flag in engine.launch.flags} | set(engine.log_only_settings)
    return {key: value for key, value in settings.items() if key in names and value not in (None, "auto")
            and not str(value).startswith("torch.")}  # "dtype=torch.bfloat16" of the load line is no setting


def _compare(engine, model: str, gpu: str, version, settings: dict, observed: dict, notes: list) -> tuple:
    """(rows of observed vs predicted, the prediction), (None, None) when the engine cannot predict it."""
    from .. import api
    from ..errors import EngineRefused

    user = _known(engine, settings)
    try:
        breakdown = api.explain(model, gpu, engine=engine.name, engine_version=version, **user)
    except (ValueError, EngineRefused) as error:
        notes.append(f"no prediction to compare: {str(error).splitlines()[0]}")
        return None, None
    fraction = breakdown.figure("mem_fraction_static")
    notes.append(f"predicted with {engine.label} {breakdown.engine_version} on {breakdown.gpu_name}"
                 + (f", mem_fraction_static {fraction}" if fraction is not None else "")
                 + (f", {', '.join(f'{k}={v}' for k, v in user.items())}" if fraction is None and user else ""))
    if "kv_cache_tokens" not in observed and "max_total_num_tokens" in observed:
        observed = dict(observed, kv_cache_tokens=observed["max_total_num_tokens"])
    rows = []
    for key, label, read in engine.log_figures:
        if observed.get(key) is None:
            continue
        predicted = read(breakdown)
        if predicted is None:
            continue
        gap = (predicted - observed[key]) / observed[key] if observed[key] else None
        rows.append({"key": key, "label": figure_label(engine, key), "observed": observed[key],
                     "predicted": round(predicted, 4), "relative_gap": gap})
    return rows, breakdown


def _pool_gib(observed: dict) -> float | None:
    """The KV pool an engine log printed, in GiB (SGLang: K + V sizes in GB as the log writes them)."""
    if observed.get("kv_cache_gib"):
        return observed["kv_cache_gib"]
    k, v = observed.get("k_size_gb"), observed.get("v_size_gb")
    return k + v if k and v else observed.get("kv_size_gb")


def render_engine_report(report: dict, columns: int | None = None) -> str:
    from .engine_answer import render_terminal

    return "\n".join(render_terminal(report, columns))
