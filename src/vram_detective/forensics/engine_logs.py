"""`logs` for an engine other than vLLM (SGLang today): which engine wrote the log, the figures it printed,
its settings and release, and (with the model and GPU) each figure against the prediction.

vLLM's own logs keep their deeper analysis (command.py, infer.py, reconcile.py; the reader: engines/vllm/logs/)."""
from __future__ import annotations

from ..units import GIB


def detect_engine(text: str) -> str:
    """The engine whose log formats match; every other engine is asked before the default (whose reader also
    takes a log that names no engine)."""
    from ..engines import DEFAULT_ENGINE, ENGINES, get_engine

    others = [name for name in ENGINES if name != DEFAULT_ENGINE]
    return next((name for name in others if get_engine(name).logs.is_mine(text)), DEFAULT_ENGINE)


def build_engine_report(text: str, engine_name: str, *, log: str, model=None, gpu=None, version=None,
                        smi=None, extra: str | None = None) -> dict:
    """`extra`: more of the engine's own output read with the log (Ollama's `ollama ps`)."""
    from ..engines import get_engine

    engine = get_engine(engine_name)
    observed = engine.logs.parse(text)
    if extra:
        observed.update({key: value for key, value in engine.logs.parse(extra).items() if key not in observed})
    if smi is not None and smi.gpus and smi.gpu(0).used_mib is not None:
        observed["nvidia_smi_used_mib"] = smi.gpu(0).used_mib
    settings, version_basis = _settings_and_version(engine, text, version)
    model = model or settings.pop("model_path", None)
    gpu_basis = "--gpu" if gpu else None
    if not gpu:
        gpu, gpu_basis = gpu_of_log(text, smi)
    report = {"log": log, "engine": engine_name, "engine_label": engine.label,
              "lines_read": text.count("\n") + (1 if text and not text.endswith("\n") else 0),
              "observed": observed, "settings": settings, "engine_version": version_basis[0],
              "version_basis": version_basis[1], "model": model, "gpu": gpu, "gpu_basis": gpu_basis,
              "comparison": None, "notes": []}
    report["findings"] = engine.log_findings(observed)
    from .serving import read_serving_stats

    report["serving"] = read_serving_stats(text).to_dict(pool_gib=_pool_gib(observed))
    if model and gpu:
        report["comparison"] = _compare(engine, model, gpu, version_basis[0], settings, observed, report["notes"])
    elif not gpu:
        report["notes"].append("GPU not known (no --gpu, no nvidia-smi reading in the log): no comparison against a "
                               "made-up card; give --gpu (and --model when the log does not name it)")
    return report


def gpu_of_log(text: str, smi=None) -> tuple[str | None, str | None]:
    """(catalog GPU name, how it was found) from nvidia-smi output: the reading given, else a table quoted in
    the log (the name it prints, else its total in the catalog); (None, None) when neither names a card."""
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
        return device.name, basis.replace("nvidia-smi", where, 1)
    return None, None


def _settings_and_version(engine, text: str, version: str | None) -> tuple[dict, tuple]:
    """The settings a log's server-args dump shows and the release (given, else the engine's inference)."""
    from ..units import format_version

    settings = engine.log_settings(text)
    if version:
        return settings, (version, "given")
    inferred = engine.log_version(text)
    if inferred is None:
        return settings, (None, "not shown by the log: the newest modelled release is assumed")
    basis = engine.log_version_basis
    return settings, (format_version(inferred), basis)


def _compare(engine, model: str, gpu: str, version, settings: dict, observed: dict, notes: list) -> list[dict]:
    from .. import api
    from ..errors import EngineRefused

    # settings the engine reads from a log besides its flags (llama.cpp: the file's mix, free memory per GPU)
    names = {flag.setting for flag in engine.launch.flags} | set(engine.log_only_settings)
    user = {key: value for key, value in settings.items() if key in names and value not in (None, "auto")
            and not str(value).startswith("torch.")}  # "dtype=torch.bfloat16" of the load line is no setting
    try:
        breakdown = api.explain(model, gpu, engine=engine.name, engine_version=version, **user)
    except (ValueError, EngineRefused) as error:
        notes.append(f"no prediction to compare: {str(error).splitlines()[0]}")
        return None
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
        rows.append({"key": key, "label": label, "observed": observed[key], "predicted": round(predicted, 4),
                     "relative_gap": gap})
    return rows


def _pool_gib(observed: dict) -> float | None:
    """The KV pool an engine log printed, in GiB (SGLang: K + V sizes in GB as the log writes them)."""
    if observed.get("kv_cache_gib"):
        return observed["kv_cache_gib"]
    k, v = observed.get("k_size_gb"), observed.get("v_size_gb")
    return k + v if k and v else observed.get("kv_size_gb")


def render_engine_report(report: dict) -> str:
    label = report["engine_label"]
    lines = [f"{label} log: {report['log']} ({report['lines_read']:,} lines)",
             f"  Release  {report['engine_version'] or '?'}  ({report['version_basis']})"]
    if report["model"]:
        lines.append(f"  Model    {report['model']}")
    if report.get("gpu"):
        lines.append(f"  GPU      {report['gpu']}  ({report.get('gpu_basis') or '--gpu'})")
    lines += ["", "  What the log printed (rank 0)"]
    lines += [f"    {key:<34} {value}" for key, value in report["observed"].items()]
    if report["settings"]:
        lines += ["", f"  Settings ({label}'s names)"] + [f"    {k:<34} {v}" for k, v in report["settings"].items()]
    if report["comparison"]:
        lines += ["", "  Observed vs predicted", f"    {'figure':<30} {'observed':>12} {'predicted':>12} {'gap':>8}"]
        for row in report["comparison"]:
            gap = "" if row["relative_gap"] is None else f"{row['relative_gap']:+.1%}"
            predicted = f"{row['predicted']:,}" if isinstance(row["observed"], int) else f"{row['predicted']:,.2f}"
            lines.append(f"    {row['label']:<30} {row['observed']:>12,} {predicted:>12} {gap:>8}")
    found = report.get("findings")
    if found:
        lines += ["", f"  {found['title']}",
                  f"    {'figure':<22} " + " ".join(f"{c:>12}" for c in found["columns"]) + f" {'difference':>11}  why"]
        for row in found["rows"]:
            delta = "" if row["delta"] is None else f"{row['delta']:+,.1f}"
            lines.append(f"    {row['figure']:<22} " + " ".join(f"{v:>12,.1f}" if v is not None else f"{'-':>12}" for v in row["values"])
                         + f" {delta:>11}  {row['why']}")
    if report.get("serving"):
        from .serving import serving_line

        lines += ["", "  " + serving_line(report["serving"])]
    lines += [f"  note: {note}" for note in report["notes"]]
    return "\n".join(lines)
