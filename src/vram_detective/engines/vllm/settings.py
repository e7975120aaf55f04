"""Resolve every engine setting the way one vLLM release would: given values win, the rest come
from that release's defaults (vllm/engine/arg_utils.py, vllm/config.py; design/vllm-memory.md §5.3, §7)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from ...errors import EngineRefused
from ...breakdown import Setting
from ...hardware import Gpu
from ...model.spec import ModelSpec
from ...units import GIB
from .releases import Release, first_release_serving

SETTING_NAMES = (
    "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "gpu_memory_utilization", "max_model_len",
    "max_num_seqs", "max_num_batched_tokens", "block_size", "kv_cache_dtype", "dtype", "quantization",
    "enforce_eager", "swap_space", "kv_cache_memory_bytes", "num_gpu_blocks_override", "entrypoint",
    "enable_chunked_prefill", "enable_expert_parallel", "cpu_offload_gb", "enable_lora", "max_loras",
    "max_lora_rank", "decode_context_parallel_size", "disable_hybrid_kv_cache_manager",
)

DTYPE_ALIASES = {
    "auto": "auto", "half": "float16", "float16": "float16", "fp16": "float16", "bfloat16": "bfloat16",
    "bf16": "bfloat16", "float": "float32", "float32": "float32", "fp32": "float32",
}
KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16")
DEFAULT_BLOCK_SIZE = 16  # CacheConfig block_size on CUDA (every release)
V0_MULTIMODAL_MIN_TOKENS = 5120  # _MULTIMODAL_MODEL_MAX_NUM_BATCHED_TOKENS (0.6.3+)


class SettingsError(ValueError):
    """A setting vLLM itself would reject (the message is one line)."""


class StartupRefusal(EngineRefused, ValueError):
    """vLLM would refuse to start at configuration time (message phrased like that release)."""

    engine_label = "vLLM"


@dataclass(frozen=True)
class EngineSettings:
    engine: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    data_parallel_size: int
    gpu_memory_utilization: float
    max_model_len: int
    derived_max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    kv_cache_dtype: str  # resolved: "bfloat16", "float16", "float32" or an fp8 name
    dtype: str  # resolved model dtype
    quantization: str | None  # resolved method name as vLLM logs it
    enforce_eager: bool
    swap_space_gib: float
    kv_cache_memory_bytes: int | None
    num_gpu_blocks_override: int | None
    entrypoint: str
    enable_chunked_prefill: bool
    enable_expert_parallel: bool
    cpu_offload_gb: float
    enable_lora: bool
    max_loras: int
    max_lora_rank: int
    given: frozenset[str]
    auto_fit_max_model_len: bool  # --max-model-len -1 (0.15+): shrink to what the KV pool holds
    reasons: tuple[tuple[str, str], ...]
    speculative: object = None  # speculative.SpeculativeConfig when a drafter is configured
    enable_prefix_caching: bool | None = None  # None: the release default
    mamba_cache_mode: str = "none"  # Mamba hybrids on V1: what prefix caching implies (kv_mamba.default_mamba_cache_mode)
    mamba_chunk_size: int | None = None  # the SSD chunk "all" mode aligns attention blocks to (None: 256)
    decode_context_parallel_size: int = 1  # --decode-context-parallel-size / -dcp (0.10.2+, inside the TP group)
    disable_hybrid_kv_cache_manager: bool = False  # --disable-hybrid-kv-cache-manager (V1 0.9.1+)

    @property
    def kv_cache_dtype_bytes(self) -> int:
        """Bytes per element; packed formats (kv_dtypes.py) are uint8 storage sized by their slots instead."""
        if self.kv_cache_dtype.startswith("fp8") or self.kv_cache_dtype not in ("bfloat16", "float16", "float32"):
            return 1  # every fp8 variant is stored as uint8 (STR_DTYPE_TO_TORCH_DTYPE)
        return 4 if self.kv_cache_dtype == "float32" else 2

    def as_settings(self) -> tuple[Setting, ...]:
        reasons = dict(self.reasons)
        out = []
        for name in SETTING_NAMES:
            value = getattr(self, name if name != "swap_space" else "swap_space_gib")
            out.append(Setting(name, value, name in self.given, reasons.get(name, "")))
        out.append(Setting("engine", self.engine, "engine" in self.given, reasons.get("engine", "")))
        return tuple(out)


def derive_max_model_len(spec: ModelSpec, release: Release) -> tuple[int, str]:
    """_get_and_verify_max_len: the smallest length key, times the RoPE factor for the kinds vLLM scales."""
    keys = dict(spec.max_len_keys)
    if keys:
        key, length = min(keys.items(), key=lambda item: item[1])
        reason = f"config {key}={length}"
    else:
        length, reason = 2048, "no length key in config.json: vLLM's fallback 2048"
    scaling = spec.rope_scaling
    if scaling is not None and scaling.kind not in ("su", "longrope", "llama3") and spec.family != "gemma3":
        if scaling.kind == "yarn":
            if release["yarn_scales_max_len"]:
                original = scaling.original_max_position or length
                length = int(original * scaling.factor)
                reason += f"; yarn: original {original} x factor {scaling.factor:g}"
        elif scaling.factor != 1.0:
            length = int(length * scaling.factor)
            reason += f"; rope_scaling {scaling.kind} x {scaling.factor:g}"
    return length, reason


def resolve_dtype(requested: str, spec: ModelSpec, gpu: Gpu, release: Release) -> tuple[str, str]:
    config_dtype = spec.torch_dtype
    if requested != "auto":
        dtype = DTYPE_ALIASES[requested]
        if dtype == "bfloat16" and not gpu.supports_bf16:
            raise StartupRefusal(_bf16_refusal(gpu))
        return dtype, "given"
    if release["dtype_resolution"] in ("config", "config-fallback"):
        # <=0.9.0: the checkpoint's dtype; fp32 checkpoints are served in fp16 (Gemma 2 in bf16)
        if config_dtype == "float32":
            dtype = "bfloat16" if spec.family == "gemma2" else "float16"
            reason = f"auto: float32 checkpoint served as {dtype}"
        else:
            dtype, reason = config_dtype, f"auto: checkpoint torch_dtype {config_dtype}"
        if dtype == "bfloat16" and not gpu.supports_bf16:
            if release["dtype_resolution"] == "config":
                raise StartupRefusal(_bf16_refusal(gpu))  # <= 0.8.5: worker.py _check_if_gpu_supports_dtype
            dtype, reason = "float16", "auto: bfloat16 is not supported on this GPU, falls back to float16 (0.9.0)"
        return dtype, reason
    # 0.9.1+: _resolve_auto_dtype picks the first dtype the platform supports
    supported = ("bfloat16", "float16", "float32") if gpu.supports_bf16 else ("float16", "float32")
    if config_dtype == "float32":
        dtype = supported[0]
        reason = f"auto: float32 checkpoint -> {dtype} on this GPU"
    elif config_dtype in supported:
        dtype, reason = config_dtype, f"auto: checkpoint torch_dtype {config_dtype}"
    else:
        dtype, reason = "float16", "auto: bfloat16 is not supported on this GPU, cast to float16"
    if dtype == "float16" and spec.forbids_fp16:
        dtype, reason = "float32", f"auto: {spec.family} does not allow float16 and the GPU has no bfloat16"
    return dtype, reason


def _bf16_refusal(gpu: Gpu) -> str:
    major, minor = gpu.compute_capability
    return (
        "Bfloat16 is only supported on GPUs with compute capability of at least 8.0. "
        f"Your {gpu.name} GPU has compute capability {major}.{minor}. You can use float16 instead by "
        "explicitly setting the `dtype` flag in CLI, for example: --dtype=half."
    )


def pick_engine(release: Release, gpu: Gpu, requested: str | None) -> tuple[str, str]:
    if requested:
        if requested == "v0" and not release["v0_available"]:
            raise SettingsError(f"vLLM {release.label} has no V0 engine (removed in 0.11.0)")
        if requested == "v1" and not release["v1_available"]:
            raise SettingsError(f"vLLM {release.label} has no V1 engine (V1 first appeared as an alpha in 0.6.4)")
        return requested, "given"
    engine = str(release["default_engine"])
    if engine == "v1" and gpu.compute_capability[0] < 8 and release["v1_falls_back_below_sm80"]:
        return "v0", f"V1 unsupported on compute capability {gpu.compute_capability[0]}.x: falls back to V0"
    return engine, f"default engine of vLLM {release.label}"


def batch_defaults(release: Release, engine: str, gpu: Gpu, entrypoint: str, max_model_len: int,
                   chunked_prefill: bool) -> tuple[int, int, str]:
    """(max_num_batched_tokens, max_num_seqs, reason) before the user's values are applied."""
    if engine == "v0":
        if chunked_prefill:
            tokens = int(release["v0_chunked_prefill_tokens"])
            return tokens, 256, "V0 chunked prefill default"
        return max(max_model_len, 2048), 256, "V0: max(max_model_len, 2048), 256 sequences"
    total = gpu.cuda_total_bytes
    rule = release["batch_defaults"]
    big = total >= rule.large_from_gib * GIB
    if not rule.a100_large:
        big = big and not gpu.is_a100  # #17885: A100 keeps the small defaults
    llm = entrypoint == "llm"
    if rule.serve_large_from_gib is not None and total >= rule.serve_large_from_gib * GIB:
        return 16384, 1024, f"V1 >= {rule.serve_large_from_gib} GiB GPU defaults"
    if big:
        return (16384 if llm else 8192), 1024, f"V1 >= {rule.large_from_gib} GiB GPU defaults"
    return (8192 if llm else 2048), 256, f"V1 defaults for GPUs under {rule.large_from_gib} GiB (or A100)"


