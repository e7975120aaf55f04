"""SGLang's `whatif` and `fit`: a plain loop over the plan (no vectorized sweep), reached through the engine
interface (`Levers.answers`; advisor/answers.py dispatches).

Every figure is `explain`'s; the launch line is SGLang's own (python -m sglang.launch_server ...).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ...units import GIB

# SGLang's levers: (label, settings change as a function of the baseline's resolved settings)
SGLANG_LEVERS = (
    ("mem_fraction_static +0.05", lambda s: {"mem_fraction_static": round(min(s["mem_fraction_static"] + 0.05, 0.99), 3)}),
    ("mem_fraction_static -0.05", lambda s: {"mem_fraction_static": round(s["mem_fraction_static"] - 0.05, 3)}),
    ("max_running_requests halved", lambda s: {"max_running_requests": max(s["max_running_requests"] // 2, 1)}),
    ("chunked_prefill_size halved", lambda s: {"chunked_prefill_size": max(s["chunked_prefill_size"] // 2, 512)}),
    ("cuda_graph_max_bs halved", lambda s: {"cuda_graph_max_bs": max(s["cuda_graph_max_bs"] // 2, 1)}),
    ("fp8 KV cache", lambda s: {"kv_cache_dtype": "fp8_e4m3"}),
    ("page_size 64", lambda s: {"page_size": 64}),
    ("tp x2", lambda s: {"tp_size": s["tp_size"] * 2}),
)
# setting -> SGLang flag; a True switch prints the flag alone
SGLANG_FLAGS = {"tp_size": "--tp", "mem_fraction_static": "--mem-fraction-static",
                "max_running_requests": "--max-running-requests", "chunked_prefill_size": "--chunked-prefill-size",
                "cuda_graph_max_bs": "--cuda-graph-max-bs", "kv_cache_dtype": "--kv-cache-dtype",
                "page_size": "--page-size", "context_length": "--context-length", "pp_size": "--pp"}


def launch_line(model: str, settings: dict) -> str:
    """The exact `python -m sglang.launch_server` line for these settings (given ones only)."""
    from .engine import ENGINE

    from .launch import ENVIRONMENT

    names = ENGINE.levers.flag_names()
    words = [f"{env}={settings[name]}" for env, name in ENVIRONMENT.items() if settings.get(name) is not None]
    words += ["python -m sglang.launch_server", "--model-path", model]
    for name, value in settings.items():
        flag = SGLANG_FLAGS.get(name) or names.get(name)
        if flag is None or value is None or value is False:
            continue
        words += [flag] if value is True else [flag, str(value)]
    return " ".join(words)


@dataclass(frozen=True)
class Row:
    label: str
    settings: dict
    breakdown: object
    requests: float = 1.0  # requests of max_model_len the pool must hold (fit's target)

    @property
    def margin(self):
        """The KV pool's margin over `requests` against its interval (intervals.pool_margin), None without one."""
        from ...intervals import pool_margin

        b = self.breakdown
        return None if b.failure is not None else pool_margin(b.kv_cache_bytes, b.max_concurrency, b.intervals,
                                                              self.requests)

    def fit_dict(self) -> dict:
        from ...advisor.report import margin_json

        return dict(self.to_dict(), **margin_json(self.margin, self.breakdown.max_model_len))

    def to_dict(self) -> dict:
        b = self.breakdown
        return {"lever": self.label, "settings": self.settings, "starts": b.failure is None,
                "weights_gib": round(b.weights_bytes / GIB, 3), "kv_cache_gib": round(b.kv_cache_bytes / GIB, 3),
                "kv_cache_tokens": b.kv_cache_tokens, "max_concurrency": round(b.max_concurrency, 3),
                "max_running_requests": b.figure("max_running_requests"),
                "nvidia_smi_used_mib": b.nvidia_smi_used_mib, "command": launch_line(b.model, self.settings)}


def _explain(model: str, gpu, version, settings: dict, sources: dict):
    from ... import api

    return api.explain(model, gpu, engine="sglang", engine_version=version, **settings, **sources)


def whatif_rows(model: str, gpu, version, settings: dict, sources: dict) -> list[Row]:
    """The baseline, then each lever alone on top of the given settings."""
    base = _explain(model, gpu, version, settings, sources)
    resolved = {s.name: s.value for s in base.settings}
    resolved["max_running_requests"] = base.figure("max_running_requests")
    rows = [Row("baseline", dict(settings), base)]
    for label, change in SGLANG_LEVERS:
        changed = dict(settings, **change(resolved))
        try:
            rows.append(Row(label, changed, _explain(model, gpu, version, changed, sources)))
        except ValueError:
            continue
    return rows


