"""Request parameters -> what the commands' `--json` prints (explain, whatif, fit, logs), and the server's
rules on what a request may make it read. Pure functions over the library; no web framework here."""
from __future__ import annotations

import functools
import io
import os
import shlex
from dataclasses import dataclass, replace
from pathlib import Path

# a pasted log (and nvidia-smi output) may be this large; a larger request body is answered 413
MAX_BODY_BYTES = 2 * 1024 * 1024
# seconds all Hub calls of one model fetch may take (model/hub.py reads it from the environment)
HUB_DEADLINE_SECONDS = 15.0

# the request keys that are not engine settings
OWN_KEYS = ("model", "gpu", "gpu_memory", "engine", "version", "vllm_engine", "entrypoint", "source", "revision",
            "gguf_file", "line", "tab", "theme", "context", "concurrency", "max_gpu_memory", "gpus", "top")
TRUE_WORDS = ("1", "true", "on", "yes")
# the other request keys the endpoints read (fit targets, simulate, logs, compare, score)
OTHER_KEYS = ("workload", "seed", "trace", "preemption_budget", "cost", "gguf_type", "log", "nvidia_smi", "engines",
              "tp", "cases", "from_logs", "speculative", "draft_model", "draft_tokens")
# names people reach for that mean one of ours (the CLI's spellings, other tools' words)
PARAMETER_ALIASES = {"vllm_version": "version", "sglang_version": "version", "engine_version": "version",
                     "max_model_length": "max_model_len", "gpu_name": "gpu", "model_id": "model",
                     "memory": "gpu_memory", "gpu_mem": "gpu_memory", "context_len": "context"}
# a built-in workload with the arrivals the page fills in when it is picked: each within the caps below
WORKLOAD_PRESETS = {"chat": "rate=2,duration=120", "rag": "rate=1,duration=120", "longdoc": "rate=0.2,duration=120",
                    "agent": "users=8,duration=120"}


class RequestError(ValueError):
    """Bad input in a request (HTTP 400)."""


class TooLarge(RequestError):
    """A workload too large to simulate within one request (HTTP 413)."""


class UnknownParameter(RequestError):
    """A parameter no endpoint reads (HTTP 422): named, with the one meant when it is close to one."""


class Forbidden(RequestError):
    """A request asked for something this server does not do (HTTP 403): reading a local path."""


@dataclass(frozen=True)
class Policy:
    """What requests may make the server read: nothing local unless `local_root` is set, then only under it."""

    local_root: Path | None = None

    def source_for(self, model: str, source: str | None) -> tuple[str, str | None]:
        """(model reference, source) a request may use: a catalog or Hub id, or a path under local_root. A path
        outside it is refused with read_policy's one line, whether it exists or not (and the allowed directory is
        never named)."""
        from ..read_policy import NOT_ALLOWED

        name = model.strip()
        # a name under the root (lexically: a symlink there is refused below, not taken for a Hub id)
        under_root = (self.local_root is not None and name and not _looks_like_path(name)
                      and os.path.lexists(self.local_root / name))
        if source in ("local", "gguf") or under_root or _looks_like_path(name):
            refused = Forbidden(f"{name[:200]}: {NOT_ALLOWED}")
            if self.local_root is None:
                raise refused
            path = (self.local_root / name.lstrip("/")) if not Path(name).is_absolute() else Path(name)
            if not _inside(self.local_root, path) or not os.path.exists(path):
                raise refused  # outside, through a symlink, or missing: the same line (and never the root's name)
            return str(path.resolve()), source or "local"
        return model, source if source in ("catalog", "hub") else None

    def allows(self, path: Path) -> bool:
        return self.local_root is not None and _inside(self.local_root, path)


def _looks_like_path(reference: str) -> bool:
    """A reference that names a file rather than a catalog or Hub id (never probed: whether a path exists is
    not something a request may learn)."""
    text = reference.strip()
    return (text.startswith(("/", ".", "~", "\\")) or "\\" in text or ".." in text.split("/")
            or text.lower().endswith(".gguf") or text.count("/") > 1)


