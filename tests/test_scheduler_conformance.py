"""The simulator step for step against vLLM's real V1 Scheduler (issue 26), without vLLM: the committed series
of the real scheduler (tests/fixtures/scheduler_conformance/vllm-RELEASE.json, written by
`benchmarks/scheduler_conformance.py RELEASE --save-fixtures`, which drove vLLM's own Scheduler and
KVCacheManager on a CPU) against the simulator's series on the same traces and pinned pools. Likewise SGLang
(sglang-RELEASE.json, written by `benchmarks/sglang_scheduler_conformance.py RELEASE --save-fixtures`, which drove
SGLang's own scheduler, PrefillAdder, ScheduleBatch and radix cache on a CPU): its rows have six fields."""
import json
from pathlib import Path

import pytest

from vram_detective.simulate.stepwise import first_divergence, step_rows

HERE = Path(__file__).parent / "fixtures" / "scheduler_conformance"
FIXTURES = sorted(HERE.glob("vllm-*.json"))
SGLANG_FIXTURES = sorted(HERE.glob("sglang-*.json"))


def _cases():
    for path in FIXTURES + SGLANG_FIXTURES:
        body = json.loads(path.read_text())
        engine = body.get("engine", "vllm")
        for case in body["cases"]:
            known = case.get("known_divergence")
            marks = [pytest.mark.xfail(strict=True, reason=f"observed: {known}")] if known else []
            yield pytest.param(engine, body["release"], case, id=f"{engine}-{body['release']}-{case['trace']['name']}",
                               marks=marks)


def _rows(steps: list[list]) -> list[list]:
    return [row for repeat, row in steps for _ in range(repeat)]


def test_fixtures_cover_every_kind_with_prefix_caching_on_and_off():
    assert FIXTURES, "no committed series of the real scheduler"
    for path in FIXTURES:
        cases = json.loads(path.read_text())["cases"]
        kinds = {(c["trace"]["kind"], c["trace"]["prefix_caching"]) for c in cases}
        assert kinds == {(k, on) for k in ("full", "sliding", "prefix", "tight", "chunked", "seqs")
                         for on in (True, False)}
        assert len(cases) >= 24
        assert sum(1 for c in cases if "known_divergence" in c) <= len(cases) // 4
        # the series are real runs, not empty: preemptions in tight pools, prefix hits with caching on
        assert any(row[3] for c in cases if c["trace"]["kind"] == "tight" for _, row in c["steps"])
        assert any(row[4] for c in cases if c["trace"]["prefix_caching"] for _, row in c["steps"])


@pytest.mark.parametrize("engine,release,case", list(_cases()))
def test_simulator_matches_the_real_scheduler_step_for_step(engine, release, case):
    real = _rows(case["steps"])
    simulated = step_rows(case["trace"], release, engine=engine)
    assert first_divergence(real, simulated) is None
    assert len(simulated) == len(real)


def test_sglang_fixtures_cover_every_kind_with_the_radix_cache_on_and_off():
    """SGLang's series: its own scheduler (page_size 1), five kinds (no sliding window: SGLang keeps a window in
    a pool of its own), the radix cache on and off; real runs: retractions in tight pools, prefix hits."""
    assert SGLANG_FIXTURES, "no committed series of SGLang's scheduler"
    for path in SGLANG_FIXTURES:
        body = json.loads(path.read_text())
        cases = body["cases"]
        assert body["engine"] == "sglang" and len(body["fields"]) == 6
        kinds = {(c["trace"]["kind"], c["trace"]["prefix_caching"]) for c in cases}
        assert kinds == {(k, on) for k in ("full", "prefix", "tight", "chunked", "seqs") for on in (True, False)}
        assert all(c["trace"]["block_size"] == 1 and c["trace"]["groups"] == [["full", None]] for c in cases)
        assert any(row[3] for c in cases if c["trace"]["kind"] == "tight" for _, row in c["steps"])
        assert any(row[4] for c in cases if c["trace"]["prefix_caching"] for _, row in c["steps"])
        assert not any(row[4] for c in cases if not c["trace"]["prefix_caching"] for _, row in c["steps"])


def test_a_changed_rule_is_caught():
    """The check can fail: with prefix hashes registered after the step (the simulator's rule before issue 26)
    the prefix-sharing traces are no longer the real scheduler's series."""
    from dataclasses import replace

    from vram_detective.simulate.rules import rules_for
    from vram_detective.simulate.stepwise import trace_pool

    body = json.loads(FIXTURES[0].read_text())
    cases = [c for c in body["cases"] if c["trace"]["kind"] == "prefix" and c["trace"]["prefix_caching"]]
    late = [first_divergence(_rows(c["steps"]), step_rows(c["trace"], body["release"], rules=replace(
        rules_for(trace_pool(c["trace"], body["release"])), hash_at_schedule=False))) for c in cases]
    assert any(late), late


@pytest.mark.parametrize("release,rule", [("0.33.0", "free_uncached_first"), ("0.33.0", "admission_caps_window"),
                                          ("0.11.0", "keeps_duplicates")])
def test_each_later_rule_is_needed(release, rule):
    """vLLM 0.28.0's free order (hashless blocks to the front), 0.21.0's admission cap of a sliding group and
    V1's cached duplicates (tight-16-cache of 0.11.0: a copy's hash outlives the first block): with the rule
    turned off, a committed series is no longer the real scheduler's."""
    from dataclasses import replace

    from vram_detective.simulate.rules import rules_for
    from vram_detective.simulate.stepwise import trace_pool

    path = next(p for p in FIXTURES if p.name == f"vllm-{release}.json")
    cases = json.loads(path.read_text())["cases"]
    off = [first_divergence(_rows(c["steps"]), step_rows(c["trace"], release, rules=replace(
        rules_for(trace_pool(c["trace"], release)), **{rule: False}))) for c in cases]
    assert any(off), rule


@pytest.mark.parametrize("rule,value", [("swaps_duplicates", False), ("caches_decodes", True),
                                        ("new_token_ratio", (0.7, 1.0, 600))])
def test_each_sglang_rule_is_needed(rule, value):
    """SGLang's radix insert frees a request's copy of a prefix the tree already holds; decoded tokens enter the
    tree only when the request finishes (tight-6-cache: its retracted request hits its prompt only); the reserve's
    new_token_ratio decays from 0.7 to 0.7 x 0.14 over 600 decode steps: with a rule changed (no decay), a committed
    series of SGLang's own scheduler is no longer the simulator's."""
    from dataclasses import replace

    from vram_detective.simulate.rules import rules_for
    from vram_detective.simulate.stepwise import trace_pool

    path = SGLANG_FIXTURES[-1]
    body = json.loads(path.read_text())
    off = [first_divergence(_rows(c["steps"]), step_rows(c["trace"], body["release"], engine="sglang", rules=replace(
        rules_for(trace_pool(c["trace"], body["release"], "sglang")), **{rule: value}))) for c in body["cases"]]
    assert any(off), rule