def whatif_text(rows: list[Row]) -> str:
    base = rows[0].breakdown
    out = [f"{base.model} on {base.gpu_name}: {base.engine_label} {base.engine_version}",
           f"  {'lever':<30} {'weights':>9} {'KV pool':>9} {'tokens':>10} {'conc.':>7} {'smi MiB':>9}  launch line"]
    for row in rows:
        b = row.breakdown
        status = "" if b.failure is None else "  (would not start)"
        out.append(f"  {row.label:<30} {b.weights_bytes / GIB:9.2f} {b.kv_cache_bytes / GIB:9.2f} "
                   f"{b.kv_cache_tokens:>10,} {b.max_concurrency:7.2f} {b.nvidia_smi_used_mib:>9,}  "
                   f"{launch_line(b.model, row.settings)}{status}")
    return "\n".join(out)


def _meets(b, context: int | None, concurrency: float, ceiling: int | None) -> bool:
    if b.failure is not None or (ceiling is not None and b.nvidia_smi_used_mib * 2**20 > ceiling):
        return False
    need = (context or b.max_model_len) * concurrency
    return b.kv_cache_tokens >= need and b.figure("max_running_requests") >= concurrency


def fit_rows(model: str, gpu, version, pins: dict, sources: dict, *, context=None, concurrency=None, ceiling=None,
             gpus: int = 1) -> list[Row]:
    """Configurations meeting the target, best first: those whose margin covers the KV pool's 90 % interval
    before the borderline ones, then fewer GPUs, auto KV before fp8, the largest mem_fraction_static (from the
    release's default down in 0.01 steps) that keeps nvidia-smi under the ceiling; when the default's pool is too
    small, the smallest fraction above it that holds the target and still starts."""
    concurrency = concurrency or 1.0
    found = []
    tps = [tp for tp in (1, 2, 4, 8) if tp <= gpus] if "tp_size" not in pins else [pins["tp_size"]]
    dtypes = ["auto", "fp8_e4m3"] if "kv_cache_dtype" not in pins else [pins["kv_cache_dtype"]]
    for tp in tps:
        for dtype in dtypes:
            settings = dict(pins, tp_size=tp, **({"kv_cache_dtype": dtype} if dtype != "auto" else {}))
            if context:
                settings["context_length"] = context
            row = _best_fraction(model, gpu, version, settings, sources, context, concurrency, ceiling)
            if row is not None:
                found.append(replace(row, requests=concurrency))
    return sorted(found, key=_borderline)  # those whose margin covers the pool's interval first, in order


def nearest(model: str, gpu, version, pins: dict, sources: dict, *, context=None, concurrency=None, ceiling=None,
            gpus: int = 1) -> list[tuple[str, Row, str]]:
    """When nothing meets the target, what comes nearest, one part of it given up at a time (as vLLM's fit):
    (what was relaxed, the best row, why) for the most requests at the target context, the longest context at
    the target concurrency, and the fewest more GPUs (TP up to 8) that meet it whole."""
    need, out = concurrency or 1.0, []
    search = dict(model=model, gpu=gpu, version=version, pins=pins, sources=sources, ceiling=ceiling)
    if context and need > 1:
        rows = fit_rows(**search, context=context, concurrency=1.0, gpus=gpus)
        if rows:
            best = max(rows, key=lambda row: row.breakdown.max_concurrency)
            out.append(("concurrency", replace(best, requests=need), f"at most {best.breakdown.max_concurrency:.2f} "
                                                                     f"requests of {context:,} tokens fit"))
    limit = context or _explain(model, gpu, version, pins, sources).max_model_len
    found = _longest_context(search, need, gpus, limit)
    if found is not None:
        out.append(("context", found, f"the longest context at {need:g} concurrent request(s) is "
                                      f"{found.breakdown.max_model_len:,} tokens"))
    more = gpus * 2
    while more <= 8 and "tp_size" not in pins:
        rows = fit_rows(**search, context=context, concurrency=concurrency, gpus=more)
        wider = [row for row in rows if int(row.breakdown.setting("tp_size")) > gpus]
        if wider:
            out.append(("gpus", wider[0], f"{wider[0].breakdown.setting('tp_size')} GPUs meet the target"))
            break
        more *= 2
    return out


def _longest_context(search: dict, need: float, gpus: int, below: int) -> Row | None:
    """The best row at the longest context under `below` (in steps of 256 tokens) holding `need` requests:
    fewer tokens per request never need a larger pool, so the answer is bisected."""
    lo, hi, best = 0, (below - 1) // 256, None
    while lo < hi:
        middle = (lo + hi + 1) // 2
        rows = fit_rows(**search, context=middle * 256, concurrency=need, gpus=gpus)
        if rows:
            lo, best = middle, rows[0]
        else:
            hi = middle - 1
    return best


def _borderline(row: Row) -> bool:
    return row.margin is not None and not row.margin.covers


def _best_fraction(model, gpu, version, settings, sources, context, concurrency, ceiling) -> Row | None:
    try:
        b = _explain(model, gpu, version, settings, sources)
    except ValueError:
        return None
    if _meets(b, context, concurrency, ceiling):
        return Row("release defaults", settings, b)
    if "mem_fraction_static" in settings:
        return None
    fraction = b.figure("mem_fraction_static")
    if b.failure is None and b.kv_cache_tokens < (context or b.max_model_len) * concurrency:
        return _raised_fraction(model, gpu, version, settings, sources, context, concurrency, ceiling, fraction)
    for step in range(1, 60):
        changed = dict(settings, mem_fraction_static=round(fraction - 0.01 * step, 3))
        if changed["mem_fraction_static"] <= 0.05:
            break
        candidate = _explain(model, gpu, version, changed, sources)
        if _meets(candidate, context, concurrency, ceiling):
            return Row("lower mem_fraction_static", changed, candidate)
        if candidate.failure is not None:
            break
    return None


