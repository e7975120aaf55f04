"""`fit`: which settings meet a target (memory ceiling per GPU, concurrency x context, largest context).

The search space is a set of *families* — checkpoint (the model and its catalog variants, online FP8) x
tensor/pipeline parallel layout x KV-cache dtype x CUDA graphs or eager — and inside each family a grid of
gpu_memory_utilization x max_model_len x max_num_seqs x max_num_batched_tokens that `sweep.FastPath`
evaluates at once. Each family contributes its best point; the families are ranked; the best few are
verified with `api.explain` (the forward model is the truth) and get their exact launch line.

Ranking, most important first:
- with a context target: the checkpoint's quality (bits lost against the one asked for; the one asked for
  before equal-bit variants), full-precision KV cache, fewest GPUs, tensor before pipeline parallel, CUDA
  graphs kept, fewest knobs moved off vLLM's defaults, then the most KV headroom (concurrency);
- without one ("the largest context that fits"): quality, then the longest max_model_len, then the rest.
Before all of that, the candidates whose margin covers the KV pool's 90 % interval (intervals.pool_margin: the
interval's low end still holds the target's requests) come before the borderline ones.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from ....budget import check as budget_check
from ....units import GIB, MIB

CONTEXT_LADDER = (256, 512, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152, 65536,
                  98304, 131072, 196608, 262144, 393216, 524288, 786432, 1048576)
HIGHEST_UTILIZATION_WITHOUT_CEILING = 0.95
HIGHEST_UTILIZATION = 0.99
TOKEN_LADDER = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
BINDINGS = ("weights", "activation peak", "KV pool", "max_num_seqs", "startup check", "model context limit",
            "memory ceiling")


class FitInputError(ValueError):
    """A target the search cannot take (one line, exit 2)."""


@dataclass(frozen=True)
class Target:
    context: int | None = None  # tokens per request (max_model_len at least this); None: as long as fits
    concurrency: float | None = None  # requests of `context` tokens at once; None: 1
    max_gpu_memory: int | None = None  # bytes per GPU that nvidia-smi may show; None: the whole GPU
    gpus: int = 1  # GPUs available (tensor x pipeline parallel at most this)

    @property
    def need(self) -> float:
        return float(self.concurrency) if self.concurrency else 1.0

    @property
    def ceiling_mib(self) -> int | None:
        return None if self.max_gpu_memory is None else self.max_gpu_memory // MIB

    def describe(self) -> str:
        parts = [f"{self.need:g} concurrent request(s)",
                 f"of {self.context:,} tokens" if self.context else "of the longest context that fits",
                 f"nvidia-smi <= {self.ceiling_mib:,} MiB per GPU" if self.max_gpu_memory else "the whole GPU",
                 f"up to {self.gpus} GPU(s)"]
        return parts[0] + " " + parts[1] + ", " + ", ".join(parts[2:])


@dataclass(frozen=True)
class Family:
    variant: object  # variants.Variant
    tensor_parallel_size: int
    pipeline_parallel_size: int
    kv_cache_dtype: str  # "auto" or "fp8"
    enforce_eager: bool

    @property
    def gpus(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size


@dataclass
class Candidate:
    family: Family
    fast_path: object  # sweep.FastPath
    point: tuple[float, int, int, int]  # (gpu_memory_utilization, max_model_len, max_num_seqs, max_num_batched_tokens)
    figures: dict  # the fast path's figures at this point
    feasible: bool
    changes: int
    quality_loss: int
    defaults: dict
    distance: float = 0.0  # how far the knobs moved off the defaults (see _changes)
    binding: str = ""
    why: str = ""
    compromises: list[str] = field(default_factory=list)
    breakdown: object | None = None  # api.explain's Breakdown once verified
    verified: bool | None = None
    command: str = ""
    python: str = ""
    margin: object | None = None  # intervals.Margin of the KV pool over the target's requests (None: no interval)

    @property
    def model(self) -> str:
        return self.family.variant.repo_id

    @property
    def settings(self) -> dict:
        return self.fast_path.user_settings(*self.point)

    @property
    def concurrency(self) -> float:
        return self.figures["max_concurrency"]


@dataclass
class FitResult:
    model: str
    gpu: object
    vllm_version: str
    engine: str
    target: Target
    entrypoint: str
    candidates: list[Candidate]
    feasible: bool
    nearest: list[tuple[str, Candidate | None, str]]  # (what was relaxed, candidate, why)
    searched: int
    families: int
    seconds: float
    notes: list[str]
    numpy: bool


# --- the search ------------------------------------------------------------------------------------------


class _Searcher:
    def __init__(self, model, gpu, *, vllm_version, pins, entrypoint, engine, same_checkpoint, source_options,
                 progress, kv_budget_bytes=None):
        from .... import api
        from ..engine import ENGINE

        numpy_or_none = ENGINE.levers.numpy_or_none
        from ....advisor.variants import variants

        self.api = api
        self.model = model
        self.gpu = gpu
        self.vllm_version = vllm_version
        self.pins = {key: value for key, value in (pins or {}).items() if value is not None}
        self.entrypoint = entrypoint or "serve"
        self.engine = engine
        self.source_options = source_options or {}
        self.progress = progress
        self.kv_budget_bytes = kv_budget_bytes
        self.spec = api.model_spec(model, self.source_options.get("source"), self.source_options.get("revision"),
                                   self.source_options.get("hf_token"), self.source_options.get("gguf_file"))
        pinned_quant = "quantization" in self.pins
        self.variants = variants(self.spec.name, self.spec, include_catalog=not (same_checkpoint or pinned_quant),
                                 include_online=not (same_checkpoint or pinned_quant))
        self.given_bits = self.variants[0].bits
        self.fast_paths: dict[Family, object] = {}
        self.skipped: dict[tuple[str, str], list[str]] = {}  # (checkpoint label, why) -> layouts
        self.searched = 0
        self.numpy = numpy_or_none() is not None
        release = ENGINE.releases
        self.version_label = release.rules(release.resolve(vllm_version), engine).label

    # the discrete part of the space
    def layouts(self, gpus: int) -> list[tuple[int, int]]:
        if "tensor_parallel_size" in self.pins or "pipeline_parallel_size" in self.pins:
            return [(int(self.pins.get("tensor_parallel_size", 1)), int(self.pins.get("pipeline_parallel_size", 1)))]
        powers = [1 << k for k in range(7) if (1 << k) <= gpus]
        out = []
        for tp in powers:
            if self.spec.num_attention_heads % tp:
                continue
            for pp in powers:
                if tp * pp <= gpus and pp <= self.spec.num_layers:
                    out.append((tp, pp))
        return out

    def families(self, gpus: int) -> list[Family]:
        kv_dtypes = [self.pins["kv_cache_dtype"]] if "kv_cache_dtype" in self.pins else ["auto", "fp8"]
        eager = [bool(self.pins["enforce_eager"])] if "enforce_eager" in self.pins else [False, True]
        return [Family(variant, tp, pp, kv, e) for variant in self.variants for tp, pp in self.layouts(gpus)
                for kv in kv_dtypes for e in eager]

    def fast_path(self, family: Family):
        from ..engine import ENGINE

        engine = ENGINE
        SettingsError = engine.settings_error
        FastPath, FastPathUnsupported = engine.levers.fast_path, engine.levers.fast_path_unsupported

        if family in self.fast_paths:
            return self.fast_paths[family]
        settings = {key: value for key, value in self.pins.items()}
        settings.update(tensor_parallel_size=family.tensor_parallel_size,
                        pipeline_parallel_size=family.pipeline_parallel_size, enforce_eager=family.enforce_eager)
        if family.kv_cache_dtype != "auto" or "kv_cache_dtype" in self.pins:
            settings["kv_cache_dtype"] = family.kv_cache_dtype
        settings.update(family.variant.settings)
        if self.engine:
            settings["engine"] = self.engine
        settings["entrypoint"] = self.entrypoint
        try:
            spec = self.spec if family.variant.given else None
            fast = FastPath(family.variant.repo_id, self.gpu, vllm_version=self.vllm_version, settings=settings,
                            spec=spec, kv_budget_bytes=self.kv_budget_bytes,
                            source_options=self.source_options if family.variant.given else None)
        except (SettingsError, FastPathUnsupported) as error:
            raise FitInputError(str(error)) from None  # the pinned settings themselves are not accepted
        except (ValueError, NotImplementedError) as error:
            # vLLM refuses this checkpoint / layout here (e.g. heads not divisible, no FP8 kernel on this GPU)
            layouts = self.skipped.setdefault((family.variant.label, str(error).splitlines()[0]), [])
            layout = f"tp={family.tensor_parallel_size} pp={family.pipeline_parallel_size}"
            if layout not in layouts:
                layouts.append(layout)
            fast = None
        self.fast_paths[family] = fast
        return fast

    # the grid of one family
    def _defaults(self, fast, length: int, seqs: int | None) -> tuple[int, int]:
        """(max_num_seqs, max_num_batched_tokens) the release picks by itself at this context."""
        from ..engine import ENGINE

        user = dict(fast.fixed, max_model_len=length)
        if seqs is not None:
            user["max_num_seqs"] = seqs
        resolved, _ = ENGINE.resolve_settings(user, fast.spec, fast.gpu, fast.version)
        return resolved.max_num_seqs, resolved.max_num_batched_tokens

    def axes(self, fast, target: Target, lengths_override=None):
        need = max(1, math.ceil(target.need - 1e-9))
        derived = fast.derived_max_model_len
        if "max_model_len" in self.pins:
            lengths = [int(self.pins["max_model_len"])]
        elif lengths_override is not None:
            lengths = list(lengths_override)
        elif target.context is not None:
            lengths = [target.context]
        else:
            lengths = [length for length in CONTEXT_LADDER if length < derived] + [derived]
        lengths = sorted({length for length in lengths if length >= 1})
        default_seqs = self._defaults(fast, min(lengths[0], derived), None)[0]
        if "max_num_seqs" in self.pins:
            seqs = [int(self.pins["max_num_seqs"])]
        else:
            top = max(default_seqs, need)
            seqs = sorted({need, default_seqs} | {1 << k for k in range(16) if need <= (1 << k) <= top})
        default_tokens = {}
        for length in lengths:
            for seq in seqs:
                try:
                    default_tokens[(length, seq)] = self._defaults(fast, min(length, derived), seq)[1]
                except ValueError:
                    default_tokens[(length, seq)] = None
        if "max_num_batched_tokens" in self.pins:
            tokens = [int(self.pins["max_num_batched_tokens"])]
        else:
            top = max([value for value in default_tokens.values() if value] + [256])
            tokens = {value for value in default_tokens.values() if value}
            tokens |= {value for value in TOKEN_LADDER if value <= top}
            tokens |= {seq for seq in seqs if seq > 256}
            if fast.engine == "v0":
                tokens |= {max(length, 2048) for length in lengths}
            tokens = sorted(tokens)
        default_u = fast.default_utilization
        if "gpu_memory_utilization" in self.pins:
            utilizations = [float(self.pins["gpu_memory_utilization"])]
        elif target.max_gpu_memory is not None:
            utilizations = sorted({round(k / 100, 2) for k in range(5, int(HIGHEST_UTILIZATION * 100) + 1)} | {default_u})
        else:
            utilizations = sorted({default_u} | {round(k / 100, 2) for k in range(1, 100)
                                                  if default_u < k / 100 <= HIGHEST_UTILIZATION_WITHOUT_CEILING})
        return utilizations, lengths, seqs, tokens, default_seqs, default_tokens

    def best_of_family(self, family: Family, target: Target, lengths_override=None) -> Candidate | None:
        budget_check()  # a web request's budget (budget.py): a fit over 64 GPUs visits hundreds of families
        fast = self.fast_path(family)
        if fast is None:
            return None
        us, lengths, seqs, tokens, default_seqs, default_tokens = self.axes(fast, target, lengths_override)
        sweep = fast.grid(us, lengths, seqs, tokens)
        self.searched += len(sweep)
        u_counts = "gpu_memory_utilization" not in self.pins and target.max_gpu_memory is None
        index = _select(sweep, target, default_seqs, default_tokens, fast.default_utilization, u_counts,
                        maximize_length=target.context is None and "max_model_len" not in self.pins)
        loss = max(0, self.given_bits - family.variant.bits)
        defaults = {"gpu_memory_utilization": fast.default_utilization, "max_num_seqs": default_seqs}
        if index is None:
            return None
        point = sweep.setting(index)
        defaults["max_num_batched_tokens"] = default_tokens.get((point[1], point[2]))
        changes, distance = _changes(point, default_seqs, default_tokens, fast.default_utilization, u_counts)
        candidate = Candidate(family, fast, point, sweep.at(index), True, changes, loss, defaults, distance=distance)
        if target.context is None and "max_model_len" not in self.pins:
            self._refine_length(candidate, target, max(lengths_override) if lengths_override else None)
        return candidate

    def _refine_length(self, candidate: Candidate, target: Target, cap: int | None = None) -> None:
        """Largest max_model_len that still meets the target (feasibility falls as the length grows)."""
        fast = candidate.fast_path
        u, length, seqs, tokens = candidate.point
        higher = [value for value in CONTEXT_LADDER if value > length] + [fast.derived_max_model_len]
        hi = min(min(higher), fast.derived_max_model_len, cap or fast.derived_max_model_len)
        if hi <= length:
            return
        lo = length

        def point_for(value):
            tok = tokens
            if fast.engine == "v0" and not fast.valid(value, tok):
                tok = max(value, tokens)
            return (u, value, seqs, tok)

        def ok(value):
            p = point_for(value)
            figures = fast.figures(*p)
            return _meets(figures, p, target), figures

        good, figures = ok(hi)
        if good:
            lo = hi
        else:
            while hi - lo > 1:
                middle = (lo + hi) // 2
                good, _ = ok(middle)
                if good:
                    lo = middle
                else:
                    hi = middle
        if lo != length:
            candidate.point = point_for(lo)
            candidate.figures = fast.figures(*candidate.point)

    def run(self, target: Target, *, lengths_override=None, stage: str = "") -> list[Candidate]:
        families = self.families(target.gpus)
        best = []
        started = time.perf_counter()
        for number, family in enumerate(families, start=1):
            if self.progress is not None:
                self.progress(number - 1, len(families), started, stage)
            candidate = self.best_of_family(family, target, lengths_override)
            if candidate is not None:
                best.append(candidate)
        if self.progress is not None:
            self.progress(len(families), len(families), started, stage)
        best.sort(key=lambda c: _rank_key(c, target))
        return best


def _changes(point, default_seqs, default_tokens, default_u, u_counts) -> tuple[int, float]:
    """(knobs moved off vLLM's defaults, how far: octaves of seqs / tokens + utilization in 0.05 steps)."""
    u, length, seqs, tokens = point
    default = default_tokens.get((length, seqs))
    changes = int(seqs != default_seqs) + int(tokens != default) + int(u_counts and u != default_u)
    distance = abs(math.log2(seqs / default_seqs)) + (abs(math.log2(tokens / default)) if default else 0.0)
    if u_counts:
        distance += abs(u - default_u) / 0.05
    return changes, distance


def _meets(figures: dict, point, target: Target) -> bool:
    u, length, seqs, tokens = point
    need = target.need
    if not (figures["starts"] and tokens >= seqs):
        return False
    if target.max_gpu_memory is not None and figures["nvidia_smi_max_mib"] > target.ceiling_mib:  # the fullest GPU
        return False
    if target.context is not None and length < target.context:
        return False
    return figures["max_concurrency"] >= need and seqs >= math.ceil(need - 1e-9)


def _select(sweep, target: Target, default_seqs, default_tokens, default_u, u_counts, maximize_length) -> int | None:
    """Index of the family's best point that meets the target, or None."""
    need = target.need
    seats = math.ceil(need - 1e-9)
    axes = sweep.axes
    us, lengths, seqs, tokens = axes
    if sweep.is_numpy:
        import numpy as np

        shape = (len(us), len(lengths), len(seqs), len(tokens))
        u = np.asarray(us).reshape(-1, 1, 1, 1)
        length = np.asarray(lengths).reshape(1, -1, 1, 1)
        seq = np.asarray(seqs).reshape(1, 1, -1, 1)
        tok = np.asarray(tokens).reshape(1, 1, 1, -1)
        defaults = np.array([[default_tokens.get((L, s)) or -1 for s in seqs] for L in lengths]).reshape(1, len(lengths), len(seqs), 1)
        ok = sweep["starts"].reshape(shape) & (tok >= seq) & (seq >= seats)
        ok = ok & (sweep["max_concurrency"].reshape(shape) >= need)
        if target.max_gpu_memory is not None:
            ok = ok & (sweep["nvidia_smi_max_mib"].reshape(shape) <= target.ceiling_mib)  # every GPU under it
        if target.context is not None:
            ok = ok & (length >= target.context)
        if not ok.any():
            return None
        changes = (seq != default_seqs).astype(np.int64) + (tok != defaults).astype(np.int64)
        distance = np.abs(np.log2(seq / default_seqs)) + np.where(defaults > 0, np.abs(np.log2(tok / np.abs(defaults))), 0.0)
        if u_counts:
            changes = changes + (u != default_u)
            distance = distance + np.abs(u - default_u) / 0.05
        changes = np.broadcast_to(changes, shape)
        distance = np.broadcast_to(distance, shape)
        concurrency = sweep["max_concurrency"].reshape(shape)
        # lexicographic: (-length if maximizing), changes, distance, -concurrency, -seqs, -tokens, u
        flat = np.flatnonzero(ok.reshape(-1))
        keys = [np.broadcast_to(u, shape).reshape(-1)[flat], -np.broadcast_to(tok, shape).reshape(-1)[flat],
                -np.broadcast_to(seq, shape).reshape(-1)[flat], -concurrency.reshape(-1)[flat],
                distance.reshape(-1)[flat], changes.reshape(-1)[flat]]
        if maximize_length:
            keys.append(-np.broadcast_to(length, shape).reshape(-1)[flat])
        order = np.lexsort(keys)
        return int(flat[order[0]])
    best, best_key = None, None
    for index in range(len(sweep)):
        point = sweep.setting(index)
        u, length, seq, tok = point
        figures = {key: sweep[key][index] for key in ("starts", "max_concurrency", "nvidia_smi_max_mib")}
        if not _meets(figures, point, target):
            continue
        changes, distance = _changes(point, default_seqs, default_tokens, default_u, u_counts)
        key = ((-length,) if maximize_length else ()) + (changes, distance, -figures["max_concurrency"], -seq, -tok, u)
        if best_key is None or key < best_key:
            best, best_key = index, key
    return best


def _rank_key(candidate: Candidate, target: Target) -> tuple:
    family = candidate.family
    head = (candidate.quality_loss, not family.variant.given)
    rest = (family.kv_cache_dtype != "auto", family.gpus, family.pipeline_parallel_size > 1, family.enforce_eager,
            candidate.changes, round(candidate.distance, 6), -candidate.concurrency, family.variant.repo_id)
    if target.context is None:
        return head + (-candidate.point[1],) + rest
    return head + rest


def _margin(searcher: _Searcher, candidate: Candidate, target: Target):
    """The KV pool's margin over the target's requests against its 90 % interval (the fast path's figures, which
    _verify checks against explain; the interval as explain attaches it)."""
    from ....fidelity import gpu_class, release_era
    from ....intervals import card_limit_of, clipped, interval_of, pool_margin

    pool = candidate.figures["kv_cache_bytes"]
    era = release_era("vllm", searcher.version_label, candidate.fast_path.engine)
    found = interval_of("vllm", "kv_cache_gib", pool / GIB, era, gpu_class(candidate.fast_path.total))
    if found is not None:  # within [0, the card], as explain clips it
        found = clipped(found, card_limit_of("kv_cache_gib", candidate.fast_path.total))
    return pool_margin(pool, candidate.figures["max_concurrency"], [found] if found else [], target.need)


def borderline(candidate) -> bool:
    """A margin within the pool's error (no interval: nothing is claimed, so not borderline)."""
    return candidate.margin is not None and not candidate.margin.covers


def _covering_first(searcher: _Searcher, ranked: list[Candidate], target: Target, top: int) -> list[Candidate]:
    """The `top` to list: those whose margin covers the interval first, then the borderline ones (each group in
    rank order). The borderline ones that ranked before the best covering one stay listed: they are what the
    margin pushed down."""
    for candidate in ranked:
        candidate.margin = _margin(searcher, candidate, target)
    covering = [c for c in ranked if not borderline(c)]
    pushed = [] if not covering else ranked[: ranked.index(covering[0])][: max(top - 1, 0)]
    head = covering[: top - len(pushed)]
    return (head + [c for c in ranked if borderline(c) and c not in head])[:top]


# --- words -------------------------------------------------------------------------------------------------


def _binding(candidate: Candidate, target: Target) -> tuple[str, str]:
    """(the constraint that binds, why) for a candidate that meets the target or comes nearest to it."""
    fast, f = candidate.fast_path, candidate.figures
    u, length, seqs, tokens = candidate.point
    need = target.need
    weights = max(fast.weights)
    peak = f["activation_peak_bytes"]
    ceiling = target.max_gpu_memory
    if weights > fast.total or (ceiling is not None and weights > ceiling):
        limit = "the GPU" if ceiling is None or weights > fast.total else "the memory ceiling"
        return "weights", f"weights take {weights / GIB:.2f} GiB per GPU, more than {limit} holds"
    if not f["starts"] or f["max_concurrency"] < need:
        if fast.kv_fixed is None and weights >= f["budget_bytes"]:
            return "weights", (f"weights take {weights / GIB:.2f} GiB per GPU, all of vLLM's budget "
                               f"({u:g} x {fast.total / GIB:.2f} GiB)")
        kv = max(f["kv_cache_bytes"], 0)
        pieces = fast._kv_pieces(length, tokens)
        if f["max_concurrency"] > 0:
            wanted = f["kv_pool_bytes"] * need / f["max_concurrency"]
        else:
            wanted = pieces.blocks_per_request * fast.worker_block_bytes[0] * need
        missing = wanted - kv
        if fast.kv_fixed is None and missing > 0 and peak >= missing and peak > kv:
            return "activation peak", (f"the profile-run peak ({peak / GIB:.2f} GiB at max_num_batched_tokens={tokens:,}, "
                                       f"max_num_seqs={seqs}) is more than the KV cache still missing "
                                       f"({missing / GIB:.2f} GiB)")
        if not f["starts"]:
            return "startup check", (f"one {length:,}-token request needs more KV cache than the "
                                     f"{kv / GIB:.2f} GiB left after weights ({weights / GIB:.2f} GiB) and the "
                                     f"activation peak ({peak / GIB:.2f} GiB)")
        return "KV pool", (f"{f['num_gpu_blocks']:,} blocks ({f['kv_cache_tokens']:,} tokens) hold "
                           f"{f['max_concurrency']:.2f} requests of {length:,} tokens, fewer than {need:g}")
    if target.context is None:
        if length >= fast.derived_max_model_len:
            return "model context limit", f"max_model_len {length:,} is the model's own limit (config.json)"
        if need <= 1:
            return "startup check", (f"one request of {length + 1:,} tokens would no longer fit the KV pool "
                                     f"({f['kv_cache_tokens']:,} tokens)")
        return "KV pool", f"{f['max_concurrency']:.2f} requests of {length:,} tokens fill the KV pool"
    if seqs / need <= f["max_concurrency"] / need and seqs < f["max_concurrency"]:
        return "max_num_seqs", (f"max_num_seqs={seqs} caps the batch before the KV pool does "
                                f"({f['max_concurrency']:.2f} requests of {length:,} tokens fit)")
    headroom = f["max_concurrency"] / need
    return "KV pool", (f"{f['num_gpu_blocks']:,} blocks ({f['kv_cache_tokens']:,} tokens) hold "
                       f"{f['max_concurrency']:.2f} requests of {length:,} tokens ({headroom:.2f}x the target)")


def _compromises(candidate: Candidate, given_label: str) -> list[str]:
    family = candidate.family
    u, length, seqs, tokens = candidate.point
    out = []
    variant = family.variant
    if not variant.given:
        if candidate.quality_loss:
            out.append(f"{variant.label} weights instead of {given_label}: some accuracy loss")
        else:
            out.append(f"another checkpoint ({variant.label})")
    if family.kv_cache_dtype != "auto":
        out.append("fp8 KV cache: small accuracy cost (uncalibrated k/v scales default to 1.0)")
    if family.gpus > 1:
        layout = f"tensor parallel {family.tensor_parallel_size}" if family.pipeline_parallel_size == 1 else (
            f"tensor parallel {family.tensor_parallel_size} x pipeline parallel {family.pipeline_parallel_size}")
        out.append(f"{family.gpus} GPUs ({layout})")
    if family.enforce_eager:
        out.append("--enforce-eager: no CUDA graphs, slower decode")
    defaults = candidate.defaults
    if seqs < defaults["max_num_seqs"]:
        out.append(f"max_num_seqs {seqs} (default {defaults['max_num_seqs']}): fewer requests decode at once")
    default_tokens = defaults.get("max_num_batched_tokens")
    if default_tokens and tokens < default_tokens:
        out.append(f"max_num_batched_tokens {tokens:,} (default {default_tokens:,}): long prompts prefill in more "
                   "chunks (slower time to first token)")
    if u > defaults["gpu_memory_utilization"]:
        out.append(f"gpu_memory_utilization {u:g} (default {defaults['gpu_memory_utilization']:g}): less headroom for "
                   "other processes")
    return out


# --- verification and the launch line ------------------------------------------------------------------------


def _verify(searcher: _Searcher, candidate: Candidate) -> None:
    api = searcher.api
    settings = candidate.settings
    options = searcher.source_options if candidate.family.variant.given else {}
    try:
        breakdown = api.explain(candidate.model, searcher.gpu, vllm_version=searcher.vllm_version, **options, **settings)
    except api.REFUSALS:
        candidate.verified = False
        return
    candidate.breakdown = breakdown
    f = candidate.figures
    candidate.verified = (breakdown.num_gpu_blocks == f["num_gpu_blocks"] and breakdown.kv_cache_tokens == f["kv_cache_tokens"]
                          and breakdown.max_concurrency == f["max_concurrency"]
                          and (breakdown.failure is None) == f["starts"]
                          and breakdown.nvidia_smi_used_mib == f["nvidia_smi_used_mib"]
                          and max((d.nvidia_smi_used_mib for d in breakdown.devices),
                                  default=breakdown.nvidia_smi_used_mib) == f["nvidia_smi_max_mib"])


def _launch_lines(searcher: _Searcher, candidate: Candidate) -> None:
    from .launch_command import engine_env, minimal_settings, python_command, serve_command

    fast = candidate.fast_path
    settings = {key: value for key, value in candidate.settings.items() if key != "entrypoint"}
    serve = minimal_settings(fast.spec, fast.gpu, fast.version, settings, entrypoint="serve")
    env = engine_env(fast.spec, fast.gpu, fast.version, settings)
    candidate.command = serve_command(candidate.model, serve, engine_env=env)
    llm = minimal_settings(fast.spec, fast.gpu, fast.version, settings, entrypoint="llm")
    candidate.python = python_command(candidate.model, llm)
    if env:
        candidate.python = f"# run with {env}\n" + candidate.python


def _finish(searcher: _Searcher, candidate: Candidate, target: Target, *, meets: bool = True) -> Candidate:
    candidate.binding, candidate.why = _binding(candidate, target)
    candidate.compromises = _compromises(candidate, searcher.variants[0].label)
    _verify(searcher, candidate)
    _launch_lines(searcher, candidate)
    candidate.feasible = meets
    candidate.margin = _margin(searcher, candidate, target)
    return candidate


# --- nearest feasible target ---------------------------------------------------------------------------------


def _nearest(searcher: _Searcher, target: Target, top: int) -> list[tuple[str, Candidate | None, str]]:
    out: list[tuple[str, Candidate | None, str]] = []
    spec_limit = None
    if target.context is not None:
        limits = [fast.derived_max_model_len for fast in searcher.fast_paths.values() if fast is not None]
        spec_limit = max(limits) if limits else None
        if spec_limit is not None and target.context > spec_limit:
            out.append(("model limit", None, f"{target.context:,} tokens exceed the model's max_model_len ({spec_limit:,}); "
                                         "vLLM refuses longer unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 or a RoPE scaling "
                                         "override is set"))
    beyond = target.context is not None and spec_limit is not None and target.context > spec_limit
    # 1) the most concurrent requests at the target context
    if target.context is not None and target.need > 1 and not beyond:
        relaxed = Target(min(target.context, spec_limit or target.context), 1.0, target.max_gpu_memory, target.gpus)
        found = searcher.run(relaxed, stage="nearest: concurrency")
        if found:
            best = max(found, key=lambda c: c.concurrency)  # the first of the most concurrent, in rank order
            out.append(("concurrency", _finish(searcher, best, target, meets=False),
                        f"at most {best.concurrency:.2f} requests of {relaxed.context:,} tokens fit"))
    # 2) the longest context at the target concurrency
    if target.context is not None and target.context > 1:  # a 1-token target has no shorter context to offer
        relaxed = Target(None, target.need, target.max_gpu_memory, target.gpus)
        ladder = [length for length in CONTEXT_LADDER if length < target.context] + [target.context - 1]
        found = searcher.run(relaxed, lengths_override=ladder, stage="nearest: context")
        found = [c for c in found if c.point[1] < target.context]
    else:
        found = []
    if found:
        best = max(found, key=lambda c: c.point[1])
        out.append(("context", _finish(searcher, best, relaxed, meets=False),
                    f"the longest context at {target.need:g} concurrent request(s) is {best.point[1]:,} tokens"))
    # 3) more GPUs
    gpus = target.gpus * 2
    while gpus <= max(8, target.gpus * 2) and "tensor_parallel_size" not in searcher.pins and not beyond:
        wider = Target(target.context, target.concurrency, target.max_gpu_memory, gpus)
        found = searcher.run(wider, stage=f"nearest: {gpus} GPUs")
        if found:
            best = _finish(searcher, found[0], wider, meets=False)
            out.append(("gpus", best, f"{best.family.gpus} GPUs meet the target"))
            break
        gpus *= 2
    at_hand = [fast for family, fast in searcher.fast_paths.items() if fast is not None and family.gpus <= target.gpus]
    if at_hand:
        lightest = min(max(fast.weights) for fast in at_hand)
        limit = target.max_gpu_memory if target.max_gpu_memory is not None else min(fast.total for fast in at_hand)
        if lightest > limit:
            what = "the memory ceiling" if target.max_gpu_memory is not None else "the GPU"
            out.insert(0, ("weights", None, f"with {target.gpus} GPU(s) the lightest checkpoint still holds "
                                            f"{lightest / GIB:.2f} GiB of weights per GPU, more than {what} "
                                            f"({limit / GIB:.2f} GiB)"))
    return out


# --- entry point -----------------------------------------------------------------------------------------------


def fit(model: str, gpu, target: Target, *, vllm_version: str | None = None, pins: dict | None = None,
        entrypoint: str = "serve", engine: str | None = None, same_checkpoint: bool = False, top: int = 5,
        source_options: dict | None = None, progress=None, kv_budget_bytes: int | None = None) -> FitResult:
    """Search the settings (and the catalog's variants of `model`) that meet `target` on `gpu`.

    `pins`: vLLM settings (snake_case) the search must keep as given. `kv_budget_bytes` fixes every
    worker's KV budget (the inverse checks against logged budgets use it)."""
    from .... import api
    from ..engine import ENGINE

    releases = ENGINE.releases
    release_rules, resolve_version = releases.rules, releases.resolve

    if target.gpus < 1:
        raise FitInputError("--gpus must be at least 1")
    if target.concurrency is not None and target.concurrency <= 0:
        raise FitInputError("--concurrency must be positive")
    if target.context is not None and target.context < 1:
        raise FitInputError("--context must be a positive token count")
    device = gpu if not isinstance(gpu, str) else api.resolve_gpu(gpu, None)
    started = time.perf_counter()
    pins = dict(pins or {})
    if pins.get("tensor_parallel_size") or pins.get("pipeline_parallel_size"):
        used = int(pins.get("tensor_parallel_size") or 1) * int(pins.get("pipeline_parallel_size") or 1)
        target = Target(target.context, target.concurrency, target.max_gpu_memory, max(target.gpus, used))
    if target.context is not None and pins.get("max_model_len") and int(pins["max_model_len"]) < target.context:
        raise FitInputError(f"--max-model-len {pins['max_model_len']} is shorter than --context {target.context}")
    searcher = _Searcher(model, device, vllm_version=vllm_version, pins=pins, entrypoint=entrypoint, engine=engine,
                         same_checkpoint=same_checkpoint, source_options=source_options, progress=progress,
                         kv_budget_bytes=kv_budget_bytes)
    found = _covering_first(searcher, searcher.run(target, stage="fit"), target, top)
    finished = [_finish(searcher, candidate, target) for candidate in found]
    # explain is the truth: a candidate it refuses (a pinned --kv-cache-memory-bytes larger than the card, which
    # the sweep's fast path does not model) is not offered
    chosen = [c for c in finished if (c.breakdown.failure is None if c.breakdown is not None else c.verified is not False)]
    feasible = bool(chosen)
    nearest = [] if feasible else _nearest(searcher, target, top)
    version = resolve_version(vllm_version)
    release = release_rules(version, engine)
    engine_used = next((fast.engine for fast in searcher.fast_paths.values() if fast is not None), None)
    notes = [f"skipped {label} ({', '.join(layouts)}): {why}" for (label, why), layouts in searcher.skipped.items()]
    for dropped in (c for c in finished if c not in chosen):
        why = dropped.breakdown.failure.message.splitlines()[0] if dropped.breakdown is not None else "refused"
        notes.append(f"left out {dropped.command}: explain says it does not start ({why})")
    if target.max_gpu_memory is not None and any(c.family.pipeline_parallel_size > 1 for c in chosen):
        notes.append("with pipeline parallelism the ceiling is checked on the first stage's GPUs")
    return FitResult(searcher.spec.name, device, release.label, engine or engine_used or release.engine, target, entrypoint, chosen,
                     feasible, nearest, searcher.searched, len(searcher.fast_paths), time.perf_counter() - started,
                     notes, searcher.numpy)
