"""The public library API: one function per command, each returning a typed result whose `to_dict()` is
exactly what the command prints with `--json` and what the web API answers (docs/api.md).

    from vram_detective import explain, whatif, fit, compare, logs, simulate, score
    whatif("Qwen/Qwen3-8B", "RTX 4090", engine="llamacpp", n_ctx=32768).to_dict()

Every engine is reached the same way: `engine=` takes its name ("vllm", "sglang", "llamacpp" or "llama.cpp",
"ollama"; default: what the inputs mean, engine_choice.py), settings take the engine's own names in snake_case.
A start the engine would refuse raises errors.EngineRefused; bad input raises a ValueError / errors.NotFound;
a feature an engine does not have raises errors.NotOffered."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SCHEMA_VERSION = 3  # bumped when a key of any command's JSON changes meaning or moves (3: score's sections)


def envelope(command: str, engine: str | None, data: Any) -> dict:
    """A command's JSON: `schema_version`, the command and the engine first, then its figures (a list of rows
    goes under "rows")."""
    head = {"schema_version": SCHEMA_VERSION, "command": command, **({"engine": engine} if engine else {})}
    if isinstance(data, dict):
        return {**head, **{key: value for key, value in data.items() if key not in head}}
    return {**head, "rows": data}


@dataclass(frozen=True)
class Result:
    """A command's answer: `data` its figures, `ok` whether it met its goal (exit 0; else 1)."""

    command: str
    engine: str | None
    data: Any
    ok: bool = True

    def to_dict(self) -> dict:
        return envelope(self.command, self.engine, self.data)


def _engine(name: str | None, model: str | None = None, settings: dict | None = None):
    from .engine_choice import canonical, model_engine
    from .engines import DEFAULT_ENGINE, get_engine

    return get_engine(canonical(name) or model_engine(model) or DEFAULT_ENGINE)


def _gpu(gpu, gpu_memory):
    from . import api
    from .hardware import Gpu

    return gpu if isinstance(gpu, Gpu) else api.resolve_gpu(gpu, gpu_memory)


def _sources(source=None, revision=None, hf_token=None, gguf_file=None) -> dict:
    return {"source": source, "revision": revision, "hf_token": hf_token, "gguf_file": gguf_file}


def explain(model: str, gpu=None, *, engine: str | None = None, **options):
    """The engine's startup prediction: a breakdown.Breakdown (`render.to_json(b)` is `explain --json`).
    `engine="v0"`/`"v1"` (vLLM's path, the old spelling) still works: `vllm_path` is its name now."""
    from . import api

    from .engines import ENGINES

    if engine in api.VLLM_PATHS:
        return api.explain(model, gpu, engine=engine, **options)
    # a keyword spelled with an engine's name (`vllm_version=`, `vllm_engine=`) names that engine
    named = engine or next((name for key in options for name in ENGINES if key.startswith(name + "_")), None)
    return api.explain(model, gpu, engine=_engine(named, model).name, **options)


def whatif(model: str, gpu=None, *, engine: str | None = None, engine_version: str | None = None,
           gpu_memory: int | None = None, checkpoints: bool = True, source=None, revision=None, hf_token=None,
           gguf_file=None, **settings) -> Result:
    """The baseline, then each of the engine's levers one at a time (`whatif --json`)."""
    from .advisor import answers

    runner = _engine(engine, model)
    answer = answers.whatif(model, _gpu(gpu, gpu_memory), runner, engine_version, settings,
                            _sources(source, revision, hf_token, gguf_file), checkpoints=checkpoints)
    return Result("whatif", runner.name, answer.data, answer.ok)


def fit(model: str, gpu=None, *, engine: str | None = None, engine_version: str | None = None,
        gpu_memory: int | None = None, context: int | str | None = None, concurrency: float | None = None,
        max_gpu_memory: str | None = None, gpus: int = 1, top: int = 5, same_checkpoint: bool = False,
        source=None, revision=None, hf_token=None, gguf_file=None, **settings) -> Result:
    """The settings that meet a context / concurrency / memory target, best first (`fit --json`)."""
    from .advisor import answers
    from .advisor.command import fit_target

    runner = _engine(engine, model)
    target = fit_target(context, concurrency, max_gpu_memory, gpus, top, same_checkpoint)
    answer = answers.fit(model, _gpu(gpu, gpu_memory), runner, engine_version, settings,
                         _sources(source, revision, hf_token, gguf_file), target)
    return Result("fit", runner.name, answer.data, answer.ok)