def _raised_fraction(model, gpu, version, settings, sources, context, concurrency, ceiling, fraction) -> Row | None:
    """The default's pool is too small: the smallest mem_fraction_static above it (0.01 steps) whose pool meets the
    target while the CUDA graphs and activations still fit in the slack (the plan starts), else None."""
    for step in range(1, 100):
        raised = round(fraction + 0.01 * step, 3)
        if raised >= 1:
            break
        changed = dict(settings, mem_fraction_static=raised)
        candidate = _explain(model, gpu, version, changed, sources)
        if candidate.failure is not None or (ceiling is not None and candidate.nvidia_smi_used_mib * 2**20 > ceiling):
            break  # a larger fraction only leaves less slack and shows more memory
        if _meets(candidate, context, concurrency, ceiling):
            return Row("higher mem_fraction_static", changed, candidate)
    return None


RELAXED = {"concurrency": "fewer requests", "context": "a shorter context", "gpus": "more GPUs"}


def fit_text(rows: list[Row], target: str, near: tuple = ()) -> str:
    from ...intervals import describe
    from ...advisor.report import margin_cell, none_covers_line

    if not rows:
        out = [f"no SGLang configuration meets {target}"] + (["nearest:"] if near else [])
        for what, row, why in near:
            out += [f"- {RELAXED[what]}: {why}", "    " + launch_line(row.breakdown.model, row.settings)]
        return "\n".join(out)
    out = [f"SGLang configurations meeting {target}, best first (margin: the KV pool beyond the target):"]
    for row in rows:
        b = row.breakdown
        out.append(f"  TP {b.setting('tp_size')}, mem_fraction_static {b.figure('mem_fraction_static')}, KV "
                   f"{b.setting('kv_cache_dtype')}: {b.kv_cache_tokens:,} tokens, {b.max_concurrency:.2f}x at "
                   f"{b.max_model_len:,}, nvidia-smi {b.nvidia_smi_used_mib:,} MiB, margin {margin_cell(row.margin, 'MiB')}")
        if row.margin is not None and not row.margin.covers:
            out.append(f"    {describe(row.margin, b.max_model_len)}")
    none_covers = none_covers_line([row.margin for row in rows])
    out += [""] + ([none_covers] if none_covers else []) + ["  " + launch_line(rows[0].breakdown.model, rows[0].settings)]
    return "\n".join(out)


# --- the answers (advisor/answers.py's calls) ---------------------------------------------------------------


def _own_names(settings: dict) -> dict:
    """The settings under SGLang's own names (--max-model-len is its --context-length), for the plan and the
    launch line alike."""
    from .launch import ALIASES

    return {ALIASES.get(key, key): value for key, value in settings.items() if key != "engine"}


def whatif(model: str, gpu, engine, version, settings: dict, sources: dict, *, checkpoints: bool = True):
    """The baseline, then each of SGLang's levers alone (no other checkpoints: `checkpoints` is vLLM's sweep's)."""
    from ...advisor.answers import AdvisorAnswer, nested_row

    pins = _own_names(settings)
    rows = whatif_rows(model, gpu, version, pins, sources)
    return AdvisorAnswer("whatif", engine.name, [nested_row(row.to_dict(), engine.name) for row in rows],
                         rows[0].breakdown.failure is None,
                         lambda columns, markdown: whatif_text(rows))


def fit(model: str, gpu, engine, version, settings: dict, sources: dict, target, *, progress=None):
    """The configurations meeting `target`, best first (fit_rows)."""
    from ...advisor.answers import AdvisorAnswer

    pins = _own_names(settings)
    wanted = dict(context=target.context, concurrency=target.concurrency, ceiling=target.max_gpu_memory,
                  gpus=target.gpus)
    rows = fit_rows(model, gpu, version, pins, sources, **wanted)[: target.top]
    context = target.context_text or (f"{pins['context_length']:,}" if pins.get("context_length") else "the model context")
    sentence = (f"{target.concurrency or 1:g} x {context} tokens"
                + (f" under {target.max_gpu_memory_text} per GPU" if target.max_gpu_memory else ""))
    data = {"target": sentence, "candidates": [row.fit_dict() for row in rows]}
    near = () if rows else tuple(nearest(model, gpu, version, pins, sources, **wanted))
    if not rows:  # what comes nearest, as vLLM's fit gives it
        data["nearest"] = [dict({"relaxed": what, "why": why}, **row.fit_dict()) for what, row, why in near]
    return AdvisorAnswer("fit", engine.name, data, bool(rows), lambda columns, markdown: fit_text(rows, sentence, near))
