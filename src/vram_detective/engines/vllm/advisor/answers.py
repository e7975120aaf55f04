"""vLLM's whatif / fit answers (advisor/answers.py dispatches here through `Levers.answers`)."""
from __future__ import annotations

from ....advisor.answers import AdvisorAnswer, Target


def whatif(model: str, gpu, engine, version: str | None, settings: dict, sources: dict, *,
           checkpoints: bool = True) -> AdvisorAnswer:
    """The baseline, then every lever one at a time (levers.py), and the catalog's other checkpoints."""
    from ....advisor.report import whatif_json, whatif_text
    from .levers import whatif as sweep_whatif

    result = sweep_whatif(model, gpu, vllm_version=version, settings=dict(settings), source_options=sources,
                          include_checkpoints=checkpoints)
    return AdvisorAnswer("whatif", engine.name, whatif_json(result), result.baseline.starts,
                         lambda columns, markdown: whatif_text(result, columns=columns, markdown=markdown), True)


def fit(model: str, gpu, engine, version: str | None, settings: dict, sources: dict, target: Target, *,
        progress=None) -> AdvisorAnswer:
    """The sweep over vLLM's settings and the checkpoints (search.py), the best few verified by explain."""
    from ....advisor.report import fit_json, fit_text
    from .search import Target as SweepTarget
    from .search import fit as sweep_fit

    pins = dict(settings)
    path = pins.pop("engine", None)
    entrypoint = pins.pop("entrypoint", None) or "serve"
    wanted = SweepTarget(context=target.context, concurrency=target.concurrency,
                         max_gpu_memory=target.max_gpu_memory, gpus=target.gpus)
    result = sweep_fit(model, gpu, wanted, vllm_version=version, pins=pins, entrypoint=entrypoint, engine=path,
                       same_checkpoint=target.same_checkpoint, top=target.top, source_options=sources,
                       progress=progress)
    return AdvisorAnswer("fit", engine.name, fit_json(result, engine.name), result.feasible,
                         lambda columns, markdown: fit_text(result, columns=columns, markdown=markdown), True)
