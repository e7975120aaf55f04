"""llama.cpp's `whatif` and `fit` (Ollama's whatif stands on the same rows: engines/ollama/advisor.py): every
lever through the engine's plan, and the two questions llama.cpp users ask, answered by fit.py's solvers with
the exact llama-server line: the most layers on the GPU at a context, and the largest context with every layer
on the GPU. Reached through the engine interface (`Levers.answers`; advisor/answers.py dispatches)."""
from __future__ import annotations

import math
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
    from ... import api

    return api.model_and_checkpoint(model, engine_name, sources.get("source"), sources.get("revision"),
                                    sources.get("hf_token"), sources.get("gguf_file"))


def command(engine, settings: dict, version, model: str) -> str:
    """llama-server's exact line for these settings (the build's defaults left out)."""
    return engine.command_line(settings, version, model_file(model, settings))


def whatif_rows(model: str, gpu, version_text, settings: dict, sources: dict, engine, levers=None,
                line=command) -> list[Row]:
    """The baseline, then each lever alone on top of the given settings (one planned point each): `levers` as
    LLAMACPP_LEVERS ((label, change of the resolved settings) in the engine's names), `line` as `command`."""
    from ... import api

    engine_name = engine.name
    version = engine.releases.resolve(version_text)

    def explain(values: dict):
        return api.explain(model, gpu, engine=engine_name, engine_version=version_text, **values, **sources)

    base = explain(settings)
    resolved = {s.name: s.value for s in base.settings}
    resolved.update(moe=_spec(model, engine_name, sources)[0].moe is not None, layers=base.figure("total_layers"))
    rows = [Row("baseline", dict(settings), base, line(engine, settings, version, model))]
    levers = LLAMACPP_LEVERS if levers is None else levers
    changes = [(label, change(resolved)) for label, change in levers]
    if not model.endswith(".gguf") and _checkpoint(model, engine_name, sources) is None:
        changes += [(f"another quant: {mix}", {"gguf_type": mix}) for mix in OTHER_MIXES
                    if mix != resolved.get("gguf_type")]
    for label, change in changes:
        if change is None:
            continue
        changed = dict(settings, **change)
        try:
            rows.append(Row(label, changed, explain(changed), line(engine, changed, version, model)))
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


def fit_entries(model: str, gpu, version_text, pins: dict, sources: dict, *, context=None, concurrency=None,
                ceiling=None, gpus: int = 1) -> list[FitEntry]:
    """llama.cpp's two answers, each a fit.FitAnswer: the most layers at the context (32k by default) and the
    largest context with every layer on the GPU(s). An answer whose margin lies within its VRAM's interval comes
    after the answer solved within the budget less that error (the one whose margin covers it)."""
    from .engine import ENGINE as engine

    version = engine.releases.resolve(version_text)
    spec, checkpoint = _spec(model, engine.name, sources)
    settings = dict(pins)
    if gpus > 1:
        settings.setdefault("num_gpus", gpus)
    if concurrency:
        settings["n_parallel"] = math.ceil(concurrency)  # 2.5 requests at once take 3 slots (0.5: one, not -np 0)
    slots = int(settings.get("n_parallel") or 1)
    n_ctx = (context or DEFAULT_FIT_CONTEXT) * slots
    file = model_file(model, settings)
    budget = min(ceiling, gpu.cuda_total_bytes) if ceiling else gpu.cuda_total_bytes  # never above the card
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
    from ...api import refusals_named

    with refusals_named(engine):
        engine.plan(spec, gpu, settings, version, gguf_checkpoint=checkpoint)


def vram_margin(answer, gpu, budget: int, version):
    """The GPU with the least room beyond its error: its budget less its VRAM, against the interval scored for a
    GPU's VRAM (the figure llama.cpp's fit rests on)."""
    from ...fidelity import gpu_class, release_era
    from ...intervals import budget_margin, card_limit_of, clipped, interval_of

    lay = answer.layout
    if lay is None:
        return None
    era, device_class = release_era("llamacpp", f"b{version[0]}"), gpu_class(gpu.cuda_total_bytes)
    margins = []
    for device in lay.devices:
        found = interval_of("llamacpp", "vram_mib", lay.vram(device) / MIB, era, device_class)
        if found is not None:  # within [0, the card], as explain clips it
            found = clipped(found, card_limit_of("vram_mib", gpu.cuda_total_bytes))
            margins.append(budget_margin(budget, lay.vram(device), found))
    return min(margins, key=lambda m: m.spare_gib - m.error_gib, default=None)


def fit_text(model: str, entries: list[FitEntry], target: str) -> str:
    from ...intervals import describe
    from ...advisor.report import margin_cell

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
        out += [f"    {answer.reason}; VRAM {vram}, host RAM {lay.host / MIB:,.0f} MiB, margin {margin_cell(margin, 'MiB')}",
                f"    {answer.command}"]
        if entry.borderline:
            out.append(f"      {describe(margin, 0)}")
    return "\n".join(out)


def fit_json(entries: list[FitEntry], target: str) -> dict:
    from ...advisor.report import margin_json

    return {"target": target, "answers": [
        {"question": entry.question, "reason": entry.answer.reason, "command": entry.answer.command or None,
         "vram_per_gpu_mib": ({d: round(entry.answer.layout.vram(d) / MIB) for d in entry.answer.layout.devices}
                              if entry.answer.layout else None),
         "host_ram_mib": round(entry.answer.layout.host / MIB) if entry.answer.layout else None,
         **margin_json(entry.margin, 0)}
        for entry in entries]}


# --- the answers (advisor/answers.py's calls) ---------------------------------------------------------------


def whatif(model: str, gpu, engine, version, settings: dict, sources: dict, *, checkpoints: bool = True):
    """The baseline, then each of llama.cpp's levers alone and the model's other quantization mixes."""
    from ...advisor.answers import AdvisorAnswer, nested_row

    pins = {key: value for key, value in settings.items() if key != "engine"}
    rows = whatif_rows(model, gpu, version, pins, sources, engine)
    return AdvisorAnswer("whatif", engine.name, [nested_row(row.to_dict(), engine.name) for row in rows],
                         rows[0].breakdown.failure is None,
                         lambda columns, markdown: whatif_text(rows))


def fit(model: str, gpu, engine, version, settings: dict, sources: dict, target, *, progress=None):
    """The two answers (fit_entries) within the target's memory, context, slots and GPUs."""
    from ...advisor.answers import AdvisorAnswer

    pins = {key: value for key, value in settings.items() if key != "engine"}
    answers = fit_entries(model, gpu, version, pins, sources, context=target.context, concurrency=target.concurrency,
                          ceiling=target.max_gpu_memory, gpus=target.gpus)
    sentence = (f"{gpu.name}" + (f", {target.max_gpu_memory_text} per GPU" if target.max_gpu_memory else "")
                + (f", {target.gpus} GPUs" if target.gpus > 1 else ""))
    return AdvisorAnswer("fit", engine.name, fit_json(answers, sentence),
                         any(entry.answer.layout is not None for entry in answers),
                         lambda columns, markdown: fit_text(model, answers, sentence))
