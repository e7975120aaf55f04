"""llama.cpp / Ollama dev cases end to end through the engines: every printed figure vs the plan.

    PYTHONPATH=src python3 benchmarks/llamacpp_accuracy.py

The plans and the comparison live in engines/llamacpp/accuracy.py, shared with `vram-detective score`.

Per case: model buffer per device, KV buffer per device (exact), compute buffer per device, VRAM per device
(llama.cpp's own buffers on that GPU: model + KV + compute, the figures a log prints) and host RAM (host model
buffer + CPU KV + CUDA_Host compute + output buffer), where the log prints every part. Cases whose model has no
stock llama.cpp mix (Unsloth UD, ik_llama forks, unnamed files) or whose layout quant_mix does not
write are listed as not planned, with the reason. Model shapes are the public config.json values of the named models.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from vram_detective.engines.llamacpp.accuracy import (  # noqa: F401  (re-exported for the tests)
    LLAMA31_8B, NOT_COMPARED, NOT_PLANNED, PLANS, QWEN3_30B, _spec, compare, predict)

CASES = Path(__file__).resolve().parents[1] / "groundtruth" / "dev-llamacpp.jsonl"


def _cases() -> list[dict]:
    return [json.loads(line) for line in CASES.read_text().splitlines() if line.strip()]


def table() -> tuple[list[tuple], dict]:
    rows, errors = [], {}
    for case in _cases():
        if case["id"] not in PLANS:
            continue
        for kind, figure, got, want in compare(case):
            err = (got - want) / want if want else 0.0
            rows.append((case["id"][9:], figure, got, want, err))
            errors.setdefault(kind, []).append(abs(err))
    return rows, errors


def summary(errors: dict) -> dict:
    out = {}
    for kind, errs in errors.items():
        ordered = sorted(errs)
        p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
        out[kind] = (len(errs), statistics.median(errs), p90, sum(e == 0 for e in errs))
    return out


def main() -> None:
    rows, errors = table()
    print(f"{'case':52} {'figure':30} {'pred MiB':>10} {'log MiB':>10} {'err':>7}")
    for case, figure, got, want, err in rows:
        print(f"{case[:52]:52} {figure:30} {got:10.2f} {want:10.2f} {err:+7.2%}")
    print(f"\n{'kind':8} {'n':>3} {'median':>8} {'p90':>8} exact")
    for kind, (n, med, p90, exact) in summary(errors).items():
        print(f"{kind:8} {n:3d} {med:8.2%} {p90:8.2%} {exact}")
    for case_id, (kinds, why) in NOT_COMPARED.items():
        print(f"not compared: {case_id}: {', '.join(kinds)}: {why}")
    for case_id, why in NOT_PLANNED.items():
        print(f"not planned: {case_id}: {why}")


if __name__ == "__main__":
    main()
