"""How sure a prediction is: a 90 % interval on every predicted figure, from the errors the scorer measured for
that figure's term on the ground truth (per engine, release era, GPU class and setup: one GPU or several), and the
start verdict's margin.

The widths are data (data/intervals.json), written by scripts/refit_intervals.py from `score`'s per-case errors,
never set by hand. A group with fewer than MIN_CASES scored figures falls back to the GPU class across eras, then
to every case of the engine; a term never scored has no interval (nothing is claimed)."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources

from .breakdown import Breakdown, Interval
from .units import GIB

LEVEL = 0.9
MIN_CASES = 5
MIN_CASES_ANY = 2
ROUNDING_GIB = 0.005  # a logged GiB figure is printed to 0.01: half of that is inside any interval
_DEVICE = re.compile(r"^(cuda\d+|cpu_mapped|cpu|cuda_host)_")


# One KV pool, four figures: its GiB, its tokens (GiB / bytes per token), its blocks (tokens / block size) and
# the requests of max_model_len it holds (tokens / max_model_len). Each is the pool times a fixed factor, so they
# share one error term ("kv_pool", fitted on every case that logs any of them, once per case) and one interval:
# the others' are the GiB figure's scaled (attach), so a GiB interval and a token interval always imply each other.
POOL_FIGURES = ("kv_cache_gib", "kv_cache_tokens", "num_gpu_blocks", "max_concurrency")
POOL_TERM = "kv_pool"


def term_of(key: str) -> str:
    """The table row an observed key is scored under: 'cuda1_kv_buffer_mib' -> 'kv_buffer_mib',
    'kv_cache_tokens' -> 'kv_pool' (every figure of the KV pool)."""
    term = _DEVICE.sub("", key.split(":")[0])
    return POOL_TERM if term in POOL_FIGURES else term


@lru_cache(maxsize=1)
def table() -> dict:
    try:
        return json.loads(resources.files("vram_detective").joinpath("data/intervals.json").read_text())
    except FileNotFoundError:
        return {"groups": {}}


ONE_GPU, SEVERAL_GPUS = "1 GPU", "several GPUs"


def setup_of(gpus: int | None) -> str:
    """The setup a figure's error is grouped by besides era and GPU class: one GPU, or a model split over several
    (tensor / pipeline parallel, a llama.cpp split), whose ranks, collectives and per-GPU differences err apart."""
    return SEVERAL_GPUS if (gpus or 1) > 1 else ONE_GPU


def groups_of(era: str, gpu_class: str, setup: str) -> tuple[str, ...]:
    """The groups a figure's error is looked up in, the closest first: its era, GPU class and setup; any era of
    that class and setup; any era of the class; every case of the engine."""
    return (f"{era} | {gpu_class} | {setup}", f"* | {gpu_class} | {setup}", f"* | {gpu_class}", "* | *")


def half_width(engine: str, key: str, era: str, gpu_class: str, data: dict | None = None,
               setup: str = ONE_GPU) -> tuple[float, str] | None:
    """(the 90th percentile of |observed - predicted| / predicted, the group it comes from) or None."""
    groups = (data or table()).get("groups", {}).get(engine, {}).get(term_of(key), {})
    for name in groups_of(era, gpu_class, setup):
        found = groups.get(name)
        # a term scored on fewer cases still gets its widest observed error (the basis says how few)
        if found and found["n"] >= (MIN_CASES if name != "* | *" else MIN_CASES_ANY):
            return found["p90_rel_to_predicted"], f"{name} (n={found['n']})"
    return None


def bounds(engine: str, key: str, value: float, era: str, gpu_class: str,
           data: dict | None = None, setup: str = ONE_GPU) -> tuple[float, float, str] | None:
    width = half_width(engine, key, era, gpu_class, data, setup)
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

    era, device, setup = breakdown_era(breakdown), gpu_class(breakdown.total_gpu_bytes), setup_of(gpus_of(breakdown))
    found = []
    for key, value in schema_figures(breakdown).items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            # a zero is a rule's exact answer (no CPU blocks, no graphs), not a measurement; a negative is a
            # shortfall (the KV memory left after weights that do not fit), a figure no start ever reaches
            continue
        if key == "nvidia_smi_used_mib" and breakdown.failure is not None:
            continue  # a refused start never reaches the steady state nvidia-smi would show
        interval = interval_of(breakdown.engine_name, key, float(value), era, device, setup)
        if interval is not None:
            found.append(within_the_card(interval, breakdown))
    found = one_pool(found)
    return replace(breakdown, intervals=tuple(found), verdict_margin=verdict_margin(breakdown, found))


def gpus_of(breakdown: Breakdown) -> int:
    """GPUs the prediction spreads the model over: its ranks (tensor x pipeline parallel), else the devices its
    figures name (a llama.cpp split: cuda0_, cuda1_, ...)."""
    from .render import schema_figures
    from .summary import model_gpus

    devices = {match.group(1) for key in schema_figures(breakdown) if (match := re.match(r"^(cuda\d+)_", key))}
    return max(model_gpus(breakdown), len(breakdown.per_rank), len(breakdown.devices or ()), len(devices), 1)


def one_pool(found: list[Interval]) -> list[Interval]:
    """The KV pool's token, block and concurrency intervals as its GiB interval scaled by each figure's own
    factor (tokens = GiB / bytes per token, ...): one pool, one relative error, clipped once (on the card)."""
    by_key = {item.key: item for item in found}
    pool = by_key.get("kv_cache_gib")
    if pool is None or pool.value <= 0:
        return found
    out = []
    for item in found:
        if item.key in POOL_FIGURES and item.key != pool.key:
            scale = item.value / pool.value
            item = replace(item, low=pool.low * scale, high=pool.high * scale, basis=pool.basis)
        out.append(item)
    return out


def card_limit(key: str, breakdown: Breakdown) -> float | None:
    """The most one GPU can hold of a figure, in the figure's unit (None: not a size on one GPU)."""
    return card_limit_of(key, breakdown.total_gpu_bytes, breakdown.gpu_name, breakdown.kv_bytes_per_token)