def resolve_settings(user: dict, spec: ModelSpec, gpu: Gpu, release_for, version) -> tuple[EngineSettings, Release]:
    """`user`: snake_case vLLM settings that were given. `release_for(version, engine)` builds rules.
    The checks run in the order vLLM meets them, so the first refusal is the one vLLM raises."""
    given = {key for key, value in user.items() if value is not None}
    reasons: dict[str, str] = {}
    check_amounts(user)
    engine, release, speculative = _engine_and_release(user, spec, gpu, release_for, version, given, reasons)
    tp, pp, dcp = _parallel_sizes(user, spec, release)
    utilization = _utilization(user.get("gpu_memory_utilization"), release, reasons)
    dtype = _dtype(user.get("dtype"), spec, gpu, release, reasons)
    derived, max_model_len, auto_fit = _max_model_len(user.get("max_model_len"), spec, gpu, release, engine, reasons)
    entrypoint, chunked, max_num_seqs, max_num_batched_tokens = _scheduler(user, spec, gpu, release, engine,
                                                                           max_model_len, reasons)
    resolved_kv, forced_block = _kv_cache_dtype(str(user.get("kv_cache_dtype") or "auto").lower(), user, spec, gpu,
                                                release, engine, dtype, reasons)
    swap = _swap_space(user.get("swap_space"), release, engine, reasons)
    disable_hybrid = _disable_hybrid(user.get("disable_hybrid_kv_cache_manager"), release, engine)
    max_loras = _max_loras(user.get("max_loras"), user.get("max_cpu_loras"), reasons)
    kv_bytes = _kv_cache_memory_bytes(user.get("kv_cache_memory_bytes"), release, engine)
    block_size = _block_size(user.get("block_size"), forced_block, spec, gpu, release, reasons)

    return EngineSettings(
        engine=engine,
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        data_parallel_size=int(user.get("data_parallel_size") or 1),
        gpu_memory_utilization=utilization,
        max_model_len=max_model_len,
        derived_max_model_len=derived,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        block_size=block_size,
        kv_cache_dtype=resolved_kv,
        dtype=dtype,
        quantization=user.get("quantization"),
        enforce_eager=bool(user.get("enforce_eager") or False),
        swap_space_gib=float(swap),
        kv_cache_memory_bytes=int(kv_bytes) if kv_bytes is not None else None,
        num_gpu_blocks_override=int(user["num_gpu_blocks_override"]) if user.get("num_gpu_blocks_override") else None,
        entrypoint=entrypoint,
        enable_chunked_prefill=bool(chunked),
        enable_expert_parallel=bool(user.get("enable_expert_parallel")) and spec.moe is not None,
        cpu_offload_gb=float(user.get("cpu_offload_gb") or 0.0),
        enable_lora=bool(user.get("enable_lora")),
        max_loras=max_loras,
        max_lora_rank=int(user.get("max_lora_rank") or 16),
        given=frozenset(given),
        auto_fit_max_model_len=auto_fit,
        reasons=tuple(sorted(reasons.items())),
        speculative=speculative,
        enable_prefix_caching=user.get("enable_prefix_caching"),
        mamba_cache_mode=_mamba_cache_mode(spec, release, engine, user.get("enable_prefix_caching")),
        mamba_chunk_size=_mamba_chunk_size(spec),
        decode_context_parallel_size=dcp,
        disable_hybrid_kv_cache_manager=disable_hybrid,
    ), release


