"""The fast path: `explain`'s blocks, tokens, concurrency, startup check and nvidia-smi figure for many
settings at once.

For one *family* of settings — a model checkpoint on a GPU, a vLLM release and engine, tensor/pipeline
parallel sizes, dtype, KV-cache dtype, block size, eager or graphs, CPU offload, LoRA — everything but
four knobs is fixed. The pieces are computed once with the engine code itself:

- the weights of every pipeline stage (engines/vllm/weights.py, allocator.py), non-torch memory (profile.py);
- per (max_num_seqs, max_num_batched_tokens): the activation peak (forward vs. sampler) and the CUDA-graph
  pool of each stage (profile.activation_peak, profile.cuda_graphs);
- per (max_model_len, tokens in flight): the bytes one block id costs each worker, the blocks one request
  takes and what the startup check "one max_model_len request must fit" needs on each worker
  (kv_groups.plan_kv_groups, probed through kv_plan.plan_kv).

The release's budget formula then combines them over gpu_memory_utilization x max_model_len x
max_num_seqs x max_num_batched_tokens with numpy broadcasting (pure Python when numpy is absent). The
combination mirrors plan.plan(); tests/test_advisor_sweep.py checks it against `api.explain` figure by
figure on random settings for dense, MoE, sliding-window/hybrid and MLA models and several releases.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

from ...units import GIB

SWEPT = ("gpu_memory_utilization", "max_model_len", "max_num_seqs", "max_num_batched_tokens")
FIGURES = ("budget_bytes", "kv_cache_bytes", "num_gpu_blocks", "kv_cache_tokens", "max_concurrency", "starts",
           "valid", "nvidia_smi_used_mib", "activation_peak_bytes", "cuda_graph_bytes", "kv_pool_bytes",
           "min_kv_cache_bytes", "kv_fits", "nvidia_smi_max_mib")
_BIG = 1 << 62  # a KV budget no worker can exhaust (probes)
_PROBE_TOKENS = 1 << 30  # max_num_batched_tokens while resolving the fixed settings (replaced per point)


class FastPathUnsupported(ValueError):
    """Settings the fast path does not cover (the caller uses api.explain for them)."""


def numpy_or_none():
    try:
        import numpy
    except ImportError:  # pragma: no cover - exercised by test_advisor_sweep with numpy hidden
        return None
    return numpy


class _ScalarOps:
    """Elementwise operations on plain Python numbers (the fallback when numpy is absent)."""

    @staticmethod
    def where(condition, a, b):
        return a if condition else b

    minimum = staticmethod(min)
    maximum = staticmethod(max)

    @staticmethod
    def trunc(value):
        return int(value)

    @staticmethod
    def rint(value):
        return int(round(value))

    @staticmethod
    def ceil(value):
        return math.ceil(value)


class _NumpyOps:
    def __init__(self, np):
        self.np = np
        self.where = np.where
        self.minimum = np.minimum
        self.maximum = np.maximum

    def trunc(self, value):
        return self.np.asarray(value).astype(self.np.int64)  # toward zero, like int()

    def rint(self, value):
        return self.np.rint(value).astype(self.np.int64)  # half to even, like round()

    def ceil(self, value):
        return self.np.ceil(value).astype(self.np.int64)


@dataclass(frozen=True)
class _KvPieces:
    worker_block_bytes: tuple[int, ...]
    blocks_per_request: int
    groups: int
    min_block_size: int
    needed: tuple[int, ...]  # bytes the startup check asks of each worker (V1)


# (family kv identity, max_model_len, tokens in flight) -> _KvPieces, shared by families that differ only
# in knobs the KV grouping does not read (enforce_eager, cpu offload, LoRA, ...)
_KV_CACHE: dict[tuple, _KvPieces] = {}
_IDENTITIES: dict[tuple, int] = {}
_IDENTITY_NUMBERS = itertools.count()
_KV_CACHE_LIMIT = 20000


def _spec_and_gpu(model: str, gpu, spec, options: dict):
    """The model spec (given, or from its source) and the GPU (a Gpu, or a name from the catalog)."""
    from ... import api
    from ...hardware import Gpu

    if spec is None:
        spec = api.model_spec(model, options.get("source"), options.get("revision"), options.get("hf_token"),
                              options.get("gguf_file"))
    return spec, gpu if isinstance(gpu, Gpu) else api.resolve_gpu(gpu, None)


def _fixed_settings(settings: dict | None) -> dict:
    """The family's settings: every given one but the four swept knobs."""
    fixed = {key: value for key, value in (settings or {}).items() if value is not None and key not in SWEPT}
    if fixed.get("num_gpu_blocks_override"):
        raise FastPathUnsupported("num_gpu_blocks_override is not swept (use api.explain)")
    if fixed.get("max_model_len") == -1:
        raise FastPathUnsupported("auto-fit max_model_len (-1) is not swept")
    return fixed