def _inside(root: Path, path: Path) -> bool:
    root = root.resolve()
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError, ValueError):
        return False
    return resolved == root or root in resolved.parents


def install_read_guard(policy: Policy) -> None:
    """The process's read policy (read_policy.py) for this server: only under --allow-local-models, the package's
    own files and the Hub cache. Every local model read also goes through sources._read_local / _read_gguf
    (load_model's two local readers): wrapped so that a model name found in a pasted log cannot make the server
    read a path either."""
    from .. import read_policy
    from ..model import sources

    read_policy.install(read_policy.server_policy(policy.local_root, (_hub_cache_dir(),)))
    for name in ("_read_local", "_read_gguf"):
        original = getattr(sources, name)
        original = getattr(original, "__wrapped_reader__", original)

        def guarded(path, *rest, _original=original):
            if not policy.allows(Path(path)):
                raise read_policy.NotAllowed(f"{str(path)[:200]}: {read_policy.NOT_ALLOWED}")
            return _original(path, *rest)

        guarded.__wrapped_reader__ = original
        setattr(sources, name, guarded)


def _hub_cache_dir() -> str:
    """Where Hub files are cached (model/hub.py reads the same variables); '' without the [hub] extra."""
    try:
        from ..model.hub_calls import HubSettings

        return HubSettings.from_environment().cache_dir
    except Exception:  # noqa: BLE001 - no huggingface_hub: no Hub cache to read from
        return ""


def model_kind(params: dict, policy: Policy | None = None) -> str:
    """Where the request's model comes from: 'hub' (fetched: the web server's Hub workers), 'local' (a path or a
    name under --allow-local-models: read and parsed, so a worker process answers it too) or 'catalog' (the
    built-in catalog, or no model: cheap, answered by the serving process). Never raises: bad input is the
    request's own error, found when it runs."""
    from ..model.sources import _catalog_files

    model = str(params.get("model") or "").strip()
    if not model and params.get("line"):
        try:
            words = shlex.split(str(params["line"]))
        except ValueError:
            return "catalog"
        model = next((word for word in words if "/" in word and not word.startswith("-")), "")
    source = params.get("source")
    if not model or source == "catalog":
        return "catalog"
    if source in ("local", "gguf") or _looks_like_path(model):
        return "local"
    root = (policy or Policy()).local_root
    try:
        if root is not None and os.path.lexists(root / model):
            return "local"
    except (OSError, ValueError):
        return "local"
    if source == "hub" or (model.lower() not in _catalog_files() and "/" in model):
        return "hub"
    return "catalog"


def uses_hub(params: dict) -> bool:
    """Whether the request names a model that is fetched from the Hub (neither the catalog nor a local path)."""
    return model_kind(params) == "hub"


def hub_deadline() -> float:
    """Seconds a Hub fetch may take (serve --hub-deadline, through the environment model/hub.py reads)."""
    try:
        return float(os.environ.get("VRAM_DETECTIVE_HUB_DEADLINE") or HUB_DEADLINE_SECONDS)
    except ValueError:
        return HUB_DEADLINE_SECONDS


# --- parameters -> library calls -------------------------------------------------------------------------------

