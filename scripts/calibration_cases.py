"""The ground-truth cases each calibration record was fitted on (scripts/calibration_cases.json), for the refit
scripts and the tests: the product's calibration modules say what a constant stands for and how it is fitted;
which dev cases it was fitted on is case data, kept here beside the scripts that refit it."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

PATH = Path(__file__).resolve().with_name("calibration_cases.json")


@lru_cache(maxsize=1)
def data() -> dict:
    return json.loads(PATH.read_text(encoding="utf-8"))


def fitted_on(engine: str, record) -> tuple[str, ...]:
    """The case ids `record` (a Fitted, or its name) of `engine` ("vllm", "sglang") was fitted on."""
    name = record if isinstance(record, str) else record.name
    return tuple(data()[engine][name])


def fit_cases(engine: str) -> frozenset[str]:
    return frozenset(case for cases in data()[engine].values() for case in cases)


def held_out(engine: str, case_ids) -> tuple[str, ...]:
    """The dev cases no record of `engine` was fitted on, in the given order."""
    fit = fit_cases(engine)
    return tuple(case for case in case_ids if case not in fit)


def case_assumptions() -> dict[str, tuple[dict, str]]:
    """What a vLLM fit case's notes state but its fields do not (applied by the refit only, never by the scorer)."""
    return {case: (entry["changes"], entry["basis"]) for case, entry in data()["vllm_case_assumptions"].items()}


def llamacpp_pairs(part: str) -> dict[str, tuple[tuple[float, float], ...]]:
    """CUDA_CONTEXT_BYTES's (nvidia-smi MiB, printed buffers MiB) pairs per case: part "fitted_on" / "held_out"."""
    return {case: tuple(tuple(pair) for pair in pairs)
            for case, pairs in data()["llamacpp"]["CUDA_CONTEXT_BYTES"][part].items()}
