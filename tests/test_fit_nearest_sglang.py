"""SGLang's `fit` says what comes nearest when nothing meets the target (as vLLM's does): the most requests at
the context, the longest context at the concurrency, more GPUs, each with its launch line (issue 27)."""
from __future__ import annotations

import shlex

from vram_detective import library
from vram_detective.advisor.answers import Target
from vram_detective.api import resolve_gpu
from vram_detective.engines import get_engine
from vram_detective.engines.sglang.advisor import fit_rows

MODEL, CEILING = "Qwen/Qwen3-8B", 20 * 2**30
TARGET = dict(context="32k", concurrency=4, max_gpu_memory="20GiB")


def _nearest() -> dict:
    result = library.fit(MODEL, "4090", engine="sglang", **TARGET)
    assert not result.ok and result.data["candidates"] == []
    return {entry["relaxed"]: entry for entry in result.data["nearest"]}


def test_the_longest_context_holds_the_requests_and_256_more_tokens_do_not():
    entry = _nearest()["context"]
    context = entry["settings"]["context_length"]
    assert context < 32768 and context % 256 == 0
    assert entry["kv_cache_tokens"] >= 4 * context and entry["nvidia_smi_used_mib"] * 2**20 <= CEILING
    assert entry["why"] == f"the longest context at 4 concurrent request(s) is {context:,} tokens"
    assert fit_rows(MODEL, resolve_gpu("4090", None), None, {}, {}, context=context + 256, concurrency=4,
                    ceiling=CEILING) == []


def test_more_gpus_meet_the_whole_target():
    entry = _nearest()["gpus"]
    assert entry["settings"]["tp_size"] == 2 and entry["settings"]["context_length"] == 32768
    assert entry["kv_cache_tokens"] >= 4 * 32768 and entry["nvidia_smi_used_mib"] * 2**20 <= CEILING


def test_each_alternative_comes_with_the_line_that_starts_it():
    engine = get_engine("sglang")
    for entry in _nearest().values():
        parsed = engine.launch.parse(shlex.split(entry["command"]))
        assert parsed.model == MODEL and parsed.settings == entry["settings"]


def test_fewer_requests_at_the_context_when_one_fits():
    result = library.fit(MODEL, "4090", engine="sglang", context="8k", concurrency=64)
    entry = {e["relaxed"]: e for e in result.data["nearest"]}["concurrency"]
    assert 1 <= entry["max_concurrency"] < 64
    assert entry["why"] == f"at most {entry['max_concurrency']:.2f} requests of 8,192 tokens fit"


def test_the_terminal_answer_lists_them_and_a_met_target_has_no_nearest():
    answer = library.fit(MODEL, "4090", engine="sglang", context="8k")
    assert answer.ok and "nearest" not in answer.data
    from vram_detective.advisor import answers

    text = answers.fit(MODEL, resolve_gpu("4090", None), get_engine("sglang"), None, {}, {},
                       Target(32768, "32k", 4.0, CEILING, "20GiB")).text(None, False)
    assert text.splitlines()[:2] == ["no SGLang configuration meets 4 x 32k tokens under 20GiB per GPU", "nearest:"]
    assert "- more GPUs: 2 GPUs meet the target" in text
