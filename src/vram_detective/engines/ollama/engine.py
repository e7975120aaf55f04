"""Ollama behind engines/base.py's interface: Ollama's defaults by version pick num_ctx, num_parallel, flash
attention and the KV type; its own estimate (estimate.py) picks how many layers go to the GPU; llama.cpp's
rules (engines/llamacpp) then allocate, at the llama.cpp build that Ollama version vendors."""
from __future__ import annotations

import re

from dataclasses import dataclass
from functools import cached_property, lru_cache

from ...input_checks import check_counts
from ..base import CaseScoring, LaunchLine, Levers, LogFormats, PoolSimulation, ReadingLever, Releases

MIB = 1024 * 1024


class OllamaSettingsError(ValueError):
    pass


@dataclass(frozen=True)
class OllamaRun:
    """What Ollama decided: the estimate, the llama.cpp settings it passes, the layout llama.cpp makes."""

    version: tuple
    num_ctx: int
    num_parallel: int
    estimate: object  # estimate.OllamaEstimate
    llamacpp_settings: dict
    layout: object  # llamacpp.plan.Layout


KNOWN = {"num_ctx", "num_parallel", "num_gpu", "num_batch", "flash_attention", "kv_cache_type", "os",
         "gpu_free_mib", "gguf_type", "use_mmap", "num_gpus"}


# llama.cpp's names (a -c / -np / -ngl given to `explain --engine ollama`) -> the Ollama knob that sets them
FROM_LLAMACPP = {"n_ctx": "num_ctx", "n_parallel": "num_parallel", "n_gpu_layers": "num_gpu", "n_batch": "num_batch",
                 "type_k": "kv_cache_type", "type_v": "kv_cache_type", "flash_attn": "flash_attention", "mmap": "use_mmap"}


# Ollama's model names: [namespace/]name:tag ("qwen2.5:7b", "library/llama3.1:8b-instruct-q4_K_M"). A Hugging
# Face repo id has no colon, a local path starts with / . or ~, so a tag means Ollama.
_TAG = re.compile(r"^(?:[a-z0-9][a-z0-9._-]*/)?[a-z0-9][a-z0-9._-]*:[A-Za-z0-9][A-Za-z0-9._-]*$")


def _is_ollama_tag(reference: str) -> bool:
    return bool(_TAG.match(reference))


def ollama_names(user: dict) -> dict:
    """The settings in Ollama's names: llama.cpp's names translated; "auto" leaves the choice to Ollama."""
    out = {}
    for key, value in user.items():
        name = FROM_LLAMACPP.get(key, key)
        if value is None or (isinstance(value, str) and value.lower() == "auto"):
            continue
        if name == "num_gpu" and isinstance(value, str):
            value = 999 if value.lower() == "all" else int(value)  # num_gpu 999: every layer (Ollama's idiom)
        if name in out and out[name] != value:
            raise OllamaSettingsError(f"{key}={value} and {name}={out[name]}: Ollama has one {name}")
        out[name] = value
    return out


def _flash(user: dict, version) -> bool:
    from .releases import rule

    value = user.get("flash_attention", rule("flash_attn", version))
    return value not in (False, "off", "0", "false")


# Modelfile PARAMETERs that change memory, as the params layer of a manifest stores them (api/types.go Options)
MODELFILE_KNOBS = ("num_ctx", "num_gpu", "num_batch", "use_mmap")
PARAMS_KEY, PROJECTOR_KEY = "ollama.params", "ollama.projector"  # set on the GGUF table by _stored


def stored_defaults(table) -> dict:
    """The stored model's Modelfile PARAMETERs (num_ctx 8192, ...): Ollama's defaults for that model, under
    whatever the user gives (server/routes.go merges the model's options before the request's)."""
    params = (getattr(table, "metadata", None) or {}).get(PARAMS_KEY) or {}
    return {k: params[k] for k in MODELFILE_KNOBS if params.get(k) is not None}


def _projector(table) -> str:
    """The vision projector blob the runner gets as --mmproj (llm/server.go), for a stored vision model."""
    return str((getattr(table, "metadata", None) or {}).get(PROJECTOR_KEY) or "")