def card_limit_of(key: str, total: int, gpu_name: str = "", kv_bytes_per_token: int = 0) -> float | None:
    """card_limit for a card of `total` CUDA bytes. nvidia-smi's total is the CUDA total plus what the driver
    reserves, so 'used' is capped at the card's nvidia-smi total (the CUDA total where none is listed: a unified-
    memory card such as GB10 has none)."""
    if key.startswith(("cpu", "cuda_host", "host")) or "total" in key:
        return None
    if key == "nvidia_smi_used_mib":
        from .hardware import all_gpus

        listed = {gpu.name: gpu.nvidia_smi_total_mib for gpu in all_gpus()}.get(gpu_name)
        return float(listed) if listed else total / (1024 * 1024)
    if key.endswith("_mib"):
        return total / (1024 * 1024)
    if key.endswith("_gib"):
        return total / GIB
    if key.endswith("_gb"):
        return total / 1e9
    if key == "kv_cache_tokens" and kv_bytes_per_token > 0:
        return total / kv_bytes_per_token
    return None


def within_the_card(interval: Interval, breakdown: Breakdown) -> Interval:
    """The interval clipped to what can exist: never below 0, never above the GPU (and never past its own point,
    which a figure on the card already is)."""
    return clipped(interval, card_limit(interval.key, breakdown))


def clipped(interval: Interval, limit: float | None) -> Interval:
    """`interval` within [0, limit] (the limit in the figure's unit; None: no upper limit), its point kept."""
    high = interval.high if limit is None else max(min(interval.high, limit), interval.value)
    return replace(interval, low=max(interval.low, 0.0), high=high)


def interval_of(engine: str, key: str, value: float, era: str, gpu_class: str,
                setup: str = ONE_GPU) -> Interval | None:
    """One predicted figure's interval (None where its term was never scored)."""
    found = bounds(engine, key, value, era, gpu_class, setup=setup)
    return None if found is None else Interval(key, value, found[0], found[1], LEVEL, found[2])


