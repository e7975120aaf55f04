"""The one interface every inference engine implements (vLLM today; SGLang and llama.cpp next).

The API, CLI, advisor, forensics and scorer reach an engine only through `engines.get_engine(name)`,
which returns an `Engine`. Its parts are frozen dataclasses of plain functions, filled by the engine
from its own modules (imported when first used, so the command line stays fast)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol, runtime_checkable

if TYPE_CHECKING:  # the CLI imports this module for --help: no result types needed there
    from ..breakdown import Breakdown

Version = tuple[int, ...]


@dataclass(frozen=True)
class Releases:
    """The releases an engine's rule table knows."""

    known: tuple[str, ...]  # the releases users pick most, oldest first
    oldest: str
    newest: str
    resolve: Callable[[str | None], Version]  # "0.6.3" / "latest" / None -> version; ValueError when unmodelled
    rules: Callable[..., Any]  # (version, path=None) -> that release's rule set
    rule_at: Callable[..., Any]  # (version, rule name, path=None, default=) -> the rule's value at that release
    first_release: Callable[..., Any]  # (test) -> the oldest release whose rules pass test(rules), or None
    is_modelled: Callable[[Version], bool]  # does the rule table reach back to this release?
    # (release, variant="") -> the era key `score`'s tables and the intervals group a release by (read from the
    # release table alone: `explain` looks it up for its intervals without loading the case scorer)
    era: Callable[..., str]
    # a release as people write it ("0.9.1"; llama.cpp's builds "b5622"); None: the dotted version
    name: Callable[[Version], str] | None = None

    def named(self, version: Version) -> str:
        from ..units import format_version

        return self.name(version) if self.name is not None else format_version(version)


def claims_no_model(reference: str) -> bool:
    return False


@dataclass(frozen=True)
class LaunchLine:
    """The engine's own flags and its pasted launch lines."""

    flags: tuple  # each with .names, .setting, .parse, .help
    parse_value: Callable[[Any, str], object]  # (flag, raw text) -> value; ValueError when bad
    parse: Callable[[list[str]], Any]  # words -> object with .model and .settings
    error: type[Exception]  # what `parse` raises on a line it cannot read
    # other engines' setting names this engine reads as its own (SGLang: vLLM's max_model_len is context_length);
    # a flag of another engine outside these is an error naming that engine (engine_choice.py), never ignored
    foreign: frozenset = frozenset()
    # does a model reference mean this engine (llama.cpp: a .gguf file; Ollama: a "name:tag")?
    claims_model: Callable[[str], bool] = claims_no_model
    # the words a pasted line of flags alone is read after ("_" stands for the model, given elsewhere); empty:
    # the engine takes no flags without its program (Ollama), the words are read as they are
    program: tuple[str, ...] = ()
    # the ways of starting the engine that change its defaults, read as the `entrypoint` setting (vLLM: `vllm
    # serve` and the `LLM` class); empty: one way, no such setting
    entrypoints: tuple[str, ...] = ()
    # what the engine's container image runs before the arguments of a `docker run` line that start with a flag
    # (vLLM's vllm/vllm-openai image: `vllm serve`); empty: the image's arguments are the whole command line
    image_entrypoint: tuple[str, ...] = ()


@dataclass(frozen=True)
class LogFormats:
    """The lines a release prints and the logs it leaves."""

    lines: Callable[..., tuple[str, ...]]  # (release, figures) -> what that release prints at startup
    parse: Callable[[str], dict]  # log text -> observed figures (shared/groundtruth/SCHEMA.md keys)
    is_mine: Callable[[str], bool]  # does this log come from this engine?
    # the streaming reader `logs` analyses runs with (LogParser, parse_stream, parse_text, OBSERVED_KEYS, the eras);
    # None: the engine's logs are read by `parse` only
    reader: Callable[[], Any] | None = None
    # with a reader: (log name, forensics.streaming.BoundedParse, the log's head, model, gpu, release, nvidia-smi
    # reading) -> the `logs` report of the runs analysed in full; None: read whole, figures compared one by one
    # (forensics/engine_logs.py)
    analyse: Callable[..., dict] | None = None
    # another output `logs` reads with this engine's log (Ollama: "`ollama ps`", parsed by `parse`); "" for none
    companion: str = ""


