"""The scorer's fidelity tables: start verdicts read from logs, confusion, absolute errors, the pipeline stage a
log line names, and llama.cpp's cases scored through the engine's shared comparison."""
from __future__ import annotations

from pathlib import Path

from vram_detective import fidelity
from vram_detective.engines.vllm.scoring import logged_stage
from vram_detective.scoring import load_cases, score_cases

ROOT = Path(__file__).resolve().parents[1]


def test_observed_verdict_reads_the_engine_refusal_and_graph_oom():
    refused = {"observed": {"startup_failed": True}, "log": "ValueError: To serve at least one request with the "
               "model's max seq len (180000), 3.05 GiB KV cache is needed, which is larger than ..."}
    graph = {"observed": {"startup_failed": True, "kv_cache_gib": 4.0},
             "log": "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 12%\ntorch.OutOfMemoryError: CUDA out of "
                    "memory. Tried to allocate 20.00 MiB"}
    unknown = {"observed": {"startup_failed": True, "kv_cache_gib": 1.71}, "log": "EngineCore failed to start."}
    negative = {"observed": {"startup_failed": True, "kv_cache_gib": -2.14}, "log": "EngineCore failed to start."}
    assert fidelity.observed_verdict(refused) == fidelity.REFUSED
    assert fidelity.observed_verdict(graph) == fidelity.OOM_AFTER_POOL
    assert fidelity.observed_verdict(unknown) == fidelity.FAILED_UNSHOWN
    assert fidelity.observed_verdict(negative) == fidelity.REFUSED
    assert fidelity.observed_verdict({"observed": {"startup_failed": False}}) == fidelity.STARTS
    assert fidelity.observed_verdict({"observed": {}}) is None


def test_confusion_counts_unshown_failures_as_agreeing_with_any_predicted_failure():
    entries = [{"verdict": {"observed": "starts", "predicted": "starts"}},
               {"verdict": {"observed": "refused", "predicted": "starts"}},
               {"verdict": {"observed": fidelity.FAILED_UNSHOWN, "predicted": "refused"}},
               {"verdict": {"observed": fidelity.FAILED_UNSHOWN, "predicted": "starts"}}]
    table = fidelity.verdict_agreement(entries)
    assert (table["n"], table["agree"]) == (4, 2)
    assert table["confusion"]["refused"] == {"starts": 1, "refused": 0, "oom after the pool": 0}
    assert table["confusion"][fidelity.FAILED_UNSHOWN]["refused"] == 1


def test_a_failure_after_a_pool_that_passed_the_check_is_shown_but_not_scored():
    cases = {case["id"]: case for case in load_cases(ROOT / "groundtruth" / "dev.jsonl")}
    # 0.8.4 V1 prints "Maximum concurrency ... 2430.14x" once check_enough_kv_cache_memory passed; then a segfault
    segfault = cases["vllm-17242-dsr1-tp16-2x8h20-v084"]
    assert fidelity.observed_verdict(segfault) == fidelity.AFTER_CHECK_UNSHOWN
    # 0.6.4 V0 prints 0.16x before raise_if_cache_size_invalid refuses: still a refusal
    assert fidelity.observed_verdict(cases["vllm-11230-qwen25-72b-gptq-v064post1-test21"]) == fidelity.REFUSED
    entries = [{"verdict": {"observed": "starts", "predicted": "starts"}},
               {"verdict": {"observed": fidelity.AFTER_CHECK_UNSHOWN, "predicted": "starts"}},
               {"verdict": {"observed": fidelity.AFTER_CHECK_UNSHOWN, "predicted": "refused"}}]
    table = fidelity.verdict_agreement(entries)
    assert (table["n"], table["agree"]) == (1, 1)
    assert table["confusion"][fidelity.AFTER_CHECK_UNSHOWN] == {"starts": 1, "refused": 1, "oom after the pool": 0}


