"""llama.cpp / Ollama dev cases end to end through the engines: every printed figure vs the plan.

    PYTHONPATH=src python3 benchmarks/llamacpp_accuracy.py

Each case is planned from its own fields by engines/llamacpp/accuracy.py, as `vram-detective score` plans it.

Per case: model buffer per device, KV buffer per device (exact), compute buffer per device, VRAM per device
(llama.cpp's own buffers on that GPU: model + KV + compute, the figures a log prints) and host RAM (host model
buffer + CPU KV + CUDA_Host compute + output buffer), where the log prints every part. Cases whose model has no
stock llama.cpp mix (Unsloth UD, QAT) are compared without their model buffers; forks and cases whose build is
neither stated nor printed are listed as not planned, with the reason. Model shapes come from each case's
`model_config` (groundtruth/SCHEMA.md) or the model sources `explain` reads.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from vram_detective.engines.llamacpp import accuracy
from vram_detective.scoring import case_model

CASES = Path(__file__).resolve().parents[1] / "groundtruth" / "dev-llamacpp.jsonl"


def _cases() -> list[dict]:
    return [json.loads(line) for line in CASES.read_text().splitlines() if line.strip()]


def _planned() -> tuple[dict, dict]:
    """({case id: (plan, model)}, {case id: why not planned}): each case planned from its own fields, as `score`."""
    plans, skipped = {}, {}
    for case in _cases():
        plan = accuracy.plan_case(case)
        model = case_model(case) if not isinstance(plan, str) else plan
        if isinstance(model, str):
            skipped[case["id"]] = model
        else:
            plans[case["id"]] = (plan, model)
    return plans, skipped


PLANS, NOT_PLANNED = _planned()


def compare(case: dict) -> list[tuple[str, str, float, float]]:
    plan, model = PLANS[case["id"]]
    return accuracy.compare(case, model.spec, plan)


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
    for case_id, (plan, _) in PLANS.items():
        if plan.not_compared:
            print(f"not compared: {case_id}: {', '.join(plan.not_compared)}: {plan.not_compared_why}")
    for case_id, why in NOT_PLANNED.items():
        print(f"not planned: {case_id}: {why}")


if __name__ == "__main__":
    main()
