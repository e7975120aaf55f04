"""llama.cpp settings as a build resolves them (common/common.h defaults, llama-server's -np auto, the FA
auto switch), in llama.cpp's own names (snake_case, as shared/groundtruth/SCHEMA.md lists them).

Every default that changed by build comes from releases.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ...errors import EngineRefused
from ...input_checks import check_counts
from .ggml_types import BY_NAME, is_quantized
from .quant_mix import BASE_TYPE
from .releases import rule

ALL_LAYERS = 10**6  # -ngl all / auto / 999: more than any model has


class SettingsError(ValueError):
    """A value llama.cpp rejects at the command line."""


class StartupRefusal(EngineRefused, RuntimeError):
    """llama.cpp would exit at context creation (e.g. a quantized V cache without flash attention)."""

    engine_label = "llama.cpp"


@dataclass(frozen=True)
class LlamaCppSettings:
    build: int
    n_gpu_layers: int  # resolved count (ALL_LAYERS = every layer and the output)
    n_ctx: int  # 0 = the model's training context
    n_parallel: int
    n_batch: int
    n_ubatch: int
    type_k: str
    type_v: str
    flash_attn: str  # "on", "off", "auto" as given; see flash_attention()
    kv_unified: bool | None  # None: the build's default
    swa_full: bool
    kv_offload: bool
    mmap: bool
    num_gpus: int
    tensor_split: tuple[float, ...]
    split_mode: str  # layer | row | none
    main_gpu: int
    override_tensor: tuple[str, ...]  # "regex=BUFFER" as given
    n_cpu_moe: int
    gguf_type: str  # the llama.cpp mix used without a file ("Q4_K_M")
    embeddings: bool
    device_free_mib: tuple[int, ...] = ()  # free memory per device (sets the default split)
    mmproj: str = ""  # --mmproj FILE.gguf (a vision projector; mmproj.py)
    mmproj_offload: bool = True  # --no-mmproj-offload keeps it on the CPU
    gguf_mla_split: bool = True  # without a file: an MLA model's GGUF carries attn_k_b/attn_v_b (not attn_kv_b)
    repack: bool = True  # --no-repack / -nr (use_extra_bufts = false): no CPU_REPACK buffer
    gguf_order: str = "quantize"  # without a file: llama-quantize's tensor order, or "convert" (2023 files)
    given: frozenset = field(default_factory=frozenset)

    @property
    def cpu_overrides(self) -> tuple[str, ...]:
        """-ot patterns sent to the CPU buffer (others name a device: kept as given, not modelled)."""
        return tuple(p.rsplit("=", 1)[0] for p in self.override_tensor if p.rsplit("=", 1)[-1].upper() == "CPU")

    @property
    def device_overrides(self) -> tuple[tuple[str, str], ...]:
        """-ot patterns naming a GPU buffer (CUDA1, CUDA1_Host is host memory: left to the CPU rule)."""
        out = []
        for pattern in self.override_tensor:
            rx, _, target = pattern.rpartition("=")
            if target.upper().startswith("CUDA") and target[4:].isdigit():
                out.append((rx, f"CUDA{int(target[4:])}"))
        return tuple(out)


DEFAULTS = {"n_batch": 2048, "n_ubatch": 512, "type_k": "f16", "type_v": "f16", "swa_full": False,
            "kv_offload": True, "mmap": True, "num_gpus": 1, "tensor_split": (), "split_mode": "layer",
            "main_gpu": 0, "override_tensor": (), "n_cpu_moe": 0, "gguf_type": "Q4_K_M", "embeddings": False,
            "kv_unified": None, "device_free_mib": (), "mmproj": "", "mmproj_offload": True, "gguf_mla_split": True, "repack": True,
            "gguf_order": "quantize"}
KNOWN = set(DEFAULTS) | {"n_gpu_layers", "n_ctx", "n_parallel", "flash_attn", "cpu_moe"}


_TOKENS = 1 << 32  # more tokens than any model's context
# llama.cpp's whole-number flags (common/arg.cpp): setting -> (flag, lowest, highest, also allowed). -c 0 is the
# model's own context; -np -1 / auto and -ngl -1 / all / auto are the builds' "choose for me"; the upper bounds are
# past any real value (a slot, layer or device count iterated over)
COUNT_RANGES = {
    "n_ctx": ("-c/--ctx-size", 0, _TOKENS, ()), "n_parallel": ("-np/--parallel", 1, 1 << 16, (-1, "auto")),
    "n_batch": ("-b/--batch-size", 1, _TOKENS, ()), "n_ubatch": ("-ub/--ubatch-size", 1, _TOKENS, ()),
    "n_gpu_layers": ("-ngl/--n-gpu-layers", -1, 1 << 20, ("all", "auto")),
    "num_gpus": ("-dev/--device (devices)", 0, 1 << 12, ()),  # 0: -dev none / a CPU-only build "main_gpu": ("-mg/--main-gpu", 0, 1 << 12, ()),
    "n_cpu_moe": ("--n-cpu-moe", 0, 1 << 20, ()),
}


def _check_values(user: dict) -> None:
    check_counts(user, COUNT_RANGES, SettingsError)
    for key, flag in (("tensor_split", "-ts/--tensor-split"), ("device_free_mib", "device free MiB")):
        for value in user.get(key) or ():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1 << 40:
                raise SettingsError(f"{flag}: each value must be a non-negative number, got {str(value)[:40]}")


def _ngl(value, build: int) -> int:
    if value is None:
        value = rule("ngl.default", build)
    if isinstance(value, str):
        if value.lower() in ("all", "auto"):
            return ALL_LAYERS
        value = int(value)
    if value < 0:
        return ALL_LAYERS if rule("ngl.minus_one", build) == "all" else 0
    return int(value)


def _flash(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "on" if value else "off"
    text = str(value).lower()
    table = {"on": "on", "1": "on", "true": "on", "enabled": "on", "off": "off", "0": "off", "false": "off",
             "disabled": "off", "auto": "auto"}
    if text not in table:
        raise SettingsError(f"flash_attn {value!r}: expected on, off or auto")
    return table[text]


def _kv_type(value: str) -> str:
    name = str(value).lower()
    if name.upper() not in BY_NAME:
        raise SettingsError(f"cache type {value!r}: not a ggml type (f16, bf16, f32, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl)")
    return name


def resolve(user: dict, build: int) -> LlamaCppSettings:
    """The settings a build runs with: the user's values over that build's defaults."""
    unknown = set(user) - KNOWN
    if unknown:
        raise SettingsError(f"unknown llama.cpp setting(s): {', '.join(sorted(unknown))}")
    _check_values(user)
    values = {**DEFAULTS, **{k: v for k, v in user.items() if v is not None}}
    n_cpu_moe = ALL_LAYERS if user.get("cpu_moe") else int(values["n_cpu_moe"])
    gguf_type = str(values["gguf_type"]).upper()
    if gguf_type not in BASE_TYPE:
        raise SettingsError(f"gguf_type {gguf_type}: stock mixes modelled are {', '.join(BASE_TYPE)}")
    n_parallel = user.get("n_parallel")
    if n_parallel in (None, "auto", -1):
        n_parallel = rule("server.n_parallel_default", build)
    kv_unified = values["kv_unified"]
    if kv_unified is None and user.get("n_parallel") in (None, "auto", -1) and n_parallel > 1:
        kv_unified = True  # llama-server -np auto sets kv_unified = true with n_parallel = 4
    n_ctx = user.get("n_ctx")
    if "num_gpus" not in user and values["tensor_split"]:
        values["num_gpus"] = len(values["tensor_split"])  # -ts 3,1 names two devices
    return LlamaCppSettings(
        build=build, n_gpu_layers=_ngl(user.get("n_gpu_layers"), build),
        n_ctx=int(rule("ctx.default", build) if n_ctx is None else n_ctx), n_parallel=int(n_parallel),
        n_batch=int(values["n_batch"]), n_ubatch=int(values["n_ubatch"]), type_k=_kv_type(values["type_k"]),
        type_v=_kv_type(values["type_v"]), flash_attn=_flash(user.get("flash_attn")) or rule("flash_attn.default", build),
        kv_unified=kv_unified, swa_full=bool(values["swa_full"]), kv_offload=bool(values["kv_offload"]),
        mmap=bool(values["mmap"]), num_gpus=int(values["num_gpus"]),
        tensor_split=tuple(float(x) for x in values["tensor_split"]), split_mode=str(values["split_mode"]),
        main_gpu=int(values["main_gpu"]), override_tensor=tuple(values["override_tensor"]), n_cpu_moe=n_cpu_moe,
        gguf_type=gguf_type, embeddings=bool(values["embeddings"]),
        device_free_mib=tuple(int(x) for x in values["device_free_mib"]), mmproj=str(values["mmproj"] or ""),
        mmproj_offload=bool(values["mmproj_offload"]), gguf_mla_split=bool(values["gguf_mla_split"]),
        repack=bool(values["repack"]), gguf_order=str(values["gguf_order"]), given=frozenset(user))


def flash_attention(s: LlamaCppSettings, spec) -> bool:
    """Whether FA runs: 'auto' enables it where the CUDA kernels take the head sizes (llama-context.cpp
    resolves auto at context creation; fattn.cu needs equal K/V head sizes, MLA's 576/512 latent excepted)."""
    if s.flash_attn != "auto":
        return s.flash_attn == "on"
    mla = getattr(spec, "mla", None)
    latent = rule("kv.mla_latent", s.build) and s.gguf_mla_split  # a file with attn_kv_b only keeps 192/128 heads
    if mla is not None and rule("mla.fa_needs_equal_heads", s.build) and not latent:
        return False
    return True


def check(s: LlamaCppSettings, spec) -> None:
    """llama_init_from_model refuses a quantized V cache without flash attention (llama-context.cpp)."""
    if is_quantized(s.type_v) and not flash_attention(s, spec):
        raise StartupRefusal(f"V cache quantization ({s.type_v}) requires flash_attn")


def with_values(s: LlamaCppSettings, **changes) -> LlamaCppSettings:
    return replace(s, **changes)
