"""What users act on, scored: the start verdict (starts / refused / out of memory after the pool), absolute
errors in GiB beside the relative ones, and the grouping keys of the accuracy tables (release era, GPU class).

Pure functions over scored entries (scoring.py builds them); no engine logic here: which era a release belongs to
is the engine's answer (engines/base.py Releases.era)."""
from __future__ import annotations

import math
import re

from .units import GIB

STARTS, REFUSED, OOM_AFTER_POOL, FAILED_UNSHOWN = "starts", "refused", "oom after the pool", "failed (cause not in log)"
AFTER_CHECK_UNSHOWN = "failed after the check (not scored)"
VERDICTS = (STARTS, REFUSED, OOM_AFTER_POOL)
# The engine's own memory refusals (V0 raise_if_cache_size_invalid / V1 check_enough_kv_cache_memory /
# "No available memory for the cache blocks"), as every release phrases them.
_REFUSAL = re.compile(r"KV cache is needed|larger than the maximum number of tokens|No available memory for the cache "
                      r"blocks|Insufficient memory|not enough (GPU )?memory|Cannot auto-fit")
# An out-of-memory error while capturing graphs or warming up, i.e. after the KV pool was allocated.
_OOM_AFTER_POOL = re.compile(r"(?is)(captur\w*|cuda ?graph|warm[- ]?up|compile|dummy_sampler|sampler).{0,400}?"
                             r"(out of memory|OutOfMemoryError)|(out of memory|OutOfMemoryError).{0,400}?"
                             r"(captur\w*|cuda ?graph|warm[- ]?up)")
CONSUMER_MAX_BYTES = 32 * GIB  # the split: consumer cards <= 32 GB, data-center above
CONSUMER, DATA_CENTER, GPU_NOT_STATED = "consumer (<= 32 GB)", "data-center (> 32 GB)", "GPU not stated"


def observed_verdict(case: dict, pool_holds_a_request: bool = False) -> str | None:
    """The verdict a log shows; None when the case does not say whether it started. `pool_holds_a_request`: the
    KV budget the log printed holds one max-length request by the release's pool arithmetic (the scorer's)."""
    observed = case.get("observed") or {}
    failed = observed.get("startup_failed")
    if failed is None:
        return None
    if not failed:
        return STARTS
    log = case.get("log") or ""
    if _REFUSAL.search(log) or (observed.get("kv_cache_gib") is not None and observed["kv_cache_gib"] <= 0) \
            or observed.get("num_gpu_blocks") == 0:
        return REFUSED
    if _OOM_AFTER_POOL.search(log):
        return OOM_AFTER_POOL
    if (observed.get("max_concurrency") or 0) >= 1 or pool_holds_a_request:
        # the pool the log prints holds a whole max-length request, so the engine's own startup check (V0
        # raise_if_cache_size_invalid, V1 check_enough_kv_cache_memory: tokens >= max_model_len) passed; what
        # failed afterwards is not shown, and may not be memory at all
        return AFTER_CHECK_UNSHOWN
    return FAILED_UNSHOWN


def predicted_verdict(failure_message: str | None, refused: bool = False) -> str:
    """A prediction's verdict: a configuration refusal or a failure before serving is a refusal; a failure the
    engine meets while capturing graphs or warming up (after the pool) is an OOM after the pool."""
    if refused:
        return REFUSED
    if failure_message is None:
        return STARTS
    if re.search(r"(?i)captur|cuda graph|warm", failure_message):
        return OOM_AFTER_POOL
    return REFUSED


def verdict_agreement(entries: list[dict]) -> dict:
    """Agreement and confusion table (observed row -> predicted column). A failure whose cause the log does not
    show agrees with either predicted failure, and is its own row so that it is visible. A failure after a pool
    that passed the engine's own check is shown as a row but not scored: the log holds no verdict to agree with."""
    table: dict[str, dict[str, int]] = {}
    agree = n = 0
    for entry in entries:
        pair = entry.get("verdict")
        if not pair or pair["observed"] is None:
            continue
        row = table.setdefault(pair["observed"], {name: 0 for name in VERDICTS})
        row[pair["predicted"]] = row.get(pair["predicted"], 0) + 1
        if pair["observed"] == AFTER_CHECK_UNSHOWN:
            continue
        n += 1
        if pair["observed"] == pair["predicted"] or (pair["observed"] == FAILED_UNSHOWN and pair["predicted"] != STARTS):
            agree += 1
    return {"n": n, "agree": agree, "rate": round(agree / n, 4) if n else None,
            "confusion": {name: table[name] for name in (*VERDICTS, FAILED_UNSHOWN, AFTER_CHECK_UNSHOWN)
                          if name in table}}


def abs_error_gib(key: str, predicted: float, observed: float) -> float | None:
    """|predicted - observed| in GiB for a figure that is a size (GiB/GB keys; MiB keys converted)."""
    if key.endswith(("_gib", "_gb")):
        return abs(predicted - observed)
    if key.endswith("_mib"):
        return abs(predicted - observed) / 1024
    return None


