"""The first lines of a run in `logs`: the outcome, who took the memory (explain's stacked bar, drawn from the
observed figures), what makes a failed start start, then in one line how the rest was read."""
from __future__ import annotations

from ..units import GIB


def answer_figures(observed: dict, prediction, kv_pool: dict | None, gpu_known: bool) -> dict | None:
    """GPU 0's weights, KV pool, nvidia-smi used and total for the bar: logged where the log or nvidia-smi
    shows them, predicted where not (a predicted total only on a known card); None when a figure is missing."""
    def pick(logged, predicted, unit=1.0):
        if logged is not None:
            return logged, "logged"
        return (predicted / unit, "predicted") if predicted is not None else (None, None)

    p = prediction
    # a bar draws no negative part: a logged weights figure below zero (no start loads negative weights) is
    # drawn from the prediction, as a logged KV figure below zero is
    weights_logged = observed.get("weights_gib") if (observed.get("weights_gib") or 0) > 0 else None
    weights = pick(weights_logged, max(p.weights_bytes, 0) if p else None, GIB)
    kv_logged = observed.get("kv_cache_gib") if (observed.get("kv_cache_gib") or 0) > 0 else (
        kv_pool["gib"] if kv_pool else None)
    kv = pick(kv_logged, max(p.kv_cache_bytes, 0) if p else None, GIB)
    known = p is not None and gpu_known
    used = pick(observed.get("nvidia_smi_used_mib"), p.nvidia_smi_used_mib if known else None)
    total_logged = observed.get("nvidia_smi_total_mib") or (
        observed["total_gpu_memory_gib"] * 1024 if observed.get("total_gpu_memory_gib") else None)
    total = pick(total_logged, p.total_gpu_bytes / 2**20 if known else None)
    if None in (weights[0], kv[0], used[0], total[0]):
        return None
    return {"weights_gib": round(weights[0], 3), "kv_gib": round(kv[0], 3), "used_mib": int(round(used[0])),
            "total_mib": int(round(total[0])),
            "sources": {"weights": weights[1], "kv": kv[1], "used": used[1], "total": total[1]}}


def _agreement(rec: dict | None) -> str:
    if not rec or not rec["figures"]:
        return ""
    rows = [row for row in rec["figures"] if row["key"] != "startup_failed"]
    agree = sum(1 for row in rows if row["agrees"])
    if not rows:
        return ""
    if agree == len(rows):
        return f"; the prediction agrees on all {len(rows)} figures"
    worst = max((row for row in rows if not row["agrees"] and row.get("relative_gap") is not None),
                key=lambda row: abs(row["relative_gap"]), default=None)
    from .observed import LABELS

    off = f" (largest gap: {LABELS.get(worst['key'], worst['key'])} {worst['relative_gap']:+.1%})" if worst else ""
    return f"; the prediction agrees on {agree} of {len(rows)} figures{off}"


def _who(run: dict, label: str) -> str:
    """'vLLM 0.9.1 (V1) on NVIDIA L40S, MODEL' from what was read (the comparison's release when the log's is
    unknown)."""
    rec = run.get("reconciliation") or {}
    version = (run.get("vllm_version") or {}).get("value") or rec.get("vllm_version")
    engine = (run.get("engine") or {}).get("value") or rec.get("engine")
    title = label + (f" {version}" if version else "") + (f" ({engine.upper()})" if engine else "")
    gpu = (run.get("gpu") or {}).get("value")
    model = (run.get("model_used_for_prediction") or {}).get("model")
    return title + (f" on {gpu}" if gpu else "") + (f", {model}" if model else "")


def render_answer(run: dict, columns: int | None, label: str) -> list[str]:
    """`label`: the engine as the report names it (its engine_label)."""
    from .bars import observed_bar_lines

    lines = []
    failed = run["startup"]["failed"]
    fig = run.get("answer")
    if failed:
        lines.append(f"  {_who(run, label)}: did not start.")
        lines += _render_fixes(run)
    elif fig is not None:
        where = "nvidia-smi" if fig["sources"]["used"] == "logged" else "predicted nvidia-smi"
        lines.append(f"  {_who(run, label)}: {where} {fig['used_mib']:,} MiB of {fig['total_mib']:,} MiB"
                     + _agreement(run.get("reconciliation")) + ".")
        bar = observed_bar_lines(fig["weights_gib"], fig["kv_gib"], fig["used_mib"] / 1024, fig["total_mib"] / 1024,
                                 None if columns is None else columns - 2)
        lines += ["  " + line for line in bar]
        guessed = [name for name in ("weights", "kv") if fig["sources"][name] == "predicted"]
        if guessed:
            lines.append(f"  ({' and '.join('KV pool' if g == 'kv' else g for g in guessed)} predicted: the log "
                         "does not print them)")
    else:
        lines.append(f"  {_who(run, label)}: " + ("no GPU total in the log: give --gpu for the memory bar."
                                          if not run.get("gpu") else "too few figures for the memory bar."))
    return lines + _how_read(run)


def _render_fixes(run: dict) -> list[str]:
    shrink = run.get("what_if") or {}
    if "start_fixes" not in shrink:
        return ["  (give --gpu and --model to check which flags make it start)"] if run.get("reconciliation") is None \
            or not run.get("gpu") else []
    if shrink.get("predicted_to_start"):
        return ["  The prediction starts with these settings: the failure is outside memory sizing (see the "
                "comparison below)."]
    if not shrink["start_fixes"]:
        return [f"  No single flag makes it start (each checked with the prediction); try: {shrink['fit_hint']}"]
    lines = ["  Flags that make it start (each checked with the prediction):"]
    for fix in shrink["start_fixes"]:
        lines.append(f"    {fix['flags']}  -> nvidia-smi ~{fix['predicted_nvidia_smi_mib']:,} MiB, KV "
                     f"{fix['kv_cache_tokens']:,} tokens ({fix['max_concurrency']:g}x of {fix['max_model_len']:,})")
    return lines


def _how_read(run: dict) -> list[str]:
    parts = []
    for title, key in (("release", "vllm_version"), ("engine", "engine"), ("GPU", "gpu"), ("model", "model")):
        item = run.get(key)
        if item:
            value = str(item["value"]).upper() if key == "engine" else str(item["value"])
            parts.append(f"{title} {value} ({item['confidence']})")
    chosen = run.get("model_used_for_prediction")
    if run.get("model") is None and chosen:
        parts.append(f"model {chosen['model']} (matched by its weights)")
    if not parts:
        return []
    return [f"  Read from the log: {'; '.join(parts)}. --verbose shows how."]
