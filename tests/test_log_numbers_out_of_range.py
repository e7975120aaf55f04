"""A figure no engine could print (400 digits, 1e999) in a real log is not read, and `logs` still answers: found by
benchmarks/fuzz.py (seed 31) and a sweep over the dev logs' numbers, each an exit 3 before."""
from __future__ import annotations

import pytest

from conftest import GROUNDTRUTH, read_jsonl
from vram_detective import library

HUGE = ("9" * 400, "1e999")


def _log(file: str, case_id: str) -> str:
    return next(case["log"] for case in read_jsonl(GROUNDTRUTH / file) if case["id"] == case_id)


@pytest.mark.parametrize("huge", HUGE, ids=["400-digits", "1e999"])
def test_a_llamacpp_buffer_past_any_size_is_not_read(huge):
    log = _log("dev-llamacpp.jsonl", "llamacpp-b5622-qwen3-30b-a3b-q4km-4090-5090-experts-cpu")
    printed = "CUDA1 model buffer size =   648.66"
    assert printed in log
    report = library.logs(log.replace(printed, "CUDA1 model buffer size =   " + huge, 1)).to_dict()
    assert "cuda1_model_buffer_mib" not in report["observed"]
    assert report["observed"]["cuda0_model_buffer_mib"] == 135.76  # the other figures as printed
    cells = library.logs(log.replace("16384 cells", huge + " cells", 1)).to_dict()
    assert "kv_cells" not in cells["observed"]


@pytest.mark.parametrize("huge", HUGE, ids=["400-digits", "1e999"])
def test_a_vllm_count_past_any_size_is_not_a_setting(huge):
    log = _log("dev-vllm-modern.jsonl", "vllm-llmdplanner-h100-mixtral-8x7b-instruct-v0-1-tp2-8192-v0190")
    printed = "'tensor_parallel_size': 2"
    assert printed in log
    report = library.logs(log.replace(printed, "'tensor_parallel_size': " + huge, 1)).to_dict()
    assert report["runs"][0]["settings"].get("tensor_parallel_size") != float("inf")
    assert all(not isinstance(value, float) or value == value and abs(value) < 1 << 40
               for value in report["runs"][0]["settings"].values())
