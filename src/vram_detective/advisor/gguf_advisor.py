"""`whatif` and `fit` for llama.cpp (and Ollama on top of it): every lever through the engine's plan, and the
two questions llama.cpp users ask, answered by engines/llamacpp/fit.py's solvers with the exact llama-server
line: the most layers on the GPU at a context, and the largest context with every layer on the GPU."""
from __future__ import annotations

from dataclasses import dataclass

MIB = 2**20
GIB = 2**30
OTHER_MIXES = ("Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "IQ4_XS")  # another quantization of the same model
DEFAULT_FIT_CONTEXT = 32768

# (label, change of the user's settings given the baseline's resolved ones) in llama.cpp's names
LLAMACPP_LEVERS = (
    ("-ngl all (every layer on the GPU)", lambda r: {"n_gpu_layers": "all"}),
    ("-ngl half the layers", lambda r: {"n_gpu_layers": max(r["n_gpu_layers"] // 2, 0)}),
    ("-c halved", lambda r: {"n_ctx": max(r["n_ctx"] // 2, 256)}),
    ("-c doubled", lambda r: {"n_ctx": r["n_ctx"] * 2}),
    ("-np 1 (one slot)", lambda r: {"n_parallel": 1}),
    ("-np 4", lambda r: {"n_parallel": 4}),
    ("-ctk q8_0 -ctv q8_0 -fa on", lambda r: {"type_k": "q8_0", "type_v": "q8_0", "flash_attn": "on"}),
    ("-fa off", lambda r: {"flash_attn": "off", "type_v": "f16"}),
    ("-ub 256", lambda r: {"n_ubatch": 256}),
    ("-ub 2048 -b 2048", lambda r: {"n_ubatch": 2048, "n_batch": 2048}),
    ("--cpu-moe (experts on the CPU)", lambda r: {"cpu_moe": True} if r["moe"] else None),
    ("--no-mmap", lambda r: {"mmap": False}),
)
# Ollama's knobs (Modelfile PARAMETERs and server variables)
OLLAMA_LEVERS = (
    ("num_ctx halved", lambda r: {"num_ctx": max(r["num_ctx"] // 2, 256)}),
    ("num_ctx doubled", lambda r: {"num_ctx": r["num_ctx"] * 2}),
    ("OLLAMA_NUM_PARALLEL=1", lambda r: {"num_parallel": 1}),
    ("OLLAMA_NUM_PARALLEL=4", lambda r: {"num_parallel": 4}),
    ("OLLAMA_KV_CACHE_TYPE=q8_0 (+ flash attention)", lambda r: {"kv_cache_type": "q8_0", "flash_attention": True}),
    ("OLLAMA_FLASH_ATTENTION=0", lambda r: {"flash_attention": False}),
    ("num_gpu half the layers", lambda r: {"num_gpu": max(r["layers"] // 2, 0)}),
)


@dataclass(frozen=True)
class Row:
    label: str
    settings: dict
    breakdown: object
    command: str

    def to_dict(self) -> dict:
        b = self.breakdown
        return {"lever": self.label, "settings": self.settings, "starts": b.failure is None,
                "vram_per_gpu_mib": vram_by_device(b), "host_ram_mib": round((b.figure("host_ram_bytes") or 0) / MIB),
                "layers_on_gpu": b.figure("offloaded_layers"), "total_layers": b.figure("total_layers"),
                "kv_cache_tokens": b.kv_cache_tokens, "weights_mib": round(b.weights_bytes / MIB),
                "command": self.command}


def vram_by_device(b) -> dict[str, int]:
    return {figure.key[len("vram_"):-len("_bytes")].upper(): round(figure.value / MIB)
            for figure in b.engine_figures if figure.key.startswith("vram_cuda")}


def model_file(model: str, settings: dict) -> str:
    """What -m names: the GGUF given, else the file a catalog model at that mix would be."""
    if model.endswith(".gguf"):
        return model
    return f"{model.rsplit('/', 1)[-1]}-{settings.get('gguf_type', 'Q4_K_M')}.gguf"


def _spec(model: str, engine_name: str, sources: dict):
    from .. import api

    return api.model_and_checkpoint(model, engine_name, sources.get("source"), sources.get("revision"),
                                    sources.get("hf_token"), sources.get("gguf_file"))


def _command(engine, settings: dict, version, model: str) -> str:
    if engine.name == "llamacpp":
        return engine.command_line(settings, version, model_file(model, settings))
    return ollama_line(model, settings)


def ollama_line(model: str, settings: dict) -> str:
    """The server variables and the run line; Modelfile PARAMETERs as `/set parameter` (their only place)."""
    env = {"num_parallel": "OLLAMA_NUM_PARALLEL", "kv_cache_type": "OLLAMA_KV_CACHE_TYPE",
           "flash_attention": "OLLAMA_FLASH_ATTENTION"}
    words = [f"{env[k]}={int(v) if isinstance(v, bool) else v}" for k, v in settings.items() if k in env]
    words += ["ollama", "run", model]
    params = [f"/set parameter {k} {v}" for k, v in settings.items() if k in ("num_ctx", "num_gpu", "num_batch")]
    tag = f"  (its {settings['gguf_type']} tag)" if "gguf_type" in settings else ""
    return " ".join(words) + tag + (f"  then {'; '.join(params)}" if params else "")


def whatif(model: str, gpu, version_text, settings: dict, sources: dict, engine_name: str = "llamacpp") -> list[Row]:
    """The baseline, then each lever alone on top of the given settings (one planned point each)."""
    from .. import api
    from ..engines import get_engine

    engine = get_engine(engine_name)
    version = engine.releases.resolve(version_text)

    def explain(values: dict):
        return api.explain(model, gpu, engine=engine_name, engine_version=version_text, **values, **sources)

    base = explain(settings)
    resolved = {s.name: s.value for s in base.settings}
    resolved.update(moe=_spec(model, engine_name, sources)[0].moe is not None, layers=base.figure("total_layers"))
    rows = [Row("baseline", dict(settings), base, _command(engine, settings, version, model))]
    levers = LLAMACPP_LEVERS if engine_name == "llamacpp" else OLLAMA_LEVERS
    changes = [(label, change(resolved)) for label, change in levers]
    if not model.endswith(".gguf") and _checkpoint(model, engine_name, sources) is None:
        changes += [(f"another quant: {mix}", {"gguf_type": mix}) for mix in OTHER_MIXES
                    if mix != resolved.get("gguf_type")]
    for label, change in changes:
        if change is None:
            continue
        changed = dict(settings, **change)
        try:
            rows.append(Row(label, changed, explain(changed), _command(engine, changed, version, model)))
        except (ValueError, *engine.refusals):
            continue
    return rows


def _checkpoint(model: str, engine_name: str, sources: dict):
    return _spec(model, engine_name, sources)[1]


def whatif_text(rows: list[Row]) -> str:
    base = rows[0].breakdown
    out = [f"{base.model} on {base.gpu_name}: {base.engine_label} {base.engine_version}",
           f"  {'lever':<44} {'VRAM/GPU MiB':>13} {'host MiB':>9} {'layers':>7} {'tokens':>9}  line"]
    for row in rows:
        b = row.breakdown
        vram = "/".join(f"{v:,}" for v in vram_by_device(b).values()) or "0"
        over = any(v * MIB > b.total_gpu_bytes for v in vram_by_device(b).values())
        out.append(f"  {row.label:<44} {vram:>13} {round((b.figure('host_ram_bytes') or 0) / MIB):>9,} "
                   f"{b.figure('offloaded_layers')}/{b.figure('total_layers'):<4} {b.kv_cache_tokens:>9,}  "
                   f"{row.command}{'  (over the GPU)' if over else ''}")
    return "\n".join(out)


@dataclass(frozen=True)
class FitEntry:
    """One answer of llama.cpp's fit: the question, the solver's answer, and its tightest GPU's margin under the
    budget against that GPU's VRAM interval (intervals.budget_margin; None when nothing fits or no interval)."""

    question: str
    answer: object  # engines/llamacpp/fit.FitAnswer
    margin: object | None

    @property
    def borderline(self) -> bool:
        return self.margin is not None and not self.margin.covers


def fit(model: str, gpu, version_text, pins: dict, sources: dict, *, context=None, concurrency=None, ceiling=None,
        gpus: int = 1) -> list[FitEntry]:
    """llama.cpp's two answers, each a fit.FitAnswer: the most layers at the context (32k by default) and the
    largest context with every layer on the GPU(s). An answer whose margin lies within its VRAM's interval comes
    after the answer solved within the budget less that error (the one whose margin covers it)."""
    from ..engines import get_engine

    engine = get_engine("llamacpp")
    version = engine.releases.resolve(version_text)
    spec, checkpoint = _spec(model, "llamacpp", sources)
    settings = dict(pins)
    if gpus > 1:
        settings.setdefault("num_gpus", gpus)
    if concurrency:
        settings["n_parallel"] = int(concurrency)
    slots = int(settings.get("n_parallel") or 1)
    n_ctx = (context or DEFAULT_FIT_CONTEXT) * slots
    file = model_file(model, settings)
    budget = ceiling or gpu.cuda_total_bytes
    layers = {k: v for k, v in settings.items() if k != "n_gpu_layers"}
    whole = {k: v for k, v in settings.items() if k != "n_ctx"}
    _refusal_of_pins(engine, spec, gpu, dict(layers, n_ctx=n_ctx, n_gpu_layers=0), version, checkpoint)
    questions = [
        (f"the most layers on the GPU at -c {n_ctx}" + (f" ({slots} slots)" if slots > 1 else ""),
         lambda limit: engine.fit_layers(spec, gpu, layers, version, n_ctx=n_ctx, model=file,
                                         gguf_checkpoint=checkpoint, ceiling=limit)),
        ("the largest context with every layer on the GPU",
         lambda limit: engine.fit_context(spec, gpu, whole, version, model=file, gguf_checkpoint=checkpoint,
                                          ceiling=limit))]
    out = []
    for question, solve in questions:
        answer = solve(ceiling)
        entry = FitEntry(question, answer, vram_margin(answer, gpu, budget, version))
        if entry.borderline:  # solved again within the budget less the error: its own error is no larger
            tighter = solve(int(budget - entry.margin.error_gib * GIB) - 1)
            if tighter.layout is not None:
                out.append(FitEntry(question, tighter, vram_margin(tighter, gpu, budget, version)))
        out.append(entry)
    return out


def _refusal_of_pins(engine, spec, gpu, settings: dict, version, checkpoint) -> None:
    """The pinned settings refused whatever the levers (a quantized V cache without flash attention): the
    engine's refusal (exit 1, HTTP 422), not "nothing fits". Memory is the levers' business: a plan that does
    not fit is no refusal here."""
    from ..api import refusals_named

    with refusals_named(engine):
        engine.plan(spec, gpu, settings, version, gguf_checkpoint=checkpoint)


def vram_margin(answer, gpu, budget: int, version):
    """The GPU with the least room beyond its error: its budget less its VRAM, against the interval scored for a
    GPU's VRAM (the figure llama.cpp's fit rests on)."""
    from ..fidelity import gpu_class, release_era
    from ..intervals import budget_margin, interval_of

    lay = answer.layout
    if lay is None:
        return None
    era, device_class = release_era("llamacpp", f"b{version[0]}"), gpu_class(gpu.cuda_total_bytes)
    margins = []
    for device in lay.devices:
        found = interval_of("llamacpp", "vram_mib", lay.vram(device) / MIB, era, device_class)
        if found is not None:
            margins.append(budget_margin(budget, lay.vram(device), found))
    return min(margins, key=lambda m: m.spare_gib - m.error_gib, default=None)


def fit_text(model: str, entries: list[FitEntry], target: str) -> str:
    from ..intervals import describe
    from .report import margin_cell

    out = [f"{model}: llama.cpp's levers for {target}"]
    for number, entry in enumerate(entries):
        answer, margin = entry.answer, entry.margin
        again = number > 0 and entries[number - 1].question == entry.question
        if not again:
            out.append(f"  {entry.question}:")
        if answer.layout is None:
            out.append(f"    nothing fits: {answer.reason}")
            continue
        if entry.borderline and not again:
            out.append(f"    no answer's margin covers the {margin.interval.level:.0%} interval of the GPU's VRAM; "
                       "the borderline one:")
        lay = answer.layout
        vram = ", ".join(f"{d} {lay.vram(d) / MIB:,.0f} MiB" for d in lay.devices)
        out += [f"    {answer.reason}; VRAM {vram}, host RAM {lay.host / MIB:,.0f} MiB, margin {margin_cell(margin)}",
                f"    {answer.command}"]
        if entry.borderline:
            out.append(f"      {describe(margin, 0)}")
    return "\n".join(out)


def fit_json(entries: list[FitEntry], target: str) -> dict:
    from .report import margin_json

    return {"target": target, "answers": [
        {"question": entry.question, "reason": entry.answer.reason, "command": entry.answer.command or None,
         "vram_per_gpu_mib": ({d: round(entry.answer.layout.vram(d) / MIB) for d in entry.answer.layout.devices}
                              if entry.answer.layout else None),
         "host_ram_mib": round(entry.answer.layout.host / MIB) if entry.answer.layout else None,
         **margin_json(entry.margin, 0)}
        for entry in entries]}