# Ollama's whole-number knobs (api/types.go Options, envconfig): setting -> (flag, lowest, highest, also allowed).
# num_ctx / num_parallel 0 leave the choice to Ollama (its default); num_gpu -1 is Ollama's own estimate.
COUNT_RANGES = {
    "num_ctx": ("--num-ctx", 0, 1 << 32, ()), "num_parallel": ("--num-parallel", 0, 1 << 16, ()),
    "num_gpu": ("--num-gpu", -1, 1 << 20, ()), "num_batch": ("--num-batch", 1, 1 << 32, ()),
    "num_gpus": ("number of GPUs", 1, 1 << 12, ()),
}


def decide(spec, gpu, user: dict, version, gguf_checkpoint=None) -> OllamaRun:
    """Ollama's choices for this model on this GPU, and llama.cpp's allocation for them."""
    from ..llamacpp.plan import layout, model_tensors
    from ..llamacpp.settings import resolve
    from . import releases as r
    from .estimate import estimate, shape_of

    tag = _library_tag(gguf_checkpoint)
    if tag is not None:  # not pulled: the catalog's checkpoint at the library tag's type, unless -gguf-type says
        user, gguf_checkpoint = {"gguf_type": tag.gguf_type, **ollama_names(user)}, None
    user = {**stored_defaults(gguf_checkpoint), **ollama_names(user)}
    unknown = set(user) - KNOWN
    if unknown:
        raise OllamaSettingsError(f"unknown Ollama setting(s): {', '.join(sorted(unknown))}")
    check_counts(user, COUNT_RANGES, OllamaSettingsError)
    build = r.rule("llamacpp_build", version)
    num_ctx = int(user.get("num_ctx") or r.default_num_ctx(version, gpu.cuda_total_bytes))
    parallel = int(user.get("num_parallel") or r.default_num_parallel(version))
    fa = _flash(user, version)
    kv_type = user.get("kv_cache_type", "f16") if fa and r.rule("kv_cache_type", version) else "f16"
    free = [int(x) * MIB for x in user.get("gpu_free_mib", ())] or [gpu.cuda_total_bytes] * int(user.get("num_gpus", 1))
    tensors, _ = model_tensors(spec, resolve({"gguf_type": user.get("gguf_type", "Q4_K_M")}, build), gguf_checkpoint)
    est = estimate(tensors, shape_of(spec), free, num_ctx * parallel, int(user.get("num_batch", r.rule("n_batch", version))),
                   kv_type, int(user.get("num_gpu", -1)), r.rule("minimum_memory_mib", version) * MIB)
    mmap = user.get("use_mmap", not (user.get("os") == "windows" and r.rule("no_mmap_on_windows_cuda", version)))
    cpp = {"n_gpu_layers": est.layers_offload, "n_ctx": num_ctx * parallel, "n_parallel": parallel,
           "n_batch": int(user.get("num_batch", r.rule("n_batch", version))), "n_ubatch": 512,
           "type_k": kv_type, "type_v": kv_type, "flash_attn": "on" if fa else "off", "mmap": bool(mmap),
           "embeddings": r.rule("embeddings", version), "num_gpus": len(free), "kv_unified": True,
           "gguf_type": user.get("gguf_type", "Q4_K_M"),
           "device_free_mib": tuple(f // MIB for f in free) if len(free) > 1 else (),
           "mmproj": _projector(gguf_checkpoint)}
    lay = layout(spec, resolve(cpp, build), gguf_checkpoint)
    return OllamaRun(tuple(version), num_ctx, parallel, est, cpp, lay)


def _answers():
    from . import advisor

    return advisor


class OllamaEngine:
    name = "ollama"
    label = "Ollama"
    # the levers the web page shows as controls: (setting, kind, label, min, max, step)
    controls = (("num_ctx", "range", "context (num_ctx)", 512, 131072, 512),
                ("num_parallel", "range", "parallel (OLLAMA_NUM_PARALLEL)", 1, 64, 1),
                ("num_gpu", "number", "GPU layers (num_gpu)", 0, 999, 1),
                ("kv_cache_type", "select", "KV cache type", ("f16", "q8_0", "q4_0"), None, None),
                ("flash_attention", "checkbox", "flash attention", None, None, None),
                ("num_gpus", "select", "GPUs (CUDA_VISIBLE_DEVICES)", (1, 2, 4), None, None))

    @cached_property
    def releases(self) -> Releases:
        from . import releases as r

        return Releases(r.KNOWN, r.KNOWN[0], ".".join(map(str, r.NEWEST)), r.resolve_version, r.rules_at, r.rule_at,
                        r.first_release, r.is_modelled, r.era)

    @cached_property
    def launch(self) -> LaunchLine:
        from . import launch

        return LaunchLine(launch.FLAGS, launch.parse_flag_value, launch.parse_launch_line, launch.LaunchLineError,
                          foreign=frozenset(FROM_LLAMACPP), claims_model=_is_ollama_tag)

    def is_launch_line(self, words) -> bool:
        from .launch import is_launch_line

        return is_launch_line(words)

    def launch_line(self, model: str, settings: dict) -> str:
        from .launch import run_line

        return run_line(model, settings)

    live_metrics = None  # Ollama serves no Prometheus /metrics: `watch` reads no Ollama server

    def resolve_model(self, reference: str):
        """(spec, GGUF table) of a model pulled into the local store ("qwen2.5:7b"); a library name the store
        does not hold (or may not be read for): the catalog's checkpoint and a library.LibraryTag (its type);
        None for other references (a catalog model is then sized with a stock mix); any other name:tag missing
        from the store is an error."""
        from ...read_policy import NOT_ALLOWED, NotAllowed, exists, may_probe
        from .store import OllamaModelNotFound, OllamaStoreError, looks_like_ollama_name, manifest_path, store_dir

        if not looks_like_ollama_name(reference) or exists(reference):
            return None
        try:
            if not may_probe(store_dir()):  # the server: the store is read only under --allow-local-models
                raise NotAllowed(f"{reference[:200]}: the Ollama store is {NOT_ALLOWED}")
            path = manifest_path(reference)
            stored = path.is_file()
        except (OllamaStoreError, NotAllowed, OSError) as error:
            # a library name the store cannot answer for: the catalog's checkpoint at the tag's type (library.py)
            from_catalog = None if isinstance(error, OllamaStoreError) else _from_catalog(
                reference, f"the Ollama store is {NOT_ALLOWED}" if isinstance(error, NotAllowed) else
                f"the Ollama store cannot be read: {error}")
            if from_catalog is not None:
                return from_catalog
            if ":" in reference:  # name:tag is an Ollama name: say why it cannot be read
                raise
            return None  # else it may be a catalog or Hub id
        if not stored:
            from_catalog = _from_catalog(reference, f"it is not in the Ollama store ({store_dir()})")
            if from_catalog is not None:
                return from_catalog
            if ":" in reference:
                raise OllamaModelNotFound(f"{reference}: not in the Ollama store ({path} is "
                                          "missing; `ollama pull` it, or set OLLAMA_MODELS)")
            return None
        return _stored(reference, str(path))

    def machine_settings(self, free_bytes: tuple[int, ...]) -> dict:
        """Ollama sizes its layer estimate from each GPU's free memory (its gpu_free_mib setting)."""
        return {"gpu_free_mib": [free // (1 << 20) for free in free_bytes], "num_gpus": len(free_bytes)}

    def common_settings(self, *, context: int | None = None, gpus: int = 1) -> dict:
        return {**({"num_ctx": context} if context else {}), **({"num_gpus": gpus} if gpus > 1 else {})}

    @cached_property
    def logs(self) -> LogFormats:
        from ..llamacpp.log_lines import log_lines
        from .log_parser import is_ollama_log, parse

        return LogFormats(log_lines, parse, is_ollama_log, companion="`ollama ps`")

    @cached_property
    def log_figures(self) -> tuple:
        from ..llamacpp.engine import LOG_FIGURES

        return LOG_FIGURES

    gguf_mixes = True  # sizes a model at a llama.cpp quantization mix without the file (--gguf-type)
    log_only_settings = ("gguf_type", "device_free_mib")
    log_version_basis = "printed by the log (version=)"

    def log_label(self, key: str) -> str | None:
        from .log_labels import label

        return label(key)

    def log_gpus(self, text: str) -> tuple[str, ...]:
        from .log_labels import gpus

        return gpus(text)

    def log_memory(self, observed: dict) -> dict:
        from ..llamacpp.log_labels import memory

        return memory(observed)  # the llama.cpp runner's buffers

    def log_settings(self, text: str) -> dict:
        from .log_parser import log_settings

        return log_settings(text)

    def log_version(self, text: str):
        from .log_parser import parse

        version = parse(text).get("ollama_version")
        return None if version is None else self.releases.resolve(version)

    def log_findings(self, observed: dict):
        """Where Ollama's estimate and llama.cpp's allocation differ, and why (log_parser.reconcile)."""
        from .log_parser import findings

        return findings(observed)

    @property
    def reading(self) -> ReadingLever:
        """`logs --nvidia-smi` without a log: the lever a reading is solved for (reading.py)"""
        from ..llamacpp.reading import reading

        return reading("num_ctx", "num_ctx", "Ollama")

    @cached_property
    def simulation(self) -> PoolSimulation:
        """simulate's pool: llama.cpp's slots with Ollama's num_ctx x num_parallel (simulation.py)"""
        from ..llamacpp.simulation import WORDS
        from . import simulation as s

        return PoolSimulation(s.pool, s.simulator, s.rule_table, s.lever, s.flags_for_bytes, bounds_requests=False,
                              words=WORDS)

    @cached_property
    def levers(self) -> Levers:
        from ..llamacpp.engine import FastPathUnsupported, NoFastPath

        flags = {"num_ctx": "PARAMETER num_ctx", "num_parallel": "OLLAMA_NUM_PARALLEL", "num_gpu": "PARAMETER num_gpu",
                 "kv_cache_type": "OLLAMA_KV_CACHE_TYPE", "flash_attention": "OLLAMA_FLASH_ATTENTION"}
        return Levers(tuple(flags), NoFastPath, FastPathUnsupported, lambda: None, lambda: dict(flags),
                      lambda spec, gpu, version, settings: None, advisor="gguf", solves_layers=False,
                      answers=_answers)

    @cached_property
    def scoring(self) -> CaseScoring:
        from ... import scoring as neutral
        from ..llamacpp import scoring

        # an Ollama case is planned by llama.cpp's case planner (accuracy.plan_case: Ollama's release, its
        # vendored build, its own layer placement), compared buffer by buffer as llama.cpp's
        return CaseScoring(scoring.score_case, scoring.FIGURES,
                           lambda section: neutral.format_engine_section(self.label, section))

    @cached_property
    def refusals(self) -> tuple[type[Exception], ...]:
        from ..llamacpp.engine import ENGINE

        return ENGINE.refusals  # the llama.cpp runner is what refuses

    @cached_property
    def settings_error(self) -> type[Exception]:
        return OllamaSettingsError

    def resolve_settings(self, user: dict, spec, gpu, version):
        from .releases import rules_at

        return dict(user), rules_at(version)

    def decide(self, spec, gpu, settings: dict, version, *, gguf_checkpoint=None) -> OllamaRun:
        return decide(spec, gpu, settings, version, gguf_checkpoint)

    def plan(self, spec, gpu, settings: dict, version, *, gguf_checkpoint=None):
        from ...breakdown import Setting
        from ..llamacpp.report import to_breakdown
        from .estimate import log_line

        settings = ollama_names(settings)
        run = decide(spec, gpu, settings, version, gguf_checkpoint)
        tag = _library_tag(gguf_checkpoint)
        if tag is not None:
            gguf_checkpoint = None
        stored = stored_defaults(gguf_checkpoint)
        rows = (Setting("num_ctx", run.num_ctx, "num_ctx" in settings or "num_ctx" in stored), Setting("num_parallel", run.num_parallel,
                "num_parallel" in settings), Setting("num_gpu", run.estimate.layers_offload, "num_gpu" in settings),
                Setting("kv_cache_type", run.llamacpp_settings["type_k"], "kv_cache_type" in settings),
                Setting("flash_attention", run.llamacpp_settings["flash_attn"], "flash_attention" in settings)) + (
                (Setting("gguf_type", run.llamacpp_settings["gguf_type"], "gguf_type" in settings),)
                if gguf_checkpoint is None else ())
        est = run.estimate
        notes = ((tag.note,) if tag is not None else ()) + (
                 f"Ollama's estimate: {est.layers_offload}/{est.layers_model} layers on the GPU, "
                 f"{est.required_partial / MIB:,.0f} MiB on the GPU(s) by its count", log_line(est))
        version_text = ".".join(map(str, version))
        return to_breakdown(spec, gpu, run.layout, version_text, self.label, self.name, notes, rows)

    def kv_plan_for_budget(self, spec, gpu, settings: dict, version, kv_budget_bytes: int):
        from ..llamacpp.engine import ENGINE
        from .releases import rule

        return ENGINE.kv_plan_for_budget(spec, gpu, {}, (rule("llamacpp_build", version),), kv_budget_bytes)

    def rank_inventories(self, spec, gpu, settings: dict, version) -> list:
        from ..llamacpp.inventory import inventory
        from ..llamacpp.plan import model_tensors
        from ..llamacpp.settings import resolve

        from . import releases as r

        run = decide(spec, gpu, settings, version)
        tensors, _ = model_tensors(spec, resolve(run.llamacpp_settings, r.rule("llamacpp_build", version)))
        return [(0, inventory(tensors))]

    def checkpoint_report(self, spec, gpu, settings: dict, version, checkpoint):
        from ..llamacpp.report import GgufReport

        if checkpoint.format != "gguf":
            return None
        return GgufReport(checkpoint, decide(spec, gpu, settings, version, checkpoint).layout)

    def first_release_serving(self, architecture: str, version):
        return None

    def speculative_settings(self, speculation) -> dict:
        from ...errors import NotOffered

        raise NotOffered("Ollama has no speculative decoding (no draft model setting)")

    def unsized_reason(self, speculative_config, spec) -> str | None:
        return None

    @cached_property
    def deployment(self):
        """How the engine runs as a server in a container (deploy.py: image, port, health, command)."""
        from .deploy import DEPLOYMENT

        return DEPLOYMENT

    def cuda_context_bytes(self) -> int:
        from ..llamacpp.calibration import CUDA_CONTEXT_BYTES

        return CUDA_CONTEXT_BYTES


@lru_cache(maxsize=64)
def _from_catalog(reference: str, why: str):
    """(the catalog checkpoint's spec, the LibraryTag) of a library name not pulled (library.py), else None."""
    from ...model.config import parse_config
    from ...model.sources import load_model
    from .library import library_tag

    tag = library_tag(reference, why)
    if tag is None:
        return None
    found = load_model(tag.repo_id, source="catalog")
    return parse_config(found.config, name=found.repo_id), tag


def _library_tag(checkpoint):
    """A library name's stand-in (library.LibraryTag: no file, a quantization mix), else None."""
    return checkpoint if getattr(checkpoint, "format", None) == "gguf-mix" else None


@lru_cache(maxsize=16)
def _stored(reference: str, manifest: str):
    """The stored model's spec and GGUF table, read once per process (keyed by the manifest's path)."""
    from dataclasses import replace

    from .store import load

    spec, table, found = load(reference)
    extra = {PARAMS_KEY: dict(found.params)} if found.params else {}
    if found.projector_blob is not None:
        extra[PROJECTOR_KEY] = str(found.projector_blob)
    return spec, (replace(table, metadata={**table.metadata, **extra}) if extra else table)


ENGINE = OllamaEngine()