def settings_from(params: dict, engine_name: str) -> tuple[str | None, dict]:
    """(model from a pasted launch line or None, the engine settings): the line first, then each setting
    given by name (the named ones win, as the CLI's own flags win over a pasted line)."""
    from ..engines import get_engine

    engine = get_engine(engine_name)
    model, settings = None, {}
    line = (params.get("line") or "").strip()
    if line:
        words = shlex.split(line)
        if words and words[0].startswith("-"):  # flags alone: read after the engine's program
            words = list(engine.launch.program) + words
        try:
            parsed = engine.launch.parse(words)
        except engine.launch.error as error:
            raise RequestError(f"launch line: {error}") from None
        from ..launch_flags import ignored_notes

        ignored_notes(engine_name, getattr(parsed, "ignored", ()))  # a misspelt flag: 400, as the command's exit 2
        model, settings = parsed.model, dict(parsed.settings)
    for flag in engine.launch.flags:
        raw = params.get(flag.setting)
        if raw is None or raw == "" or flag.setting == "model":
            continue
        settings[flag.setting] = _flag_value(engine, flag, str(raw))
    if params.get("entrypoint") and engine.launch.entrypoints:
        settings["entrypoint"] = params["entrypoint"]
    if params.get("gguf_type"):  # llama.cpp / Ollama without a GGUF file: the quantizer's mix (--gguf-type)
        if not engine.gguf_mixes:
            raise RequestError(f"gguf_type sizes a llama.cpp quantization mix: {engine.label} loads no GGUF")
        settings["gguf_type"] = str(params["gguf_type"]).upper()
    return model, settings


def speculation(params: dict):
    """compare's speculative decoding (speculative=METHOD, draft_model, draft_tokens), as `compare --speculative`."""
    from ..engines.base import speculation_from

    return speculation_from(params.get("speculative"), params.get("draft_model"), params.get("draft_tokens") or 3)


def known_parameters() -> frozenset[str]:
    """Every parameter some endpoint reads: the request's own keys and every engine's settings."""
    from ..engines import ENGINES, get_engine

    settings = {flag.setting for name in ENGINES for flag in get_engine(name).launch.flags}
    return frozenset(OWN_KEYS) | frozenset(OTHER_KEYS) | settings


def check_parameters(params: dict) -> None:
    """An unknown parameter is an error naming it (and the one meant, when close): never silently dropped."""
    import difflib

    known = known_parameters()
    unknown = sorted(name for name in params if name not in known)
    if not unknown:
        return
    hints = []
    for name in unknown[:5]:
        near = PARAMETER_ALIASES.get(name.lower()) or next(iter(difflib.get_close_matches(name, known, 1, 0.75)), None)
        hints.append(f"{name[:60]!r} (did you mean {near}?)" if near else repr(name[:60]))
    raise UnknownParameter(f"unknown parameter{'s' if len(unknown) > 1 else ''}: {', '.join(hints)}; see /api")


def control_value(engine_name: str, setting: str, raw):
    """A setting's value as the engine reads it (`32k` -> 32768), for a control to show; the text when unread."""
    from ..engines import get_engine

    flag = next((flag for flag in get_engine(engine_name).launch.flags if flag.setting == setting), None)
    if flag is None or raw in (None, ""):
        return raw
    try:
        value = _flag_value(get_engine(engine_name), flag, str(raw))
    except RequestError:
        return raw
    return raw if isinstance(value, (tuple, list)) else value  # a list (-ts 1,1) as its flag writes it, not its repr


def _flag_value(engine, flag, raw: str):
    name = getattr(flag.parse, "__name__", "")
    if name in ("_bool", "_switch"):
        if raw.lower() in TRUE_WORDS:
            return True
        return False
    if flag.parse is None:  # a switch that sets its own value
        return flag.value if raw.lower() in TRUE_WORDS else None
    try:
        return engine.launch.parse_value(flag, raw)
    except (ValueError, TypeError) as error:
        if flag.parse is int:  # a token count written as the page and vLLM write it (32k): every engine reads it
            from ..units import parse_token_count

            try:
                return parse_token_count(raw)
            except ValueError:
                pass
        raise RequestError(f"{flag.setting}: {error}") from None


@dataclass(frozen=True)
class Request:
    """One explain / whatif / fit request, checked."""

    model: str
    source: str | None
    gpu: str | None
    gpu_memory: int | None
    engine: str
    version: str | None
    settings: dict

    @property
    def sources(self) -> dict:
        return {"source": self.source, "revision": None, "hf_token": None, "gguf_file": None}

    def device(self):
        from .. import api

        return api.resolve_gpu(self.gpu, self.gpu_memory)