@dataclass(frozen=True)
class Margin:
    """The room a verdict has beyond what it needs, against the error of the figure it rests on: the KV pool
    less the requests it must hold (vLLM, SGLang), or a GPU's budget less its VRAM (llama.cpp)."""

    spare_gib: float  # negative: a shortfall
    error_gib: float  # half the width of that figure's interval, in GiB
    interval: Interval  # the interval it comes from (its own unit: GiB, tokens or MiB)
    requests: float = 1.0  # requests of max_model_len the pool must hold (1: the engine's startup check)
    budget: bool = False  # a GPU's budget less its VRAM (budget_margin), not a KV pool

    @property
    def covers(self) -> bool:
        """The room survives the figure's error: its interval's bad end still meets the need."""
        return self.spare_gib > self.error_gib

    @property
    def borderline(self) -> bool:
        return abs(self.spare_gib) <= self.error_gib

    def to_dict(self) -> dict:
        item = self.interval
        return {"margin_gib": round(self.spare_gib, 4), "covers_interval": self.covers,
                "interval": {"figure": item.key, "value": round(item.value, 4), "low": round(item.low, 4),
                             "high": round(item.high, 4), "level": item.level, "basis": item.basis,
                             "error_gib": round(self.error_gib, 4)}}


def pool_margin(pool_bytes: float, concurrency: float, intervals, requests: float = 1.0) -> Margin | None:
    """The KV pool less `requests` requests of max_model_len, by the engine's own concurrency rule, against the
    pool's interval: its GiB figure's, else its token count's scaled to the pool (SGLang scores tokens only)."""
    by_key = {item.key: item for item in intervals}
    pool = by_key.get("kv_cache_gib") or by_key.get("kv_cache_tokens")
    if pool is None or pool.value == 0:
        return None
    pool_gib = pool_bytes / GIB
    spare = pool_gib if pool_bytes <= 0 or concurrency <= 0 else pool_gib * (1 - requests / concurrency)
    error = max(pool.value - pool.low, pool.high - pool.value)
    if pool.key != "kv_cache_gib":
        error *= abs(pool_gib / pool.value)
    return Margin(spare, error, pool, requests)


def budget_margin(budget_bytes: float, used_bytes: float, interval: Interval) -> Margin:
    """A GPU's budget less what it holds, against the interval of that holding (`interval` in MiB)."""
    error = max(interval.value - interval.low, interval.high - interval.value) * (1 << 20) / GIB
    return Margin((budget_bytes - used_bytes) / GIB, error, interval, budget=True)


def describe(margin: Margin, max_model_len: int) -> str:
    """'starts, 1.20 GiB to spare (...)' or 'borderline: +0.04 GiB beyond one 32,768-token request, ...'."""
    if margin.budget:
        if margin.borderline:
            return (f"borderline: {margin.spare_gib:+.2f} GiB under the GPU's budget, within the error of its VRAM "
                    f"figure (±{margin.error_gib:.2f} GiB at {margin.interval.level:.0%})")
        return f"fits, {margin.spare_gib:.2f} GiB to spare (error of the VRAM figure ±{margin.error_gib:.2f} GiB)"
    what = (f"one {max_model_len:,}-token request" if margin.requests == 1
            else f"{margin.requests:g} requests of {max_model_len:,} tokens")
    if margin.borderline:
        return (f"borderline: {margin.spare_gib:+.2f} GiB beyond {what}, within the error of the profile terms "
                f"(±{margin.error_gib:.2f} GiB at {margin.interval.level:.0%})")
    if margin.spare_gib < 0:  # an engine that starts with a pool smaller than the requests (SGLang, llama.cpp)
        return (f"starts, but the KV pool is {-margin.spare_gib:.2f} GiB short of {what} (beyond the error of the "
                f"profile terms ±{margin.error_gib:.2f} GiB)")
    beyond = "" if margin.requests == 1 else f" beyond {what}"
    return f"starts, {margin.spare_gib:.2f} GiB to spare{beyond} (error of the profile terms ±{margin.error_gib:.2f} GiB)"


def safe_room(breakdown: Breakdown, requests: float = 1.0, intervals=None) -> Margin | None:
    """How much room is safe: the KV pool less `requests` requests of max_model_len, against the pool's 90 %
    interval (pool_margin). The one answer explain (its verdict and smallest footprint), fit, whatif and logs
    (its least utilization) give; None when the pool has no interval (nothing is claimed)."""
    found = breakdown.intervals if intervals is None else intervals
    return pool_margin(breakdown.kv_cache_bytes, breakdown.max_concurrency, found, requests)


