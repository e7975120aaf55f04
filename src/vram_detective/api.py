"""The one path every front end (CLI, benchmarks, later the web page) takes to a Breakdown."""
from __future__ import annotations

from contextlib import contextmanager
from functools import lru_cache

from .budget import check as budget_check
from .breakdown import Breakdown
from .engines import DEFAULT_ENGINE, LEGACY_PATH_ENGINE, get_engine
from .engines.base import resolve_model as engine_model
from .errors import EngineRefused
from .hardware import Gpu, custom_gpu, find_gpu
from .intervals import attach as attach_intervals
from .model.config import parse_config
from .model.spec import ConfigError, ModelSpec
from .model.sources import ModelSource, load_model


# Errors that mean "the engine itself would not start" (exit 1, HTTP 422), as opposed to bad input (exit 2): one
# type for every engine (errors.EngineRefused); kept as a tuple for `except api.REFUSALS`.
REFUSALS: tuple[type[Exception], ...] = (EngineRefused,)

# vLLM's V0/V1 engine paths: what `engine=` meant before there was more than one engine
VLLM_PATHS = ("v0", "v1")


@lru_cache(maxsize=64)
def model_source(reference: str, source: str | None = None, revision: str | None = None, token: str | None = None,
                 gguf_file: str | None = None) -> ModelSource:
    """Config + (when headers were read) the checkpoint's tensor table; fetched once per process."""
    return load_model(reference, source=source, revision=revision, token=token, gguf_file=gguf_file)


@lru_cache(maxsize=64)
def model_spec(reference: str, source: str | None = None, revision: str | None = None, token: str | None = None,
               gguf_file: str | None = None) -> ModelSpec:
    """The model's spec from the first source that has it (sources.load_model decides the order)."""
    found = model_source(reference, source, revision, token, gguf_file)
    try:
        return parse_config(found.config, name=found.repo_id)
    except ConfigError as error:
        if found.checkpoint is None:
            raise
        # still say what the checkpoint holds (weights only)
        table = found.checkpoint
        raise type(error)(f"{error}; its checkpoint stores {table.total_bytes / 2**30:.2f} GiB of weights in "
                          f"{len(table.tensors)} tensors ({table.format})") from None


def model_and_checkpoint(reference: str, engine: str = DEFAULT_ENGINE, source: str | None = None, revision: str | None = None,
                         token: str | None = None, gguf_file: str | None = None):
    """(ModelSpec, checkpoint table or None): through the engine's own names first (Ollama's store), else
    the common sources."""
    found = engine_model(get_engine(engine), reference) if source is None else None
    if found is not None:
        return found
    return (model_spec(reference, source, revision, token, gguf_file),
            model_source(reference, source, revision, token, gguf_file).checkpoint)


def resolve_gpu(gpu: str | None, gpu_memory: int | None) -> Gpu:
    if gpu_memory is not None:
        base = find_gpu(gpu) if gpu else None
        if base is None:
            return custom_gpu(gpu_memory)
        return custom_gpu(gpu_memory, name=base.name, compute_capability=base.compute_capability)
    if gpu is None:
        raise ValueError("no GPU given (use --gpu NAME or --gpu-memory SIZE)")
    if gpu.strip().lower() == "auto":
        from .local_gpus import this_machine_gpu

        return this_machine_gpu()  # this machine's first GPU, with what other processes hold on it
    return find_gpu(gpu)


def explain(model: str, gpu: str | Gpu | None = None, *, gpu_memory: int | None = None,
            engine: str = DEFAULT_ENGINE, engine_version: str | None = None, vllm_version: str | None = None,
            vllm_engine: str | None = None, source: str | None = None, revision: str | None = None,
            hf_token: str | None = None, gguf_file: str | None = None, **settings) -> Breakdown:
    """The engine's startup prediction for `model` on a GPU. Settings use the engine's own names
    (snake_case). Old spellings still work: `vllm_version` for `engine_version`, and `engine="v0"`/`"v1"`
    (vLLM's V0/V1 path, now `vllm_engine`)."""
    budget_check()  # the advisor and the simulate fit predict in loops: a web request's budget stops them
    if engine in VLLM_PATHS:
        engine, vllm_engine = LEGACY_PATH_ENGINE, engine
    if vllm_engine is not None:
        settings["engine"] = vllm_engine  # vLLM's own setting name for the path
    runner = get_engine(engine)
    version = engine_version if engine_version is not None else vllm_version
    if engine_version is not None and vllm_version is not None and engine_version != vllm_version:
        raise ValueError(f"two versions given: engine_version={engine_version} and vllm_version={vllm_version}")
    spec, checkpoint = model_and_checkpoint(model, runner.name, source, revision, hf_token, gguf_file)
    device = gpu if isinstance(gpu, Gpu) else resolve_gpu(gpu, gpu_memory)
    # a GGUF table, or an engine's stand-in for a file not at hand (a quantization mix, "gguf-mix")
    gguf = checkpoint if checkpoint is not None and checkpoint.format in ("gguf", "gguf-mix") else None
    return explain_spec(spec, device, runner.name, version, settings, gguf)


def explain_spec(spec: ModelSpec, gpu: Gpu, engine: str, version: str | None, settings: dict,
                 gguf_checkpoint=None) -> Breakdown:
    """explain() for a model already resolved (a ModelSpec, e.g. a scored case's own config): the engine's plan
    at `version` with `settings` in its own names, with the intervals attached."""
    runner = get_engine(engine)
    with refusals_named(runner):
        return attach_intervals(runner.plan(spec, gpu, dict(settings), runner.releases.resolve(version),
                                            gguf_checkpoint=gguf_checkpoint))


@contextmanager
def refusals_named(engine):
    """A refusal raised while `engine` plans names that engine (Ollama's llama.cpp runner refusing is Ollama
    refusing; SGLang refusing a kernel through vLLM's table is SGLang refusing)."""
    try:
        yield
    except EngineRefused as error:
        error.engine_label = engine.label
        raise