def _scheduler(user: dict, spec: ModelSpec, gpu: Gpu, release: Release, engine: str, max_model_len: int,
               reasons: dict[str, str]) -> tuple[str, bool, int, int]:
    """The entrypoint, chunked prefill and batch sizes; refuses a V0 batch token limit below max_model_len."""
    entrypoint = _entrypoint(user.get("entrypoint"))
    chunked, chunked_reason = chunked_prefill(engine, user.get("enable_chunked_prefill"), spec, release, max_model_len)
    if chunked_reason:
        reasons["enable_chunked_prefill"] = chunked_reason
    max_num_seqs, max_num_batched_tokens = _batch_sizes(user, release, engine, gpu, entrypoint, max_model_len, chunked,
                                                        reasons)
    if v0_batch_limits_length(engine, chunked, max_num_batched_tokens, max_model_len):
        raise StartupRefusal(
            f"max_num_batched_tokens ({max_num_batched_tokens}) is smaller than max_model_len ({max_model_len}). "
            "This effectively limits the maximum sequence length to max_num_batched_tokens and makes vLLM "
            "reject longer sequences. Please increase max_num_batched_tokens or decrease max_model_len."
        )
    return entrypoint, chunked, max_num_seqs, max_num_batched_tokens


# --- values no release takes ---------------------------------------------------------------------------