def _kv_log_and_fit_rules(kv_layers, version, engine: str) -> tuple[str, bool, bool, bool]:
    """(tokens rule, log after the minimum over workers, fit check against the smallest budget, null block out of
    the fit check): the kv_groups rules _combine applies elementwise (plan_v1's _logged_figures and _fit_check)."""
    v1 = engine == "v1"
    tokens_rule = str(kv_layers.rule(version, "kv_tokens_rule")) if v1 else "blocks"
    log_after_min = bool(kv_layers.rule(version, "log_after_min")) if v1 else True
    fit_global_min = (kv_layers.rule(version, "fit_check") != "per-layer"
                      and not kv_layers.rule(version, "fit_per_worker_groups"))
    return tokens_rule, log_after_min, fit_global_min, bool(kv_layers.rule(version, "null_block_in_fit_check"))


def _kv_identity(layers, workers, block_size: int, version, engine: str, pipeline_parallel_size: int) -> int:
    """A number for everything kv_plan.plan_kv reads besides the swept knobs: the same identity shares KV pieces."""
    identity = (tuple(layers), tuple(workers), block_size, version, engine, pipeline_parallel_size)
    if identity not in _IDENTITIES:
        _IDENTITIES[identity] = next(_IDENTITY_NUMBERS)
    return _IDENTITIES[identity]


