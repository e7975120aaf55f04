"""Refit the calibration constants (src/vram_detective/engines/vllm/calibration.py) from the ground-truth logs.

    python scripts/refit_calibration.py                   # shipped vs refit value, term error on fit / held-out cases
    python scripts/refit_calibration.py --write           # rewrite the values in calibration.py
    python scripts/refit_calibration.py --groundtruth DIR # another shared/groundtruth folder

Every constant enters a figure the logs print (non-torch memory, CUDA-graph memory, the KV budget behind the
logged GPU blocks, the activation peak) linearly. For each case the tool's own prediction of that figure is
probed with the constant at 0 and at 1 unit (scoring's path to vram_detective.api.explain, or profile.non_torch
for the model-free non-torch term, with the release read from the log by engines/vllm/logs/eras.py): the case's estimate
is (logged - the modelled rest) / slope. The refit is the median of the estimates over the cases scripts/calibration_cases.json names for the record,
rounded to its step; a choice record keeps the choice with the lowest median error. The term error is
|prediction with the value - logged| / logged, on the fitted cases and on the held-out ones (calibration_cases.held_out,
without the tags the scorer reports apart).
"""
from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

sys.path.insert(0, str(ROOT / "scripts"))
import calibration_cases  # noqa: E402
from vram_detective import scoring  # noqa: E402
from vram_detective.engines.vllm import calibration, profile, releases  # noqa: E402
from vram_detective.engines.vllm.calibration import Fitted  # noqa: E402
from vram_detective.engines.vllm.settings import pick_engine  # noqa: E402
from vram_detective.engines.vllm import scoring as vllm_scoring  # noqa: E402
from vram_detective.engines.vllm.logs.eras import infer_engine_from_log, infer_version_from_log, refine_wildcard_version  # noqa: E402
from vram_detective.units import GIB, parse_version  # noqa: E402

FIGURE_LABELS = {"non_torch": "logged non-torch memory", "graphs": "logged CUDA-graph memory",
                 "graph_estimate": "logged CUDA-graph estimate",
                 "kv_from_blocks": "KV budget of the logged GPU blocks", "activation": "logged activation peak"}
DEFAULT_GROUNDTRUTH = ROOT / "groundtruth"  # the repo copy (scripts/sync_groundtruth.py)
DEV_FILES = ("dev.jsonl", "dev-vllm-more.jsonl", "dev-vllm-modern.jsonl")
CALIBRATION_FILE = ROOT / "src" / "vram_detective" / "engines" / "vllm" / "calibration.py"

# record -> (figure it enters, where the code reads it)
TARGETS = {
    "NON_TORCH_HOPPER_PLUS": ("non_torch", ("profile", "NON_TORCH_HOPPER_PLUS")),
    "NON_TORCH_OTHER": ("non_torch", ("profile", "NON_TORCH_OTHER")),
    "NCCL_PER_RANK": ("non_torch", ("profile", "NCCL_PER_RANK")),
    "CUDA_CONTEXT": ("non_torch", ("profile", "CUDA_CONTEXT")),
    "GLOBAL_ERA_PER_EXTRA_RANK": ("non_torch", ("profile", "GLOBAL_ERA_PER_EXTRA_RANK")),
    "NON_TORCH_HOPPER_PLUS_FROM_0_18": ("non_torch", ("profile", "NON_TORCH_HOPPER_PLUS_FROM_0_18")),
    "NCCL_LAZY_COMMUNICATOR_HOPPER_PLUS": ("non_torch", ("profile", "NCCL_LAZY_COMMUNICATOR_HOPPER_PLUS")),
    "GRAPH_BYTES_PER_LAYER_V0": ("graphs", ("graph", "v0")),
    "GRAPH_BYTES_PER_LAYER_V1_PIECEWISE": ("graphs", ("graph", "v1-piecewise")),
    "GRAPH_BYTES_PER_LAYER_V1_FULL_AND_PIECEWISE": ("graphs", ("graph", "v1-full-and-piecewise")),
    "RESERVED_OVER_ALLOCATED_AT_PEAK": ("kv_from_blocks", ("profile", "RESERVED_OVER_ALLOCATED_AT_PEAK")),
    "GRAPH_FIRST_CAPTURE_HOPPER_PLUS": ("graph_estimate", ("profile", "GRAPH_FIRST_CAPTURE_HOPPER_PLUS")),
    "GRAPH_SECOND_CAPTURE_PER_LAYER_HOPPER_PLUS": ("graph_estimate", ("profile", "GRAPH_SECOND_CAPTURE_PER_LAYER_HOPPER_PLUS")),
    "GRAPH_ACTUAL_OVER_ESTIMATE_HOPPER_PLUS": ("graphs", ("profile", "GRAPH_ACTUAL_OVER_ESTIMATE_HOPPER_PLUS")),
    "SAMPLER_BYTES_PER_LOGIT_FROM_0_28": ("activation", ("rule", "sampler_bytes_per_logit", (0, 28, 0))),
}