@dataclass(frozen=True)
class Levers:
    """What the advisor (whatif, fit) varies and how it writes the result back as a launch line."""

    swept: tuple[str, ...]  # the knobs the vectorized fast path evaluates in bulk
    fast_path: type  # FastPath(model, gpu, vllm_version=, settings=, ...) with grid()/points()
    fast_path_unsupported: type[Exception]
    numpy_or_none: Callable[[], Any]
    flag_names: Callable[[], dict[str, str]]  # setting -> its flag on the launch line
    path_switch: Callable[..., str | None]  # (spec, gpu, version, settings) -> env switch for a non-default path
    # which search answers whatif / fit (advisor/answers.py): "sweep" (the vectorized sweep over levers and
    # checkpoints), "loop" (a loop over plan() with the engine's levers), "gguf" (llama.cpp's layer/context solvers)
    advisor: str = "loop"
    solves_layers: bool = True  # False: the engine picks its GPU layers itself (Ollama), `fit` has nothing to set
    # () -> the engine's advisor (engines/<engine>/advisor.py): whatif(model, gpu, engine, version, settings,
    # sources, checkpoints=) and fit(model, gpu, engine, version, settings, sources, target, progress=), each an
    # advisor.answers.AdvisorAnswer; None: the engine offers no whatif / fit (answered as NotOffered everywhere)
    answers: Callable[[], Any] | None = None


@dataclass(frozen=True)
class CaseScoring:
    """How `score` measures the engine against a ground-truth case (groundtruth/SCHEMA.md): the case planned
    from its own fields the way `explain` plans those flags, then each figure its log printed beside the plan's.
    scoring.py does the engine-neutral rest (the model, skips, tables, intervals, rendering); the era a case
    is grouped by is the engine's (Releases.era)."""

    score_case: Callable[..., tuple]  # (case, catalog_only) -> (entry, "") or (None, why the case is skipped)
    figures: tuple[str, ...]  # the figure rows of the engine's accuracy tables, in order
    format_section: Callable[[dict], str]  # the engine's section of a `score` report, as text
    # a case's raw log -> its observed figures (score --from-logs); None: the engine's cases are scored on the
    # figures their `observed` holds (the reader gives fewer keys than a case records)
    observed_from_log: Callable[[str], dict] | None = None
    consistency_figures: tuple[str, ...] = ()  # figures that check arithmetic, not predictions (tabled apart)
    detail_tables: bool = False  # weights by stored format and by architecture tag beside the headline


@dataclass(frozen=True)
class ShortfallWords:
    """How `simulate` words a request the pool was too small for, in the engine's own terms (vLLM and SGLang
    preempt; llama.cpp has no preemption: a full slot shifts its context or cuts the prompt)."""

    event: str = "preemption"  # "serves it with no {event} at the 99th percentile"
    label: str = "preemptions"  # the report's row and the plot's count
    happened: str = "are preempted"  # "12 of 200 requests (6.0%) {happened}"
    some: str = "preempted"  # "at most 1.5% of the requests {some} or held back for memory"
    full: str = "fills the {pool} pool and"  # "your traffic {full} 12 of 200 requests ..."
    verb: str = "preempt"  # "even 4000 blocks {verb} or hold back more than 1% of the requests"
    verbs: str = "preempts"  # "the confirming run still {verbs}"


@dataclass(frozen=True)
class PoolSimulation:
    """`simulate` and `fit --workload`: the engine's KV pool and scheduler as simulate/'s event loop runs them.
    An engine without one has `simulation = None`, which every front end answers with errors.NotOffered."""

    pool: Callable[..., Any]  # (Breakdown) -> simulate.pool.PoolSpec: the pool the prediction pre-allocates
    simulator: Callable[[], type]  # () -> the scheduler's simulator class (imported when first used)
    # (PoolSpec) -> (engine whose rule table has the scheduler_ rows, engine path or "", release text)
    rule_table: Callable[[Any], tuple[str, str, str]]
    lever: Callable[..., Any]  # (Breakdown, pinned settings, blocks needed) -> simulate.fit.Lever sizing the pool
    flags_for_bytes: Callable[..., dict]  # (Breakdown, pool bytes) -> the launch settings giving that pool
    grain: int = 0  # a token pool tracked in pages of this many tokens (SGLang: 16); 0: as the pool is
    bounds_requests: bool = True  # requests are cut at max_model_len (llama.cpp: a full slot shifts instead)
    # (release text, max_num_batched_tokens, async scheduling or None for the release default) -> the tokens in
    # flight a sliding window's admission cap reserves for (vLLM 0.26+: every overlapped batch's); None: no such cap
    in_flight: Callable[..., int] | None = None
    words: ShortfallWords = ShortfallWords()