def _engine_of(params: dict) -> str:
    """The engine these parameters mean (engine_choice.py, as the command line reads it): a pasted line's
    program wins over the page's engine picker (its value is always set); else engine=, else the model."""
    from ..engine_choice import canonical, choose, line_engine
    from ..engines import ENGINES

    named = canonical(params.get("engine") or None)
    if named is not None and named not in ENGINES:
        raise RequestError(f"unknown engine {params.get('engine')!r} (known: {', '.join(ENGINES)})")
    line = (params.get("line") or "").strip()
    try:
        words = shlex.split(line) if line else []
    except ValueError as error:
        raise RequestError(f"launch line: {error}") from None
    from_line = line_engine(words)
    engine, _ = choose(from_line or named, params.get("model") or None, (), words or None)
    _check_settings(engine, params)
    return engine


def _check_settings(engine_name: str, params: dict) -> None:
    """A parameter naming another engine's setting is an error naming that engine (the CLI's rule for flags)."""
    from ..engines import ENGINES, get_engine

    engine = get_engine(engine_name)
    own = {flag.setting for flag in engine.launch.flags} | set(engine.launch.foreign)
    for name in ENGINES:
        for flag in get_engine(name).launch.flags:
            value = params.get(flag.setting)
            if flag.setting not in own and flag.setting != "model" and value not in (None, ""):
                raise RequestError(f"{flag.setting} is {get_engine(name).label}'s setting, not {engine.label}'s: "
                                   f"engine={name} (or leave it out)")


def read_request(params: dict, policy: Policy) -> Request:
    from ..engines import ENGINES
    from ..hardware import parse_memory_size

    engine = _engine_of(params)
    line_model, settings = settings_from(params, engine)
    model = (params.get("model") or line_model or "").strip()
    if not model:
        raise RequestError("no model given")
    model, source = policy.source_for(model, params.get("source") or None)
    gpu_memory = parse_memory_size(params["gpu_memory"]) if params.get("gpu_memory") else None
    gpu = params.get("gpu") or None
    if gpu is None and gpu_memory is None:
        raise RequestError("no GPU given (gpu=NAME or gpu_memory=SIZE)")
    if params.get("vllm_engine") and "vllm_engine".startswith(engine + "_"):  # the engine its name names
        settings["engine"] = params["vllm_engine"]
    return Request(model, source, gpu, gpu_memory, engine, params.get("version") or None, settings)


def explain(request: Request):
    """The Breakdown api.explain gives for this request."""
    from .. import api

    options = {key: value for key, value in request.settings.items() if key != "engine"}
    return api.explain(request.model, request.gpu, gpu_memory=request.gpu_memory, engine=request.engine,
                       engine_version=request.version, vllm_engine=request.settings.get("engine"),
                       source=request.source, **options)


def explain_json(request: Request, breakdown=None) -> dict:
    """What `explain --json` prints for the same model, GPU, engine, release and settings."""
    from .. import api
    from ..engines import get_engine
    from ..render import to_json

    breakdown = breakdown if breakdown is not None else explain(request)
    out = to_json(breakdown)
    # through the engine's own names first (an Ollama tag), as api.explain and the CLI resolve the model
    spec, checkpoint = api.model_and_checkpoint(request.model, request.engine, request.source)
    if checkpoint is not None and hasattr(checkpoint, "tensors"):  # real tensors (a local, Hub or stored model)
        engine = get_engine(request.engine)
        report = engine.checkpoint_report(spec, request.device(), dict(request.settings),
                                          engine.releases.resolve(request.version), checkpoint)
        if report is not None:  # llama.cpp and Ollama compare GGUF tensors only (None for safetensors)
            out["checkpoint_vs_gpu"] = report.to_dict()
    return out


def whatif_json(request: Request) -> object:
    """What `whatif --json` prints (advisor/answers.py: the command line's dispatch)."""
    from ..advisor import answers
    from ..engines import get_engine

    return answers.whatif(request.model, request.device(), get_engine(request.engine), request.version,
                          dict(request.settings), request.sources).to_dict()