def starts_safely(breakdown: Breakdown, requests: float = 1.0) -> bool:
    """The engine starts, its pool holds `requests` requests of max_model_len, and that room survives the
    pool's error where one is known (a borderline setting is not a safe one)."""
    if breakdown.failure is not None or breakdown.max_concurrency < requests:
        return False
    margin = safe_room(breakdown, requests)
    return margin is None or margin.covers


def verdict_margin(breakdown: Breakdown, intervals: list[Interval]) -> str:
    """'starts, 1.2 GiB to spare' when one request of max_model_len fits with room beyond the KV pool's
    interval; 'borderline' when the room (or the shortfall) lies within it. A refusal states none (the
    refusal itself is the verdict; a pool that was never sized has no margin)."""
    margin = safe_room(breakdown, 1.0, intervals)
    if margin is None or breakdown.failure is not None:
        return ""
    return describe(margin, breakdown.max_model_len)


def format_interval(item: Interval, unit: str = "GiB") -> str:
    return f"({item.level:.0%}: {item.low:.2f}-{item.high:.2f})" if unit == "GiB" else \
        f"({item.level:.0%}: {item.low:,.0f}-{item.high:,.0f})"


# Figures that are predictions a user reads (not the KV arithmetic re-run on a logged budget).
NOT_PREDICTIONS = ("blocks_from_logged_budget", "tokens_from_logged_budget", "concurrency_from_logged_budget",
                   "tokens_from_logged_memory", "tokens_from_logged_start")


def observations(report: dict) -> list[dict]:
    """Every scored prediction of a `score` report (all engines), as (engine, term, era, GPU class, predicted,
    observed); separate-tag cases and refusal misses (no predicted value) are left out."""
    sections = [(name, section) for name, section in report.items() if isinstance(section, dict)
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
                            "gpu_class": case.get("gpu_class", "?"), "setup": setup_of(case.get("gpus")),
                            "predicted": float(figure["predicted"]),
                            "observed": float(figure["observed"])})
    return out


def fit(rows: list[dict]) -> dict:
    """Per engine and term, per (era | GPU class | setup), (* | GPU class | setup), (* | GPU class) and (* | *):
    n and the 90th percentile of |observed - predicted| / |predicted|."""
    from .fidelity import percentile

    buckets: dict[tuple[str, str, str], list[float]] = {}
    for row in _one_row_per_pool(rows):
        ratio = abs(row["observed"] - row["predicted"]) / abs(row["predicted"])
        for group in groups_of(row["era"], row["gpu_class"], row.get("setup", ONE_GPU)):
            buckets.setdefault((row["engine"], row["term"], group), []).append(ratio)
    groups: dict = {}
    for (engine, term, group), values in sorted(buckets.items()):
        groups.setdefault(engine, {}).setdefault(term, {})[group] = {
            "n": len(values), "p90_rel_to_predicted": round(percentile(values, LEVEL), 4)}
    return {"level": LEVEL, "min_cases": MIN_CASES, "groups": groups}


def _one_row_per_pool(rows: list[dict]) -> list[dict]:
    """Rows with a case's KV pool figures counted once: the one with the largest relative error (a case logging
    the pool's GiB and its tokens is one observation of one pool, not two)."""
    def error(row):
        return abs(row["observed"] - row["predicted"]) / abs(row["predicted"])

    worst: dict[tuple[str, str], dict] = {}
    out = []
    for row in rows:
        if row["term"] != POOL_TERM:
            out.append(row)
            continue
        key = (row["engine"], row["id"])
        if key not in worst or error(row) > error(worst[key]):
            worst[key] = row
    return out + list(worst.values())


def coverage(rows: list[dict], data: dict) -> dict:
    """Share of observed figures inside their interval, per term and overall (figures with an interval only)."""
    inside: dict[str, list[bool]] = {}
    for row in rows:
        found = bounds(row["engine"], row["term"], row["predicted"], row["era"], row["gpu_class"], data,
                       row.get("setup", ONE_GPU))
        if found is not None:
            inside.setdefault(f"{row['engine']} {row['term']}", []).append(found[0] <= row["observed"] <= found[1])
    every = [hit for hits in inside.values() for hit in hits]
    return {"overall": {"n": len(every), "inside": sum(every), "share": round(sum(every) / len(every), 4) if every else None},
            "by_term": {term: {"n": len(hits), "inside": sum(hits), "share": round(sum(hits) / len(hits), 4)}
                        for term, hits in sorted(inside.items())}}