# GiB amounts vLLM reads as floats, with its own check (CacheConfig: swap_space and cpu_offload_gb are declared
# ge=0, config/cache.py 0.10.2+; "CPU offload space must be non-negative" and "Too large swap space" in
# config.py before). A NaN fails ge=0 there; an infinity passes it and then crashes int(gb * GiB) (OverflowError
# in model_executor/models/utils.py set_cpu_offload_max_bytes): refused here with the reason.
GIB_AMOUNTS = {"cpu_offload_gb": "--cpu-offload-gb", "swap_space": "--swap-space"}
# whole numbers vLLM turns into tensor sizes (int64); no GPU holds that many blocks or bytes
MAX_INT64 = (1 << 63) - 1


def check_amounts(user: dict) -> None:
    """Refuse amounts every release refuses (SettingsError, one line) before anything is sized."""
    for key, flag in GIB_AMOUNTS.items():
        value = user.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SettingsError(f"{flag} must be a number of GiB, got {value!r}")
        if not value >= 0:  # NaN fails too
            raise SettingsError(f"{flag} must be non-negative (vLLM: Input should be greater than or equal to 0), "
                                f"got {value}")
        if not math.isfinite(value) or value * GIB > MAX_INT64:
            raise SettingsError(f"{flag} {value}: more GiB than vLLM can count (int(gb * GiB) overflows)")
    for key in POSITIVE_COUNTS:
        value = user.get(key)
        if value is None or isinstance(value, bool) or not isinstance(value, int):
            continue
        if value > MAX_INT64:
            raise SettingsError(f"{key} {value} does not fit in a 64-bit integer (the tensor sizes vLLM builds)")
        if value < 1 and not (key == "max_model_len" and value == -1):
            raise SettingsError(f"{key} must be a positive integer, got {value}")


# counts vLLM's argument parser and configs take as positive integers (EngineArgs / SchedulerConfig /
# CacheConfig / LoRAConfig fields; max_model_len also takes -1, auto-fit from 0.15)
POSITIVE_COUNTS = ("num_gpu_blocks_override", "kv_cache_memory_bytes", "max_num_seqs", "max_num_batched_tokens",
                   "max_model_len", "num_speculative_tokens", "max_loras", "max_lora_rank", "max_cpu_loras",
                   "data_parallel_size", "decode_context_parallel_size", "tensor_parallel_size",
                   "pipeline_parallel_size", "block_size")


# --- the engine and its rules ---------------------------------------------------------------------------