def fit_json(request: Request, params: dict) -> dict:
    """What `fit --json` prints for the targets in `params` (context, concurrency, max_gpu_memory, gpus, top)."""
    from ..advisor import answers
    from ..advisor.command import fit_target
    from ..engines import get_engine

    gpus, top = _int(params.get("gpus") or 1, "gpus"), _int(params.get("top") or 5, "top")
    if not 1 <= gpus <= 64 or not 1 <= top <= 50:
        raise RequestError("gpus must be 1..64 and top 1..50")
    from argparse import Namespace

    from ..input_checks import check_arguments

    # the command line's own checks of the targets (a finite, positive concurrency the KV cache could hold)
    concurrency = float(params["concurrency"]) if params.get("concurrency") else None
    check_arguments(Namespace(concurrency=concurrency, context=params.get("context") or None))
    target = fit_target(params.get("context"), params.get("concurrency"), params.get("max_gpu_memory"), gpus, top)
    return answers.fit(request.model, request.device(), get_engine(request.engine), request.version,
                       dict(request.settings), request.sources, target).to_dict()


def logs_json(log: str, nvidia_smi: str | None = None, model: str | None = None, gpu: str | None = None,
              version: str | None = None, policy: Policy | None = None, engine: str | None = None,
              tp: int | None = None) -> dict:
    """What `logs - --json` prints for this log text (read from memory: a pasted log never touches disk); with no
    log, nvidia-smi output and the model that ran: what `logs --nvidia-smi F --model M --json` prints (the value
    of `engine`'s pool lever that explains the reading)."""
    from ..forensics import command

    if model:
        (policy or Policy()).source_for(model, None)
    if not log.strip():
        if not (nvidia_smi or "").strip():
            raise RequestError("no log given")
        from ..forensics.nvidia_smi import parse_nvidia_smi

        return command.reading_only(None, model or None, gpu or None, version or None, tp, engine or None,
                                    smi=parse_nvidia_smi(nvidia_smi))
    if engine:
        raise RequestError("engine is for nvidia-smi output read without a log: a log names its engine")
    if not nvidia_smi:
        return command.build_report("-", model=model or None, gpu=gpu or None, vllm_version=version or None,
                                    stdin=io.BytesIO(log.encode("utf-8")))
    return _logs_with_smi(log, nvidia_smi, model or None, gpu or None, version or None)


def _logs_with_smi(log: str, smi_text: str, model, gpu, version) -> dict:
    """build_report with nvidia-smi output held in memory (build_report reads it from a path or standard input
    only)."""
    from ..forensics import command
    from ..forensics.nvidia_smi import parse_nvidia_smi

    _check_log_options(model, gpu, version)
    return command.build_report("-", model=model, gpu=gpu, vllm_version=version, stdin=io.BytesIO(log.encode("utf-8")),
                                smi=parse_nvidia_smi(smi_text))


def _check_log_options(model, gpu, version) -> None:
    """build_report's checks of the options (bad input before any work; the release once the log's engine is
    known)."""
    from .. import api
    from ..hardware import find_gpu

    if gpu:
        find_gpu(gpu)
    if model:
        api.model_spec(model)


# --- simulate: the workload against the predicted pool ------------------------------------------------------
# One request runs the workload about 10-20 times (the smallest-pool search re-simulates), so the workload is
# capped to keep a request within seconds: at most MAX_SIM_DURATION_S of arrivals; an open-loop shape or a
# pasted trace at most MAX_SIM_REQUESTS requests and MAX_SIM_TOKENS prompt + output tokens (counted by drawing
# the requests, which is cheap); a closed loop at most MAX_SIM_USERS users and MAX_SIM_USER_SECONDS users x
# duration. Beyond a cap: 413 with the cap in the message (the CLI `simulate` has no cap).
MAX_SIM_DURATION_S = 3600.0
MAX_SIM_REQUESTS = 5000
MAX_SIM_TOKENS = 4_000_000
MAX_SIM_USERS = 64
MAX_SIM_USER_SECONDS = 2000.0