def simulate(model: str, gpu=None, *, workload: str, engine: str | None = None, engine_version: str | None = None,
             gpu_memory: int | None = None, seed: int = 0, preemption_budget: float = 0.01, cost: str | None = None,
             source=None, revision=None, hf_token=None, gguf_file=None, **settings) -> Result:
    """A request workload against the predicted KV pool, and the smallest pool serving it (`simulate --json`)."""
    from . import api
    from .errors import EngineRefused
    from .simulate import parse_workload
    from .simulate.command import parse_cost, report_dict, simulate_and_fit
    from .simulate.fit import default_cost

    runner = _engine(engine, model)
    if not 0 <= preemption_budget < 1:
        raise ValueError(f"preemption_budget is a fraction in [0, 1), got {preemption_budget}")
    sources = _sources(source, revision, hf_token, gguf_file)

    def predict(extra: dict):
        return api.explain(model, gpu, gpu_memory=gpu_memory, engine=runner.name, engine_version=engine_version,
                           **sources, **{**settings, **extra})

    b = predict({})
    if b.failure is not None:
        refusal = EngineRefused(b.failure.message.splitlines()[0])
        refusal.engine_label = b.engine_label
        raise refusal
    spent = parse_cost(cost) if cost else default_cost(b)
    pinned = {key: value for key, value in settings.items() if key != "engine"}
    result, found = simulate_and_fit(predict, b, parse_workload(workload), pinned=pinned, seed=seed,
                                     budget=preemption_budget, cost=spent)
    return Result("simulate", runner.name, report_dict(b, workload, seed, spent, result, found))


def logs(text: str = "", *, nvidia_smi: str | None = None, model: str | None = None, gpu: str | None = None,
         engine_version: str | None = None, engine: str | None = None, tp: int | None = None) -> Result:
    """An engine log (and nvidia-smi output) read back into the breakdown, beside the prediction (`logs --json`);
    the engine is the one that printed the log. No log (text ""), nvidia-smi output and the model that ran: the
    value of the engine's pool lever that explains the reading (`logs --nvidia-smi F --model M --json`; `engine`:
    the engine that ran, default what the model means, else vLLM; errors.NotOffered for an engine without one)."""
    from .web.service import logs_json  # the log read from memory, as the web API reads a pasted one

    report = logs_json(text, nvidia_smi, model, gpu, engine_version, engine=engine, tp=tp)
    return Result("logs", report.get("engine"), report)


def compare(model: str, gpu: str, *, context: int | None = None, tp: int = 1, engines=None,
            versions: dict | None = None, gguf_type: str | None = None, speculation=None) -> Result:
    """One prediction per engine for the same model and GPU, side by side (`compare --json`); `speculation`:
    engines.base.Speculation or {"method", "draft_model", "tokens"} (`compare --speculative`)."""
    from .compare import compare_report
    from .engines.base import Speculation

    if isinstance(speculation, dict):
        speculation = Speculation(**speculation)
    report = compare_report(model, gpu, context=context, tp=tp, engines=engines, versions=versions,
                            gguf_type=gguf_type, speculation=speculation)
    report.pop("breakdowns")
    return Result("compare", None, report)


def score(cases, *, from_logs: bool = False, catalog_only: bool = False) -> Result:
    """Accuracy against real engine logs: a ground-truth JSONL path or a list of case dicts (`score --json`;
    `catalog_only`: models from the catalog only, as `score --catalog-only` and the web API's /api/score)."""
    from .scoring import load_cases, score_cases

    loaded = load_cases(str(cases)) if not isinstance(cases, list) else cases
    return Result("score", None, score_cases(loaded, from_logs=from_logs, catalog_only=catalog_only))