def _engine_and_release(user: dict, spec: ModelSpec, gpu: Gpu, release_for, version, given: set,
                        reasons: dict) -> tuple[str, Release, object]:
    """(engine, its release rules, the speculative config): the release default, then the model's and the
    drafter's fallbacks to V0; refuses architectures the release does not serve."""
    engine, reasons["engine"] = pick_engine(release_for(version, None), gpu, user.get("engine"))
    release = release_for(version, engine)
    newer = first_release_serving(spec.architecture, release.version)
    if newer is not None:
        raise StartupRefusal(f"Model architectures ['{spec.architecture}'] are not supported for now "
                             f"({newer[1]} first appears in vLLM {newer[0].label})")
    for fallback_of in (_mllama_fallback, _whisper_fallback):
        fallback = fallback_of(spec, release, engine, given)
        if fallback:
            engine, reasons["engine"] = "v0", fallback
            release = release_for(version, engine)
    speculative = _speculative(user)
    if speculative is not None:
        from .speculative import check, falls_back_to_v0

        if engine == "v1" and "engine" not in given and falls_back_to_v0(speculative, release.version):
            engine, reasons["engine"] = "v0", "a speculative draft model is not supported by V1 here: falls back to V0"
            release = release_for(version, engine)
        problem = check(speculative, spec, engine, release.version)
        if problem:
            raise StartupRefusal(problem)
        reasons["speculative_config"] = speculative.describe()
    return engine, release, speculative


def _mllama_fallback(spec: ModelSpec, release: Release, engine: str, given: set) -> str | None:
    """Why a V1 default falls back to V0 for Mllama (None: it does not); refusals where it cannot.
    Mllama is SupportsV0Only (mllama.py up to 0.10.2) and gone from 0.11 (registry _PREVIOUSLY_SUPPORTED_MODELS
    "MllamaForConditionalGeneration": "0.10.2"); V1 defaults fall back to V0 for it (_is_v1_supported_oracle)."""
    if spec.vision is None or spec.vision.kind != "mllama":
        return None
    if not release["serves_mllama"]:
        raise StartupRefusal(f"{spec.architecture} was supported in vLLM until 0.10.2 (removed in 0.11)")
    if engine != "v1":
        return None
    if "engine" in given:
        raise StartupRefusal(f"{spec.architecture} is V0-only (SupportsV0Only): the V1 engine refuses it")
    return f"{spec.architecture} is V0-only: V1 falls back to V0"


def _whisper_fallback(spec: ModelSpec, release: Release, engine: str, given: set) -> str | None:
    """The same for Whisper: model_executor/models/whisper.py from 0.7.0; SupportsV0Only until 0.10.1, so a V1
    default falls back to V0 and VLLM_USE_V1=1 raises (engine/arg_utils.py _raise_or_fallback); V1 from 0.10.2."""
    if spec.encoder is None:
        return None
    if not release["serves_whisper"]:
        raise StartupRefusal(f"Model architectures ['{spec.architecture}'] are not supported for now "
                             "(whisper.py first appears in vLLM 0.7.0)")
    if engine != "v1" or release["whisper_on_v1"]:
        return None
    if "engine" in given:
        raise StartupRefusal(f"VLLM_USE_V1=1 is not supported with ['{spec.architecture}'].")
    return f"{spec.architecture} is V0-only before 0.10.2: V1 falls back to V0"


# --- one setting each -----------------------------------------------------------------------------------


def _parallel_sizes(user: dict, spec: ModelSpec, release: Release) -> tuple[int, int, int]:
    """(tensor, pipeline, decode-context) parallel sizes, checked against the model and the release."""
    tp = int(user.get("tensor_parallel_size") or 1)
    pp = int(user.get("pipeline_parallel_size") or 1)
    if tp < 1 or pp < 1:
        raise SettingsError("tensor/pipeline parallel sizes must be at least 1")
    if spec.num_attention_heads % tp:
        raise StartupRefusal(
            f"Total number of attention heads ({spec.num_attention_heads}) must be divisible by tensor parallel size ({tp})."
        )
    if pp > spec.num_layers:
        raise SettingsError(f"pipeline_parallel_size {pp} exceeds the model's {spec.num_layers} layers")
    dcp = int(user.get("decode_context_parallel_size") or 1)
    if dcp > 1:
        # arg_utils.py: --decode-context-parallel-size / -dcp from 0.10.2; it splits the TP group (no extra GPUs)
        if not release["decode_context_parallel_flag"]:
            raise SettingsError(f"--decode-context-parallel-size does not exist before vLLM 0.10.2 (this is {release.label})")
        if tp % dcp:
            raise StartupRefusal(f"tp_size={tp} must be divisible bydcp_size={dcp}.")  # arg_utils assert, verbatim
    return tp, pp, dcp