def read_workload(params: dict):
    """(spec as shown, Workload, seed) from `workload` (a built-in shape spec) or `trace` (pasted JSONL)."""
    from ..simulate.workloads import Workload, parse_trace, parse_workload

    seed = _int(params.get("seed") or 0, "seed")
    trace = str(params.get("trace") or "")
    if trace.strip():
        requests = parse_trace(trace.splitlines(), "trace")
        if not requests:
            raise RequestError("the pasted trace has no requests")
        spec = f"trace:(pasted, {len(requests)} requests)"
        return spec, Workload("trace", trace=requests, description=spec), seed
    spec = str(params.get("workload") or "").strip()
    if not spec:
        raise RequestError("no workload given (workload=chat:rate=2,duration=120, or a pasted trace)")
    if spec == "trace":
        raise RequestError("no trace given: paste its JSONL lines")
    if spec.startswith("trace:"):
        raise Forbidden("this server reads no trace files: paste the trace's lines instead (trace=...)")
    return spec, parse_workload(spec), seed


def token_count(raw) -> int | None:
    """`32k` / `32768` / empty -> tokens (None when not given)."""
    from ..units import parse_token_count

    return parse_token_count(str(raw)) if raw not in (None, "") else None


def _int(raw, name: str) -> int:
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise RequestError(f"{name} must be an integer, got {raw!r}") from None


def check_workload_size(workload, seed: int) -> None:
    """The caps above (TooLarge names the one exceeded)."""
    if workload.trace:
        requests = iter(workload.trace)
    else:
        if workload.duration > MAX_SIM_DURATION_S:
            raise TooLarge(f"duration {workload.duration:g} s is over the web page's cap of "
                           f"{MAX_SIM_DURATION_S:g} s (the simulate command has none)")
        if workload.closed:
            if workload.users > MAX_SIM_USERS or workload.users * workload.duration > MAX_SIM_USER_SECONDS:
                raise TooLarge(f"{workload.users} users x {workload.duration:g} s is over the web page's cap of "
                               f"{MAX_SIM_USERS} users and {MAX_SIM_USER_SECONDS:g} user-seconds "
                               f"(the simulate command has none)")
            return
        requests = workload.open_requests(seed)
    tokens = 0
    for count, request in enumerate(requests, 1):
        tokens += request.prompt_tokens + request.output_tokens
        if count > MAX_SIM_REQUESTS or tokens > MAX_SIM_TOKENS:
            raise TooLarge(f"the workload is over the web page's cap of {MAX_SIM_REQUESTS:,} requests and "
                           f"{MAX_SIM_TOKENS:,} tokens (the simulate command has none)")


@dataclass(frozen=True)
class Simulation:
    """One simulate request's outcome: the prediction, the run, the fit and what `simulate --json` prints."""

    breakdown: object
    result: object
    fit: object
    report: dict


def simulate(request: Request, params: dict) -> Simulation:
    """What `simulate MODEL --gpu X [settings] --workload SPEC --seed N --json` computes."""
    from ..simulate.command import parse_cost, report_dict, simulate_and_fit
    from ..simulate.fit import default_cost

    spec, workload, seed = read_workload(params)
    check_workload_size(workload, seed)
    budget = float(params.get("preemption_budget") or 0.01)
    if not 0 <= budget < 1:
        raise RequestError(f"preemption_budget is a fraction in [0, 1), got {budget}")
    breakdown = explain(request)
    if breakdown.failure is not None:
        from ..errors import EngineRefused

        refusal = EngineRefused(breakdown.failure.message.splitlines()[0])
        refusal.engine_label = breakdown.engine_label
        raise refusal
    cost = parse_cost(params["cost"]) if params.get("cost") else default_cost(breakdown)
    pinned = {key: value for key, value in request.settings.items() if key != "engine"}

    def predict(extra: dict):
        return explain(replace(request, settings={**request.settings, **extra}))

    result, fit = simulate_and_fit(predict, breakdown, workload, pinned=pinned, seed=seed, budget=budget, cost=cost)
    return Simulation(breakdown, result, fit, report_dict(breakdown, spec, seed, cost, result, fit))


