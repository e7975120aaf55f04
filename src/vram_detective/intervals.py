"""How sure a prediction is: a 90 % interval on every predicted figure, from the errors the scorer measured for
that figure's term on the ground truth (per engine, release era and GPU class), and the start verdict's margin.

The widths are data (data/intervals.json), written by scripts/refit_intervals.py from `score`'s per-case errors,
never set by hand. A group with fewer than MIN_CASES scored figures falls back to the GPU class across eras, then
to every case of the engine; a term never scored has no interval (nothing is claimed)."""
from __future__ import annotations

import json
import re
from dataclasses import replace
from functools import lru_cache
from importlib import resources

from .breakdown import Breakdown, Interval
from .units import GIB

LEVEL = 0.9
MIN_CASES = 5
MIN_CASES_ANY = 2
ROUNDING_GIB = 0.005  # a logged GiB figure is printed to 0.01: half of that is inside any interval
_DEVICE = re.compile(r"^(cuda\d+|cpu_mapped|cpu|cuda_host)_")


def term_of(key: str) -> str:
    """The table row an observed key is scored under: 'cuda1_kv_buffer_mib' -> 'kv_buffer_mib'."""
    return _DEVICE.sub("", key.split(":")[0])


@lru_cache(maxsize=1)
def table() -> dict:
    try:
        return json.loads(resources.files("vram_detective").joinpath("data/intervals.json").read_text())
    except FileNotFoundError:
        return {"groups": {}}


def half_width(engine: str, key: str, era: str, gpu_class: str, data: dict | None = None) -> tuple[float, str] | None:
    """(the 90th percentile of |observed - predicted| / predicted, the group it comes from) or None."""
    groups = (data or table()).get("groups", {}).get(engine, {}).get(term_of(key), {})
    for name in (f"{era} | {gpu_class}", f"* | {gpu_class}", "* | *"):
        found = groups.get(name)
        # a term scored on fewer cases still gets its widest observed error (the basis says how few)
        if found and found["n"] >= (MIN_CASES if name != "* | *" else MIN_CASES_ANY):
            return found["p90_rel_to_predicted"], f"{name} (n={found['n']})"
    return None


def bounds(engine: str, key: str, value: float, era: str, gpu_class: str,
           data: dict | None = None) -> tuple[float, float, str] | None:
    width = half_width(engine, key, era, gpu_class, data)
    if width is None:
        return None
    spread = max(abs(value) * width[0], _printed_rounding(key))
    low = value - spread
    if value >= 0 and key != "kv_cache_gib":
        low = max(low, 0.0)  # a size or count is not negative (vLLM prints a negative available KV memory only)
    return low, value + spread, width[1]


def _printed_rounding(key: str) -> float:
    """Half the last digit the engine prints (a sum of several printed MiB figures: their rounding added)."""
    if key.endswith(("_gib", "_gb")):
        return ROUNDING_GIB
    if key.endswith("_mib"):
        return 0.02 if "nvidia_smi" not in key else 0.5
    return 0.005 if "concurrency" in key else 0.5


def attach(breakdown: Breakdown) -> Breakdown:
    """The breakdown with an interval on each figure the scorer has errors for, and the verdict's margin."""
    from .fidelity import breakdown_era, gpu_class
    from .render import schema_figures

    era, device = breakdown_era(breakdown), gpu_class(breakdown.total_gpu_bytes)
    found = []
    for key, value in schema_figures(breakdown).items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value == 0:
            continue  # a zero is a rule's exact answer (no CPU blocks, no graphs), not a measurement
        interval = bounds(breakdown.engine_name, key, float(value), era, device)
        if interval is not None:
            found.append(Interval(key, float(value), interval[0], interval[1], LEVEL, interval[2]))
    return replace(breakdown, intervals=tuple(found), verdict_margin=verdict_margin(breakdown, found))