def _utilization(given, release: Release, reasons: dict) -> float:
    if given is None:
        given = float(release["default_gpu_memory_utilization"])
        reasons["gpu_memory_utilization"] = f"default of vLLM {release.label}"
    utilization = float(given)
    if not 0 < utilization <= 1:
        raise SettingsError(f"gpu_memory_utilization must be in (0, 1], got {utilization}")
    return utilization


def _dtype(given, spec: ModelSpec, gpu: Gpu, release: Release, reasons: dict) -> str:
    requested = str(given or "auto").lower()
    if requested not in DTYPE_ALIASES:
        raise SettingsError(f"unknown dtype {requested!r} (auto, half, float16, bfloat16, float, float32)")
    dtype, reasons["dtype"] = resolve_dtype(requested, spec, gpu, release)
    return dtype


def _max_model_len(given, spec: ModelSpec, gpu: Gpu, release: Release, engine: str,
                   reasons: dict) -> tuple[int, int, bool]:
    """(derived max_model_len, the one served, auto-fit): the config's length, capped by a sliding window the
    backend cannot serve, then the user's value checked against it (-1: auto-fit, 0.15+)."""
    derived, reasons["max_model_len"] = derive_max_model_len(spec, release)
    if spec.attention_facts is not None:
        from .kv_layers import sliding_window_max_len_cap

        # V0's default attention backend is xFormers below sm80, FlashAttention above (selector.py)
        backend = "XFORMERS" if engine == "v0" and gpu.compute_capability < (8, 0) else "FLASH_ATTN"
        cap, warning = sliding_window_max_len_cap(spec.attention_facts, release.version, engine, backend)
        if cap and cap < derived:
            derived = cap
            reasons["max_model_len"] += f"; capped to the sliding window: {warning}"
    auto_fit = given == -1
    if auto_fit and not release["max_model_len_auto_fit"]:
        raise SettingsError(f"--max-model-len -1 (auto-fit) needs vLLM 0.15 or newer on V1 (this is {release.label})")
    if given is None or auto_fit:
        if auto_fit:
            reasons["max_model_len"] = "-1: auto-fit to the KV pool, at most " + reasons["max_model_len"]
        return derived, derived, auto_fit
    if int(given) > derived:
        raise StartupRefusal(
            f"User-specified max_model_len ({given}) is greater than the derived max_model_len "
            f"(max_position_embeddings={derived} or model_max_length=None in model's config.json). "
            "To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."
        )
    return derived, int(given), False


def _entrypoint(given) -> str:
    entrypoint = str(given or "serve").lower()
    if entrypoint not in ("serve", "llm"):
        raise SettingsError(f"entrypoint must be serve or llm, got {entrypoint!r}")
    return entrypoint


def chunked_prefill(engine: str, given, spec: ModelSpec, release: Release, max_model_len: int) -> tuple[bool, str]:
    """(chunked prefill on, the reason when it was not given). V1 always chunks prefills
    (_set_default_args_v1); V0 turns it on for contexts > 32K without sliding window (arg_utils.py 0.5-0.10).
    The advisor's sweep asks this per max_model_len."""
    if engine == "v1":
        return True, ""
    if given is not None:
        return bool(given), ""
    chunked = max_model_len > 32768 and not spec.sliding_window and bool(release["v0_auto_chunked_prefill"])
    return chunked, "V0: on automatically above 32K context" if chunked else "V0 default off"


def v0_batch_limits_length(engine: str, chunked: bool, max_num_batched_tokens: int, max_model_len: int) -> bool:
    """V0 without chunked prefill refuses a batch smaller than one max_model_len prompt (arg_utils / SchedulerConfig
    _verify_args); the sweep marks such points invalid."""
    return engine == "v0" and not chunked and max_num_batched_tokens < max_model_len