def load_dev(folder: Path) -> dict[str, dict]:
    cases = {}
    for name in DEV_FILES:
        for case in scoring.load_cases(str(folder / name)):
            cases[case["id"]] = case
    return cases


def with_assumptions(case: dict) -> dict:
    changes, _ = calibration_cases.case_assumptions().get(case["id"], ({}, ""))
    out = dict(case, **{key: value for key, value in changes.items() if key != "settings"})
    if "settings" in changes:
        out["settings"] = dict(case.get("settings") or {}, **changes["settings"])
    return out


@contextmanager
def constant_set_to(record: Fitted, value: float):
    """The code reads `value` (in the record's unit) for the record while inside."""
    where = TARGETS[record.name][1]
    amount = int(value * calibration.UNIT_BYTES[record.unit]) if record.unit in calibration.UNIT_BYTES else value
    if where[0] == "profile":
        saved = getattr(profile, where[1])
        setattr(profile, where[1], amount)
        try:
            yield
        finally:
            setattr(profile, where[1], saved)
    elif where[0] == "graph":
        saved = profile.GRAPH_BYTES_PER_LAYER[where[1]]
        profile.GRAPH_BYTES_PER_LAYER[where[1]] = amount
        try:
            yield
        finally:
            profile.GRAPH_BYTES_PER_LAYER[where[1]] = saved
    else:
        saved = releases.RULE_CHANGES
        releases.RULE_CHANGES = tuple(replace(change, value=amount) if (change.rule, change.since) == where[1:] else change
                                      for change in saved)
        releases.clear_caches()
        try:
            yield
        finally:
            releases.RULE_CHANGES = saved
            releases.clear_caches()


def case_gpu(case: dict):
    """The GPU the scorer predicts the case on (engines/vllm/scoring.py _case_gpu: sized to the logged total, or nominal)."""
    return vllm_scoring._case_gpu(case)[0]


def case_release(case: dict, gpu):
    """The release and engine path the case's version and log say (engines/vllm/logs/eras.py), or None."""
    log = case.get("log", "")
    version = case.get("engine_version")
    version = refine_wildcard_version(version, log) if version else infer_version_from_log(log)
    if not version or parse_version(version) < releases.OLDEST_SUPPORTED:
        return None
    number = parse_version(version)
    requested = infer_engine_from_log(log) if number >= (0, 6, 4) else None
    engine, _ = pick_engine(releases.release(number), gpu, requested)
    return releases.release(number, engine)


def non_torch_bytes(case: dict) -> float | None:
    """Non-torch memory inside the budget as the tool models it: the scorer's prediction where the case's model
    resolves (the FlashInfer all-reduce workspace is sized by the model), else the model-free term, which depends
    on the GPU, world size and release only (so cases that name no model count too)."""
    breakdown = breakdown_of(case, need_gpu=False) if case.get("model") else None
    if breakdown is not None and breakdown.figure("non_torch_bytes") is not None:
        return breakdown.figure("non_torch_bytes")
    gpu = case_gpu(case)
    release = case_release(case, gpu)
    if release is None:
        return None
    settings = case.get("settings") or {}
    world = SimpleNamespace(tensor_parallel_size=int(settings.get("tensor_parallel_size") or 1),
                            pipeline_parallel_size=int(settings.get("pipeline_parallel_size") or 1))
    return profile.non_torch(gpu, world, release)[0]


def breakdown_of(case: dict, need_gpu: bool):
    found, _ = vllm_scoring._predict(case)
    if not found or found.refused or (need_gpu and found.partial):
        return None
    return found.breakdown


def logged_figure(kind: str, case: dict) -> float | None:
    observed = case.get("observed") or {}
    if kind == "non_torch":
        value = observed.get("non_torch_gib")
    elif kind == "graphs":
        value = observed.get("cuda_graph_gib") or observed.get("cuda_graph_estimate_gib")
        value = value if value and value > 0 else None
    elif kind == "graph_estimate":
        value = observed.get("cuda_graph_estimate_gib")
    elif kind == "activation":
        value = observed.get("activation_peak_gib")
    else:
        return observed.get("num_gpu_blocks")
    return None if value is None else value * GIB