def gpu_class(total_bytes: int | None) -> str:
    if total_bytes is None:
        return GPU_NOT_STATED
    return CONSUMER if total_bytes <= CONSUMER_MAX_BYTES else DATA_CENTER


def release_era(engine: str, version: str, variant: str = "") -> str:
    """The era key a release is grouped by in the accuracy tables and the intervals, from the engine (vLLM's
    budget era from its rule table, SGLang X.Y, llama.cpp's thousand of builds, Ollama)."""
    from .engines import get_engine

    return get_engine(engine).releases.era(version, variant)


def breakdown_era(breakdown) -> str:
    """The era key of a prediction, as the scorer groups cases."""
    return release_era(breakdown.engine_name, breakdown.engine_version, breakdown.engine_variant)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def summaries(entries: list[dict], keys: tuple[str, ...]) -> dict:
    """Per figure: n, relative error median / p90 / max and, for sizes, absolute error (GiB) median / p90."""
    rel: dict[str, list[float]] = {}
    absolute: dict[str, list[float]] = {}
    for entry in entries:
        for name, figure in entry["figures"].items():
            key = name.split(":")[0]  # "kv_buffer_mib:cuda0_kv_buffer_mib": one row per kind over devices
            rel.setdefault(key, []).append(figure["rel_err"])
            if figure.get("abs_err_gib") is not None:
                absolute.setdefault(key, []).append(figure["abs_err_gib"])
    out = {}
    for key in keys:
        values = rel.get(key)
        if not values:
            continue
        out[key] = {"n": len(values), "median_abs_rel_err": round(percentile(values, 0.5), 5),
                    "p90_abs_rel_err": round(percentile(values, 0.9), 5), "max_abs_rel_err": round(max(values), 5)}
        if absolute.get(key):
            out[key]["median_abs_err_gib"] = round(percentile(absolute[key], 0.5), 4)
            out[key]["p90_abs_err_gib"] = round(percentile(absolute[key], 0.9), 4)
    return out


def grouped(entries: list[dict], keys: tuple[str, ...], field: str) -> dict:
    """The summaries per value of an entry field ('era', 'gpu_class'), plus each group's verdict agreement."""
    groups: dict[str, list[dict]] = {}
    for entry in entries:
        groups.setdefault(str(entry.get(field, "?")), []).append(entry)
    return {name: {"cases": len(items), "figures": summaries(items, keys), "verdict": verdict_agreement(items)}
            for name, items in sorted(groups.items())}


HEADLINE_KEYS = ("weights_gib", "kv_cache_gib", "kv_cache_tokens", "max_concurrency", "non_torch_gib",
                 "activation_peak_gib", "cuda_graph_gib", "nvidia_smi_used_mib")


def _md_row(name: str, stats: dict) -> str:
    gib = (f"{stats['median_abs_err_gib']:.3f} | {stats['p90_abs_err_gib']:.3f}" if "median_abs_err_gib" in stats
           else " | ")
    return (f"| {name} | {stats['n']} | {stats['median_abs_rel_err']:.2%} | {stats['p90_abs_rel_err']:.2%} | {gib} |")


def markdown(report: dict, keys: tuple[str, ...] = HEADLINE_KEYS) -> str:
    """The headline, the verdict confusion and the era / GPU-class tables of a vLLM report, as Markdown."""
    head = "| figure | n | median rel | p90 rel | median abs GiB | p90 abs GiB |\n|---|---:|---:|---:|---:|---:|"
    out = [head] + [_md_row(key, report["figures"][key]) for key in keys if key in report["figures"]]
    verdict = report.get("verdict")
    if verdict and verdict.get("n"):
        out += ["", f"Start verdict: {verdict['agree']}/{verdict['n']} agree ({verdict['rate']:.0%}).", "",
                "| log \\ predicted | " + " | ".join(VERDICTS) + " |", "|---|" + "---:|" * len(VERDICTS)]
        out += [f"| {row} | " + " | ".join(str(counts.get(name, 0)) for name in VERDICTS) + " |"
                for row, counts in verdict["confusion"].items()]
    for title, field in (("release era", "by_era"), ("GPU class", "by_gpu_class")):
        if not report.get(field):
            continue
        out += ["", f"By {title}:", "", "| group | figure | n | median rel | p90 rel | median abs GiB | p90 abs GiB |",
                "|---|---|---:|---:|---:|---:|---:|"]
        for name, group in report[field].items():
            verdict = group["verdict"]
            label = f"{name} (verdict {verdict['agree']}/{verdict['n']})"
            rows = [key for key in ("kv_cache_gib", "non_torch_gib", "activation_peak_gib", "cuda_graph_gib")
                    if key in group["figures"]]
            out += [f"| {label if i == 0 else ''} " + _md_row(key, group["figures"][key]) for i, key in enumerate(rows)]
    return "\n".join(out)
