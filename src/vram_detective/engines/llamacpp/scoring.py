"""llama.cpp / Ollama against a ground-truth case (groundtruth/SCHEMA.md's llama.cpp keys), for `score`
(scoring.py does the engine-neutral rest): the case planned from its own fields (accuracy.py `plan_case`: the
program, the build, the settings in llama.cpp's or Ollama's names, the GGUF mix or the file's header), then each
buffer the log printed beside the plan's, device by device."""
from __future__ import annotations

from ... import fidelity, scoring
from . import accuracy

# llama.cpp's buffers by kind (accuracy.py compare): one table row per kind, over devices
FIGURES = ("model_buffer_mib", "kv_buffer_mib", "compute_buffer_mib", "output_buffer_mib", "vram_mib", "host_ram_mib")


def score_case(case: dict, catalog_only: bool = False) -> tuple[dict | None, str]:
    """One llama.cpp / Ollama case, buffer by buffer: its entry, or None and why it is skipped."""
    model = scoring.case_model(case, catalog_only)
    plan = accuracy.plan_case(case, file_at_hand=not isinstance(model, str) and model.gguf is not None)
    if isinstance(plan, str):
        return None, plan
    if isinstance(model, str):
        return None, model
    rows = accuracy.compare(case, model.spec, plan, model.gguf)
    if not rows:
        return None, "the log prints no buffer the plan has"
    entry = _head(case, plan, model)
    for kind, figure, predicted, observed in rows:
        key = {"vram": "vram_mib", "host": "host_ram_mib"}.get(kind, f"{kind}_buffer_mib")
        entry["figures"][f"{key}:{figure}"] = scoring.figure(key, predicted, observed)
    return entry, ""


def _head(case: dict, plan, model) -> dict:
    """The entry's keys before its figures: the program and release it was planned with, the table keys."""
    from ...hardware import UnknownGpuError, find_gpu
    from .. import get_engine

    tags = list(case.get("tags", []))
    program = get_engine(plan.engine)  # llama.cpp, or Ollama when the case runs Ollama's own runner
    entry = {"id": case["id"], "engine_version": f"{plan.engine} {plan.version}", "version_basis": plan.version_basis,
             "tags": tags, "separate": scoring.is_separate(tags), "figures": {},
             "era": program.releases.era(plan.version)}
    if model.note:
        entry["model_note"] = model.note
    if plan.not_compared:
        entry["not_compared"] = {"kinds": list(plan.not_compared), "why": plan.not_compared_why}
    try:
        total = find_gpu(str(case.get("gpu") or "").split(" + ")[0]).cuda_total_bytes if case.get("gpu") else None
    except UnknownGpuError:
        total = None
    entry["gpu_class"] = fidelity.gpu_class(total)
    return entry
