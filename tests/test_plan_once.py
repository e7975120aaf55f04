"""One answer, few plans (issue 28): explain's answer is planned once; its "smallest footprint" line needs the
engine's own plan at other budget fractions (their rounding and refusals decide whether it starts), and
starts where the first plan's pool, shrunk byte for byte, holds one request, so it takes 2 more plans where
a plain bisection took 7."""
from __future__ import annotations

import contextlib
import io

import pytest

from vram_detective import api
from vram_detective.cli import main
from vram_detective.engines import get_engine
from vram_detective.intervals import starts_safely
from vram_detective.summary import smallest_footprint
from vram_detective.units import least_hundredth


def _search(threshold: int, guess):
    calls = []

    def ok(value):
        calls.append(value)
        return {"at": value} if round(value * 100) >= threshold else None

    return least_hundredth(ok, 0.01, 0.9, guess=guess), calls


@pytest.mark.parametrize("threshold", [1, 2, 17, 38, 50, 89, 90, 91])
def test_a_guess_never_changes_the_answer(threshold):
    plain, _ = _search(threshold, None)
    for guess in (None, -1.0, 0.0, 0.01, 0.05, 0.3749, 0.375, 0.38, 0.5, 0.89, 0.9, 0.95, 2.0):
        assert _search(threshold, guess)[0] == plain, guess
    if threshold <= 90:
        assert plain == (threshold / 100, {"at": threshold / 100})
    else:
        assert plain == (None, None)


def test_a_right_guess_takes_three_calls():
    (found, _), calls = _search(38, 0.3712)
    assert found == 0.38 and calls == [0.9, 0.38, 0.37]
    (found, _), calls = _search(38, 0.365)  # one hundredth low: the neighbour above settles it
    assert found == 0.38 and calls == [0.9, 0.37, 0.38]
    _, calls = _search(38, None)
    assert len(calls) == 8


class _Plans:
    """Counts every engine's plan() calls (the real plans run)."""

    def __init__(self, monkeypatch):
        self.count = 0
        for name in ("vllm", "sglang"):
            engine = get_engine(name)
            real = type(engine).plan

            def counted(this, *args, __real=real, **kwargs):
                self.count += 1
                return __real(this, *args, **kwargs)

            monkeypatch.setattr(type(engine), "plan", counted)


@pytest.mark.parametrize("words, smallest", [
    (["explain", "Qwen/Qwen2.5-7B-Instruct-AWQ", "--gpu", "RTX 4090", "--max-model-len", "32k"],
     "--gpu-memory-utilization 0.39"),  # 0.58 while a single 4090's KV error was the +-72.5 % of multi-GPU runs
    (["explain", "Qwen/Qwen3-8B", "--gpu", "A100-80G", "--engine", "sglang", "--context-length", "131072"],
     "--mem-fraction-static 0.44"),
])
def test_explain_plans_three_times(monkeypatch, words, smallest):
    plans = _Plans(monkeypatch)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(words + ["--wide"]) == 0
    assert "Smallest safe footprint for one" in out.getvalue() and smallest in out.getvalue()
    assert plans.count == 3  # the answer, the guessed fraction and the hundredth below it
    plans.count = 0
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(words + ["--json"]) == 0
    assert plans.count == 1  # no summary line in JSON: one plan


@pytest.mark.parametrize("model, gpu, settings", [
    ("Qwen/Qwen2.5-7B-Instruct-AWQ", "RTX 4090", {"max_model_len": 32768}),
    ("openai/gpt-oss-20b", "RTX 4090", {"max_model_len": 65536}),
    ("meta-llama/Llama-3.1-70B-Instruct", "H100", {"tensor_parallel_size": 4, "vllm_version": "0.8.5"}),
    ("Qwen/Qwen3-8B", "A100-80G", {"engine": "sglang", "context_length": 131072}),
])
def test_smallest_footprint_is_the_least_fraction_that_starts(model, gpu, settings):
    """The guided search finds what bisecting the real plans over every hundredth finds."""
    first = api.explain(model, gpu, **settings)
    name = "mem_fraction_static" if settings.get("engine") == "sglang" else "gpu_memory_utilization"

    def explain(setting, value):
        return api.explain(model, gpu, **dict(settings, **{setting: value}))

    def starts(value):
        try:
            trial = explain(name, value)
        except api.REFUSALS:
            return None
        return trial if starts_safely(trial) else None  # room beyond the pool's error, as fit counts it

    found = smallest_footprint(first, explain)
    current = next(setting.value for setting in first.settings if setting.name == name)
    value, best = least_hundredth(starts, 0.01, current)  # every plan, no guess
    if found is None:  # no safe fraction below the current one: none at all, or the current one is the least
        assert value is None or value >= current - 0.01
        return
    assert (found.value, found.nvidia_smi_used_mib) == (value, best.nvidia_smi_used_mib)
    assert starts(round(value - 0.01, 2)) is None
