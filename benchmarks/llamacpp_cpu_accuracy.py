"""Accuracy on the real-llama.cpp CPU cases (groundtruth/cpu/llamacpp_*.jsonl, written by
benchmarks/llamacpp_cpu_groundtruth.py): each case planned from its own fields (the catalog model's config, the
build, the settings in llama.cpp's names, a CPU-only build) and every buffer the log printed set against the
plan's. Prints one table per build: per figure kind, loads, exact loads, median and worst |error|.

    PYTHONPATH=src python3 benchmarks/llamacpp_cpu_accuracy.py [FILE ...] [--cases]
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("model", "kv", "output", "compute", "host")


def case_files(paths=()) -> list[Path]:
    return [Path(p) for p in paths] or sorted((ROOT / "groundtruth" / "cpu").glob("llamacpp_*.jsonl"))


def read_cases(paths=()) -> list[dict]:
    return [json.loads(line) for path in case_files(paths) for line in path.read_text().splitlines() if line.strip()]


def compare(case: dict) -> list[tuple[str, str, float, float]]:
    """(kind, figure, predicted, observed) as `score` compares them: the case planned from its own fields
    (engines/llamacpp/accuracy.py plan_case; the model from the catalog)."""
    from vram_detective.engines.llamacpp import accuracy
    from vram_detective.scoring import case_model

    plan, model = accuracy.plan_case(case), case_model(case, catalog_only=True)
    if isinstance(plan, str) or isinstance(model, str):
        raise SystemExit(f"{case['id']}: not planned: {plan if isinstance(plan, str) else model}")
    return accuracy.compare(case, model.spec, plan)


def _error(predicted: float, observed: float) -> float:
    return (predicted - observed) / observed * 100 if observed else (0.0 if predicted == observed else float("inf"))


def table(cases: list[dict]) -> list[str]:
    by_kind: dict[str, list[tuple[float, bool]]] = {}
    for case in cases:
        if case["observed"].get("startup_failed"):
            continue
        for kind, _, predicted, observed in compare(case):
            by_kind.setdefault(kind, []).append((abs(_error(predicted, observed)), abs(predicted - observed) < 0.006))
    out = [f"  {'figure':<10}{'loads':>7}{'exact':>7}{'median |err| %':>16}{'worst |err| %':>15}"]
    for kind in KINDS:
        got = by_kind.get(kind)
        if got:
            errors = [e for e, _ in got]
            out.append(f"  {kind:<10}{len(got):>7}{sum(x for _, x in got):>7}{statistics.median(errors):>16.2f}"
                       f"{max(errors):>15.2f}")
    return out


def main(argv: list[str]) -> int:
    show = "--cases" in argv
    paths = [a for a in argv if not a.startswith("--")]
    cases = read_cases(paths)
    for build in sorted({c["engine_version"] for c in cases}, key=lambda b: int(b[1:])):
        chosen = [c for c in cases if c["engine_version"] == build]
        print(f"llama.cpp {build} (CPU build): {len(chosen)} loads, {len({c['model'] for c in chosen})} models")
        print("\n".join(table(chosen)))
        if show:
            for case in chosen:
                for kind, figure, predicted, observed in compare(case):
                    if abs(predicted - observed) >= 0.006:
                        print(f"    {case['id'][13:]:<80} {figure:<28} {predicted:10.2f} {observed:10.2f} "
                              f"{_error(predicted, observed):+7.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