def test_a_logged_budget_that_holds_a_request_passed_the_check():
    cases = [case for case in load_cases(ROOT / "groundtruth" / "dev.jsonl")
             if case["id"] in ("vllm-30919-gptoss120b-tp8-b200-fp8kv", "vllm-27508-gptoss120b-h100-095")]
    verdicts = {entry["id"]: entry["verdict"]["observed"] for entry in score_cases(cases)["vllm"]["per_case"]}
    # 140.97 GiB of fp8 KV for 2,058-token requests: the check passed, the later failure is not memory's
    assert verdicts["vllm-30919-gptoss120b-tp8-b200-fp8kv"] == fidelity.AFTER_CHECK_UNSHOWN
    # 1.71 GiB cannot hold one 131,072-token gpt-oss request: "EngineCore failed to start" is the refusal
    assert verdicts["vllm-27508-gptoss120b-h100-095"] == fidelity.FAILED_UNSHOWN


def test_absolute_errors_in_gib_and_gpu_class():
    assert fidelity.abs_error_gib("kv_cache_gib", 14.6, 14.0) == 14.6 - 14.0
    assert fidelity.abs_error_gib("nvidia_smi_used_mib", 2048, 1024) == 1.0
    assert fidelity.abs_error_gib("kv_cache_tokens", 10, 5) is None
    assert fidelity.gpu_class(24 * 2**30) == fidelity.CONSUMER and fidelity.gpu_class(80 * 2**30) == fidelity.DATA_CENTER
    assert fidelity.release_era("vllm", "0.6.4", "v0") == "V0-d"
    assert fidelity.release_era("vllm", "0.11.0", "v1") == "V1-c"


def test_the_stage_a_log_line_names():
    line = "(Worker_PP1 pid=12) INFO [gpu_model_runner.py:1] Model loading took 21.4118 GiB and 3 s"
    assert logged_stage(line, 21.4118, 8) == 1
    assert logged_stage("(VllmWorker rank=9 pid=3) INFO Model loading took 9.5 GiB", 9.5, 8) == 1
    assert logged_stage("INFO model_runner.py:1099] Loading model weights took 18.9152 GB", 18.9152, 16) == 0
    # a Ray worker names no rank: not scored (the closest stage would flatter)
    assert logged_stage("(RayWorkerWrapper pid=5, ip=1.2.3.4) INFO Loading model weights took 18.9152 GB",
                        18.9152, 16) is None


def test_dev_report_has_the_fidelity_sections():
    report = score_cases(load_cases(str(ROOT / "groundtruth" / "dev.jsonl")))["vllm"]
    assert "requested_memory_gib" not in report["figures"] and "requested_memory_gib" in report["consistency_checks"]
    assert {"V0-d", "V1-c"} <= set(report["by_era"]) and fidelity.CONSUMER in report["by_gpu_class"]
    assert report["figures"]["kv_cache_gib"]["median_abs_err_gib"] < 0.5
    refused = next(c for c in report["per_case"] if c["id"] == "file7884883735-llama32-3b-t4-unsloth-v08x")
    # the tool refuses (bf16 on a T4) where the log started: its figures count as misses
    assert refused["figures"]["kv_cache_gib"] == {"observed": 6.22, "predicted": None, "rel_err": 1.0,
                                                  "abs_err_gib": 6.22, "missed": "predicted a refusal"}
    staged = next(c for c in report["per_case"] if c["id"] == "vllm-12258-dsv3-tp16-pp2-32xl20-weights")
    assert staged["unscored"] == {"weights_gib": "pipeline stage not named by the log line"}


def test_llamacpp_cases_are_scored_through_the_engine_comparison():
    report = score_cases(load_cases(str(ROOT / "groundtruth" / "dev-llamacpp.jsonl")))["llamacpp"]
    assert report["scored"] == 14 and len(report["skipped"]) == 6
    assert report["figures"]["kv_buffer_mib"]["median_abs_rel_err"] == 0.0
    case = next(c for c in report["per_case"] if c["id"] == "llamacpp-ollama-llama31-8b-q4_0-t4-kaggle-8k-np4")
    assert case["gpu_class"] == fidelity.CONSUMER and case["era"] == "Ollama"
