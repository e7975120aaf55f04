"""Pure solvers over llama.cpp's levers, each answering with the exact llama-server line:
- most_gpu_layers: the most layers on the GPU(s) at a given context;
- largest_context: the largest context with every layer on the GPU(s);
- largest_context_for_kv: the largest context whose KV cache fits a byte budget.
Every candidate is planned with plan.layout (VRAM includes the CUDA context); the search is a bisection
(VRAM grows monotonically with -ngl and with -c)."""
from __future__ import annotations

from dataclasses import dataclass, replace

from .plan import Layout, layout
from .releases import rule
from .settings import ALL_LAYERS, LlamaCppSettings, StartupRefusal, flash_attention, resolve

CTX_STEP = 256  # llama.cpp pads n_ctx to 256 with flash attention (and in newer builds without it)


@dataclass(frozen=True)
class FitAnswer:
    settings: LlamaCppSettings | None
    layout: Layout | None
    command: str  # the llama-server line, "" when nothing fits
    reason: str


def fits(lay: Layout, budgets: dict[str, int], host_budget: int | None = None) -> bool:
    """Every GPU within its budget (bytes, keyed "CUDA0"...) and the host within its own when given."""
    if any(lay.vram(d) > budgets.get(d, 0) for d in lay.devices):
        return False
    return host_budget is None or lay.host <= host_budget


def command(s: LlamaCppSettings, model: str = "model.gguf", spec=None) -> str:
    """The llama-server line that runs these settings (defaults of the build left out)."""
    words = ["llama-server", "-m", model, "-ngl", "all" if s.n_gpu_layers >= ALL_LAYERS else str(s.n_gpu_layers),
             "-c", str(s.n_ctx)]
    if s.n_parallel != 1:
        words += ["-np", str(s.n_parallel)]
        if s.kv_unified:  # -np auto turns it on; an explicit -np takes the build's default, so say it
            words.append("--kv-unified")
    words += _flash_words(s, spec)
    if s.type_k != "f16":
        words += ["-ctk", s.type_k]
    if s.type_v != "f16":
        words += ["-ctv", s.type_v]
    if s.n_ubatch != 512:
        words += ["-ub", str(s.n_ubatch)]
    if s.n_cpu_moe:
        words += ["--cpu-moe"] if s.n_cpu_moe >= ALL_LAYERS else ["--n-cpu-moe", str(s.n_cpu_moe)]
    if s.tensor_split:
        words += ["-ts", ",".join(f"{x:g}" for x in s.tensor_split)]
    if not s.mmap:
        words.append("--no-mmap")
    if not s.kv_offload:
        words.append("--no-kv-offload")
    return " ".join(words)


def _flash_words(s: LlamaCppSettings, spec) -> list[str]:
    """-fa as this build spells it, where it differs from the build's default: before b6325 (releases.py
    flash_attn.default "off") -fa is a switch that takes no value (common/arg.cpp, 0.3.16 tree), so a flash
    attention left to "auto" is written as what the plan resolved it to."""
    default = rule("flash_attn.default", s.build)
    if default != "off":
        return [] if s.flash_attn == default else ["-fa", s.flash_attn]
    on = s.flash_attn == "on" or (s.flash_attn == "auto" and spec is not None and flash_attention(s, spec))
    return ["-fa"] if on else []


def _try(spec, s: LlamaCppSettings, gguf_checkpoint) -> Layout | None:
    try:
        return layout(spec, s, gguf_checkpoint)
    except StartupRefusal:
        return None


def _bisect(lo: int, hi: int, ok) -> int | None:
    """The largest value in [lo, hi] with ok(value), assuming ok is monotone (True then False); None if none."""
    if not ok(lo):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid - 1)
    return lo


def most_gpu_layers(spec, user: dict, build: int, budgets: dict[str, int], n_ctx: int, model: str = "model.gguf",
                    gguf_checkpoint=None) -> FitAnswer:
    """The largest -ngl (output layer counted) whose GPUs stay within `budgets` at context n_ctx."""
    base = resolve({**user, "n_ctx": n_ctx}, build)
    top = spec.num_layers + 1

    def ok(ngl: int) -> bool:
        lay = _try(spec, replace(base, n_gpu_layers=ngl), gguf_checkpoint)
        return lay is not None and fits(lay, budgets)

    best = _bisect(0, top, ok)
    if best is None:
        return FitAnswer(None, None, "", f"even -ngl 0 at -c {n_ctx} exceeds the GPU budget")
    s = replace(base, n_gpu_layers=ALL_LAYERS if best == top else best)
    reason = f"{best}/{top} layers on the GPU at -c {n_ctx}"
    return FitAnswer(s, layout(spec, s, gguf_checkpoint), command(s, model, spec), reason)


def largest_context(spec, user: dict, build: int, budgets: dict[str, int], model: str = "model.gguf",
                    gguf_checkpoint=None, limit: int | None = None) -> FitAnswer:
    """The largest -c (a multiple of 256, up to the model's context or `limit`) with every layer on the GPUs."""
    base = resolve({**user, "n_gpu_layers": "all"}, build)
    top = (limit or spec.max_position_embeddings) // CTX_STEP

    def ok(steps: int) -> bool:
        lay = _try(spec, replace(base, n_ctx=steps * CTX_STEP), gguf_checkpoint)
        return lay is not None and fits(lay, budgets)

    best = _bisect(1, top, ok)
    if best is None:
        return FitAnswer(None, None, "", f"every layer on the GPU does not fit even at -c {CTX_STEP}")
    s = replace(base, n_ctx=best * CTX_STEP)
    return FitAnswer(s, layout(spec, s, gguf_checkpoint), command(s, model, spec),
                     f"-c {s.n_ctx} with all layers on the GPU")


def largest_context_for_kv(spec, user: dict, build: int, kv_budget_bytes: int) -> int:
    """The largest n_ctx (multiple of 256) whose whole KV cache fits kv_budget_bytes; 0 when none does."""
    from .kv_cache import kv_cache
    from .plan import kv_layers, kv_settings
    from .settings import flash_attention

    s = resolve(user, build)
    fa = flash_attention(s, spec)
    layers = kv_layers(spec, build)

    def ok(steps: int) -> bool:
        kv = kv_cache(layers, ["CUDA0"] * len(layers), kv_settings(spec, s, fa, steps * CTX_STEP))
        return kv.total_bytes <= kv_budget_bytes

    best = _bisect(1, spec.max_position_embeddings // CTX_STEP, ok)
    return 0 if best is None else best * CTX_STEP
