"""Accuracy on the real-llama.cpp CPU cases (groundtruth/llamacpp-cpu-*.jsonl, written by
benchmarks/llamacpp_cpu_groundtruth.py): each case planned from its own fields (the catalog model's config, the
build, the settings in llama.cpp's names, a CPU-only build) and every buffer the log printed set against the
plan's. Prints one table per build: per figure kind, loads, exact loads, median and worst |error|.

    PYTHONPATH=src python3 benchmarks/llamacpp_cpu_accuracy.py [FILE ...] [--cases]
"""
from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = ("gguf_type", "n_ctx", "n_batch", "n_ubatch", "n_parallel", "type_k", "type_v", "flash_attn", "mmap",
            "repack", "swa_full", "kv_unified", "n_gpu_layers")
KINDS = ("model", "kv", "output", "compute")
_KEY = re.compile(r"(cpu_mapped|cpu_repack|cpu)_(model|kv|output|compute)_buffer_mib$")


def case_files(paths=()) -> list[Path]:
    return [Path(p) for p in paths] or sorted((ROOT / "groundtruth").glob("llamacpp-cpu-*.jsonl"))


def read_cases(paths=()) -> list[dict]:
    return [json.loads(line) for path in case_files(paths) for line in path.read_text().splitlines() if line.strip()]


def user_settings(case: dict) -> dict:
    """The case's settings in the engine's names; a CPU-only build has no GPU device (num_gpus 0)."""
    s = case["settings"]
    out = {k: s[k] for k in SETTINGS if k in s}
    if s.get("cpu_build"):
        out["num_gpus"] = 0
    return out


def predict(case: dict) -> dict:
    """The figures the engine's plan prints for this case (SCHEMA.md keys, MiB)."""
    from vram_detective.api import model_spec
    from vram_detective.engines import get_engine
    from vram_detective.hardware import custom_gpu

    engine = get_engine("llamacpp")
    b = engine.plan(model_spec(case["model"], source="catalog"), custom_gpu(80 * 2**30), user_settings(case),
                    engine.releases.resolve(case["engine_version"]))
    return {f.key: f.value for f in b.engine_figures if f.schema}


def compare(case: dict, pred: dict | None = None) -> list[tuple[str, str, float, float]]:
    """(kind, figure, predicted, observed) per buffer the log printed, plus host RAM (every buffer is host)."""
    obs = case["observed"]
    pred = predict(case) if pred is None else pred
    rows = [(m.group(2), key, pred.get(key, 0.0), value) for key, value in obs.items() if (m := _KEY.match(key))]
    host_keys = [k for k in obs if _KEY.match(k)]
    rows.append(("host", "host RAM", sum(pred.get(k, 0.0) for k in set(host_keys) | {k for k in pred if _KEY.match(k)}),
                 sum(obs[k] for k in host_keys)))
    return rows


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
    for kind in KINDS + ("host",):
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