def verdict_margin(breakdown: Breakdown, intervals: list[Interval]) -> str:
    """'starts, 1.2 GiB to spare' when one request of max_model_len fits with room beyond the KV pool's
    interval; 'borderline' when the room (or the shortfall) lies within it."""
    pool = next((item for item in intervals if item.key == "kv_cache_gib"), None)
    if breakdown.kv_cache_bytes <= 0 or breakdown.max_concurrency <= 0:
        spare = breakdown.kv_cache_bytes / GIB
    else:
        # the pool less what one request of max_model_len takes, by the engine's own concurrency rule
        spare = breakdown.kv_cache_bytes / GIB * (1 - 1 / breakdown.max_concurrency)
    if pool is None or breakdown.failure is not None:
        return ""
    error = max(pool.value - pool.low, pool.high - pool.value)
    if abs(spare) <= error:
        return (f"borderline: {spare:+.2f} GiB beyond one {breakdown.max_model_len:,}-token request, within the "
                f"error of the profile terms (±{error:.2f} GiB at {pool.level:.0%})")
    if breakdown.failure is not None:
        return ""  # the refusal itself is the verdict; a pool that was never sized has no margin to state
    return f"starts, {spare:.2f} GiB to spare (error of the profile terms ±{error:.2f} GiB)"


def format_interval(item: Interval, unit: str = "GiB") -> str:
    return f"({item.level:.0%}: {item.low:.2f}-{item.high:.2f})" if unit == "GiB" else \
        f"({item.level:.0%}: {item.low:,.0f}-{item.high:,.0f})"


# Figures that are predictions a user reads (not the KV arithmetic re-run on a logged budget).
NOT_PREDICTIONS = ("blocks_from_logged_budget", "tokens_from_logged_budget", "concurrency_from_logged_budget",
                   "tokens_from_logged_memory", "tokens_from_logged_start")


def observations(report: dict) -> list[dict]:
    """Every scored prediction of a `score` report (all engines), as (engine, term, era, GPU class, predicted,
    observed); separate-tag cases and refusal misses (no predicted value) are left out."""
    sections = [("vllm", report)] if "per_case" in report else []
    sections += [(name, section) for name, section in report.items() if isinstance(section, dict)
                 and "per_case" in section]
    out = []
    for engine, section in sections:
        for case in section["per_case"]:
            if case.get("separate"):
                continue
            for name, figure in case["figures"].items():
                if term_of(name) in NOT_PREDICTIONS or figure.get("predicted") in (None, 0):
                    continue
                if not isinstance(figure["observed"], (int, float)) or isinstance(figure["observed"], bool):
                    continue
                out.append({"id": case["id"], "engine": engine, "term": term_of(name), "era": case.get("era", "?"),
                            "gpu_class": case.get("gpu_class", "?"), "predicted": float(figure["predicted"]),
                            "observed": float(figure["observed"])})
    return out


def fit(rows: list[dict]) -> dict:
    """Per engine and term, per (era | GPU class), (* | GPU class) and (* | *): n and the 90th percentile of
    |observed - predicted| / |predicted|."""
    from .fidelity import percentile

    buckets: dict[tuple[str, str, str], list[float]] = {}
    for row in rows:
        ratio = abs(row["observed"] - row["predicted"]) / abs(row["predicted"])
        for group in (f"{row['era']} | {row['gpu_class']}", f"* | {row['gpu_class']}", "* | *"):
            buckets.setdefault((row["engine"], row["term"], group), []).append(ratio)
    groups: dict = {}
    for (engine, term, group), values in sorted(buckets.items()):
        groups.setdefault(engine, {}).setdefault(term, {})[group] = {
            "n": len(values), "p90_rel_to_predicted": round(percentile(values, LEVEL), 4)}
    return {"level": LEVEL, "min_cases": MIN_CASES, "groups": groups}


def coverage(rows: list[dict], data: dict) -> dict:
    """Share of observed figures inside their interval, per term and overall (figures with an interval only)."""
    inside: dict[str, list[bool]] = {}
    for row in rows:
        found = bounds(row["engine"], row["term"], row["predicted"], row["era"], row["gpu_class"], data)
        if found is not None:
            inside.setdefault(f"{row['engine']} {row['term']}", []).append(found[0] <= row["observed"] <= found[1])
    every = [hit for hits in inside.values() for hit in hits]
    return {"overall": {"n": len(every), "inside": sum(every), "share": round(sum(every) / len(every), 4) if every else None},
            "by_term": {term: {"n": len(hits), "inside": sum(hits), "share": round(sum(hits) / len(hits), 4)}
                        for term, hits in sorted(inside.items())}}