def predicted_figure(kind: str, case: dict) -> tuple[float, float] | None:
    """(the tool's figure, the logged figure in bytes) for the case, or None when it has no such pair."""
    if kind == "non_torch":
        return non_torch_bytes(case), logged_figure(kind, case)
    breakdown = breakdown_of(case, need_gpu=kind == "kv_from_blocks")
    if breakdown is None:
        return None
    if kind == "graphs":
        return breakdown.cuda_graph_bytes, logged_figure(kind, case)
    if kind == "graph_estimate":
        return breakdown.figure("cuda_graph_estimate_bytes"), logged_figure(kind, case)
    if kind == "activation":
        return breakdown.activation_peak_bytes, logged_figure(kind, case)
    block = breakdown.kv_bytes_per_token * breakdown.block_size
    return breakdown.kv_cache_bytes, (logged_figure(kind, case) + 0.5) * block  # the logged blocks' budget


@dataclass(frozen=True)
class Point:
    """One case's figure as a line in the constant: prediction = base + slope x value."""

    case_id: str
    observed: float
    base: float
    slope: float

    @property
    def estimate(self) -> float:
        return (self.observed - self.base) / self.slope

    def error(self, value: float) -> float:
        return abs(self.base + self.slope * value - self.observed) / abs(self.observed)


def point(record: Fitted, case: dict) -> Point | None:
    kind = TARGETS[record.name][0]
    case = with_assumptions(case)
    if logged_figure(kind, case) is None:
        return None
    probes = []
    for value in (0, 1):
        with constant_set_to(record, value):
            pair = predicted_figure(kind, case)
        if pair is None or pair[0] is None:
            return None
        probes.append(pair)
    (base, observed), (one, _) = probes
    if one == base:
        return None  # the constant does not enter this case's figure
    return Point(case["id"], observed, base, one - base)


def choice_errors(record: Fitted, cases: list[dict]) -> dict[float, list[tuple[str, float]]]:
    """Per choice: (case, relative error of the figure) for the cases that log the figure and whose prediction
    depends on the choice."""
    kind = TARGETS[record.name][0]
    predictions = {}
    for choice in record.choices:
        with constant_set_to(record, choice):
            predictions[choice] = [predicted_figure(kind, with_assumptions(case)) for case in cases]
    out = {choice: [] for choice in record.choices}
    for index, case in enumerate(cases):
        pairs = [predictions[choice][index] for choice in record.choices]
        if any(pair is None or pair[1] is None for pair in pairs) or len({pair[0] for pair in pairs}) == 1:
            continue
        for choice, (predicted, observed) in zip(record.choices, pairs):
            out[choice].append((case["id"], abs(predicted - observed) / observed))
    return out


def _round(value: float, step: float) -> float:
    """To a multiple of `step`, printed with the step's decimals (0.05 -> 2)."""
    return round(round(value / step) * step, max(0, -math.floor(math.log10(step) + 1e-9)))


@dataclass(frozen=True)
class Refit:
    record: Fitted
    value: float  # the refit, rounded like the shipped value
    raw: float  # before rounding (the median of the estimates, or the chosen value)
    fitted: tuple[tuple[str, float], ...]  # (case, estimate) of the fitted cases (choice: the case's error)
    errors_fitted: tuple[float, ...]  # term errors with the shipped value
    errors_held_out: tuple[float, ...]
    held_out_ids: tuple[str, ...]
    missing: tuple[str, ...]  # fitted_on cases that gave no point