@dataclass(frozen=True)
class ReadingLever:
    """`logs --nvidia-smi F --model M` (an nvidia-smi reading, no log): the one setting that sizes the engine's
    memory on the card, solved by forensics/reading.py for the value whose predicted nvidia-smi figure equals the
    MiB the engine's process holds (vLLM's gpu_memory_utilization, SGLang's mem_fraction_static, llama.cpp's
    context). The engine names the lever and says what the answer means in its own words. An engine without one
    has `reading = None`, which every front end answers with errors.NotOffered."""

    setting: str  # the engine's own setting name, also the report's key: "gpu_memory_utilization", "n_ctx"
    shown: str  # the lever as the answer writes it: "gpu_memory_utilization", "--mem-fraction-static", "-c"
    noun: str  # "utilization", "fraction", "context"
    low: float  # the range searched (the web page's control range)
    high: float
    grain: float  # the answer's step: 0.01 (a fraction to 2 decimals) or a whole number of tokens (256)
    rounding: str  # the step in words: "2 decimals", "256 tokens"
    rest: str  # the prediction beside weights, KV pool and graphs: "context, non-torch, workspace"
    shorter_context: str  # the flag of a run with a shorter context than the model's: "--max-model-len"
    # (Breakdown) -> the report's fields naming the release (vLLM: {"vllm_version": ..., "engine_path": ...})
    release: Callable[[Any], dict]
    release_words: Callable[[dict], str]  # (report) -> "vLLM 0.11.0 (V1 engine)"

    def candidates(self, low: float, high: float) -> list[float | int]:
        """The values at the grain around the bracket [low, high] the bisection ended with."""
        if self.grain < 1:
            return sorted({round(low, 2), round(high, 2)})
        below = int(low // self.grain * self.grain)
        return sorted({max(int(self.low), below), min(int(self.high), below + int(self.grain))})

    def words(self, value: float | int) -> str:
        return f"{value:.2f}" if self.grain < 1 else f"{value:,}"


def pool_reading(engine) -> ReadingLever:
    """The engine's reading lever; errors.NotOffered (the same words on every surface) when it has none."""
    if engine.reading is None:
        from ..errors import NotOffered

        raise NotOffered(f"logs --nvidia-smi without a log: {engine.label} has no setting that sizes its memory "
                         "from the card (no reading to solve)")
    return engine.reading


SPECULATION_METHODS = ("eagle", "eagle3", "mtp", "ngram", "draft_model")


@dataclass(frozen=True)
class Speculation:
    """Speculative decoding said once for every engine (compare's --speculative): each engine turns it into its
    own flags (`Engine.speculative_settings`), or says it has no such thing."""
    method: str  # one of SPECULATION_METHODS
    draft_model: str | None = None  # a draft checkpoint (draft_model, EAGLE heads); None: none, or the target's MTP
    tokens: int = 3  # tokens the drafter proposes per step

    def __post_init__(self):
        from ..errors import BadInput

        if self.method not in SPECULATION_METHODS:
            raise BadInput(f"speculative method {self.method!r}: one of {', '.join(SPECULATION_METHODS)}")
        if self.method == "draft_model" and not self.draft_model:
            raise BadInput("speculative method draft_model needs a draft model (--draft-model)")
        if not 1 <= self.tokens <= 64:
            raise BadInput(f"draft tokens {self.tokens}: between 1 and 64")


def speculation_from(method: str | None, draft_model: str | None = None, tokens=3) -> Speculation | None:
    """compare's --speculative METHOD --draft-model M --draft-tokens N (or the API's same keys, as text) as one
    Speculation; None without a method, where a draft model alone is an error."""
    from ..errors import BadInput

    if not method:
        if draft_model:
            raise BadInput("a draft model needs a speculative method (eagle, eagle3, draft_model, ...)")
        return None
    if not str(tokens).strip().isdigit():
        raise BadInput(f"draft tokens take a whole number: {str(tokens)[:40]!r}")
    return Speculation(str(method), draft_model or None, int(str(tokens).strip()))


@runtime_checkable
class Engine(Protocol):
    name: str  # "vllm"
    label: str  # how people write it: "vLLM"
    releases: Releases
    launch: LaunchLine
    logs: LogFormats
    levers: Levers
    scoring: CaseScoring
    refusals: tuple[type[Exception], ...]  # errors meaning "the engine itself would not start"
    simulation: PoolSimulation | None  # simulate's pool and scheduler; None: not offered by this engine
    reading: ReadingLever | None  # an nvidia-smi reading without a log, solved; None: not offered
    settings_error: type[Exception]  # a setting the engine rejects (bad input)

    def resolve_settings(self, user: dict, spec, gpu, version: Version) -> tuple[Any, Any]:
        """(resolved settings, release rules) as that release would pick them."""

    def plan(self, spec, gpu, settings: dict, version: Version, *, gguf_checkpoint=None) -> Breakdown:
        """The whole startup prediction."""

    def kv_plan_for_budget(self, spec, gpu, settings: dict, version: Version, kv_budget_bytes: int) -> Any:
        """The KV pool a given KV budget yields (blocks, tokens, concurrency), for inverse checks."""

    def rank_inventories(self, spec, gpu, settings: dict, version: Version) -> list:
        """(pipeline stage, tensor inventory of one rank) as the plan builds them."""

    def checkpoint_report(self, spec, gpu, settings: dict, version: Version, checkpoint) -> Any:
        """The checkpoint's real tensors reconciled with what the engine holds."""

    def first_release_serving(self, architecture: str, version: Version) -> Version | None:
        """When `version` predates `architecture`: the oldest release that serves it; None when it does."""

    def unsized_reason(self, speculative_config, spec) -> str | None:
        """Why a speculative setup cannot be sized (None when it can)."""

    def speculative_settings(self, speculation: Speculation) -> dict:
        """The engine's own settings for this speculative setup; errors.NotOffered when it has none (or sizes
        none yet), in words that say which."""

    def cuda_context_bytes(self) -> int:
        """The CUDA context each process holds outside the engine's budget."""

    def is_launch_line(self, words: list[str]) -> bool:
        """Do these words start one of the engine's programs (after any VAR=value words)?"""

    def launch_line(self, model: str, settings: dict) -> str:
        """The line that starts the engine on `model` with these settings (the ones given; the rest are the
        release's own defaults): the web page's copy button."""

    # (Prometheus samples) -> engines/live_metrics.LiveFigures, or None when the samples are another engine's;
    # None itself: the engine serves no metrics this tool reads ("not offered", `watch` says so)
    live_metrics: Callable[[Any], Any] | None
    # engines/deployment.Deployment: how the engine runs as a server in a container; None: no deployment here
    deployment: Any
    controls: tuple  # the levers the web page shows as controls: (setting, kind, label, min, max, step) rows

    gguf_mixes: bool  # does it size a model at a llama.cpp quantization mix without the file (--gguf-type)?
    log_figures: tuple  # (observed key, label, prediction reader) rows `logs` compares (engine_logs.py)
    log_only_settings: tuple  # settings read from a log beside the flags (llama.cpp: the file's mix)
    log_version_basis: str  # how `logs` reads the release from a log, in words

    def log_settings(self, text: str) -> dict:
        """The settings a log shows in the engine's own names ({} when its reader infers them run by run)."""

    def log_label(self, key: str) -> str | None:
        """One of the engine's log figures in words, for `logs` (None when the engine does not know the key)."""

    def log_gpus(self, text: str) -> tuple[str, ...]:
        """The devices a log names, GPU 0 first (() when it names none, or the reader finds them run by run)."""

    def log_memory(self, observed: dict) -> dict:
        """What GPU 0 held by the log's own figures, in GiB: weights_gib, kv_gib, other_gib (graphs, compute),
        total_gib (None unless printed); with figures printed for several GPUs, `devices`: one such dict per GPU
        (plus its name, "GPU 1", and the engine's device name), drawn as one bar each; {} when the log printed
        none of them."""

    def log_findings(self, observed: dict) -> Any:
        """What the engine's own log says beyond the figures (Ollama's estimate vs llama.cpp's); None if nothing."""

    def log_version(self, text: str) -> Version | None:
        """The release a log shows (None when it does not say)."""

    def resolve_model(self, reference: str) -> Any:
        """(ModelSpec, checkpoint) for a model named the engine's own way (an Ollama tag), else None."""

    def common_settings(self, *, context: int | None = None, gpus: int = 1) -> dict:
        """Context per request and GPUs in the engine's own setting names."""

    def machine_settings(self, free_bytes: tuple[int, ...]) -> dict:
        """The settings that put the engine on devices with these free bytes (--gpu auto)."""


def resolve_model(engine, reference: str):
    """(ModelSpec, checkpoint table or None) when the engine names models its own way (Ollama's "qwen2.5:7b"
    through its local store); None when `reference` is for the common sources."""
    return engine.resolve_model(reference)


def common_settings(engine, *, context: int | None = None, gpus: int = 1) -> dict:
    """The knobs every engine has (context per request, GPUs the model is split over) in the engine's names."""
    return engine.common_settings(context=context, gpus=gpus)


def machine_settings(engine, free_bytes: tuple[int, ...]) -> dict:
    """The settings that put the engine on these devices (free bytes each, what other processes hold already
    gone), in the engine's own names: llama.cpp splits layers by free memory, Ollama sizes its estimate from it;
    vLLM and SGLang read the free memory from the Gpu and take tensor parallelism over several devices."""
    return engine.machine_settings(tuple(free_bytes))


def is_launch_line(engine, words: list[str]) -> bool:
    """Do these words start one of the engine's programs (`vllm serve`, `sglang serve`, `llama-server`, ...)?"""
    return bool(engine.is_launch_line(words))


def pool_simulation(engine) -> PoolSimulation:
    """The engine's pool simulation; errors.NotOffered (the same words on every surface) when it has none."""
    if engine.simulation is None:
        from ..errors import NotOffered

        raise NotOffered(f"simulate: {engine.label}'s scheduler is not modelled (no pool simulator for it)")
    return engine.simulation
