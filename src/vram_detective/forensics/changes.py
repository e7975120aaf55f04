"""What to change, the last part of every `logs` answer (issue 27: one shape for every engine): the flags that
would shrink the footprint, each with what nvidia-smi would show then and the KV pool it leaves. A vLLM run's
come from its reconciliation (engines/vllm/logs/reconcile.py, each utilization solved for one request); a log
read whole asks the engine's own whatif levers (advisor/answers.py), so SGLang, llama.cpp and Ollama answer
with their own flags. One table for the terminal (what_if_lines) and one for --html and the web page
(web/report.py what_if_html)."""
from __future__ import annotations

MIN_SAVING_MIB = 64  # a lever that saves less changes nothing a reader would act on
LISTED = 5
FAR = 0.25  # a prediction this far from the logged footprint is not this run: its savings would mislead


def from_whatif(model: str, gpu: str, engine, version, settings: dict, current_mib: int | None) -> dict | None:
    """{baseline, scenarios} from the engine's whatif levers, in the keys vLLM's reconciliation writes; None when
    the engine has no levers or its baseline does not start."""
    from .. import api
    from ..advisor import answers
    from ..errors import EngineRefused, NotOffered

    try:
        rows = answers.whatif(model, api.resolve_gpu(gpu, None), engine, version, dict(settings), {},
                              checkpoints=False).to_dict()["rows"]
    except (NotOffered, EngineRefused, ValueError, LookupError):
        return None
    base = rows[0] if rows and rows[0].get("starts") else None
    before = None if base is None else _gpu0_mib(base, engine.name)
    if before is None:
        return None
    current = current_mib or before
    if abs(before - current) > FAR * current:  # the plan is not this run (a setting the log does not show)
        return {"baseline": {"current_nvidia_smi_mib": int(current), "predicted_nvidia_smi_mib": int(before)},
                "scenarios": [], "withheld": f"the prediction for the logged settings ({before:,} MiB on GPU 0) is "
                                             f"far from the {current:,} MiB the log shows: compare the settings first"}
    scenarios = []
    for row in rows[1:]:
        used = _gpu0_mib(row, engine.name)
        if not row.get("starts") or used is None:
            continue
        saving = before - used
        if saving > MIN_SAVING_MIB:
            scenarios.append({"flags": row["lever"], "command": row.get("command"), "saving_mib": int(saving),
                              "predicted_nvidia_smi_mib": int(used), "projected_nvidia_smi_mib": int(current - saving),
                              "kv_cache_tokens": row.get("kv_cache_tokens"), "max_concurrency": row.get("max_concurrency")})
    scenarios.sort(key=lambda item: -item["saving_mib"])
    return {"baseline": {"current_nvidia_smi_mib": int(current), "basis": "each lever alone, the rest as logged"},
            "scenarios": scenarios[:LISTED]}


def _gpu0_mib(row: dict, engine_name: str) -> int | None:
    """What nvidia-smi would show on GPU 0 for a whatif row: its figure, else GPU 0's VRAM in the engine's own
    part of the row (llama.cpp and Ollama answer VRAM per device)."""
    if row.get("nvidia_smi_used_mib") is not None:
        return row["nvidia_smi_used_mib"]
    per_gpu = (row.get(engine_name) or {}).get("vram_per_gpu_mib") or {}
    return next(iter(per_gpu.values()), None)


def head(shrink: dict) -> str:
    base = shrink["baseline"]
    how = base.get("basis") or (f"each --gpu-memory-utilization is the least that still serves one "
                                f"{base['max_model_len']:,}-token request")
    return f"Flags that would shrink the footprint (now ~{base['current_nvidia_smi_mib']:,} MiB; {how})"


def rows(shrink: dict) -> list[tuple[str, str, str]]:
    """(flags, '-saving -> ~footprint MiB', 'KV tokens (concurrency)') per scenario."""
    out = []
    for item in shrink.get("scenarios") or []:
        tokens = item.get("kv_cache_tokens")
        kv = (f"KV {tokens:,} tokens" + (f" ({item['max_concurrency']:g}x)" if item.get("max_concurrency") else "")
              if tokens else "")
        out.append((item["flags"], f"-{item['saving_mib']:,} -> "
                    f"~{max(item['projected_nvidia_smi_mib'], item['predicted_nvidia_smi_mib']):,} MiB", kv))
    return out


def what_if_lines(shrink: dict | None, table) -> list[str]:
    """The terminal's section: a blank line, the head and the table (`table(rows)` draws it)."""
    if shrink and shrink.get("withheld"):
        return ["", f"  What to change: not listed; {shrink['withheld']}"]
    if not shrink or not shrink.get("scenarios"):
        return []
    return ["", f"  {head(shrink)}"] + table(rows(shrink))  # each scenario's launch line: --json