def simulate_launch_line(request: Request, fit) -> str:
    """The launch line with the smallest pool's setting (empty when no setting serves the workload)."""
    if not fit.feasible:
        return ""
    return launch_line(replace(request, settings={**request.settings, fit.lever.setting: fit.value}))


# --- catalogs for autocomplete ---------------------------------------------------------------------------------

def warm_up() -> None:
    """One answer before the first request (the first catalog model on a catalog H100, the default engine): its
    modules imported and its caches filled, so requests arriving together at a fresh server do not all queue
    behind the first one's imports (measured: p99 of 50 loopback clients 248 ms cold, 1 % of the requests)."""
    from ..errors import EngineRefused

    try:
        explain_json(read_request({"model": catalog_models()[0], "gpu": "H100"}, Policy()))
    except EngineRefused:
        pass  # a refusal has warmed the same modules


def catalog_models() -> list[str]:
    return list(_catalog_models())


@functools.lru_cache(maxsize=1)
def _catalog_models() -> tuple[str, ...]:
    """The packaged catalog's ids, read once (173 files: 15 ms a read, which the page and /api/models paid on every
    request in the serving process)."""
    from ..model.sources import catalog_entries

    return tuple(sorted(source.repo_id for source in catalog_entries()))


def catalog_gpus() -> list[dict]:
    from ..hardware import all_gpus

    return [{"name": gpu.name, "short_name": gpu.short_name, "cuda_total_gib": round(gpu.cuda_total_gib, 2)}
            for gpu in all_gpus()]


def releases() -> dict:
    from ..engines import ENGINES, get_engine

    return {name: {"label": get_engine(name).label, "known": list(get_engine(name).releases.known),
                   "newest": get_engine(name).releases.newest} for name in ENGINES}


# --- the launch line of the current state ---------------------------------------------------------------------

def launch_line(request: Request, breakdown=None) -> str:
    """The line that starts the engine with the request's settings (those given; the rest are the
    release's own defaults), for the page's copy button."""
    from ..engines import get_engine

    settings = {key: value for key, value in request.settings.items() if value is not None}
    return get_engine(request.engine).launch_line(request.model, settings)


def score_json(params: dict, policy: Policy | None = None) -> dict:
    """What `score FILE --catalog-only --json` prints for the ground-truth cases in the request (JSONL text:
    the body, or `cases` of a JSON body, as text or a list of case objects). A server reads no file it was not
    given and fetches nothing for a case: models come from the catalog, and a case's `gguf_file` is read only
    under --allow-local-models DIR (else the case is planned from its `quant`, as when the file is not at hand)."""
    import json

    from ..library import envelope
    from ..scoring import read_case_text, score_cases

    raw = params.get("cases", params.get("log"))
    if isinstance(raw, list):
        raw = "\n".join(json.dumps(case) for case in raw)
    if not isinstance(raw, str) or not raw.strip():
        raise RequestError("no cases given (JSONL: one ground-truth case a line, groundtruth/SCHEMA.md)")
    cases, unreadable = read_case_text(raw)
    cases = [_without_unallowed_file(case, policy or Policy()) for case in cases]
    from_logs = str(params.get("from_logs") or "").lower() in TRUE_WORDS
    return envelope("score", None, score_cases(cases, from_logs=from_logs, catalog_only=True, unreadable=unreadable))


def _without_unallowed_file(case: dict, policy: Policy) -> dict:
    settings = case.get("settings")
    if not isinstance(settings, dict) or not settings.get("gguf_file"):
        return case
    if policy.allows(Path(str(settings["gguf_file"])).expanduser()):
        return case
    return dict(case, settings={key: value for key, value in settings.items() if key != "gguf_file"})