def _batch_sizes(user: dict, release: Release, engine: str, gpu: Gpu, entrypoint: str, max_model_len: int,
                 chunked: bool, reasons: dict) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens): given values, else the release's defaults for this GPU."""
    tokens_default, seqs_default, batch_reason = batch_defaults(release, engine, gpu, entrypoint, max_model_len, chunked)
    max_num_seqs = user.get("max_num_seqs")
    if max_num_seqs is None:
        max_num_seqs = seqs_default
        reasons["max_num_seqs"] = batch_reason
    max_num_batched_tokens = user.get("max_num_batched_tokens")
    if max_num_batched_tokens is None:
        max_num_batched_tokens = tokens_default
        reasons["max_num_batched_tokens"] = batch_reason
        if release["batched_tokens_capped_by_seqs"]:
            # 0.11+ (V1): never more than max_num_seqs * max_model_len
            max_num_batched_tokens = min(max_num_batched_tokens, int(max_num_seqs) * max_model_len)
    return int(max_num_seqs), int(max_num_batched_tokens)


def _swap_space(given, release: Release, engine: str, reasons: dict) -> float:
    if given is None:
        reasons["swap_space"] = "V0 default 4 GiB per GPU" if engine == "v0" else "V1 keeps no CPU swap blocks"
        return float(release["swap_space_gib"])
    if engine == "v1":
        reasons["swap_space"] = "ignored by V1 (no CPU swap blocks)"
        return 0.0
    return given


def _disable_hybrid(given, release: Release, engine: str) -> bool:
    disable_hybrid = bool(given)
    if disable_hybrid and not release["disable_hybrid_kv_cache_manager_flag"]:
        # the flag arrives with the hybrid allocator (engine/arg_utils.py 0.9.1, V1 only)
        raise SettingsError(f"--disable-hybrid-kv-cache-manager needs vLLM 0.9.1 or newer on V1 (this is "
                            f"{release.label} {engine.upper()})")
    return disable_hybrid


def _max_loras(given, max_cpu_loras, reasons: dict) -> int:
    max_loras = int(given or 1)  # LoRAConfig defaults
    if max_cpu_loras is not None and int(max_cpu_loras) < max_loras:
        # LoRAConfig.__post_init__ (every release with --max-cpu-loras): the CPU cache holds the GPU slots' adapters
        raise StartupRefusal(f"max_cpu_loras ({max_cpu_loras}) must be >= max_loras ({max_loras})")
    if max_cpu_loras is not None:
        reasons["max_loras"] = f"--max-cpu-loras {max_cpu_loras}: adapters cached in CPU memory, none on the GPU"
    return max_loras


def _kv_cache_memory_bytes(given, release: Release, engine: str):
    if given is not None and not release["kv_cache_memory_bytes_flag"]:
        raise SettingsError(f"--kv-cache-memory-bytes needs vLLM 0.10.2 or newer on V1 (this is {release.label} {engine.upper()})")
    return given


def _block_size(given, forced_block: int | None, spec: ModelSpec, gpu: Gpu, release: Release, reasons: dict) -> int:
    """The given block size (16 by default), raised for a packed KV format and forced by MLA backends."""
    block_size = int(given or DEFAULT_BLOCK_SIZE)
    if block_size <= 0 or block_size % 8 and block_size not in (1, 2, 4):
        raise SettingsError(f"block_size must be a positive multiple of 8 (or 1, 2, 4), got {block_size}")
    if forced_block and forced_block != block_size:
        block_size = forced_block
        reasons["block_size"] = (f"raised to {forced_block}: the model-dtype boundary layers' page against the packed "
                                 "one (platforms/interface.py _align_heterogeneous_kv_block_size, 0.25+)")
    if spec.mla is not None and spec.mla.indexer_topk:
        # platforms/cuda.py check_and_update_config (0.11.0+): "Forcing kv cache block size to 64 for FlashMLASparse"
        reasons["block_size"] = "forced to 64 by the FlashMLA sparse backend (DeepSeek-V3.2)"
        return 64
    if spec.mla is not None:
        forced = release["mla_block_size_sm100"] if gpu.compute_capability[0] >= 10 else (
            release["mla_block_size_sm90"] if gpu.compute_capability == (9, 0) else None)
        if forced:
            reasons["block_size"] = f"forced to {forced} by the MLA attention backend on this GPU"
            return int(forced)
    return block_size