def fit(record: Fitted, cases: dict[str, dict]) -> Refit:
    held = [cases[i] for i in calibration_cases.held_out("vllm", cases)
            if not set(cases[i].get("tags") or ()) & set(scoring.SEPARATE_TAGS)]
    mine = [cases[i] for i in calibration_cases.fitted_on("vllm", record) if i in cases]
    missing = tuple(i for i in calibration_cases.fitted_on("vllm", record) if i not in cases)
    if record.choices:
        fitted = choice_errors(record, mine)
        raw = min(record.choices, key=lambda c: (statistics.median([e for _, e in fitted[c]]) if fitted[c] else math.inf))
        held_errors = choice_errors(record, held)[record.value]
        shipped = fitted[record.value]
        return Refit(record, raw, raw, tuple(fitted[raw]), tuple(e for _, e in shipped),
                     tuple(e for _, e in held_errors), tuple(i for i, _ in held_errors),
                     missing + tuple(i for i in calibration_cases.fitted_on("vllm", record) if i not in {c for c, _ in shipped}))
    points = [p for p in (point(record, case) for case in mine) if p is not None]
    held_points = [p for p in (point(record, case) for case in held) if p is not None]
    missing += tuple(i for i in calibration_cases.fitted_on("vllm", record) if i in cases and i not in {p.case_id for p in points})
    raw = statistics.median(p.estimate for p in points) if points else math.nan
    value = _round(raw, record.rounding) if points else math.nan
    return Refit(record, value, raw, tuple((p.case_id, p.estimate) for p in points),
                 tuple(p.error(record.value) for p in points), tuple(p.error(record.value) for p in held_points),
                 tuple(p.case_id for p in held_points), missing)


def _stats(errors) -> str:
    if not errors:
        return "n=0"
    return (f"n={len(errors)} median {statistics.median(errors):.1%} "
            f"p90 {scoring._percentile(list(errors), 0.9):.1%}")


def report(result: Refit) -> str:
    record = result.record
    same = result.value == record.value
    shown = f"{{:.{_decimals(record)}f}}"
    lines = [f"{record.name} ({record.unit}): shipped {shown.format(record.value)}, refit {shown.format(result.value)}"
             + ("" if same else f"  <- DIFFERS by {result.value - record.value:+.4g}") + f"  [raw {result.raw:.4g}]",
             f"  fitted ({len(calibration_cases.fitted_on('vllm', record))}{', error per case' if record.choices else ''}): " + ", ".join(f"{c} {v:.4g}" for c, v in result.fitted),
             f"  error of the {FIGURE_LABELS[TARGETS[record.name][0]]} with {record.value}: "
             f"fitted {_stats(result.errors_fitted)}; "
             f"held out {_stats(result.errors_held_out)}"]
    if not same and record.refit_note:
        lines.append(f"  why: {record.refit_note}")
    if result.held_out_ids:
        lines.append("  held-out cases: " + ", ".join(result.held_out_ids))
    if result.missing:
        lines.append("  fitted_on cases giving no point: " + ", ".join(result.missing))
    return "\n".join(lines)


def write_values(results: list[Refit]) -> list[str]:
    text = CALIBRATION_FILE.read_text()
    changed = []
    for result in results:
        if math.isnan(result.value) or result.value == result.record.value:
            continue
        pattern = re.compile(r'(Fitted\(\s*"' + result.record.name + r'",\s*)([-0-9.]+)')
        new = f"{int(result.value)}" if result.record.choices else f"{result.value:.{_decimals(result.record)}f}"
        text, count = pattern.subn(lambda m: m.group(1) + new, text)
        if count == 1:
            changed.append(f"{result.record.name}: {result.record.value} -> {new}")
    CALIBRATION_FILE.write_text(text)
    return changed


def _decimals(record: Fitted) -> int:
    return max(0, -math.floor(math.log10(record.rounding) + 1e-9)) if record.rounding else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groundtruth", default=str(DEFAULT_GROUNDTRUTH), help="folder with " + ", ".join(DEV_FILES))
    parser.add_argument("--write", action="store_true", help="rewrite the values in calibration.py")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args()
    folder = Path(args.groundtruth)
    if not all((folder / name).is_file() for name in DEV_FILES):
        print(f"{folder}: {', '.join(DEV_FILES)} not found (pass --groundtruth)", file=sys.stderr)
        return 2
    cases = load_dev(folder)
    held = calibration_cases.held_out("vllm", cases)
    results = [fit(record, cases) for record in calibration.RECORDS]
    if args.json:
        print(json.dumps([{"name": r.record.name, "shipped": r.record.value, "refit": r.value, "raw": r.raw,
                           "fitted": dict(r.fitted), "errors_fitted": r.errors_fitted,
                           "errors_held_out": dict(zip(r.held_out_ids, r.errors_held_out))} for r in results], indent=1))
    else:
        print(f"dev cases: {len(cases)}; fit cases (named by a record): {len(cases) - len(held)}; held out: {len(held)}\n")
        print("\n\n".join(report(result) for result in results))
    if args.write:
        for line in write_values(results) or ["nothing to rewrite"]:
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
