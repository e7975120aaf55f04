"""`whatif` and `fit` for any engine: the one dispatch the command line, the web API and the library share.

Which search answers is the engine's own declaration (`engine.levers.advisor`): "sweep" (the vectorized
sweep over the levers and the catalog's checkpoints, levers.py / search.py), "loop" (a plain loop over the
engine's plan, sglang_advisor.py: SGLang's levers, the one engine declaring it today) or "gguf" (llama.cpp's layer and context solvers, gguf_advisor.py).
No engine is named here: an engine that declares an advisor gets it on every surface."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..errors import NotOffered


@dataclass(frozen=True)
class Target:
    """What `fit` solves for (all optional): tokens per request, requests of that length at once, the memory
    nvidia-smi may show per GPU (bytes), the GPUs available, and how many candidates to list."""

    context: int | None = None
    context_text: str | None = None  # as the user wrote it ("32k"), for the target's sentence
    concurrency: float | None = None
    max_gpu_memory: int | None = None
    max_gpu_memory_text: str | None = None
    gpus: int = 1
    top: int = 5
    same_checkpoint: bool = False


@dataclass(frozen=True)
class AdvisorAnswer:
    """One whatif / fit answer: `data` is what `--json` prints and /api answers, `ok` whether the baseline
    starts (whatif) or a candidate meets the target (fit): exit 0, else 1."""

    command: str
    engine: str
    data: Any
    ok: bool
    text: Callable[[int | None, bool], str]  # (columns, markdown) -> the terminal listing
    wrapped: bool = False  # True: `text` fits the columns itself; False: one line per candidate, to be wrapped

    def to_dict(self) -> dict:
        from ..library import envelope

        return envelope(self.command, self.engine, self.data)


# the figures every engine's what-if row has (schema 2); a row's other figures are the engine's own, nested under
# its name: vLLM's block counts, SGLang's request cap, llama.cpp's layers and buffers
COMMON_ROW_KEYS = ("lever", "change", "model", "settings", "cost", "starts", "refused", "note", "weights_gib",
                   "kv_pool_gib", "kv_cache_gib", "kv_cache_tokens", "max_concurrency", "nvidia_smi_used_mib", "delta",
                   "figures", "command")


def nested_row(row: dict, engine_name: str) -> dict:
    """A what-if row with the engine's own figures under the engine's name (after the common ones)."""
    own = {key: value for key, value in row.items() if key not in COMMON_ROW_KEYS}
    common = {key: value for key, value in row.items() if key in COMMON_ROW_KEYS}
    return {**common, engine_name: own} if own else common


def whatif(model: str, gpu, engine, version: str | None, settings: dict, sources: dict, *,
           checkpoints: bool = True) -> AdvisorAnswer:
    """The baseline, then each lever of the engine one at a time."""
    kind = engine.levers.advisor
    if kind == "sweep":
        from .levers import whatif as sweep_whatif
        from .report import whatif_json, whatif_text

        result = sweep_whatif(model, gpu, vllm_version=version, settings=dict(settings), source_options=sources,
                              include_checkpoints=checkpoints)
        return AdvisorAnswer("whatif", engine.name, whatif_json(result), result.baseline.starts,
                             lambda columns, markdown: whatif_text(result, columns=columns, markdown=markdown), True)
    pins = {key: value for key, value in settings.items() if key != "engine"}
    if kind == "gguf":
        from . import gguf_advisor as advisor

        rows = advisor.whatif(model, gpu, version, pins, sources, engine.name)
    elif kind == "loop":
        from . import sglang_advisor as advisor

        rows = advisor.whatif(model, gpu, version, pins, sources)
    else:
        raise NotOffered(f"whatif: {engine.label} has no levers modelled")
    return AdvisorAnswer("whatif", engine.name, [nested_row(row.to_dict(), engine.name) for row in rows],
                         rows[0].breakdown.failure is None,
                         lambda columns, markdown: advisor.whatif_text(rows))


def fit(model: str, gpu, engine, version: str | None, settings: dict, sources: dict, target: Target,
        *, progress: Callable | None = None) -> AdvisorAnswer:
    """The settings (and, for the sweep, the checkpoints) that meet `target`, best first."""
    kind = engine.levers.advisor
    if kind == "sweep":
        return _sweep_fit(model, gpu, engine, version, settings, sources, target, progress)
    pins = {key: value for key, value in settings.items() if key != "engine"}
    if kind == "gguf":
        return _gguf_fit(model, gpu, engine, version, pins, sources, target)
    if kind != "loop":
        raise NotOffered(f"fit: {engine.label} has no levers modelled")
    from . import sglang_advisor as advisor

    rows = advisor.fit(model, gpu, version, pins, sources, context=target.context, concurrency=target.concurrency,
                       ceiling=target.max_gpu_memory, gpus=target.gpus)[: target.top]
    sentence = (f"{target.concurrency or 1:g} x {target.context_text or 'the model context'} tokens"
                + (f" under {target.max_gpu_memory_text} per GPU" if target.max_gpu_memory else ""))
    return AdvisorAnswer("fit", engine.name, {"target": sentence, "candidates": [row.fit_dict() for row in rows]},
                         bool(rows), lambda columns, markdown: advisor.fit_text(rows, sentence))


def _sweep_fit(model, gpu, engine, version, settings, sources, target: Target, progress) -> AdvisorAnswer:
    from .report import fit_json, fit_text
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


def _gguf_fit(model, gpu, engine, version, pins, sources, target: Target) -> AdvisorAnswer:
    from . import gguf_advisor

    if not engine.levers.solves_layers:
        raise NotOffered(f"fit --engine {engine.name}: {engine.label} picks the layers itself (its estimate); use "
                         f"`whatif --engine {engine.name}`, or `fit` with an engine whose layers you set")
    answers = gguf_advisor.fit(model, gpu, version, pins, sources, context=target.context,
                               concurrency=target.concurrency, ceiling=target.max_gpu_memory, gpus=target.gpus)
    sentence = (f"{gpu.name}" + (f", {target.max_gpu_memory_text} per GPU" if target.max_gpu_memory else "")
                + (f", {target.gpus} GPUs" if target.gpus > 1 else ""))
    return AdvisorAnswer("fit", engine.name, gguf_advisor.fit_json(answers, sentence),
                         any(entry.answer.layout is not None for entry in answers),
                         lambda columns, markdown: gguf_advisor.fit_text(model, answers, sentence))