def _kv_cache_dtype(kv_dtype: str, user: dict, spec: ModelSpec, gpu: Gpu, release: Release, engine: str, dtype: str,
                    reasons: dict) -> tuple[str, int | None]:
    """(the cache format vLLM ends up with, the block size a packed format forces or None)."""
    from . import kv_dtypes

    if kv_dtype not in KV_CACHE_DTYPES and not kv_dtypes.is_packed(kv_dtype):
        raise SettingsError(f"kv_cache_dtype {kv_dtype!r} is not sized yet ({', '.join(KV_CACHE_DTYPES + kv_dtypes.names())})")
    resolved = dtype if kv_dtype == "auto" else kv_dtype
    reasons["kv_cache_dtype"] = "auto: the model dtype" if kv_dtype == "auto" else "given"
    if spec.mla is not None and spec.mla.indexer_topk and (kv_dtype == "auto" or kv_dtype.startswith("fp8")):
        # models/config.py DeepseekV32ForCausalLM.verify_and_update_config (0.11.0+): auto and fp8 become DeepSeek's
        # fp8_ds_mla layout (656 B per token: 512 fp8 + 4 fp32 scales + 64 bf16 rope); only "bfloat16" keeps 16 bit
        reasons["kv_cache_dtype"] = f"{kv_dtype} -> fp8_ds_mla (DeepSeek-V3.2's custom fp8 format)"
        return "fp8_ds_mla", None
    if not kv_dtypes.is_packed(kv_dtype):
        return resolved, None
    if engine != "v1":
        raise SettingsError(f"--kv-cache-dtype {kv_dtype} needs the V1 engine")
    sliding = bool(spec.sliding_window) or any(kind == "sliding" for kind, _ in _layer_kinds(spec, release))
    problem = kv_dtypes.refusal(kv_dtype, release.version, mla=spec.mla is not None, sinks=spec.attention_sinks,
                                sliding=sliding, hybrid=spec.hybrid is not None,
                                compute_capability=gpu.compute_capability, dtype=dtype)
    if problem:
        raise StartupRefusal(problem)
    if spec.hybrid is not None:
        raise SettingsError(f"--kv-cache-dtype {kv_dtype} on a Mamba / linear-attention hybrid is not sized yet")
    boundary = kv_dtypes.boundary_layers(kv_dtype, spec.num_layers, False)
    if boundary:
        reasons["kv_cache_dtype"] = f"given; layers {', '.join(map(str, boundary))} stay in {dtype} (TurboQuant boundary layers)"
    return resolved, kv_dtypes.forced_block_size(kv_dtype, int(user.get("block_size") or DEFAULT_BLOCK_SIZE),
                                                 release.version, False)


def _layer_kinds(spec: ModelSpec, release: Release) -> list[tuple[str, int | None]]:
    if spec.attention_facts is None:
        return []
    from .kv_layers import SlidingWindowRefusal, layer_kinds

    try:
        return layer_kinds(spec.attention_facts, version=release.version)
    except SlidingWindowRefusal:
        return []


def _mamba_chunk_size(spec: ModelSpec) -> int | None:
    """ModelConfig.get_mamba_chunk_size (0.11.2+): mamba_chunk_size, else chunk_size, else 2048 - which is what
    Jamba (Mamba1, no chunk attribute in JambaConfig) gets; None leaves kv_groups' 256 (the HF config-class
    default of Bamba / GraniteMoeHybrid / Falcon-H1 when config.json omits it)."""
    if spec.mamba_chunk_size is None and spec.family == "jamba":
        return 2048
    return spec.mamba_chunk_size


def _mamba_cache_mode(spec: ModelSpec, release: Release, engine: str, enable_prefix_caching) -> str:
    if spec.hybrid is None or engine != "v1":
        return "none"
    from .kv_mamba import default_mamba_cache_mode

    return default_mamba_cache_mode(spec.architecture, release.version, enable_prefix_caching)


def _speculative(user: dict):
    """--speculative-config (JSON or dict) and the 0.4-0.9 --speculative-model / --num-speculative-tokens flags."""
    from .speculative import SpeculativeConfigError, catalog_spec, parse_speculative_config, with_draft_spec

    try:
        config = parse_speculative_config(user.get("speculative_config"), user.get("speculative_model"),
                                          user.get("num_speculative_tokens"),
                                          user.get("speculative_draft_tensor_parallel_size"))
    except SpeculativeConfigError as error:
        raise SettingsError(str(error)) from None
    return with_draft_spec(config, catalog_spec) if config is not None else None