class FastPath:
    """One family of settings; `grid()` and `points()` evaluate the four swept knobs."""

    def __init__(self, model: str, gpu, *, vllm_version: str | None = None, settings: dict | None = None,
                 kv_budget_bytes: int | None = None, spec=None, source_options: dict | None = None):
        from . import kv_groups, kv_layers, kv_plan, profile, weights_plan
        from . import plan as plan_module
        from . import settings as settings_module
        from .releases import release as release_rules, resolve_version
        from .weights import pipeline_layer_counts

        self._profile, self._plan_module, self._kv_groups = profile, plan_module, kv_groups
        self._kv_plan, self._weights_plan = kv_plan, weights_plan
        self._settings_module = settings_module
        self.model = model
        self.spec, self.gpu = _spec_and_gpu(model, gpu, spec, source_options or {})
        self.version = resolve_version(vllm_version)
        self.vllm_version = vllm_version
        self.fixed = _fixed_settings(settings)
        self._probe = dict(self.fixed, max_num_seqs=1, max_num_batched_tokens=_PROBE_TOKENS)
        settings_, release = settings_module.resolve_settings(self._probe, self.spec, self.gpu, release_rules,
                                                              self.version)
        self.settings, self.release = settings_, release
        self.engine = settings_.engine
        self.derived_max_model_len = settings_.derived_max_model_len
        self.block_size = settings_.block_size
        self.total = self.gpu.cuda_total_bytes
        self.default_utilization = float(release["default_gpu_memory_utilization"])
        tp, pp = settings_.tensor_parallel_size, settings_.pipeline_parallel_size
        self.tensor_parallel_size, self.pipeline_parallel_size = tp, pp
        self.layer_counts = pipeline_layer_counts(self.spec.num_layers, pp, bool(release["pp_remainder_to_last"]))
        self._load_weights()
        self.non_torch_inside, self.non_torch_outside, _ = profile.non_torch(self.gpu, settings_, release, self.spec)
        self.graph_subtracted = bool(release["cuda_graph_subtracted"])
        # the stage tables hold vLLM's CUDA-graph estimate; the pool is it times this (profile.graph_actual_ratio)
        self.graph_actual_ratio = profile.graph_actual_ratio(self.gpu, settings_, release)
        self.layers, self.workers = kv_plan.attention_layers(self.spec, settings_, release, self.layer_counts)
        self._cross_follows_tokens = (self.spec.encoder is not None and settings_.engine == "v1"
                                      and not release["encdec_encoder_tokens_override"])
        self.kv_fixed = int(kv_budget_bytes) if kv_budget_bytes is not None else settings_.kv_cache_memory_bytes
        (self.tokens_rule, self.log_after_min, self.fit_global_min,
         self.fit_null_block) = _kv_log_and_fit_rules(kv_layers, release.version, self.engine)
        self.sliding = any(layer.kind in ("sliding", "chunked_local") for layer in self.layers)
        self.swap_space_gib = settings_.swap_space_gib
        self._chunked_given = self.fixed.get("enable_chunked_prefill")
        self._kv_identity = _kv_identity(self.layers, self.workers, settings_.block_size, self.version, self.engine, pp)
        self._dtype_bytes = plan_module.DTYPE_BYTES[settings_.dtype]
        self._st_cache: dict[tuple[int, int], tuple[tuple[int, ...], tuple[int, ...]]] = {}
        first = self._kv_pieces(min(self.derived_max_model_len, self.block_size), 2048)
        self.worker_block_bytes = first.worker_block_bytes
        self.groups = first.groups
        self.min_block_size = first.min_block_size
        self.num_cpu_blocks = int(self.swap_space_gib * GIB // self.worker_block_bytes[0]) if self.engine == "v0" else 0

    def _load_weights(self) -> None:
        """Weights per stage, as plan.plan() loads them (the inventories weights_plan.rank_inventories builds); buffers
        sized by max_num_batched_tokens are left out here and added per point (_weights_at)."""
        from . import allocator

        plan_module, settings, release = self._plan_module, self.settings, self.release
        self.weights: list[int] = []
        self.staged: list[int] = []
        self.inventories = []
        self._token_sized = any(plan_module.batched_token_weight_bytes(self.spec, settings, stage)
                                for stage in range(self.pipeline_parallel_size))
        self._weights_by_tokens: dict[int, tuple[int, ...]] = {}
        self._weights_shift = [0] * self.pipeline_parallel_size
        for _, inventory in self._weights_plan.rank_inventories(self.spec, self.gpu, self._probe, self.version, batched_tokens=0):
            weights, _, offloaded = self._weights_plan.resident_weights(inventory, settings, release)
            self.weights.append(weights)
            self.staged.append(allocator.offloaded_layer_bytes(inventory.allocations) if offloaded else 0)
            self.inventories.append(inventory)

    # --- pieces from the engine code ------------------------------------------------------------------

    def _weights_at(self, tokens: int) -> tuple[int, ...]:
        """Each stage's weights figure at max_num_batched_tokens = tokens: the same for most models; Qwen3-VL's
        deepstack buffers grow with it (built exactly, allocator rounding included, once per distinct value)."""
        if not self._token_sized:
            base = self.weights
        else:
            base = self._weights_by_tokens.get(tokens)
            if base is None:
                base = [self._weights_plan.resident_weights(inventory, self.settings, self.release)[0]
                        for _, inventory in self._weights_plan.rank_inventories(self.spec, self.gpu, self._probe,
                                                                                 self.version, batched_tokens=tokens)]
                base = self._weights_by_tokens[tokens] = tuple(base)
        return tuple(weights - shift for weights, shift in zip(base, self._weights_shift))

    def profile_length_class(self, max_model_len: int) -> int:
        """The profile run of most models ignores max_model_len; Qwen3-VL's 0.11-0.12 dummy video is shorter
        below a 16,200-token context (profile.qwen3_vl_encoder). 0 or 1."""
        if self.spec.vision is None or self.spec.vision.kind != "qwen3_vl" or not self.release["qwen3_vl_video_profile"]:
            return 0
        return int(max_model_len >= self._profile.QWEN3_VL_SHORT_CONTEXT)

    def _st_pieces(self, seqs: int, tokens: int, max_model_len: int | None = None
                   ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """(activation peak, CUDA-graph estimate - vLLM's, or the pool where none is modelled -, weights) of each
        stage for max_num_seqs / max_num_batched_tokens (and max_model_len where the profile depends on it:
        profile_length_class)."""
        length_class = self.profile_length_class(max_model_len) if max_model_len is not None else 0
        key = (seqs, tokens, length_class)
        found = self._st_cache.get(key)
        if found is None:
            settings = replace(self.settings, max_num_seqs=seqs, max_num_batched_tokens=tokens)
            if max_model_len is not None:
                settings = replace(settings, max_model_len=max_model_len)
            last = self.pipeline_parallel_size - 1
            stages = [self._plan_module.stage_profile(self.spec, settings, self.release, self._dtype_bytes,
                                                      stage == last, self.layer_counts[stage], self.staged[stage],
                                                      self.gpu)
                      for stage in range(self.pipeline_parallel_size)]
            peaks = tuple(peak.activation_peak_bytes for peak, _ in stages)
            graphs = tuple(graph.estimate_bytes for _, graph in stages)
            found = self._st_cache[key] = (peaks, graphs, self._weights_at(tokens), self._warmup(settings))
        return found

    def _warmup(self, settings) -> int:
        """The last stage's sampler warm-up after capture plus what the profile left allocated (plan's
        _sampler_warmup_failure): 0 where no warm-up is checked (V0)."""
        if not self.release["sampler_warmup_checked"]:
            return 0
        profile_module = self._profile
        need = profile_module.sampler_warmup_bytes(self.spec, settings, self.release, self._dtype_bytes, self.gpu)
        kept = (profile_module.persistent_sampler_bytes(self.spec, settings, self.release, self.gpu)
                + profile_module.profile_workspaces(self.gpu, self.release)[0]
                + profile_module.moe_workspace_bytes(self.spec, settings, self.release, self._dtype_bytes))
        return need + kept

    def _in_flight(self, tokens: int) -> int | None:
        if not self.sliding or self.engine == "v0":
            return None  # only sliding / chunked-local groups read the tokens in flight
        return self._kv_groups.in_flight_tokens(self.release.version, tokens,
                                                pipeline_parallel_size=self.pipeline_parallel_size)

    def _kv_pieces(self, max_model_len: int, tokens: int) -> _KvPieces:
        in_flight = self._in_flight(tokens)
        # Whisper on V1 0.13+: the cross-attention layers reserve max_num_batched_tokens encoder tokens per request
        cross_tokens = tokens if self._cross_follows_tokens else None
        key = (self._kv_identity, max_model_len, in_flight, cross_tokens)
        found = _KV_CACHE.get(key)
        if found is not None:
            return found
        settings = replace(self.settings, max_model_len=max_model_len, max_num_batched_tokens=tokens)
        workers = len(self.workers)
        plan_kv = self._kv_plan.plan_kv
        layers = self.layers
        if cross_tokens is not None:
            layers, _ = self._kv_plan.attention_layers(self.spec, settings, self.release, self.layer_counts)
        probe = plan_kv(layers, self.workers, [_BIG] * workers, settings, self.release)
        needed = []
        if self.engine == "v1":
            for worker in range(workers):
                budgets = [_BIG] * workers
                budgets[worker] = 1  # this worker fails the check first: the plan reports what it needed
                needed.append(plan_kv(layers, self.workers, budgets, settings, self.release).fit_needed_bytes)
        found = _KvPieces(tuple(probe.worker_block_bytes) or (probe.block_bytes,) * workers, probe.blocks_per_request,
                          len(probe.groups), min(group.block_size for group in probe.groups), tuple(needed))
        if len(_KV_CACHE) > _KV_CACHE_LIMIT:
            _KV_CACHE.clear()
            _IDENTITIES.clear()  # numbers are never reused, so live FastPaths cannot collide with new ones
        _KV_CACHE[key] = found
        return found

    def lighten_weights(self, saved: list[int]) -> None:
        """Take `saved` bytes off each stage's weights (a lever such as 8-bit embeddings) for later points."""
        self.weights = [weights - cut for weights, cut in zip(self.weights, saved)]
        self._weights_shift = [shift + cut for shift, cut in zip(self._weights_shift, saved)]
        self._st_cache.clear()  # the per-point weights were derived from the old ones

    def valid(self, max_model_len: int, tokens: int) -> bool:
        """Settings vLLM accepts at configuration time (resolve_settings' refusals that depend on the knobs)."""
        if not 1 <= max_model_len <= self.derived_max_model_len or tokens < 1:
            return False
        rules = self._settings_module
        chunked, _ = rules.chunked_prefill(self.engine, self._chunked_given, self.spec, self.release, max_model_len)
        return not rules.v0_batch_limits_length(self.engine, chunked, tokens, max_model_len)

    # --- the combination (plan.plan's arithmetic, elementwise) -------------------------------------------

    def _combine(self, ops, utilization, max_model_len, peaks, graphs, weights, needed, blocks_per_request,
                 min_block_size, warm=0) -> dict:
        """`min_block_size`: the smallest group block of the point's KV plan (a Mamba group's block follows
        max_model_len), for the 0.9.1-0.20 'blocks // groups x block' token figure."""
        budget = self._plan_module.budget_bytes(self.total, utilization, self.release, ops.ceil, ops.trunc)
        wb = self.worker_block_bytes
        stages = range(self.pipeline_parallel_size)
        avails = [self.kv_fixed + 0 * budget if self.kv_fixed is not None else
                  budget - weights[stage] - peaks[stage] - self.non_torch_inside
                  - (graphs[stage] if self.graph_subtracted else 0)  # (the estimate)
                  for stage in stages]
        own = [ops.where(avail > 0, avail // wb[stage], 0) for stage, avail in enumerate(avails)]
        blocks, min_avail = own[0], avails[0]
        weights_ok = weights[0] <= self.total
        for stage in stages[1:]:
            blocks = ops.minimum(blocks, own[stage])
            min_avail = ops.minimum(min_avail, avails[stage])
            weights_ok = weights_ok & (weights[stage] <= self.total)
        if self.engine == "v0":
            tokens = blocks * self.block_size
            concurrency = tokens / max_model_len
            fits = (blocks > 0) & (max_model_len <= tokens)
            starts = weights_ok & fits
        else:
            tokens, concurrency = self._v1_tokens(ops, blocks if self.log_after_min else own[0], max_model_len,
                                                  blocks_per_request, min_block_size)
            fits = self._v1_fits(avails, min_avail, needed)
            starts = weights_ok & (min_avail > 0) & fits
        pools = [ops.where(avails[stage] > 0, blocks * wb[stage], 0) for stage in stages]
        held = [self._actual_graphs(ops, graphs[stage]) for stage in stages]
        if self.release["sampler_warmup_checked"]:
            # the sampler warm-up after capture on the last stage (plan._sampler_warmup_failure)
            last = stages[-1]
            free = (self.total - weights[last] - pools[last] - self.non_torch_inside - self.non_torch_outside
                    - held[last])
            starts = starts & ((pools[last] <= 0) | (warm <= free))
        per_stage = [self._plan_module.nvidia_smi_used_mib(
            self.total, self.engine, weights[stage] + self.non_torch_inside + pools[stage] + self.non_torch_outside
            + held[stage], peaks[stage], ops.minimum, ops.rint) for stage in stages]
        smi_max = per_stage[0]  # the fullest GPU (a "per GPU" ceiling binds there): every stage as plan's devices
        for smi in per_stage[1:]:
            smi_max = ops.maximum(smi_max, smi)
        return {"nvidia_smi_max_mib": smi_max, "budget_bytes": budget, "kv_cache_bytes": avails[0],
                "num_gpu_blocks": blocks, "kv_cache_tokens": tokens, "max_concurrency": concurrency,
                "starts": starts, "nvidia_smi_used_mib": per_stage[0], "activation_peak_bytes": peaks[0],
                "cuda_graph_bytes": held[0], "kv_pool_bytes": pools[0], "min_kv_cache_bytes": min_avail,
                "kv_fits": fits}

    def _actual_graphs(self, ops, graphs):
        """The graphs a stage holds once captured (the estimate x the release's actual-to-estimate ratio)."""
        return graphs if self.graph_actual_ratio == 1.0 else ops.trunc(graphs * self.graph_actual_ratio)

    def _v1_tokens(self, ops, logged, max_model_len, blocks_per_request, min_block_size):
        """(KV tokens, concurrency) as the V1 release logs them from the `logged` block count."""
        if self.tokens_rule == "blocks":
            tokens = logged * self.block_size
            return tokens, tokens / max_model_len
        concurrency = logged / blocks_per_request
        if self.tokens_rule == "blocks-per-group":
            return logged // self.groups * min_block_size, concurrency
        return ops.trunc(concurrency * max_model_len), concurrency

    def _v1_fits(self, avails, min_avail, needed):
        """Does every worker's memory hold one max_model_len request (against the global minimum, or its own
        memory less the null block, by release)?"""
        fits = True
        for worker, avail in enumerate(avails):
            if self.fit_global_min:
                against = min_avail
            else:
                against = avail - self.worker_block_bytes[worker] if self.fit_null_block else avail
            fits = fits & (avail > 0) & (needed[worker] <= against)
        return fits

    # --- public evaluation -----------------------------------------------------------------------------

    def grid(self, utilizations, max_model_lens, max_num_seqs, max_num_batched_tokens, *, use_numpy: bool = True) -> "Sweep":
        """Every combination of the four value lists (C order: utilization, max_model_len, seqs, tokens)."""
        axes = (tuple(float(u) for u in utilizations), tuple(int(v) for v in max_model_lens),
                tuple(int(v) for v in max_num_seqs), tuple(int(v) for v in max_num_batched_tokens))
        if not all(axes):
            raise ValueError("every swept knob needs at least one value")
        np = numpy_or_none() if use_numpy else None
        if np is None:
            points = list(itertools.product(*axes))
            return self._scalar_sweep(points, axes)
        us, lens, seqs, toks = axes
        n_s, n_t, n_l = len(seqs), len(toks), len(lens)
        stages = self.pipeline_parallel_size
        # one (seqs, tokens) table per profile length class, then picked per max_model_len
        classes = sorted({self.profile_length_class(length) for length in lens})
        example = {self.profile_length_class(length): length for length in lens}
        peaks = np.zeros((stages, len(classes), n_s, n_t), dtype=np.int64)
        graphs = np.zeros((stages, len(classes), n_s, n_t), dtype=np.int64)
        weights = np.zeros((stages, len(classes), n_s, n_t), dtype=np.int64)
        warm = np.zeros((len(classes), n_s, n_t), dtype=np.int64)
        for c, length_class in enumerate(classes):
            for i, seq in enumerate(seqs):
                for j, tok in enumerate(toks):
                    peaks[:, c, i, j], graphs[:, c, i, j], weights[:, c, i, j], warm[c, i, j] = self._st_pieces(
                        seq, tok, example[length_class])
        pick = np.asarray([classes.index(self.profile_length_class(length)) for length in lens])
        peaks, graphs, weights, warm = peaks[:, pick], graphs[:, pick], weights[:, pick], warm[pick]
        needed = np.zeros((stages, n_l, n_t), dtype=np.int64)
        per_request = np.ones((n_l, n_t), dtype=np.int64)
        min_block = np.full((n_l, n_t), self.min_block_size, dtype=np.int64)
        valid = np.zeros((n_l, n_t), dtype=bool)
        for i, length in enumerate(lens):
            for j, tok in enumerate(toks):
                valid[i, j] = self.valid(length, tok)
                if not valid[i, j]:
                    continue
                pieces = self._kv_pieces(length, tok)
                per_request[i, j] = pieces.blocks_per_request
                min_block[i, j] = pieces.min_block_size
                if pieces.needed:
                    needed[:, i, j] = pieces.needed
        u = np.asarray(us, dtype=np.float64).reshape(-1, 1, 1, 1)
        length = np.asarray(lens, dtype=np.int64).reshape(1, -1, 1, 1)
        out = self._combine(_NumpyOps(np), u, length,
                            [peaks[s].reshape(1, n_l, n_s, n_t) for s in range(stages)],
                            [graphs[s].reshape(1, n_l, n_s, n_t) for s in range(stages)],
                            [weights[s].reshape(1, n_l, n_s, n_t) for s in range(stages)],
                            [needed[s].reshape(1, n_l, 1, n_t) for s in range(stages)],
                            per_request.reshape(1, n_l, 1, n_t), min_block.reshape(1, n_l, 1, n_t),
                            warm.reshape(1, n_l, n_s, n_t))
        out["valid"] = valid.reshape(1, n_l, 1, n_t)
        shape = (len(us), n_l, n_s, n_t)
        flat = {key: np.broadcast_to(np.asarray(value), shape).reshape(-1) for key, value in out.items()}
        flat["starts"] = flat["starts"] & flat["valid"]
        return Sweep(self, axes, flat, is_numpy=True)

    def points(self, utilization, max_model_len, max_num_seqs, max_num_batched_tokens, *,
               use_numpy: bool = True) -> "Sweep":
        """Aligned sequences: point i is (utilization[i], max_model_len[i], max_num_seqs[i], tokens[i])."""
        points = list(zip((float(u) for u in utilization), (int(v) for v in max_model_len),
                          (int(v) for v in max_num_seqs), (int(v) for v in max_num_batched_tokens)))
        np = numpy_or_none() if use_numpy else None
        if np is None or not points:
            return self._scalar_sweep(points, None)
        stages = self.pipeline_parallel_size
        n = len(points)
        peaks = np.zeros((stages, n), dtype=np.int64)
        graphs = np.zeros((stages, n), dtype=np.int64)
        weights = np.zeros((stages, n), dtype=np.int64)
        warm = np.zeros(n, dtype=np.int64)
        needed = np.zeros((stages, n), dtype=np.int64)
        per_request = np.ones(n, dtype=np.int64)
        min_block = np.full(n, self.min_block_size, dtype=np.int64)
        valid = np.zeros(n, dtype=bool)
        for index, (_, length, seq, tok) in enumerate(points):
            peaks[:, index], graphs[:, index], weights[:, index], warm[index] = self._st_pieces(seq, tok, length)
            valid[index] = self.valid(length, tok)
            if valid[index]:
                pieces = self._kv_pieces(length, tok)
                per_request[index] = pieces.blocks_per_request
                min_block[index] = pieces.min_block_size
                if pieces.needed:
                    needed[:, index] = pieces.needed
        u = np.asarray([p[0] for p in points], dtype=np.float64)
        lengths = np.asarray([p[1] for p in points], dtype=np.int64)
        out = self._combine(_NumpyOps(np), u, lengths, list(peaks), list(graphs), list(weights), list(needed), per_request,
                            min_block, warm)
        out["valid"] = valid
        flat = {key: np.broadcast_to(np.asarray(value), (n,)).copy() for key, value in out.items()}
        flat["starts"] = flat["starts"] & flat["valid"]
        return Sweep(self, None, flat, is_numpy=True, points=points)

    def _scalar_sweep(self, points, axes) -> "Sweep":
        columns: dict[str, list] = {key: [] for key in FIGURES}
        ops = _ScalarOps()
        for utilization, length, seq, tok in points:
            ok = self.valid(length, tok)
            peaks, graphs, weights, warm = self._st_pieces(seq, tok, length)
            if ok:
                pieces = self._kv_pieces(length, tok)
                needed, per_request, min_block = pieces.needed, pieces.blocks_per_request, pieces.min_block_size
            else:
                needed, per_request, min_block = (0,) * self.pipeline_parallel_size, 1, self.min_block_size
            out = self._combine(ops, utilization, length, peaks, graphs, weights, needed, per_request, min_block, warm)
            out["valid"] = ok
            out["starts"] = bool(out["starts"]) and ok
            for key in FIGURES:
                columns[key].append(out[key])
        return Sweep(self, axes, columns, is_numpy=False, points=points if axes is None else None)

    def figures(self, utilization: float, max_model_len: int, max_num_seqs: int, max_num_batched_tokens: int) -> dict:
        """One point, as plain Python values."""
        sweep = self.points([utilization], [max_model_len], [max_num_seqs], [max_num_batched_tokens], use_numpy=False)
        return sweep.at(0)

    def user_settings(self, utilization: float, max_model_len: int, max_num_seqs: int, max_num_batched_tokens: int) -> dict:
        """The settings api.explain takes for this point."""
        out = dict(self.fixed)
        out.update(gpu_memory_utilization=float(utilization), max_model_len=int(max_model_len),
                   max_num_seqs=int(max_num_seqs), max_num_batched_tokens=int(max_num_batched_tokens))
        return out

    def concurrency_for_blocks(self, blocks: int, max_model_len: int, max_num_batched_tokens: int) -> float:
        """max_concurrency this family reports for a pool of `blocks` blocks (the inverse of the sweep)."""
        if self.engine == "v0" or self.tokens_rule == "blocks":
            return blocks * self.block_size / max_model_len
        return blocks / self._kv_pieces(max_model_len, max_num_batched_tokens).blocks_per_request


class Sweep:
    """The figures of a sweep, flat (C order over the grid axes, or in the order of the points)."""

    def __init__(self, fast_path: FastPath, axes, columns: dict, *, is_numpy: bool, points=None):
        self.fast_path = fast_path
        self.axes = axes
        self.columns = columns
        self.is_numpy = is_numpy
        self._points = points

    def __len__(self) -> int:
        return len(self.columns["starts"])

    def __getitem__(self, key: str):
        return self.columns[key]

    def setting(self, index: int) -> tuple[float, int, int, int]:
        """(gpu_memory_utilization, max_model_len, max_num_seqs, max_num_batched_tokens) of point `index`."""
        if self._points is not None:
            return self._points[index]
        us, lens, seqs, toks = self.axes
        index, t = divmod(index, len(toks))
        index, s = divmod(index, len(seqs))
        u, length = divmod(index, len(lens))
        return us[u], lens[length], seqs[s], toks[t]

    def at(self, index: int) -> dict:
        out = {}
        for key in FIGURES:
            value = self.columns[key][index]
            if hasattr(value, "item"):
                value = value.item()
            out[key] = value
        out["max_concurrency"] = float(out["max_concurrency"])
        for key in FIGURES:
            if key not in ("max_concurrency", "starts", "valid", "kv_fits"):
                out[key] = int(out[key])
        for key in ("starts", "valid", "kv_fits"):
            out[key] = bool(out[key])
        return out
